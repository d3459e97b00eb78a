//! The ActiveDisk host: knows the cluster and the catalog, plans SQL text and `adisk run`
//! parameters through one planner, makes every disk job — theirs, WebAssembly disklet runs,
//! the applications', the benchmarks' — with the one job builder
//! ([`adisk_core::builder::JobBuilder`]), runs them on every disk holding a table, merges result
//! streams as they arrive, and collects per-disk statistics. It depends on no disk crate: what
//! it shares with the disks (the job graph, the grant formula, byte counts) is in `adisk-core`.
//!
//! ```text
//!   SQL text ─────────────┐
//!   adisk run (params) ───┤─► sql (DataFusion plan + offload rules) ─┐
//!   wasm disklet runs ────┼──────────────────────────────────────────┤─► JobBuilder (JobSpec
//!   applications ─────────┘                                          │   per disk, checked)
//!                                                                    ▼  DoGet (Flight)
//!   combine (DataFusion operators at the host; merged streams) ◄── result batches
//!        │                                                      ◄── job_stats (action)
//!        ▼
//!   QueryOutput / JobOutput { batches, JobStats }
//! ```
//!
//! * [`cluster`]: connections, catalog, status, shutdown, running job specs.
//! * [`jobs`]: running jobs (one per disk, merged result streams), expressions encoded for the
//!   disks, aggregation stages planned by DataFusion.
//! * [`sql`]: SQL over the disks (DataFusion + offload rules), EXPLAIN, TPC-H.
//! * [`run`]: `adisk run DISKLET`: parameters → a DataFusion plan for [`sql`].
//! * [`disklet`]: WebAssembly disklet jobs; [`exchange`]: the exchange benchmark's jobs.
//! * [`load`]: TPC-H generation at the disks; Parquet/CSV loads with declustering.
//! * [`throttle`]: the host link's token bucket (`host_link_mbps`).
#![warn(missing_docs)]

pub mod client;
pub mod disklet;
pub mod exchange;
pub mod run;
pub mod sql;

pub use client::{cluster, jobs, links, load, relay, throttle};

pub use client::cluster::{Catalog, Cluster, TableEntry};
pub use client::jobs::JobOutput;
pub use run::JobRequest;

/// Errors seen by the host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A disk could not be reached.
    #[error("disk {disk} at {address} is unreachable: {message}")]
    Unreachable {
        /// Disk number.
        disk: u32,
        /// Address.
        address: String,
        /// Transport message.
        message: String,
    },
    /// A disk refused or failed a request.
    #[error("disk {disk}: {message}")]
    Disk {
        /// Disk number.
        disk: u32,
        /// gRPC status code name.
        code: String,
        /// Message from the disk.
        message: String,
    },
    /// Unknown table.
    #[error("unknown table `{0}` (see `adisk status` for the tables)")]
    UnknownTable(String),
    /// A table whose disks do not all hold the same load of it (a load interrupted during its
    /// commit, or a disk that lost its part): it is never queried as partial.
    #[error("table `{table}` is incomplete: {reason} (disks {disks:?}); load it again")]
    IncompleteTable {
        /// Table.
        table: String,
        /// The disks that do not hold the load the others hold.
        disks: Vec<u32>,
        /// Which loads are where.
        reason: String,
    },
    /// Partitions of a table with no live copy: every disk holding one is dead.
    #[error("table `{table}` lost partitions {partitions:?}: no live copy ({copies}); unreachable: {}", disks_text(.dead))]
    LostPartitions {
        /// Table.
        table: String,
        /// The partitions with no live copy (empty for a table written without a copy list:
        /// then all its partitions on the dead disks).
        partitions: Vec<u32>,
        /// The disks taken as dead.
        dead: Vec<u32>,
        /// Where each lost partition's copies were, e.g. `1 on disks [1, 2]`.
        copies: String,
    },
    /// More replicas asked for than the cluster has disks.
    #[error(
        "--replicas {replicas}: the cluster has only {disks} disks (at most one copy of a partition per disk)"
    )]
    TooManyReplicas {
        /// Copies asked for.
        replicas: u32,
        /// Disks of the cluster.
        disks: u32,
    },
    /// Bad request (unknown disklet, parameter, malformed expression, unknown column, type error).
    #[error("{0}")]
    Invalid(String),
    /// DataFusion planning error (syntax, unknown column, types).
    #[error("{context}: {source}")]
    Plan {
        /// What was being planned.
        context: String,
        /// Cause.
        source: datafusion::error::DataFusionError,
    },
    /// SQL text, or an expression in it, past a declared limit ([`adisk_core::limits`]).
    #[error(transparent)]
    Limit(#[from] adisk_core::limits::LimitExceeded),
    /// A result larger than the host may hold for one query ([`sql::SqlOptions::result_cap_bytes`]).
    #[error(
        "the result passed {cap} bytes, the most one query may hold at the host; add a LIMIT, select fewer columns, or read it from the disks' endpoints"
    )]
    ResultTooLarge {
        /// The cap, bytes.
        cap: u64,
    },
    /// Config error.
    #[error(transparent)]
    Config(#[from] adisk_core::config::ConfigError),
    /// The cluster's key cannot be read.
    #[error(transparent)]
    Auth(#[from] adisk_core::auth::AuthError),
    /// Storage error at the host (reading input files).
    #[error(transparent)]
    Storage(#[from] adisk_storage::StorageError),
    /// A job whose graph is malformed ([`adisk_core::graph::check`]): a planner's mistake,
    /// caught before the job leaves the host.
    #[error("malformed job: {0}")]
    Job(#[from] adisk_core::graph::GraphError),
    /// I/O error reading input.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        source: std::io::Error,
    },
}

impl HostError {
    /// A copy of this error where its kind says what happened (a disk unreachable or failing,
    /// a table incomplete or with lost partitions); any other kind as [`HostError::Invalid`]
    /// with its text. For errors that travel as someone else's (through DataFusion, or from
    /// another job of a query).
    pub fn retyped(&self) -> HostError {
        match self {
            HostError::Unreachable {
                disk,
                address,
                message,
            } => HostError::Unreachable {
                disk: *disk,
                address: address.clone(),
                message: message.clone(),
            },
            HostError::Disk {
                disk,
                code,
                message,
            } => HostError::Disk {
                disk: *disk,
                code: code.clone(),
                message: message.clone(),
            },
            HostError::IncompleteTable {
                table,
                disks,
                reason,
            } => HostError::IncompleteTable {
                table: table.clone(),
                disks: disks.clone(),
                reason: reason.clone(),
            },
            HostError::LostPartitions {
                table,
                partitions,
                dead,
                copies,
            } => HostError::LostPartitions {
                table: table.clone(),
                partitions: partitions.clone(),
                dead: dead.clone(),
                copies: copies.clone(),
            },
            other => HostError::Invalid(other.to_string()),
        }
    }

    /// True if the error says a disk is down.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, HostError::Unreachable { .. })
            || matches!(self, HostError::Disk { code, .. } if code == "Unavailable")
    }
}

/// `disk 2` or `disks 1, 2`.
fn disks_text(disks: &[u32]) -> String {
    let list = disks
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if disks.len() == 1 {
        format!("disk {list}")
    } else {
        format!("disks {list}")
    }
}

/// Result alias.
pub type Result<T, E = HostError> = std::result::Result<T, E>;
