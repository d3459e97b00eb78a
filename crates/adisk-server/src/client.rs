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
        let address = url
            .strip_prefix("grpc://")
            .or_else(|| url.strip_prefix("grpc+tcp://"))
            .or_else(|| url.strip_prefix("http://"))
            .filter(|a| a.contains(':'))
            .ok_or_else(|| ClientError::BadUrl(url.to_string()))?;
        let channel = Channel::from_shared(format!("http://{address}"))
            .map_err(|_| ClientError::BadUrl(url.to_string()))?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| ClientError::Unreachable {
                url: url.to_string(),
                message: e.to_string(),
            })?;
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

    /// Runs `sql`; its schema and batches.
    ///
    /// # Errors
    /// What the service answered.
    pub async fn query(&mut self, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), ClientError> {
        let info = self.inner.execute(sql.to_string(), None).await.map_err(q)?;
        let schema = std::sync::Arc::new(info.clone().try_decode_schema().map_err(q)?);
        let mut batches = Vec::new();
        for endpoint in &info.endpoint {
            let ticket = endpoint
                .ticket
                .clone()
                .ok_or_else(|| ClientError::Query("an endpoint without a ticket".into()))?;
            let stream = self.inner.do_get(ticket).await.map_err(q)?;
            batches.extend(
                stream
                    .try_collect::<Vec<_>>()
                    .await
                    .map_err(|e| ClientError::Query(e.to_string()))?,
            );
        }
        Ok((schema, batches))
    }
}
