//! The papers' applications as disklet programs on the cluster (`adisk app NAME`): each is a
//! set of native disklets, registered with DiskOS through [`Disklets`], plus its host side,
//! which plans its disk jobs through `adisk_host::jobs` and reports what it moved
//! ([`report::Report`]). `conventional` mode reads the raw input at the host and computes
//! there (every paper's baseline); `active` runs the papers' active-disk algorithm.
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
    /// The host or a disk failed.
    #[error(transparent)]
    Host(#[from] adisk_host::HostError),
}

/// Result of an application.
pub type Result<T, E = AppError> = std::result::Result<T, E>;

/// The applications `adisk app` runs.
pub const APPS: &[&str] = &[
    "sort", "join", "conv", "earth", "cluster", "datacube", "dmine", "fft",
];

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
