//! The errors of DiskOS; each maps to one Flight status code at the disk server.

use adisk_storage::StorageError;

/// Errors of DiskOS. Each maps to one Flight status code at the disk server.
#[derive(Debug, thiserror::Error)]
pub enum DiskOsError {
    /// Storage layer error (unknown table, corrupt partition, I/O).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The job specification is malformed or inconsistent.
    #[error("invalid job: {0}")]
    InvalidJob(String),
    /// A job asks for more memory than the whole budget.
    #[error(
        "job needs {requested_bytes} bytes of memory but the disk's budget is {budget_bytes} bytes"
    )]
    GrantTooLarge {
        /// Bytes asked for.
        requested_bytes: u64,
        /// The disk's budget.
        budget_bytes: u64,
    },
    /// Too many jobs already wait for memory.
    #[error("admission queue full: {waiting} jobs already wait for memory")]
    AdmissionQueueFull {
        /// Jobs waiting.
        waiting: u32,
    },
    /// Too many steps already wait for a compute slot.
    #[error("compute queue full: {waiting} steps already wait for a compute slot")]
    ComputeQueueFull {
        /// Steps waiting.
        waiting: u32,
    },
    /// The grant did not come in time.
    #[error(
        "no memory grant within {waited_ms} ms ({requested_bytes} bytes requested, {granted_bytes} of {budget_bytes} in use)"
    )]
    AdmissionTimeout {
        /// How long the job waited.
        waited_ms: u64,
        /// Bytes asked for.
        requested_bytes: u64,
        /// Bytes granted to others.
        granted_bytes: u64,
        /// Budget.
        budget_bytes: u64,
    },
    /// A disklet would need more scratch than it was granted (final-mode group-by, sort).
    #[error(
        "disklet `{disklet}` needs more scratch than granted ({granted_bytes} bytes): {detail}"
    )]
    ScratchExceeded {
        /// Disklet.
        disklet: &'static str,
        /// Scratch granted.
        granted_bytes: u64,
        /// What overflowed.
        detail: String,
    },
    /// A stream buffer, or a stage's output, would be larger than its grant allows.
    #[error("{what} of {bytes} bytes exceeds its cap of {cap_bytes} bytes")]
    BufferExceeded {
        /// What was too large (a row, one call's output, a pipe message).
        what: String,
        /// Its size.
        bytes: u64,
        /// The cap.
        cap_bytes: u64,
    },
    /// DataFusion planning or evaluation error.
    #[error("{context}: {source}")]
    DataFusion {
        /// What was being done.
        context: String,
        /// Underlying error.
        source: datafusion::error::DataFusionError,
    },
    /// A shipped expression or plan fragment is deeper or wider than a declared limit
    /// ([`adisk_core::limits`]).
    #[error(transparent)]
    Limit(#[from] adisk_core::limits::LimitExceeded),
    /// Arrow / Parquet decode error.
    #[error("{context}: {message}")]
    Decode {
        /// What was being done.
        context: String,
        /// Error text.
        message: String,
    },
    /// A job wrote more temporary data (spill files, temporary streams) than it was granted.
    #[error(
        "temporary space exceeded: the job was granted {granted_bytes} bytes of temporary disk space ({detail})"
    )]
    TempSpaceExceeded {
        /// Bytes granted.
        granted_bytes: u64,
        /// What was being written.
        detail: String,
    },
    /// A pipe stream failed (sender died, exchange timed out).
    #[error("pipe stream: {0}")]
    Pipe(String),
    /// A pipe stream's link failed: its peer disk became unreachable, or the stream was cut
    /// off without its end (Unavailable: the host reruns the query).
    #[error("{link}: {0}", link = adisk_core::protocol::LINK_FAILED)]
    Link(String),
    /// The job was cancelled (the host went away).
    #[error("job cancelled")]
    Cancelled,
    /// A disklet kept asking to be called for more output without emitting any (a bug in
    /// the disklet): its job is failed so that it cannot hold the disk.
    #[error(
        "disklet `{disklet}` asked for more output {calls} times in a row without emitting any: job stopped (a bug in the disklet)"
    )]
    NoProgress {
        /// The disklet.
        disklet: String,
        /// Calls without output.
        calls: u32,
    },
    /// A user disklet was refused or failed (see [`UserDiskletFailure`]).
    #[error("{message}")]
    UserDisklet {
        /// What kind of failure.
        kind: UserDiskletFailure,
        /// Description, naming the disklet.
        message: String,
    },
}

/// Result alias.
pub type Result<T, E = DiskOsError> = std::result::Result<T, E>;

pub(crate) fn df_err(
    context: impl Into<String>,
) -> impl FnOnce(datafusion::error::DataFusionError) -> DiskOsError {
    let context = context.into();
    move |source| DiskOsError::DataFusion { context, source }
}

/// Why a user disklet was refused or failed; each maps to one Flight status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserDiskletFailure {
    /// No disklet of that name is installed.
    NotInstalled,
    /// The module or the job is invalid (malformed module, forbidden import, bad input type).
    Invalid,
    /// The CPU budget (fuel) of the job ran out.
    BudgetExceeded,
    /// Memory grant, output limit or module size exceeded.
    ResourceExceeded,
    /// The disklet trapped (out-of-bounds access, unreachable, …).
    Trap,
    /// The disklet returned an error code, or the registry failed.
    Failed,
}
