//! Loading experiment files, expanding variants × sweep axes, running points, and writing
//! CSV, SVG and tables.

use crate::SimError;
use crate::arch;
use crate::config::{self, ArchKind, ExperimentFile};
use crate::costs::Costs;
use crate::engine::{Engine, Granularity};
use crate::report::{RunReport, csv};
use crate::svg;
use crate::workload::{self, context::Wctx};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A loaded experiment: parsed file plus the raw tree for overrides.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// Where it came from.
    pub path: PathBuf,
    /// Source text.
    pub src: String,
    /// Raw tree.
    pub raw: toml::Value,
    /// Parsed (base) experiment.
    pub exp: ExperimentFile,
}

/// Load from disk.
pub fn load(path: &Path) -> Result<Loaded, SimError> {
    let src = std::fs::read_to_string(path).map_err(|e| SimError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    load_str(path, &src)
}

/// Load from text (`path` names it in errors).
pub fn load_str(path: &Path, src: &str) -> Result<Loaded, SimError> {
    let raw: toml::Value = toml::from_str(src).map_err(|e| config::toml_error(path, src, &e))?;
    let exp = config::from_value(path, src, raw.clone())?;
    Ok(Loaded {
        path: path.to_path_buf(),
        src: src.to_string(),
        raw,
        exp,
    })
}

/// Paper keys.
pub const PAPERS: [&str; 5] = ["acharya", "uysal", "memik", "riedel", "chiu"];

/// Experiment files of `paper` (or all): from `dir`, ./experiments, the source tree, or the built-in copies.
pub fn sources(paper: &str, dir: Option<&Path>) -> Result<Vec<(PathBuf, String)>, SimError> {
    let papers: Vec<&str> = if paper == "all" {
        PAPERS.to_vec()
    } else if PAPERS.contains(&paper) {
        vec![paper]
    } else {
        return Err(SimError::Usage(format!(
            "unknown paper `{paper}`: expected one of {} or all",
            PAPERS.join(", ")
        )));
    };
    let candidates: Vec<PathBuf> = match dir {
        Some(d) => vec![d.to_path_buf()],
        None => vec![
            PathBuf::from("experiments"),
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments"),
        ],
    };
    let root = candidates
        .iter()
        .find(|c| papers.iter().any(|p| c.join(p).is_dir()))
        .cloned();
    let mut out = Vec::new();
    match root {
        Some(root) => {
            for p in &papers {
                let d = root.join(p);
                let Ok(rd) = std::fs::read_dir(&d) else {
                    continue;
                };
                let mut files: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                    .collect();
                files.sort();
                for f in files {
                    let text = std::fs::read_to_string(&f).map_err(|e| SimError::Io {
                        path: f.display().to_string(),
                        source: e,
                    })?;
                    out.push((f, text));
                }
            }
        }
        None => {
            if let Some(d) = dir {
                return Err(SimError::Usage(format!(
                    "no <paper>/*.toml under {}",
                    d.display()
                )));
            }
            for (path, text) in crate::embedded::EXPERIMENTS {
                if papers.iter().any(|p| path.starts_with(&format!("{p}/"))) {
                    out.push((PathBuf::from("experiments").join(path), text.to_string()));
                }
            }
        }
    }
    Ok(out)
}

/// One point of a sweep.
#[derive(Clone, Debug)]
pub struct Point {
    /// Axis → value label.
    pub labels: BTreeMap<String, String>,
    /// The experiment with overrides applied.
    pub exp: ExperimentFile,
}

/// A change applied to every point's raw tree after its variant and sweep values are set
/// (used by `sensitivity` to scale one key); returns a reason on failure.
pub type Adjust<'a> = &'a dyn Fn(&mut toml::Value) -> Result<(), String>;

/// Expand variants × the cartesian product of the sweep axes (or just the base when `sweep` is false).
pub fn points(l: &Loaded, sweep: bool) -> Result<Vec<Point>, SimError> {
    points_adjusted(l, sweep, &|_| Ok(()))
}

/// [`points`], with `adjust` applied to every point after its overrides.
pub fn points_adjusted(l: &Loaded, sweep: bool, adjust: Adjust) -> Result<Vec<Point>, SimError> {
    let file = l.path.display().to_string();
    let cfg_err = |key: &str, reason: String| SimError::Config {
        file: file.clone(),
        key: key.to_string(),
        reason,
    };
    let mut variants: Vec<(Option<String>, BTreeMap<String, toml::Value>)> = Vec::new();
    if sweep && !l.exp.variants.is_empty() {
        for v in &l.exp.variants {
            variants.push((Some(v.label.clone()), v.set.clone()));
        }
    } else {
        variants.push((None, BTreeMap::new()));
    }
    let mut axes: Vec<(String, Vec<toml::Value>)> = Vec::new();
    if sweep {
        for (k, v) in &l.exp.sweep {
            let vals = v.as_array().ok_or_else(|| {
                cfg_err(&format!("sweep.{k}"), "must be an array of values".into())
            })?;
            if vals.is_empty() {
                return Err(cfg_err(&format!("sweep.{k}"), "must not be empty".into()));
            }
            axes.push((k.clone(), vals.clone()));
        }
    }
    let mut out = Vec::new();
    for (label, set) in &variants {
        let mut combos: Vec<Vec<(String, toml::Value)>> = vec![Vec::new()];
        for (k, vals) in &axes {
            let mut next = Vec::new();
            for c in &combos {
                for v in vals {
                    let mut c2 = c.clone();
                    c2.push((k.clone(), v.clone()));
                    next.push(c2);
                }
            }
            combos = next;
        }
        for combo in combos {
            let mut raw = l.raw.clone();
            if let Some(t) = raw.as_table_mut() {
                t.remove("sweep");
                t.remove("variants");
            }
            let mut labels = BTreeMap::new();
            if let Some(lb) = label {
                labels.insert("variant".to_string(), lb.clone());
            }
            for (k, v) in set {
                config::set_dotted(&mut raw, k, v.clone())
                    .map_err(|r| cfg_err(&format!("variants.{k}"), r))?;
            }
            for (k, v) in &combo {
                config::set_dotted(&mut raw, k, v.clone())
                    .map_err(|r| cfg_err(&format!("sweep.{k}"), r))?;
                labels.insert(k.clone(), config::value_label(v));
            }
            adjust(&mut raw).map_err(|r| cfg_err("sensitivity", r))?;
            let exp = config::from_value(&l.path, &l.src, raw)?;
            out.push(Point { labels, exp });
        }
    }
    Ok(out)
}

/// Run one point.
pub fn run_point(path: &Path, p: &Point, seed: Option<u64>) -> Result<RunReport, SimError> {
    let exp = &p.exp;
    let file = path.display().to_string();
    let err = |(key, reason): (String, String)| SimError::Config {
        file: file.clone(),
        key,
        reason,
    };
    let sys_name = exp.run.system.clone();
    let mut sys = exp.systems.get(&sys_name).cloned().ok_or_else(|| {
        err((
            "run.system".into(),
            format!("no system named `{sys_name}` under [systems]"),
        ))
    })?;
    if let Some(d) = exp.run.disks {
        sys.disks = d;
    }
    for (k, v) in [
        ("run.request_kb", exp.run.request_kb),
        ("run.message_kb", exp.run.message_kb),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(err((
                k.into(),
                format!("must be a positive number of KB, got {v}"),
            )));
        }
    }
    let mut request_kb = exp.run.request_kb;
    if let Some(pk) = exp.workload.page_kb {
        if !(pk.is_finite() && pk > 0.0) {
            return Err(err((
                "workload.page_kb".into(),
                format!("must be > 0, got {pk}"),
            )));
        }
        request_kb = pk;
    }
    let seed = seed.unwrap_or(exp.experiment.seed);
    let topo = arch::build(&sys_name, &sys, &exp.devices, seed).map_err(err)?;
    let cost_err = |r: String| {
        let key = r
            .split(':')
            .next()
            .unwrap_or("workload.cost_overrides")
            .to_string();
        SimError::Config {
            file: file.clone(),
            key,
            reason: r,
        }
    };
    let mut named = calibrated(path, &exp.workload).map_err(|reason| SimError::Config {
        file: file.clone(),
        key: "workload.calibration".into(),
        reason,
    })?;
    named.extend(exp.workload.cost_overrides.clone());
    let costs = Costs::new(&named).map_err(cost_err)?;
    let mut merged = named;
    merged.extend(sys.worker_cost_overrides.clone());
    let worker_costs = Costs::new(&merged).map_err(|r| {
        let r = r.replace(
            "workload.cost_overrides",
            &format!("systems.{sys_name}.worker_cost_overrides"),
        );
        cost_err(r)
    })?;
    let request_bytes = (request_kb * 1024.0).round() as u64;
    let mut ctx = Wctx::new(&topo, sys.kind, &costs, &worker_costs, request_bytes as f64);
    ctx.sort_phase_one_requests = sys
        .queue_depth_sort_phase_one
        .map(|q| (topo.buffers_per_worker * q / sys.queue_depth.max(1)).max(2));
    keep_base_tables(&exp.workload, &sys, &mut ctx);
    let plan = workload::compile(&exp.workload, &ctx).map_err(err)?;
    let gran = Granularity {
        request_bytes,
        message_bytes: (exp.run.message_kb * 1024.0).round() as u64,
        max_chunks_per_phase: exp.run.max_chunks_per_phase.max(16),
        control_bytes: costs.get("message_bytes_sync") as u64,
        copy_cycles_per_byte: costs.get("copy_cycles_per_byte"),
        shared_queue_lock_us: costs.get("shared_queue_lock_us"),
    };
    let description = topo.description.clone();
    let notes = plan.notes.clone();
    let input: f64 = plan.base_files.iter().map(|(_, b)| *b).sum();
    let out = Engine::new(topo, &plan, gran).run();
    Ok(RunReport::new(
        &exp.experiment.name,
        p.labels.clone(),
        &sys_name,
        &description,
        out,
        notes,
        input,
    ))
}

