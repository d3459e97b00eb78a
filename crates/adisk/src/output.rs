//! Printing results and statistics; loads with progress bars; benchmarks.
use crate::common::CliError;
use adisk_host::JobOutput;
use adisk_host::cluster::Cluster;
use adisk_host::load::{FileFormat, TpchLoad};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub async fn status(cluster: &Cluster, format: Format) -> Result<(), CliError> {
    print_status(&adisk_server::status::report(cluster).await, format)
}

/// Prints a status report ([`adisk_server::status::report`], made here or by the service) as
/// JSON or as tables; an error (and a failing exit) when some disk did not answer.
pub fn print_status(report: &serde_json::Value, format: Format) -> Result<(), CliError> {
    let empty = vec![];
    let disks = report["disks"].as_array().unwrap_or(&empty);
    if format == Format::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).map_err(|e| CliError::Other(e.to_string()))?
        );
    } else {
        print_disks(disks);
        print_tables(report);
    }
    let failed: Vec<&str> = disks.iter().filter_map(|d| d["error"].as_str()).collect();
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(CliError::Other(format!(
            "{} of {} disks did not answer (first: {first})",
            failed.len(),
            disks.len()
        ))),
    }
}

fn print_disks(disks: &[serde_json::Value]) {
    println!(
        "{:<5} {:<22} {:>8} {:>22} {:>8} {:>8} {:>10} {:>8}",
        "disk",
        "address",
        "pid",
        "memory granted/total",
        "running",
        "waiting",
        "finished",
        "failed"
    );
    let human = |v: &serde_json::Value| adisk_core::stats::human_bytes(v.as_u64().unwrap_or(0));
    for d in disks {
        let (id, address) = (&d["disk_id"], d["address"].as_str().unwrap_or("?"));
        if let Some(e) = d["error"].as_str() {
            println!("{id:<5} {address:<22} ERROR {e}");
            continue;
        }
        println!(
            "{:<5} {:<22} {:>8} {:>22} {:>8} {:>8} {:>10} {:>8}",
            id.to_string(),
            address,
            d["pid"].to_string(),
            format!(
                "{}/{}",
                human(&d["memory_granted_bytes"]),
                human(&d["memory_bytes"])
            ),
            d["jobs_running"].to_string(),
            d["jobs_waiting"].to_string(),
            d["jobs_finished"].to_string(),
            failed_column(d)
        );
    }
}

/// Jobs failed, with how many of them stalled or were abandoned by their host.
fn failed_column(d: &serde_json::Value) -> String {
    let why: Vec<String> = [("stalled", "jobs_stalled"), ("abandoned", "jobs_abandoned")]
        .iter()
        .filter_map(|(word, key)| {
            d[key]
                .as_u64()
                .filter(|n| *n > 0)
                .map(|n| format!("{n} {word}"))
        })
        .collect();
    if why.is_empty() {
        d["jobs_failed"].to_string()
    } else {
        format!("{} ({})", d["jobs_failed"], why.join(", "))
    }
}

fn print_tables(report: &serde_json::Value) {
    if let Some(e) = report["catalog_error"].as_str() {
        println!("\ncatalog unavailable: {e}");
        return;
    }
    let empty = vec![];
    let tables = report["tables"].as_array().unwrap_or(&empty);
    println!(
        "\n{:<12} {:>12} {:>12} {:>11} {:>8} {:>9}",
        "table", "rows", "bytes", "partitions", "disks", "replicas"
    );
    let complete = || tables.iter().filter(|t| t["incomplete"].is_null());
    for t in complete() {
        println!(
            "{:<12} {:>12} {:>12} {:>11} {:>8} {:>9}",
            t["name"].as_str().unwrap_or("?"),
            t["rows"].to_string(),
            adisk_core::stats::human_bytes(t["bytes"].as_u64().unwrap_or(0)),
            t["partitions"].to_string(),
            t["disks"].as_array().map_or(0, Vec::len),
            t["replicas"].to_string()
        );
    }
    for t in complete().filter(|t| t["needs_repair"] == true) {
        let mut why: Vec<String> = t["missing"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(d, p)| {
                let p: Vec<u64> = p
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_u64())
                    .collect();
                format!("disk {d} lacks partitions {p:?}")
            })
            .collect();
        why.extend(
            t["stale"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| format!("disk {d} holds an older load")),
        );
        println!(
            "{} needs repair: {} (read from other copies meanwhile; `adisk repair`)",
            t["name"].as_str().unwrap_or("?"),
            why.join(", ")
        );
    }
    for t in tables.iter().filter(|t| !t["incomplete"].is_null()) {
        println!("{}", t["message"].as_str().unwrap_or("?"));
    }
}

