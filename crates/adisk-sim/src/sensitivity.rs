//! `adisk sim sensitivity FILE [--factor 2]`: rerun an experiment with each assumption
//! halved and doubled and report which of its comparisons change (issue 15, point 3).
//!
//! The assumptions are the numeric keys of the file tagged `# assumption:` (see `trace`) and
//! the processing costs whose source in `costs::COSTS` is an assumption. Each is multiplied
//! by `1/factor` and by `factor` at every sweep point, after the point's variant and sweep
//! values are applied (so a variant that sets the key is scaled too). Integers are rounded
//! and kept at least 1.
//!
//! Comparisons:
//! * **rankings**: at each point of the other axes, the order of the series (the report's
//!   `series` axis, else `run.system`, else the swept axis of the report's baseline, else the
//!   first swept axis other than `x`) by total
//!   time. A pair counts as flipped only if its order changes and the two times differ by at
//!   least 1% in the base run or the rerun (closer pairs are ties).
//! * **crossovers**: for each pair of series and each value of the remaining axes, the
//!   values of `x` between which the faster series changes.
//! * **ranges**: with a baseline, each series' range (min–max) of normalized time; changed
//!   when an end moves by more than 10%.
//! * **conclusions**: the verdict of every stated conclusion whose runs all come from this
//!   file.
//!
//! `adisk sim sensitivity-conclusions` ([`conclusions_run`]) covers the conclusions whose
//! runs span several files: it scales each assumption of the files they need and lists, per
//! conclusion, the scalings that change its verdict (issue 38).

use crate::SimError;
use crate::conclusions;
use crate::conclusions::check::{Conclusion, Runs};
use crate::config;
use crate::costs::COSTS;
use crate::experiment::{self, Loaded};
use crate::report::RunReport;
use crate::trace;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// A key the sensitivity run scales.
#[derive(Clone, Debug, PartialEq)]
pub struct AssumptionKey {
    /// Dotted key in the experiment tree.
    pub path: String,
    /// Value used when a point does not set the key (cost defaults).
    pub default: Option<f64>,
}

/// Numeric assumption keys of an experiment file, then assumed cost parameters; plus the
/// assumption keys that are not scalable numbers (listed, not scaled).
pub fn assumption_keys(text: &str) -> (Vec<AssumptionKey>, Vec<String>) {
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    for k in trace::scan(text)
        .0
        .into_iter()
        .filter(|k| k.is_assumption())
    {
        let top = k.path.split('.').next().unwrap_or("");
        let scalable = !matches!(top, "sweep" | "report" | "experiment")
            && !top.starts_with("variants")
            && parse_value(&k.value_text).is_some_and(|v| scale_value(&v, 1.0).is_some());
        if scalable {
            keys.push(AssumptionKey {
                path: k.path,
                default: None,
            });
        } else {
            skipped.push(k.path);
        }
    }
    for (name, value, source) in COSTS {
        if source.starts_with("assumption") {
            keys.push(AssumptionKey {
                path: format!("workload.cost_overrides.{name}"),
                default: Some(*value),
            });
        }
    }
    (keys, skipped)
}

fn parse_value(text: &str) -> Option<toml::Value> {
    let table: toml::Table = toml::from_str(&format!("v = {text}")).ok()?;
    table.get("v").cloned()
}

/// `v` scaled by `factor` (integers rounded, at least 1); None if `v` is not numeric.
pub fn scale_value(v: &toml::Value, factor: f64) -> Option<toml::Value> {
    match v {
        toml::Value::Integer(i) => Some(toml::Value::Integer(
            ((*i as f64 * factor).round() as i64).max(1),
        )),
        toml::Value::Float(f) => Some(toml::Value::Float(f * factor)),
        toml::Value::Array(items) => items
            .iter()
            .map(|x| scale_value(x, factor))
            .collect::<Option<Vec<_>>>()
            .map(toml::Value::Array),
        _ => None,
    }
}

fn scaler(
    key: &AssumptionKey,
    factor: f64,
) -> impl Fn(&mut toml::Value) -> Result<(), String> + '_ {
    move |raw: &mut toml::Value| {
        let current = config::get_dotted(raw, &key.path)
            .cloned()
            .or_else(|| key.default.map(toml::Value::Float));
        let Some(current) = current else {
            return Ok(()); // this point does not use the key
        };
        let scaled = scale_value(&current, factor)
            .ok_or_else(|| format!("{} is not a number at this point", key.path))?;
        config::set_dotted(raw, &key.path, scaled)
    }
}