/// uysal-… §4: "To take advantage of the additional memory available in the 64 MB/disk and
/// 128 MB/disk configurations, the number of buffers allocated per stream by the DiskOS was
/// increased from two to four and eight respectively"; §3: only "Sort, Join and Datacube"
/// were traced "for multiple memory sizes". A workload that does not take the memory as a
/// parameter keeps the base configuration's tables; the added memory holds the added buffers.
/// The `[sim]` costs of the experiment's `workload.calibration` file (`adisk calibrate`),
/// its path relative to the experiment file's directory; none without one.
fn calibrated(
    experiment: &Path,
    w: &config::WorkloadConfig,
) -> Result<std::collections::BTreeMap<String, f64>, String> {
    let Some(file) = &w.calibration else {
        return Ok(Default::default());
    };
    let path = match experiment.parent() {
        Some(dir) if file.is_relative() => dir.join(file),
        _ => file.clone(),
    };
    let len = std::fs::metadata(&path)
        .map_err(|e| format!("cannot read cost file {}: {e}", path.display()))?
        .len();
    if len > 1 << 20 {
        return Err(format!("cost file {} is larger than 1 MiB", path.display()));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read cost file {}: {e}", path.display()))?;
    let value: toml::Value = toml::from_str(&text)
        .map_err(|e| format!("cost file {} is malformed: {e}", path.display()))?;
    let Some(sim) = value.get("sim").and_then(toml::Value::as_table) else {
        return Err(format!(
            "cost file {} has no [sim] table (write it with `adisk calibrate`)",
            path.display()
        ));
    };
    sim.iter()
        .map(|(k, v)| {
            let v = v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
            match v {
                Some(v) if v.is_finite() && v >= 0.0 => Ok((k.clone(), v)),
                _ => Err(format!(
                    "cost file {}: sim.{k} must be a number >= 0",
                    path.display()
                )),
            }
        })
        .collect()
}

fn keep_base_tables(w: &config::WorkloadConfig, sys: &config::SystemConfig, ctx: &mut Wctx) {
    let (Some(false), Some(base_mb), ArchKind::ActiveDisks) =
        (w.memory_parametrised, sys.base_disk_memory_mb, sys.kind)
    else {
        return;
    };
    let buffers = sys
        .base_buffers_per_stream
        .unwrap_or(sys.buffers_per_stream) as f64;
    let base = workload::context::algorithm_memory(
        base_mb * 1e6,
        1,
        workload::context::DISKOS_FOOTPRINT_BYTES,
        buffers * ctx.request_bytes,
    );
    ctx.mem_per_worker = base.min(ctx.mem_per_worker);
}

/// Run points on up to `threads` threads; results in point order. Progress goes to stderr.
pub fn run_points(
    path: &Path,
    pts: &[Point],
    seed: Option<u64>,
    progress: bool,
) -> Result<Vec<RunReport>, SimError> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 2);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<RunReport, SimError>>>> =
        pts.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= pts.len() {
                        break;
                    }
                    let r = run_point(path, &pts[i], seed);
                    let k = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    if progress {
                        let label: Vec<String> = pts[i]
                            .labels
                            .iter()
                            .map(|(a, b)| format!("{a}={b}"))
                            .collect();
                        eprintln!(
                            "[{k}/{}] {} {}",
                            pts.len(),
                            pts[i].exp.experiment.name,
                            label.join(" ")
                        );
                    }
                    if let Ok(mut slot) = results[i].lock() {
                        *slot = Some(r);
                    }
                }
            });
        }
    });
    let mut out = Vec::new();
    for r in results {
        let v = r
            .into_inner()
            .ok()
            .flatten()
            .ok_or_else(|| SimError::Internal("a sweep worker did not report".into()))?;
        out.push(v?);
    }
    Ok(out)
}

