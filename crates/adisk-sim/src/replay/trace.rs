//! The runtime trace, format `adisk-trace` version 1: what one request did on the real engine,
//! per job round and per disk (see `docs/simulator.md`, "Replaying a runtime trace").
//!
//! These are the simulator's own copies of the engine's statistics structs
//! (`adisk_core::stats::JobStats` and friends): adisk-sim depends on no other workspace crate.
//! Unknown fields are ignored and missing numbers read as 0, so the runtime may add fields.

use crate::SimError;
use serde::{Deserialize, Serialize};

/// The value of the trace's `format` field.
pub const TRACE_FORMAT: &str = "adisk-trace";
/// The trace version this simulator reads.
pub const TRACE_VERSION: u64 = 1;
/// Most jobs a trace may hold (finding which jobs wait for which is quadratic in them).
pub const MAX_JOBS: usize = 10_000;

/// A whole trace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct Trace {
    /// Always [`TRACE_FORMAT`].
    pub format: String,
    /// Always [`TRACE_VERSION`].
    pub version: u64,
    /// `sql`, `run` or `app`.
    pub what: String,
    /// The query or command.
    pub text: String,
    /// The configuration the trace was recorded on.
    pub recorded: Recorded,
    /// Measured end-to-end time of the request at the host, ns.
    pub wall_ns: u64,
    /// Host CPU time of the final work after the last job's combine, ns.
    pub host_ns: u64,
    /// CPU time of the host process while the plan ran, ns (0: not measured).
    pub host_cpu_ns: u64,
    /// Disk job rounds, in the order they ran (one after another).
    pub jobs: Vec<JobStats>,
}

/// The configuration a trace was recorded on.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct Recorded {
    /// Disks that took part.
    pub disks: u32,
    /// Host cores.
    pub host_cpus: u32,
    /// Cores per disk process (fractional when CPU-limited).
    pub disk_cpus: f64,
    /// Measured host↔disk link rate per disk link, bytes/s; `None` = unknown/unlimited.
    pub host_link_bytes_per_s: Option<f64>,
    /// Disk↔disk link rate, bytes/s; `None` = unknown/unlimited.
    pub disk_link_bytes_per_s: Option<f64>,
    /// Disk read-rate throttle, bytes/s; `None` = none.
    pub disk_read_bytes_per_s: Option<f64>,
    /// Measured host↔disk round trip, ns.
    pub rtt_ns: u64,
    /// Cores of the one machine the host and every disk ran on (a local cluster); `None`:
    /// each disk on a machine of its own.
    pub shared_cpus: Option<f64>,
    /// The disks' emulated processor speed (their CPU figures are the machine's; each step
    /// took 1/speed as long); `None`: the machine's speed.
    pub disk_cpu_speed: Option<f64>,
}

/// One disk job round on the cluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct JobStats {
    /// What ran.
    pub description: String,
    /// Rows of the final result.
    pub result_rows: u64,
    /// Host CPU time combining this job's partial results, ns.
    pub host_combine_ns: u64,
    /// Wall time of the job seen by the host, ns.
    pub wall_ns: u64,
    /// Per disk (a disk may appear once per phase; its entries are summed).
    pub disks: Vec<DiskJobStats>,
}

/// One job on one disk.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct DiskJobStats {
    /// Disk number.
    pub disk_id: u32,
    /// Job id.
    pub job_id: String,
    /// Bytes read from storage.
    pub bytes_read: u64,
    /// Bytes skipped thanks to statistics.
    pub bytes_skipped: u64,
    /// Row groups read.
    pub row_groups_read: u64,
    /// Rows delivered by the input stream.
    pub rows_read: u64,
    /// Rows shipped out of the disk.
    pub rows_shipped: u64,
    /// Bytes shipped to the host.
    pub bytes_shipped_host: u64,
    /// Bytes shipped to other disks (exchange).
    pub bytes_shipped_disks: u64,
    /// CPU time of the whole job at this disk (reading, decoding, stages), ns.
    pub cpu_ns: u64,
    /// CPU time of the whole disk process while the job ran, ns (0: not measured).
    pub process_cpu_ns: u64,
    /// Wall time of the job at this disk, ns.
    pub wall_ns: u64,
    /// Time waiting for the memory grant before the job started, ns.
    pub admission_wait_ns: u64,
    /// Bytes written to the disk's storage.
    pub bytes_written: u64,
    /// When the host started the job on this disk, ns after the request began (0: not
    /// recorded).
    pub started_ns: u64,
    /// Wall time of the job as the host saw it, ns (0: not recorded).
    pub host_wall_ns: u64,
    /// Stages.
    pub stages: Vec<StageStats>,
}

