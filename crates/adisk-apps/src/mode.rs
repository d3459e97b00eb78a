//! Where an application runs its algorithm: at the disks or at the host.

use crate::error::{AppError, Result};

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
