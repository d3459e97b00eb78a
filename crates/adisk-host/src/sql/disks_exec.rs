//! Running the `disks` level's stages ([`DisksExec`]): every stage's job started at each of
//! its disks at once, the top stage's output streamed to the host one partition per disk, the
//! first failure of any job failing the query. The stages themselves are cut by
//! [`super::distribute::DistributeRule`].
use super::bundling::PieceInput;
use super::scan::DiskScanExec;
use super::{QueryMetrics, ScanReport, SqlSettings};
use crate::client::cluster::Cluster;
use crate::client::jobs;
use crate::{HostError, Result};
use adisk_core::builder::{JobBuilder, fitted_buffer_kib, grant::grant_beyond_scratch};
use adisk_core::protocol::{
    DiskletSpec, ExprBytes, FragmentKind, JobSpec, Port, Route, Sink, Source,
};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::OnceCell;

/// One input of a stage, in leaf order.
#[derive(Debug, Clone)]
pub(super) enum Input {
    /// The local partition of a table scan (the scan's own bundle of stages runs first).
    Scan(Arc<DiskScanExec>),
    /// Every partition of another stage, routed to this stage's disks.
    Pipe(usize),
}

/// Where a stage's output goes.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Route2 {
    /// To the host (the top stage of a [`DisksExec`]).
    Host,
    /// Hashed on these columns of its output to the consuming stage's disks.
    Hash(Vec<String>),
    /// Every row to every disk of the consuming stage.
    Broadcast,
    /// By range of this column to the consuming stage's disks, in key order: target `i`
    /// takes the keys above `bounds[i-1]` up to `bounds[i]` (the disks where a
    /// range-declustered table keeps them).
    Range {
        key: String,
        bounds: Vec<datafusion::common::ScalarValue>,
    },
}

/// A stage of the distributed plan.
#[derive(Debug, Clone)]
pub(super) struct StagePlan {
    /// The fragment (an `EmptyExec` per input), for EXPLAIN.
    pub(super) plan: Arc<dyn ExecutionPlan>,
    /// Partition `i` runs at `disks[i]`.
    pub(super) disks: Vec<u32>,
    pub(super) inputs: Vec<Input>,
    pub(super) route: Route2,
    /// The disks of the stage that reads this one (set when it is cut).
    pub(super) targets: Vec<u32>,
    /// Estimated bytes of its output over all its disks (DataFusion's statistics).
    pub(super) est_bytes: Option<u64>,
    /// Its fragment as memik's bundles, each a DiskOS stage (one piece: the whole fragment).
    pub(super) pieces: Vec<StagePiece>,
}

/// One bundle of a stage: an encoded fragment, what its inputs read, its scratch weight and
/// its operators (for EXPLAIN).
#[derive(Debug, Clone)]
pub(super) struct StagePiece {
    pub(super) bytes: Vec<u8>,
    pub(super) inputs: Vec<PieceInput>,
    pub(super) weight: u64,
    pub(super) ops: String,
}

/// The part of a plan that runs at the disks as stages; its partitions are the top stage's
/// outputs, one per disk.
#[derive(Debug, Clone)]
pub struct DisksExec {
    pub(super) stages: Arc<Vec<StagePlan>>,
    pub(super) root: usize,
    pub(super) cluster: Arc<Cluster>,
    pub(super) settings: Arc<SqlSettings>,
    pub(super) metrics: Arc<QueryMetrics>,
    pub(super) properties: Arc<PlanProperties>,
    pub(super) run: Arc<OnceCell<std::result::Result<Arc<Run>, String>>>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Run")
    }
}

/// The started jobs of one execution.
pub(super) struct Run {
    /// The top stage's result streams, taken by the partition that reads each.
    pub(super) outputs:
        Mutex<Vec<Option<futures::stream::BoxStream<'static, Result<RecordBatch>>>>>,
    /// The first failure of any other job.
    pub(super) failure: tokio::sync::watch::Receiver<Option<Arc<HostError>>>,
}