/// One disklet stage of a job on one disk.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct StageStats {
    /// Disklet name.
    pub disklet: String,
    /// Rows in.
    pub rows_in: u64,
    /// Rows out.
    pub rows_out: u64,
    /// Bytes in.
    pub bytes_in: u64,
    /// Bytes out.
    pub bytes_out: u64,
    /// CPU time of the stage, ns (part of the disk's `cpu_ns`).
    pub cpu_ns: u64,
}

impl DiskJobStats {
    /// CPU time outside every stage: reading and decoding, ns.
    pub fn decode_cpu_ns(&self) -> u64 {
        let stages: u64 = self.stages.iter().map(|s| s.cpu_ns).sum();
        self.cpu_ns.saturating_sub(stages)
    }
}

/// Parse a trace from JSON text; `path` names it in errors.
///
/// # Errors
///
/// [`SimError::TraceNotJson`] when the text is not JSON (or a field has the wrong type),
/// [`SimError::TraceFormat`] when `format` is not `adisk-trace`,
/// [`SimError::TraceVersion`] when `version` is not 1,
/// [`SimError::TraceNoDisks`] when `recorded.disks` is 0,
/// [`SimError::TraceEmptyJob`] when a job's `disks` array is empty,
/// [`SimError::TraceInvalid`] for a negative, zero or non-finite rate or core count.
pub fn parse(path: &str, text: &str) -> Result<Trace, SimError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| SimError::TraceNotJson {
            path: path.into(),
            reason: e.to_string(),
        })?;
    let format = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
    if format != TRACE_FORMAT {
        return Err(SimError::TraceFormat {
            path: path.into(),
            found: value
                .get("format")
                .map_or("<missing>".into(), |f| f.to_string()),
        });
    }
    let version = value.get("version").and_then(|v| v.as_u64());
    if version != Some(TRACE_VERSION) {
        return Err(SimError::TraceVersion {
            path: path.into(),
            found: value
                .get("version")
                .map_or("<missing>".into(), |v| v.to_string()),
        });
    }
    let trace: Trace = serde_json::from_value(value).map_err(|e| SimError::TraceNotJson {
        path: path.into(),
        reason: e.to_string(),
    })?;
    validate(path, &trace)?;
    Ok(trace)
}

/// Read and parse a trace file.
///
/// # Errors
///
/// [`SimError::Io`] when the file cannot be read, else as [`parse`].
pub fn load(path: &std::path::Path) -> Result<Trace, SimError> {
    let text = std::fs::read_to_string(path).map_err(|e| SimError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    parse(&path.display().to_string(), &text)
}

fn validate(path: &str, trace: &Trace) -> Result<(), SimError> {
    let invalid = |key: &str, reason: String| SimError::TraceInvalid {
        path: path.into(),
        key: key.into(),
        reason,
    };
    if trace.recorded.disks == 0 {
        return Err(SimError::TraceNoDisks { path: path.into() });
    }
    if trace.jobs.len() > MAX_JOBS {
        return Err(invalid(
            "jobs",
            format!("at most {MAX_JOBS} jobs, got {}", trace.jobs.len()),
        ));
    }
    if let Some(job) = trace.jobs.iter().position(|j| j.disks.is_empty()) {
        return Err(SimError::TraceEmptyJob {
            path: path.into(),
            job,
        });
    }
    let r = &trace.recorded;
    if !(r.disk_cpus.is_finite() && r.disk_cpus >= 0.0) {
        return Err(invalid(
            "recorded.disk_cpus",
            format!("must be >= 0, got {}", r.disk_cpus),
        ));
    }
    if let Some(v) = r.disk_cpu_speed
        && !(v.is_finite() && v > 0.0 && v <= 1.0)
    {
        return Err(invalid(
            "recorded.disk_cpu_speed",
            format!("must be > 0 and <= 1, got {v}"),
        ));
    }
    if let Some(v) = r.shared_cpus
        && !(v.is_finite() && v >= 0.0)
    {
        return Err(invalid(
            "recorded.shared_cpus",
            format!("must be >= 0, got {v}"),
        ));
    }
    for (key, rate) in [
        ("recorded.host_link_bytes_per_s", r.host_link_bytes_per_s),
        ("recorded.disk_link_bytes_per_s", r.disk_link_bytes_per_s),
        ("recorded.disk_read_bytes_per_s", r.disk_read_bytes_per_s),
    ] {
        if let Some(v) = rate
            && !(v.is_finite() && v > 0.0)
        {
            return Err(invalid(
                key,
                format!("must be a positive rate or null, got {v}"),
            ));
        }
    }
    Ok(())
}
