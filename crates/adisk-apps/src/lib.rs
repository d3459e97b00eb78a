//! The papers' applications as disklet programs on the cluster (`adisk app NAME`): each is a
//! set of native disklets, registered with DiskOS through [`Disklets`], plus its host side,
//! which makes its disk jobs with `adisk_core::builder::JobBuilder`, runs them through
//! `adisk_host::jobs` and reports what it moved ([`report::Report`]). `conventional` mode
//! reads the raw input at the host and computes there (every paper's baseline); `active` runs
//! the papers' active-disk algorithm.
#![deny(missing_docs)]

pub mod cluster;
pub mod conv;
pub mod datacube;
pub mod disklet_util;
pub mod dmine;
pub mod earth;
pub mod fft;
pub mod join;
pub mod report;
pub mod rng;
pub mod sort;

use adisk_diskos::apps::{AppDisklets, AppStage};
use adisk_diskos::disklet::Disklet;

/// Where an application runs its algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// The active-disk algorithm: the disks compute, disk to disk.
    #[default]
    Active,
    /// The host reads the raw input and computes.
    Conventional,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Active => "active",
            Mode::Conventional => "conventional",
        })
    }
}

impl std::str::FromStr for Mode {
    type Err = AppError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "active" => Ok(Mode::Active),
            "conventional" => Ok(Mode::Conventional),
            other => Err(AppError::Invalid(format!(
                "unknown mode `{other}` (active or conventional)"
            ))),
        }
    }
}

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

/// The parameters a load records with its table, for the commands that read it later
/// (`adisk app earth` needs the grid the records were generated for, `adisk app fft` the
/// seed its check regenerates the matrix from).
///
/// They are the table's Arrow schema metadata, `adisk.<app>.<name>` = a decimal integer:
/// every disk's manifest keeps the schema the load wrote, and the catalog hands it to the
/// host. A table loaded before parameters were recorded has none; its commands then take the
/// flags as given.
pub mod loaded {
    use crate::{AppError, Result};
    use adisk_host::Cluster;
    use arrow::datatypes::{Schema, SchemaRef};
    use std::sync::Arc;

    fn key(app: &str, name: &str) -> String {
        format!("adisk.{app}.{name}")
    }

    /// `schema` with `values` recorded for `app`.
    pub fn record(schema: &Schema, app: &str, values: &[(&str, u64)]) -> SchemaRef {
        let mut metadata = schema.metadata().clone();
        for (name, value) in values {
            metadata.insert(key(app, name), value.to_string());
        }
        Arc::new(schema.clone().with_metadata(metadata))
    }

    /// The value `app`'s load recorded for `name` in `schema` (None: not recorded).
    ///
    /// # Errors
    /// A recorded value that is not a decimal integer.
    pub fn value(schema: &Schema, app: &str, name: &str) -> Result<Option<u64>> {
        let key = key(app, name);
        schema
            .metadata()
            .get(&key)
            .map(|v| {
                v.parse().map_err(|_| {
                    AppError::Invalid(format!(
                        "the table's recorded `{key}` is `{v}`, not an integer"
                    ))
                })
            })
            .transpose()
    }

    /// The schema of `table` as the catalog holds it (None: no such table).
    ///
    /// # Errors
    /// The catalog cannot be read.
    pub async fn schema(cluster: &Cluster, table: &str) -> Result<Option<SchemaRef>> {
        let catalog = cluster.catalog().await?;
        Ok(catalog.tables.get(table).map(|e| e.schema.clone()))
    }

    /// `given` if it agrees with `recorded`, `recorded` if nothing was given, `default` if
    /// neither.
    ///
    /// # Errors
    /// [`AppError::LoadedMismatch`] naming `flag`, both values and `table`.
    pub fn resolve<T: PartialEq + std::fmt::Display + Copy>(
        flag: &str,
        table: &str,
        given: Option<T>,
        recorded: Option<T>,
        default: T,
    ) -> Result<T> {
        match (given, recorded) {
            (Some(g), Some(r)) if g != r => Err(AppError::LoadedMismatch {
                flag: flag.into(),
                given: g.to_string(),
                recorded: r.to_string(),
                table: table.into(),
            }),
            (Some(v), _) | (None, Some(v)) => Ok(v),
            (None, None) => Ok(default),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use arrow::datatypes::{DataType, Field};

        #[test]
        fn recorded_values_read_back_and_flags_are_checked_against_them() {
            let plain = Schema::new(vec![Field::new("x", DataType::UInt32, false)]);
            let schema = record(&plain, "earth", &[("width", 256), ("height", 128)]);
            assert_eq!(schema.fields(), plain.fields());
            assert_eq!(value(&schema, "earth", "width").unwrap(), Some(256));
            assert_eq!(value(&schema, "fft", "width").unwrap(), None);
            assert_eq!(value(&plain, "earth", "width").unwrap(), None);
            assert_eq!(resolve("--width", "t", None, Some(256), 1024).unwrap(), 256);
            assert_eq!(
                resolve("--width", "t", Some(256), Some(256), 1024).unwrap(),
                256
            );
            assert_eq!(resolve("--width", "t", Some(300), None, 1024).unwrap(), 300);
            assert_eq!(
                resolve::<u32>("--width", "t", None, None, 1024).unwrap(),
                1024
            );
            let err = resolve("--width", "earth", Some(300), Some(256), 1024)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("--width 300")
                    && err.contains("--width 256")
                    && err.contains("`earth`"),
                "{err}"
            );
        }
    }
}

/// The applications' native disklets, registered with each disk's DiskOS.
pub struct Disklets;

impl AppDisklets for Disklets {
    fn build(&self, stage: AppStage<'_>) -> adisk_diskos::Result<Box<dyn Disklet>> {
        match stage.app {
            "sort" => sort::disklets::build(&stage),
            "fft" => fft::disklets::build(&stage),
            "dmine" => dmine::disklets::build(&stage),
            "join" => join::disklets::build(&stage),
            "conv" => conv::disklets::build(&stage),
            "earth" => earth::build(&stage),
            "cluster" => cluster::build(&stage),
            "datacube" => datacube::disklets::build(&stage),
            other => Err(disklet_util::invalid(format!(
                "this disk has no application `{other}`"
            ))),
        }
    }
}
