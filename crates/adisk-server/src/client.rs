//! A Flight SQL client of `adisk serve`, for the CLI (`adisk sql --connect`) and benchmarks.
use adisk_core::tls::ClientTls;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use tonic::transport::Channel;

/// A failure talking to the service.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL is not `grpc://host:port`, `grpc+tls://host:port` (or `http`, `https`).
    #[error("`{0}`: expected grpc://HOST:PORT or grpc+tls://HOST:PORT")]
    BadUrl(String),
    /// A `grpc+tls://` URL without a CA to check the service's certificate against.
    #[error(
        "`{0}`: TLS needs the CA certificate that signed the service's certificate (--tls-ca FILE; `adisk up` keeps it in DIR/tls/ca.pem)"
    )]
    NoCa(String),
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

/// `e` and every error under it, joined by ": " (tonic's transport errors say only
/// "transport error" at the top; the TLS alert or the refused connection is further down).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        next = cause.source();
    }
    text
}

/// A hint when a connection failed the way a TLS mismatch fails.
fn tls_hint(url: &str, message: &str) -> &'static str {
    let tls = is_tls(url);
    let lower = message.to_ascii_lowercase();
    if !tls && !lower.contains("connection refused") && !lower.contains("timed out") {
        " (if the service serves TLS, use grpc+tls:// with --tls-ca)"
    } else if tls && (lower.contains("corrupt message") || lower.contains("invalidcontenttype")) {
        " (the service does not seem to serve TLS: try grpc://)"
    } else if tls && lower.contains("certificaterequired") {
        " (the service wants a client certificate: --tls-cert and --tls-key)"
    } else if tls
        && [
            "broken pipe",
            "connection reset",
            "connection closed",
            "canceled",
        ]
        .iter()
        .any(|t| lower.contains(t))
    {
        " (the service closed the connection: it may want a client certificate, --tls-cert and --tls-key, or refuse the one shown)"
    } else if tls && lower.contains("unknownissuer") {
        " (the service's certificate is not signed by the CA given with --tls-ca)"
    } else {
        ""
    }
}

/// A connection to `url` that failed with `message` (a TLS mismatch named).
fn unreachable(url: &str, message: String) -> ClientError {
    let hint = tls_hint(url, &message);
    ClientError::Unreachable {
        url: url.to_string(),
        message: format!("{message}{hint}"),
    }
}

/// A logged-in connection to the service.
pub struct Client {
    inner: FlightSqlServiceClient<Channel>,
    tls: ClientTls,
    /// The handle of the last statement [`Client::query`] ran through the service.
    last_statement: Option<Vec<u8>>,
}

impl Client {
    /// Connects to `url` (`grpc://host:port`, or `grpc+tls://host:port` with `tls`'s CA) and
    /// logs in as `user`.
    ///
    /// # Errors
    /// A bad URL, an unreachable service (a TLS mismatch named), refused credentials.
    pub async fn connect(
        url: &str,
        user: &str,
        password: &str,
        tls: &ClientTls,
    ) -> Result<Self, ClientError> {
        let channel = channel(url, tls).await?;
        let mut inner = FlightSqlServiceClient::new(channel);
        if let Err(e) = inner.handshake(user, password).await {
            let message = chain(&e);
            // A connection that failed (a TLS handshake the service refused, mutual TLS, or a
            // TLS mismatch) surfaces on the first call, not at connect.
            let lower = message.to_ascii_lowercase();
            let transport = [
                "transport error",
                "alert",
                "h2 protocol",
                "connection",
                "broken pipe",
            ]
            .iter()
            .any(|t| lower.contains(t));
            return Err(if transport {
                unreachable(url, message)
            } else {
                ClientError::Refused {
                    url: url.to_string(),
                    message,
                }
            });
        }
        Ok(Client {
            inner,
            tls: tls.clone(),
            last_statement: None,
        })
    }

