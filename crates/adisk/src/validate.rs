//! `adisk validate`: the simulator against the runtime over a matrix of configurations (issue
//! 37, acceptance 3). Each workload — a selection, an aggregate, a group-by, a join at the
//! disks, and applications (sort, convolution, data cube, association rules) — runs on local
//! clusters of 1–8 disks under emulated configurations (disk CPUs at a fraction of this
//! machine's speed, a disk read-rate limit, a throttled host link). Its trace recorded on one
//! reference configuration is replayed by the simulator on every other one (`adisk sim
//! replay`'s model, with the calibrated per-job costs when a cost file is given), and the
//! predicted time is set beside the measured median, with the error. A table, a JSON file
//! and a scatter plot (SVG) of predicted against measured.
use crate::bench_app::{self, median};
use crate::bench_tpch::ensure_tpch;
use crate::common::CliError;
use crate::local::{UpArgs, down, up};
use adisk_apps::Mode;
use adisk_core::trace::Trace;
use adisk_host::Cluster;
use adisk_host::sql::{Offload, SqlEngine, SqlOptions, tpch};
use adisk_sim::replay::config::{CpuSlows, RateValue, ReplayFile, ReplayOverrides};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Idle time before each run: several times the longest throttle burst.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(150);

/// Options of `adisk validate`.
#[derive(Args, Debug, Clone)]
pub struct ValidateArgs {
    /// TPC-H scale factor of the SQL workloads' data.
    #[arg(long, default_value_t = 0.2)]
    pub sf: f64,
    /// Disk counts (comma-separated); each gets its own local cluster under DIR.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub disks: Vec<u32>,
    /// Emulated configurations run at each disk count (comma-separated): `base`
    /// (unthrottled), `cpu-half` (disk CPUs at half speed), `read` (each disk's reads
    /// limited to `--read-mbps`), `link` (the host link limited to `--link-mbps`), `cpu-read`
    /// and `cpu-link` (half-speed CPUs with either limit).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "base,cpu-half,read,link,cpu-read,cpu-link"
    )]
    pub variants: Vec<String>,
    /// Workloads (comma-separated): select, aggregate, groupby, join, sort, conv, datacube,
    /// dmine.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "select,aggregate,groupby,join,sort,conv,datacube,dmine"
    )]
    pub workloads: Vec<String>,
    /// The configuration whose traces are replayed on all the others: disks (its variant is
    /// `base`).
    #[arg(long, default_value_t = 4)]
    pub reference_disks: u32,
    /// Measured runs per point (medians reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Runs of each point per start of a cluster, after one warm-up: the `--repeats` runs
    /// are spread over rounds, each round starting the cluster once per variant in turn, so
    /// a slow start or a drift over the run moves one run of every point, not one point.
    #[arg(long, default_value_t = 1)]
    pub per_start: usize,
    /// Size of each application's input, MB (10⁶ bytes).
    #[arg(long, default_value_t = 32)]
    pub app_mb: u64,
    /// Each disk's read rate in the `read` variants, Mbit/s.
    #[arg(long, default_value_t = 800)]
    pub read_mbps: u64,
    /// The host link in the `link` variant (all disks together), Mbit/s.
    #[arg(long, default_value_t = 200)]
    pub link_mbps: u64,
    /// DiskOS memory per disk, MiB.
    #[arg(long, default_value_t = 128)]
    pub memory_mib: u64,
    /// Cost file (`adisk calibrate`) whose per-job costs the replay uses when it changes the
    /// number of disks (default: DIR/costs.toml when there is one).
    #[arg(long)]
    pub costs: Option<PathBuf>,
    /// Where the JSON report and the SVG plot go (default: DIR).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Measure nothing: predict every point of an earlier run again from what it left in
    /// this directory (its `validate.json` and `validate-traces/`), e.g. after a change to
    /// the simulator's model. `--reference-disks` and `--costs` apply; the matrix is that
    /// run's.
    #[arg(long, value_name = "DIR")]
    pub again: Option<PathBuf>,
}

/// An emulated configuration.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
struct Variant {
    name: String,
    cpu_speed: Option<f64>,
    read_mbps: u64,
    link_mbps: u64,
}

