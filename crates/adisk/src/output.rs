//! Printing results and statistics; loads with progress bars; benchmarks.
use crate::CliError;
use adisk_host::JobOutput;
use adisk_host::cluster::Cluster;
use adisk_host::load::{FileFormat, TpchLoad};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Disk-side scan throughput: Q6-like select and Q1-like aggregation over lineitem, on 1
    /// and 4 disks, against DuckDB (1 thread) on the same Parquet files.
    Scan {
        /// Scale factor.
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        /// Disk counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        disks: Vec<u32>,
        /// Repeats per measurement (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Python interpreter with the `duckdb` module.
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// The 22 TPC-H queries: offload auto vs none (conventional) vs DuckDB (2 threads) on the
    /// same files, medians of repeats, with data reduction.
    Tpch(crate::bench_tpch::TpchBenchArgs),
    /// Fair sharing per host program: one query alone, then beside a crowd of copies from
    /// another program and from its own, on one disk.
    Fair(crate::bench_fair::FairBenchArgs),
    /// The papers' applications in both modes, host link throttled to 1/8 of the disks'
    /// aggregate read rate and unthrottled: medians, bytes per link, active ÷ conventional.
    App(crate::bench_app::AppBenchArgs),
    /// The Flight SQL service: queries per second and p50/p99 latency of Q6 and Q1 at 1, 4
    /// and 16 concurrent clients, against the same queries in process; a large result's MB/s.
    Serve(crate::bench_serve::ServeBenchArgs),
    /// Disk-to-disk streams: a pair and all-to-all, direct and via the host, against the
    /// loopback Flight DoPut rate measured in the same run.
    Exchange(crate::bench_exchange::ExchangeBenchArgs),
    /// What verifying every read costs: one lineitem partition decoded with and without the
    /// per-chunk and footer checksums, medians, cost per GB read.
    Checksum(crate::bench_checksum::ChecksumBenchArgs),
    /// What trust costs: TPC-H with authentication off vs on, with 2 replicas vs 1 (no
    /// failure), and queries with a disk killed mid-query vs without, side by side.
    Faults(crate::bench_faults::FaultsBenchArgs),
    /// User disklets: the WASM count_if example vs the built-in native disklets on lineitem, one disk.
    Disklet {
        /// Scale factor.
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        /// Repeats per measurement (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// The SDK directory (holds c/build.sh and c/examples/).
        #[arg(long, default_value = "sdk")]
        sdk: PathBuf,
    },
}

