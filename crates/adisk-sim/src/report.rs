//! What every run reports: total time; compute / I/O / communication / idle per component;
//! utilisation of every resource; the bottleneck; bytes over every link.

use crate::engine::{PhaseTiming, ResKind, RunOutcome};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One resource's accounting.
#[derive(Clone, Debug, Serialize)]
pub struct ResourceReport {
    /// Resource name.
    pub name: String,
    /// Component it belongs to.
    pub component: String,
    /// cpu, disk or link.
    pub kind: ResKind,
    /// Busy time, s.
    pub busy_s: f64,
    /// Busy / total.
    pub utilization: f64,
    /// Bytes in (links: entered; drives: transferred).
    pub bytes_in: u64,
    /// Bytes out (links: delivered).
    pub bytes_out: u64,
    /// Operations.
    pub ops: u64,
}

/// Busy time by category for one component.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentReport {
    /// Component (host, disk3, interconnect, network…).
    pub component: String,
    /// Processor busy time, s (summed over its processors).
    pub compute_s: f64,
    /// Drive busy time, s.
    pub io_s: f64,
    /// Link busy time, s.
    pub comm_s: f64,
    /// Total minus the largest of the three (a lower bound on time fully idle), s.
    pub idle_s: f64,
}

/// The breakdown used for normalized stacked bars (memik-… Figs. 6–17).
#[derive(Clone, Debug, Serialize)]
pub struct Breakdown {
    /// Busiest processor's busy time, s.
    pub compute_max_s: f64,
    /// Busiest drive's busy time, s.
    pub io_max_s: f64,
    /// Busiest link's busy time, s.
    pub comm_max_s: f64,
    /// Total time attributed in proportion to the three maxima, s (sums to the total).
    pub compute_s: f64,
    /// See `compute_s`.
    pub io_s: f64,
    /// See `compute_s`.
    pub comm_s: f64,
}

/// The report of one run.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// Experiment name.
    pub experiment: String,
    /// Sweep point: axis → value.
    pub point: BTreeMap<String, String>,
    /// System name.
    pub system: String,
    /// System description.
    pub description: String,
    /// Completion time, s.
    pub total_s: f64,
    /// Bytes of base data the workload reads (0 if it starts from memory).
    pub input_bytes: f64,
    /// input_bytes / total_s, MB/s.
    pub throughput_mbps: f64,
    /// Category breakdown.
    pub breakdown: Breakdown,
    /// Bottleneck resource (highest utilisation).
    pub bottleneck: String,
    /// Its utilisation.
    pub bottleneck_utilization: f64,
    /// Per component.
    pub components: Vec<ComponentReport>,
    /// Per resource.
    pub resources: Vec<ResourceReport>,
    /// Phases.
    pub phases: Vec<PhaseTiming>,
    /// Workload notes.
    pub notes: Vec<(String, String)>,
    /// Events processed.
    pub events: u64,
    /// Warnings.
    pub warnings: Vec<String>,
}

impl RunReport {
    /// Build from a raw outcome.
    pub fn new(
        experiment: &str,
        point: BTreeMap<String, String>,
        system: &str,
        description: &str,
        out: RunOutcome,
        notes: Vec<(String, String)>,
        input_bytes: f64,
    ) -> RunReport {
        let total = out.end.as_secs_f64();
        let denom = if total > 0.0 { total } else { 1.0 };
        let resources: Vec<ResourceReport> = out
            .resources
            .iter()
            .map(|r| ResourceReport {
                name: r.name.clone(),
                component: r.component.clone(),
                kind: r.kind,
                busy_s: r.busy_ns as f64 * 1e-9,
                utilization: r.busy_ns as f64 * 1e-9 / denom,
                bytes_in: r.bytes_in,
                bytes_out: r.bytes_out,
                ops: r.ops,
            })
            .collect();
        let mut comps: BTreeMap<String, (f64, f64, f64)> = BTreeMap::new();
        let (mut cmax, mut imax, mut lmax) = (0.0f64, 0.0f64, 0.0f64);
        for r in &resources {
            let e = comps.entry(r.component.clone()).or_default();
            match r.kind {
                ResKind::Cpu => {
                    e.0 += r.busy_s;
                    cmax = cmax.max(r.busy_s);
                }
                ResKind::Disk => {
                    e.1 += r.busy_s;
                    imax = imax.max(r.busy_s);
                }
                ResKind::Link => {
                    e.2 += r.busy_s;
                    lmax = lmax.max(r.busy_s);
                }
            }
        }
        let components = comps
            .into_iter()
            .map(|(component, (c, i, l))| ComponentReport {
                component,
                compute_s: c,
                io_s: i,
                comm_s: l,
                idle_s: (total - c.max(i).max(l)).max(0.0),
            })
            .collect();
        let sum = cmax + imax + lmax;
        let share = |x: f64| if sum > 0.0 { total * x / sum } else { 0.0 };
        let breakdown = Breakdown {
            compute_max_s: cmax,
            io_max_s: imax,
            comm_max_s: lmax,
            compute_s: share(cmax),
            io_s: share(imax),
            comm_s: share(lmax),
        };
        let (bottleneck, bu) = resources
            .iter()
            .fold((String::from("-"), -1.0f64), |acc, r| {
                if r.utilization > acc.1 {
                    (r.name.clone(), r.utilization)
                } else {
                    acc
                }
            });
        RunReport {
            experiment: experiment.to_string(),
            point,
            system: system.to_string(),
            description: description.to_string(),
            total_s: total,
            input_bytes,
            throughput_mbps: if total > 0.0 {
                input_bytes / total / 1e6
            } else {
                0.0
            },
            breakdown,
            bottleneck,
            bottleneck_utilization: bu.max(0.0),
            components,
            resources,
            phases: out.phases,
            notes,
            events: out.events,
            warnings: out.warnings,
        }
    }

