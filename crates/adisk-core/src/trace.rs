//! Runtime traces: what one request did, per disk and per stage, in the documented
//! `adisk-trace` format (version 1, see `docs/simulator.md`, "Replaying a runtime trace"),
//! which `adisk sim replay` reads; and its export to the Chrome trace-event format, which
//! Perfetto (<https://ui.perfetto.dev>) and `chrome://tracing` open as a timeline: a process
//! per disk, a track per job and stage.
//!
//! A trace is made at the host from the statistics it already collects (the same
//! [`DiskJobStats`] EXPLAIN ANALYZE prints), plus when each disk job started, so its totals
//! are those EXPLAIN ANALYZE reports.

use crate::stats::DiskJobStats;
use serde::{Deserialize, Serialize};

/// The value of [`Trace::format`].
pub const TRACE_FORMAT: &str = "adisk-trace";
/// The version this build writes.
pub const TRACE_VERSION: u32 = 1;

/// One request's trace.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Trace {
    /// Always [`TRACE_FORMAT`].
    pub format: String,
    /// [`TRACE_VERSION`].
    pub version: u32,
    /// `sql`, `run` or `app`.
    pub what: String,
    /// The query or command.
    pub text: String,
    /// The configuration it ran on.
    pub recorded: Recorded,
    /// Measured end-to-end time at the host, ns.
    pub wall_ns: u64,
    /// Host CPU time of its final work beyond the jobs' `host_combine_ns`, ns (0: not
    /// measured).
    pub host_ns: u64,
    /// CPU time of the host process (every thread) while the plan ran, ns (0: not measured).
    #[serde(default)]
    pub host_cpu_ns: u64,
    /// The disk jobs, a job per scan or stage of the plan, in the order they started.
    pub jobs: Vec<TraceJob>,
}

/// The configuration a trace was recorded on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct Recorded {
    /// Disks that took part.
    pub disks: u32,
    /// Host cores.
    pub host_cpus: u32,
    /// Cores per disk process (fractional when CPU-limited).
    pub disk_cpus: f64,
    /// Host link rate per disk link, bytes/s (None: unknown or unlimited).
    pub host_link_bytes_per_s: Option<f64>,
    /// Disk-to-disk link rate, bytes/s (None: unknown or unlimited).
    pub disk_link_bytes_per_s: Option<f64>,
    /// Disk read-rate throttle, bytes/s (None: none).
    pub disk_read_bytes_per_s: Option<f64>,
    /// Host ↔ disk round trip, ns (0: not measured).
    pub rtt_ns: u64,
    /// Cores of the one machine the host and every disk ran on (a local cluster: they
    /// share them); None: each disk on a machine of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_cpus: Option<f64>,
    /// The disks' emulated processor speed (`adisk disk --cpu-speed`: their CPU figures are
    /// this machine's, their steps took 1/speed as long); None: the machine's speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_cpu_speed: Option<f64>,
}

/// One job of a trace: its disks' statistics.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct TraceJob {
    /// What the job was (the scan's table, or the stage).
    pub description: String,
    /// Rows it sent the host.
    pub result_rows: u64,
    /// Host CPU time combining its output, ns (0: not measured).
    pub host_combine_ns: u64,
    /// From its first disk's start to its last disk's end, ns.
    pub wall_ns: u64,
    /// Per disk.
    pub disks: Vec<TraceDisk>,
}

/// One disk's part of a job.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct TraceDisk {
    /// The disk's statistics, as the disk reported them.
    #[serde(flatten)]
    pub stats: DiskJobStats,
    /// When the host started the job on this disk, ns after the request began.
    pub started_ns: u64,
    /// Wall time of the job as the host saw it (start to its last batch), ns.
    pub host_wall_ns: u64,
}