/// Derived metric of each report relative to its baseline (None when no baseline matches).
pub fn baseline_ratios(
    reports: &[RunReport],
    baseline: &BTreeMap<String, toml::Value>,
) -> Vec<Option<f64>> {
    if baseline.is_empty() {
        return vec![None; reports.len()];
    }
    let want: BTreeMap<String, String> = baseline
        .iter()
        .map(|(k, v)| (k.clone(), config::value_label(v)))
        .collect();
    reports
        .iter()
        .map(|r| {
            let b = reports.iter().find(|b| {
                want.iter().all(|(k, v)| b.point.get(k) == Some(v))
                    && r.point
                        .iter()
                        .all(|(k, v)| want.contains_key(k) || b.point.get(k) == Some(v))
            })?;
            if b.total_s > 0.0 {
                Some(r.total_s / b.total_s)
            } else {
                None
            }
        })
        .collect()
}

/// The summary CSV of a sweep.
pub fn summary_csv(reports: &[RunReport], ratios: &[Option<f64>]) -> String {
    let mut axes: Vec<String> = Vec::new();
    for r in reports {
        for k in r.point.keys() {
            if !axes.contains(k) {
                axes.push(k.clone());
            }
        }
    }
    let mut s = String::new();
    for a in &axes {
        s.push_str(&csv(a));
        s.push(',');
    }
    s.push_str("system,total_s,throughput_mbps,normalized,speedup,compute_s,io_s,comm_s,compute_max_s,io_max_s,comm_max_s,bottleneck,bottleneck_utilization,events,notes\n");
    for (r, ratio) in reports.iter().zip(ratios) {
        for a in &axes {
            s.push_str(&csv(r.point.get(a).map(String::as_str).unwrap_or("")));
            s.push(',');
        }
        let b = &r.breakdown;
        let notes: Vec<String> = r.notes.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            s,
            "{},{:.6},{:.4},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{},{:.4},{},{}",
            csv(&r.system),
            r.total_s,
            r.throughput_mbps,
            ratio.map(|x| format!("{x:.6}")).unwrap_or_default(),
            ratio
                .map(|x| if x > 0.0 {
                    format!("{:.6}", 1.0 / x)
                } else {
                    String::new()
                })
                .unwrap_or_default(),
            b.compute_s,
            b.io_s,
            b.comm_s,
            b.compute_max_s,
            b.io_max_s,
            b.comm_max_s,
            csv(&r.bottleneck),
            r.bottleneck_utilization,
            r.events,
            csv(&notes.join("; "))
        );
    }
    s
}