    /// Runs `sql`; its schema and batches. A result served as several endpoints (one per
    /// disk) is read from all of them at once, each from its location.
    ///
    /// # Errors
    /// What the service (or a disk) answered.
    pub async fn query(&mut self, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), ClientError> {
        let info = self.inner.execute(sql.to_string(), None).await.map_err(q)?;
        let schema = std::sync::Arc::new(info.clone().try_decode_schema().map_err(q)?);
        self.last_statement = crate::service::statement_handle(&info);
        let reads = info.endpoint.iter().map(|endpoint| {
            let mut here = self.inner.clone();
            let tls = self.tls.clone();
            async move {
                let ticket = endpoint
                    .ticket
                    .clone()
                    .ok_or_else(|| ClientError::Query("an endpoint without a ticket".into()))?;
                let stream = match endpoint.location.first() {
                    Some(location) => {
                        let channel = channel(&location.uri, &tls).await?;
                        let mut disk = FlightSqlServiceClient::new(channel);
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

    /// The queries whose traces the service keeps for this user ([`crate::traces`]).
    ///
    /// # Errors
    /// What the service answered.
    pub async fn traces(&mut self) -> Result<Vec<crate::traces::TraceEntry>, ClientError> {
        self.action_json(crate::traces::LIST_ACTION, vec![]).await
    }

    /// The trace `req` names (by the query's id, or its statement's handle).
    ///
    /// # Errors
    /// What the service answered (a query not kept, another user's).
    pub async fn trace(
        &mut self,
        req: &crate::traces::TraceRequest,
    ) -> Result<adisk_core::trace::Trace, ClientError> {
        let body = serde_json::to_vec(req).map_err(q)?;
        self.action_json(crate::traces::GET_ACTION, body).await
    }

    /// The trace of the last statement [`Client::query`] ran, when its result came through
    /// the service (a result read from the disks' own endpoints leaves none).
    ///
    /// # Errors
    /// No statement run yet, or one read from the disks; what the service answered.
    pub async fn last_trace(&mut self) -> Result<adisk_core::trace::Trace, ClientError> {
        let Some(handle) = &self.last_statement else {
            return Err(ClientError::Query(
                "no trace: the last result was read from the disks' endpoints, not through the service (or nothing ran yet)".into(),
            ));
        };
        let req = crate::traces::TraceRequest {
            id: None,
            handle: Some(hex::encode(handle)),
        };
        self.trace(&req).await
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

/// The URL of the service a `[serve]` section describes, and the TLS its clients need.
///
/// # Errors
/// The section's CA file missing or not PEM.
pub fn served(
    serve: &adisk_core::config::ServeSection,
) -> Result<(String, ClientTls), adisk_core::tls::TlsError> {
    let tls = match &serve.tls_ca {
        Some(ca) => ClientTls::load(Some(ca), None)?,
        None => ClientTls::default(),
    };
    Ok((served_url(serve), tls))
}

/// The URL of the service a `[serve]` section describes.
pub fn served_url(serve: &adisk_core::config::ServeSection) -> String {
    let scheme = if serve.tls_ca.is_some() {
        "grpc+tls"
    } else {
        "grpc"
    };
    format!("{scheme}://{}", serve.address)
}

/// Whether `url` asks for TLS (`grpc+tls://`, `https://`).
pub fn is_tls(url: &str) -> bool {
    url.starts_with("grpc+tls://") || url.starts_with("https://")
}

/// A channel to `url`: plaintext (`grpc://host:port`, `grpc+tcp://…`, `http://…`) or TLS
/// (`grpc+tls://…`, `https://…`, the server checked against `tls`'s CA and the URL's host).
async fn channel(url: &str, tls: &ClientTls) -> Result<Channel, ClientError> {
    let plain = url
        .strip_prefix("grpc://")
        .or_else(|| url.strip_prefix("grpc+tcp://"))
        .or_else(|| url.strip_prefix("http://"));
    let secure = url
        .strip_prefix("grpc+tls://")
        .or_else(|| url.strip_prefix("https://"));
    let (scheme, address) = match (plain, secure) {
        (Some(a), _) => ("http", a),
        (None, Some(a)) => ("https", a),
        (None, None) => return Err(ClientError::BadUrl(url.to_string())),
    };
    if !address.contains(':') {
        return Err(ClientError::BadUrl(url.to_string()));
    }
    let mut endpoint = Channel::from_shared(format!("{scheme}://{address}"))
        .map_err(|_| ClientError::BadUrl(url.to_string()))?
        .tcp_nodelay(true)
        .connect_timeout(std::time::Duration::from_secs(10));
    if scheme == "https" {
        if !tls.has_ca() {
            return Err(ClientError::NoCa(url.to_string()));
        }
        endpoint = endpoint
            .tls_config(tls.config())
            .map_err(|e| ClientError::Unreachable {
                url: url.to_string(),
                message: chain(&e),
            })?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| unreachable(url, chain(&e)))
}
