//! What a replay reports: the configuration used, per job the predicted time, its bottleneck
//! and the busy share of each resource, the total, and — on the recorded configuration — the
//! measured times beside the predictions with the error in percent.

use super::config::{ReplayConfig, StorageKind};
use super::pipeline::JobRun;
use super::schedule::JobPlan;
use super::trace::{JobStats, Recorded, Trace};
use super::workload::DiskWork;
use crate::time::SimDuration;
use serde::Serialize;
use std::fmt::Write as _;

/// Busy share of each resource over a job's duration (0..1; per-disk resources: the busiest
/// disk; multi-core resources: busy time over cores).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Shares {
    /// Disk CPU.
    pub disk_cpu: f64,
    /// Storage (device or read throttle).
    pub storage: f64,
    /// Per-disk host link.
    pub host_link: f64,
    /// Host's shared ingress.
    pub host_nic: f64,
    /// Disk-to-disk links.
    pub disk_links: f64,
    /// Host CPU.
    pub host_cpu: f64,
}

impl Shares {
    /// `(name, share)` in report order.
    pub fn named(&self) -> [(&'static str, f64); 6] {
        [
            ("disk CPU", self.disk_cpu),
            ("storage", self.storage),
            ("host link", self.host_link),
            ("host NIC", self.host_nic),
            ("disk links", self.disk_links),
            ("host CPU", self.host_cpu),
        ]
    }
    /// The resource with the highest share (the first on ties); `round trips` when all are 0.
    pub fn bottleneck(&self) -> &'static str {
        let mut best = ("round trips", 0.0);
        for (name, share) in self.named() {
            if share > best.1 {
                best = (name, share);
            }
        }
        best.0
    }
}

/// One job's prediction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobPrediction {
    /// Index in the trace's `jobs`.
    pub index: usize,
    /// The job's description.
    pub description: String,
    /// Distinct disks the job ran on when recorded.
    pub recorded_disks: u32,
    /// Disks it runs on in the replay.
    pub replayed_disks: u32,
    /// Predicted start, ns after the request began.
    pub predicted_start_ns: u64,
    /// Jobs it waited for (they ended before it started when recorded).
    pub after: Vec<usize>,
    /// Predicted duration, ns (one round trip included).
    pub predicted_ns: u64,
    /// Measured `wall_ns` of the job, on the recorded configuration when the trace has it.
    pub measured_ns: Option<u64>,
    /// The busiest resource.
    pub bottleneck: String,
    /// Busy shares.
    pub shares: Shares,
    /// Recorded max/mean per-disk CPU.
    pub skew_cpu_max_over_mean: f64,
    /// Recorded max/mean per-disk bytes read.
    pub skew_bytes_read_max_over_mean: f64,
    /// Recorded totals over the job's disks.
    pub recorded_totals: DiskWork,
    /// Recorded host combine CPU, ns.
    pub host_combine_ns: u64,
    /// The longest recorded per-disk `wall_ns` of the job (beside the predicted time it shows
    /// how much of a disk's time the model leaves unexplained, e.g. I/O waits not in `cpu_ns`).
    pub recorded_disk_wall_ns_max: u64,
}

fn share(busy_ns: u64, duration: SimDuration) -> f64 {
    if duration.0 == 0 {
        return 0.0;
    }
    round4(busy_ns as f64 / duration.0 as f64)
}

fn round4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

impl JobPrediction {
    /// The prediction of job `index` from its simulated run.
    pub fn new(
        index: usize,
        job: &JobStats,
        plan: &JobPlan,
        run: &JobRun,
        recorded_configuration: bool,
    ) -> JobPrediction {
        let work = &plan.work;
        let duration = run.end.since(run.start);
        let b = &run.busy;
        let shares = Shares {
            disk_cpu: share(b.disk_cpu_ns, duration),
            storage: share(b.storage_ns, duration),
            host_link: share(b.host_link_ns, duration),
            host_nic: share(b.host_nic_ns, duration),
            disk_links: share(b.disk_link_ns, duration),
            host_cpu: share(b.host_cpu_ns, duration),
        };
        JobPrediction {
            index,
            description: job.description.clone(),
            recorded_disks: work.recorded_disks,
            replayed_disks: work.disks.len() as u32,
            predicted_start_ns: run.start.0,
            after: plan.deps.clone(),
            predicted_ns: duration.0,
            measured_ns: (recorded_configuration && job.wall_ns > 0).then_some(job.wall_ns),
            bottleneck: shares.bottleneck().into(),
            shares,
            skew_cpu_max_over_mean: round4(work.skew_cpu),
            skew_bytes_read_max_over_mean: round4(work.skew_bytes_read),
            recorded_totals: work.totals.clone(),
            host_combine_ns: job.host_combine_ns,
            recorded_disk_wall_ns_max: job.disks.iter().map(|d| d.wall_ns).max().unwrap_or(0),
        }
    }
}

/// The report of a replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayReport {
    /// `sql`, `run` or `app`.
    pub what: String,
    /// The query or command.
    pub text: String,
    /// The configuration the trace was recorded on.
    pub recorded: Recorded,
    /// The configuration replayed.
    pub config: ReplayConfig,
    /// Whether `config` is the recorded configuration.
    pub recorded_configuration: bool,
    /// Per job.
    pub jobs: Vec<JobPrediction>,
    /// The host's final work after the last job, ns.
    pub host_final_ns: u64,
    /// Whether the trace had start times (jobs overlap as recorded, host gaps kept) or its
    /// jobs ran one after another.
    pub timed: bool,
    /// Events simulated.
    pub events: u64,
    /// Predicted end-to-end time, ns.
    pub predicted_ns: u64,
    /// Measured end-to-end time (on the recorded configuration).
    pub measured_ns: Option<u64>,
    /// `(predicted − measured) / measured` in percent (on the recorded configuration).
    pub error_percent: Option<f64>,
}

