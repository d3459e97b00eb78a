//! The ActiveDisk disk node: one data directory, one DiskOS, one Arrow Flight server.
//!
//! ```text
//!  host ──DoGet(JobSpec)─────────► run job ──► result batches ──► host
//!  host ──DoExchange(JobSpec+rows)► run job on host-resident input ──► results ──► host
//!  disk ──DoPut(Exchange)────────► exchange inbox ──► receiving job (pipe stream)
//!  host ──DoPut(Load)────────────► write partition (tmp + rename) ──► manifest
//!  host ──DoAction(status | catalog | job_stats | generate_tpch | drop_table | shutdown)
//!  host ──DoAction(disklet_install | disklet_list | disklet_remove | generate_images | list_files)
//! ```
//! [`serve`] runs the server until a `shutdown` action, or the future passed to it, completes.
#![warn(missing_docs)]

mod service;
mod user_actions;

pub use service::{DiskService, FlightPipeConnector, status_of};

use adisk_diskos::{DiskOs, DiskOsConfig};
use adisk_storage::store::DiskStore;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Errors starting a disk node.
#[derive(Debug, thiserror::Error)]
pub enum DiskNodeError {
    /// The listen address is taken or invalid.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// Address.
        address: String,
        /// Cause (e.g. address in use).
        source: std::io::Error,
    },
    /// The user disklet registry cannot be opened.
    #[error("cannot open the disklet registry in {dir}: {source}")]
    Disklets {
        /// Directory.
        dir: PathBuf,
        /// Cause.
        source: adisk_wasm::WasmError,
    },
    /// The data directory cannot be opened.
    #[error("cannot open data directory {dir}: {source}")]
    Store {
        /// Directory.
        dir: PathBuf,
        /// Cause.
        source: adisk_storage::StorageError,
    },
    /// The gRPC server failed.
    #[error("flight server failed: {0}")]
    Serve(String),
}

/// Everything a disk node needs to start.
#[derive(Clone, Debug)]
pub struct DiskNodeConfig {
    /// Data directory.
    pub dir: PathBuf,
    /// `host:port` to listen on (port 0: any free port).
    pub listen: String,
    /// DiskOS limits.
    pub os: DiskOsConfig,
}

/// A bound, not yet serving, disk node.
pub struct DiskNode {
    listener: TcpListener,
    service: DiskService,
    address: SocketAddr,
}

impl DiskNode {
    /// Opens the store and binds the listener.
    pub async fn bind(config: DiskNodeConfig) -> Result<Self, DiskNodeError> {
        let store = DiskStore::open(&config.dir, config.os.disk_id).map_err(|source| DiskNodeError::Store { dir: config.dir.clone(), source })?;
        let listener = TcpListener::bind(&config.listen).await.map_err(|source| DiskNodeError::Listen { address: config.listen.clone(), source })?;
        let address = listener.local_addr().map_err(|source| DiskNodeError::Listen { address: config.listen.clone(), source })?;
        let runtime = adisk_wasm::WasmRuntime::new(adisk_wasm::WasmLimits::new(config.os.buffer_bytes)).map_err(|source| DiskNodeError::Disklets { dir: config.dir.clone(), source })?;
        let registry = adisk_wasm::DiskletRegistry::open(&config.dir, runtime).map_err(|source| DiskNodeError::Disklets { dir: config.dir.clone(), source })?;
        let os = DiskOs::new(config.os, Arc::new(store), Arc::new(FlightPipeConnector::default()));
        Ok(DiskNode { listener, service: DiskService::with_disklets(os, Arc::new(registry)), address })
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serves until a `shutdown` action or `stop` completes.
    pub async fn serve(self, stop: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), DiskNodeError> {
        let shutdown = self.service.shutdown_signal();
        // Small control messages must not wait for delayed ACKs (Nagle): set TCP_NODELAY.
        let incoming = tokio_stream::StreamExt::map(tokio_stream::wrappers::TcpListenerStream::new(self.listener), |s| {
            s.inspect(|stream| {
                let _ = stream.set_nodelay(true);
            })
        });
        let signal = async move {
            tokio::select! {
                () = stop => {},
                () = shutdown.notified() => {},
            }
        };
        tonic::transport::Server::builder()
            .add_service(
                arrow_flight::flight_service_server::FlightServiceServer::new(self.service)
                    .max_decoding_message_size(64 * 1024 * 1024)
                    .max_encoding_message_size(64 * 1024 * 1024),
            )
            .serve_with_incoming_shutdown(incoming, signal)
            .await
            .map_err(|e| DiskNodeError::Serve(e.to_string()))
    }
}
