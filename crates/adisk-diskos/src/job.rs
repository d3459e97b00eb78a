//! Jobs: admission, building and wiring of job graphs, fair scheduling, statistics.
use crate::disklet::{Disklet, Emitter, InputBuffer, NextInput};
use crate::disklets::fragment::Spill;
use crate::exchange::{ExchangeRegistry, PipeMessage};
use crate::expr::ExprPlanner;
use crate::fused::{InlineStage, Out};
use crate::memory::{Account, Grant, MemoryBudget};
use crate::sched::{FairScheduler, JobCompute, MAX_COMPUTE_WAITERS_DEFAULT};
use crate::stream::{
    Buffer, FileScan, ReadCounters, SkipList, StreamHold, StreamRx, StreamTx, TableScan,
    file_schema, projected_schema, stream,
};
use crate::wiring::{Router, TempArea};
use crate::{DiskOsError, Result, disklets};
pub use adisk_core::builder::grant::{
    EMIT_BUFFERS_PER_PORT, MIN_JOB_BUFFER_KIB, STORE_BUFFERS, grant_beyond_scratch,
    grant_beyond_scratch_at,
};
use adisk_core::builder::grant::{GrantSizes, emit_allowance, job_grant};
use adisk_core::protocol::{
    DiskStatus, DiskletSpec, FragmentKind, JobSpec, Port, Sink, Source, StoredStream,
};
use adisk_core::stats::{DiskJobStats, StageStats};
use adisk_storage::StorageError;
use adisk_storage::store::DiskStore;
use adisk_storage::writer::PartitionWriter;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::physical_optimizer::pruning::PruningPredicate;
use futures::future::BoxFuture;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

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
    /// Temporary disk space (spill files, temporary streams) the disk grants jobs in all.
    pub temp_bytes: u64,
    /// Run a stage whose only input is the only output of the stage before it on that
    /// stage's thread ([`crate::fused`]).
    pub fuse_stages: bool,
    /// CPU per buffer (ns) from which a fused stage moves to a thread of its own
    /// ([`crate::fused::APART_CPU_NS`] by default).
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
            temp_bytes: DEFAULT_TEMP_BYTES,
            fuse_stages: true,
            apart_cpu_ns: crate::fused::APART_CPU_NS,
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

/// Holds on every stream among `outputs` (also those of the fused stages in them).
pub(crate) fn holds_of(outputs: &[Out]) -> Vec<StreamHold> {
    let mut holds = Vec::new();
    for out in outputs {
        match out {
            Out::Stream(tx) | Out::Apart(tx, _) => holds.push(tx.hold()),
            Out::Inline(stage) => holds.extend(holds_of(stage.outputs())),
            Out::Closed => {}
        }
    }
    holds
}

#[derive(Default)]
struct StageCounters {
    name: &'static str,
    rows_in: AtomicU64,
    rows_out: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    cpu_ns: AtomicU64,
    scratch_granted: u64,
    scratch_peak: AtomicU64,
    flushes: AtomicU64,
    spilled: AtomicU64,
    setup_ns: (u64, u64),
    /// Since the job's start: the first step's start + 1 (0: none yet), the last step's end.
    first_step_ns: AtomicU64,
    last_step_ns: AtomicU64,
}

/// Live state of a job; a snapshot of it is the job's [`DiskJobStats`].
pub struct JobState {
    job_id: String,
    disk_id: u32,
    started: Instant,
    read: Arc<ReadCounters>,
    stages: Vec<StageCounters>,
    /// Arrow IPC bytes shipped to the host (counted by the server).
    pub shipped_host_bytes: AtomicU64,
    shipped_disk_bytes: AtomicU64,
    /// Rows shipped out of the disk.
    pub rows_shipped: AtomicU64,
    /// CPU time spent encoding output (counted by the server).
    pub encode_cpu_ns: AtomicU64,
    admission_wait_ns: AtomicU64,
    schedule_wait_ns: Arc<AtomicU64>,
    granted_bytes: AtomicU64,
    account: Mutex<Option<Arc<Account>>>,
    /// Bytes of named results written.
    written_bytes: Arc<AtomicU64>,
    temp_granted: AtomicU64,
    temp_written: Mutex<Option<Arc<AtomicU64>>>,
    wall_ns: AtomicU64,
    failed: AtomicBool,
    /// Set the moment any part of the job fails, before that part's output streams close.
    broken: Mutex<Option<String>>,
    error: Mutex<Option<String>>,
    cancel: tokio::sync::watch::Sender<bool>,
    /// Set by [`JobState::abandon`].
    abandoned: AtomicBool,
}

/// A job's cancellation as guest code's interrupt checks read it: without waiting, from any
/// thread (a user disklet's loop is stopped between two checks once it is set).
#[derive(Clone)]
pub struct CancelFlag(tokio::sync::watch::Receiver<bool>);

impl CancelFlag {
    /// Whether the job was cancelled.
    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// A flag that is never set (a disklet run outside any job: tests, tools).
    pub fn never() -> Self {
        CancelFlag(tokio::sync::watch::Sender::new(false).subscribe())
    }

    /// A flag and the sender that sets it (`send_replace(true)`).
    pub fn new() -> (tokio::sync::watch::Sender<bool>, Self) {
        let tx = tokio::sync::watch::Sender::new(false);
        let flag = CancelFlag(tx.subscribe());
        (tx, flag)
    }
}

/// A job's cancellation before its [`JobState`] exists (while its stages are built, which
/// runs user code): set if the admission is abandoned, e.g. its request dropped.
struct PendingCancel(Option<tokio::sync::watch::Sender<bool>>);

impl PendingCancel {
    fn new() -> Self {
        PendingCancel(Some(tokio::sync::watch::Sender::new(false)))
    }
    fn flag(&self) -> CancelFlag {
        CancelFlag(self.0.as_ref().expect("armed").subscribe())
    }
    /// The sender, for the job's state: the job owns its cancellation from here on.
    fn disarm(mut self) -> tokio::sync::watch::Sender<bool> {
        self.0.take().expect("armed")
    }
}

impl Drop for PendingCancel {
    fn drop(&mut self) {
        if let Some(tx) = &self.0 {
            tx.send_replace(true);
        }
    }
}

impl JobState {
    /// Cancels the job (its consumer went away): sources waiting for pipe or host input stop.
    pub fn cancel(&self) {
        self.cancel.send_replace(true);
    }

