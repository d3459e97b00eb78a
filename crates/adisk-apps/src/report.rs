//! What an application run reports: its phases, each with every disk's job statistics, the
//! bytes over each link, and the application's own result summary; printed as a table or JSON.
use adisk_core::stats::DiskJobStats;
use adisk_core::trace::{Recorded, TRACE_FORMAT, TRACE_VERSION, Trace, TraceDisk, TraceJob};
use serde::Serialize;
use std::time::Duration;

/// One phase of a run (a set of disk jobs, or host work).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phase {
    /// What it did.
    pub name: String,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Every disk's job statistics (empty for host-only work).
    pub disks: Vec<DiskJobStats>,
    /// Bytes the host sent to the disks in this phase (conventional mode's writes).
    pub host_sent_bytes: u64,
}

/// A whole run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Application.
    pub app: String,
    /// `active` or `conventional`.
    pub mode: String,
    /// Wall time of the run (without the validation), seconds.
    pub seconds: f64,
    /// Phases in order.
    pub phases: Vec<Phase>,
    /// The application's summary of its result (and its validation).
    pub result: serde_json::Value,
}

/// Totals of one disk over every phase.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DiskTotals {
    /// Disk.
    pub disk: u32,
    /// Bytes read from storage.
    pub bytes_read: u64,
    /// Bytes skipped.
    pub bytes_skipped: u64,
    /// Bytes written to storage (named results, runs; spill files count as temporary).
    pub bytes_written: u64,
    /// Bytes shipped to the host.
    pub to_host: u64,
    /// Bytes shipped to other disks.
    pub to_disks: u64,
    /// Rows read.
    pub rows_read: u64,
    /// CPU seconds.
    pub cpu_seconds: f64,
    /// Wall seconds (sum over phases).
    pub wall_seconds: f64,
    /// Largest memory grant of a job.
    pub memory_granted: u64,
    /// Largest memory peak of a job.
    pub memory_peak: u64,
    /// Largest temporary-space grant of a job.
    pub temp_granted: u64,
    /// Largest temporary-space peak of a job.
    pub temp_peak: u64,
}

impl Report {
    /// Adds a phase of disk jobs.
    pub fn phase(&mut self, name: &str, took: Duration, disks: Vec<DiskJobStats>) {
        self.phases.push(Phase {
            name: name.into(),
            seconds: took.as_secs_f64(),
            disks,
            host_sent_bytes: 0,
        });
    }

    /// This run as an `adisk-trace` (what `adisk sim replay` reads): a job per phase of disk
    /// jobs, each disk starting when its phase did (phases run one after another); the host's
    /// phases and the time around the disks' jobs become the gaps between jobs. `recorded` is
    /// the configuration it ran on and `host_cpu_ns` the host's CPU during the run.
    pub fn to_trace(&self, recorded: Recorded, host_cpu_ns: u64) -> Trace {
        let mut offset = 0u64;
        let mut jobs = Vec::new();
        for p in &self.phases {
            let ns = (p.seconds * 1e9) as u64;
            if !p.disks.is_empty() {
                let disks = (p.disks.iter())
                    .map(|s| TraceDisk {
                        stats: s.clone(),
                        started_ns: offset,
                        host_wall_ns: ns,
                    })
                    .collect();
                jobs.push(TraceJob {
                    description: format!("{} {}: {}", self.app, self.mode, p.name),
                    result_rows: p.disks.iter().map(|s| s.rows_shipped).sum(),
                    host_combine_ns: 0,
                    wall_ns: ns,
                    disks,
                });
            }
            offset += ns;
        }
        Trace {
            format: TRACE_FORMAT.into(),
            version: TRACE_VERSION,
            what: "app".into(),
            text: format!("{} ({})", self.app, self.mode),
            recorded,
            wall_ns: (self.seconds * 1e9) as u64,
            host_ns: 0,
            host_cpu_ns,
            jobs,
        }
    }

    /// Per-disk totals over every phase.
    pub fn totals(&self) -> Vec<DiskTotals> {
        let mut by_disk: std::collections::BTreeMap<u32, DiskTotals> = Default::default();
        for s in self.phases.iter().flat_map(|p| &p.disks) {
            let t = by_disk.entry(s.disk_id).or_insert_with(|| DiskTotals {
                disk: s.disk_id,
                ..Default::default()
            });
            t.bytes_read += s.bytes_read;
            t.bytes_skipped += s.bytes_skipped;
            t.bytes_written += s.bytes_written;
            t.to_host += s.bytes_shipped_host;
            t.to_disks += s.bytes_shipped_disks;
            t.rows_read += s.rows_read;
            t.cpu_seconds += s.cpu_ns as f64 / 1e9;
            t.wall_seconds += s.wall_ns as f64 / 1e9;
            t.memory_granted = t.memory_granted.max(s.memory_granted_bytes);
            t.memory_peak = t.memory_peak.max(s.memory_peak_bytes);
            t.temp_granted = t.temp_granted.max(s.temp_granted_bytes);
            t.temp_peak = t.temp_peak.max(s.temp_peak_bytes);
        }
        by_disk.into_values().collect()
    }

    /// Bytes over the host link (disks to host, host to disks) and between disks.
    pub fn links(&self) -> (u64, u64, u64) {
        let disks = self.phases.iter().flat_map(|p| &p.disks);
        let to_host = disks.clone().map(|s| s.bytes_shipped_host).sum();
        let to_disks = disks.map(|s| s.bytes_shipped_disks).sum();
        let from_host = self.phases.iter().map(|p| p.host_sent_bytes).sum();
        (to_host, from_host, to_disks)
    }

    /// JSON, with the per-disk totals.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        v["totals"] = serde_json::to_value(self.totals()).unwrap_or_default();
        let (to_host, from_host, between) = self.links();
        v["links"] = serde_json::json!({
            "disk_to_host_bytes": to_host,
            "host_to_disk_bytes": from_host,
            "disk_to_disk_bytes": between,
        });
        v
    }

    /// A readable table: phases, per-disk totals, links, result.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "{} ({}) in {:.3} s", self.app, self.mode, self.seconds);
        for p in &self.phases {
            let _ = writeln!(s, "  phase {:<24} {:>9.3} s", p.name, p.seconds);
        }
        let _ = writeln!(
            s,
            "  {:>4} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8} {:>8} {:>11} {:>11}",
            "disk",
            "read",
            "skipped",
            "written",
            "to host",
            "to disks",
            "rows",
            "cpu s",
            "wall s",
            "mem grant",
            "mem peak"
        );
        for t in self.totals() {
            let _ = writeln!(
                s,
                "  {:>4} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8.3} {:>8.3} {:>11} {:>11}",
                t.disk,
                t.bytes_read,
                t.bytes_skipped,
                t.bytes_written,
                t.to_host,
                t.to_disks,
                t.rows_read,
                t.cpu_seconds,
                t.wall_seconds,
                t.memory_granted,
                t.memory_peak
            );
        }
        let (to_host, from_host, between) = self.links();
        let _ = writeln!(
            s,
            "  links: disks→host {to_host} B, host→disks {from_host} B, disk→disk {between} B"
        );
        let _ = writeln!(s, "  result: {}", self.result);
        s
    }
}
