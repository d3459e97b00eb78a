//! A Flight SQL client of `adisk serve`, for the CLI (`adisk sql --connect`) and benchmarks.
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use tonic::transport::Channel;

/// A failure talking to the service.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL is not `grpc://host:port` (or `http://host:port`).
    #[error("`{0}`: expected grpc://HOST:PORT")]
    BadUrl(String),
    /// No connection.
    #[error("cannot reach {url}: {message}")]
    Unreachable {
        /// Where.
        url: String,
        /// Why.
        message: String,
    },
    /// The service refused the credentials.
    #[error("login refused by {url}: {message}")]
    Refused {
        /// Where.
        url: String,
        /// What the service said.
        message: String,
    },
    /// The query failed (the service's message).
    #[error("{0}")]
    Query(String),
}

fn q(e: impl ToString) -> ClientError {
    ClientError::Query(e.to_string())
}

/// A logged-in connection to the service.
pub struct Client {
    inner: FlightSqlServiceClient<Channel>,
}

impl Client {
    /// Connects to `url` (`grpc://host:port`) and logs in as `user`.
    ///
    /// # Errors
    /// A bad URL, an unreachable service, refused credentials.
    pub async fn connect(url: &str, user: &str, password: &str) -> Result<Self, ClientError> {
        let channel = channel(url).await?;
        let mut inner = FlightSqlServiceClient::new(channel);
        inner
            .handshake(user, password)
            .await
            .map_err(|e| ClientError::Refused {
                url: url.to_string(),
                message: e.to_string(),
            })?;
        Ok(Client { inner })
    }

    /// Runs `sql`; its schema and batches. A result served as several endpoints (one per
    /// disk) is read from all of them at once, each from its location.
    ///
    /// # Errors
    /// What the service (or a disk) answered.
    pub async fn query(&mut self, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), ClientError> {
        let info = self.inner.execute(sql.to_string(), None).await.map_err(q)?;
        let schema = std::sync::Arc::new(info.clone().try_decode_schema().map_err(q)?);
        let reads = info.endpoint.iter().map(|endpoint| {
            let mut here = self.inner.clone();
            async move {
                let ticket = endpoint
                    .ticket
                    .clone()
                    .ok_or_else(|| ClientError::Query("an endpoint without a ticket".into()))?;
                let stream = match endpoint.location.first() {
                    Some(location) => {
                        let mut disk = FlightSqlServiceClient::new(channel(&location.uri).await?);
                        disk.do_get(ticket).await.map_err(q)?
                    }
                    None => here.do_get(ticket).await.map_err(q)?,
                };
                stream.try_collect::<Vec<_>>().await.map_err(q)
            }
        });
        let parts = futures::future::try_join_all(reads).await?;
        Ok((schema, parts.into_iter().flatten().collect()))
    }
}

impl Client {
    /// The cluster's state as the service sees it ([`crate::status::report`]).
    ///
    /// # Errors
    /// What the service answered.
    pub async fn status(&mut self) -> Result<serde_json::Value, ClientError> {
        self.action_json(crate::status::ACTION, vec![]).await
    }

    /// Runs action `kind` with `body`; its first result, as JSON.
    async fn action_json<T: serde::de::DeserializeOwned>(
        &mut self,
        kind: &str,
        body: Vec<u8>,
    ) -> Result<T, ClientError> {
        let action = arrow_flight::Action::new(kind, body);
        let mut results = self.inner.do_action(action).await.map_err(q)?;
        let first = results
            .message()
            .await
            .map_err(q)?
            .ok_or_else(|| ClientError::Query(format!("no answer to {kind}")))?;
        serde_json::from_slice(&first.body).map_err(q)
    }

    /// Installs `module` as disklet `name` on every disk, through the service (the user needs
    /// the privilege): each disk's view of it.
    ///
    /// # Errors
    /// What the service answered (no privilege, a module a disk refuses).
    pub async fn install_disklet(
        &mut self,
        name: &str,
        module: Vec<u8>,
        scratch_kib: u64,
    ) -> Result<Vec<(u32, adisk_core::protocol::DiskletInfo)>, ClientError> {
        let body = serde_json::to_vec(&adisk_core::protocol::InstallDisklet {
            name: name.to_string(),
            scratch_kib,
            module: adisk_core::protocol::ExprBytes(module),
        })
        .map_err(q)?;
        self.action_json(crate::service::DISKLET_INSTALL, body)
            .await
    }
}

/// A channel to `url` (`grpc://host:port`, `grpc+tcp://…`, `http://…`).
async fn channel(url: &str) -> Result<Channel, ClientError> {
    let address = url
        .strip_prefix("grpc://")
        .or_else(|| url.strip_prefix("grpc+tcp://"))
        .or_else(|| url.strip_prefix("http://"))
        .filter(|a| a.contains(':'))
        .ok_or_else(|| ClientError::BadUrl(url.to_string()))?;
    Channel::from_shared(format!("http://{address}"))
        .map_err(|_| ClientError::BadUrl(url.to_string()))?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| ClientError::Unreachable {
            url: url.to_string(),
            message: e.to_string(),
        })
}