/// All resources of all runs (bytes over every link, utilisation of every resource).
pub fn resources_csv(reports: &[RunReport]) -> String {
    let mut s = String::from("point,");
    s.push_str("resource,component,kind,busy_s,utilization,bytes_in,bytes_out,ops\n");
    for r in reports {
        let label: Vec<String> = r.point.iter().map(|(a, b)| format!("{a}={b}")).collect();
        let label = csv(&label.join(" "));
        for line in r.resources_csv().lines().skip(1) {
            let _ = writeln!(s, "{label},{line}");
        }
    }
    s
}

/// Printed table of a sweep.
pub fn summary_table(
    name: &str,
    recreates: &str,
    reports: &[RunReport],
    ratios: &[Option<f64>],
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "== {name} — re-creates {recreates}");
    let _ = writeln!(
        s,
        "{:<58} {:>11} {:>8} {:>9} {:>9} {:>9}  bottleneck",
        "point", "total_s", "norm", "cpu_s", "io_s", "comm_s"
    );
    for (r, ratio) in reports.iter().zip(ratios) {
        let label: Vec<String> = r
            .point
            .iter()
            .map(|(a, b)| format!("{}={b}", a.rsplit('.').next().unwrap_or(a)))
            .collect();
        let mut label = label.join(" ");
        if label.is_empty() {
            label = r.system.clone();
        }
        let b = &r.breakdown;
        let _ = writeln!(
            s,
            "{:<58} {:>11.3} {:>8} {:>9.3} {:>9.3} {:>9.3}  {} ({:.0}%)",
            label,
            r.total_s,
            ratio
                .map(|x| format!("{x:.3}"))
                .unwrap_or_else(|| "-".into()),
            b.compute_max_s,
            b.io_max_s,
            b.comm_max_s,
            r.bottleneck,
            r.bottleneck_utilization * 100.0
        );
    }
    s
}

