//! The 22 TPC-H queries (standard texts, default substitution parameters) and the official
//! answers that DuckDB's `tpch` extension ships.
use crate::{HostError, Result};
use std::collections::BTreeMap;

const QUERIES: [&str; 22] = [
    include_str!("tpch/q01.sql"),
    include_str!("tpch/q02.sql"),
    include_str!("tpch/q03.sql"),
    include_str!("tpch/q04.sql"),
    include_str!("tpch/q05.sql"),
    include_str!("tpch/q06.sql"),
    include_str!("tpch/q07.sql"),
    include_str!("tpch/q08.sql"),
    include_str!("tpch/q09.sql"),
    include_str!("tpch/q10.sql"),
    include_str!("tpch/q11.sql"),
    include_str!("tpch/q12.sql"),
    include_str!("tpch/q13.sql"),
    include_str!("tpch/q14.sql"),
    include_str!("tpch/q15.sql"),
    include_str!("tpch/q16.sql"),
    include_str!("tpch/q17.sql"),
    include_str!("tpch/q18.sql"),
    include_str!("tpch/q19.sql"),
    include_str!("tpch/q20.sql"),
    include_str!("tpch/q21.sql"),
    include_str!("tpch/q22.sql"),
];

/// The text of TPC-H query `n` (1–22).
pub fn query(n: u32) -> Result<&'static str> {
    QUERIES
        .get((n as usize).wrapping_sub(1))
        .copied()
        .ok_or_else(|| HostError::Invalid(format!("TPC-H has queries 1 to 22, not {n}")))
}

const ANSWERS_PY: &str = include_str!("tpch_answers.py");

/// Whether DuckDB's `tpch` extension has official answers for scale factor `sf`.
pub fn has_official_answers(sf: f64) -> bool {
    [0.01, 0.1, 1.0].iter().any(|s| (s - sf).abs() < 1e-9)
}

/// The official answers for scale factor `sf` (0.01, 0.1 or 1), by query number, fetched from
/// DuckDB's `tpch` extension with `python3` (or `$ADISK_PYTHON`).
pub fn official_answers(sf: f64) -> Result<BTreeMap<u32, String>> {
    let python = std::env::var("ADISK_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(ANSWERS_PY)
        .arg(sf.to_string())
        .output()
        .map_err(|source| HostError::Io {
            context: format!("running {python} for the TPC-H answers"),
            source,
        })?;
    if !out.status.success() {
        return Err(HostError::Invalid(format!(
            "TPC-H oracle: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let map: BTreeMap<String, String> = serde_json::from_slice(&out.stdout)
        .map_err(|e| HostError::Invalid(format!("TPC-H oracle printed malformed JSON: {e}")))?;
    Ok(map
        .into_iter()
        .filter_map(|(k, v)| k.parse().ok().map(|k| (k, v)))
        .collect())
}

/// Columns whose values come from the generator's random text (addresses, comments):
/// `tpchgen` and DuckDB's `dbgen` draw them differently, so they are compared with DuckDB on
/// the same files, not with the official answers.
pub fn generator_text_column(name: &str) -> bool {
    name.ends_with("_address") || name.ends_with("_comment")
}

/// Queries whose official answers depend on generator text (Q13 counts orders by the words
/// in `o_comment`); they are checked against DuckDB on the same files only.
pub const TEXT_DEPENDENT_QUERIES: [u32; 1] = [13];

/// Rows of `orders` at scale factor `sf` (to tell which scale factor a cluster holds).
pub fn orders_rows(sf: f64) -> u64 {
    (1_500_000.0 * sf).round() as u64
}