/// What changed in one rerun.
#[derive(Clone, Debug, Default)]
pub struct Changes {
    /// Ranking flips: "point: a<b → b<a".
    pub rankings: Vec<String>,
    /// Ranking groups compared.
    pub ranking_groups: usize,
    /// Crossover changes.
    pub crossovers: Vec<String>,
    /// Range changes.
    pub ranges: Vec<String>,
    /// Conclusion verdict changes.
    pub conclusions: Vec<String>,
    /// The rerun failed (reason).
    pub failed: Option<String>,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_unchanged(&self) -> bool {
        self.rankings.is_empty()
            && self.crossovers.is_empty()
            && self.ranges.is_empty()
            && self.conclusions.is_empty()
            && self.failed.is_none()
    }
}

fn series_axis(l: &Loaded, reports: &[RunReport]) -> Option<String> {
    if let Some(s) = &l.exp.report.series {
        return Some(s.clone());
    }
    let swept: Vec<String> = distinct_axes(reports);
    if swept.iter().any(|a| a == "run.system") {
        return Some("run.system".into());
    }
    if let Some(axis) = l.exp.report.baseline.keys().find(|k| swept.contains(k)) {
        return Some(axis.clone());
    }
    swept
        .into_iter()
        .find(|a| Some(a) != l.exp.report.x.as_ref())
}

fn distinct_axes(reports: &[RunReport]) -> Vec<String> {
    let mut values: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in reports {
        for (k, v) in &r.point {
            values.entry(k.as_str()).or_default().insert(v.as_str());
        }
    }
    values
        .into_iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(k, _)| k.to_string())
        .collect()
}

