//! `adisk bench scan`.
use crate::CliError;
use std::path::Path;

pub async fn scan(_dir: &Path, _sf: f64, _disks: &[u32], _repeats: usize, _python: &str) -> Result<(), CliError> {
    Err(CliError::Other("bench scan is not built yet".into()))
}
