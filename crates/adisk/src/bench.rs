//! `adisk bench scan`: disk-side scan throughput against DuckDB on the same Parquet files.
//!
//! For each disk count: a fresh local cluster, `lineitem` at the given scale factor, then a
//! Q6-like select+aggregate and a Q1-like group-by, each `repeats` times (median wall time).
//! Reported: MB/s of column data scanned at the disks (Arrow bytes after column elimination,
//! summed over disks, ÷ median wall time), storage bytes read, CPU cycles per scanned byte
//! (CPU time × the measured clock ÷ bytes), bytes shipped, peak RSS of the disk processes, and DuckDB with
//! one thread on the same files, as a throughput ratio measured in the same run.
use crate::common::CliError;
use crate::local::{UpArgs, down, up};
use adisk_host::JobRequest;
use std::path::Path;

const DUCKDB_TIME: &str = include_str!("duckdb_time.py");

const Q6_PREDICATE: &str = "l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24";

/// The clock /proc/cpuinfo states (a VM's nominal one), Hz.
fn stated_hz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map_or(2.0e9, |mhz| mhz * 1e6)
}

fn peak_rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn duckdb_seconds(python: &str, dir: &Path, repeats: usize, sql: &str) -> Result<f64, CliError> {
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(DUCKDB_TIME)
        .arg(dir)
        .arg(repeats.to_string())
        .arg(sql)
        .output()
        .map_err(|e| CliError::Other(format!("cannot run {python}: {e}")))?;
    if !out.status.success() {
        return Err(CliError::Other(format!(
            "DuckDB timing failed (pip install duckdb==1.5.5): {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|e| CliError::Other(format!("bad DuckDB timing output: {e}")))
}

/// The two queries of `bench scan`: a Q6-like aggregate and a Q1-like group-by over
/// `lineitem`, as `adisk run` requests and as SQL for DuckDB.
fn scan_queries() -> [(&'static str, JobRequest, String); 2] {
    [
    (
        "Q6-like",
        JobRequest {
            disklet: "aggregate".into(),
            table: "lineitem".into(),
            params: [("predicate".to_string(), Q6_PREDICATE.to_string()), ("aggs".to_string(), "sum(l_extendedprice * l_discount) AS revenue".to_string())].into_iter().collect(),
            ..Default::default()
        },
        format!("SELECT sum(l_extendedprice * l_discount) FROM lineitem WHERE {Q6_PREDICATE}"),
    ),
    (
        "Q1-like",
        JobRequest {
            disklet: "groupby".into(),
            table: "lineitem".into(),
            params: [
                ("predicate".to_string(), "l_shipdate <= DATE '1998-09-02'".to_string()),
                ("group_by".to_string(), "l_returnflag, l_linestatus".to_string()),
                ("aggs".to_string(), "sum(l_quantity), sum(l_extendedprice), sum(l_extendedprice * (1 - l_discount)), sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)), avg(l_quantity), avg(l_extendedprice), avg(l_discount), count(*)".to_string()),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        },
        "SELECT l_returnflag, l_linestatus, sum(l_quantity), sum(l_extendedprice), sum(l_extendedprice * (1 - l_discount)), sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)), avg(l_quantity), avg(l_extendedprice), avg(l_discount), count(*) FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' GROUP BY 1, 2".to_string(),
    ),
]
}

/// Loads `lineitem` at `sf` into the cluster of `cdir` unless it holds it already, written with
/// `args`' codec.
async fn ensure_lineitem(cdir: &Path, sf: f64, args: &UpArgs) -> Result<(), CliError> {
    let cluster = crate::common::connect(cdir).await?;
    let rows = cluster
        .catalog()
        .await?
        .tables
        .get("lineitem")
        .map(|t| t.rows())
        .unwrap_or(0);
    if rows < adisk_storage::tpch::approx_rows("lineitem", sf) * 99 / 100
        || !crate::output::loaded_with(cdir, args.compression)
    {
        let _ = cluster.drop_table("lineitem").await;
        crate::output::load_tpch(
            &cluster,
            &adisk_host::load::TpchLoad {
                sf,
                partitions_per_disk: 1,
                row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS,
                tables: vec!["lineitem".into()],
                replicas: 1,
                disks: vec![],
            },
        )
        .await?;
        crate::output::mark_loaded(cdir, args.compression)?;
    }
    Ok(())
}

/// `adisk bench scan`: the Q6-like and Q1-like queries on 1..N disks against DuckDB on the
/// same files; wall, disk and per-byte CPU figures, memory peaks.
pub async fn scan(
    dir: &Path,
    sf: f64,
    disk_counts: &[u32],
    repeats: usize,
    python: &str,
) -> Result<(), CliError> {
    // Cycles at the clock the processor runs at, measured as `adisk calibrate` does (a chain
    // of dependent adds): a VM's /proc/cpuinfo states a nominal clock.
    let hz = crate::calibrate::measure_clock_ghz() * 1e9;
    let queries = scan_queries();
    println!(
        "adisk bench scan: TPC-H SF {sf} lineitem, median of {repeats}, clock {:.2} GHz (measured; /proc/cpuinfo states {:.2} GHz)",
        hz / 1e9,
        stated_hz() / 1e9
    );
    println!(
        "{:<8} {:>5} {:>9} {:>11} {:>9} {:>10} {:>8} {:>8} {:>10} {:>10} {:>11} {:>9} {:>9}",
        "query",
        "disks",
        "wall_ms",
        "diskbuf_ms",
        "disk_ms",
        "scanned_MB",
        "MB/s",
        "cyc/B",
        "read_MB",
        "shipped",
        "rss_MB_max",
        "duck_ms",
        "vs_duck"
    );
    for &n in disk_counts {
        let cdir = dir.join(format!("bench-scan-{n}"));
        if cdir.join("cluster.toml").exists() {
            let _ = down(&cdir).await;
        }
        let args = UpArgs { ..UpArgs::local(n) };
        up(&cdir, &args).await?;
        // Load (or reuse) the data, then restart the disks so peak RSS reflects serving queries.
        let loaded = ensure_lineitem(&cdir, sf, &args).await;
        down(&cdir).await?;
        loaded?;
        let config = up(&cdir, &args).await?;
        let result = async {
            let cluster = std::sync::Arc::new(crate::common::connect(&cdir).await?);
            for (name, req, sql) in &queries {
                // The same job with the disks' own buffer size, interleaved with it.
                let small = JobRequest {
                    buffer_kib: Some(0),
                    ..req.clone()
                };
                adisk_host::run::run(&cluster, req).await?; // warm-up (first open verifies checksums)
                adisk_host::run::run(&cluster, &small).await?;
                let mut walls = Vec::with_capacity(repeats);
                let mut small_walls = Vec::with_capacity(repeats);
                let mut disk_walls = Vec::with_capacity(repeats);
                let mut last = None;
                for _ in 0..repeats {
                    let out = adisk_host::run::run(&cluster, req).await?;
                    walls.push(out.stats.wall_ns as f64 / 1e9);
                    disk_walls.push(out.stats.totals().wall_ns_max as f64 / 1e9);
                    last = Some(out);
                    let out = adisk_host::run::run(&cluster, &small).await?;
                    small_walls.push(out.stats.wall_ns as f64 / 1e9);
                }
                let out = last.expect("repeats >= 1");
                let small_wall = median(small_walls);
                let wall = median(walls);
                let disk_wall = median(disk_walls);
                let scanned: u64 = out.stats.disks.iter().map(|d| d.bytes_scanned).sum();
                let t = out.stats.totals();
                let rss = config.disks.iter().filter_map(|d| d.pid).map(peak_rss_bytes).max().unwrap_or(0);
                let duck = duckdb_seconds(python, &cdir, repeats, sql)?;
                println!(
                    "{:<8} {:>5} {:>9.1} {:>11.1} {:>9.1} {:>10.1} {:>8.1} {:>8.2} {:>10.1} {:>10} {:>11.1} {:>9.1} {:>8.2}x",
                    name,
                    n,
                    wall * 1e3,
                    small_wall * 1e3,
                    disk_wall * 1e3,
                    scanned as f64 / 1e6,
                    scanned as f64 / 1e6 / disk_wall,
                    t.cpu_ns as f64 * hz / 1e9 / scanned.max(1) as f64,
                    t.bytes_read as f64 / 1e6,
                    adisk_core::stats::human_bytes(t.bytes_shipped_host),
                    rss as f64 / 1e6,
                    duck * 1e3,
                    duck / wall
                );
            }
            Ok::<(), CliError>(())
        }
        .await;
        down(&cdir).await?;
        result?;
    }
    println!(
        "wall_ms: host end to end (planning, all disks, combining); diskbuf_ms: the same with the disks' own buffer size (`adisk run --buffer-kib 0`), interleaved;"
    );
    println!("disk_ms: slowest disk's job; MB/s: Arrow bytes scanned at the disks / disk_ms;");
    println!(
        "cyc/B: CPU time of all disks x clock / scanned bytes; vs_duck: DuckDB 1-thread time / wall_ms (above 1: ActiveDisk faster)"
    );
    Ok(())
}