/// How a command prints what it did: a table for people, JSON for programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table (or lines) for people.
    Table,
    /// JSON for programs.
    Json,
}

fn bar(total: u64, label: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total.max(1));
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:>10} [{bar:30}] {pos}/{len} rows ({per_sec}, eta {eta})",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    pb.set_message(label.to_string());
    pb
}

/// The file of a benchmark's cluster directory naming the codec its data was loaded with.
const LOADED_COMPRESSION: &str = "loaded-compression";

/// Whether a benchmark's data under `cdir` was loaded with `compression` (data loaded before
/// the codec was recorded counts as not).
pub fn loaded_with(cdir: &Path, compression: adisk_core::config::Compression) -> bool {
    std::fs::read_to_string(cdir.join(LOADED_COMPRESSION))
        .is_ok_and(|s| s.trim() == compression.to_string())
}

/// Records that a benchmark's data under `cdir` was loaded with `compression`.
pub fn mark_loaded(
    cdir: &Path,
    compression: adisk_core::config::Compression,
) -> Result<(), CliError> {
    let path = cdir.join(LOADED_COMPRESSION);
    std::fs::write(&path, compression.to_string())
        .map_err(|e| CliError::Other(format!("writing {}: {e}", path.display())))
}

pub async fn load_tpch(cluster: &Cluster, load: &TpchLoad) -> Result<(), CliError> {
    let started = Instant::now();
    let mut bars: std::collections::HashMap<String, indicatif::ProgressBar> = Default::default();
    let loaded = adisk_host::load::load_tpch(cluster, load, |table, rows| {
        let pb = bars
            .entry(table.to_string())
            .or_insert_with(|| bar(adisk_storage::tpch::approx_rows(table, load.sf), table));
        pb.set_position(rows);
    })
    .await?;
    for pb in bars.values() {
        pb.finish();
    }
    let total: u64 = loaded.iter().map(|(_, r)| r).sum();
    let tables = if loaded.len() == 1 {
        "1 table".to_string()
    } else {
        format!("{} tables", loaded.len())
    };
    eprintln!(
        "loaded TPC-H SF {} ({tables}, {total} rows) into {} disks in {:.1} s",
        load.sf,
        cluster.disk_count(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub async fn load_files(
    cluster: &Cluster,
    table: &str,
    format: FileFormat,
    files: &[PathBuf],
    decluster: &str,
    replicas: u32,
) -> Result<(), CliError> {
    let rule = decluster.parse()?;
    let started = Instant::now();
    let pb = indicatif::ProgressBar::new_spinner();
    let infos = adisk_host::load::load_files_replicated(
        cluster,
        table,
        format,
        files,
        rule,
        replicas,
        |rows| pb.set_message(format!("{rows} rows")),
    )
    .await?;
    pb.finish_and_clear();
    let rows: u64 = infos.iter().map(|p| p.rows).sum();
    eprintln!(
        "loaded {rows} rows into `{table}` ({} partitions) in {:.1} s",
        infos.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn print_job(out: &JobOutput, format: Format, max_rows: usize) -> Result<(), CliError> {
    if format == Format::Json {
        let mut writer = arrow::json::ArrayWriter::new(Vec::new());
        for b in &out.batches {
            writer
                .write(b)
                .map_err(|e| CliError::Other(e.to_string()))?;
        }
        writer
            .finish()
            .map_err(|e| CliError::Other(e.to_string()))?;
        let rows_json = writer.into_inner();
        let rows: serde_json::Value = if rows_json.is_empty() {
            serde_json::json!([])
        } else {
            serde_json::from_slice(&rows_json).map_err(|e| CliError::Other(e.to_string()))?
        };
        let doc = serde_json::json!({
            "columns": out.schema.fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>(),
            "rows": rows,
            "stats": out.stats,
            "totals": out.stats.totals(),
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return Ok(());
    }
    let mut shown = Vec::new();
    let mut left = max_rows;
    for b in &out.batches {
        if left == 0 {
            break;
        }
        let n = b.num_rows().min(left);
        shown.push(b.slice(0, n));
        left -= n;
    }
    if !shown.is_empty() {
        println!(
            "{}",
            arrow::util::pretty::pretty_format_batches(&shown)
                .map_err(|e| CliError::Other(e.to_string()))?
        );
    }
    if out.rows() > max_rows {
        println!("({} rows, {} shown)", out.rows(), max_rows);
    } else {
        println!("({} rows)", out.rows());
    }
    println!("\n{}", out.stats.description);
    print!("{}", out.stats.render_table());
    Ok(())
}