/// Averages of the normalized time over `axis` (memik-… Table 8 style): one row per other-axes combination.
pub fn average_table(reports: &[RunReport], ratios: &[Option<f64>], axis: &str) -> String {
    let mut groups: BTreeMap<String, (f64, usize, f64)> = BTreeMap::new();
    for (r, ratio) in reports.iter().zip(ratios) {
        let key: Vec<String> = r
            .point
            .iter()
            .filter(|(k, _)| k.as_str() != axis)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let e = groups.entry(key.join(" ")).or_default();
        e.0 += ratio.unwrap_or(f64::NAN);
        e.1 += 1;
        e.2 += r.total_s;
    }
    let mut s = format!("group,mean_normalized,mean_total_s,runs (averaged over {axis})\n");
    for (k, (sum, n, tot)) in groups {
        let _ = writeln!(
            s,
            "{},{:.6},{:.6},{}",
            csv(&k),
            sum / n as f64,
            tot / n as f64,
            n
        );
    }
    s
}

/// The label of each run's bar: its `report.series` value, then its other non-x values,
/// else its system.
fn series_labels(
    reports: &[RunReport],
    rep: &crate::config::ReportConfig,
    x_axis: &str,
) -> Vec<String> {
    reports
        .iter()
        .map(|r| {
            let mut parts: Vec<String> = Vec::new();
            if let Some(sk) = &rep.series {
                parts.push(r.point.get(sk).cloned().unwrap_or_default());
            }
            for (k, v) in &r.point {
                if Some(k) != rep.series.as_ref() && k != x_axis {
                    parts.push(v.clone());
                }
            }
            if parts.is_empty() {
                r.system.clone()
            } else {
                parts.join(" ")
            }
        })
        .collect()
}

/// Write CSV, SVG and table of a sweep into `out`; returns the printed table.
pub fn write_outputs(l: &Loaded, reports: &[RunReport], out: &Path) -> Result<String, SimError> {
    std::fs::create_dir_all(out).map_err(|e| SimError::Io {
        path: out.display().to_string(),
        source: e,
    })?;
    let name = &l.exp.experiment.name;
    let rep = &l.exp.report;
    let ratios = baseline_ratios(reports, &rep.baseline);
    let write = |file: String, text: &str| -> Result<(), SimError> {
        let p = out.join(file);
        std::fs::write(&p, text).map_err(|e| SimError::Io {
            path: p.display().to_string(),
            source: e,
        })
    };
    write(format!("{name}.csv"), &summary_csv(reports, &ratios))?;
    write(format!("{name}.resources.csv"), &resources_csv(reports))?;
    let mut table = summary_table(name, &l.exp.experiment.recreates, reports, &ratios);
    if let Some(axis) = &rep.average_over {
        let avg = average_table(reports, &ratios, axis);
        write(format!("{name}.average.csv"), &avg)?;
        table.push_str(&format!("averaged over {axis}:\n{avg}"));
    }
    write(format!("{name}.txt"), &table)?;
    let chart = chart(l, reports, &ratios)?;
    write(format!("{name}.svg"), &chart)?;
    Ok(table)
}