    /// Human-readable table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        self.write_summary(&mut s);
        self.write_components(&mut s);
        self.write_resources(&mut s);
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {w}");
        }
        s
    }

    /// The table's head: experiment, point, total, bottleneck, breakdown, phases and notes.
    fn write_summary(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "experiment {}  system {} — {}",
            self.experiment, self.system, self.description
        );
        for (k, v) in &self.point {
            let _ = writeln!(s, "  {k} = {v}");
        }
        let _ = writeln!(
            s,
            "total {:.3} s   bottleneck {} ({:.0}% busy)   events {}",
            self.total_s,
            self.bottleneck,
            self.bottleneck_utilization * 100.0,
            self.events
        );
        let b = &self.breakdown;
        let _ = writeln!(
            s,
            "busiest: cpu {:.3} s, disk {:.3} s, link {:.3} s   attributed: compute {:.3} s, I/O {:.3} s, communication {:.3} s",
            b.compute_max_s, b.io_max_s, b.comm_max_s, b.compute_s, b.io_s, b.comm_s
        );
        let _ = writeln!(s, "phases:");
        for p in &self.phases {
            let _ = writeln!(
                s,
                "  {:<40} {:>10.3} .. {:>10.3} s  (chunk {} B)",
                p.name, p.start_s, p.end_s, p.chunk_bytes
            );
        }
        if !self.notes.is_empty() {
            let _ = writeln!(s, "notes:");
            for (k, v) in &self.notes {
                let _ = writeln!(s, "  {k}: {v}");
            }
        }
    }

    /// The components' times (the first 40).
    fn write_components(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "{:<16} {:>10} {:>10} {:>10} {:>10}",
            "component", "compute_s", "io_s", "comm_s", "idle_s"
        );
        for c in self.components.iter().take(40) {
            let _ = writeln!(
                s,
                "{:<16} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
                c.component, c.compute_s, c.io_s, c.comm_s, c.idle_s
            );
        }
        if self.components.len() > 40 {
            let _ = writeln!(
                s,
                "… {} more components (use --format json or csv)",
                self.components.len() - 40
            );
        }
    }

    /// Every link that carried data (bytes over every link), then the busiest other
    /// resources (40 of them).
    fn write_resources(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "{:<24} {:>5} {:>10} {:>6} {:>14} {:>14}",
            "resource", "kind", "busy_s", "util", "bytes_in", "bytes_out"
        );
        let mut links: Vec<&ResourceReport> = self
            .resources
            .iter()
            .filter(|r| r.kind == ResKind::Link && r.ops > 0)
            .collect();
        links.sort_by(|a, b| b.bytes_in.cmp(&a.bytes_in).then(a.name.cmp(&b.name)));
        let mut others: Vec<&ResourceReport> = self
            .resources
            .iter()
            .filter(|r| r.kind != ResKind::Link && r.ops > 0)
            .collect();
        others.sort_by(|a, b| {
            b.utilization
                .total_cmp(&a.utilization)
                .then(a.name.cmp(&b.name))
        });
        let limit = 40;
        let hidden = others.len().saturating_sub(limit);
        for r in links.iter().chain(others.iter().take(limit)) {
            let k = match r.kind {
                ResKind::Cpu => "cpu",
                ResKind::Disk => "disk",
                ResKind::Link => "link",
            };
            let _ = writeln!(
                s,
                "{:<24} {:>5} {:>10.3} {:>5.0}% {:>14} {:>14}",
                r.name,
                k,
                r.busy_s,
                r.utilization * 100.0,
                r.bytes_in,
                r.bytes_out
            );
        }
        if hidden > 0 {
            let _ = writeln!(
                s,
                "… {hidden} less busy processors/drives (use --format json or csv)"
            );
        }
    }

    /// CSV of every resource of this run.
    pub fn resources_csv(&self) -> String {
        let mut s =
            String::from("resource,component,kind,busy_s,utilization,bytes_in,bytes_out,ops\n");
        for r in &self.resources {
            let k = match r.kind {
                ResKind::Cpu => "cpu",
                ResKind::Disk => "disk",
                ResKind::Link => "link",
            };
            let _ = writeln!(
                s,
                "{},{},{},{:.9},{:.6},{},{},{}",
                csv(&r.name),
                csv(&r.component),
                k,
                r.busy_s,
                r.utilization,
                r.bytes_in,
                r.bytes_out,
                r.ops
            );
        }
        s
    }
}

/// Quote a CSV field if needed.
pub fn csv(s: &str) -> String {
    if s.contains(',') || s.contains('"') || s.contains('\n') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