impl DisksExec {
    /// Which disk reads which partitions, per scan of the stages.
    pub fn scan_reads(&self) -> Vec<String> {
        self.stages
            .iter()
            .flat_map(|s| &s.inputs)
            .filter_map(|i| match i {
                Input::Scan(scan) => scan.describe_reads(),
                Input::Pipe(_) => None,
            })
            .collect()
    }

    /// Estimated bytes this node sends to the host and from disk to disk (a broadcast counted
    /// once per receiving disk); None where DataFusion cannot estimate a stage's output.
    pub fn estimated_traffic(&self) -> Option<(u64, u64)> {
        let root = self.stages.get(self.root)?.est_bytes?;
        let mut between = 0u64;
        for i in self.reachable().into_iter().filter(|i| *i != self.root) {
            let s = &self.stages[i];
            let fanout = match s.route {
                Route2::Broadcast => s.targets.len() as u64,
                _ => 1,
            };
            between = between.saturating_add(s.est_bytes?.saturating_mul(fanout));
        }
        Some((root, between))
    }

    /// Index of the stage whose output this node streams.
    pub(super) fn root(&self) -> usize {
        self.root
    }

    /// Number of stages.
    pub fn stage_count(&self) -> usize {
        self.reachable().len()
    }

    /// The stages this node runs (itself last), with where each runs.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, s) in self.reachable().into_iter().map(|i| (i, &self.stages[i])) {
            let inputs: Vec<String> = s
                .inputs
                .iter()
                .map(|inp| match inp {
                    Input::Scan(scan) => format!("scan {}", scan.table()),
                    Input::Pipe(p) => format!("stage {p}"),
                })
                .collect();
            let route = match &s.route {
                Route2::Host => "→ host".to_string(),
                Route2::Hash(k) => format!("→ hash [{}] to disks {:?}", k.join(", "), s.targets),
                Route2::Broadcast => format!("→ broadcast to disks {:?}", s.targets),
                Route2::Range { key, .. } => {
                    format!("→ range [{key}] to disks {:?}", s.targets)
                }
            };
            let ops = match s.pieces.as_slice() {
                [_] => operators(&s.plan),
                pieces => {
                    let each: Vec<String> = pieces
                        .iter()
                        .enumerate()
                        .map(|(i, p)| format!("bundle {i}: {}", p.ops))
                        .collect();
                    format!("{} bundles: {}", pieces.len(), each.join(" | "))
                }
            };
            out.push(format!(
                "stage {i} at disks {:?} reads [{}] {route}: {ops}",
                s.disks,
                inputs.join(", ")
            ));
        }
        out
    }

    /// The stages the root depends on, inputs before readers.
    fn reachable(&self) -> Vec<usize> {
        fn visit(stages: &[StagePlan], i: usize, out: &mut Vec<usize>) {
            if out.contains(&i) {
                return;
            }
            for inp in &stages[i].inputs {
                if let Input::Pipe(p) = inp {
                    visit(stages, *p, out);
                }
            }
            out.push(i);
        }
        let mut out = Vec::new();
        if self.root < self.stages.len() {
            visit(&self.stages, self.root, &mut out);
        }
        out
    }

    /// Appends stage `s`'s partition `p` to `job` (the query's job at that partition's disk):
    /// its inputs, its scans' stages, its fragment, and its output (to the host for the top
    /// stage, else to the exchange of the stage that reads it).
    fn add_stage(&self, job: &mut DraftJob, s: usize, p: usize, ids: &[String]) -> Result<()> {
        let stage = &self.stages[s];
        let mut ports = Vec::new();
        for inp in &stage.inputs {
            match inp {
                Input::Scan(scan) => {
                    let (source, chain) = scan.disk_stages()?;
                    // Replicas: this disk reads only the partitions assigned to it.
                    let input = job.job.input(super::scan::reading_source(
                        source,
                        scan.partitions_at(stage.disks[p]),
                    ));
                    let mut from = input;
                    for disklet in chain {
                        let w = chain_weight(&disklet);
                        from = job.push(s, disklet, vec![from], w);
                    }
                    ports.push(from);
                }
                Input::Pipe(q) => {
                    let sender = &self.stages[*q];
                    ports.push(job.job.input(Source::Pipe {
                        exchange_id: ids[*q].clone(),
                        senders: sender.disks.len() as u32,
                        schema: sender.plan.schema().as_ref().clone(),
                    }));
                }
            }
        }
        let from = Self::add_pieces(job, s, &stage.pieces, &ports);
        let sink = self.sink(s, p, ids)?;
        if matches!(sink, Sink::Host) {
            job.root_partition = Some(p);
        }
        job.job.output(from, sink);
        Ok(())
    }

    /// Appends the pieces of stage `s` (its bundles) reading the stage's input `ports`; the
    /// last one's output port.
    fn add_pieces(job: &mut DraftJob, s: usize, pieces: &[StagePiece], ports: &[Port]) -> Port {
        let mut outs: Vec<Port> = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let inputs = piece
                .inputs
                .iter()
                .map(|i| match *i {
                    PieceInput::Stage(k) => ports[k],
                    PieceInput::Piece(j) => outs[j],
                })
                .collect();
            let fragment = DiskletSpec::Fragment {
                kind: FragmentKind::Stage,
                plan: ExprBytes(piece.bytes.clone()),
            };
            outs.push(job.push(s, fragment, inputs, piece.weight));
        }
        *outs.last().expect("a stage has at least one piece")
    }

    /// Where partition `p` of stage `s` sends its rows.
    fn sink(&self, s: usize, p: usize, ids: &[String]) -> Result<Sink> {
        let stage = &self.stages[s];
        let route = match &stage.route {
            Route2::Host => return Ok(Sink::Host),
            Route2::Hash(keys) => Route::Hash {
                keys: keys
                    .iter()
                    .map(|k| jobs::encode_expr(&datafusion::prelude::col(k.as_str())))
                    .collect::<Result<_>>()?,
            },
            Route2::Broadcast => Route::Broadcast,
            Route2::Range { key, bounds } => Route::Range {
                key: jobs::encode_expr(&datafusion::prelude::col(key.as_str()))?,
                bounds: bounds
                    .iter()
                    .map(|b| jobs::encode_expr(&datafusion::prelude::lit(b.clone())))
                    .collect::<Result<_>>()?,
            },
        };
        Ok(Sink::Exchange {
            exchange_id: ids[s].clone(),
            targets: stage
                .targets
                .iter()
                .map(|d| self.cluster.address(*d).to_string())
                .collect(),
            sender: p as u32,
            route,
            relay: None,
            target_relays: vec![],
        })
    }

    /// The query's jobs, one per disk: every stage partition a disk runs, admitted under one
    /// grant (so a query never holds part of a disk's memory while waiting for the rest) and
    /// sent in one message.
    fn disk_jobs(&self, order: &[usize], ids: &[String]) -> Result<Vec<DiskJob>> {
        let query = adisk_core::builder::new_id("query");
        let mut by_disk = std::collections::BTreeMap::<u32, DraftJob>::new();
        for &s in order {
            for (p, &d) in self.stages[s].disks.iter().enumerate() {
                let job = by_disk
                    .entry(d)
                    .or_insert_with(|| DraftJob::new(d, &query, &self.settings.program));
                self.add_stage(job, s, p, ids)?;
            }
        }
        let cost = &self.settings.cost;
        let kib = fitted_buffer_kib(
            by_disk.values().map(|j| j.job.spec()),
            self.settings
                .buffer_kib
                .min(cost.disk_memory_bytes / BUFFERS_PER_DISK_MEMORY / 1024)
                .max(STAGE_BUFFER_KIB),
            cost.disk_memory_bytes,
            cost.buffers_per_stream,
        );
        let budget = Budget {
            buffer_kib: kib,
            memory_bytes: cost.disk_memory_bytes,
            buffers_per_stream: cost.buffers_per_stream,
            scratch_kib: self.settings.scratch_kib,
            temp_kib: self.settings.temp_kib,
        };
        by_disk
            .into_values()
            .map(|job| job.finish(&budget))
            .collect()
    }

    /// Starts the query's job at every disk, in disk order ([`Cluster::start_together`]).
    async fn start(&self) -> Result<Arc<Run>> {
        let order = self.reachable();
        let ids: Vec<String> = (0..self.stages.len())
            .map(|i| adisk_core::builder::new_id(&format!("stage{i}")))
            .collect();
        let jobs = self.disk_jobs(&order, &ids)?;
        let specs: Vec<(u32, &JobSpec)> = jobs.iter().map(|j| (j.disk, &j.spec)).collect();
        // The jobs' time counts from their submission: a disk admits and builds its job
        // while the others are being started.
        let submitted = Instant::now();
        let started = self.cluster.start_together(&specs).await?;
        let (fail_tx, fail_rx) = tokio::sync::watch::channel(None::<Arc<HostError>>);
        let fail_tx = Arc::new(fail_tx);
        let roots = self.stages[self.root].disks.len();
        let others = jobs.iter().filter(|j| j.root_partition.is_none()).count();
        let cancel = Arc::new(Cancel {
            roots,
            stop: tokio::sync::watch::Sender::new(false),
            completed: Default::default(),
            others: Arc::new(tokio::sync::watch::Sender::new(others)),
        });
        let mut outputs: Vec<Option<_>> = (0..roots).map(|_| None).collect();
        for (job, stream) in jobs.into_iter().zip(started) {
            self.metrics.started();
            let root_partition = job.root_partition;
            let reporter = job.reporter(self);
            match root_partition {
                Some(p) => {
                    outputs[p] = Some(watched(
                        stream,
                        fail_rx.clone(),
                        (reporter, submitted),
                        self.settings.host_link.clone(),
                        cancel.clone(),
                    ))
                }
                None => drain(
                    stream,
                    (reporter, submitted),
                    (fail_tx.clone(), cancel.others.clone()),
                    cancel.stop.subscribe(),
                ),
            }
        }
        Ok(Arc::new(Run {
            outputs: Mutex::new(outputs),
            failure: fail_rx,
        }))
    }
}