pub async fn status(cluster: &Cluster, format: &str) -> Result<(), CliError> {
    let statuses = cluster.status().await;
    let catalog = cluster.catalog().await;
    if format == "json" {
        let disks: Vec<serde_json::Value> = statuses
            .iter()
            .enumerate()
            .map(|(d, s)| match s {
                Ok(s) => serde_json::to_value(s).expect("status serializes"),
                Err(e) => serde_json::json!({ "disk_id": d, "error": e.to_string() }),
            })
            .collect();
        let tables: Vec<serde_json::Value> = match &catalog {
            Ok(c) => c
                .tables
                .values()
                .map(|t| {
                    let missing: serde_json::Map<String, serde_json::Value> = t.missing_by_disk().into_iter().map(|(d, p)| (d.to_string(), serde_json::json!(p))).collect();
                    serde_json::json!({"name": t.name, "rows": t.rows(), "bytes": t.bytes(), "partitions": t.placements.len(), "disks": t.disks(), "replicas": t.replicas(), "needs_repair": t.needs_repair(), "missing": missing, "stale": t.stale})
                })
                .chain(c.incomplete.iter().map(|(name, why)| serde_json::json!({"name": name, "incomplete": why.reason, "disks": why.disks})))
                .collect(),
            Err(_) => vec![],
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "disks": disks, "tables": tables }))
                .expect("json")
        );
        return all_answered(&statuses);
    }
    check_format(format)?;
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
    for (d, s) in statuses.iter().enumerate() {
        match s {
            Ok(s) => println!(
                "{:<5} {:<22} {:>8} {:>22} {:>8} {:>8} {:>10} {:>8}",
                s.disk_id,
                cluster.address(d as u32),
                s.pid,
                format!(
                    "{}/{}",
                    adisk_core::stats::human_bytes(s.memory_granted_bytes),
                    adisk_core::stats::human_bytes(s.memory_bytes)
                ),
                s.jobs_running,
                s.jobs_waiting,
                s.jobs_finished,
                s.jobs_failed
            ),
            Err(e) => println!("{d:<5} {:<22} ERROR {e}", cluster.address(d as u32)),
        }
    }
    match catalog {
        Ok(c) => {
            println!(
                "\n{:<12} {:>12} {:>12} {:>11} {:>8} {:>9}",
                "table", "rows", "bytes", "partitions", "disks", "replicas"
            );
            for t in c.tables.values() {
                println!(
                    "{:<12} {:>12} {:>12} {:>11} {:>8} {:>9}",
                    t.name,
                    t.rows(),
                    adisk_core::stats::human_bytes(t.bytes()),
                    t.placements.len(),
                    t.disks().len(),
                    t.replicas()
                );
            }
            for t in c.tables.values().filter(|t| t.needs_repair()) {
                let mut why: Vec<String> = t
                    .missing_by_disk()
                    .into_iter()
                    .map(|(d, p)| format!("disk {d} lacks partitions {p:?}"))
                    .collect();
                why.extend(
                    t.stale
                        .iter()
                        .map(|d| format!("disk {d} holds an older load")),
                );
                println!(
                    "{} needs repair: {} (read from other copies meanwhile; `adisk repair`)",
                    t.name,
                    why.join(", ")
                );
            }
            for (name, why) in &c.incomplete {
                println!("{}", adisk_host::cluster::incomplete_error(name, why));
            }
        }
        Err(e) => println!("\ncatalog unavailable: {e}"),
    }
    all_answered(&statuses)
}

/// After a status report: an error (and a failing exit) when some disk did not answer.
fn all_answered<T>(statuses: &[adisk_host::Result<T>]) -> Result<(), CliError> {
    let failed: Vec<String> = statuses
        .iter()
        .filter_map(|s| s.as_ref().err())
        .map(|e| e.to_string())
        .collect();
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(CliError::Other(format!(
            "{} of {} disks did not answer (first: {first})",
            failed.len(),
            statuses.len()
        ))),
    }
}

pub(crate) fn check_format(format: &str) -> Result<(), CliError> {
    match format {
        "table" | "json" => Ok(()),
        other => Err(CliError::Other(format!(
            "unknown format `{other}` (table or json)"
        ))),
    }
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

pub fn print_job(out: &JobOutput, format: &str, max_rows: usize) -> Result<(), CliError> {
    check_format(format)?;
    if format == "json" {
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

pub async fn bench(dir: &Path, cmd: BenchCommand) -> Result<(), CliError> {
    match cmd {
        BenchCommand::Scan {
            sf,
            disks,
            repeats,
            python,
        } => crate::bench::scan(dir, sf, &disks, repeats.max(1), &python).await,
        BenchCommand::Tpch(a) => crate::bench_tpch::run(dir, a).await,
        BenchCommand::Fair(a) => crate::bench_fair::run(dir, a).await,
        BenchCommand::Exchange(a) => crate::bench_exchange::run(dir, a).await,
        BenchCommand::Serve(a) => crate::bench_serve::run(dir, a).await,
        BenchCommand::App(a) => crate::bench_app::run(dir, a).await,
        BenchCommand::Checksum(a) => crate::bench_checksum::run(dir, a).await,
        BenchCommand::Faults(a) => crate::bench_faults::run(dir, a).await,
        BenchCommand::Disklet { sf, repeats, sdk } => {
            crate::disklet_cmd::bench(dir, sf, repeats.max(1), &sdk).await
        }
    }
}