/// Bytes and time a trace moved in all (what EXPLAIN ANALYZE's totals say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceTotals {
    /// Bytes read from storage.
    pub bytes_read: u64,
    /// Column bytes scanned.
    pub bytes_scanned: u64,
    /// Bytes shipped to the host.
    pub bytes_shipped_host: u64,
    /// Bytes shipped disk to disk.
    pub bytes_shipped_disks: u64,
    /// CPU time at the disks, ns.
    pub cpu_ns: u64,
    /// Disk jobs.
    pub disk_jobs: u64,
}

impl Trace {
    /// The totals over every job and disk.
    pub fn totals(&self) -> TraceTotals {
        let mut t = TraceTotals::default();
        for d in self.jobs.iter().flat_map(|j| &j.disks) {
            t.bytes_read += d.stats.bytes_read;
            t.bytes_scanned += d.stats.bytes_scanned;
            t.bytes_shipped_host += d.stats.bytes_shipped_host;
            t.bytes_shipped_disks += d.stats.bytes_shipped_disks;
            t.cpu_ns += d.stats.cpu_ns;
            t.disk_jobs += 1;
        }
        t
    }

    /// The trace in Chrome's trace-event format (JSON object form): a process per disk
    /// (`pid` = disk + 1; the host is `pid` 0), a thread per job and stage on it. Each disk
    /// job is a complete event ("X") from its start for its wall time, with its bytes and CPU
    /// as arguments; each stage one from its first step to its last. Times in µs.
    pub fn to_chrome(&self) -> serde_json::Value {
        let mut events = vec![
            meta("process_name", 0, 0, "host"),
            meta("thread_name", 0, 0, "request"),
            serde_json::json!({
                "name": self.text.chars().take(80).collect::<String>(), "cat": self.what,
                "ph": "X", "pid": 0, "tid": 0, "ts": 0.0, "dur": micros(self.wall_ns),
                "args": { "wall_ns": self.wall_ns, "jobs": self.jobs.len() },
            }),
        ];
        let mut named = std::collections::BTreeSet::new();
        let mut next_tid = std::collections::BTreeMap::<u32, u64>::new();
        for (j, job) in self.jobs.iter().enumerate() {
            for d in &job.disks {
                let pid = u64::from(d.stats.disk_id) + 1;
                if named.insert(pid) {
                    events.push(meta(
                        "process_name",
                        pid,
                        0,
                        &format!("disk {}", d.stats.disk_id),
                    ));
                }
                let tid = next_tid.entry(d.stats.disk_id).or_insert(0);
                events.extend(disk_events(j, job, d, pid, tid));
            }
        }
        serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" })
    }
}

/// One disk job's events: its track (the job) and a track per stage.
fn disk_events(
    j: usize,
    job: &TraceJob,
    d: &TraceDisk,
    pid: u64,
    tid: &mut u64,
) -> Vec<serde_json::Value> {
    let s = &d.stats;
    let wall = d.host_wall_ns.max(s.wall_ns);
    let job_tid = *tid;
    *tid += 1;
    let mut events = vec![
        meta(
            "thread_name",
            pid,
            job_tid,
            &format!("job {j}: {}", job.description),
        ),
        serde_json::json!({
            "name": job.description, "cat": "job", "ph": "X", "pid": pid, "tid": job_tid,
            "ts": micros(d.started_ns), "dur": micros(wall),
            "args": {
                "job_id": s.job_id, "bytes_read": s.bytes_read, "bytes_scanned": s.bytes_scanned,
                "rows_read": s.rows_read, "rows_shipped": s.rows_shipped,
                "bytes_shipped_host": s.bytes_shipped_host,
                "bytes_shipped_disks": s.bytes_shipped_disks, "cpu_ns": s.cpu_ns,
                "admission_wait_ns": s.admission_wait_ns, "schedule_wait_ns": s.schedule_wait_ns,
                "memory_peak_bytes": s.memory_peak_bytes, "error": s.error,
            },
        }),
    ];
    for (k, st) in s.stages.iter().enumerate() {
        let stage_tid = *tid;
        *tid += 1;
        let first = st.first_step_ns.saturating_sub(1);
        let dur = st.last_step_ns.saturating_sub(first);
        events.push(meta(
            "thread_name",
            pid,
            stage_tid,
            &format!("job {j} · stage {k}: {}", st.disklet),
        ));
        events.push(serde_json::json!({
            "name": st.disklet, "cat": "stage", "ph": "X", "pid": pid, "tid": stage_tid,
            "ts": micros(d.started_ns + first), "dur": micros(dur),
            "args": {
                "rows_in": st.rows_in, "rows_out": st.rows_out, "bytes_in": st.bytes_in,
                "bytes_out": st.bytes_out, "cpu_ns": st.cpu_ns, "spilled_bytes": st.spilled_bytes,
                "scratch_peak_bytes": st.scratch_peak_bytes,
            },
        }));
    }
    events
}