/// Runs a job that sends the host nothing to its end, passing on its failure, or counting it
/// off `others` when it ends well; stops it (its stream dropped, so its disk cancels it) when
/// the query's readers stop.
pub(super) fn drain(
    mut stream: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    (reporter, started): (Reporter, Instant),
    (fail, others): (Arc<Failure>, Arc<tokio::sync::watch::Sender<usize>>),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        loop {
            let item = tokio::select! {
                item = stream.next() => item,
                _ = stop.wait_for(|s| *s) => break,
            };
            match item {
                Some(Err(e)) => {
                    fail.send_if_modified(|f| {
                        f.is_none() && {
                            *f = Some(Arc::new(e));
                            true
                        }
                    });
                    break;
                }
                Some(Ok(_)) => {}
                None => {
                    others.send_modify(|n| *n = n.saturating_sub(1));
                    break;
                }
            }
        }
        drop(stream);
        reporter.report(0, 0, started).await;
    });
}

/// One disk's part of a query, being built.
pub(super) struct DraftJob {
    pub(super) job: JobBuilder,
    pub(super) disk: u32,
    /// The top stage's partition this disk runs, if any (its output goes to the host).
    pub(super) root_partition: Option<usize>,
    /// The query stage each of the job's stages belongs to.
    pub(super) stage_of: Vec<usize>,
    /// How much scratch each of the job's stages needs relative to the others (see [`weight`];
    /// 0: it takes none).
    pub(super) weights: Vec<u64>,
}