impl Variant {
    fn parse(name: &str, a: &ValidateArgs) -> Result<Variant, CliError> {
        let (cpu_speed, read_mbps, link_mbps) = match name {
            "base" => (None, 0, 0),
            "cpu-half" => (Some(0.5), 0, 0),
            "read" => (None, a.read_mbps, 0),
            "link" => (None, 0, a.link_mbps),
            "cpu-read" => (Some(0.5), a.read_mbps, 0),
            "cpu-link" => (Some(0.5), 0, a.link_mbps),
            other => {
                return Err(CliError::Other(format!(
                    "unknown variant `{other}` (known: base, cpu-half, read, link, cpu-read, cpu-link)"
                )));
            }
        };
        Ok(Variant {
            name: name.into(),
            cpu_speed,
            read_mbps,
            link_mbps,
        })
    }
}

/// A workload: SQL at an offload level, or an application in active mode.
#[derive(Clone, Debug)]
enum Workload {
    Sql {
        name: &'static str,
        level: Offload,
        text: String,
    },
    App(&'static str),
}

impl Workload {
    fn name(&self) -> &str {
        match self {
            Workload::Sql { name, .. } => name,
            Workload::App(app) => app,
        }
    }

    fn parse(name: &str) -> Result<Workload, CliError> {
        let sql = |name, level, text: String| Ok(Workload::Sql { name, level, text });
        match name {
            "select" => sql(
                "select",
                Offload::Disks,
                "SELECT l_orderkey, l_partkey, l_extendedprice FROM lineitem WHERE l_quantity < 4"
                    .into(),
            ),
            "aggregate" => sql("aggregate", Offload::Disks, tpch::query(6)?.into()),
            "groupby" => sql(
                "groupby",
                Offload::Disks,
                "SELECT l_partkey, sum(l_quantity) AS q, count(*) AS n FROM lineitem GROUP BY l_partkey"
                    .into(),
            ),
            "join" => sql("join", Offload::Disks, tpch::query(3)?.into()),
            "sort" => Ok(Workload::App("sort")),
            "conv" => Ok(Workload::App("conv")),
            "datacube" => Ok(Workload::App("datacube")),
            "dmine" => Ok(Workload::App("dmine")),
            other => Err(CliError::Other(format!(
                "unknown workload `{other}` (known: select, aggregate, groupby, join, sort, conv, datacube, dmine)"
            ))),
        }
    }
}

/// One workload measured on one configuration: the median time and its run's trace.
struct Measured {
    seconds: f64,
    /// The median run's trace as written (`validate-traces/`) and as the simulator reads it:
    /// encoded and parsed once, replayed for every point it predicts.
    text: String,
    trace: adisk_sim::replay::trace::Trace,
}

/// One run: its time and trace.
struct Run {
    seconds: f64,
    trace: Trace,
}

/// One point of the matrix: measured, and predicted from two traces.
#[derive(Serialize)]
struct Point {
    workload: String,
    disks: u32,
    variant: Variant,
    measured_s: f64,
    /// From the trace of the same disks' `base` configuration.
    predicted_s: f64,
    error_percent: f64,
    /// From the reference configuration's trace (`--reference-disks`, `base`).
    from_reference_s: f64,
    from_reference_error_percent: f64,
}

pub async fn run(dir: &Path, a: ValidateArgs) -> Result<(), CliError> {
    let variants = (a.variants.iter())
        .map(|v| Variant::parse(v, &a))
        .collect::<Result<Vec<_>, _>>()?;
    let workloads = (a.workloads.iter())
        .map(|w| Workload::parse(w))
        .collect::<Result<Vec<_>, _>>()?;
    check_args(&a, &variants)?;
    let costs = job_costs(dir, a.costs.as_deref())?;
    if let Some(earlier) = &a.again {
        let (variants, measured) = earlier_run(earlier)?;
        let points = predict(&a, &variants, &measured, costs)?;
        return report(dir, &a, &points);
    }
    let mut runs: BTreeMap<(u32, String, String), Vec<Run>> = BTreeMap::new();
    let mut disks = a.disks.clone();
    disks.sort_unstable();
    disks.dedup();
    let per_start = a.per_start.clamp(1, a.repeats.max(1));
    let rounds = a.repeats.max(1).div_ceil(per_start);
    for n in disks {
        for round in 1..=rounds {
            let left = a.repeats.max(1) - (round - 1) * per_start;
            for v in &variants {
                eprintln!(
                    "validate: {n} disk(s), {}, round {round} of {rounds} …",
                    v.name
                );
                let got = measure_config(dir, &a, n, v, &workloads, left.min(per_start)).await?;
                for (w, mut r) in got {
                    runs.entry((n, v.name.clone(), w))
                        .or_default()
                        .append(&mut r);
                }
            }
        }
    }
    let measured = (runs.into_iter())
        .map(|(k, r)| Ok((k, median_run(r)?)))
        .collect::<Result<BTreeMap<_, _>, CliError>>()?;
    keep_traces(dir, &a, &measured)?;
    let points = predict(&a, &variants, &measured, costs)?;
    report(dir, &a, &points)
}

/// The variants and measured points of an earlier run in `dir` (`--again`).
fn earlier_run(dir: &Path) -> Result<MeasuredRun, CliError> {
    #[derive(serde::Deserialize)]
    struct Earlier {
        points: Vec<EarlierPoint>,
    }
    #[derive(serde::Deserialize)]
    struct EarlierPoint {
        workload: String,
        disks: u32,
        variant: Variant,
        measured_s: f64,
    }
    let read = |path: PathBuf| {
        std::fs::read_to_string(&path)
            .map_err(|e| CliError::Other(format!("--again: {}: {e}", path.display())))
    };
    let json = dir.join("validate.json");
    let earlier: Earlier = serde_json::from_str(&read(json.clone())?)
        .map_err(|e| CliError::Other(format!("--again: {}: {e}", json.display())))?;
    let mut variants: Vec<Variant> = Vec::new();
    let mut measured = BTreeMap::new();
    for p in earlier.points {
        let name = format!("{}-{}-{}.json", p.workload, p.disks, p.variant.name);
        let text = read(dir.join("validate-traces").join(&name))?;
        let trace = adisk_sim::replay::trace::parse(&name, &text)?;
        if !variants.contains(&p.variant) {
            variants.push(p.variant.clone());
        }
        let m = Measured {
            seconds: p.measured_s,
            text,
            trace,
        };
        measured.insert((p.disks, p.variant.name, p.workload), m);
    }
    Ok((variants, measured))
}

type MeasuredRun = (Vec<Variant>, BTreeMap<(u32, String, String), Measured>);

/// Every point's trace (its median run's) in OUT/validate-traces/WORKLOAD-DISKS-VARIANT.json,
/// for `adisk sim replay` and a look in Perfetto (`adisk sql --chrome-trace` makes those).
fn keep_traces(
    dir: &Path,
    a: &ValidateArgs,
    measured: &BTreeMap<(u32, String, String), Measured>,
) -> Result<(), CliError> {
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| dir.to_path_buf())
        .join("validate-traces");
    std::fs::create_dir_all(&out)
        .map_err(|e| CliError::Other(format!("{}: {e}", out.display())))?;
    for ((n, v, w), m) in measured {
        let path = out.join(format!("{w}-{n}-{v}.json"));
        std::fs::write(&path, &m.text)
            .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

fn check_args(a: &ValidateArgs, variants: &[Variant]) -> Result<(), CliError> {
    if !(a.sf > 0.0 && a.sf <= 10.0) {
        return Err(CliError::Other(format!("--sf {}: between 0 and 10", a.sf)));
    }
    if a.disks.is_empty() || a.disks.iter().any(|n| *n == 0 || *n > 16) {
        return Err(CliError::Other("--disks: each from 1 to 16".into()));
    }
    if !a.disks.contains(&a.reference_disks) || !variants.iter().any(|v| v.name == "base") {
        return Err(CliError::Other(format!(
            "the reference configuration ({} disks, base) must be in --disks and --variants",
            a.reference_disks
        )));
    }
    if a.repeats == 0 || a.repeats > 50 || a.app_mb == 0 || a.app_mb > 4096 {
        return Err(CliError::Other(
            "--repeats: 1 to 50; --app-mb: 1 to 4096".into(),
        ));
    }
    Ok(())
}

/// The calibrated fixed costs of a disk job (at the disk, at the host), ns, from the cost
/// file when there is one.
fn job_costs(dir: &Path, given: Option<&Path>) -> Result<Option<(f64, f64)>, CliError> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => dir.join(crate::calibrate::COSTS_FILE),
    };
    if given.is_none() && !path.exists() {
        return Ok(None);
    }
    let c = adisk_core::calibration::Calibration::load(&path)
        .map_err(|e| CliError::Other(e.to_string()))?;
    let get = |name| c.costs.get(name).map(|f| f.ns);
    Ok(get(adisk_core::calibration::STAGE).zip(get(adisk_core::calibration::JOB_HOST)))
}

