//! The 22 TPC-H queries (standard texts, default substitution parameters) and the check of
//! results against the official answers that DuckDB's `tpch` extension ships.
use super::QueryOutput;
use crate::cluster::{Catalog, Cluster};
use crate::{HostError, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
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
    QUERIES.get((n as usize).wrapping_sub(1)).copied().ok_or_else(|| HostError::Invalid(format!("TPC-H has queries 1 to 22, not {n}")))
}

const ANSWERS_PY: &str = include_str!("tpch_answers.py");

/// The official answers for scale factor `sf` (0.01, 0.1 or 1), by query number, fetched from
/// DuckDB's `tpch` extension with `python3` (or `$ADISK_PYTHON`).
pub fn official_answers(sf: f64) -> Result<BTreeMap<u32, String>> {
    let python = std::env::var("ADISK_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(ANSWERS_PY)
        .arg(sf.to_string())
        .output()
        .map_err(|source| HostError::Io { context: format!("running {python} for the TPC-H answers"), source })?;
    if !out.status.success() {
        return Err(HostError::Invalid(format!("TPC-H oracle: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    let map: BTreeMap<String, String> = serde_json::from_slice(&out.stdout).map_err(|e| HostError::Invalid(format!("TPC-H oracle printed malformed JSON: {e}")))?;
    Ok(map.into_iter().filter_map(|(k, v)| k.parse().ok().map(|k| (k, v))).collect())
}

/// Cells of a result, as text, with a flag per column saying whether it is numeric with a
/// fractional part (compared with a tolerance).
fn cells(batches: &[RecordBatch]) -> Result<(Vec<Vec<String>>, Vec<bool>)> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    let mut tolerant = Vec::new();
    for b in batches {
        tolerant = b.schema().fields().iter().map(|f| matches!(f.data_type(), DataType::Decimal128(..) | DataType::Decimal256(..) | DataType::Float32 | DataType::Float64)).collect();
        let fmts = b.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &opts)).collect::<std::result::Result<Vec<_>, _>>().map_err(|e| HostError::Invalid(e.to_string()))?;
        for r in 0..b.num_rows() {
            rows.push(fmts.iter().map(|f| f.value(r).to_string()).collect());
        }
    }
    Ok((rows, tolerant))
}

/// Whether two decimal cells agree: relative 1e-6 or absolute 0.01 (the answers round to
/// two or four places; averages carry more digits in one engine than in the other).
fn close(a: &str, b: &str) -> bool {
    match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
        (Ok(x), Ok(y)) => (x - y).abs() <= 0.01_f64.max(1e-6 * x.abs().max(y.abs())),
        _ => a.trim() == b.trim(),
    }
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

/// Compares a result with an answer (`|`-separated, header first, NULL as empty). Columns
/// for which `skip(name)` holds are not compared. `Ok(())` or the first difference.
pub fn compare(result: &QueryOutput, answer: &str, skip: impl Fn(&str) -> bool) -> std::result::Result<(), String> {
    let (rows, tolerant) = cells(&result.batches).map_err(|e| e.to_string())?;
    let mut lines = answer.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split('|').collect();
    let expected: Vec<Vec<&str>> = lines.map(|l| l.split('|').collect()).collect();
    if result.schema.fields().len() != header.len() {
        return Err(format!("{} columns, the answer has {}", result.schema.fields().len(), header.len()));
    }
    if rows.len() != expected.len() {
        return Err(format!("{} rows, the answer has {}", rows.len(), expected.len()));
    }
    for (i, (got, want)) in rows.iter().zip(&expected).enumerate() {
        if got.len() != want.len() {
            return Err(format!("row {}: {} cells, the answer has {}", i + 1, got.len(), want.len()));
        }
        for (c, (g, w)) in got.iter().zip(want).enumerate() {
            if skip(header[c]) || (g == "NULL" && w.is_empty()) {
                continue;
            }
            let ok = if tolerant.get(c).copied().unwrap_or(false) { close(g, w) } else { g.trim() == w.trim() };
            if !ok {
                return Err(format!("row {}, column {}: got `{g}`, expected `{w}`", i + 1, header[c]));
            }
        }
    }
    Ok(())
}

/// Runs `queries` in DuckDB (2 threads) over the Parquet partitions the disks of a local
/// cluster hold; one answer text (or error) per query, in the official answers' format.
pub fn duckdb_same_data(cluster: &Cluster, catalog: &Catalog, queries: &[&str]) -> Result<Vec<std::result::Result<String, String>>> {
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, t) in &catalog.tables {
        for (d, p) in &t.placements {
            let dir = cluster.config().disks[*d as usize].dir.clone().ok_or_else(|| HostError::Invalid(format!("disk {d} has no local directory in cluster.toml; the same-data oracle needs a local cluster")))?;
            tables.entry(name.clone()).or_default().push(dir.join(&p.file).display().to_string());
        }
    }
    let python = std::env::var("ADISK_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(SAME_DATA_PY)
        .arg(serde_json::to_string(&tables).map_err(|e| HostError::Invalid(e.to_string()))?)
        .arg(serde_json::to_string(queries).map_err(|e| HostError::Invalid(e.to_string()))?)
        .output()
        .map_err(|source| HostError::Io { context: format!("running {python} for the DuckDB oracle"), source })?;
    if !out.status.success() {
        return Err(HostError::Invalid(format!("DuckDB oracle: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    let items: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).map_err(|e| HostError::Invalid(format!("DuckDB oracle printed malformed JSON: {e}")))?;
    Ok(items
        .into_iter()
        .map(|v| match v {
            serde_json::Value::String(s) => Ok(s),
            other => Err(other.get("error").and_then(|e| e.as_str()).unwrap_or("unknown error").to_string()),
        })
        .collect())
}

const SAME_DATA_PY: &str = include_str!("duckdb_same_data.py");

/// Rows of `orders` at scale factor `sf` (to tell which scale factor a cluster holds).
pub fn orders_rows(sf: f64) -> u64 {
    (1_500_000.0 * sf).round() as u64
}