/// One disk's part of a query: one job.
pub(super) struct DiskJob {
    pub(super) spec: JobSpec,
    pub(super) disk: u32,
    /// The top stage's partition this disk runs, if any (its output goes to the host).
    pub(super) root_partition: Option<usize>,
    /// The query stage each of the job's stages belongs to.
    pub(super) stage_of: Vec<usize>,
}

/// What a query may take of each disk.
pub(super) struct Budget {
    /// The stream buffer size of the query's jobs, KiB.
    pub(super) buffer_kib: u64,
    /// The smallest disk's memory budget, bytes.
    pub(super) memory_bytes: u64,
    pub(super) buffers_per_stream: u32,
    /// The most scratch a stage may take (`--scratch-kib`; 0: no limit of its own).
    pub(super) scratch_kib: u64,
    /// The query's temporary space per disk (`--temp-kib`; 0: by its stages).
    pub(super) temp_kib: u64,
}

impl DraftJob {
    fn new(disk: u32, query: &str, program: &str) -> Self {
        DraftJob {
            job: JobBuilder::new("query")
                .id(format!("{query}-d{disk}"))
                .program(program)
                .scratch_kib(MIN_STAGE_SCRATCH_KIB)
                .buffer_kib(STAGE_BUFFER_KIB),
            disk,
            root_partition: None,
            stage_of: vec![],
            weights: vec![],
        }
    }