fn key_without(r: &RunReport, skip: &[&str]) -> String {
    r.point
        .iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .map(|(k, v)| format!("{}={v}", k.rsplit('.').next().unwrap_or(k)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// (group → series → total_s) in file order.
type Grouped = BTreeMap<String, Vec<(String, f64)>>;

fn group(reports: &[RunReport], skip: &[&str], series: &str) -> Grouped {
    let mut g: Grouped = BTreeMap::new();
    for r in reports {
        let s = r
            .point
            .get(series)
            .cloned()
            .unwrap_or_else(|| r.system.clone());
        g.entry(key_without(r, skip))
            .or_default()
            .push((s, r.total_s));
    }
    g
}

fn ranking_flips(base: &[RunReport], rerun: &[RunReport], series: &str) -> (Vec<String>, usize) {
    let b = group(base, &[series], series);
    let p = group(rerun, &[series], series);
    let mut flips = Vec::new();
    for (point, bs) in &b {
        let Some(ps) = p.get(point) else { continue };
        for i in 0..bs.len() {
            for j in i + 1..bs.len() {
                let (Some(pi), Some(pj)) = (ps.get(i), ps.get(j)) else {
                    continue;
                };
                let (bi, bj) = (bs[i].1, bs[j].1);
                let clear = |a: f64, c: f64| (a - c).abs() >= 0.01 * a.max(c);
                if (bi < bj) != (pi.1 < pj.1) && (clear(bi, bj) || clear(pi.1, pj.1)) {
                    let order = |x: f64, y: f64| if x < y { "<" } else { ">" };
                    flips.push(format!(
                        "{point}: {} {} {} became {}",
                        bs[i].0,
                        order(bi, bj),
                        bs[j].0,
                        order(pi.1, pj.1)
                    ));
                }
            }
        }
    }
    (flips, b.len())
}

fn crossovers(reports: &[RunReport], series: &str, x: &str) -> BTreeMap<String, Vec<String>> {
    // group by the other axes, then by series: (x value, total) in file order.
    let mut g: BTreeMap<String, BTreeMap<String, Vec<(String, f64)>>> = BTreeMap::new();
    for r in reports {
        let s = r.point.get(series).cloned().unwrap_or_default();
        let xv = r.point.get(x).cloned().unwrap_or_default();
        g.entry(key_without(r, &[series, x]))
            .or_default()
            .entry(s)
            .or_default()
            .push((xv, r.total_s));
    }
    let mut out = BTreeMap::new();
    for (others, by_series) in g {
        let names: Vec<&String> = by_series.keys().collect();
        for i in 0..names.len() {
            for j in i + 1..names.len() {
                let (a, b) = (&by_series[names[i]], &by_series[names[j]]);
                let mut at = Vec::new();
                for k in 1..a.len().min(b.len()) {
                    if (a[k - 1].1 < b[k - 1].1) != (a[k].1 < b[k].1) {
                        at.push(format!("{}-{}", a[k - 1].0, a[k].0));
                    }
                }
                out.insert(format!("{others} {} vs {}", names[i], names[j]), at);
            }
        }
    }
    out
}

fn ranges(l: &Loaded, reports: &[RunReport], series: &str) -> BTreeMap<String, (f64, f64)> {
    let ratios = experiment::baseline_ratios(reports, &l.exp.report.baseline);
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (r, ratio) in reports.iter().zip(ratios) {
        let Some(x) = ratio else { continue };
        let s = r
            .point
            .get(series)
            .cloned()
            .unwrap_or_else(|| r.system.clone());
        let e = out.entry(s).or_insert((x, x));
        e.0 = e.0.min(x);
        e.1 = e.1.max(x);
    }
    out
}

fn own_conclusions(file: &str) -> Vec<&'static Conclusion> {
    conclusions::CONCLUSIONS
        .iter()
        .filter(|c| c.needs.iter().all(|n| n.file == file))
        .collect()
}

fn verdicts(file: &str, reports: &[RunReport]) -> BTreeMap<&'static str, Option<bool>> {
    let mut runs = Runs::default();
    runs.add(file, reports.to_vec());
    own_conclusions(file)
        .into_iter()
        .map(|c| (c.id, (c.check)(&runs).ok().map(|o| o.holds)))
        .collect()
}

/// Compare a rerun with the base run.
pub fn compare(l: &Loaded, file: &str, base: &[RunReport], rerun: &[RunReport]) -> Changes {
    let mut ch = Changes::default();
    let Some(series) = series_axis(l, base) else {
        return ch;
    };
    (ch.rankings, ch.ranking_groups) = ranking_flips(base, rerun, &series);
    if let Some(x) = l.exp.report.x.as_ref().filter(|x| **x != series) {
        let (b, p) = (crossovers(base, &series, x), crossovers(rerun, &series, x));
        for (pair, at) in &b {
            let now = p.get(pair).cloned().unwrap_or_default();
            if *at != now {
                ch.crossovers.push(format!("{pair}: {at:?} became {now:?}"));
            }
        }
    }
    if !l.exp.report.baseline.is_empty() {
        let (b, p) = (ranges(l, base, &series), ranges(l, rerun, &series));
        for (s, (lo, hi)) in &b {
            let Some((plo, phi)) = p.get(s) else { continue };
            if (plo / lo - 1.0).abs() > 0.1 || (phi / hi - 1.0).abs() > 0.1 {
                ch.ranges
                    .push(format!("{s}: {lo:.2}-{hi:.2} became {plo:.2}-{phi:.2}"));
            }
        }
    }
    let (vb, vp) = (verdicts(file, base), verdicts(file, rerun));
    for (id, before) in vb {
        let after = vp.get(id).copied().flatten();
        if before != after {
            let word = |v: Option<bool>| match v {
                Some(true) => "holds",
                Some(false) => "fails",
                None => "not evaluated",
            };
            ch.conclusions
                .push(format!("{id}: {} became {}", word(before), word(after)));
        }
    }
    ch
}

/// Run the sensitivity analysis of one file and return the printed report.
pub fn run(path: &Path, factor: f64, only: Option<&str>) -> Result<String, SimError> {
    if !(factor.is_finite() && factor > 1.0) {
        return Err(SimError::Usage(format!(
            "--factor must be a number > 1, got {factor}"
        )));
    }
    let l = experiment::load(path)?;
    let file = conclusions::file_key(path);
    let base = experiment::run_points(path, &experiment::points(&l, true)?, None, false)?;
    let (mut keys, skipped) = assumption_keys(&l.src);
    if let Some(pattern) = only {
        keys.retain(|k| k.path.contains(pattern));
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "== sensitivity of {file}: {} assumption keys × (1/{factor}, {factor}), {} runs each; series axis {}",
        keys.len(),
        base.len(),
        series_axis(&l, &base).unwrap_or_else(|| "-".into())
    );
    if !skipped.is_empty() {
        let _ = writeln!(
            s,
            "not scaled (not a number, or a sweep/variant/report key): {}",
            skipped.join(", ")
        );
    }
    let mut robust = 0;
    let mut not_run = 0;
    for key in &keys {
        let mut lines = Vec::new();
        let mut changed = false;
        for f in [1.0 / factor, factor] {
            let ch = rerun(path, &l, &file, &base, key, f);
            if ch.failed.is_some() {
                // E.g. a mean seek scaled past the full-stroke seek: the configuration is
                // invalid, so there is nothing to compare; listed, not counted as a change.
                not_run += 1;
                lines.push(describe(f, &ch));
            } else if !ch.is_unchanged() {
                changed = true;
                lines.push(describe(f, &ch));
            }
        }
        if !changed {
            robust += 1;
        }
        if lines.is_empty() {
            let _ = writeln!(s, "{}: no comparison changes", key.path);
        } else {
            let _ = writeln!(s, "{}:", key.path);
            for line in lines {
                let _ = writeln!(s, "{line}");
            }
        }
    }
    let not_run_note = if not_run > 0 {
        format!(
            " ({not_run} scalings not run: the scaled value makes the configuration invalid; listed above)"
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "robust: {robust} of {} keys change no ranking, crossover, range or conclusion when scaled by 1/{factor} and {factor}{not_run_note}",
        keys.len()
    );
    Ok(s)
}

/// `sensitivity-conclusions`: the assumptions each stated conclusion depends on, across
/// files. Every numeric assumption key of the files the selected conclusions need (scaled in
/// the files where it is an assumption) and every assumed cost (scaled everywhere) is
/// multiplied by `1/factor` and by `factor`; the conclusions are re-evaluated on the rerun
/// and each one whose verdict changes lists the key. `conclusion` selects conclusions whose
/// id contains it, `only` keys whose path contains it.
pub fn conclusions_run(
    dir: Option<&Path>,
    factor: f64,
    conclusion: Option<&str>,
    only: Option<&str>,
) -> Result<String, SimError> {
    if !(factor.is_finite() && factor > 1.0) {
        return Err(SimError::Usage(format!(
            "--factor must be a number > 1, got {factor}"
        )));
    }
    let wanted = |c: &Conclusion| conclusion.is_none_or(|t| c.id.contains(t));
    let base = conclusions::run_needed_adjusted(dir, &wanted, &|_, _| Ok(()))?;
    let base_holds = holds_by_id(&conclusions::evaluate(&base), &wanted);
    let keys = needed_assumption_keys(dir, &wanted, only)?;
    let mut depends: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut not_run = Vec::new();
    for (key, files) in &keys {
        for f in [1.0 / factor, factor] {
            let scale = scaler(key, f);
            let adjust = |file: &str, raw: &mut toml::Value| {
                if files.is_empty() || files.contains(file) {
                    scale(raw)
                } else {
                    Ok(())
                }
            };
            match conclusions::run_needed_adjusted(dir, &wanted, &adjust) {
                Ok(runs) => {
                    let now = holds_by_id(&conclusions::evaluate(&runs), &wanted);
                    for (id, before) in &base_holds {
                        let after = now.get(id).copied().flatten();
                        if after != *before {
                            depends.entry(id).or_default().push(format!(
                                "{} ×{f}: {} → {}",
                                key.path,
                                verdict_word(*before),
                                verdict_word(after)
                            ));
                        }
                    }
                }
                Err(e) => not_run.push(format!("{} ×{f}: {e}", key.path)),
            }
        }
    }
    Ok(conclusions_report(
        factor,
        &keys,
        &base_holds,
        &depends,
        &not_run,
    ))
}

type KeyFiles = Vec<(AssumptionKey, BTreeSet<String>)>;

/// The numeric assumption keys of the needed files (with the files where each is an
/// assumption), then the assumed costs (an empty set: every file).
fn needed_assumption_keys(
    dir: Option<&Path>,
    wanted: &dyn Fn(&Conclusion) -> bool,
    only: Option<&str>,
) -> Result<KeyFiles, SimError> {
    let files: BTreeSet<&str> = conclusions::CONCLUSIONS
        .iter()
        .filter(|c| wanted(c))
        .flat_map(|c| c.needs.iter().map(|n| n.file))
        .collect();
    let mut by_path: BTreeMap<String, (AssumptionKey, BTreeSet<String>)> = BTreeMap::new();
    let mut costs: Vec<AssumptionKey> = Vec::new();
    for (path, text) in experiment::sources("all", dir)? {
        let file = conclusions::file_key(&path);
        if !files.contains(file.as_str()) {
            continue;
        }
        for k in assumption_keys(&text).0 {
            if k.default.is_some() {
                if !costs.contains(&k) {
                    costs.push(k);
                }
                continue;
            }
            by_path
                .entry(k.path.clone())
                .or_insert_with(|| (k.clone(), BTreeSet::new()))
                .1
                .insert(file.clone());
        }
    }
    let mut keys: KeyFiles = by_path.into_values().collect();
    keys.extend(costs.into_iter().map(|k| (k, BTreeSet::new())));
    keys.retain(|(k, _)| only.is_none_or(|t| k.path.contains(t)));
    Ok(keys)
}

fn holds_by_id(
    verdicts: &[conclusions::Verdict],
    wanted: &dyn Fn(&Conclusion) -> bool,
) -> BTreeMap<&'static str, Option<bool>> {
    verdicts
        .iter()
        .filter(|v| wanted(&v.conclusion))
        .map(|v| (v.conclusion.id, v.outcome.as_ref().ok().map(|o| o.holds)))
        .collect()
}

fn verdict_word(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "holds",
        Some(false) => "does not hold",
        None => "not evaluated",
    }
}