/// Starts the cluster of `n` disks with variant `v`, makes sure its data is loaded, and
/// measures every workload on it.
async fn measure_config(
    dir: &Path,
    a: &ValidateArgs,
    n: u32,
    v: &Variant,
    workloads: &[Workload],
    repeats: usize,
) -> Result<Vec<(String, Vec<Run>)>, CliError> {
    let cdir = dir.join(format!("validate-{n}"));
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let args = UpArgs {
        memory_mib: a.memory_mib,
        disk_read_mbps: v.read_mbps,
        disk_cpu_speed: v.cpu_speed,
        no_serve: true,
        // Its data is whole: a disk's repair on start (a second after it starts, every disk
        // asking its peers for their catalogs) would fall on the first measured runs.
        no_auto_repair: true,
        ..UpArgs::local(n)
    };
    let config = up(&cdir, &args).await?;
    let result = async {
        let loader = Arc::new(crate::common::connect(&cdir).await?);
        ensure_data(&loader, &cdir, a, workloads).await?;
        // Data just loaded is written back meanwhile otherwise, during the first runs.
        // SAFETY: sync(2) takes no arguments and cannot fail.
        unsafe { libc::sync() };
        let mut c = config.clone();
        c.cluster.host_link_mbps = v.link_mbps;
        let cluster = Arc::new(Cluster::connect(c).await?);
        // The traces carry the links' figures; measured here, before the warm-ups, the probe's
        // streams do not load the disks and the host link during a measured run.
        cluster.link_figures().await;
        let mut out = Vec::new();
        for w in workloads {
            out.push((w.name().to_string(), measure(&cluster, w, repeats).await?));
        }
        Ok(out)
    }
    .await;
    down(&cdir).await?;
    result
}

