//! `adisk bench replay`: how well `adisk sim replay` predicts the runtime on the configuration
//! a trace was recorded on. Each TPC-H query runs at each level on a local cluster; every run
//! records its trace, which the simulator replays on the recorded configuration; the medians
//! of measured and predicted times side by side, with the error (issue 37, acceptance 2).
use crate::bench_app::median;
use crate::bench_tpch::ensure_tpch;
use crate::common::CliError;
use crate::local::{UpArgs, down, up};
use adisk_host::sql::{Offload, SqlEngine, SqlOptions, tpch};
use adisk_sim::replay::config::{CpuSlows, ReplayFile};
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `adisk bench replay`.
#[derive(Args, Debug)]
pub struct ReplayBenchArgs {
    /// Scale factor.
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Disks.
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// TPC-H queries (comma-separated numbers).
    #[arg(long, value_delimiter = ',', default_value = "1,3,6,12,14")]
    pub queries: Vec<u32>,
    /// Offload levels (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "semijoin,disks")]
    pub levels: Vec<String>,
    /// Runs per query and level (medians reported), after one warm-up.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Each disk's CPU limit, cores' worth (`adisk up --disk-cpus`; needs root).
    #[arg(long)]
    pub disk_cpus: Option<f64>,
    /// Each disk's emulated processor speed (`adisk up --disk-cpu-speed`).
    #[arg(long)]
    pub disk_cpu_speed: Option<f64>,
    /// Each disk's read-rate limit, Mbit/s (0: unthrottled).
    #[arg(long, default_value_t = 0)]
    pub disk_read_mbps: u64,
    /// DiskOS memory per disk, MiB.
    #[arg(long, default_value_t = 256)]
    pub memory_mib: u64,
    /// Keep each query's last trace in this directory (`qNN-LEVEL.json`).
    #[arg(long)]
    pub keep_traces: Option<PathBuf>,
}

/// One query at one level: medians of measured and predicted times.
struct Point {
    query: u32,
    level: String,
    jobs: usize,
    measured_s: f64,
    predicted_s: f64,
}

impl Point {
    fn error_percent(&self) -> f64 {
        (self.predicted_s / self.measured_s.max(1e-12) - 1.0) * 100.0
    }
}

pub async fn run(dir: &Path, a: ReplayBenchArgs) -> Result<(), CliError> {
    let levels = a
        .levels
        .iter()
        .map(|l| l.parse::<Offload>().map_err(CliError::from))
        .collect::<Result<Vec<_>, _>>()?;
    let texts = (a.queries.iter())
        .map(|n| tpch::query(*n))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(d) = &a.keep_traces {
        std::fs::create_dir_all(d).map_err(|e| CliError::Other(format!("{}: {e}", d.display())))?;
    }
    let cdir = dir.join(format!("bench-replay-{}", a.disks));
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let args = UpArgs {
        memory_mib: a.memory_mib,
        disk_read_mbps: a.disk_read_mbps,
        disk_cpus: a.disk_cpus,
        disk_cpu_speed: a.disk_cpu_speed,
        // The data is whole: the disks' repair on start would fall on the first runs.
        no_auto_repair: true,
        ..UpArgs::local(a.disks)
    };
    up(&cdir, &args).await?;
    let result = async {
        let cluster = Arc::new(crate::common::connect(&cdir).await?);
        ensure_tpch(&cluster, &cdir, a.sf, Default::default()).await?;
        // The traces carry the links' figures: measured once here, not between runs.
        cluster.link_figures().await;
        let mut points = Vec::new();
        for (level, name) in levels.iter().zip(&a.levels) {
            let options = SqlOptions {
                offload: *level,
                buffer_kib: 1024,
                ..Default::default()
            };
            let engine = SqlEngine::new(cluster.clone(), options).await?;
            for (n, sql) in a.queries.iter().zip(&texts) {
                eprintln!("Q{n:02} at {name} …");
                points.push(measure(&engine, (*n, name), sql, &a).await?);
            }
        }
        print(&a, &points);
        Ok(())
    }
    .await;
    down(&cdir).await?;
    result
}

/// Runs `sql` (a warm-up, then the repeats), replaying each run's trace.
async fn measure(
    engine: &SqlEngine,
    (query, level): (u32, &str),
    sql: &str,
    a: &ReplayBenchArgs,
) -> Result<Point, CliError> {
    engine.query(sql).await?;
    let (mut measured, mut predicted) = (Vec::new(), Vec::new());
    let mut jobs = 0;
    for _ in 0..a.repeats.max(1) {
        let out = engine.query(sql).await?;
        let trace = engine.trace(&out, sql).await;
        let text = serde_json::to_string(&trace)
            .map_err(|e| CliError::Other(format!("encoding the trace: {e}")))?;
        if let Some(d) = &a.keep_traces {
            let path = d.join(format!("q{query:02}-{level}.json"));
            std::fs::write(&path, &text)
                .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
        }
        let parsed = adisk_sim::replay::trace::parse("trace", &text)?;
        // The runtime's CPU emulation pauses the DiskOS's compute steps only.
        let file = ReplayFile {
            disk_cpu_slows: Some(CpuSlows::Steps),
            ..ReplayFile::default()
        };
        let cfg = file.resolve("recording", &parsed.recorded)?;
        let report = adisk_sim::replay::replay(&parsed, &cfg, true)?;
        measured.push(out.wall.as_secs_f64());
        predicted.push(report.predicted_ns as f64 * 1e-9);
        jobs = report.jobs.len();
    }
    Ok(Point {
        query,
        level: level.into(),
        jobs,
        measured_s: median(measured),
        predicted_s: median(predicted),
    })
}

fn print(a: &ReplayBenchArgs, points: &[Point]) {
    println!(
        "adisk bench replay: TPC-H SF {} on {} disks{}; each run's trace replayed on its recorded configuration; medians of {}",
        a.sf,
        a.disks,
        a.disk_cpus
            .map_or(String::new(), |c| format!(" limited to {c} cores each"))
            + &a.disk_cpu_speed.map_or(String::new(), |s| format!(
                " at {s} of this machine's speed"
            )),
        a.repeats.max(1)
    );
    println!(
        "{:<6} {:<9} {:>5} {:>12} {:>13} {:>8}",
        "query", "level", "jobs", "measured_ms", "predicted_ms", "error"
    );
    for p in points {
        println!(
            "Q{:02}    {:<9} {:>5} {:>12.1} {:>13.1} {:>+7.1}%",
            p.query,
            p.level,
            p.jobs,
            p.measured_s * 1e3,
            p.predicted_s * 1e3,
            p.error_percent()
        );
    }
    let mut abs: Vec<f64> = points.iter().map(|p| p.error_percent().abs()).collect();
    if abs.is_empty() {
        return;
    }
    let within = abs.iter().filter(|e| **e <= 15.0).count();
    let worst = abs.iter().copied().fold(0.0, f64::max);
    abs.sort_by(f64::total_cmp);
    println!(
        "|error|: median {:.1} %, worst {worst:.1} %; within 15 %: {within} of {}",
        abs[abs.len() / 2],
        abs.len()
    );
}
