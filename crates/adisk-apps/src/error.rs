//! Why an application run failed, and the applications `adisk app` knows.

/// Why an application run failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Bad parameters.
    #[error("{0}")]
    Invalid(String),
    /// No such application.
    #[error("unknown application `{0}` (known: {known})", known = APPS.join(", "))]
    UnknownApp(String),
    /// The input table is missing.
    #[error("input table `{table}` is missing: {hint}")]
    InputMissing {
        /// The table.
        table: String,
        /// How to make it.
        hint: String,
    },
    /// A flag disagrees with what the input table was loaded with ([`loaded`]).
    #[error(
        "{flag} {given} disagrees with table `{table}`, loaded with {flag} {recorded}: leave the flag out or load the table again"
    )]
    LoadedMismatch {
        /// The flag, e.g. `--width`.
        flag: String,
        /// Its value on this command.
        given: String,
        /// The value the load recorded.
        recorded: String,
        /// The input table.
        table: String,
    },
    /// The host or a disk failed.
    #[error(transparent)]
    Host(#[from] adisk_host::HostError),
}

impl From<adisk_core::graph::GraphError> for AppError {
    /// A job whose graph the builder refused: a planning bug, reported as the host's.
    fn from(error: adisk_core::graph::GraphError) -> Self {
        AppError::Host(adisk_host::HostError::Job(error))
    }
}

/// Result of an application.
pub type Result<T, E = AppError> = std::result::Result<T, E>;

/// The applications `adisk app` runs.
pub const APPS: &[&str] = &[
    "sort", "join", "conv", "earth", "cluster", "datacube", "dmine", "fft",
];
