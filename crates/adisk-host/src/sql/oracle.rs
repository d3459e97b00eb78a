//! Oracles: compare a result with an answer text, and DuckDB run on the very Parquet files
//! the disks hold.
use super::QueryOutput;
use crate::client::cluster::{Catalog, Cluster};
use crate::{HostError, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use std::collections::BTreeMap;

/// Cells of a result, as text, with a flag per column saying whether it is numeric with a
/// fractional part (compared with a tolerance).
fn cells(batches: &[RecordBatch]) -> Result<(Vec<Vec<String>>, Vec<bool>)> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    let mut tolerant = Vec::new();
    for b in batches {
        tolerant = b
            .schema()
            .fields()
            .iter()
            .map(|f| {
                matches!(
                    f.data_type(),
                    DataType::Decimal128(..)
                        | DataType::Decimal256(..)
                        | DataType::Float32
                        | DataType::Float64
                )
            })
            .collect();
        let fmts = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| HostError::Invalid(e.to_string()))?;
        for r in 0..b.num_rows() {
            rows.push(fmts.iter().map(|f| f.value(r).to_string()).collect());
        }
    }
    Ok((rows, tolerant))
}

/// Decimal places a printed number carries: `0.05` → 2, `12` → 0, `1.5e-7` → 8, `2.5E+3` → 0.
fn printed_decimals(text: &str) -> i32 {
    let text = text.trim();
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i32>().unwrap_or(0)),
        None => (text, 0),
    };
    let fraction = mantissa.split_once('.').map_or(0, |(_, f)| f.len() as i32);
    (fraction - exponent).max(0)
}

/// Whether a result cell `got` agrees with an answer cell `want` to the precision each
/// carries. The answer is printed correctly rounded (DuckDB, the official answers): half a
/// unit of its last digit. Our decimals are cut at their scale (DataFusion truncates decimal
/// division, e.g. `avg` at six places): one unit of our last digit. Plus 1e-9 relative, for the
/// order in which floating-point sums were added up. Two values printed with 17 significant
/// digits must agree to about 1e-9.
fn close(got: &str, want: &str) -> bool {
    match (got.trim().parse::<f64>(), want.trim().parse::<f64>()) {
        (Ok(x), Ok(y)) => {
            let tolerance = 0.5 * 10f64.powi(-printed_decimals(want))
                + 10f64.powi(-printed_decimals(got))
                + 1e-9 * x.abs().max(y.abs());
            (x - y).abs() <= tolerance * (1.0 + 1e-12)
        }
        _ => got.trim() == want.trim(),
    }
}

/// Compares a result with an answer (`|`-separated, header first, NULL as empty). Columns
/// for which `skip(name)` holds are not compared. `Ok(())` or the first difference.
pub fn compare(
    result: &QueryOutput,
    answer: &str,
    skip: impl Fn(&str) -> bool,
) -> std::result::Result<(), String> {
    compare_batches(result.schema.fields().len(), &result.batches, answer, skip)
}

/// [`compare`] for a result of `columns` columns received as `batches` (e.g. by a Flight SQL
/// client).
pub fn compare_batches(
    columns: usize,
    batches: &[RecordBatch],
    answer: &str,
    skip: impl Fn(&str) -> bool,
) -> std::result::Result<(), String> {
    let (rows, tolerant) = cells(batches).map_err(|e| e.to_string())?;
    let mut lines = answer.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split('|').collect();
    let expected: Vec<Vec<&str>> = lines.map(|l| l.split('|').collect()).collect();
    if columns != header.len() {
        return Err(format!(
            "{columns} columns, the answer has {}",
            header.len()
        ));
    }
    if rows.len() != expected.len() {
        return Err(format!(
            "{} rows, the answer has {}",
            rows.len(),
            expected.len()
        ));
    }
    for (i, (got, want)) in rows.iter().zip(&expected).enumerate() {
        if got.len() != want.len() {
            return Err(format!(
                "row {}: {} cells, the answer has {}",
                i + 1,
                got.len(),
                want.len()
            ));
        }
        for (c, (g, w)) in got.iter().zip(want).enumerate() {
            if skip(header[c]) || (g == "NULL" && w.is_empty()) {
                continue;
            }
            let ok = if tolerant.get(c).copied().unwrap_or(false) {
                close(g, w)
            } else {
                g.trim() == w.trim()
            };
            if !ok {
                return Err(format!(
                    "row {}, column {}: got `{g}`, expected `{w}`",
                    i + 1,
                    header[c]
                ));
            }
        }
    }
    Ok(())
}

