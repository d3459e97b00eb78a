//! Jobs on one disk: the DiskOS facade ([`DiskOs`]) and its limits; admission (`admit`),
//! building a job's stages (`build`), running them (`launch`), where their output goes
//! (`sink`) and a job's live state ([`state`]).

mod admit;
mod build;
mod launch;
mod sink;
pub mod state;

pub use crate::cancel::CancelFlag;
use crate::exchange::ExchangeRegistry;
use crate::expr::ExprPlanner;
use crate::memory::MemoryBudget;
use crate::sched::{FairScheduler, MAX_COMPUTE_WAITERS_DEFAULT};
use crate::stream::StreamRx;
use crate::{DiskOsError, Result};
pub use adisk_core::builder::grant::{
    EMIT_BUFFERS_PER_PORT, MIN_JOB_BUFFER_KIB, STORE_BUFFERS, grant_beyond_scratch,
    grant_beyond_scratch_at,
};
use adisk_core::protocol::DiskStatus;
use adisk_core::stats::DiskJobStats;
use adisk_storage::store::DiskStore;
use arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
pub use state::JobState;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Temporary disk space a disk grants its jobs in all, unless configured otherwise.
pub const DEFAULT_TEMP_BYTES: u64 = 4 << 30;

/// DiskOS limits of one disk.
#[derive(Clone, Debug)]
pub struct DiskOsConfig {
    /// Disk number.
    pub disk_id: u32,
    /// Memory budget.
    pub memory_bytes: u64,
    /// Bytes per stream buffer.
    pub buffer_bytes: u64,
    /// Buffers per stream.
    pub buffers_per_stream: u32,
    /// Buffers processed or decoded at once (compute slots, shared fairly per program).
    pub compute_slots: usize,
    /// Steps that may wait for a compute slot.
    pub max_compute_waiters: u32,
    /// Jobs that may wait for memory.
    pub max_waiting_jobs: u32,
    /// Longest wait for memory.
    pub admission_timeout: Duration,
    /// Scratch per stage when a job asks for 0.
    pub default_scratch_bytes: u64,
    /// Finished jobs whose statistics are kept.
    pub finished_jobs_kept: usize,
    /// Storage read rate limit in bytes per second, shared by all jobs (0: unthrottled).
    pub read_bytes_per_sec: u64,
    /// Emulated processor speed relative to this machine's cores, in (0, 1]: every compute
    /// step is followed by a pause of its CPU time × (1/speed − 1), holding its slot
    /// ([`FairScheduler::with_speed`]). 1: no emulation.
    pub cpu_speed: f64,
    /// Temporary disk space (spill files, temporary streams) the disk grants jobs in all.
    pub temp_bytes: u64,
    /// Run a stage whose only input is the only output of the stage before it on that
    /// stage's thread ([`crate::fused`]).
    pub fuse_stages: bool,
    /// CPU per buffer (ns) from which a fused stage moves to a thread of its own
    /// ([`crate::stage::APART_CPU_NS`] by default).
    pub apart_cpu_ns: u64,
}

impl DiskOsConfig {
    /// Defaults for a disk of `memory_bytes` with `buffer_bytes` buffers.
    pub fn new(
        disk_id: u32,
        memory_bytes: u64,
        buffer_bytes: u64,
        buffers_per_stream: u32,
    ) -> Self {
        DiskOsConfig {
            disk_id,
            memory_bytes,
            buffer_bytes,
            buffers_per_stream,
            compute_slots: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            max_compute_waiters: MAX_COMPUTE_WAITERS_DEFAULT,
            max_waiting_jobs: 64,
            admission_timeout: Duration::from_secs(60),
            default_scratch_bytes: (memory_bytes / 4).max(buffer_bytes),
            finished_jobs_kept: 1024,
            read_bytes_per_sec: 0,
            cpu_speed: 1.0,
            temp_bytes: DEFAULT_TEMP_BYTES,
            fuse_stages: true,
            apart_cpu_ns: crate::stage::APART_CPU_NS,
        }
    }
}

/// Where one pipe stream of an exchange output goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipeRoute {
    /// Address of the receiving disk.
    pub target: String,
    /// Address of the relay the stream passes through (the host's), if any.
    pub relay: Option<String>,
    /// Exchange id.
    pub exchange_id: String,
    /// The sending job's number among the exchange's senders.
    pub sender: u32,
    /// The sending disk's id.
    pub from: u32,
}

/// Whether the sending job is still intact, else why not ([`JobState::intact`]).
pub type Intact = Arc<dyn Fn() -> std::result::Result<(), String> + Send + Sync>;

