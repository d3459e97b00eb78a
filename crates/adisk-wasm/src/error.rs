//! Typed errors of user disklets: install-time rejections and run-time failures.

/// Why a module was refused at install, or why a user disklet job failed.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// The name is empty, too long, or has characters other than `[A-Za-z0-9_-]`.
    #[error("bad disklet name `{0}`: use 1-64 characters of A-Z a-z 0-9 _ -")]
    BadName(String),
    /// The module is larger than the install limit.
    #[error("module is {size_bytes} bytes, more than the {limit_bytes}-byte limit")]
    ModuleTooLarge {
        /// Size of the module.
        size_bytes: u64,
        /// Limit.
        limit_bytes: u64,
    },
    /// Not a valid WebAssembly module (parse, validation or compilation failed).
    #[error("malformed module: {0}")]
    Malformed(String),
    /// An import outside the ActiveDisk ABI (WASI, `env`, other modules, unknown functions).
    #[error(
        "forbidden import `{module}::{name}`: only the functions of `{allowed}` may be imported"
    )]
    ForbiddenImport {
        /// Module of the import.
        module: String,
        /// Name of the import.
        name: String,
        /// The import module of the module's ABI version (`adisk_v1`, `adisk_v2`).
        allowed: &'static str,
    },
    /// An ABI import or export with the wrong signature, or a required export is missing.
    #[error("ABI violation: {0}")]
    Abi(String),
    /// The module's memory has no declared maximum, or it exceeds the grant.
    #[error("memory: {0}")]
    Memory(String),
    /// No disklet of this name is installed on the disk.
    #[error("no user disklet `{0}` is installed on this disk (see `adisk disklet list`)")]
    NotInstalled(String),
    /// The disklet used more fuel (CPU) than the job's budget.
    #[error("disklet `{name}`: CPU budget exceeded ({fuel} fuel units) during {phase}")]
    BudgetExceeded {
        /// Disklet.
        name: String,
        /// The job's fuel budget.
        fuel: u64,
        /// init, process or finish.
        phase: &'static str,
    },
    /// The disklet tried to grow its memory past its grant.
    #[error(
        "disklet `{name}`: memory grant exceeded (wanted {desired_bytes} bytes, grant {grant_bytes})"
    )]
    MemoryExceeded {
        /// Disklet.
        name: String,
        /// Bytes the guest asked for.
        desired_bytes: u64,
        /// The grant.
        grant_bytes: u64,
    },
    /// The disklet emitted more than allowed (per call or per job).
    #[error("disklet `{name}`: output limit exceeded: {detail}")]
    OutputExceeded {
        /// Disklet.
        name: String,
        /// Which limit.
        detail: String,
    },
    /// The disklet trapped (out-of-bounds access, unreachable, division by zero, stack overflow…).
    #[error("disklet `{name}` trapped during {phase}: {message}")]
    Trap {
        /// Disklet.
        name: String,
        /// init, process or finish.
        phase: &'static str,
        /// Trap description.
        message: String,
    },
    /// The disklet returned an error code, or handed the host a malformed buffer.
    #[error("disklet `{name}` failed during {phase}: {message}")]
    Guest {
        /// Disklet.
        name: String,
        /// init, process or finish.
        phase: &'static str,
        /// Error code and what it means.
        message: String,
    },
    /// The job's input cannot be given to a user disklet (unsupported column type, bad parameter).
    #[error("invalid user disklet job: {0}")]
    InvalidJob(String),
    /// Reading or writing the registry on the disk.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The registry index is damaged or a stored module does not match its hash.
    #[error("disklet registry: {0}")]
    Registry(String),
    /// The disklet's job was cancelled while its code ran (its host went away); the guest was
    /// stopped at its next interrupt check.
    #[error("disklet `{name}`: stopped during {phase}: its job was cancelled")]
    Cancelled {
        /// Disklet.
        name: String,
        /// init, process or finish.
        phase: &'static str,
    },
}

/// Result alias.
pub type Result<T, E = WasmError> = std::result::Result<T, E>;

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> WasmError {
    let context = context.into();
    move |source| WasmError::Io { context, source }
}
