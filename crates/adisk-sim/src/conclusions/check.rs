//! What a stated conclusion is made of: the [`Conclusion`] itself, the runs it [`Need`]s, the
//! [`Runs`] it is checked over, its [`Outcome`], and the measures the papers' checks share.

use crate::engine::ResKind;
use crate::report::RunReport;
use std::collections::BTreeMap;

/// Runs a conclusion needs: the points of `file` whose labels include every pair.
#[derive(Clone, Copy, Debug)]
pub struct Need {
    /// Experiment file under `experiments/` (`paper/name.toml`).
    pub file: &'static str,
    /// Label constraints (`axis`, value); empty = every point of the file.
    pub select: &'static [(&'static str, &'static str)],
}

/// What a check measured and whether the conclusion holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Whether the simulator's output agrees with the sentence.
    pub holds: bool,
    /// What was measured (printed next to the verdict).
    pub measured: String,
}

/// A check over the runs; `Err` names a run that is missing.
pub type Check = fn(&Runs) -> Result<Outcome, String>;

/// One stated conclusion of a paper.
#[derive(Clone, Copy, Debug)]
pub struct Conclusion {
    /// Stable identifier.
    pub id: &'static str,
    /// Paper file the sentence is quoted from.
    pub paper_file: &'static str,
    /// Section or table.
    pub locator: &'static str,
    /// The sentence (or its operative part), verbatim.
    pub quote: &'static str,
    /// How the sentence is read as an assertion.
    pub reading: &'static str,
    /// Runs needed.
    pub needs: &'static [Need],
    /// The assertion.
    pub check: Check,
    /// Why the model does not reproduce it, if it does not (the test then expects it to fail).
    pub known_divergence: Option<&'static str>,
}

/// Reports by experiment file.
#[derive(Debug, Default)]
pub struct Runs {
    by_file: BTreeMap<String, Vec<RunReport>>,
}

impl Runs {
    /// Add the reports of one file (`paper/name.toml`).
    pub fn add(&mut self, file: &str, reports: Vec<RunReport>) {
        self.by_file
            .entry(file.to_string())
            .or_default()
            .extend(reports);
    }

    /// Every report of `file` whose point has all `select` labels.
    pub fn all(&self, file: &str, select: &[(&str, &str)]) -> Vec<&RunReport> {
        self.by_file
            .get(file)
            .map(|rs| rs.iter().filter(|r| matches(r, select)).collect())
            .unwrap_or_default()
    }

    /// The first report of `file` matching `select`.
    pub fn get(&self, file: &str, select: &[(&str, &str)]) -> Result<&RunReport, String> {
        self.all(file, select)
            .into_iter()
            .next()
            .ok_or_else(|| format!("no run of {file} with {select:?}"))
    }

    /// Total time of the run of `file` matching `select`, s.
    pub fn total_s(&self, file: &str, select: &[(&str, &str)]) -> Result<f64, String> {
        self.get(file, select).map(|r| r.total_s)
    }
}

fn matches(r: &RunReport, select: &[(&str, &str)]) -> bool {
    select
        .iter()
        .all(|(k, v)| r.point.get(*k).map(String::as_str) == Some(*v))
}

/// Processor busy time over all processors per byte of input, ns/byte.
pub fn cpu_ns_per_input_byte(r: &RunReport) -> f64 {
    let busy_s: f64 = r
        .resources
        .iter()
        .filter(|x| x.kind == ResKind::Cpu)
        .map(|x| x.busy_s)
        .sum();
    busy_s * 1e9 / r.input_bytes.max(1.0)
}

/// Bytes sent into the network (switch ports) or onto the loops/buses that carry messages.
pub fn network_bytes_sent(r: &RunReport) -> u64 {
    r.resources
        .iter()
        .filter(|x| x.kind == ResKind::Link && x.name.ends_with("port-tx"))
        .map(|x| x.bytes_in)
        .sum()
}

/// Bytes received by the named node's network port.
pub fn port_bytes_received(r: &RunReport, node: &str) -> u64 {
    let name = format!("{node}.port-rx");
    r.resources
        .iter()
        .filter(|x| x.name == name)
        .map(|x| x.bytes_in)
        .sum()
}

/// Bytes carried by the host's I/O interconnect (loops/buses named `…loop…` or `…bus…`).
pub fn interconnect_bytes(r: &RunReport) -> u64 {
    r.resources
        .iter()
        .filter(|x| x.kind == ResKind::Link && x.component == "interconnect")
        .map(|x| x.bytes_in)
        .sum()
}

/// Mean utilisation of the drives.
pub fn mean_drive_utilization(r: &RunReport) -> f64 {
    let drives: Vec<f64> = r
        .resources
        .iter()
        .filter(|x| x.kind == ResKind::Disk)
        .map(|x| x.utilization)
        .collect();
    drives.iter().sum::<f64>() / drives.len().max(1) as f64
}

/// A measured outcome: whether the conclusion holds, and what was measured.
pub(super) fn outcome(holds: bool, measured: String) -> Result<Outcome, String> {
    Ok(Outcome { holds, measured })
}