/// Sends the output ports of an exchange job to other disks (provided by the disk server).
pub trait PipeConnector: Send + Sync + 'static {
    /// Streams `rx` along `route`; returns (bytes, rows) sent. When `rx` ends, the stream ends
    /// cleanly only if `intact()` says so; otherwise it is reset (and the call fails), so the
    /// receiver never counts the rows of a failed sender as all of them.
    fn send(
        &self,
        route: PipeRoute,
        schema: SchemaRef,
        rx: StreamRx,
        intact: Intact,
    ) -> BoxFuture<'static, Result<(u64, u64)>>;
}

/// A job that was admitted and is running.
pub struct RunningJob {
    /// Schema of what the job sends the host (for [`Sink::Host`]).
    pub schema: SchemaRef,
    /// Output buffers for the host (closed at once for exchange sinks).
    pub output: StreamRx,
    /// Live statistics.
    pub state: Arc<JobState>,
    /// Completes when every task of the job ended; carries the first error.
    pub done: oneshot::Receiver<Result<(), DiskOsError>>,
}

/// The DiskOS of one disk.
pub struct DiskOs {
    config: DiskOsConfig,
    store: Arc<DiskStore>,
    budget: Arc<MemoryBudget>,
    compute: Arc<FairScheduler>,
    planner: ExprPlanner,
    exchanges: Arc<ExchangeRegistry>,
    connector: Arc<dyn PipeConnector>,
    running: Mutex<Vec<Arc<JobState>>>,
    user: std::sync::OnceLock<Arc<dyn crate::user::UserDisklets>>,
    apps: std::sync::OnceLock<Arc<dyn crate::apps::AppDisklets>>,
    finished: Mutex<VecDeque<Arc<JobState>>>,
    jobs_finished: AtomicU64,
    /// What ended jobs moved (`adisk status`, the disk's `/metrics`).
    totals: Mutex<adisk_core::protocol::DiskTotals>,
    jobs_failed: AtomicU64,
    /// Jobs stopped because a disklet made no progress ([`DiskOsError::NoProgress`]).
    jobs_stalled: AtomicU64,
    /// Jobs cancelled because their host stopped waiting for them ([`JobState::abandon`]).
    jobs_abandoned: AtomicU64,
    read_limiter: Option<Arc<crate::stream::ReadLimiter>>,
    temp_budget: MemoryBudget,
    temp_serial: AtomicU64,
}

impl DiskOs {
    /// A DiskOS over `store`.
    pub fn new(
        config: DiskOsConfig,
        store: Arc<DiskStore>,
        connector: Arc<dyn PipeConnector>,
    ) -> Arc<Self> {
        let os = Arc::new(DiskOs {
            budget: Arc::new(MemoryBudget::new(
                config.memory_bytes,
                config.max_waiting_jobs,
                config.admission_timeout,
            )),
            compute: FairScheduler::with_speed(
                u32::try_from(config.compute_slots).unwrap_or(u32::MAX),
                config.max_compute_waiters,
                config.cpu_speed,
            ),
            read_limiter: (config.read_bytes_per_sec > 0)
                .then(|| Arc::new(crate::stream::ReadLimiter::new(config.read_bytes_per_sec))),
            planner: ExprPlanner::default(),
            exchanges: Arc::new(ExchangeRegistry::new(config.buffers_per_stream as usize)),
            connector,
            running: Mutex::new(Vec::new()),
            user: std::sync::OnceLock::new(),
            apps: std::sync::OnceLock::new(),
            finished: Mutex::new(VecDeque::new()),
            jobs_finished: AtomicU64::new(0),
            totals: Mutex::default(),
            jobs_failed: AtomicU64::new(0),
            jobs_stalled: AtomicU64::new(0),
            jobs_abandoned: AtomicU64::new(0),
            temp_budget: MemoryBudget::new(
                config.temp_bytes,
                config.max_waiting_jobs,
                config.admission_timeout,
            ),
            temp_serial: AtomicU64::new(0),
            config,
            store,
        });
        os.clear_temp_root();
        os
    }

