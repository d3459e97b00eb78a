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
pub mod error;
pub mod fft;
pub mod join;
pub mod loaded;
pub mod mode;
pub mod registry;
pub mod report;
pub mod rng;
pub mod sort;

pub use error::{APPS, AppError, Result};
pub use mode::Mode;
pub use registry::Disklets;
