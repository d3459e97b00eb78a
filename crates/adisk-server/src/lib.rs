//! ActiveDisk's host as a long-running service: Arrow Flight SQL for any ADBC, JDBC or Flight
//! SQL client, with client authentication (basic auth exchanged for bearer tokens, users and
//! argon2 password hashes in a file) and admission control (a bounded number of running
//! queries and a bounded queue, then a clear `busy` error).
//!
//! `adisk serve` runs it over the cluster in `--dir`; see `docs/serve.md`.
pub mod auth;
pub mod client;
pub mod metrics;
pub mod service;
pub mod status;
pub mod traces;

pub use service::{Access, Admission, Endpoints, SqlService};

use arrow_flight::flight_service_server::FlightServiceServer;

/// Largest Flight message the server decodes (parameters, commands), bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Serves `service` on `listener` until `shutdown` completes, over TLS when `tls` is given.
///
/// # Errors
/// The transport failing; TLS material it cannot use.
pub async fn serve(
    service: SqlService,
    listener: tokio::net::TcpListener,
    tls: Option<&adisk_core::tls::ServiceTls>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    // Small replies (FlightInfo, handshakes) must not wait for delayed ACKs: TCP_NODELAY; and
    // little unsent data in the kernel (adisk_core::net).
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        |s| {
            s.inspect(|stream| {
                let _ = adisk_core::net::tune(stream);
            })
        },
    );
    let mut builder = tonic::transport::Server::builder();
    if let Some(t) = tls {
        builder = builder.tls_config(t.server())?;
    }
    builder
        .add_service(FlightServiceServer::new(service).max_decoding_message_size(MAX_MESSAGE_BYTES))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