/// Runs `queries` in DuckDB (2 threads) over the Parquet partitions the disks of a local
/// cluster hold; one answer text (or error) per query, in the official answers' format.
pub fn duckdb_same_data(
    cluster: &Cluster,
    catalog: &Catalog,
    queries: &[&str],
) -> Result<Vec<std::result::Result<String, String>>> {
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, t) in &catalog.tables {
        for (d, p) in &t.placements {
            let dir = cluster.config().disks[*d as usize].dir.clone().ok_or_else(|| HostError::Invalid(format!("disk {d} has no local directory in cluster.toml; the same-data oracle needs a local cluster")))?;
            tables
                .entry(name.clone())
                .or_default()
                .push(dir.join(&p.file).display().to_string());
        }
    }
    let python = std::env::var("ADISK_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(SAME_DATA_PY)
        .arg(serde_json::to_string(&tables).map_err(|e| HostError::Invalid(e.to_string()))?)
        .arg(serde_json::to_string(queries).map_err(|e| HostError::Invalid(e.to_string()))?)
        .output()
        .map_err(|source| HostError::Io {
            context: format!("running {python} for the DuckDB oracle"),
            source,
        })?;
    if !out.status.success() {
        return Err(HostError::Invalid(format!(
            "DuckDB oracle: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let items: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)
        .map_err(|e| HostError::Invalid(format!("DuckDB oracle printed malformed JSON: {e}")))?;
    Ok(items
        .into_iter()
        .map(|v| match v {
            serde_json::Value::String(s) => Ok(s),
            other => Err(other
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("unknown error")
                .to_string()),
        })
        .collect())
}

const SAME_DATA_PY: &str = include_str!("duckdb_same_data.py");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_precision() {
        assert_eq!(printed_decimals("0.05"), 2);
        assert_eq!(printed_decimals("12"), 0);
        assert_eq!(printed_decimals("-3.250"), 3);
        assert_eq!(printed_decimals("1.5e-7"), 8);
        assert_eq!(printed_decimals("2.5E+3"), 0);
    }

    #[test]
    fn close_to_the_printed_precision_only() {
        // An answer rounded to two places: anything that rounds to it agrees.
        assert!(close("0.049985", "0.05"));
        assert!(close("0.0549", "0.05"));
        assert!(
            !close("0.0552", "0.05"),
            "Q1's avg_disc off by 10 % must not pass"
        );
        assert!(!close("0.0600", "0.05"));
        assert!(close("38273.129734", "38273.13"));
        assert!(!close("38273.1400", "38273.13"));
        // Our six-place decimal (truncated) against a full double (SF 0.01's official Q1).
        assert!(close("25.575154", "25.575154611454693"));
        assert!(!close("25.575152", "25.575154611454693"));
        assert!(close("0.049985", "0.04998529583839761"));
        assert!(!close("0.049987", "0.04998529583839761"));
        // Both sides at full precision: 1e-9 relative.
        assert!(close("0.04998529583839761", "0.04998529583839762"));
        assert!(!close("0.04998529583839761", "0.04998534583839761"));
        assert!(close("55909065222.82769", "55909065222.827690001"));
        assert!(close("alpha", " alpha"));
        assert!(!close("alpha", "beta"));
    }
}
