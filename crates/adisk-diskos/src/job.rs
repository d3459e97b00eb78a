//! Jobs: admission, wiring of streams and disklets, fair scheduling, statistics.
use crate::disklet::{Disklet, Emitter, InputBuffer};
use crate::exchange::{ExchangeRegistry, PipeMessage};
use crate::expr::ExprPlanner;
use crate::memory::{Account, Grant, MemoryBudget};
use crate::stream::{Buffer, FileScan, ReadCounters, SkipList, StreamRx, StreamTx, TableScan, file_schema, projected_schema, stream};
use crate::{DiskOsError, Result, disklets};
use adisk_core::protocol::{DiskStatus, DiskletSpec, FragmentKind, JobSpec, Sink, Source};
use adisk_core::stats::{DiskJobStats, StageStats};
use adisk_storage::StorageError;
use adisk_storage::store::DiskStore;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::physical_optimizer::pruning::PruningPredicate;
use futures::future::BoxFuture;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Smallest stream buffer a job may ask for, KiB.
pub const MIN_JOB_BUFFER_KIB: u64 = 16;

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
    /// Disklet buffers processed at once (compute slots).
    pub compute_slots: usize,
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
}

impl DiskOsConfig {
    /// Defaults for a disk of `memory_bytes` with `buffer_bytes` buffers.
    pub fn new(disk_id: u32, memory_bytes: u64, buffer_bytes: u64, buffers_per_stream: u32) -> Self {
        DiskOsConfig {
            disk_id,
            memory_bytes,
            buffer_bytes,
            buffers_per_stream,
            compute_slots: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            max_waiting_jobs: 64,
            admission_timeout: Duration::from_secs(60),
            default_scratch_bytes: (memory_bytes / 4).max(buffer_bytes),
            finished_jobs_kept: 1024,
            read_bytes_per_sec: 0,
        }
    }
}

/// Sends the output ports of an exchange job to other disks (provided by the disk server).
pub trait PipeConnector: Send + Sync + 'static {
    /// Streams `rx` to `target` as sender `sender` of exchange `exchange_id`; returns (bytes, rows) sent.
    fn send(&self, target: String, exchange_id: String, sender: u32, schema: SchemaRef, rx: StreamRx) -> BoxFuture<'static, Result<(u64, u64)>>;
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
    setup_ns: (u64, u64),
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
    schedule_wait_ns: AtomicU64,
    granted_bytes: AtomicU64,
    account: Mutex<Option<Arc<Account>>>,
    wall_ns: AtomicU64,
    failed: AtomicBool,
    error: Mutex<Option<String>>,
    cancel: tokio::sync::watch::Sender<bool>,
}

impl JobState {
    /// Cancels the job (its consumer went away): sources waiting for pipe or host input stop.
    pub fn cancel(&self) {
        self.cancel.send_replace(true);
    }