    /// Appends a stage of query stage `s` reading `inputs`, of scratch weight `w`; its output
    /// port.
    fn push(&mut self, s: usize, disklet: DiskletSpec, inputs: Vec<Port>, w: u64) -> Port {
        self.stage_of.push(s);
        self.weights.push(w);
        self.job.stage(disklet, inputs)
    }

    /// The finished job, sized to fit the disk in one grant. Its stream buffers (their size
    /// chosen for the whole query by [`fitted_buffer_kib`]), inboxes and output
    /// allowances come first (DiskOS's own count, [`grant_beyond_scratch`]); what is
    /// left of the disk's memory, less a sixteenth, is the stages' scratch, divided by weight
    /// (a hash join's build side, a sort or an aggregation needs room, a stage that only
    /// forwards rows hardly any), never more than `--scratch-kib` per stage. A query whose
    /// streams alone do not fit is refused by the disk, typed. Temporary space is the
    /// query's own request (`--temp-kib`, for the whole query at this disk) or
    /// [`STAGE_TEMP_KIB`] per stage that can spill, at most [`MAX_QUERY_TEMP_KIB`].
    fn finish(self, budget: &Budget) -> Result<DiskJob> {
        let disk = self.disk;
        let invalid = |e| HostError::Invalid(format!("the query's job at disk {disk}: {e}"));
        let job = self.job.buffer_kib(budget.buffer_kib);
        let streams = grant_beyond_scratch(
            job.spec(),
            STAGE_BUFFER_KIB * 1024,
            budget.buffers_per_stream,
        )
        .map_err(invalid)?;
        let left = budget.memory_bytes.saturating_sub(streams);
        let left = left - left / 16;
        let unit = left / self.weights.iter().sum::<u64>().max(1);
        let cap = match budget.scratch_kib {
            0 => u64::MAX,
            kib => kib * 1024,
        };
        let scratch = self
            .weights
            .iter()
            .map(|w| ((unit * w).min(cap) / 1024).max(MIN_STAGE_SCRATCH_KIB))
            .collect();
        let spilling = self.weights.iter().filter(|w| **w > 1).count() as u64;
        let temp_kib = match budget.temp_kib {
            0 => (spilling * STAGE_TEMP_KIB).min(MAX_QUERY_TEMP_KIB),
            kib => kib,
        };
        let spec = job
            .stage_scratch_kib(scratch)
            .temp_kib(temp_kib)
            .build()
            .map_err(invalid)?;
        Ok(DiskJob {
            spec,
            disk,
            root_partition: self.root_partition,
            stage_of: self.stage_of,
        })
    }
}

impl DiskJob {
    fn reporter(&self, exec: &DisksExec) -> Reporter {
        Reporter {
            cluster: exec.cluster.clone(),
            metrics: exec.metrics.clone(),
            disk: self.disk,
            job_id: self.spec.job_id.clone(),
            stage: exec.root,
            describe: "the query's stages (one job per disk)".to_string(),
            spec_bytes: self.spec.to_bytes().len(),
            stage_of: self.stage_of.clone(),
        }
    }
}

/// Scratch weight of a stage of a scan's chain: a partial aggregation or sort holds state
/// (as [`weight`]), a selection none.
pub(super) fn chain_weight(disklet: &DiskletSpec) -> u64 {
    match disklet {
        DiskletSpec::Fragment {
            kind: FragmentKind::Aggregate | FragmentKind::Sort,
            ..
        } => 5,
        DiskletSpec::Fragment {
            kind: FragmentKind::Stage,
            ..
        }
        | DiskletSpec::Merge { .. }
        | DiskletSpec::HashJoin { .. } => 1,
        _ => 0,
    }
}

