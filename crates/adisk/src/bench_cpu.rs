//! `adisk bench cpu`: how well the runtime stands in for a slower disk CPU. One disk runs a
//! CPU-bound application (active mode) under each `--cpus` limit (a cgroup quota, see
//! `cpu_limit`), or with `--speed` at each emulated processor speed (DiskOS pauses after
//! every compute step, `adisk disk --cpu-speed`); the disk job's wall time against the first
//! setting's is the slowdown, which should be the ratio of the settings. Medians of repeats,
//! side by side in one run.
use crate::bench_app::{APPS, load, median, run_app};
use crate::common::CliError;
use crate::local::{UpArgs, down, up};
use adisk_apps::Mode;
use adisk_host::Cluster;
use clap::Args;
use std::path::Path;

/// `adisk bench cpu`.
#[derive(Args, Debug)]
pub struct CpuBenchArgs {
    /// The application the disk runs (a CPU-bound one: conv, fft, cluster, dmine, …).
    #[arg(long, default_value = "conv")]
    pub app: String,
    /// The disk's CPU limits to compare, in cores' worth (the first is the reference); with
    /// `--speed`, the emulated speeds.
    #[arg(long, value_delimiter = ',', default_value = "1,0.5,0.25")]
    pub cpus: Vec<f64>,
    /// Emulate with DiskOS's processor speed (`adisk disk --cpu-speed`) instead of a cgroup
    /// quota: `--cpus` are speeds relative to this machine's cores.
    #[arg(long)]
    pub speed: bool,
    /// Input size, MB (10⁶ bytes).
    #[arg(long, default_value_t = 64)]
    pub size_mb: u64,
    /// Repeats per limit (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// The disk's memory, MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_mib: u64,
}

/// One limit's medians.
struct Row {
    cpus: f64,
    run_s: f64,
    disk_wall_s: f64,
    disk_cpu_s: f64,
}

pub async fn run(dir: &Path, a: CpuBenchArgs) -> Result<(), CliError> {
    if !APPS.contains(&a.app.as_str()) {
        return Err(CliError::Other(format!(
            "unknown application `{}` (known: {})",
            a.app,
            APPS.join(", ")
        )));
    }
    if a.cpus.is_empty() {
        return Err(CliError::Other("--cpus: give at least one limit".into()));
    }
    println!(
        "adisk bench cpu: {} (active) on 1 disk, {} MB input, median of {}; {} {:?}",
        a.app,
        a.size_mb,
        a.repeats.max(1),
        if a.speed {
            "emulated speeds (DiskOS)"
        } else {
            "cgroup quotas, cores"
        },
        a.cpus
    );
    let mut rows: Vec<Row> = Vec::new();
    for &cpus in &a.cpus {
        let row = one_limit(dir, &a, cpus).await?;
        print_row(&row, rows.first().unwrap_or(&row));
        rows.push(row);
    }
    Ok(())
}

/// Starts a one-disk cluster limited to `cpus`, loads the input, runs the application.
async fn one_limit(dir: &Path, a: &CpuBenchArgs, cpus: f64) -> Result<Row, CliError> {
    let cdir = dir.join("bench-cpu");
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let args = UpArgs {
        memory_mib: a.memory_mib,
        disk_cpus: (!a.speed).then_some(cpus),
        disk_cpu_speed: a.speed.then_some(cpus),
        ..UpArgs::local(1)
    };
    let config = up(&cdir, &args).await?;
    let result = async {
        if !a.speed {
            check_limit(&config, cpus)?;
        }
        let cluster = Cluster::connect(config.clone()).await?;
        eprintln!("cpus {cpus}: loading {} MB …", a.size_mb);
        load(&cluster, &a.app, a.size_mb * 1_000_000).await?;
        run_app(&cluster, &a.app, Mode::Active).await?; // warm-up
        let mut reports = Vec::new();
        for _ in 0..a.repeats.max(1) {
            reports.push(run_app(&cluster, &a.app, Mode::Active).await?);
        }
        let disk = |f: &dyn Fn(&adisk_apps::report::DiskTotals) -> f64| {
            median(
                reports
                    .iter()
                    .map(|r| r.totals().iter().map(f).sum())
                    .collect(),
            )
        };
        Ok(Row {
            cpus,
            run_s: median(reports.iter().map(|r| r.seconds).collect()),
            disk_wall_s: disk(&|t| t.wall_seconds),
            disk_cpu_s: disk(&|t| t.cpu_seconds),
        })
    }
    .await;
    down(&cdir).await?;
    result
}

/// The disk process really is in a group with the asked limit.
fn check_limit(config: &adisk_core::config::ClusterConfig, cpus: f64) -> Result<(), CliError> {
    let pid = config.disks[0]
        .pid
        .ok_or_else(|| CliError::Other("the disk's process id is not known".into()))?;
    match crate::cpu_limit::limit_of(pid) {
        Some((group, Some(got))) if (got - cpus).abs() < 0.01 => {
            eprintln!("disk 0 (pid {pid}) in cgroup {group}: {got} cores");
            Ok(())
        }
        other => Err(CliError::Other(format!(
            "disk 0 (pid {pid}) is not limited to {cpus} cores: {other:?}"
        ))),
    }
}

fn print_row(r: &Row, reference: &Row) {
    if std::ptr::eq(r, reference) {
        println!(
            "{:>6} {:>9} {:>12} {:>11} {:>9} {:>9} {:>7}",
            "cpus", "run_s", "disk_wall_s", "disk_cpu_s", "slowdown", "expected", "error"
        );
    }
    let slowdown = r.disk_wall_s / reference.disk_wall_s.max(1e-9);
    let expected = reference.cpus / r.cpus;
    println!(
        "{:>6} {:>9.3} {:>12.3} {:>11.3} {:>8.2}x {:>8.2}x {:>6.1}%",
        r.cpus,
        r.run_s,
        r.disk_wall_s,
        r.disk_cpu_s,
        slowdown,
        expected,
        (slowdown / expected - 1.0) * 100.0
    );
}