fn conclusions_report(
    factor: f64,
    keys: &KeyFiles,
    base: &BTreeMap<&'static str, Option<bool>>,
    depends: &BTreeMap<&'static str, Vec<String>>,
    not_run: &[String],
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "== conclusions' sensitivity: {} conclusions, {} assumption keys × (1/{factor}, {factor})",
        base.len(),
        keys.len()
    );
    for (id, before) in base {
        match depends.get(id) {
            None => {
                let _ = writeln!(
                    s,
                    "{id} ({}): rests on no single scaled assumption",
                    verdict_word(*before)
                );
            }
            Some(changes) => {
                let _ = writeln!(
                    s,
                    "{id} ({}): depends on {} scalings",
                    verdict_word(*before),
                    changes.len()
                );
                for c in changes {
                    let _ = writeln!(s, "  {c}");
                }
            }
        }
    }
    for n in not_run {
        let _ = writeln!(s, "not run (invalid scaled configuration): {n}");
    }
    s
}

fn rerun(
    path: &Path,
    l: &Loaded,
    file: &str,
    base: &[RunReport],
    key: &AssumptionKey,
    f: f64,
) -> Changes {
    let scale = scaler(key, f);
    let reports = experiment::points_adjusted(l, true, &scale)
        .and_then(|pts| experiment::run_points(path, &pts, None, false));
    match reports {
        Ok(r) => compare(l, file, base, &r),
        Err(e) => Changes {
            failed: Some(e.to_string()),
            ..Changes::default()
        },
    }
}