    fn new(job_id: &str, disk_id: u32, stages: &[(&'static str, u64, (u64, u64))]) -> Self {
        JobState {
            job_id: job_id.to_string(),
            disk_id,
            started: Instant::now(),
            read: Arc::new(ReadCounters::default()),
            stages: stages.iter().map(|(name, scratch, setup_ns)| StageCounters { name, scratch_granted: *scratch, setup_ns: *setup_ns, ..Default::default() }).collect(),
            shipped_host_bytes: AtomicU64::new(0),
            shipped_disk_bytes: AtomicU64::new(0),
            rows_shipped: AtomicU64::new(0),
            encode_cpu_ns: AtomicU64::new(0),
            admission_wait_ns: AtomicU64::new(0),
            schedule_wait_ns: AtomicU64::new(0),
            granted_bytes: AtomicU64::new(0),
            account: Mutex::new(None),
            wall_ns: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            cancel: tokio::sync::watch::Sender::new(false),
        }
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
        self.wall_ns.store(self.started.elapsed().as_nanos() as u64, Ordering::SeqCst);
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
                compile_ns: s.setup_ns.0,
                instantiate_ns: s.setup_ns.1,
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
            bytes_scanned: l(&r.bytes_scanned),
            rows_shipped: l(&self.rows_shipped),
            bytes_shipped_host: l(&self.shipped_host_bytes),
            bytes_shipped_disks: l(&self.shipped_disk_bytes),
            cpu_ns: l(&r.cpu_ns) + stages.iter().map(|s| s.cpu_ns).sum::<u64>() + l(&self.encode_cpu_ns),
            wall_ns: wall,
            admission_wait_ns: l(&self.admission_wait_ns),
            schedule_wait_ns: l(&self.schedule_wait_ns),
            memory_granted_bytes: l(&self.granted_bytes),
            memory_peak_bytes: self.account.lock().expect("account lock").as_ref().map_or(0, |a| a.peak()),
            stages,
            error: self.error.lock().expect("error lock").clone(),
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
    compute: Arc<Semaphore>,
    planner: ExprPlanner,
    exchanges: Arc<ExchangeRegistry>,
    connector: Arc<dyn PipeConnector>,
    running: Mutex<Vec<Arc<JobState>>>,
    user: std::sync::OnceLock<Arc<dyn crate::user::UserDisklets>>,
    finished: Mutex<VecDeque<Arc<JobState>>>,
    jobs_finished: AtomicU64,
    jobs_failed: AtomicU64,
    read_limiter: Option<Arc<crate::stream::ReadLimiter>>,
}

impl DiskOs {
    /// A DiskOS over `store`.
    pub fn new(config: DiskOsConfig, store: Arc<DiskStore>, connector: Arc<dyn PipeConnector>) -> Arc<Self> {
        Arc::new(DiskOs {
            budget: Arc::new(MemoryBudget::new(config.memory_bytes, config.max_waiting_jobs, config.admission_timeout)),
            compute: Arc::new(Semaphore::new(config.compute_slots.max(1))),
            read_limiter: (config.read_bytes_per_sec > 0).then(|| Arc::new(crate::stream::ReadLimiter::new(config.read_bytes_per_sec))),
            planner: ExprPlanner::default(),
            exchanges: Arc::new(ExchangeRegistry::new(config.buffers_per_stream as usize)),
            connector,
            running: Mutex::new(Vec::new()),
            user: std::sync::OnceLock::new(),
            finished: Mutex::new(VecDeque::new()),
            jobs_finished: AtomicU64::new(0),
            jobs_failed: AtomicU64::new(0),
            config,
            store,
        })
    }

    /// Installs the registry of user disklets (once; later calls are ignored).
    pub fn set_user_disklets(&self, user: Arc<dyn crate::user::UserDisklets>) {
        let _ = self.user.set(user);
    }

    /// The registry of user disklets, if the disk node provides one.
    pub fn user_disklets(&self) -> Option<&Arc<dyn crate::user::UserDisklets>> {
        self.user.get()
    }

    fn build_stage(&self, stage: &DiskletSpec, input: &SchemaRef, scratch_bytes: u64) -> Result<Box<dyn Disklet>> {
        match stage {
            DiskletSpec::Wasm { name, params, fuel } => {
                let user = self.user.get().ok_or_else(|| DiskOsError::InvalidJob("this disk does not run user disklets".into()))?;
                user.build(name, params, *fuel, input)
            }
            _ => disklets::build(stage, input, scratch_bytes, &self.planner),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<DiskStore> {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &DiskOsConfig {
        &self.config
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
            tables: catalog.tables.iter().map(|t| (t.name.clone(), t.partitions.iter().map(|p| p.rows).sum())).collect(),
        }
    }

    /// Statistics of a running or recently finished job.
    pub fn job_stats(&self, job_id: &str) -> Option<DiskJobStats> {
        if let Some(s) = self.running.lock().expect("running lock").iter().find(|s| s.job_id == job_id) {
            return Some(s.snapshot());
        }
        self.finished.lock().expect("finished lock").iter().rev().find(|s| s.job_id == job_id).map(|s| s.snapshot())
    }

    fn scratch_for(&self, spec: &JobSpec, stage: &DiskletSpec) -> u64 {
        let requested = if spec.scratch_kib == 0 { self.config.default_scratch_bytes } else { spec.scratch_kib * 1024 };
        match stage {
            DiskletSpec::Aggregate { .. } | DiskletSpec::SortRuns { .. } | DiskletSpec::Fragment { kind: FragmentKind::Aggregate, .. } => requested,
            DiskletSpec::Fragment { kind: FragmentKind::Select, .. } => 0,
            DiskletSpec::BloomProbe { filter, .. } => (filter.size_bytes() as u64).max(requested.min(filter.size_bytes() as u64)),
            DiskletSpec::Select { .. } | DiskletSpec::Partition { .. } => 0,
            // The whole linear memory of a user disklet (scratch + input area) is its grant.
            DiskletSpec::Wasm { name, .. } => self.user.get().and_then(|u| u.grant_bytes(name).ok()).unwrap_or(0),
        }
    }

    /// The stream buffer size of `spec`: its own request, or the disk's.
    fn job_buffer_bytes(&self, spec: &JobSpec) -> Result<u64> {
        if spec.buffer_kib == 0 {
            return Ok(self.config.buffer_bytes);
        }
        if !(MIN_JOB_BUFFER_KIB..=adisk_core::protocol::MAX_JOB_BUFFER_KIB).contains(&spec.buffer_kib) {
            return Err(DiskOsError::InvalidJob(format!(
                "stream buffers of {} KiB asked for (allowed: {MIN_JOB_BUFFER_KIB} to {} KiB)",
                spec.buffer_kib,
                adisk_core::protocol::MAX_JOB_BUFFER_KIB
            )));
        }
        if spec.stages.iter().any(|s| matches!(s, DiskletSpec::Wasm { .. })) && spec.buffer_kib * 1024 != self.config.buffer_bytes {
            // A user disklet's input area is sized for the disk's buffers at install.
            return Err(DiskOsError::InvalidJob("a job with a user disklet runs with the disk's own buffer size".into()));
        }
        Ok(spec.buffer_kib * 1024)
    }

    /// Admits and starts a job. `host_input` feeds a [`Source::Host`] stream.
    ///
    /// # Errors
    /// Unknown table/column, invalid stages, memory refused — before anything runs.
    pub async fn start_job(self: &Arc<Self>, spec: JobSpec, host_input: Option<mpsc::Receiver<RecordBatch>>) -> Result<RunningJob> {
        // 1. The input stream and its schema.
        let (source_schema, table_plan) = match &spec.source {
            Source::Table { table, columns, prune } => {
                let info = self.store.table(table)?;
                let projection: Vec<usize> = if columns.is_empty() {
                    (0..info.schema.fields().len()).collect()
                } else {
                    columns
                        .iter()
                        .map(|c| {
                            info.schema.index_of(c).map_err(|_| {
                                DiskOsError::Storage(StorageError::UnknownColumn {
                                    table: table.clone(),
                                    column: c.clone(),
                                    available: info.schema.fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>().join(", "),
                                })
                            })
                        })
                        .collect::<Result<_>>()?
                };
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
                (schema, Some((info, projection, prune)))
            }
            Source::File { .. } => (file_schema(), None),
            Source::Pipe { schema, .. } | Source::Host { schema } => (Arc::new(schema.clone()), None),
        };
        if matches!(spec.source, Source::Host { .. }) != host_input.is_some() {
            return Err(DiskOsError::InvalidJob("host-resident input needs a DoExchange call (and only it)".into()));
        }
        let buffer_bytes = self.job_buffer_bytes(&spec)?;
        // 2. Init the disklets, each on the previous one's output schema.
        let mut stages: Vec<Box<dyn Disklet>> = Vec::with_capacity(spec.stages.len());
        let mut scratch = Vec::with_capacity(spec.stages.len());
        let mut schema = source_schema.clone();
        for (i, stage) in spec.stages.iter().enumerate() {
            let s = self.scratch_for(&spec, stage);
            let d = if matches!(stage, DiskletSpec::Wasm { .. }) {
                // Compiling and a user init run guest code: keep them off the async workers.
                let (os, stage, input) = (self.clone(), stage.clone(), schema.clone());
                tokio::task::spawn_blocking(move || os.build_stage(&stage, &input, s)).await.map_err(|e| DiskOsError::InvalidJob(format!("user disklet init panicked: {e}")))??
            } else {
                self.build_stage(stage, &schema, s)?
            };
            if d.output_ports() > 1 && i + 1 != spec.stages.len() {
                return Err(DiskOsError::InvalidJob("only the last stage may have several outputs".into()));
            }
            schema = d.output_schema();
            scratch.push((d.name(), s, d.setup_ns()));
            stages.push(d);
        }
        let last_ports = stages.last().map_or(1, |d| d.output_ports());
        match &spec.sink {
            Sink::Host if last_ports != 1 => return Err(DiskOsError::InvalidJob("a job whose output goes to the host must end with one output".into())),
            Sink::Exchange { targets, .. } if targets.len() != last_ports || !matches!(spec.stages.last(), Some(DiskletSpec::Partition { .. })) => {
                return Err(DiskOsError::InvalidJob(format!("an exchange needs a final partition stage with one output per target ({} targets, {last_ports} outputs)", targets.len())));
            }
            _ => {}
        }
        // 3. Admission: every stream's buffer slots and every stage's scratch, granted up front.
        let streams = 1 + stages.len() as u64 + (last_ports as u64 - 1);
        let buffers = streams * u64::from(crate::stream::slots_per_stream(self.config.buffers_per_stream)) * buffer_bytes;
        let requested = buffers + scratch.iter().map(|(_, s, _)| s).sum::<u64>();
        let state = Arc::new(JobState::new(&spec.job_id, self.config.disk_id, &scratch));
        let wait = Instant::now();
        let grant = self.budget.grant(requested).await?;
        state.admission_wait_ns.store(wait.elapsed().as_nanos() as u64, Ordering::Relaxed);
        state.granted_bytes.store(grant.bytes(), Ordering::Relaxed);
        *state.account.lock().expect("account lock") = Some(grant.account().clone());
        self.running.lock().expect("running lock").push(state.clone());
        Ok(self.launch(spec, grant, state, source_schema, table_plan, stages, schema, host_input, buffer_bytes))
    }

    #[allow(clippy::too_many_arguments)]
    fn launch(
        self: &Arc<Self>,
        spec: JobSpec,
        grant: Grant,
        state: Arc<JobState>,
        source_schema: SchemaRef,
        table_plan: Option<(adisk_core::protocol::TableInfo, Vec<usize>, Option<Arc<PruningPredicate>>)>,
        stages: Vec<Box<dyn Disklet>>,
        out_schema: SchemaRef,
        host_input: Option<mpsc::Receiver<RecordBatch>>,
        buffer_bytes: u64,
    ) -> RunningJob {
        let account = grant.account().clone();
        let n = self.config.buffers_per_stream;
        let skip = Arc::new(SkipList::default());
        let mut tasks: Vec<tokio::task::JoinHandle<Result<()>>> = Vec::new();
        // Source.
        let (src_tx, rx) = stream(n);
        let mut rx = Some(rx);
        match spec.source.clone() {
            Source::Table { .. } => {
                let (table, projection, prune) = table_plan.expect("table source has a plan");
                let scan = TableScan {
                    store: self.store.clone(),
                    table,
                    projection,
                    prune,
                    buffer_bytes,
                    skip: skip.clone(),
                    counters: state.read.clone(),
                    account: account.clone(),
                    limiter: self.read_limiter.clone(),
                };
                tasks.push(tokio::task::spawn_blocking(move || scan.run(src_tx)));
            }
            Source::File { path, offset, length } => match self.store.file_path(&path) {
                Ok(path) => {
                    let scan = FileScan { path, offset, length, buffer_bytes, skip: skip.clone(), counters: state.read.clone(), account: account.clone() };
                    tasks.push(tokio::task::spawn_blocking(move || scan.run(src_tx)));
                }
                Err(e) => tasks.push(tokio::spawn(async move { Err(DiskOsError::Storage(e)) })),
            },
            Source::Pipe { exchange_id, senders, .. } => {
                let exchanges = self.exchanges.clone();
                let (counters, account, cancel) = (state.read.clone(), account.clone(), state.cancel.subscribe());
                tasks.push(tokio::spawn(async move {
                    let result = pipe_source(&exchanges, &exchange_id, senders, &src_tx, &counters, &account, cancel).await;
                    exchanges.remove(&exchange_id);
                    result
                }));
            }
            Source::Host { .. } => {
                let mut input = host_input.expect("checked at admission");
                let (counters, account, schema) = (state.read.clone(), account.clone(), source_schema.clone());
                let mut cancel = state.cancel.subscribe();
                tasks.push(tokio::spawn(async move {
                    let mut position = 0u64;
                    loop {
                        let batch = tokio::select! {
                            b = input.recv() => match b { Some(b) => b, None => break },
                            _ = cancel.wait_for(|c| *c) => return Err(DiskOsError::Cancelled),
                        };
                        if batch.schema().fields() != schema.fields() {
                            return Err(DiskOsError::InvalidJob("host stream batch does not match the declared schema".into()));
                        }
                        let n = batch.num_rows() as u64;
                        let Ok(bytes) = src_tx.send_batch(batch, position, &account).await else { break };
                        position += n;
                        counters.rows_read.fetch_add(n, Ordering::Relaxed);
                        counters.bytes_scanned.fetch_add(bytes, Ordering::Relaxed);
                    }
                    Ok(())
                }));
            }
        }
        // Stages, joined by pipe streams.
        let stage_count = stages.len();
        let mut final_outputs: Vec<StreamRx> = Vec::new();
        for (i, disklet) in stages.into_iter().enumerate() {
            let ports = disklet.output_ports();
            let mut txs = Vec::with_capacity(ports);
            let mut rxs = Vec::with_capacity(ports);
            for _ in 0..ports {
                let (t, r) = stream(n);
                txs.push(t);
                rxs.push(r);
            }
            let ctx = StageContext { index: i, buffer_bytes, state: state.clone(), compute: self.compute.clone(), account: account.clone(), skip: if i == 0 { Some(skip.clone()) } else { None } };
            let input = rx.take().expect("each stream has one consumer");
            tasks.push(tokio::task::spawn_blocking(move || run_stage(disklet, input, txs, ctx)));
            if i + 1 == stage_count {
                final_outputs = rxs;
            } else {
                rx = rxs.pop();
            }
        }
        if stage_count == 0 {
            final_outputs = vec![rx.take().expect("source stream")];
        }
        // Sink.
        let (host_tx, host_rx) = stream(n);
        match spec.sink.clone() {
            Sink::Host => {
                let mut out = final_outputs.pop().expect("one output");
                let counters = state.clone();
                tasks.push(tokio::spawn(async move {
                    while let Some(b) = out.recv().await {
                        counters.rows_shipped.fetch_add(b.batch.num_rows() as u64, Ordering::Relaxed);
                        if host_tx.send(b).await.is_err() {
                            return Err(DiskOsError::Cancelled);
                        }
                    }
                    Ok(())
                }));
            }
            Sink::Exchange { exchange_id, targets, sender } => {
                drop(host_tx);
                for (target, out) in targets.into_iter().zip(final_outputs) {
                    let connector = self.connector.clone();
                    let (st, id, schema) = (state.clone(), exchange_id.clone(), out_schema.clone());
                    tasks.push(tokio::spawn(async move {
                        let (bytes, rows) = connector.send(target, id, sender, schema, out).await?;
                        st.shipped_disk_bytes.fetch_add(bytes, Ordering::Relaxed);
                        st.rows_shipped.fetch_add(rows, Ordering::Relaxed);
                        Ok(())
                    }));
                }
            }
        }
        // Supervisor: wait for every task, record the outcome, return the grant.
        let (done_tx, done_rx) = oneshot::channel();
        let os = self.clone();
        let st = state.clone();
        tokio::spawn(async move {
            let mut first_error: Option<DiskOsError> = None;
            for t in tasks {
                let r = match t.await {
                    Ok(r) => r,
                    Err(join) => Err(DiskOsError::InvalidJob(format!("a job task panicked: {join}"))),
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
            drop(grant);
            os.retire(&st, first_error.is_some());
            let _ = done_tx.send(match first_error {
                Some(e) => Err(e),
                None => Ok(()),
            });
        });
        RunningJob { schema: out_schema, output: host_rx, state, done: done_rx }
    }

    fn retire(&self, state: &Arc<JobState>, failed: bool) {
        self.running.lock().expect("running lock").retain(|s| !Arc::ptr_eq(s, state));
        let mut finished = self.finished.lock().expect("finished lock");
        finished.push_back(state.clone());
        while finished.len() > self.config.finished_jobs_kept {
            finished.pop_front();
        }
        if failed {
            self.jobs_failed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.jobs_finished.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn pipe_source(
    exchanges: &ExchangeRegistry,
    exchange_id: &str,
    senders: u32,
    tx: &StreamTx,
    counters: &ReadCounters,
    account: &Arc<Account>,
    mut cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let mut inbox = exchanges.receiver(exchange_id).map_err(DiskOsError::Pipe)?;
    let mut done = vec![false; senders as usize];
    let mut position = 0;
    while done.iter().any(|d| !d) {
        let msg = tokio::select! {
            m = inbox.recv() => m,
            () = tx.closed() => return Ok(()),
            _ = cancel.wait_for(|c| *c) => return Err(DiskOsError::Cancelled),
        };
        match msg {
            None => return Err(DiskOsError::Pipe(format!("exchange `{exchange_id}` closed early"))),
            Some(PipeMessage::Batch(batch)) => {
                let n = batch.num_rows() as u64;
                let Ok(bytes) = tx.send_batch(batch, position, account).await else { return Ok(()) };
                position += n;
                counters.rows_read.fetch_add(n, Ordering::Relaxed);
                counters.bytes_scanned.fetch_add(bytes, Ordering::Relaxed);
            }
            Some(PipeMessage::SenderDone(s)) => {
                let slot = done.get_mut(s as usize).ok_or_else(|| DiskOsError::Pipe(format!("sender {s} is not one of {senders}")))?;
                *slot = true;
            }
            Some(PipeMessage::SenderFailed(s, why)) => return Err(DiskOsError::Pipe(format!("sender {s} failed: {why}"))),
        }
    }
    Ok(())
}

struct StageContext {
    index: usize,
    buffer_bytes: u64,
    state: Arc<JobState>,
    compute: Arc<Semaphore>,
    account: Arc<Account>,
    skip: Option<Arc<SkipList>>,
}

/// Runs `disklet.process` (or `finish` when `buffer` is None) under a compute slot, on the
/// stage's own thread. Slots are handed out first come, first served across all jobs.
fn step(disklet: &mut dyn Disklet, emitter: &mut Emitter, buffer: Option<Buffer>, ctx: &StageContext) -> Result<()> {
    let wait = Instant::now();
    let permit = futures::executor::block_on(ctx.compute.acquire()).map_err(|_| DiskOsError::Cancelled)?;
    ctx.state.schedule_wait_ns.fetch_add(wait.elapsed().as_nanos() as u64, Ordering::Relaxed);
    let counters = &ctx.state.stages[ctx.index];
    if let Some(b) = &buffer {
        counters.rows_in.fetch_add(b.batch.num_rows() as u64, Ordering::Relaxed);
        counters.bytes_in.fetch_add(b.bytes(), Ordering::Relaxed);
    }
    let t0 = crate::thread_cpu_ns();
    let result = match &buffer {
        Some(b) => disklet.process(&InputBuffer { batch: &b.batch, position: b.position }, emitter),
        None => disklet.finish(emitter),
    };
    let cpu = crate::thread_cpu_ns().saturating_sub(t0);
    drop(permit);
    drop(buffer);
    counters.cpu_ns.fetch_add(cpu, Ordering::Relaxed);
    counters.scratch_peak.fetch_max(disklet.scratch_bytes(), Ordering::Relaxed);
    counters.flushes.store(disklet.flushes(), Ordering::Relaxed);
    result
}

/// Sends what the disklet emitted downstream (blocking on backpressure), cut into buffers of
/// at most `buffer_bytes` so a stream never holds more than its share of the grant.
fn forward(emitter: &mut Emitter, outputs: &[StreamTx], ctx: &StageContext) -> Result<()> {
    let counters = &ctx.state.stages[ctx.index];
    for (port, batches) in emitter.take_outputs().into_iter().enumerate() {
        for batch in batches {
            let rows = batch.num_rows();
            let bytes = crate::disklets::batch_bytes(&batch).max(1);
            // Batches up to twice the buffer size pass whole (a projection may widen a full
            // input buffer a little); larger ones, such as a group-by flush, are cut.
            let rows_per_buffer = if bytes <= 2 * ctx.buffer_bytes {
                rows.max(1)
            } else {
                ((rows as u128 * u128::from(ctx.buffer_bytes)) / u128::from(bytes)).clamp(1, rows.max(1) as u128) as usize
            };
            let mut offset = 0;
            while offset < rows {
                let len = rows_per_buffer.min(rows - offset);
                let slot = outputs[port].blocking_slot().ok_or(DiskOsError::Cancelled)?;
                let bytes = outputs[port].blocking_send_in(slot, batch.slice(offset, len), 0, &ctx.account).map_err(|()| DiskOsError::Cancelled)?;
                offset += len;
                counters.rows_out.fetch_add(len as u64, Ordering::Relaxed);
                counters.bytes_out.fetch_add(bytes, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// One disklet stage: a loop on its own blocking thread for the life of the job.
fn run_stage(mut disklet: Box<dyn Disklet>, mut input: StreamRx, outputs: Vec<StreamTx>, ctx: StageContext) -> Result<()> {
    let mut emitter = Emitter::new(outputs.len());
    let mut scratch_charged = 0u64;
    let result = (|| {
        loop {
            let buffer = input.blocking_recv();
            if ctx.state.failed() {
                return Ok(());
            }
            let end = buffer.is_none();
            step(disklet.as_mut(), &mut emitter, buffer, &ctx)?;
            let scratch_now = disklet.scratch_bytes();
            ctx.account.adjust(scratch_charged, scratch_now);
            scratch_charged = scratch_now;
            if let Some(skip) = &ctx.skip {
                skip.add(emitter.take_skips());
            }
            let stop = emitter.is_done();
            forward(&mut emitter, &outputs, &ctx)?;
            if end {
                return Ok(());
            }
            if stop {
                // The disklet needs no more input: finish now; closing the input stops the source.
                input.close();
                step(disklet.as_mut(), &mut emitter, None, &ctx)?;
                return forward(&mut emitter, &outputs, &ctx);
            }
        }
    })();
    ctx.account.adjust(scratch_charged, 0);
    result
}
