//! The ActiveDisk disk node: one data directory, one DiskOS, one Arrow Flight server.
//!
//! ```text
//!  host ──DoGet(JobSpec)─────────► run job ──► result batches ──► host
//!  host ──DoExchange(JobSpec+rows)► run job on host-resident input ──► results ──► host
//!  disk ──DoPut(Exchange)────────► exchange inbox ──► receiving job (pipe stream)
//!  host ──DoPut(Load)────────────► write partition (tmp + rename) ──► manifest
//!  host ──DoAction(status | catalog | job_stats | generate_tpch | drop_table | shutdown)
//!  host ──DoAction(disklet_install | disklet_list | disklet_remove | generate_images | list_files)
//!  host ──DoAction(scrub | repair) ─► disk ──DoAction(catalog | partition_read)─► peer disks
//!  host ──DoAction(peer_probe) ─────► disk ──DoAction(link_probe)─► a peer disk
//! ```
//! A disk started with its cluster's members repairs itself from its peers when it starts
//! (see [`repair`]).
//! [`serve`] runs the server until a `shutdown` action, or the future passed to it, completes.
#![warn(missing_docs)]

mod peer_probe;
mod pipes;
mod pool;
mod repair;
mod service;
mod status;
mod user_actions;

pub use pipes::FlightPipeConnector;
pub use service::DiskService;
pub use status::{NotAMember, status_of};

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
    /// Another process serves the data directory.
    #[error(
        "data directory {dir} is already served by another disk process ({holder}); stop it first (`adisk down`)"
    )]
    DirectoryInUse {
        /// Directory.
        dir: PathBuf,
        /// Who holds it, as its lock file says.
        holder: String,
    },
    /// The directory's lock file cannot be created or locked.
    #[error("cannot lock data directory {dir}: {source}")]
    Lock {
        /// Directory.
        dir: PathBuf,
        /// Cause.
        source: std::io::Error,
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
    /// The cluster's secret: every request must carry a token made with it, and this disk's
    /// own requests (exchange streams) carry one. None: requests are not checked (`adisk disk
    /// --insecure`, in-process tests).
    pub auth: Option<Arc<adisk_core::auth::Verifier>>,
    /// The cluster's `cluster.toml`: exchange streams go only to disks it names, and repairs
    /// fetch copies from them. None: any target the job names; no repair.
    pub members: Option<PathBuf>,
    /// Repair from the peers when the node starts (needs `members`).
    pub auto_repair: bool,
    /// Codec of the Parquet pages this disk writes.
    pub compression: adisk_core::config::Compression,
    /// TLS of its server and of its own requests to peers and relays (None: plaintext).
    pub tls: Option<adisk_core::tls::TlsMaterial>,
}

impl DiskNodeConfig {
    /// A disk on `dir` listening on any free loopback port, without the cluster's key, members
    /// or repair on start: an in-process disk for tests and tools.
    pub fn local(dir: impl Into<PathBuf>, os: DiskOsConfig) -> Self {
        DiskNodeConfig {
            dir: dir.into(),
            listen: "127.0.0.1:0".into(),
            os,
            auth: None,
            members: None,
            auto_repair: false,
            compression: Default::default(),
            tls: None,
        }
    }
}

/// A bound, not yet serving, disk node.
pub struct DiskNode {
    listener: TcpListener,
    service: DiskService,
    address: SocketAddr,
    auth: Option<Arc<adisk_core::auth::Verifier>>,
    tls: Option<adisk_core::tls::TlsMaterial>,
    auto_repair: bool,
    /// The data directory's lock, held while the node lives (one process per directory).
    _lock: std::fs::File,
}

/// The check every request passes before the service sees it: a fresh token made with the
/// cluster's secret ([`adisk_core::auth`]), or nothing to check without one.
///
/// The one exception is a client reading one part of a result from this disk (`DoGet`, and the
/// `Handshake` some drivers make first): such a request passes without a cluster token, marked
/// [`NotAMember`], and the service then runs nothing but a job sealed by the host in an
/// endpoint ticket ([`adisk_core::endpoint`]). The method is known from [`mark_client_calls`],
/// a layer in front of this interceptor (an interceptor sees headers only).
#[allow(clippy::result_large_err)]
pub fn authenticator(
    auth: Option<Arc<adisk_core::auth::Verifier>>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |mut request: tonic::Request<()>| {
        if let Some(verifier) = &auth {
            let header = request
                .metadata()
                .get(adisk_core::auth::HEADER)
                .and_then(|v| v.to_str().ok());
            if let Err(e) = verifier.verify(header) {
                if request.extensions().get::<ClientCall>().is_none() {
                    return Err(tonic::Status::unauthenticated(e.to_string()));
                }
                request.extensions_mut().insert(NotAMember(e.to_string()));
            }
        }
        Ok(request)
    }
}

/// Marks a request as one a client outside the cluster may make ([`authenticator`]).
#[derive(Clone, Copy, Debug)]
pub struct ClientCall;

