//! `adisk bench tpch`: the 22 TPC-H queries at offload `auto` and `none` (conventional) on a
//! local cluster, and DuckDB with 2 threads on the same Parquet files, in one run; medians of
//! `repeats` runs after one warm-up each. Reports per-query times, ratios and data reduction.
use crate::CliError;
use crate::local::{UpArgs, down, up};
use adisk_core::stats::human_bytes;
use adisk_host::sql::{Offload, SqlEngine, SqlOptions, report, tpch};
use std::path::Path;
use std::sync::Arc;

const DUCKDB_TPCH_TIME: &str = include_str!("duckdb_tpch_time.py");

/// Options of `adisk bench tpch`.
#[derive(clap::Args, Debug)]
pub struct TpchBenchArgs {
    /// Scale factor.
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Disks.
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// Repeats per query and mode (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Only these queries (comma-separated numbers).
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<u32>,
    /// Limit on what all disks together send the host, Mbit/s (0: unthrottled).
    #[arg(long, default_value_t = 0)]
    pub host_link_mbps: u64,
    /// Storage read limit per disk, Mbit/s (0: unthrottled).
    #[arg(long, default_value_t = 0)]
    pub disk_read_mbps: u64,
    /// DiskOS memory per disk, MiB.
    #[arg(long, default_value_t = 256)]
    pub memory_mib: u64,
    /// DuckDB threads.
    #[arg(long, default_value_t = 2)]
    pub duckdb_threads: u32,
    /// Skip DuckDB.
    #[arg(long)]
    pub no_duckdb: bool,
    /// Python interpreter with the `duckdb` module.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Skip the warm-up run of each query (for slow throttled runs).
    #[arg(long)]
    pub no_warmup: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

struct Measured {
    seconds: f64,
    read: u64,
    shipped: u64,
}

async fn measure(eng: &SqlEngine, sql: &str, repeats: usize, warmup: bool) -> Result<Measured, CliError> {
    if warmup {
        eng.query(sql).await?; // first opens verify checksums, caches fill
    }
    let mut times = Vec::with_capacity(repeats);
    let mut last = None;
    for _ in 0..repeats {
        let out = eng.query(sql).await?;
        times.push(out.wall.as_secs_f64());
        last = Some(out);
    }
    let out = last.expect("repeats >= 1");
    let (read, _, shipped) = report::totals(&out);
    Ok(Measured { seconds: median(times), read, shipped })
}

pub async fn run(dir: &Path, a: TpchBenchArgs) -> Result<(), CliError> {
    let repeats = a.repeats.max(1);
    let queries: Vec<u32> = if a.queries.is_empty() { (1..=22).collect() } else { a.queries.clone() };
    let texts = queries.iter().map(|n| tpch::query(*n)).collect::<Result<Vec<_>, _>>()?;
    let cdir = dir.join(format!("bench-tpch-{}", a.disks));
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let args = UpArgs { disks: a.disks, memory_mib: a.memory_mib, buffer_kib: 256, buffers_per_stream: 2, host_link_mbps: a.host_link_mbps, disk_read_mbps: a.disk_read_mbps };
    up(&cdir, &args).await?;
    let result = async {
        let cluster = Arc::new(crate::connect(&cdir).await?);
        let orders = cluster.catalog().await?.tables.get("orders").map(|t| t.rows()).unwrap_or(0);
        if orders != tpch::orders_rows(a.sf) {
            for t in ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"] {
                let _ = cluster.drop_table(t).await;
            }
            crate::output::load_tpch(&cluster, &adisk_host::load::TpchLoad { sf: a.sf, partitions_per_disk: 1, row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS, tables: vec![] }).await?;
        }
        let duck: Vec<Option<f64>> = if a.no_duckdb {
            vec![None; texts.len()]
        } else {
            eprintln!("DuckDB ({} threads) on the same files …", a.duckdb_threads);
            let out = std::process::Command::new(&a.python)
                .arg("-c")
                .arg(DUCKDB_TPCH_TIME)
                .arg(&cdir)
                .arg(a.duckdb_threads.to_string())
                .arg(repeats.to_string())
                .arg(serde_json::to_string(&texts).map_err(|e| CliError::Other(e.to_string()))?)
                .output()
                .map_err(|e| CliError::Other(format!("cannot run {}: {e}", a.python)))?;
            if !out.status.success() {
                return Err(CliError::Other(format!("DuckDB timing failed (pip install duckdb==1.5.5): {}", String::from_utf8_lossy(&out.stderr))));
            }
            let v: Vec<f64> = serde_json::from_slice(&out.stdout).map_err(|e| CliError::Other(format!("bad DuckDB timing output: {e}")))?;
            v.into_iter().map(Some).collect()
        };
        let auto = SqlEngine::new(cluster.clone(), SqlOptions { offload: Offload::Auto, ..Default::default() }).await?;
        let none = SqlEngine::new(cluster.clone(), SqlOptions { offload: Offload::None, ..Default::default() }).await?;
        println!(
            "adisk bench tpch: SF {} on {} disks, host link {}, disk read {}, median of {repeats}",
            a.sf,
            a.disks,
            if a.host_link_mbps > 0 { format!("{} Mbit/s", a.host_link_mbps) } else { "unthrottled".into() },
            if a.disk_read_mbps > 0 { format!("{} Mbit/s", a.disk_read_mbps) } else { "unthrottled".into() }
        );
        println!(
            "{:<5} {:>10} {:>10} {:>10} {:>9} {:>9} {:>10} {:>12} {:>12} {:>9}",
            "query", "auto_ms", "none_ms", "duck_ms", "none/auto", "duck/auto", "read", "ship_auto", "ship_none", "reduction"
        );
        let (mut t_auto, mut t_none, mut t_duck, mut faster) = (0.0, 0.0, 0.0, 0);
        for (i, n) in queries.iter().enumerate() {
            eprintln!("Q{n:02} …");
            let x = measure(&auto, texts[i], repeats, !a.no_warmup).await?;
            let y = measure(&none, texts[i], repeats, !a.no_warmup).await?;
            t_auto += x.seconds;
            t_none += y.seconds;
            if x.seconds < y.seconds {
                faster += 1;
            }
            let d = duck[i];
            t_duck += d.unwrap_or(0.0);
            println!(
                "Q{n:02}   {:>10.1} {:>10.1} {:>10} {:>9.2} {:>9} {:>10} {:>12} {:>12} {:>8.1}x",
                x.seconds * 1e3,
                y.seconds * 1e3,
                d.map(|d| format!("{:.1}", d * 1e3)).unwrap_or_else(|| "–".into()),
                y.seconds / x.seconds,
                d.map(|d| format!("{:.2}", d / x.seconds)).unwrap_or_else(|| "–".into()),
                human_bytes(x.read),
                human_bytes(x.shipped),
                human_bytes(y.shipped),
                y.shipped as f64 / x.shipped.max(1) as f64
            );
        }
        println!(
            "total {:>10.1} {:>10.1} {:>10} {:>9.2} {:>9}",
            t_auto * 1e3,
            t_none * 1e3,
            if a.no_duckdb { "–".into() } else { format!("{:.1}", t_duck * 1e3) },
            t_none / t_auto,
            if a.no_duckdb { "–".into() } else { format!("{:.2}", t_duck / t_auto) }
        );
        println!("auto faster than none on {faster} of {} queries; auto total ÷ DuckDB total = {}", queries.len(), if a.no_duckdb { "–".into() } else { format!("{:.2}", t_auto / t_duck) });
        println!("none/auto, duck/auto above 1: auto faster. reduction: bytes shipped by none ÷ by auto. read: storage bytes read at the disks (auto).");
        Ok::<(), CliError>(())
    }
    .await;
    down(&cdir).await?;
    result
}
