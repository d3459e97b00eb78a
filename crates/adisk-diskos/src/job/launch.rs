//! Running a built job: a task per source, a thread per stage, the output wired to the host,
//! to other disks or to stored results, and a supervisor that settles the job.
use super::build::{Built, TablePlan};
use super::sink::{
    PendingResults, SplitWrite, commit_results, host_sink, route_rows, write_result,
};
use super::state::JobState;
use super::{DiskOs, Intact, PipeRoute, RunningJob};
use crate::disklet::Disklet;
use crate::exchange::{ExchangeRegistry, PipeMessage};
use crate::memory::{Account, Grant};
use crate::sched::JobCompute;
use crate::stage::{InlineStage, Out};
use crate::stage::{StageContext, holds_of, run_stage};
use crate::stream::{FileScan, ReadCounters, SkipList, StreamRx, StreamTx, TableScan, stream};
use crate::wiring::{Router, TempArea};
use crate::{DiskOsError, Result};
use adisk_core::builder::grant::emit_allowance;
use adisk_core::protocol::{JobSpec, Port, Sink, Source, StoredStream};
use adisk_storage::writer::PartitionWriter;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

impl DiskOs {
    pub(super) fn launch(self: &Arc<Self>, job: Launch) -> RunningJob {
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
    pub(super) fn spawn_inputs(
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
    pub(super) fn spawn_stages(
        &self,
        spec: &JobSpec,
        stages: Vec<Box<dyn Disklet>>,
        shared: &Shared,
        wires: &mut Wires,
    ) {
        let ports: Vec<usize> = stages.iter().map(|d| d.output_ports()).collect();
        let parents = if self.config.fuse_stages {
            crate::stage::inline_parents(&spec.stages, &ports)
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
                let apart = crate::stage::ApartRule {
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
    pub(super) fn stage_context(
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
    pub(super) fn spawn_output(
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
                    buffer_bytes,
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
    pub(super) fn spawn_source(
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
    pub(super) fn spawn_exchange(
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
            buffer_bytes,
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
                    st.settle(
                        route_rows(rx, &router, &txs, (&account, buffer_bytes)),
                        holds,
                    )
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
    pub(super) fn job_compute(&self, spec: &JobSpec, state: &JobState) -> JobCompute {
        JobCompute::new(
            self.compute.clone(),
            &spec.program,
            state.cancel.subscribe(),
            state.schedule_wait_ns.clone(),
        )
    }

    /// Waits for every task of a job, commits its named results if all succeeded, records the
    /// outcome, and returns its grants and temporary files.
    pub(super) fn supervise(
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
}

/// An admitted job, ready to launch.
pub(super) struct Launch {
    pub(super) spec: JobSpec,
    pub(super) grants: (Grant, Option<Grant>),
    pub(super) area: Arc<TempArea>,
    pub(super) state: Arc<JobState>,
    pub(super) sources: Vec<(Option<SchemaRef>, Option<TablePlan>)>,
    pub(super) built: Built,
    pub(super) host_input: Option<mpsc::Receiver<RecordBatch>>,
    pub(super) buffer_bytes: u64,
}

/// What every task of a job being launched shares.
pub(super) struct Shared {
    pub(super) state: Arc<JobState>,
    pub(super) account: Arc<Account>,
    pub(super) compute: JobCompute,
    pub(super) area: Arc<TempArea>,
    pub(super) buffer_bytes: u64,
}

/// The streams of a job being launched, one per port (taken as they are wired), the skip lists
/// of its inputs, and the tasks started so far.
pub(super) struct Wires {
    pub(super) txs: BTreeMap<Port, StreamTx>,
    pub(super) rxs: BTreeMap<Port, StreamRx>,
    pub(super) skips: BTreeMap<Port, Arc<SkipList>>,
    pub(super) tasks: Vec<tokio::task::JoinHandle<Result<()>>>,
}

impl Wires {
    /// A stream of `buffers` queued buffers for each of `ports`.
    pub(super) fn new<'a>(ports: impl Iterator<Item = &'a Port>, buffers: u32) -> Self {
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
pub(super) struct WiredOutput {
    pub(super) rx: StreamRx,
    pub(super) schema: SchemaRef,
    pub(super) router: Option<Router>,
}

/// What a source task writes into.
pub(super) struct SourceIo {
    pub(super) tx: StreamTx,
    pub(super) skip: Arc<SkipList>,
    /// Filters pushed down by the stages reading the source (tables apply them).
    pub(super) filters: Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
    pub(super) account: Arc<Account>,
    pub(super) buffer_bytes: u64,
    pub(super) area: Arc<TempArea>,
    pub(super) compute: JobCompute,
}

/// One exchange output.
pub(super) struct ExchangeOut {
    pub(super) rx: StreamRx,
    pub(super) schema: SchemaRef,
    pub(super) exchange_id: String,
    pub(super) targets: Vec<String>,
    pub(super) sender: u32,
    /// Per target, the relay its stream passes through, if any.
    pub(super) relays: Vec<Option<String>>,
    pub(super) router: Option<Router>,
    /// The job's buffer size: a routed target's rows are gathered up to half of it before
    /// they are sent.
    pub(super) buffer_bytes: u64,
}

/// Feeds a host-resident input from the job's `DoExchange` call.
pub(super) async fn host_source(
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

pub(super) async fn pipe_source(
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