/// TPC-H at `--sf` and each application's input, loaded once per cluster directory.
async fn ensure_data(
    cluster: &Arc<Cluster>,
    cdir: &Path,
    a: &ValidateArgs,
    workloads: &[Workload],
) -> Result<(), CliError> {
    if workloads.iter().any(|w| matches!(w, Workload::Sql { .. })) {
        ensure_tpch(cluster, cdir, a.sf, Default::default()).await?;
    }
    for w in workloads {
        let Workload::App(app) = w else { continue };
        let marker = cdir.join(format!("validate-{app}-{}mb", a.app_mb));
        if marker.exists() {
            continue;
        }
        eprintln!("validate: loading {app}'s input ({} MB) …", a.app_mb);
        bench_app::load(cluster, app, a.app_mb * 1_000_000).await?;
        std::fs::write(&marker, b"")
            .map_err(|e| CliError::Other(format!("{}: {e}", marker.display())))?;
    }
    Ok(())
}

/// A warm-up, then `repeats` runs.
async fn measure(
    cluster: &Arc<Cluster>,
    w: &Workload,
    repeats: usize,
) -> Result<Vec<Run>, CliError> {
    let mut runs = Vec::new();
    for i in 0..=repeats.max(1) {
        // The throttles are token buckets: idle long enough that each run starts with them
        // full, as the replay assumes.
        tokio::time::sleep(SETTLE).await;
        let run = once(cluster, w).await?;
        if i > 0 {
            runs.push(run);
        }
    }
    Ok(runs)
}

/// The median time of `runs` and the trace of the median run.
fn median_run(mut runs: Vec<Run>) -> Result<Measured, CliError> {
    let seconds = median(runs.iter().map(|r| r.seconds).collect());
    let pick = (runs.iter())
        .position(|r| r.seconds == seconds)
        .unwrap_or(0);
    let text = serde_json::to_string(&runs.swap_remove(pick).trace)
        .map_err(|e| CliError::Other(format!("encoding a trace: {e}")))?;
    let trace = adisk_sim::replay::trace::parse("a validation trace", &text)?;
    Ok(Measured {
        seconds,
        text,
        trace,
    })
}