/// The sweep's chart (`report.style`): a line per series over the x axis, or bars of the
/// breakdown stacked per x value.
fn chart(l: &Loaded, reports: &[RunReport], ratios: &[Option<f64>]) -> Result<String, SimError> {
    let rep = &l.exp.report;
    let y = rep.y.clone().unwrap_or_else(|| {
        if rep.baseline.is_empty() {
            "total_s".into()
        } else {
            "normalized".into()
        }
    });
    let x_axis = rep
        .x
        .clone()
        .or_else(|| reports.first().and_then(|r| r.point.keys().last().cloned()))
        .unwrap_or_default();
    let title = format!("{} ({})", l.exp.experiment.name, l.exp.experiment.recreates);
    match rep.style.as_deref() {
        None | Some("lines") => {
            let series = line_series(reports, ratios, rep, &x_axis, &y);
            Ok(svg::line_chart(&title, &x_axis, &y, &series, rep.log_y))
        }
        Some("stacked") => {
            let groups = bar_groups(reports, ratios, rep, &x_axis, &y);
            Ok(svg::stacked_bars(
                &title,
                &y,
                &["computation", "I/O", "communication"],
                &groups,
            ))
        }
        Some(other) => Err(SimError::Config {
            file: l.path.display().to_string(),
            key: "report.style".into(),
            reason: format!("must be lines or stacked, got `{other}`"),
        }),
    }
}

/// A run's x value: its value of `x_axis`, else its system.
fn x_value(r: &RunReport, x_axis: &str) -> String {
    r.point
        .get(x_axis)
        .cloned()
        .unwrap_or_else(|| r.system.clone())
}

/// The line series of the runs: one per series name, a point per x value.
fn line_series(
    reports: &[RunReport],
    ratios: &[Option<f64>],
    rep: &crate::config::ReportConfig,
    x_axis: &str,
    y: &str,
) -> Vec<svg::Series> {
    let mut series: Vec<svg::Series> = Vec::new();
    for (r, ratio) in reports.iter().zip(ratios) {
        let sname = series_name(r, rep, x_axis);
        let yv = match y {
            "normalized" => ratio.unwrap_or(f64::NAN),
            "speedup" => ratio
                .map(|x| if x > 0.0 { 1.0 / x } else { f64::NAN })
                .unwrap_or(f64::NAN),
            "throughput_mbps" => r.throughput_mbps,
            _ => r.total_s,
        };
        let xv = x_value(r, x_axis);
        match series.iter_mut().find(|s| s.label == sname) {
            Some(s) => s.points.push((xv, yv)),
            None => series.push(svg::Series {
                label: sname,
                points: vec![(xv, yv)],
            }),
        }
    }
    series
}

/// The line a run belongs to: its `report.series` value followed by its other non-x values,
/// or (without `report.series`) its non-x values, else its system.
fn series_name(r: &RunReport, rep: &crate::config::ReportConfig, x_axis: &str) -> String {
    let sname = match &rep.series {
        Some(sk) => r.point.get(sk).cloned().unwrap_or_default(),
        None => {
            let others: Vec<String> = r
                .point
                .iter()
                .filter(|(k, _)| **k != x_axis)
                .map(|(_, v)| v.clone())
                .collect();
            if others.is_empty() {
                r.system.clone()
            } else {
                others.join(" ")
            }
        }
    };
    if rep.series.is_some() {
        let rest: Vec<String> = r
            .point
            .iter()
            .filter(|(k, _)| Some(*k) != rep.series.as_ref() && **k != x_axis)
            .map(|(_, v)| v.clone())
            .collect();
        if rest.is_empty() {
            sname
        } else {
            format!("{sname} {}", rest.join(" "))
        }
    } else {
        sname
    }
}

/// The stacked bars of the runs, grouped by x value: computation, I/O and communication of
/// each run (scaled to its normalized time when `y` is `normalized`).
fn bar_groups(
    reports: &[RunReport],
    ratios: &[Option<f64>],
    rep: &crate::config::ReportConfig,
    x_axis: &str,
    y: &str,
) -> Vec<(String, Vec<svg::Bar>)> {
    let mut groups: Vec<(String, Vec<svg::Bar>)> = Vec::new();
    for ((r, ratio), ser) in reports
        .iter()
        .zip(ratios)
        .zip(series_labels(reports, rep, x_axis))
    {
        let scale = match y {
            "normalized" => ratio
                .map(|x| if r.total_s > 0.0 { x / r.total_s } else { 0.0 })
                .unwrap_or(f64::NAN),
            _ => 1.0,
        };
        let b = &r.breakdown;
        let bar = svg::Bar {
            label: ser,
            segments: vec![b.compute_s * scale, b.io_s * scale, b.comm_s * scale],
        };
        let xv = x_value(r, x_axis);
        match groups.iter_mut().find(|g| g.0 == xv) {
            Some(g) => g.1.push(bar),
            None => groups.push((xv, vec![bar])),
        }
    }
    groups
}