    /// Removes what jobs of an earlier run of this disk left in the temporary area (a crash,
    /// a kill): no job of this run can own it.
    fn clear_temp_root(&self) {
        let root = self.temp_root();
        match std::fs::remove_dir_all(&root) {
            Ok(()) => {
                tracing::warn!(dir = %root.display(), "removed temporary files an earlier run left")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %root.display(), "could not clear the temporary area: {e}")
            }
        }
    }

    /// Installs the registry of user disklets (once; later calls are ignored).
    pub fn set_user_disklets(&self, user: Arc<dyn crate::user::UserDisklets>) {
        let _ = self.user.set(user);
    }

    /// Installs the applications' native disklets (once; later calls are ignored).
    pub fn set_app_disklets(&self, apps: Arc<dyn crate::apps::AppDisklets>) {
        let _ = self.apps.set(apps);
    }

    /// The registry of user disklets, if the disk node provides one.
    pub fn user_disklets(&self) -> Option<&Arc<dyn crate::user::UserDisklets>> {
        self.user.get()
    }

    /// The store.
    pub fn store(&self) -> &Arc<DiskStore> {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &DiskOsConfig {
        &self.config
    }

    /// Takes `bytes` of the memory budget for work that is not a job (copying a partition to
    /// or from another disk), waiting like a job's admission; returned when the grant drops.
    ///
    /// # Errors
    /// As a job's admission: larger than the budget, queue full, timeout.
    pub async fn grant_memory(&self, bytes: u64) -> Result<crate::memory::Grant> {
        self.budget.grant(bytes).await
    }

    /// The exchange inboxes.
    pub fn exchanges(&self) -> &Arc<ExchangeRegistry> {
        &self.exchanges
    }

    /// Status for `adisk status`.
    pub fn status(&self) -> DiskStatus {
        let catalog = self.store.catalog();
        DiskStatus {
            disk_id: self.config.disk_id,
            pid: std::process::id(),
            memory_bytes: self.budget.total_bytes(),
            memory_granted_bytes: self.budget.granted_bytes(),
            buffer_bytes: self.config.buffer_bytes,
            buffers_per_stream: self.config.buffers_per_stream,
            jobs_running: self.running.lock().expect("running lock").len() as u32,
            jobs_waiting: self.budget.waiting(),
            jobs_finished: self.jobs_finished.load(Ordering::Relaxed),
            jobs_failed: self.jobs_failed.load(Ordering::Relaxed),
            jobs_stalled: self.jobs_stalled.load(Ordering::Relaxed),
            jobs_abandoned: self.jobs_abandoned.load(Ordering::Relaxed),
            tables: catalog
                .tables
                .iter()
                .map(|t| (t.name.clone(), t.partitions.iter().map(|p| p.rows).sum()))
                .collect(),
            temp_granted_bytes: self.temp_budget.granted_bytes(),
            temp_files_bytes: directory_bytes(&self.temp_root()),
            exchange_inboxes: self.exchanges.open() as u32,
            totals: self.totals.lock().expect("totals lock").clone(),
            machine: adisk_core::net::machine_id(),
        }
    }

    /// Statistics of a running or recently finished job.
    pub fn job_stats(&self, job_id: &str) -> Option<DiskJobStats> {
        if let Some(s) = self
            .running
            .lock()
            .expect("running lock")
            .iter()
            .find(|s| s.job_id == job_id)
        {
            return Some(s.snapshot());
        }
        self.finished
            .lock()
            .expect("finished lock")
            .iter()
            .rev()
            .find(|s| s.job_id == job_id)
            .map(|s| DiskJobStats {
                ended: true,
                ..s.snapshot()
            })
    }

    /// Adds bytes a job's output sent the host to the disk's totals (its service counts them
    /// as it encodes them, which can be after the job was retired).
    pub fn count_host_bytes(&self, bytes: u64) {
        self.totals.lock().expect("totals lock").bytes_shipped_host += bytes;
    }

    fn retire(&self, state: &Arc<JobState>, error: Option<&DiskOsError>) {
        self.running
            .lock()
            .expect("running lock")
            .retain(|s| !Arc::ptr_eq(s, state));
        let mut finished = self.finished.lock().expect("finished lock");
        finished.push_back(state.clone());
        while finished.len() > self.config.finished_jobs_kept {
            finished.pop_front();
        }
        drop(finished);
        // Bytes to the host are counted as they are encoded (`count_host_bytes`).
        let mut stats = state.snapshot();
        stats.bytes_shipped_host = 0;
        self.totals.lock().expect("totals lock").add(&stats);
        if matches!(error, Some(DiskOsError::NoProgress { .. })) {
            self.jobs_stalled.fetch_add(1, Ordering::Relaxed);
        }
        if error.is_some() && state.abandoned.load(Ordering::Relaxed) {
            self.jobs_abandoned.fetch_add(1, Ordering::Relaxed);
        }
        if error.is_some() {
            self.jobs_failed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.jobs_finished.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Bytes of the files under `dir` (0 when it does not exist).
fn directory_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => directory_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}