/// One run of `w` with its trace.
async fn once(cluster: &Arc<Cluster>, w: &Workload) -> Result<Run, CliError> {
    match w {
        Workload::Sql { level, text, .. } => {
            let options = SqlOptions {
                offload: *level,
                buffer_kib: 1024,
                ..Default::default()
            };
            let engine = SqlEngine::new(cluster.clone(), options).await?;
            let out = engine.query(text).await?;
            let trace = engine.trace(&out, text).await;
            Ok(Run {
                seconds: out.wall.as_secs_f64(),
                trace,
            })
        }
        Workload::App(app) => {
            let cpu = adisk_core::stats::process_cpu_ns();
            let report = bench_app::run_app(cluster, app, Mode::Active).await?;
            let host_cpu = adisk_core::stats::process_cpu_ns().saturating_sub(cpu);
            let disks = cluster.config().disks.len() as u32;
            let recorded = adisk_host::sql::trace::recorded(cluster, disks).await;
            Ok(Run {
                seconds: report.seconds,
                trace: report.to_trace(recorded, host_cpu),
            })
        }
    }
}

/// Every point's predictions: the same disks' `base` trace and the reference configuration's,
/// each replayed on the point's configuration.
fn predict(
    a: &ValidateArgs,
    variants: &[Variant],
    measured: &BTreeMap<(u32, String, String), Measured>,
    costs: Option<(f64, f64)>,
) -> Result<Vec<Point>, CliError> {
    let mut points = Vec::new();
    for ((n, vname, wname), m) in measured {
        let v = (variants.iter().find(|v| &v.name == vname))
            .ok_or_else(|| CliError::Other(format!("no variant `{vname}`")))?;
        let get = |n: u32| {
            measured
                .get(&(n, "base".to_string(), wname.clone()))
                .ok_or_else(|| {
                    CliError::Other(format!("{wname} on {n} disk(s): no `base` measurement"))
                })
        };
        let (base, reference) = (get(*n)?, get(a.reference_disks)?);
        let predicted_s = replay_on(&base.trace, *n, v, costs)?;
        let from_reference_s = replay_on(&reference.trace, *n, v, costs)?;
        let error = |p: f64| (p / m.seconds.max(1e-12) - 1.0) * 100.0;
        points.push(Point {
            workload: wname.clone(),
            disks: *n,
            variant: v.clone(),
            measured_s: m.seconds,
            predicted_s,
            error_percent: error(predicted_s),
            from_reference_s,
            from_reference_error_percent: error(from_reference_s),
        });
    }
    Ok(points)
}

/// The simulator's time for `trace` replayed on `n` disks in variant `v`, seconds.
fn replay_on(
    trace: &adisk_sim::replay::trace::Trace,
    n: u32,
    v: &Variant,
    costs: Option<(f64, f64)>,
) -> Result<f64, CliError> {
    let mut cfg = ReplayFile::default()
        .with_overrides(&overrides(n, v))
        .resolve("validate", &trace.recorded)?;
    cfg.job_costs_ns = costs;
    let report = adisk_sim::replay::replay(trace, &cfg, false)?;
    Ok(report.predicted_ns as f64 * 1e-9)
}

/// What differs from the reference (`base`, recorded unthrottled).
fn overrides(n: u32, v: &Variant) -> ReplayOverrides {
    let rate = |mbps: u64| {
        Some(if mbps == 0 {
            RateValue::Word("unlimited".into())
        } else {
            RateValue::BytesPerSecond(mbps as f64 * 1e6 / 8.0)
        })
    };
    ReplayOverrides {
        disks: Some(n),
        disk_cpu_speed: Some(v.cpu_speed.unwrap_or(1.0)),
        // The runtime's CPU emulation pauses the DiskOS's compute steps only.
        disk_cpu_slows: Some(CpuSlows::Steps),
        disk_read_bytes_per_s: rate(v.read_mbps),
        disk_read_burst_s: Some(adisk_diskos::stream::READ_BURST_S),
        host_nic_bytes_per_s: rate(v.link_mbps),
        host_nic_burst_s: Some(adisk_host::client::throttle::BURST_S),
        ..Default::default()
    }
}