    /// Cancels the job because its host stopped waiting for it (its result stream was dropped
    /// while it ran: the host went away, its connection lapsed, or it gave up on the query);
    /// counted in the disk's `jobs_abandoned` when the job ends.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
        self.cancel();
    }

    /// The job's cancellation, for code that cannot await it.
    pub fn cancel_flag(&self) -> CancelFlag {
        CancelFlag(self.cancel.subscribe())
    }

    /// Whether the job was cancelled.
    pub fn cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    fn new(
        job_id: &str,
        disk_id: u32,
        stages: &[(&'static str, u64, (u64, u64))],
        cancel: tokio::sync::watch::Sender<bool>,
    ) -> Self {
        JobState {
            job_id: job_id.to_string(),
            disk_id,
            started: Instant::now(),
            read: Arc::new(ReadCounters::default()),
            stages: stages
                .iter()
                .map(|(name, scratch, setup_ns)| StageCounters {
                    name,
                    scratch_granted: *scratch,
                    setup_ns: *setup_ns,
                    ..Default::default()
                })
                .collect(),
            shipped_host_bytes: AtomicU64::new(0),
            shipped_disk_bytes: AtomicU64::new(0),
            rows_shipped: AtomicU64::new(0),
            encode_cpu_ns: AtomicU64::new(0),
            admission_wait_ns: AtomicU64::new(0),
            schedule_wait_ns: Arc::new(AtomicU64::new(0)),
            granted_bytes: AtomicU64::new(0),
            account: Mutex::new(None),
            written_bytes: Arc::new(AtomicU64::new(0)),
            temp_granted: AtomicU64::new(0),
            temp_written: Mutex::new(None),
            wall_ns: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            broken: Mutex::new(None),
            error: Mutex::new(None),
            cancel,
            abandoned: AtomicBool::new(false),
        }
    }

    /// True while no part of the job failed and it was not cancelled. An exchange sender asks
    /// when its stream ended: only an intact job ends a pipe stream cleanly; any other end
    /// resets it, so its receiver never takes a cut stream for a finished one.
    pub fn intact(&self) -> std::result::Result<(), String> {
        if let Some(why) = &*self.broken.lock().expect("broken lock") {
            return Err(why.clone());
        }
        if self.cancelled() {
            return Err("the job was cancelled".into());
        }
        Ok(())
    }

    /// A producer's outcome: a failure marks the job broken, and only then are the producer's
    /// output streams let go (`holds`), so their readers see the mark when they see the end.
    pub(crate) fn settle<T>(&self, r: Result<T>, holds: Vec<StreamHold>) -> Result<T> {
        if let Err(e) = &r {
            self.broken
                .lock()
                .expect("broken lock")
                .get_or_insert_with(|| e.to_string());
        }
        drop(holds);
        r
    }

    fn fail(&self, e: &DiskOsError) {
        self.failed.store(true, Ordering::SeqCst);
        *self.error.lock().expect("error lock") = Some(e.to_string());
    }

    /// True once any part of the job failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Marks the end of the job (wall time).
    pub fn finish_wall(&self) {
        self.wall_ns
            .store(self.started.elapsed().as_nanos() as u64, Ordering::SeqCst);
    }

    /// Statistics now.
    pub fn snapshot(&self) -> DiskJobStats {
        let r = &self.read;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let stages: Vec<StageStats> = self
            .stages
            .iter()
            .map(|s| StageStats {
                disklet: s.name.to_string(),
                rows_in: l(&s.rows_in),
                rows_out: l(&s.rows_out),
                bytes_in: l(&s.bytes_in),
                bytes_out: l(&s.bytes_out),
                cpu_ns: l(&s.cpu_ns),
                scratch_granted_bytes: s.scratch_granted,
                scratch_peak_bytes: l(&s.scratch_peak),
                flushes: l(&s.flushes),
                spilled_bytes: l(&s.spilled),
                compile_ns: s.setup_ns.0,
                instantiate_ns: s.setup_ns.1,
                first_step_ns: l(&s.first_step_ns).saturating_sub(1),
                last_step_ns: l(&s.last_step_ns),
            })
            .collect();
        let wall = match l(&self.wall_ns) {
            0 => self.started.elapsed().as_nanos() as u64,
            w => w,
        };
        DiskJobStats {
            disk_id: self.disk_id,
            job_id: self.job_id.clone(),
            bytes_read: l(&r.bytes_read),
            bytes_skipped: l(&r.bytes_skipped),
            partitions_read: l(&r.partitions_read),
            partitions_skipped: l(&r.partitions_skipped),
            row_groups_read: l(&r.row_groups_read),
            row_groups_skipped: l(&r.row_groups_skipped),
            rows_read: l(&r.rows_read),
            rows_dropped_at_decode: r.rows_dropped.load(Ordering::Relaxed),
            bytes_scanned: l(&r.bytes_scanned),
            rows_shipped: l(&self.rows_shipped),
            bytes_shipped_host: l(&self.shipped_host_bytes),
            bytes_shipped_disks: l(&self.shipped_disk_bytes),
            cpu_ns: l(&r.cpu_ns)
                + stages.iter().map(|s| s.cpu_ns).sum::<u64>()
                + l(&self.encode_cpu_ns),
            wall_ns: wall,
            admission_wait_ns: l(&self.admission_wait_ns),
            schedule_wait_ns: l(&self.schedule_wait_ns),
            memory_granted_bytes: l(&self.granted_bytes),
            memory_peak_bytes: self
                .account
                .lock()
                .expect("account lock")
                .as_ref()
                .map_or(0, |a| a.peak()),
            bytes_written: l(&self.written_bytes),
            temp_granted_bytes: l(&self.temp_granted),
            temp_peak_bytes: self
                .temp_written
                .lock()
                .expect("temp lock")
                .as_ref()
                .map_or(0, |w| l(w)),
            stages,
            error: self.error.lock().expect("error lock").clone(),
            ended: false,
        }
    }
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
            compute: FairScheduler::new(
                u32::try_from(config.compute_slots).unwrap_or(u32::MAX),
                config.max_compute_waiters,
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

    fn build_stage(
        &self,
        stage: &DiskletSpec,
        inputs: &[SchemaRef],
        scratch_bytes: u64,
        spill: Option<&Spill>,
        cancel: &CancelFlag,
    ) -> Result<Box<dyn Disklet>> {
        match stage {
            DiskletSpec::Wasm { name, params, fuel } => {
                self.user_disklets_or_refuse()?
                    .build(name, params, *fuel, inputs, cancel.clone())
            }
            DiskletSpec::App {
                app,
                name,
                params,
                ports,
                ..
            } => self
                .apps
                .get()
                .ok_or_else(|| {
                    DiskOsError::InvalidJob("this disk runs no application disklets".into())
                })?
                .build(crate::apps::AppStage {
                    app,
                    disklet: name,
                    params,
                    inputs,
                    ports: *ports as usize,
                    scratch_bytes,
                }),
            _ => disklets::build(stage, inputs, scratch_bytes, &self.planner, spill),
        }
    }

    fn user_disklets_or_refuse(&self) -> Result<&Arc<dyn crate::user::UserDisklets>> {
        self.user
            .get()
            .ok_or_else(|| DiskOsError::InvalidJob("this disk does not run user disklets".into()))
    }

    /// Checks every user disklet stage against the shape its module declared at install: the
    /// inputs it reads and the output ports the job reads (`ports`, per stage, from the graph
    /// check). Runs before admission; no guest code runs.
    fn check_user_shapes(&self, spec: &JobSpec, ports: &[u32]) -> Result<()> {
        for (i, stage) in spec.stages.iter().enumerate() {
            let DiskletSpec::Wasm { name, .. } = &stage.disklet else {
                continue;
            };
            let declared = self.user_disklets_or_refuse()?.shape(name)?;
            let wired = (stage.inputs.len(), ports[i] as usize);
            if (declared.inputs, declared.outputs) != wired {
                let message = format!(
                    "stage {i}: user disklet `{name}` (ABI v{}) takes {} input(s) and writes {} output port(s); the job wires {} input(s) and reads {} port(s)",
                    declared.abi, declared.inputs, declared.outputs, wired.0, wired.1
                );
                return Err(DiskOsError::UserDisklet {
                    kind: crate::user::UserDiskletFailure::Invalid,
                    message,
                });
            }
        }
        Ok(())
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

    fn scratch_for(&self, spec: &JobSpec, index: usize, stage: &DiskletSpec) -> u64 {
        let kib = match spec.stage_scratch_kib.get(index) {
            Some(&k) if k > 0 => k,
            _ => spec.scratch_kib,
        };
        let requested = if kib == 0 {
            self.config.default_scratch_bytes
        } else {
            kib.saturating_mul(1024)
        };
        match stage {
            DiskletSpec::Fragment {
                kind: FragmentKind::Aggregate | FragmentKind::Sort | FragmentKind::Stage,
                ..
            }
            | DiskletSpec::Merge { .. }
            | DiskletSpec::App { .. }
            | DiskletSpec::HashJoin { .. } => requested,
            DiskletSpec::Fragment {
                kind: FragmentKind::Select,
                ..
            } => 0,
            DiskletSpec::BloomProbe { filter, .. } => {
                (filter.size_bytes() as u64).max(requested.min(filter.size_bytes() as u64))
            }
            DiskletSpec::Select { .. } | DiskletSpec::Partition { .. } => 0,
            // The whole linear memory of a user disklet (scratch + input area) is its grant.
            DiskletSpec::Wasm { name, .. } => self
                .user
                .get()
                .and_then(|u| u.grant_bytes(name).ok())
                .unwrap_or(0),
        }
    }

    /// The stream buffer size of `spec`: its own request, or the disk's.
    fn job_buffer_bytes(&self, spec: &JobSpec) -> Result<u64> {
        if spec.buffer_kib == 0 {
            return Ok(self.config.buffer_bytes);
        }
        if !(MIN_JOB_BUFFER_KIB..=adisk_core::protocol::MAX_JOB_BUFFER_KIB)
            .contains(&spec.buffer_kib)
        {
            return Err(DiskOsError::InvalidJob(format!(
                "stream buffers of {} KiB asked for (allowed: {MIN_JOB_BUFFER_KIB} to {} KiB)",
                spec.buffer_kib,
                adisk_core::protocol::MAX_JOB_BUFFER_KIB
            )));
        }
        if spec
            .disklets()
            .any(|s| matches!(s, DiskletSpec::Wasm { .. }))
            && spec.buffer_kib * 1024 != self.config.buffer_bytes
        {
            // A user disklet's input area is sized for the disk's buffers at install.
            return Err(DiskOsError::InvalidJob(
                "a job with a user disklet runs with the disk's own buffer size".into(),
            ));
        }
        Ok(spec.buffer_kib * 1024)
    }

    /// Admits and starts a job. `host_input` feeds its [`Source::Host`] input, if it has one.
    ///
    /// The grant — every stream's buffer slots, every stage's scratch and the temporary disk
    /// space — is computed from the spec alone and taken before any stage is built: no plan
    /// fragment is decoded, no Bloom filter checked and no user disklet instantiated (its
    /// `init` is guest code) for a job that is refused, and a failure while building returns
    /// the grant at once.
    ///
    /// # Errors
    /// A malformed graph, unknown table/column, invalid stages, memory or temporary space
    /// refused — before anything runs.
    pub async fn start_job(
        self: &Arc<Self>,
        spec: JobSpec,
        host_input: Option<mpsc::Receiver<RecordBatch>>,
    ) -> Result<RunningJob> {
        let shape =
            adisk_core::graph::check(&spec).map_err(|e| DiskOsError::InvalidJob(e.to_string()))?;
        self.check_user_shapes(&spec, &shape.stage_ports)?;
        let host_inputs = spec
            .inputs
            .iter()
            .filter(|s| matches!(s, Source::Host { .. }))
            .count();
        if host_inputs > 1 || (host_inputs == 1) != host_input.is_some() {
            return Err(DiskOsError::InvalidJob(
                "a host-resident input needs a DoExchange call (and only it), one per job".into(),
            ));
        }
        let sources = spec
            .inputs
            .iter()
            .map(|s| self.plan_source(s))
            .collect::<Result<Vec<_>>>()?;
        let buffer_bytes = self.job_buffer_bytes(&spec)?;
        let scratch: Vec<u64> = spec
            .disklets()
            .enumerate()
            .map(|(i, d)| self.scratch_for(&spec, i, d))
            .collect();
        let sizes = GrantSizes {
            buffer_bytes,
            slots_per_stream: crate::stream::slots_per_stream(self.config.buffers_per_stream),
            inbox_messages: self.exchanges.capacity(),
        };
        let requested = job_grant(&spec, &shape, &scratch, &sizes);
        let wait = Instant::now();
        let grant = self.budget.grant(requested).await?;
        let temp = self.temp_grant(&spec).await?;
        let admission_wait_ns = wait.elapsed().as_nanos() as u64;
        let area = TempArea::new(
            &self.temp_root(),
            self.temp_serial.fetch_add(1, Ordering::Relaxed),
            temp.as_ref().map_or(0, Grant::bytes),
        );
        // Only now is stage code run (a failure drops the grants, returning them).
        let pending = PendingCancel::new();
        let built = self
            .build(
                &spec,
                &sources,
                &scratch,
                &shape.stage_ports,
                &area,
                pending.flag(),
            )
            .await?;
        let described: Vec<(&'static str, u64, (u64, u64))> = built
            .stages
            .iter()
            .zip(&scratch)
            .map(|(d, s)| (d.name(), *s, d.setup_ns()))
            .collect();
        let state = Arc::new(JobState::new(
            &spec.job_id,
            self.config.disk_id,
            &described,
            pending.disarm(),
        ));
        state
            .admission_wait_ns
            .store(admission_wait_ns, Ordering::Relaxed);
        state.granted_bytes.store(grant.bytes(), Ordering::Relaxed);
        *state.account.lock().expect("account lock") = Some(grant.account().clone());
        state
            .temp_granted
            .store(temp.as_ref().map_or(0, Grant::bytes), Ordering::Relaxed);
        *state.temp_written.lock().expect("temp lock") = Some(area.written_counter());
        self.running
            .lock()
            .expect("running lock")
            .push(state.clone());
        let job = Launch {
            spec,
            grants: (grant, temp),
            area: Arc::new(area),
            state,
            sources,
            built,
            host_input,
            buffer_bytes,
        };
        Ok(self.launch(job))
    }

    /// The temporary-space grant of `spec` (none when it asks for none).
    async fn temp_grant(&self, spec: &JobSpec) -> Result<Option<Grant>> {
        if spec.temp_kib == 0 {
            return Ok(None);
        }
        let bytes = spec.temp_kib.saturating_mul(1024);
        match self.temp_budget.grant(bytes).await {
            Ok(g) => Ok(Some(g)),
            Err(DiskOsError::GrantTooLarge {
                requested_bytes,
                budget_bytes,
            }) => Err(DiskOsError::TempSpaceExceeded {
                granted_bytes: 0,
                detail: format!(
                    "the job asks for {requested_bytes} bytes, the disk grants at most {budget_bytes}"
                ),
            }),
            Err(e) => Err(e),
        }
    }

    /// Where the jobs' temporary areas live (emptied when the disk starts).
    fn temp_root(&self) -> std::path::PathBuf {
        self.store.dir().join("tmp")
    }

    /// The input stream's schema and, for a table, what to read: checks the table, the
    /// columns and the pruning predicate. A temporary stream's schema is that of the port
    /// that writes it (known once that port's stage is built).
    fn plan_source(&self, source: &Source) -> Result<(Option<SchemaRef>, Option<TablePlan>)> {
        match source {
            Source::Table {
                table,
                columns,
                prune,
                partitions,
            } => {
                let mut info = self.store.table(table)?;
                if let Some(chosen) = partitions {
                    // Replicas: read only the partitions the host assigned to this disk.
                    if let Some(missing) = chosen
                        .iter()
                        .find(|c| !info.partitions.iter().any(|p| p.partition == **c))
                    {
                        return Err(DiskOsError::InvalidJob(format!(
                            "table `{table}` has no partition {missing} on this disk"
                        )));
                    }
                    info.partitions.retain(|p| chosen.contains(&p.partition));
                }
                let projection = column_indices(&info, table, columns)?;
                let schema = projected_schema(&info.schema, &projection);
                let prune = match prune {
                    Some(p) => {
                        let full = Arc::new(info.schema.clone());
                        let expr = self.planner.physical(p, &full)?;
                        #[allow(deprecated)]
                        let predicate = PruningPredicate::try_new(expr, full).ok().map(Arc::new);
                        predicate
                    }
                    None => None,
                };
                Ok((Some(schema), Some((info, projection, prune))))
            }
            Source::File { .. } => Ok((Some(file_schema()), None)),
            Source::Pipe { schema, .. } | Source::Host { schema } => {
                Ok((Some(Arc::new(schema.clone())), None))
            }
            Source::Temp { .. } => Ok((None, None)),
        }
    }

    /// Builds (inits) the disklets in order, each on the schemas of the ports it reads, and
    /// plans the outputs' routers. Runs after admission: building decodes plan fragments and
    /// runs a user disklet's `init`.
    async fn build(
        self: &Arc<Self>,
        spec: &JobSpec,
        sources: &[(Option<SchemaRef>, Option<TablePlan>)],
        scratch: &[u64],
        ports: &[u32],
        area: &TempArea,
        cancel: CancelFlag,
    ) -> Result<Built> {
        let spills = spill_shares(spec, area)?;
        let mut schemas: BTreeMap<Port, SchemaRef> = sources
            .iter()
            .enumerate()
            .filter_map(|(i, (s, _))| s.clone().map(|s| (Port::Input(i as u32), s)))
            .collect();
        resolve_temp_schemas(spec, &mut schemas);
        let mut stages: Vec<Box<dyn Disklet>> = Vec::with_capacity(spec.stages.len());
        for (i, (stage, &s)) in spec.stages.iter().zip(scratch).enumerate() {
            let inputs = stage
                .inputs
                .iter()
                .map(|p| {
                    schemas.get(p).cloned().ok_or_else(|| {
                        DiskOsError::InvalidJob(format!(
                            "stage {i} reads {p:?}, a temporary stream written only later"
                        ))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let d = if matches!(stage.disklet, DiskletSpec::Wasm { .. }) {
                // Compiling and a user init run guest code: keep them off the async workers.
                let (os, disklet, cancel) = (self.clone(), stage.disklet.clone(), cancel.clone());
                tokio::task::spawn_blocking(move || {
                    os.build_stage(&disklet, &inputs, s, None, &cancel)
                })
                .await
                .map_err(|e| {
                    DiskOsError::InvalidJob(format!("user disklet init panicked: {e}"))
                })??
            } else {
                self.build_stage(&stage.disklet, &inputs, s, spills[i].as_ref(), &cancel)?
            };
            if d.output_ports() as u32 != ports[i] {
                return Err(DiskOsError::InvalidJob(format!(
                    "stage {i} has {} outputs, the job reads {}",
                    d.output_ports(),
                    ports[i]
                )));
            }
            for port in 0..d.output_ports() {
                schemas.insert(
                    Port::Stage {
                        stage: i as u32,
                        port: port as u32,
                    },
                    d.port_schema(port),
                );
            }
            resolve_temp_schemas(spec, &mut schemas);
            stages.push(d);
        }
        if let Some(i) =
            (0..spec.inputs.len()).find(|i| !schemas.contains_key(&Port::Input(*i as u32)))
        {
            return Err(DiskOsError::InvalidJob(format!(
                "input {i}: the temporary stream it reads is never written from a known port"
            )));
        }
        let routers = spec
            .outputs
            .iter()
            .map(|o| match &o.sink {
                Sink::Exchange { route, targets, .. } if targets.len() > 1 => {
                    Ok(Some(Router::new(route, &schemas[&o.from], &self.planner)?))
                }
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Built {
            stages,
            schemas,
            routers,
        })
    }

    fn launch(self: &Arc<Self>, job: Launch) -> RunningJob {
        let Launch {
            spec,
            grants,
            area,
            state,
            sources,
            built,
            mut host_input,
            buffer_bytes,
        } = job;
        let Built {
            stages,
            schemas,
            routers,
        } = built;
        let shared = Shared {
            account: grants.0.account().clone(),
            compute: self.job_compute(&spec, &state),
            state,
            area,
            buffer_bytes,
        };
        let n = self.config.buffers_per_stream;
        let mut wires = Wires::new(schemas.keys(), n);
        self.spawn_inputs(
            &spec,
            &stages,
            sources,
            &shared,
            &mut host_input,
            &mut wires,
        );
        self.spawn_stages(&spec, stages, &shared, &mut wires);
        wires.txs.clear(); // ports nobody writes (none, once the graph is checked)
        let (host_tx, host_rx) = stream(n);
        let mut host_tx = Some(host_tx);
        let pending = Arc::new(Mutex::new(Vec::new()));
        let mut host_schema = None;
        let mut routers = routers;
        for (o, output) in spec.outputs.iter().enumerate() {
            let rx = wires
                .rxs
                .remove(&output.from)
                .expect("the graph check: each port is read once");
            let schema = schemas[&output.from].clone();
            if matches!(output.sink, Sink::Host) {
                host_schema = Some(schema.clone());
            }
            let wired = WiredOutput {
                rx,
                schema,
                router: routers[o].take(),
            };
            let task = self.spawn_output(&output.sink, wired, &mut host_tx, &pending, &shared);
            wires.tasks.extend(task);
        }
        let schema = host_schema.unwrap_or_else(|| {
            spec.outputs.first().map_or_else(
                || Arc::new(arrow::datatypes::Schema::empty()),
                |o| schemas[&o.from].clone(),
            )
        });
        let state = shared.state.clone();
        let done = self.supervise(wires.tasks, grants, shared.area, pending, state.clone());
        RunningJob {
            schema,
            output: host_rx,
            state,
            done,
        }
    }

    /// Starts a task feeding each input stream of `spec` (its table, file, pipe, host or
    /// temporary stream), with the filters its readers push down to the scans.
    fn spawn_inputs(
        &self,
        spec: &JobSpec,
        stages: &[Box<dyn Disklet>],
        sources: Vec<(Option<SchemaRef>, Option<TablePlan>)>,
        shared: &Shared,
        host_input: &mut Option<mpsc::Receiver<RecordBatch>>,
        wires: &mut Wires,
    ) {
        let mut filters = crate::late::scan_filters(spec, stages).into_iter();
        for (i, (source, (_, plan))) in spec.inputs.iter().cloned().zip(sources).enumerate() {
            let port = Port::Input(i as u32);
            let skip = Arc::new(SkipList::default());
            wires.skips.insert(port, skip.clone());
            let tx = wires.txs.remove(&port).expect("a stream per input");
            let hold = tx.hold();
            let io = SourceIo {
                tx,
                skip,
                filters: filters.next().unwrap_or_default(),
                account: shared.account.clone(),
                buffer_bytes: shared.buffer_bytes,
                area: shared.area.clone(),
                compute: shared.compute.clone(),
            };
            let source = self.spawn_source(source, plan, io, &shared.state, host_input);
            let st = shared.state.clone();
            wires.tasks.push(tokio::spawn(async move {
                let r = source.await.unwrap_or_else(|join| {
                    Err(DiskOsError::InvalidJob(format!(
                        "a job task panicked: {join}"
                    )))
                });
                st.settle(r, vec![hold])
            }));
        }
    }

    /// Starts every stage of `spec` on its own thread, or inside the stage it feeds when the
    /// disk fuses stages ([`crate::fused`]).
    fn spawn_stages(
        &self,
        spec: &JobSpec,
        stages: Vec<Box<dyn Disklet>>,
        shared: &Shared,
        wires: &mut Wires,
    ) {
        let ports: Vec<usize> = stages.iter().map(|d| d.output_ports()).collect();
        let parents = if self.config.fuse_stages {
            crate::fused::inline_parents(&spec.stages, &ports)
        } else {
            vec![None; ports.len()]
        };
        let mut built: Vec<Option<Box<dyn Disklet>>> = stages.into_iter().map(Some).collect();
        let mut inline: BTreeMap<usize, InlineStage> = BTreeMap::new();
        // From the last stage back: a fused stage is built before the stage it runs in.
        for (i, stage) in spec.stages.iter().enumerate().rev() {
            let disklet = built[i].take().expect("each stage once");
            let outputs: Vec<Out> = (0..ports[i])
                .map(|port| match parents.iter().position(|p| *p == Some(i)) {
                    Some(j) if port == 0 => Out::Inline(Box::new(
                        inline.remove(&j).expect("built before its parent"),
                    )),
                    _ => Out::Stream(
                        wires
                            .txs
                            .remove(&Port::Stage {
                                stage: i as u32,
                                port: port as u32,
                            })
                            .expect("a stream per port"),
                    ),
                })
                .collect();
            let ctx = self.stage_context(i, stage, outputs.len(), shared, &wires.skips);
            if parents[i].is_some() {
                let apart = crate::fused::ApartRule {
                    buffers: self.config.buffers_per_stream,
                    cpu_ns: self.config.apart_cpu_ns,
                };
                inline.insert(i, InlineStage::new(disklet, ctx, outputs, apart));
                continue;
            }
            let inputs: Vec<StreamRx> = stage
                .inputs
                .iter()
                .map(|p| {
                    wires
                        .rxs
                        .remove(p)
                        .expect("the graph check: each port is read once")
                })
                .collect();
            let (st, holds) = (shared.state.clone(), holds_of(&outputs));
            wires.tasks.push(tokio::task::spawn_blocking(move || {
                st.settle(run_stage(disklet, inputs, outputs, ctx), holds)
            }));
        }
    }

    /// What stage `i` runs with: its scratch and output allowance, the job's shared parts, the
    /// skip lists of the inputs it reads.
    fn stage_context(
        &self,
        i: usize,
        stage: &adisk_core::protocol::Stage,
        outputs: usize,
        shared: &Shared,
        skips: &BTreeMap<Port, Arc<SkipList>>,
    ) -> StageContext {
        let emit_cap = shared.state.stages[i]
            .scratch_granted
            .saturating_add(emit_allowance(shared.buffer_bytes, outputs as u32));
        StageContext {
            index: i,
            buffer_bytes: shared.buffer_bytes,
            emit_cap,
            state: shared.state.clone(),
            compute: shared.compute.clone(),
            account: shared.account.clone(),
            skips: stage.inputs.iter().map(|p| skips.get(p).cloned()).collect(),
        }
    }

    /// Starts the task that takes one output stream to its sink: the host's stream (taken
    /// from `host_tx`, one per job), an exchange, a temporary stream, a split or named result
    /// (their writers left in `pending` for the supervisor to commit); its tasks.
    fn spawn_output(
        &self,
        sink: &Sink,
        out: WiredOutput,
        host_tx: &mut Option<StreamTx>,
        pending: &PendingResults,
        shared: &Shared,
    ) -> Vec<tokio::task::JoinHandle<Result<()>>> {
        let WiredOutput { rx, schema, router } = out;
        let buffer_bytes = shared.buffer_bytes;
        match sink {
            Sink::Host => vec![tokio::spawn(host_sink(
                rx,
                host_tx.take().expect("one host output"),
                shared.state.clone(),
            ))],
            Sink::Exchange {
                exchange_id,
                targets,
                sender,
                relay,
                target_relays,
                ..
            } => {
                // A target's own relay (the router to another disk group), else the output's.
                let relays = (0..targets.len())
                    .map(|i| target_relays.get(i).cloned().flatten().or(relay.clone()))
                    .collect();
                let out = ExchangeOut {
                    rx,
                    schema,
                    exchange_id: exchange_id.clone(),
                    targets: targets.clone(),
                    sender: *sender,
                    relays,
                    router,
                };
                let mut tasks = Vec::new();
                self.spawn_exchange(&mut tasks, out, &shared.state, &shared.account);
                tasks
            }
            Sink::Store {
                stream: StoredStream::Temp { name },
            } => {
                let (area, name) = (shared.area.clone(), name.clone());
                vec![tokio::task::spawn_blocking(move || {
                    area.write_stream(&name, &schema, rx).map(|_| ())
                })]
            }
            Sink::Store {
                stream:
                    StoredStream::Split {
                        name,
                        first_partition,
                        by,
                        max_partitions,
                    },
            } => {
                let split = SplitWrite {
                    store: self.store.clone(),
                    name: name.clone(),
                    first: *first_partition,
                    by: by.clone(),
                    max: *max_partitions,
                    buffer_bytes,
                    account: shared.account.clone(),
                    pending: pending.clone(),
                };
                vec![tokio::task::spawn_blocking(move || split.run(schema, rx))]
            }
            Sink::Store {
                stream: StoredStream::Result { name, partition },
            } => {
                let (store, name, partition) = (self.store.clone(), name.clone(), *partition);
                let (account, pending) = (shared.account.clone(), pending.clone());
                vec![tokio::task::spawn_blocking(move || {
                    write_result(
                        &store,
                        (&name, partition),
                        schema,
                        rx,
                        &pending,
                        (&account, buffer_bytes),
                    )
                })]
            }
        }
    }

    /// Spawns the task that feeds one input stream.
    fn spawn_source(
        &self,
        source: Source,
        plan: Option<TablePlan>,
        io: SourceIo,
        state: &Arc<JobState>,
        host_input: &mut Option<mpsc::Receiver<RecordBatch>>,
    ) -> tokio::task::JoinHandle<Result<()>> {
        let SourceIo {
            tx,
            skip,
            filters,
            account,
            buffer_bytes,
            area,
            compute,
        } = io;
        let (counters, cancel) = (state.read.clone(), state.cancel.subscribe());
        match source {
            Source::Table { .. } => {
                let (table, projection, prune) = plan.expect("a table source has a plan");
                let dropped = counters.rows_dropped.clone();
                let scan = TableScan {
                    store: self.store.clone(),
                    table,
                    projection,
                    prune,
                    buffer_bytes,
                    skip,
                    counters,
                    account,
                    limiter: self.read_limiter.clone(),
                    compute,
                    filters: crate::late::RowFilters::new(filters, dropped),
                };
                tokio::task::spawn_blocking(move || scan.run(tx))
            }
            Source::File {
                path,
                offset,
                length,
            } => match self.store.file_path(&path) {
                Ok(path) => {
                    let scan = FileScan {
                        path,
                        offset,
                        length,
                        buffer_bytes,
                        skip,
                        counters,
                        account,
                        compute,
                    };
                    tokio::task::spawn_blocking(move || scan.run(tx))
                }
                Err(e) => tokio::spawn(async move { Err(DiskOsError::Storage(e)) }),
            },
            Source::Pipe {
                exchange_id,
                senders,
                ..
            } => {
                let exchanges = self.exchanges.clone();
                tokio::spawn(async move {
                    let terms = crate::exchange::InboxTerms {
                        account,
                        buffer_bytes,
                    };
                    let result = pipe_source(
                        &exchanges,
                        &exchange_id,
                        senders,
                        &tx,
                        &counters,
                        terms,
                        cancel,
                    )
                    .await;
                    exchanges.remove(&exchange_id);
                    result
                })
            }
            Source::Host { schema } => {
                let input = host_input.take().expect("checked at admission");
                tokio::spawn(host_source(
                    input,
                    Arc::new(schema),
                    tx,
                    counters,
                    account,
                    cancel,
                ))
            }
            Source::Temp { name } => tokio::spawn(async move {
                area.read_stream(&name, &tx, &account, &counters, cancel)
                    .await
            }),
        }
    }

    /// Spawns an exchange output: straight to its one target, or through a router into one
    /// stream per target (each counted in the grant), each sent with the connector.
    fn spawn_exchange(
        &self,
        tasks: &mut Vec<tokio::task::JoinHandle<Result<()>>>,
        out: ExchangeOut,
        state: &Arc<JobState>,
        account: &Arc<Account>,
    ) {
        let ExchangeOut {
            rx,
            schema,
            exchange_id,
            targets,
            sender,
            relays,
            router,
        } = out;
        let mut per_target = Vec::with_capacity(targets.len());
        match router {
            None => per_target.push(rx),
            Some(router) => {
                let mut txs = Vec::with_capacity(targets.len());
                for _ in &targets {
                    let (t, r) = stream(self.config.buffers_per_stream);
                    txs.push(t);
                    per_target.push(r);
                }
                let (account, st) = (account.clone(), state.clone());
                let holds = txs.iter().map(StreamTx::hold).collect();
                tasks.push(tokio::task::spawn_blocking(move || {
                    st.settle(route_rows(rx, &router, &txs, &account), holds)
                }));
            }
        }
        for ((target, rx), relay) in targets.into_iter().zip(per_target).zip(relays) {
            let connector = self.connector.clone();
            let (st, schema) = (state.clone(), schema.clone());
            let route = PipeRoute {
                target,
                relay,
                exchange_id: exchange_id.clone(),
                sender,
                from: st.disk_id,
            };
            let intact = st.clone();
            let intact: Intact = Arc::new(move || intact.intact());
            let mut cancel = state.cancel.subscribe();
            tasks.push(tokio::spawn(async move {
                // A cancelled job drops its sends at once (resetting the calls), also one still
                // waiting for its receiver to claim the exchange.
                let (bytes, rows) = tokio::select! {
                    sent = connector.send(route, schema, rx, intact) => sent?,
                    _ = cancel.wait_for(|c| *c) => return Err(DiskOsError::Cancelled),
                };
                st.shipped_disk_bytes.fetch_add(bytes, Ordering::Relaxed);
                st.rows_shipped.fetch_add(rows, Ordering::Relaxed);
                Ok(())
            }));
        }
    }

    /// The job's handle on the compute slots: its program's share, its cancellation, its wait.
    fn job_compute(&self, spec: &JobSpec, state: &JobState) -> JobCompute {
        JobCompute::new(
            self.compute.clone(),
            &spec.program,
            state.cancel.subscribe(),
            state.schedule_wait_ns.clone(),
        )
    }

    /// Waits for every task of a job, commits its named results if all succeeded, records the
    /// outcome, and returns its grants and temporary files.
    fn supervise(
        self: &Arc<Self>,
        tasks: Vec<tokio::task::JoinHandle<Result<()>>>,
        grants: (Grant, Option<Grant>),
        area: Arc<TempArea>,
        pending: PendingResults,
        st: Arc<JobState>,
    ) -> oneshot::Receiver<Result<(), DiskOsError>> {
        let (done_tx, done_rx) = oneshot::channel();
        let os = self.clone();
        tokio::spawn(async move {
            let mut first_error: Option<DiskOsError> = None;
            for t in tasks {
                let r = match t.await {
                    Ok(r) => r,
                    Err(join) => Err(DiskOsError::InvalidJob(format!(
                        "a job task panicked: {join}"
                    ))),
                };
                if let Err(e) = r {
                    // A real cause beats the "cancelled" its consequences report.
                    let replace = match &first_error {
                        None => true,
                        Some(DiskOsError::Cancelled) => !matches!(e, DiskOsError::Cancelled),
                        Some(_) => false,
                    };
                    if replace {
                        st.fail(&e);
                        first_error = Some(e);
                    }
                }
            }
            let writers: Vec<PartitionWriter> =
                std::mem::take(&mut *pending.lock().expect("pending lock"));
            // A job whose host went away (its result stream dropped) commits nothing, even
            // when its stages ran to the end: the host has given up on it and may already be
            // dropping its outputs.
            if first_error.is_none() && st.cancelled() {
                st.fail(&DiskOsError::Cancelled);
                first_error = Some(DiskOsError::Cancelled);
            }
            if first_error.is_none()
                && let Err(e) = commit_results(&os.store, writers, &st.written_bytes).await
            {
                st.fail(&e);
                first_error = Some(e);
            }
            drop(area); // removes the job's temporary files (also on failure)
            drop(grants);
            os.retire(&st, first_error.as_ref());
            let _ = done_tx.send(match first_error {
                Some(e) => Err(e),
                None => Ok(()),
            });
        });
        done_rx
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

/// What a table source reads: the table, the column indices, the zone-map predicate.
type TablePlan = (
    adisk_core::protocol::TableInfo,
    Vec<usize>,
    Option<Arc<PruningPredicate>>,
);

/// Named-result partitions written but not yet committed (the job must succeed first).
type PendingResults = Arc<Mutex<Vec<PartitionWriter>>>;

/// A job's stages, built, with the schema of every port and the router of every output that
/// has one.
struct Built {
    stages: Vec<Box<dyn Disklet>>,
    schemas: BTreeMap<Port, SchemaRef>,
    routers: Vec<Option<Router>>,
}

/// An admitted job, ready to launch.
struct Launch {
    spec: JobSpec,
    grants: (Grant, Option<Grant>),
    area: Arc<TempArea>,
    state: Arc<JobState>,
    sources: Vec<(Option<SchemaRef>, Option<TablePlan>)>,
    built: Built,
    host_input: Option<mpsc::Receiver<RecordBatch>>,
    buffer_bytes: u64,
}

/// What every task of a job being launched shares.
struct Shared {
    state: Arc<JobState>,
    account: Arc<Account>,
    compute: JobCompute,
    area: Arc<TempArea>,
    buffer_bytes: u64,
}

/// The streams of a job being launched, one per port (taken as they are wired), the skip lists
/// of its inputs, and the tasks started so far.
struct Wires {
    txs: BTreeMap<Port, StreamTx>,
    rxs: BTreeMap<Port, StreamRx>,
    skips: BTreeMap<Port, Arc<SkipList>>,
    tasks: Vec<tokio::task::JoinHandle<Result<()>>>,
}

impl Wires {
    /// A stream of `buffers` queued buffers for each of `ports`.
    fn new<'a>(ports: impl Iterator<Item = &'a Port>, buffers: u32) -> Self {
        let (mut txs, mut rxs) = (BTreeMap::new(), BTreeMap::new());
        for port in ports {
            let (t, r) = stream(buffers);
            txs.insert(*port, t);
            rxs.insert(*port, r);
        }
        Wires {
            txs,
            rxs,
            skips: BTreeMap::new(),
            tasks: Vec::new(),
        }
    }
}

/// One output stream of a job, wired: what its sink reads.
struct WiredOutput {
    rx: StreamRx,
    schema: SchemaRef,
    router: Option<Router>,
}

/// What a source task writes into.
struct SourceIo {
    tx: StreamTx,
    skip: Arc<SkipList>,
    /// Filters pushed down by the stages reading the source (tables apply them).
    filters: Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
    account: Arc<Account>,
    buffer_bytes: u64,
    area: Arc<TempArea>,
    compute: JobCompute,
}

/// One exchange output.
struct ExchangeOut {
    rx: StreamRx,
    schema: SchemaRef,
    exchange_id: String,
    targets: Vec<String>,
    sender: u32,
    /// Per target, the relay its stream passes through, if any.
    relays: Vec<Option<String>>,
    router: Option<Router>,
}

/// Where each stage may spill: stages that can (plan fragments that sort or aggregate) share
/// the job's temporary-space grant, as one spill space in the job's area that all of them
/// write to (a stage may take what the others leave; together they never pass the grant). A
/// job that also writes temporary streams gives them the whole grant, and its stages do not
/// spill (a full sort or aggregation then fails at its scratch, typed).
fn spill_shares(spec: &JobSpec, area: &TempArea) -> Result<Vec<Option<Spill>>> {
    let spills = |d: &DiskletSpec| {
        matches!(
            d,
            DiskletSpec::Fragment {
                kind: FragmentKind::Sort | FragmentKind::Aggregate | FragmentKind::Stage,
                ..
            }
        )
    };
    let temp_streams = spec.outputs.iter().any(|o| {
        matches!(
            o.sink,
            Sink::Store {
                stream: StoredStream::Temp { .. }
            }
        )
    });
    let count = spec.disklets().filter(|d| spills(d)).count();
    if temp_streams || count == 0 || area.limit_bytes() == 0 {
        return Ok(spec.disklets().map(|_| None).collect());
    }
    let space = Spill::new(area.dir().join("spill"), area.limit_bytes())?;
    Ok(spec
        .disklets()
        .map(|d| spills(d).then(|| space.clone()))
        .collect())
}

/// Gives each temporary input the schema of the port that writes it, once that is known
/// (repeated while it finds more: a temporary stream may be written from another one).
fn resolve_temp_schemas(spec: &JobSpec, schemas: &mut BTreeMap<Port, SchemaRef>) {
    loop {
        let mut found = false;
        for (i, source) in spec.inputs.iter().enumerate() {
            let Source::Temp { name } = source else {
                continue;
            };
            let port = Port::Input(i as u32);
            let writer = spec.outputs.iter().find(|o| matches!(&o.sink, Sink::Store { stream: StoredStream::Temp { name: n } } if n == name));
            if !schemas.contains_key(&port)
                && let Some(schema) = writer.and_then(|o| schemas.get(&o.from)).cloned()
            {
                schemas.insert(port, schema);
                found = true;
            }
        }
        if !found {
            return;
        }
    }
}

/// Indices of `columns` in the table (all of them when empty); a typed error names an unknown one.
fn column_indices(
    info: &adisk_core::protocol::TableInfo,
    table: &str,
    columns: &[String],
) -> Result<Vec<usize>> {
    if columns.is_empty() {
        return Ok((0..info.schema.fields().len()).collect());
    }
    columns
        .iter()
        .map(|c| {
            info.schema.index_of(c).map_err(|_| {
                DiskOsError::Storage(StorageError::UnknownColumn {
                    table: table.to_string(),
                    column: c.clone(),
                    available: info
                        .schema
                        .fields()
                        .iter()
                        .map(|f| f.name().clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            })
        })
        .collect()
}

/// Moves a port's buffers to the host's stream (they keep their slots).
async fn host_sink(mut out: StreamRx, host_tx: StreamTx, state: Arc<JobState>) -> Result<()> {
    while let Some(b) = out.recv().await {
        state
            .rows_shipped
            .fetch_add(b.batch.num_rows() as u64, Ordering::Relaxed);
        if host_tx.send(b).await.is_err() {
            return Err(DiskOsError::Cancelled);
        }
    }
    Ok(())
}

/// Feeds a host-resident input from the job's `DoExchange` call.
async fn host_source(
    mut input: mpsc::Receiver<RecordBatch>,
    schema: SchemaRef,
    tx: StreamTx,
    counters: Arc<ReadCounters>,
    account: Arc<Account>,
    mut cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let mut position = 0u64;
    loop {
        let batch = tokio::select! {
            b = input.recv() => match b { Some(b) => b, None => break },
            _ = cancel.wait_for(|c| *c) => return Err(DiskOsError::Cancelled),
        };
        if batch.schema().fields() != schema.fields() {
            return Err(DiskOsError::InvalidJob(
                "host stream batch does not match the declared schema".into(),
            ));
        }
        let n = batch.num_rows() as u64;
        let Ok(bytes) = tx.send_batch(batch, position, &account).await else {
            break;
        };
        position += n;
        counters.rows_read.fetch_add(n, Ordering::Relaxed);
        counters.bytes_scanned.fetch_add(bytes, Ordering::Relaxed);
    }
    Ok(())
}

/// Routes a port's rows into one stream per target (blocking on backpressure).
fn route_rows(
    mut rx: StreamRx,
    router: &Router,
    txs: &[StreamTx],
    account: &Arc<Account>,
) -> Result<()> {
    while let Some(buffer) = rx.blocking_recv() {
        for (tx, part) in txs.iter().zip(router.route(&buffer.batch, txs.len())?) {
            let Some(part) = part else { continue };
            let slot = tx.blocking_slot().ok_or(DiskOsError::Cancelled)?;
            tx.blocking_send_in(slot, part, buffer.position, account)
                .map_err(|()| DiskOsError::Cancelled)?;
        }
    }
    Ok(())
}

/// Writes a named-result partition through the storage layer's tmp path; the supervisor
/// commits it (rename + manifest) only if the whole job succeeds. Its row group in progress is
/// charged to the job and ended at [`STORE_BUFFERS`] buffers.
fn write_result(
    store: &DiskStore,
    (name, partition): (&str, u32),
    schema: SchemaRef,
    mut rx: StreamRx,
    pending: &PendingResults,
    (account, buffer_bytes): (&Arc<Account>, u64),
) -> Result<()> {
    let rows = store_row_group_rows(&schema, buffer_bytes);
    let writer = store.create_partition(name, partition, schema, rows)?;
    let mut writer = ChargedWriter::new(writer, account, buffer_bytes);
    while let Some(buffer) = rx.blocking_recv() {
        writer.write(&buffer.batch)?;
    }
    pending.lock().expect("pending lock").push(writer.finish()?);
    Ok(())
}

/// Rows per row group of a stored output: about [`STORE_BUFFERS`] buffers of rows.
fn store_row_group_rows(schema: &arrow::datatypes::Schema, buffer_bytes: u64) -> usize {
    (STORE_BUFFERS * buffer_bytes / estimated_row_bytes(schema).max(1)).max(1) as usize
}

/// A partition writer whose row group in progress is charged to the job's account, and
/// ended when it reaches [`STORE_BUFFERS`] buffers (whatever the row count).
struct ChargedWriter {
    writer: PartitionWriter,
    account: Arc<Account>,
    charged: u64,
    cap: u64,
}

impl ChargedWriter {
    fn new(writer: PartitionWriter, account: &Arc<Account>, buffer_bytes: u64) -> Self {
        ChargedWriter {
            writer,
            account: account.clone(),
            charged: 0,
            cap: STORE_BUFFERS.saturating_mul(buffer_bytes),
        }
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer.write(batch)?;
        if self.writer.in_progress_bytes() >= self.cap {
            self.writer.flush_row_group()?;
        }
        self.recharge();
        Ok(())
    }

    fn recharge(&mut self) {
        let now = self.writer.in_progress_bytes();
        self.account.release(self.charged);
        self.account.charge(now);
        self.charged = now;
    }

    /// Ends the last row group (nothing stays in memory until the commit).
    fn finish(mut self) -> Result<PartitionWriter> {
        self.writer.flush_row_group()?;
        self.account.release(self.charged);
        Ok(self.writer)
    }
}

/// A [`StoredStream::Split`] being written: a partition per value of `by`.
struct SplitWrite {
    store: Arc<DiskStore>,
    name: String,
    first: u32,
    by: String,
    max: u32,
    buffer_bytes: u64,
    account: Arc<Account>,
    pending: PendingResults,
}

impl SplitWrite {
    /// Writes every value's rows to its partition (row groups of at most [`STORE_BUFFERS`]
    /// buffers, charged to the job while held); each partition is finished when the value
    /// changes.
    fn run(self, schema: SchemaRef, mut rx: StreamRx) -> Result<()> {
        let bad = |m: String| DiskOsError::InvalidJob(format!("split result `{}`: {m}", self.name));
        let by = schema
            .index_of(&self.by)
            .map_err(|_| bad(format!("the stream has no column `{}`", self.by)))?;
        if schema.field(by).data_type() != &arrow::datatypes::DataType::UInt32 {
            return Err(bad(format!("column `{}` is not UInt32", self.by)));
        }
        let kept_columns: Vec<usize> = (0..schema.fields().len()).filter(|i| *i != by).collect();
        let kept = Arc::new(
            schema
                .project(&kept_columns)
                .map_err(|e| bad(e.to_string()))?,
        );
        let mut current: Option<(u32, ChargedWriter)> = None;
        while let Some(buffer) = rx.blocking_recv() {
            let batch = &buffer.batch;
            let values = batch
                .column(by)
                .as_any()
                .downcast_ref::<arrow::array::UInt32Array>()
                .expect("checked UInt32");
            let mut start = 0;
            while start < batch.num_rows() {
                let v = values.value(start);
                let end = (start..batch.num_rows())
                    .find(|&i| values.value(i) != v)
                    .unwrap_or(batch.num_rows());
                if current.as_ref().is_none_or(|(c, _)| *c != v) {
                    self.check_value(current.as_ref().map(|(c, _)| *c), v)
                        .map_err(bad)?;
                    if let Some((_, w)) = current.take() {
                        self.keep(w)?;
                    }
                    current = Some((v, self.open(v, &kept)?));
                }
                let rows = batch
                    .slice(start, end - start)
                    .project(&kept_columns)
                    .map_err(|e| bad(e.to_string()))?;
                current.as_mut().expect("opened above").1.write(&rows)?;
                start = end;
            }
        }
        if let Some((_, w)) = current {
            self.keep(w)?;
        }
        Ok(())
    }

    /// A value may follow the previous one if it is not smaller and within the partitions.
    fn check_value(&self, previous: Option<u32>, v: u32) -> std::result::Result<(), String> {
        if let Some(c) = previous
            && v < c
        {
            return Err(format!("`{}` went down from {c} to {v}", self.by));
        }
        if v >= self.max {
            return Err(format!(
                "value {v} of `{}` is past the {} partitions the job allows",
                self.by, self.max
            ));
        }
        Ok(())
    }

    /// The partition of value `v`.
    fn open(&self, v: u32, kept: &SchemaRef) -> Result<ChargedWriter> {
        let rows = store_row_group_rows(kept, self.buffer_bytes);
        let w = self
            .store
            .create_partition(&self.name, self.first + v, kept.clone(), rows)?;
        Ok(ChargedWriter::new(w, &self.account, self.buffer_bytes))
    }

    /// A finished partition, committed with the job.
    fn keep(&self, w: ChargedWriter) -> Result<()> {
        self.pending.lock().expect("pending lock").push(w.finish()?);
        Ok(())
    }
}

/// Bytes of one row of `schema`, for sizing row groups: fixed widths as they are, 32 bytes
/// for each variable-width value.
fn estimated_row_bytes(schema: &arrow::datatypes::Schema) -> u64 {
    schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            arrow::datatypes::DataType::FixedSizeBinary(n) => *n as u64,
            t => t.primitive_width().map_or(32, |w| w as u64),
        })
        .sum()
}

async fn commit_results(
    store: &Arc<DiskStore>,
    writers: Vec<PartitionWriter>,
    written: &Arc<AtomicU64>,
) -> Result<()> {
    if writers.is_empty() {
        return Ok(());
    }
    let (store, written) = (store.clone(), written.clone());
    tokio::task::spawn_blocking(move || {
        writers.into_iter().try_for_each(|w| {
            store
                .commit_partition(w)
                .map(|info| written.fetch_add(info.bytes, Ordering::Relaxed))
                .map(|_| ())
        })
    })
    .await
    .map_err(|e| DiskOsError::InvalidJob(format!("committing results panicked: {e}")))?
    .map_err(DiskOsError::Storage)
}

async fn pipe_source(
    exchanges: &ExchangeRegistry,
    exchange_id: &str,
    senders: u32,
    tx: &StreamTx,
    counters: &ReadCounters,
    terms: crate::exchange::InboxTerms,
    mut cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let mut inbox = exchanges
        .receiver(exchange_id, terms)
        .map_err(DiskOsError::Pipe)?;
    let mut done = vec![false; senders as usize];
    let mut position = 0;
    while done.iter().any(|d| !d) {
        let msg = tokio::select! {
            m = inbox.recv() => m,
            () = tx.closed() => return Ok(()),
            _ = cancel.wait_for(|c| *c) => return Err(DiskOsError::Cancelled),
        };
        match msg {
            None => {
                return Err(DiskOsError::Pipe(format!(
                    "exchange `{exchange_id}` closed early"
                )));
            }
            Some(PipeMessage::Batch(buffer)) => {
                let n = buffer.batch.num_rows() as u64;
                let Ok(bytes) = tx.send_charged(buffer, position).await else {
                    return Ok(());
                };
                position += n;
                counters.rows_read.fetch_add(n, Ordering::Relaxed);
                counters.bytes_scanned.fetch_add(bytes, Ordering::Relaxed);
            }
            Some(PipeMessage::SenderDone(s)) => {
                let slot = done.get_mut(s as usize).ok_or_else(|| {
                    DiskOsError::Pipe(format!("sender {s} is not one of {senders}"))
                })?;
                *slot = true;
            }
            Some(PipeMessage::SenderFailed(s, why, link)) => {
                let why = format!("exchange `{exchange_id}`: sender {s} {why}");
                return Err(if link {
                    DiskOsError::Link(why)
                } else {
                    DiskOsError::Pipe(why)
                });
            }
        }
    }
    Ok(())
}

pub(crate) struct StageContext {
    pub(crate) index: usize,
    pub(crate) buffer_bytes: u64,
    /// Most bytes one call of the disklet may emit (its scratch plus its output allowance).
    pub(crate) emit_cap: u64,
    pub(crate) state: Arc<JobState>,
    pub(crate) compute: JobCompute,
    pub(crate) account: Arc<Account>,
    /// Skip lists of the stage's inputs that are disk-resident sources.
    pub(crate) skips: Vec<Option<Arc<SkipList>>>,
}

/// What a stage asks of its disklet next.
pub(crate) enum Call {
    /// A buffer of input `.0`.
    Process(usize, Buffer),
    /// Input `.0` ended.
    InputEnded(usize),
    /// Every input ended.
    Finish,
    /// The disklet holds output back ([`Disklet::has_more_output`]).
    More,
}

/// Runs one call of the disklet under a compute slot, on the stage's own thread. Slots are
/// shared fairly between programs ([`crate::sched`]).
pub(crate) fn step(
    disklet: &mut dyn Disklet,
    emitter: &mut Emitter,
    call: Call,
    ctx: &StageContext,
) -> Result<()> {
    let slot = ctx.compute.acquire()?;
    let counters = &ctx.state.stages[ctx.index];
    let since_start = || ctx.state.started.elapsed().as_nanos() as u64;
    let _ = counters.first_step_ns.compare_exchange(
        0,
        since_start() + 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    if let Call::Process(_, b) = &call {
        counters
            .rows_in
            .fetch_add(b.batch.num_rows() as u64, Ordering::Relaxed);
        counters.bytes_in.fetch_add(b.bytes(), Ordering::Relaxed);
    }
    let result = match &call {
        Call::Process(input, b) => disklet.process(
            &InputBuffer {
                batch: &b.batch,
                position: b.position,
                input: *input,
            },
            emitter,
        ),
        Call::InputEnded(input) => disklet.input_ended(*input, emitter),
        Call::Finish => disklet.finish(emitter),
        Call::More => disklet.more_output(emitter),
    };
    let cpu = slot.release();
    drop(call);
    counters.cpu_ns.fetch_add(cpu, Ordering::Relaxed);
    counters
        .last_step_ns
        .fetch_max(since_start(), Ordering::Relaxed);
    counters
        .scratch_peak
        .fetch_max(disklet.scratch_bytes(), Ordering::Relaxed);
    counters.flushes.store(disklet.flushes(), Ordering::Relaxed);
    counters
        .spilled
        .store(disklet.spilled_bytes(), Ordering::Relaxed);
    result?;
    emitter.overflow().map_or(Ok(()), Err)
}

/// CPU time stage `index` of a job used so far, ns.
pub(crate) fn stage_cpu_ns(state: &JobState, index: usize) -> u64 {
    state.stages[index].cpu_ns.load(Ordering::Relaxed)
}

/// Sends what the disklet emitted downstream (blocking on backpressure), cut into buffers of
/// at most `buffer_bytes` so a stream never holds more than its share of the grant.
pub(crate) fn forward(
    emitter: &mut Emitter,
    outputs: &mut [Out],
    ctx: &StageContext,
) -> Result<()> {
    let counters = &ctx.state.stages[ctx.index];
    let (taken, held_bytes) = emitter.take_sized_outputs();
    // What waits to be forwarded stays charged until it is in a buffer.
    let mut held = crate::memory::Held::new(&ctx.account, held_bytes);
    for (port, batches) in taken.into_iter().enumerate() {
        for (batch, bytes) in batches {
            for (piece, piece_bytes) in crate::stream::cut_sized(
                &batch,
                bytes,
                crate::stream::buffer_cap(ctx.buffer_bytes),
            )? {
                let rows = piece.num_rows() as u64;
                match &mut outputs[port] {
                    Out::Stream(tx) | Out::Apart(tx, _) => {
                        held.release(piece_bytes);
                        let sent = tx.blocking_slot().map(|slot| {
                            tx.blocking_send_sized(slot, piece, piece_bytes, 0, &ctx.account)
                        });
                        if !matches!(sent, Some(Ok(_))) {
                            // Its reader needs no more (a limit) or went away.
                            outputs[port].close()?;
                            continue;
                        }
                    }
                    Out::Closed => continue,
                    Out::Inline(stage) => {
                        held.release(piece_bytes);
                        stage.push(piece, piece_bytes)?;
                        outputs[port].maybe_apart();
                    }
                }
                counters.rows_out.fetch_add(rows, Ordering::Relaxed);
                counters.bytes_out.fetch_add(piece_bytes, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// Calls for more output without any emitted, in a row, before a disklet is taken to be stuck.
pub(crate) const MAX_IDLE_MORE_CALLS: u32 = 10_000;

/// Calls [`Disklet::more_output`] while the disklet holds output back, forwarding what each
/// call emits. A disklet that asks for [`MAX_IDLE_MORE_CALLS`] calls in a row without
/// emitting anything fails its job ([`DiskOsError::NoProgress`]): no disklet bug can hold a
/// disk's processor and grant.
pub(crate) fn drain_more(
    disklet: &mut dyn Disklet,
    emitter: &mut Emitter,
    outputs: &mut [Out],
    ctx: &StageContext,
) -> Result<()> {
    let mut idle = 0u32;
    while disklet.has_more_output() && !ctx.state.failed() {
        step(disklet, emitter, Call::More, ctx)?;
        if !emitter.has_output() {
            idle += 1;
            if idle >= MAX_IDLE_MORE_CALLS {
                return Err(DiskOsError::NoProgress {
                    disklet: disklet.name().to_string(),
                    calls: idle,
                });
            }
        } else {
            idle = 0;
        }
        forward(emitter, outputs, ctx)?;
    }
    Ok(())
}

/// The next buffer for a stage: from the input its disklet asks for, or from whichever of its
/// open inputs has one first. `None` once every input ended; `(i, None)` when input `i` ends.
fn next_buffer(
    disklet: &dyn Disklet,
    open: &mut [Option<StreamRx>],
) -> Option<(usize, Option<Buffer>)> {
    let live: Vec<usize> = (0..open.len()).filter(|i| open[*i].is_some()).collect();
    let wanted = match disklet.next_input() {
        NextInput::Input(k) if live.contains(&k) => Some(k),
        _ if live.len() == 1 => Some(live[0]),
        _ => None,
    };
    match (wanted, live.is_empty()) {
        (_, true) => None,
        (Some(k), _) => Some((k, open[k].as_mut().expect("live input").blocking_recv())),
        (None, _) => Some(recv_any(open)),
    }
}

/// Blocks until any open input has a buffer or ends.
fn recv_any(open: &mut [Option<StreamRx>]) -> (usize, Option<Buffer>) {
    futures::executor::block_on(std::future::poll_fn(|cx| {
        for (i, rx) in open.iter_mut().enumerate() {
            if let Some(rx) = rx
                && let std::task::Poll::Ready(b) = rx.poll_recv(cx)
            {
                return std::task::Poll::Ready((i, b));
            }
        }
        std::task::Poll::Pending
    }))
}

/// One disklet stage: a loop on its own blocking thread for the life of the job.
fn run_stage(
    mut disklet: Box<dyn Disklet>,
    inputs: Vec<StreamRx>,
    mut outputs: Vec<Out>,
    ctx: StageContext,
) -> Result<()> {
    let mut emitter = Emitter::capped(outputs.len(), ctx.emit_cap, &ctx.account);
    let mut open: Vec<Option<StreamRx>> = inputs.into_iter().map(Some).collect();
    let mut scratch_charged = 0u64;
    let result = (|| {
        loop {
            let next = next_buffer(disklet.as_ref(), &mut open);
            if ctx.state.failed() {
                return Ok(());
            }
            let call = match next {
                None => Call::Finish,
                Some((input, Some(buffer))) => Call::Process(input, buffer),
                Some((input, None)) => {
                    open[input] = None;
                    Call::InputEnded(input)
                }
            };
            let end = matches!(call, Call::Finish);
            step(disklet.as_mut(), &mut emitter, call, &ctx)?;
            let scratch_now = disklet.scratch_bytes();
            ctx.account.adjust(scratch_charged, scratch_now);
            scratch_charged = scratch_now;
            for (input, range) in emitter.take_skips() {
                if let Some(Some(skip)) = ctx.skips.get(input) {
                    skip.add([range]);
                }
            }
            let stop = emitter.is_done() || Out::all_done(&outputs);
            forward(&mut emitter, &mut outputs, &ctx)?;
            drain_more(disklet.as_mut(), &mut emitter, &mut outputs, &ctx)?;
            if end {
                return Ok(());
            }
            if stop {
                // The disklet needs no more input: finish now; closing the inputs stops the sources.
                for rx in open.iter_mut().flatten() {
                    rx.close();
                }
                step(disklet.as_mut(), &mut emitter, Call::Finish, &ctx)?;
                forward(&mut emitter, &mut outputs, &ctx)?;
                drain_more(disklet.as_mut(), &mut emitter, &mut outputs, &ctx)?;
                return Ok(());
            }
        }
    })();
    ctx.account.adjust(scratch_charged, 0);
    // The fused stages after this one see their input end (not after a failure: they drop).
    result.and_then(|()| Out::finish_all(&mut outputs))
}