impl ReplayReport {
    /// Assemble the report.
    pub fn new(
        trace: &Trace,
        config: ReplayConfig,
        recorded_configuration: bool,
        jobs: Vec<JobPrediction>,
        (host_final_ns, timed, events): (u64, bool, u64),
        predicted_ns: u64,
    ) -> ReplayReport {
        let measured_ns = (recorded_configuration && trace.wall_ns > 0).then_some(trace.wall_ns);
        let error_percent = measured_ns.map(|m| {
            let e = (predicted_ns as f64 - m as f64) / m as f64 * 100.0;
            (e * 100.0).round() / 100.0
        });
        ReplayReport {
            what: trace.what.clone(),
            text: trace.text.clone(),
            recorded: trace.recorded.clone(),
            config,
            recorded_configuration,
            jobs,
            host_final_ns,
            timed,
            events,
            predicted_ns,
            measured_ns,
            error_percent,
        }
    }

    /// Pretty JSON with a final newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
            + "\n"
    }

    /// A plain-text table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "replay of a `{}` trace: {} ({} jobs, recorded on {} disks)",
            self.what,
            one_line(&self.text),
            self.jobs.len(),
            self.recorded.disks
        );
        let _ = writeln!(s, "configuration: {}", describe(&self.config));
        if self.recorded_configuration {
            let _ = writeln!(s, "  (the configuration the trace was recorded on)");
        }
        let _ = writeln!(
            s,
            "{:>3} {:>9} {:>10} {:>12} {:>12} {:<11} {:>8} {:>7} {:>9} {:>8} {:>10} {:>8} {:>9}",
            "job",
            "disks",
            "starts",
            "predicted",
            "measured",
            "bottleneck",
            "disk CPU",
            "storage",
            "host link",
            "host NIC",
            "disk links",
            "host CPU",
            "cpu skew"
        );
        for j in &self.jobs {
            let sh = &j.shares;
            let _ = writeln!(
                s,
                "{:>3} {:>9} {:>10} {:>12} {:>12} {:<11} {:>8.2} {:>7.2} {:>9.2} {:>8.2} {:>10.2} {:>8.2} {:>9.2}",
                j.index,
                format!("{}→{}", j.recorded_disks, j.replayed_disks),
                ms(j.predicted_start_ns),
                ms(j.predicted_ns),
                j.measured_ns.map_or("-".into(), ms),
                j.bottleneck,
                sh.disk_cpu,
                sh.storage,
                sh.host_link,
                sh.host_nic,
                sh.disk_links,
                sh.host_cpu,
                j.skew_cpu_max_over_mean
            );
        }
        if !self.timed {
            let _ = writeln!(
                s,
                "(no start times in the trace: jobs replayed one after another)"
            );
        }
        let _ = writeln!(s, "host final work: {}", ms(self.host_final_ns));
        let _ = write!(s, "total predicted: {}", ms(self.predicted_ns));
        if let (Some(m), Some(e)) = (self.measured_ns, self.error_percent) {
            let _ = write!(s, "; measured: {}; error {e:+.2} %", ms(m));
        }
        s.push('\n');
        s
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn one_line(text: &str) -> String {
    let t: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.chars().count() > 80 {
        t.chars().take(77).collect::<String>() + "..."
    } else {
        t
    }
}

fn rate(r: Option<f64>) -> String {
    r.map_or("unlimited".into(), |v| format!("{:.1} MB/s", v / 1e6))
}

/// The configuration on one line.
pub fn describe(c: &ReplayConfig) -> String {
    let storage = match c.storage {
        StorageKind::Recorded => match c.disk_read_bytes_per_s {
            Some(r) => format!("recorded, reads throttled to {}", rate(Some(r))),
            None => "recorded (reading in the measured CPU)".into(),
        },
        StorageKind::Hdd => "hdd (model::disk)".into(),
        StorageKind::Ssd => "ssd (model::ssd)".into(),
    };
    let shared = c.shared_cpus.map_or(String::new(), |n| {
        format!(" · disks and host on one machine of {n} core(s)")
    });
    let emulated = if c.recorded_disk_cpu_speed == 1.0 {
        String::new()
    } else {
        format!(" (recorded at an emulated ×{})", c.recorded_disk_cpu_speed)
    };
    format!(
        "{} disks · disk CPU ×{}{emulated} on {} core(s){shared} · host CPU ×{} on {} core(s) · host link {} per disk · host NIC {} · disk links {} · storage {} · rtt {:.3} ms · {} chunks/disk · skew {:?}",
        c.disks,
        c.disk_cpu_speed,
        c.disk_cpus,
        c.host_cpu_speed,
        c.host_cpus,
        rate(c.host_link_bytes_per_s),
        rate(c.host_nic_bytes_per_s),
        rate(c.disk_link_bytes_per_s),
        storage,
        c.rtt_ns as f64 / 1e6,
        c.chunks_per_disk,
        c.skew
    )
    .replace("skew Recorded", "skew recorded")
    .replace("skew Mean", "skew mean")
}