fn meta(name: &str, pid: u64, tid: u64, value: &str) -> serde_json::Value {
    serde_json::json!({ "name": name, "ph": "M", "pid": pid, "tid": tid, "args": { "name": value } })
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::StageStats;

    fn trace() -> Trace {
        let disk = |id: u32, started_ns: u64| TraceDisk {
            stats: DiskJobStats {
                disk_id: id,
                job_id: format!("j{id}"),
                bytes_read: 1000,
                bytes_shipped_host: 10,
                cpu_ns: 5_000,
                wall_ns: 9_000,
                stages: vec![StageStats {
                    disklet: "select".into(),
                    first_step_ns: 1_001,
                    last_step_ns: 8_000,
                    ..StageStats::default()
                }],
                ..DiskJobStats::default()
            },
            started_ns,
            host_wall_ns: 10_000,
        };
        Trace {
            format: TRACE_FORMAT.into(),
            version: TRACE_VERSION,
            what: "sql".into(),
            text: "select 1".into(),
            recorded: Recorded {
                disks: 2,
                ..Recorded::default()
            },
            wall_ns: 20_000,
            host_ns: 0,
            host_cpu_ns: 0,
            jobs: vec![TraceJob {
                description: "scan of t".into(),
                disks: vec![disk(0, 100), disk(1, 200)],
                ..TraceJob::default()
            }],
        }
    }

    #[test]
    fn totals_sum_every_disk_job() {
        let t = trace().totals();
        assert_eq!(
            (t.bytes_read, t.bytes_shipped_host, t.cpu_ns),
            (2000, 20, 10_000)
        );
        assert_eq!(t.disk_jobs, 2);
    }

    #[test]
    fn the_format_round_trips_and_flattens_the_disk_statistics() {
        let t = trace();
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["jobs"][0]["disks"][1]["disk_id"], 1);
        assert_eq!(json["jobs"][0]["disks"][1]["started_ns"], 200);
        let back: Trace = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn chrome_export_has_a_process_per_disk_and_a_track_per_job_and_stage() {
        let c = trace().to_chrome();
        let events = c["traceEvents"].as_array().unwrap();
        let complete: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        // the request, and per disk its job and its one stage
        assert_eq!(complete.len(), 1 + 2 * 2);
        let tracks: std::collections::BTreeSet<(u64, u64)> = complete
            .iter()
            .map(|e| (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
            .collect();
        assert_eq!(tracks.len(), complete.len(), "one track per event");
        let stage = complete
            .iter()
            .find(|e| e["cat"] == "stage" && e["pid"] == 2)
            .unwrap();
        // disk 1's job started at 200 ns, its stage's first step 1000 ns later, for 7000 ns
        assert_eq!(stage["ts"].as_f64().unwrap(), 1.2);
        assert_eq!(stage["dur"].as_f64().unwrap(), 7.0);
        let names = events.iter().filter(|e| e["ph"] == "M").count();
        assert_eq!(
            names,
            2 + 2 + 2 * 2,
            "host, its track, two disks, their tracks"
        );
    }
}
