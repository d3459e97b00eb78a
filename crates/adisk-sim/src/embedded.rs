//! Built-in copies of the experiment files, so `adisk sim reproduce` works from any directory.
//! Kept in sync with `experiments/` by a test.

/// (path under experiments/, text).
pub const EXPERIMENTS: &[(&str, &str)] = &[];