/// Most temporary disk space one query's job asks of a disk, KiB (a disk grants 4 GiB to its
/// jobs in all).
const MAX_QUERY_TEMP_KIB: u64 = 1 << 20;

/// Temporary disk space of a stage job that sorts, aggregates or joins, KiB, unless the
/// query asks for its own (`--temp-kib`); a disk grants 4 GiB to its jobs in all.
const STAGE_TEMP_KIB: u64 = 256 << 10;

/// Smallest scratch of a stage job, KiB.
const MIN_STAGE_SCRATCH_KIB: u64 = 64;

/// Weight of a stage holding one hash join (see [`weight`]).
pub(super) const JOIN_WEIGHT: u64 = 9;

/// How much scratch a stage needs relative to others: 1, plus 8 per hash join (its build side
/// is held whole), 4 per sort, aggregation or merge join that holds its input or a key's rows.
pub(super) fn weight(plan: &Arc<dyn ExecutionPlan>) -> u64 {
    let mut w = 1;
    let _ = plan.apply(|node| {
        let n: &dyn ExecutionPlan = node.as_ref();
        if n.downcast_ref::<HashJoinExec>().is_some() {
            w += JOIN_WEIGHT - 1;
        } else if n.downcast_ref::<SortExec>().is_some()
            || n.downcast_ref::<AggregateExec>().is_some()
            || n.downcast_ref::<datafusion::physical_plan::joins::SortMergeJoinExec>()
                .is_some()
        {
            w += 4;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    w
}

/// The jobs of one execution that feed other stages, stopped (their streams dropped, so their
/// disks cancel them) when the top stage's streams go away before all of them ended: a failure
/// anywhere, or a reader that stopped early.
pub(super) struct Cancel {
    pub(super) stop: tokio::sync::watch::Sender<bool>,
    pub(super) roots: usize,
    pub(super) completed: std::sync::atomic::AtomicUsize,
    /// The query's jobs that send the host nothing and have not ended yet.
    pub(super) others: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if self.completed.load(std::sync::atomic::Ordering::SeqCst) < self.roots {
            self.stop.send_replace(true);
        }
    }
}

/// Stream buffer of a query's jobs at the least to start fitting from, KiB: they start from
/// the SQL jobs' size (`--buffer-kib`, 1 MiB), at most 1/[`BUFFERS_PER_DISK_MEMORY`] of the
/// smallest disk's memory, and halve it until their streams take at most half of it
/// ([`fitted_buffer_kib`]).
const STAGE_BUFFER_KIB: u64 = 64;

/// A query's buffers at `disks` start from at most this fraction of a disk's memory (1 MiB on
/// 256 MiB disks, 64 KiB on 16 MiB ones): larger buffers also make larger batches, and on a
/// 16 MiB disk a sort-merge join's sorts then no longer fit their share of a stage's scratch.
const BUFFERS_PER_DISK_MEMORY: u64 = 256;

/// What a stage job reports into the query's metrics when it ends.
pub(super) struct Reporter {
    pub(super) cluster: Arc<Cluster>,
    pub(super) metrics: Arc<QueryMetrics>,
    pub(super) disk: u32,
    pub(super) job_id: String,
    pub(super) stage: usize,
    pub(super) describe: String,
    pub(super) spec_bytes: usize,
    /// The query stage of each of the job's stages (their statistics are named after it).
    pub(super) stage_of: Vec<usize>,
}

impl Reporter {
    async fn report(self, rows: u64, bytes: u64, started: Instant) {
        let mut stats = self.cluster.job_stats(self.disk, &self.job_id).await.ok();
        for (st, q) in stats
            .iter_mut()
            .flat_map(|s| s.stages.iter_mut())
            .zip(&self.stage_of)
        {
            st.disklet = format!("{} @ stage {q}", st.disklet);
        }
        let control_bytes =
            super::metrics::control_bytes(self.spec_bytes, &self.job_id, stats.as_ref());
        self.metrics.record(ScanReport {
            control_bytes,
            scan_id: usize::MAX - self.stage,
            table: self.describe,
            stages: vec![],
            disk: self.disk,
            stats,
            rows_received: rows,
            bytes_received: bytes,
            wall_ns: started.elapsed().as_nanos() as u64,
            started_ns: self.metrics.since_origin_ns(started),
            bloom_keys: None,
            bloom_bytes: None,
            bloom_true_matches: None,
            expected: None,
        });
    }
}

/// Reports its job when dropped: at the end of the stream, on an error, or when the reader
/// stops early (a LIMIT above).
pub(super) struct ReportOnDrop {
    pub(super) reporter: Option<Reporter>,
    pub(super) rows: u64,
    pub(super) bytes: u64,
    pub(super) started: Instant,
}

impl Drop for ReportOnDrop {
    fn drop(&mut self) {
        if let Some(r) = self.reporter.take()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let (rows, bytes, started) = (self.rows, self.bytes, self.started);
            handle.spawn(r.report(rows, bytes, started));
        }
    }
}

/// Resolves with the first failure of another job of the query; never, if there is none.
/// The first failure of a query's jobs that send the host nothing.
pub(super) type Failure = tokio::sync::watch::Sender<Option<Arc<HostError>>>;

pub(super) async fn first_failure(
    mut failure: tokio::sync::watch::Receiver<Option<Arc<HostError>>>,
) -> HostError {
    let got = failure
        .wait_for(|f| f.is_some())
        .await
        .ok()
        .and_then(|why| why.clone());
    match got {
        Some(why) => another_job_failed(&why),
        None => std::future::pending().await,
    }
}

/// The error a top stage's stream ends with when another job of the query failed with `e`:
/// the same kind (so failover sees an unreachable disk as one), said to come from there.
pub(super) fn another_job_failed(e: &HostError) -> HostError {
    match e.retyped() {
        HostError::Invalid(why) => {
            HostError::Invalid(format!("another stage of the query failed: {why}"))
        }
        typed => typed,
    }
}

/// Once a top stage's stream ended: waits for the query's other jobs to end too. Their rows
/// reach the top stage through exchanges, and a job that failed may have cut them short:
/// the query answers only when every one of its jobs ended well.
pub(super) async fn others_ended(
    others: &tokio::sync::watch::Sender<usize>,
    failure: &mut std::pin::Pin<Box<impl std::future::Future<Output = HostError>>>,
) -> Option<HostError> {
    let mut left = others.subscribe();
    tokio::select! {
        _ = left.wait_for(|n| *n == 0) => None,
        why = failure => Some(why),
    }
}

/// The top stage's stream at one disk: fails when any other job of the query fails, pays the
/// host link, and reports its job when it ends.
pub(super) fn watched(
    stream: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    failure: tokio::sync::watch::Receiver<Option<Arc<HostError>>>,
    (reporter, started): (Reporter, Instant),
    link: Option<Arc<crate::client::throttle::TokenBucket>>,
    cancel: Arc<Cancel>,
) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
    let guard = ReportOnDrop {
        reporter: Some(reporter),
        rows: 0,
        bytes: 0,
        started,
    };
    let failed = Box::pin(first_failure(failure));
    let state = (stream, failed, guard, link, false, cancel);
    futures::stream::unfold(
        state,
        |(mut stream, mut failed, mut guard, link, done, cancel)| async move {
            if done {
                return None;
            }
            let item = tokio::select! {
                item = stream.next() => item,
                why = &mut failed => Some(Err(why)),
            };
            match item {
                Some(Ok(b)) => {
                    let n = adisk_core::stats::batch_bytes(&b);
                    if let Some(l) = &link {
                        l.acquire(n).await;
                    }
                    guard.rows += b.num_rows() as u64;
                    guard.bytes += n;
                    Some((Ok(b), (stream, failed, guard, link, false, cancel)))
                }
                Some(Err(e)) => Some((Err(e), (stream, failed, guard, link, true, cancel))),
                None => match others_ended(&cancel.others, &mut failed).await {
                    Some(why) => Some((Err(why), (stream, failed, guard, link, true, cancel))),
                    None => {
                        cancel
                            .completed
                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        None
                    }
                },
            }
        },
    )
    .boxed()
}