fn describe(f: f64, ch: &Changes) -> String {
    let mut s = format!("  ×{f}:");
    if let Some(e) = &ch.failed {
        let _ = write!(s, " not run, the scaled configuration is invalid: {e}");
        return s;
    }
    let mut part = |name: &str, items: &[String], total: Option<usize>| {
        if items.is_empty() {
            return;
        }
        let of = total
            .map(|t| format!(" (of {t} points)"))
            .unwrap_or_default();
        let shown: Vec<&str> = items.iter().take(3).map(String::as_str).collect();
        let more = if items.len() > 3 {
            format!("; … {} more", items.len() - 3)
        } else {
            String::new()
        };
        let _ = write!(
            s,
            "\n    {} {name}{of}: {}{more}",
            items.len(),
            shown.join("; ")
        );
    };
    part("ranking flips", &ch.rankings, Some(ch.ranking_groups));
    part("crossover changes", &ch.crossovers, None);
    part("range changes", &ch.ranges, None);
    part("conclusion changes", &ch.conclusions, None);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_rounds_integers_and_keeps_them_positive() {
        assert_eq!(
            scale_value(&toml::Value::Integer(3), 0.5),
            Some(toml::Value::Integer(2))
        );
        assert_eq!(
            scale_value(&toml::Value::Integer(1), 0.5),
            Some(toml::Value::Integer(1))
        );
        assert_eq!(
            scale_value(&toml::Value::Float(2.5), 2.0),
            Some(toml::Value::Float(5.0))
        );
        assert_eq!(scale_value(&toml::Value::String("x".into()), 2.0), None);
    }

    #[test]
    fn assumption_keys_are_numeric_model_keys_and_assumed_costs() {
        let text = "[run]\n# assumption: a; considered: b\nrequest_kb = 64.0\n[systems.s]\n# assumption: a; considered: b\nfrontend_link = \"gigabit\"\n[report]\n# assumption: a; considered: b\nx = \"run.disks\"\n";
        let (keys, skipped) = assumption_keys(text);
        assert_eq!(keys[0].path, "run.request_kb");
        assert!(
            keys.iter()
                .any(|k| k.path == "workload.cost_overrides.hash_group_cycles_per_tuple")
        );
        assert!(
            !keys
                .iter()
                .any(|k| k.path == "workload.cost_overrides.select_cycles_per_byte")
        );
        assert_eq!(
            skipped,
            vec![
                "systems.s.frontend_link".to_string(),
                "report.x".to_string()
            ]
        );
    }
}
