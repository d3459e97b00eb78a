//! Replaying a runtime trace: rebuild the workload a real request ran (per job round, per disk:
//! bytes read, CPU, bytes shipped; from `adisk-trace` version 1) and simulate it on another
//! configuration — more or fewer disks, slower or faster disk and host CPUs, other link rates,
//! an HDD or an SSD — or on the recorded one, to check the model against the measured time.
//!
//! ```text
//!  trace.json ─► trace::parse ─► schedule::schedule (per job: workload::job_work on the
//!                                replayed disks, the jobs it waited for, the host's gaps)
//!  config.toml + flags ─► config::ReplayFile::resolve (left out = as recorded)
//!           └──► pipeline::run_request (des::EventQueue; model::{disk,ssd,cpu,link}): jobs
//!                that overlapped when recorded run side by side on the same stations
//!                ─► report::ReplayReport (table | JSON)
//! ```
//!
//! Assumptions (also in `docs/simulator.md`): a job's data spreads evenly over the replayed
//! disks (per-disk volumes and CPU scale by recorded/replayed disks); CPU time scales by
//! 1/speed and is divisible over a disk's cores chunk by chunk; when the host and the disks
//! shared one machine (`shared_cpus`), their CPU work also queues for its cores; the decode
//! CPU measured on the recording stays when storage becomes an HDD or SSD (their device time
//! is added); host combining streams (per arriving chunk) over the host's cores; the host's
//! time before, between and after the jobs is the recorded gaps scaled by its CPU speed; one
//! round trip per job.

pub mod config;
pub mod pipeline;
pub mod report;
pub mod schedule;
pub mod trace;
pub mod workload;

use crate::SimError;
use crate::time::SimDuration;
use config::ReplayConfig;
use report::{JobPrediction, ReplayReport};
use trace::Trace;

/// Replay `trace` on `cfg`. `recorded_configuration` says whether `cfg` is the configuration
/// the trace was recorded on (the report then sets the measured times beside the predictions).
///
/// # Errors
///
/// [`SimError::Config`] when the storage spec is not valid.
pub fn replay(
    trace: &Trace,
    cfg: &ReplayConfig,
    recorded_configuration: bool,
) -> Result<ReplayReport, SimError> {
    let plan = schedule::schedule(trace, cfg);
    let run = pipeline::run_request(&plan.jobs, cfg).map_err(|reason| SimError::Config {
        file: "replay configuration".into(),
        key: format!("{:?}", cfg.storage).to_lowercase(),
        reason,
    })?;
    let jobs = (0..plan.jobs.len())
        .map(|i| {
            let (job, p, r) = (&trace.jobs[i], &plan.jobs[i], &run.jobs[i]);
            JobPrediction::new(i, job, p, r, recorded_configuration)
        })
        .collect();
    let host_final = SimDuration::from_secs_f64(plan.tail_ns as f64 * 1e-9 / cfg.host_cpu_speed);
    let total = run.end + host_final;
    Ok(ReplayReport::new(
        trace,
        cfg.clone(),
        recorded_configuration,
        jobs,
        (host_final.0, plan.timed, run.events),
        total.0,
    ))
}

/// Load a trace and a configuration (file and flags) and replay.
///
/// # Errors
///
/// As [`trace::load`], [`config::load`], [`config::ReplayFile::resolve`] and [`replay`].
pub fn replay_files(
    trace_path: &std::path::Path,
    config_path: Option<&std::path::Path>,
    overrides: &config::ReplayOverrides,
) -> Result<ReplayReport, SimError> {
    let trace = trace::load(trace_path)?;
    let (file, name) = match config_path {
        Some(p) => (config::load(p)?, p.display().to_string()),
        None => (config::ReplayFile::default(), "command line".to_string()),
    };
    let given = file.with_overrides(overrides);
    let cfg = given.resolve(&name, &trace.recorded)?;
    let recorded = config::ReplayFile::default().resolve("recording", &trace.recorded)?;
    replay(&trace, &cfg, cfg == recorded)
}
