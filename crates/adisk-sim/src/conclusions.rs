//! The papers' stated conclusions as assertions over the simulator's output (issue 15,
//! point 4): the fidelity suite.
//!
//! Each [`Conclusion`] quotes the sentence it rests on (checked against the paper by the
//! traceability test), names the runs it needs (experiment file and sweep-point labels) and
//! checks them. Words of degree are read the same way everywhere: "significantly",
//! "substantially", "dramatically" mean a factor of at least 2; "similar" means within a
//! factor of 2; "marginal" means less than 10%. A conclusion the model does not reproduce is
//! kept and marked [`Conclusion::known_divergence`] with the reason; it is counted and
//! printed, never dropped.
//!
//! `adisk sim reproduce all` evaluates every conclusion over the runs it made; the
//! `conclusions` test runs only the points the conclusions need.

use crate::SimError;
use crate::experiment;
use check::{Conclusion, Outcome, Runs};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

mod acharya;
pub mod check;
mod chiu;
mod memik;
mod riedel;
mod uysal;

/// Every stated conclusion, paper by paper.
pub const CONCLUSIONS: &[Conclusion] = &[
    acharya::HOST_KEEPS_FEW_DRIVES_BUSY,
    acharya::HOST_BOTTLENECK_WHEN_REDISTRIBUTING,
    acharya::PROCESSING_SCALES_WITH_DISKS,
    uysal::SELECT_AGGREGATE_LITTLE_COMPUTATION,
    uysal::GROUP_BY_LARGER_RESULTS_THAN_SELECT,
    uysal::GROUP_BY_MORE_COMPUTATION_THAN_SELECT,
    uysal::DATACUBE_MORE_COMPUTATION_THAN_GROUP_BY,
    uysal::DATACUBE_MORE_DATA_THAN_GROUP_BY,
    uysal::SORT_MORE_COMMUNICATION_THAN_DATACUBE,
    uysal::SORT_AND_JOIN_SIMILAR_COMMUNICATION,
    uysal::DMINE_LESS_COMMUNICATION,
    uysal::CONV_EARTH_COMPUTE_INTENSIVE,
    uysal::MORE_BUFFERS_TOLERATE_LATENCY,
    memik::SMART_DISKS_SUBSTANTIAL_BENEFITS,
    memik::BUNDLING_EFFECTIVE,
    memik::MORE_TUPLES_MARGINAL,
    memik::BUNDLES_INVERSELY_PROPORTIONAL,
    memik::HIGH_PERFORMANCE_UNDER_VARIATIONS,
    memik::INDEXED_SELECTION_GAINS_LESS,
    chiu::SMART_DISKS_OUTPERFORMED_HOST_AND_CLUSTERS,
    chiu::NO_CLIENT_ROUTING_WITHIN_A_GROUP,
    riedel::REDUCES_DATA_TRAFFIC,
    riedel::EXPLOITS_PARALLELISM,
    riedel::DRAMATIC_GAINS,
    riedel::SERVER_BOTTLENECK_CPU_OR_INTERCONNECT,
    riedel::BETA_FASTER_SELECT_JOIN_SLOWER_AGGREGATE,
    riedel::AGGREGATION_MORE_COMPUTATION,
    riedel::UYSAL_AD_BEAT_SMP_MATCH_CLUSTERS,
];

/// The verdict of one conclusion.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The conclusion.
    pub conclusion: Conclusion,
    /// Its outcome, or why it could not be evaluated.
    pub outcome: Result<Outcome, String>,
}

impl Verdict {
    /// holds / fails / known divergence / not evaluated.
    pub fn status(&self) -> &'static str {
        match (&self.outcome, self.conclusion.known_divergence) {
            (Ok(o), _) if o.holds => "holds",
            (Ok(_), Some(_)) => "known divergence",
            (Ok(_), None) => "FAILS",
            (Err(_), _) => "not evaluated",
        }
    }
}

/// Evaluate every conclusion over `runs`.
pub fn evaluate(runs: &Runs) -> Vec<Verdict> {
    CONCLUSIONS
        .iter()
        .map(|c| Verdict {
            conclusion: *c,
            outcome: (c.check)(runs),
        })
        .collect()
}

/// Printed summary: one line per conclusion, then the counts.
pub fn summary(verdicts: &[Verdict]) -> String {
    let mut s = String::from("== stated conclusions (fidelity suite)\n");
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in verdicts {
        *counts.entry(v.status()).or_default() += 1;
        let detail = match &v.outcome {
            Ok(o) => o.measured.clone(),
            Err(e) => e.clone(),
        };
        let _ = writeln!(
            s,
            "[{}] {} ({} {}): {}",
            v.status(),
            v.conclusion.id,
            v.conclusion.paper_file,
            v.conclusion.locator,
            detail
        );
        if let (Some(reason), "known divergence") = (v.conclusion.known_divergence, v.status()) {
            let _ = writeln!(s, "    reason: {reason}");
        }
    }
    let count = |k: &str| counts.get(k).copied().unwrap_or(0);
    let _ = writeln!(
        s,
        "conclusions: {} of {} hold, {} known divergences, {} fail, {} not evaluated",
        count("holds"),
        verdicts.len(),
        count("known divergence"),
        count("FAILS"),
        count("not evaluated")
    );
    s
}

/// `paper/name.toml` of an experiment path.
pub fn file_key(path: &Path) -> String {
    let parts: Vec<String> = path
        .components()
        .rev()
        .take(2)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// Run only the points the conclusions need (from `dir`, ./experiments, the source tree or
/// the built-in copies).
pub fn run_needed(dir: Option<&Path>) -> Result<Runs, SimError> {
    run_needed_adjusted(dir, &|_| true, &|_, _| Ok(()))
}

/// A change applied to every needed point of a file (the file's `paper/name.toml` key, the
/// point's raw tree), e.g. `sensitivity`'s scaling of one assumption.
pub type FileAdjust<'a> = &'a dyn Fn(&str, &mut toml::Value) -> Result<(), String>;

/// [`run_needed`] for the conclusions `wanted` accepts, with `adjust` applied to every point.
pub fn run_needed_adjusted(
    dir: Option<&Path>,
    wanted: &dyn Fn(&Conclusion) -> bool,
    adjust: FileAdjust,
) -> Result<Runs, SimError> {
    let mut selects_of: BTreeMap<&str, Vec<&[(&str, &str)]>> = BTreeMap::new();
    for c in CONCLUSIONS.iter().filter(|c| wanted(c)) {
        for n in c.needs {
            selects_of.entry(n.file).or_default().push(n.select);
        }
    }
    let sources = experiment::sources("all", dir)?;
    let mut runs = Runs::default();
    for (path, text) in sources {
        let key = file_key(&path);
        let Some(selects) = selects_of.get(key.as_str()) else {
            continue;
        };
        let loaded = experiment::load_str(&path, &text)?;
        let points: Vec<experiment::Point> =
            experiment::points_adjusted(&loaded, true, &|raw| adjust(&key, raw))?
                .into_iter()
                .filter(|p| {
                    selects.iter().any(|sel| {
                        sel.iter()
                            .all(|(k, v)| p.labels.get(*k).map(String::as_str) == Some(*v))
                    })
                })
                .collect();
        let reports = experiment::run_points(&path, &points, None, false)?;
        runs.add(&key, reports);
    }
    Ok(runs)
}
