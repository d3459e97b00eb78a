//! ActiveDisk storage: how a disk keeps its data.
//!
//! ```text
//!   DIR/
//!     manifest.json                      tables → partitions {file, rows, bytes, crc32,
//!                                        checksums}, load stamps; a CRC-32 of the tables
//!     tables/<table>/g-<load>/part-<p>.parquet   a loaded partition: Parquet (pages in the disk's codec), row-group
//!                                        and page statistics + page index (zone maps)
//!     tables/<table>/part-<p>.parquet    a job's named result (and tables of earlier versions)
//!     staging/<load>/<table>/…           partitions of a load not yet committed (invisible)
//!     files/…                            plain files (images, byte-range streams)
//! ```
//!
//! Writes go to `*.tmp` and are renamed into place only when complete, and the manifest is
//! replaced the same way after the partition file is in place. Loads are staged and become
//! the live table in one manifest replacement ([`staging`]), so a killed load leaves the
//! previous table. Every byte a scan decodes is verified against the manifest's CRC-32s in the
//! same read ([`integrity`]); the whole file is also checked the first time a process opens it.
//!
//! * [`store`]: the [`store::DiskStore`] (manifest, partition files, checksums).
//! * [`staging`]: staged loads (stage, commit, abort).
//! * [`replica`]: copies of partitions received from other disks (`adisk repair`, `adisk scrub`).
//! * [`integrity`]: per-chunk and footer checksums verified on every read.
//! * [`writer`]: writing a partition from record batches.
//! * [`reader`]: a byte-counting Parquet chunk reader (bytes read from storage are measured,
//!   not estimated).
//! * [`tpch`]: TPC-H generation with `tpchgen-arrow`, part `k` of `n`.
//! * [`decluster`]: the declustering rules (`range`, `hash:COL`, `roundrobin`).
#![warn(missing_docs)]

pub mod decluster;
pub mod images;
pub mod integrity;
pub mod reader;
pub mod replica;
pub mod staged;
pub mod staging;
pub mod store;
pub mod tpch;
pub mod writer;

use std::path::PathBuf;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// File system error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (includes the path).
        context: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// Parquet encode/decode error.
    #[error("{context}: {source}")]
    Parquet {
        /// What was being done.
        context: String,
        /// Underlying error.
        source: parquet::errors::ParquetError,
    },
    /// Arrow error.
    #[error("{context}: {source}")]
    Arrow {
        /// What was being done.
        context: String,
        /// Underlying error.
        source: arrow::error::ArrowError,
    },
    /// A partition file does not match its manifest entry.
    #[error("corrupt partition {path}: {reason}")]
    Corrupt {
        /// File.
        path: PathBuf,
        /// What does not match.
        reason: String,
    },
    /// The manifest cannot be parsed.
    #[error("corrupt manifest {path}: {reason}")]
    BadManifest {
        /// File.
        path: PathBuf,
        /// Parser message.
        reason: String,
    },
    /// No such table on this disk.
    #[error("unknown table `{0}`")]
    UnknownTable(String),
    /// No such column.
    #[error("table `{table}` has no column `{column}` (columns: {available})")]
    UnknownColumn {
        /// Table.
        table: String,
        /// Requested column.
        column: String,
        /// Comma-separated list of existing columns.
        available: String,
    },
    /// A new partition's schema differs from the table's.
    #[error("schema mismatch for table `{table}`: {reason}")]
    SchemaMismatch {
        /// Table.
        table: String,
        /// Difference.
        reason: String,
    },
    /// Invalid argument (table name, sf, declustering rule, …).
    #[error("{0}")]
    Invalid(String),
}

/// Result alias.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StorageError {
    let context = context.into();
    move |source| StorageError::Io { context, source }
}