impl DisplayAs for DisksExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DisksExec: stages=[{}]", self.describe().join(" | "))
    }
}

impl ExecutionPlan for DisksExec {
    fn name(&self) -> &str {
        "DisksExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> datafusion::error::Result<TreeNodeRecursion>,
    ) -> datafusion::error::Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> datafusion::error::Result<SendableRecordBatchStream> {
        let schema: SchemaRef = self.properties.eq_properties.schema().clone();
        let this = self.clone();
        let stream = futures::stream::once(async move {
            let run = this
                .run
                .get_or_init(|| async { this.start().await.map_err(|e| e.to_string()) })
                .await
                .clone();
            let run =
                run.map_err(|e| DataFusionError::External(Box::new(HostError::Invalid(e))))?;
            let taken = run
                .outputs
                .lock()
                .expect("outputs lock")
                .get_mut(partition)
                .and_then(Option::take);
            let _ = &run.failure;
            taken.ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "disks partition {partition} read twice or missing"
                ))
            })
        })
        .map(|r| match r {
            Ok(s) => s
                .map(|b| b.map_err(|e| DataFusionError::External(Box::new(e))))
                .boxed(),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// Estimated bytes the operators of `plan`'s stages at the disks take in from their scans (after
/// each scan's selection, before any join): what the `disks` plan processes where a
/// host-centric plan, its probe sides pruned by Bloom filters, processes what it ships. None
/// where DataFusion cannot estimate a scan.
pub(super) fn plan_work(plan: &Arc<dyn ExecutionPlan>) -> Option<u64> {
    let mut work = Some(0u64);
    let _ = plan.apply(|node| {
        if let Some(d) = node.downcast_ref::<DisksExec>() {
            for s in d.reachable() {
                for input in &d.stages[s].inputs {
                    if let Input::Scan(scan) = input {
                        let scan: Arc<dyn ExecutionPlan> = scan.clone();
                        let bytes = super::sortmerge::estimated_bytes(&scan);
                        work = work.zip(bytes).map(|(w, b)| w.saturating_add(b));
                    }
                }
            }
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    work
}

/// What `plan` is expected to move: the estimated output of every disk scan and `DisksExec`
/// the host reads, and the exchanges between disks. None where an estimate is missing.
pub(super) fn plan_traffic(plan: &Arc<dyn ExecutionPlan>) -> Option<super::cost::Traffic> {
    let mut t = super::cost::Traffic::default();
    let mut known = true;
    let _ = plan.apply(|node| {
        let n: &dyn ExecutionPlan = node.as_ref();
        if let Some(d) = n.downcast_ref::<DisksExec>() {
            t.jobs = t.jobs.saturating_add(d.reachable().len() as u32);
            match d.estimated_traffic() {
                Some((host, between)) => {
                    t.to_host = t.to_host.saturating_add(host);
                    t.disk_to_disk = t.disk_to_disk.saturating_add(between);
                }
                None => known = false,
            }
            return Ok(TreeNodeRecursion::Jump);
        }
        if let Some(scan) = n.downcast_ref::<DiskScanExec>() {
            t.jobs = t.jobs.saturating_add(1);
            let (rows, bytes) = scan.bloom_work();
            t.probe_rows = t.probe_rows.saturating_add(rows as u64);
            t.filter_bytes = t.filter_bytes.saturating_add(bytes);
            match super::sortmerge::estimated_bytes(node) {
                Some(b) => t.to_host = t.to_host.saturating_add(b),
                None => known = false,
            }
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    known.then_some(t)
}

/// A fragment's operators, top first, its input leaves left out.
pub(super) fn operators(plan: &Arc<dyn ExecutionPlan>) -> String {
    let ops: Vec<String> = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(false)
        .to_string()
        .lines()
        .filter(|l| !l.trim_start().starts_with("EmptyExec"))
        .map(|l| l.trim().to_string())
        .collect();
    if ops.is_empty() {
        "pass-through".to_string()
    } else {
        ops.join(" ← ")
    }
}