/// Marks `DoGet` and `Handshake` calls with [`ClientCall`].
pub fn mark_client_calls<B>(mut request: http::Request<B>) -> http::Request<B> {
    const CLIENT_CALLS: [&str; 2] = [
        "/arrow.flight.protocol.FlightService/DoGet",
        "/arrow.flight.protocol.FlightService/Handshake",
    ];
    if CLIENT_CALLS.contains(&request.uri().path()) {
        request.extensions_mut().insert(ClientCall);
    }
    request
}

/// Name of the lock file in a disk's data directory (it records the holder's pid).
pub const LOCK_FILE: &str = "disk.lock";

/// Takes the exclusive lock of data directory `dir` (created if missing), recording this
/// process's pid in it; the lock ends with the process, however it ends.
///
/// # Errors
/// [`DiskNodeError::DirectoryInUse`] when another process holds it.
pub fn lock_dir(dir: &std::path::Path) -> Result<std::fs::File, DiskNodeError> {
    use std::io::{Read, Seek, Write};
    let err = |source| DiskNodeError::Lock {
        dir: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(LOCK_FILE))
        .map_err(err)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "pid unknown".to_string(),
                pid => format!("pid {pid}"),
            };
            return Err(DiskNodeError::DirectoryInUse {
                dir: dir.to_path_buf(),
                holder,
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(err(e)),
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| write!(file, "{}", std::process::id()))
        .and_then(|()| file.flush())
        .map_err(err)?;
    Ok(file)
}

impl DiskNode {
    /// Opens the store and binds the listener.
    pub async fn bind(config: DiskNodeConfig) -> Result<Self, DiskNodeError> {
        let lock = lock_dir(&config.dir)?;
        let store = DiskStore::open(&config.dir, config.os.disk_id)
            .map_err(|source| DiskNodeError::Store {
                dir: config.dir.clone(),
                source,
            })?
            .with_compression(config.compression);
        let listener =
            TcpListener::bind(&config.listen)
                .await
                .map_err(|source| DiskNodeError::Listen {
                    address: config.listen.clone(),
                    source,
                })?;
        let address = listener
            .local_addr()
            .map_err(|source| DiskNodeError::Listen {
                address: config.listen.clone(),
                source,
            })?;
        let runtime =
            adisk_wasm::WasmRuntime::new(adisk_wasm::WasmLimits::new(config.os.buffer_bytes))
                .map_err(|source| DiskNodeError::Disklets {
                    dir: config.dir.clone(),
                    source,
                })?;
        let registry =
            adisk_wasm::DiskletRegistry::open(&config.dir, runtime).map_err(|source| {
                DiskNodeError::Disklets {
                    dir: config.dir.clone(),
                    source,
                }
            })?;
        let connector = Arc::new(FlightPipeConnector {
            auth: config.auth.clone(),
            members: config.members.clone(),
            tls: config.tls.clone(),
            pool: Default::default(),
            roster: Default::default(),
        });
        let os = DiskOs::new(config.os, Arc::new(store), connector.clone());
        let service = DiskService::with_disklets(os, Arc::new(registry))
            .with_peers(connector)
            .with_auth(config.auth.clone());
        let auto_repair = config.auto_repair && config.members.is_some();
        Ok(DiskNode {
            listener,
            service,
            address,
            auth: config.auth,
            tls: config.tls,
            auto_repair,
            _lock: lock,
        })
    }

    /// The node's DiskOS (to register applications' disklets before serving).
    pub fn diskos(&self) -> &Arc<DiskOs> {
        self.service.os()
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serves until a `shutdown` action or `stop` completes.
    pub async fn serve(
        self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), DiskNodeError> {
        let shutdown = self.service.shutdown_signal();
        // Small control messages must not wait for delayed ACKs (Nagle): TCP_NODELAY; and
        // pings must not wait behind a slow link's data: TCP_NOTSENT_LOWAT (adisk_core::net).
        let incoming = tokio_stream::StreamExt::map(
            tokio_stream::wrappers::TcpListenerStream::new(self.listener),
            |s| {
                s.inspect(|stream| {
                    let _ = adisk_core::net::tune(stream);
                })
            },
        );
        let signal = async move {
            tokio::select! {
                () = stop => {},
                () = shutdown.notified() => {},
            }
        };
        if let (true, Some(peers)) = (self.auto_repair, self.service.peers().cloned()) {
            tokio::spawn(repair::repair_on_start(self.service.os().clone(), peers));
        }
        let server = arrow_flight::flight_service_server::FlightServiceServer::new(self.service)
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024);
        let deadlines = adisk_core::config::Deadlines::default();
        let mut builder = adisk_core::net::server_windows(tonic::transport::Server::builder());
        if let Some(t) = &self.tls {
            builder = builder
                .tls_config(t.server())
                .map_err(|e| DiskNodeError::Serve(format!("TLS: {e}")))?;
        }
        builder
            .http2_keepalive_interval(Some(deadlines.ping_interval()))
            .http2_keepalive_timeout(Some(deadlines.ping_timeout()))
            .layer(tower::util::MapRequestLayer::new(mark_client_calls))
            .add_service(tonic::service::interceptor::InterceptedService::new(
                server,
                authenticator(self.auth),
            ))
            .serve_with_incoming_shutdown(incoming, signal)
            .await
            .map_err(|e| DiskNodeError::Serve(e.to_string()))
    }
}