fn report(dir: &Path, a: &ValidateArgs, points: &[Point]) -> Result<(), CliError> {
    println!(
        "adisk validate: TPC-H SF {}, applications on {} MB; medians of {} runs; each point predicted from its disks' base trace and from the {}-disk base trace",
        a.sf,
        a.app_mb,
        a.repeats.max(1),
        a.reference_disks
    );
    println!(
        "{:<10} {:>5} {:<9} {:>12} {:>13} {:>8} {:>15} {:>8}",
        "workload",
        "disks",
        "variant",
        "measured_ms",
        "predicted_ms",
        "error",
        "from_ref_ms",
        "error"
    );
    for p in points {
        println!(
            "{:<10} {:>5} {:<9} {:>12.1} {:>13.1} {:>+7.1}% {:>15.1} {:>+7.1}%",
            p.workload,
            p.disks,
            p.variant.name,
            p.measured_s * 1e3,
            p.predicted_s * 1e3,
            p.error_percent,
            p.from_reference_s * 1e3,
            p.from_reference_error_percent
        );
    }
    let emulated: Vec<f64> = (points.iter())
        .filter(|p| p.variant.name != "base")
        .map(|p| p.error_percent)
        .collect();
    let recorded: Vec<f64> = (points.iter())
        .filter(|p| p.variant.name == "base")
        .map(|p| p.error_percent)
        .collect();
    let other_disks: Vec<f64> = (points.iter())
        .filter(|p| p.disks != a.reference_disks)
        .map(|p| p.from_reference_error_percent)
        .collect();
    let summary = serde_json::json!({
        "emulated": summary(&emulated),
        "recorded": summary(&recorded),
        "other_disks_from_reference": summary(&other_disks),
    });
    println!(
        "emulated configurations, predicted from the same disks' base trace: {}",
        summary["emulated"]["text"].as_str().unwrap_or("")
    );
    println!(
        "base configurations (the trace replayed on its own configuration): {}",
        summary["recorded"]["text"].as_str().unwrap_or("")
    );
    println!(
        "other disk counts, predicted from the {}-disk trace: {}",
        a.reference_disks,
        summary["other_disks_from_reference"]["text"]
            .as_str()
            .unwrap_or("")
    );
    let out = a.out.clone().unwrap_or_else(|| dir.to_path_buf());
    std::fs::create_dir_all(&out)
        .map_err(|e| CliError::Other(format!("{}: {e}", out.display())))?;
    let json = serde_json::json!({ "summary": summary, "points": points });
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
        println!("wrote {}", path.display());
        Ok::<_, CliError>(())
    };
    write("validate.json", json.to_string())?;
    let title = summary["emulated"]["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    write("validate.svg", plot(points, &title))
}

/// Median and worst absolute error of `errors` (percent), and how many are within 10 % and
/// 25 %: as JSON, with the same in words under `text`.
fn summary(errors: &[f64]) -> serde_json::Value {
    let mut abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    if abs.is_empty() {
        return serde_json::json!({ "points": 0, "text": "no points" });
    }
    abs.sort_by(f64::total_cmp);
    let within = |x: f64| abs.iter().filter(|e| **e <= x).count();
    let (median, worst) = (abs[abs.len() / 2], abs[abs.len() - 1]);
    let text = format!(
        "{} points: |error| median {median:.1} %, worst {worst:.1} %; within 10 %: {}, within 25 %: {}",
        abs.len(),
        within(10.0),
        within(25.0)
    );
    serde_json::json!({
        "points": abs.len(),
        "median_abs_error_percent": median,
        "worst_abs_error_percent": worst,
        "within_10_percent": within(10.0),
        "within_25_percent": within(25.0),
        "text": text,
    })
}

/// Predicted against measured, one colour per workload.
fn plot(points: &[Point], summary: &str) -> String {
    let mut by_workload: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for p in points {
        by_workload
            .entry(&p.workload)
            .or_default()
            .push((p.measured_s, p.predicted_s));
    }
    let series: Vec<(String, Vec<(f64, f64)>)> = by_workload
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    adisk_sim::svg::scatter(
        &format!("adisk validate, predicted from the same disks' base trace: {summary}"),
        "measured, s (log)",
        "predicted, s (log)",
        &series,
    )
}
