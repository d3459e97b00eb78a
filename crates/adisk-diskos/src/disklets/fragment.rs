//! `sql_select` / `sql_aggregate`: relational bundles shipped by the SQL planner.
//!
//! The host cuts a fragment out of a DataFusion physical plan (filters, projections, a
//! partial aggregation) and sends it encoded with `datafusion-proto`; the one leaf is an
//! `EmptyExec` that stands for the stage's input stream. The disk decodes the plan, checks that
//! every operator is one a disk may run, swaps the leaf for a [`FeedExec`] fed buffer by buffer,
//! and drives the plan's stream by polling it: the operators are synchronous, so a poll returns
//! output until the fragment needs the next input buffer.
//!
//! Memory: the fragment's DataFusion memory pool is the stage's scratch grant. A partial
//! aggregation that fills it emits its groups early (DataFusion's early emit), so memory stays
//! within the grant whatever the number of groups. A sort or a final aggregation that fills it
//! spills to the job's temporary area when the job was granted temporary space ([`Spill`]:
//! its own directory, capped at its share of the grant): DataFusion writes sorted runs and
//! merges them back — the disk-side external sort. Without temporary space, it fails typed.
use crate::disklet::{Disklet, Emitter, InputBuffer, NextInput};
use crate::{DiskOsError, Result};
use adisk_core::protocol::FragmentKind;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::execution::disk_manager::{DiskManager, DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool, MemoryReservation};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::filter_pushdown::FilterPushdown;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::joins::{HashJoinExec, SortMergeJoinExec};
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::Stream;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Operators a fragment may contain besides its leaf.
pub const ALLOWED_OPERATORS: [&str; 8] = [
    "FilterExec",
    "ProjectionExec",
    "AggregateExec",
    "SortExec",
    "HashJoinExec",
    "SortMergeJoinExec",
    "LocalLimitExec",
    "GlobalLimitExec",
];

/// A fragment's scratch grant as DataFusion's memory pool: a fair-spill pool (each operator
/// that can spill — a sort, an aggregation — gets an equal share of what the ones that cannot
/// hold leave; with a greedy pool, the first of a sort-merge join's two sorts took the pool and
/// the second failed with nothing of its own to spill), except that asking for nothing more
/// always succeeds. A sort-merge join that spills its buffered rows keeps
/// their key columns in memory and forces them onto the pool, past its limit if need be
/// (DataFusion's own accounting of what it holds); an operator that then re-asserts an
/// unchanged reservation (an aggregation without groups asks for 0 bytes per batch) must not
/// fail the job for memory it does not take. Any request for more bytes is refused as before.
#[derive(Debug)]
struct ScratchPool(FairSpillPool);

impl std::fmt::Display for ScratchPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl MemoryPool for ScratchPool {
    fn name(&self) -> &str {
        "scratch"
    }
    fn register(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.0.register(consumer)
    }
    fn unregister(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.0.unregister(consumer)
    }
    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.0.grow(reservation, additional)
    }
    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.0.shrink(reservation, shrink)
    }
    fn try_grow(
        &self,
        reservation: &MemoryReservation,
        additional: usize,
    ) -> datafusion::error::Result<()> {
        if additional == 0 {
            return Ok(());
        }
        self.0.try_grow(reservation, additional)
    }
    fn reserved(&self) -> usize {
        self.0.reserved()
    }
    fn memory_limit(&self) -> datafusion::execution::memory_pool::MemoryLimit {
        self.0.memory_limit()
    }
}

/// Bytes the operators of `plan` wrote to spill files (their `spilled_bytes` metrics).
fn spilled_by(plan: &Arc<dyn ExecutionPlan>) -> u64 {
    let own = plan.metrics().and_then(|m| m.spilled_bytes()).unwrap_or(0) as u64;
    own + plan.children().iter().map(|c| spilled_by(c)).sum::<u64>()
}

/// [`Fragment::wanted`] before the plan waited for any input.
const NO_INPUT: usize = usize::MAX;

/// Where a job's fragments may spill, and how much: one DataFusion disk manager for all of
/// them, capped at the job's temporary-space grant, so a stage that must spill much can use
/// what the others leave (equal shares failed TPC-H Q9 at SF 1 on 64 MiB disks, one stage
/// past its seventh of the grant).
#[derive(Clone, Debug)]
pub struct Spill {
    /// The job's spill directory in its temporary area (removed with the area).
    pub dir: std::path::PathBuf,
    /// The job's temporary-space grant.
    pub bytes: u64,
    /// The disk manager writing there, shared by the job's fragments.
    pub manager: Arc<DiskManager>,
}

impl Spill {
    /// The spill space of a job: `dir`, at most `bytes`.
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn new(dir: std::path::PathBuf, bytes: u64) -> Result<Self> {
        std::fs::create_dir_all(&dir).map_err(|source| {
            DiskOsError::Storage(adisk_storage::StorageError::Io {
                context: format!("creating {}", dir.display()),
                source,
            })
        })?;
        let manager = DiskManagerBuilder::default()
            .with_mode(DiskManagerMode::Directories(vec![dir.clone()]))
            .with_max_temp_directory_size(bytes)
            .build()
            .map_err(df("creating the job's spill space"))?;
        Ok(Spill {
            dir,
            bytes,
            manager: Arc::new(manager),
        })
    }
}

/// Polls in a row that may return `Pending` while input is queued before the stage thread
/// parks until the fragment wakes it (operators that yield cooperatively return `Pending` once
/// in a while; a sort reading back its spilled runs waits for its reads).
const SPIN_POLLS: u32 = 1024;

/// How long a fragment with input queued may make no progress before it is declared stalled.
const STALL_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The share of a fragment's scratch kept for output it holds back (1/N).
const OUTPUT_RESERVE_FRACTION: u64 = 8;
/// Bounds on the rows of a fragment's output batches.
const MIN_BATCH_ROWS: u64 = 64;
const MAX_BATCH_ROWS: u64 = 8192;

/// Estimated bytes per row of `schema`: fixed widths, 16 for variable-length values.
fn row_width(schema: &SchemaRef) -> u64 {
    schema
        .fields()
        .iter()
        .map(|f| f.data_type().primitive_width().unwrap_or(16) as u64)
        .sum::<u64>()
        .max(1)
}

/// Wakes the stage thread parked in [`Fragment::drive`].
struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

#[derive(Debug, Default)]
struct Feed {
    queue: VecDeque<RecordBatch>,
    closed: bool,
    /// Rows of the largest batch the leaf hands on (0: any): an aggregation streaming sorted
    /// groups holds one input batch's groups at once and cannot flush them early.
    max_rows: usize,
}

/// The leaf of a fragment at the disk: the stage's input stream, fed by [`Fragment::process`].
#[derive(Debug)]
pub struct FeedExec {
    schema: SchemaRef,
    feed: Arc<Mutex<Feed>>,
    /// Which of the fragment's inputs this leaf is, and where it says it waits for input.
    index: usize,
    wanted: Arc<AtomicUsize>,
    properties: Arc<PlanProperties>,
    /// Dynamic filters the plan pushed down to this input (a join's build keys, a top-k's
    /// bound): the scan feeding it applies them while decoding ([`Fragment::scan_filters`]).
    filters: Vec<Arc<dyn PhysicalExpr>>,
}

impl FeedExec {
    /// A leaf whose input arrives sorted on the columns `sorted` ([`crate::order`]).
    fn new(
        schema: SchemaRef,
        feed: Arc<Mutex<Feed>>,
        index: usize,
        wanted: Arc<AtomicUsize>,
        sorted: &[String],
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            crate::order::input_properties(&schema, sorted),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        FeedExec {
            schema,
            feed,
            index,
            wanted,
            properties,
            filters: Vec::new(),
        }
    }
}

/// Whether `expr` holds a dynamic filter (one an operator fills in while it runs).
fn is_dynamic(expr: &Arc<dyn PhysicalExpr>) -> bool {
    use datafusion::common::tree_node::TreeNode;
    expr.exists(|e| Ok(e.downcast_ref::<DynamicFilterPhysicalExpr>().is_some()))
        .unwrap_or(false)
}

impl DisplayAs for FeedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FeedExec")
    }
}

impl ExecutionPlan for FeedExec {
    fn name(&self) -> &str {
        "FeedExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> datafusion::error::Result<
            datafusion::common::tree_node::TreeNodeRecursion,
        >,
    ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion> {
        // The pushed filters are this node's: a join computes its dynamic filter only when
        // its probe side holds it.
        use datafusion::common::tree_node::TreeNodeRecursion;
        for e in &self.filters {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }
    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    /// Keeps the dynamic filters pushed down to this input for the scan feeding it. Every
    /// filter is reported unsupported: the operators above still apply it to every row.
    fn handle_child_pushdown_result(
        &self,
        _phase: FilterPushdownPhase,
        result: ChildPushdownResult,
        _config: &datafusion::config::ConfigOptions,
    ) -> datafusion::error::Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let filters: Vec<_> = result
            .parent_filters
            .iter()
            .map(|f| f.filter.clone())
            .collect();
        let dynamic: Vec<_> = filters.iter().filter(|f| is_dynamic(f)).cloned().collect();
        let mut propagation = FilterPushdownPropagation::with_parent_pushdown_result(vec![
                PushedDown::No;
                filters.len()
            ]);
        if !dynamic.is_empty() {
            let node = FeedExec {
                schema: self.schema.clone(),
                feed: self.feed.clone(),
                index: self.index,
                wanted: self.wanted.clone(),
                properties: self.properties.clone(),
                filters: self.filters.iter().cloned().chain(dynamic).collect(),
            };
            propagation = propagation.with_updated_node(Arc::new(node) as Arc<dyn ExecutionPlan>);
        }
        Ok(propagation)
    }
    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> datafusion::error::Result<SendableRecordBatchStream> {
        let feed = self.feed.clone();
        let schema = self.schema.clone();
        let (index, wanted) = (self.index, self.wanted.clone());
        let stream = futures::stream::poll_fn(move |_cx| {
            let mut f = feed.lock().expect("feed lock");
            match f.queue.pop_front() {
                Some(b) if schema.fields().is_empty() => {
                    let opts =
                        arrow::array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
                    Poll::Ready(Some(
                        RecordBatch::try_new_with_options(schema.clone(), vec![], &opts)
                            .map_err(Into::into),
                    ))
                }
                Some(b) => Poll::Ready(Some(Ok(b))),
                None if f.closed => Poll::Ready(None),
                None => {
                    wanted.store(index, Ordering::Relaxed);
                    Poll::Pending
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}

/// The disklet running a fragment.
pub struct Fragment {
    kind: FragmentKind,
    schema: SchemaRef,
    /// One feed per input, in the order of the plan's leaves (depth first, left to right).
    feeds: Vec<Arc<Mutex<Feed>>>,
    /// The input the plan last waited for ([`NO_INPUT`]: none yet).
    wanted: Arc<AtomicUsize>,
    stream: SendableRecordBatchStream,
    pool: Arc<dyn MemoryPool>,
    /// The plan (its operators' spill metrics).
    plan: Arc<dyn ExecutionPlan>,
    /// Per input, the dynamic filters the plan pushed down to it.
    scan_filters: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    /// Output polled from the plan that did not fit the emitter yet, and its bytes.
    pending: VecDeque<RecordBatch>,
    pending_bytes: u64,
    /// Bytes of temporary space granted for spilling.
    spill_granted: u64,
    exhausted: bool,
    /// Batches emitted so far.
    emitted: u64,
    /// Calls that emitted before the input ended (aggregations flushing early).
    flushes: u64,
    /// The output's columns in ascending order ([`crate::order`]).
    sorted: Vec<String>,
    /// Sorts left out of the plan: their input arrives in their order.
    sorts_dropped: u64,
}

fn df(context: &str) -> impl FnOnce(datafusion::error::DataFusionError) -> DiskOsError + '_ {
    move |source| DiskOsError::DataFusion {
        context: context.to_string(),
        source,
    }
}

fn rewire(
    plan: Arc<dyn ExecutionPlan>,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    use datafusion::physical_plan::execution_plan::{
        ChildrenPropertiesMode, ReplaceChildrenOptions,
    };
    plan.replace_children(
        children,
        ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
    )
}

/// The plan's input leaves: one per input stream of the stage.
struct Leaves<'a> {
    inputs: &'a [SchemaRef],
    feeds: &'a [Arc<Mutex<Feed>>],
    wanted: &'a Arc<AtomicUsize>,
    /// Per input, the columns it arrives sorted on.
    sorted: &'a [Vec<String>],
    found: usize,
    /// Sorts dropped because their input arrives in their order.
    sorts_dropped: usize,
}

/// Swaps each `EmptyExec` leaf for the next input's feed, refusing any operator a disk may not
/// run, and drops each sort whose input arrives in its order already (the operators above are
/// rebuilt on their new inputs: an aggregation on a sorted key then streams).
fn attach(plan: Arc<dyn ExecutionPlan>, leaves: &mut Leaves<'_>) -> Result<Arc<dyn ExecutionPlan>> {
    let any: &dyn ExecutionPlan = plan.as_ref();
    if any.downcast_ref::<EmptyExec>().is_some() {
        let want = plan.schema();
        let i = leaves.found;
        let Some(input) = leaves.inputs.get(i) else {
            return Err(DiskOsError::InvalidJob(format!(
                "the fragment has more input leaves than the stage's {} inputs",
                leaves.inputs.len()
            )));
        };
        // An empty leaf schema (count(*) and the like) takes any input: only row counts matter.
        let same = want.fields().is_empty()
            || want.fields().len() == input.fields().len()
                && want
                    .fields()
                    .iter()
                    .zip(input.fields())
                    .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if !same {
            return Err(DiskOsError::InvalidJob(format!(
                "fragment input {i}: schema {want:?} does not match the stream's {input:?}"
            )));
        }
        leaves.found += 1;
        return Ok(Arc::new(FeedExec::new(
            want,
            leaves.feeds[i].clone(),
            i,
            leaves.wanted.clone(),
            leaves.sorted.get(i).map_or(&[][..], |s| s.as_slice()),
        )));
    }
    // One input partition per leaf, so a sort that keeps partitions and a plain one are the
    // same, and a join's build side is the whole of its input.
    let allowed = any.downcast_ref::<FilterExec>().is_some()
        || any.downcast_ref::<ProjectionExec>().is_some()
        || any.downcast_ref::<AggregateExec>().is_some()
        || any.downcast_ref::<SortExec>().is_some()
        || any.downcast_ref::<HashJoinExec>().is_some()
        || any.downcast_ref::<SortMergeJoinExec>().is_some()
        || any.downcast_ref::<LocalLimitExec>().is_some()
        || any.downcast_ref::<GlobalLimitExec>().is_some();
    if !allowed {
        return Err(DiskOsError::InvalidJob(format!(
            "operator `{}` may not run at a disk (allowed: {})",
            plan.name(),
            ALLOWED_OPERATORS.join(", ")
        )));
    }
    let children = plan
        .children()
        .into_iter()
        .map(|c| attach(c.clone(), leaves))
        .collect::<Result<Vec<_>>>()?;
    if let (Some(sort), [input]) = (any.downcast_ref::<SortExec>(), children.as_slice())
        && sort.fetch().is_none()
        && input
            .equivalence_properties()
            .ordering_satisfy(sort.expr().clone())
            .unwrap_or(false)
    {
        leaves.sorts_dropped += 1;
        return Ok(input.clone());
    }
    rewire(plan, children).map_err(df("rewiring a fragment"))
}

/// `plan` with its `EmptyExec` leaves swapped for the inputs' feeds ([`attach`]), and the sorts
/// it dropped. An aggregation whose group keys the declared orders leave only partly sorted
/// cannot flush its groups early and may hold every group of one sorted value: such a plan is
/// attached with no order declared, as before orders were known. The feeds of aggregations the
/// orders make fully sorted hand on batches of at most `batch_rows` rows (their groups are
/// held one input batch at a time).
fn attach_leaves(
    plan: Arc<dyn ExecutionPlan>,
    inputs: &[SchemaRef],
    (feeds, wanted): (&[Arc<Mutex<Feed>>], &Arc<AtomicUsize>),
    sorted: &[Vec<String>],
    batch_rows: usize,
) -> Result<(Arc<dyn ExecutionPlan>, u64)> {
    use datafusion::physical_plan::InputOrderMode;
    let run = |sorted: &[Vec<String>]| -> Result<(Arc<dyn ExecutionPlan>, u64)> {
        let mut leaves = Leaves {
            inputs,
            feeds,
            wanted,
            sorted,
            found: 0,
            sorts_dropped: 0,
        };
        let attached = attach(plan.clone(), &mut leaves)?;
        if leaves.found != inputs.len() {
            return Err(DiskOsError::InvalidJob(format!(
                "the fragment has {} input leaves for the stage's {} inputs",
                leaves.found,
                inputs.len()
            )));
        }
        Ok((attached, leaves.sorts_dropped as u64))
    };
    let plain = run(&[])?;
    if sorted.iter().all(|s| s.is_empty()) {
        return Ok(plain);
    }
    let (attached, dropped) = run(sorted)?;
    let (before, after) = (aggregate_modes(&plain.0), aggregate_modes(&attached));
    let partly = |m: &InputOrderMode| matches!(m, InputOrderMode::PartiallySorted(_));
    let newly_partly = before.len() != after.len()
        || before
            .iter()
            .zip(&after)
            .any(|((b, _), (a, _))| partly(a) && !partly(b));
    if newly_partly {
        return Ok(plain);
    }
    for ((b, _), (a, leaf)) in before.iter().zip(&after) {
        if *a == InputOrderMode::Sorted
            && *b != InputOrderMode::Sorted
            && let Some(feed) = leaf.and_then(|i| feeds.get(i))
        {
            // A poisoned lock still holds a consistent queue: take it rather than panic.
            feed.lock().unwrap_or_else(|e| e.into_inner()).max_rows = batch_rows.max(1);
        }
    }
    Ok((attached, dropped))
}

/// Each aggregation of `plan`: how it uses its input's order, and the input leaf it reads
/// directly (through filters and projections only), if any.
fn aggregate_modes(
    plan: &Arc<dyn ExecutionPlan>,
) -> Vec<(datafusion::physical_plan::InputOrderMode, Option<usize>)> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut out = Vec::new();
    let _ = plan.apply(|p| {
        if let Some(a) = p.downcast_ref::<AggregateExec>() {
            let mut below = a.input().clone();
            while below.downcast_ref::<FilterExec>().is_some()
                || below.downcast_ref::<ProjectionExec>().is_some()
            {
                let Some(child) = below.children().first().map(|c| (*c).clone()) else {
                    break;
                };
                below = child;
            }
            let leaf = below.downcast_ref::<FeedExec>().map(|f| f.index);
            out.push((a.input_order_mode().clone(), leaf));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

/// Per input, the filters pushed down to its leaf.
fn leaf_filters(plan: &Arc<dyn ExecutionPlan>, inputs: usize) -> Vec<Vec<Arc<dyn PhysicalExpr>>> {
    let mut filters = vec![Vec::new(); inputs];
    let mut nodes = vec![plan.clone()];
    while let Some(p) = nodes.pop() {
        if let Some(feed) = p.downcast_ref::<FeedExec>() {
            if let Some(f) = filters.get_mut(feed.index) {
                f.extend(feed.filters.iter().cloned());
            }
        }
        nodes.extend(p.children().into_iter().cloned());
    }
    filters
}

impl Fragment {
    /// Decodes and checks the fragment; its memory pool is the scratch grant, its spill space
    /// `spill` (none: spilling disabled).
    pub fn new(
        kind: FragmentKind,
        plan: &[u8],
        inputs: &[SchemaRef],
        sorted: &[Vec<String>],
        scratch_bytes: u64,
        spill: Option<&Spill>,
    ) -> Result<Self> {
        let Some(_) = inputs.first() else {
            return Err(DiskOsError::InvalidJob(
                "a plan fragment needs an input".into(),
            ));
        };
        // The plan's pool is the scratch grant less a reserve for one output batch held back
        // (`pending`); output batches are sized to fit half of it.
        let reserve = scratch_bytes / OUTPUT_RESERVE_FRACTION;
        let pool_bytes = scratch_bytes - reserve;
        let pool: Arc<dyn MemoryPool> =
            Arc::new(ScratchPool(FairSpillPool::new(pool_bytes as usize)));
        let mut runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(pool.clone())
            .with_disk_manager_builder(
                DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
            )
            .build()
            .map_err(df("building the fragment runtime"))?;
        if let Some(sp) = spill {
            runtime.disk_manager = sp.manager.clone();
        }
        let runtime = Arc::new(runtime);
        // Rows joined from several inputs can be as wide as all of them together (a sort
        // above a stage's joins holds such rows): size batches for that width.
        let width = inputs.iter().map(row_width).sum::<u64>();
        let batch_rows = (reserve / 2 / width).clamp(MIN_BATCH_ROWS, MAX_BATCH_ROWS) as usize;
        let config = SessionConfig::new().with_batch_size(batch_rows);
        // The sorts' reserve for merging is set once the plan is known (`share_sort_reserve`).
        let task = SessionContext::new_with_config_rt(config, runtime).task_ctx();
        let plan = crate::expr::decode_plan_fragment(plan, &task)?;
        let plan = crate::narrow::narrow_plan(plan).map_err(df("narrowing decimal arithmetic"))?;
        let plan = crate::like::like_plan(plan).map_err(df("planning LIKE patterns"))?;
        let root_fits = match kind {
            FragmentKind::Select => true,
            FragmentKind::Aggregate => plan.downcast_ref::<AggregateExec>().is_some(),
            FragmentKind::Sort => plan.downcast_ref::<SortExec>().is_some(),
            FragmentKind::Stage => true,
        };
        if !root_fits {
            return Err(DiskOsError::InvalidJob(format!(
                "a `{}` fragment must end in its operator, not `{}`",
                kind.disklet_name(),
                plan.name()
            )));
        }
        let feeds: Vec<_> = inputs
            .iter()
            .map(|_| Arc::new(Mutex::new(Feed::default())))
            .collect();
        let wanted = Arc::new(AtomicUsize::new(NO_INPUT));
        let (plan, sorts_dropped) =
            attach_leaves(plan, inputs, (&feeds, &wanted), sorted, batch_rows)?;
        // Sorts that may spill sort plain strings (see `view_sort`).
        let plan = match spill {
            Some(_) => super::view_sort::plain_string_sorts(plan)
                .map_err(df("casting a spilling sort's string views"))?,
            None => plan,
        };
        let task = share_sort_reserve(&plan, &task, pool_bytes);
        // Joins and top-k sorts push their dynamic filters down to the input leaves.
        let plan = FilterPushdown::new_post_optimization()
            .optimize(plan, task.session_config().options())
            .map_err(df("pushing dynamic filters down"))?;
        let scan_filters = leaf_filters(&plan, inputs.len());
        let schema = plan.schema();
        let sorted = crate::order::sorted_columns(&plan);
        let stream = plan
            .execute(0, task)
            .map_err(df("starting a plan fragment"))?;
        Ok(Fragment {
            kind,
            schema,
            feeds,
            wanted,
            stream,
            pool,
            plan,
            scan_filters,
            pending: VecDeque::new(),
            pending_bytes: 0,
            spill_granted: spill.map_or(0, |sp| sp.bytes),
            exhausted: false,
            emitted: 0,
            flushes: 0,
            sorted,
            sorts_dropped,
        })
    }

    /// The job's error for a failure of the plan: spilling past the temporary-space grant is
    /// [`DiskOsError::TempSpaceExceeded`].
    fn failed(&self, source: datafusion::error::DataFusionError) -> DiskOsError {
        let text = source.to_string();
        if text.contains("spilling process has exceeded the allowable limit") {
            return DiskOsError::TempSpaceExceeded {
                granted_bytes: self.spill_granted,
                detail: format!("{} spilling sorted runs", self.name()),
            };
        }
        DiskOsError::DataFusion {
            context: format!("running {}", self.name()),
            source,
        }
    }

    /// Polls the fragment until it needs more input, ends, or fills the emitter (the rest of
    /// its output then waits in `pending` for [`Disklet::more_output`]).
    fn drive(&mut self, out: &mut Emitter) -> Result<()> {
        let waker = std::task::Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let (mut spins, mut since) = (0u32, std::time::Instant::now());
        loop {
            self.flush_pending(out);
            if !self.pending.is_empty() || self.exhausted {
                return Ok(());
            }
            let polled = Stream::poll_next(self.stream.as_mut(), &mut cx);
            match polled {
                Poll::Ready(Some(Ok(b))) => {
                    self.pending_bytes += adisk_core::stats::batch_bytes(&b);
                    self.pending.push_back(b);
                    (spins, since) = (0, std::time::Instant::now());
                }
                Poll::Ready(Some(Err(source))) => return Err(self.failed(source)),
                Poll::Ready(None) => self.exhausted = true,
                Poll::Pending => {
                    if self.needs_input() {
                        return Ok(());
                    }
                    spins += 1;
                    if spins > SPIN_POLLS {
                        if since.elapsed() > STALL_WAIT {
                            return Err(DiskOsError::InvalidJob(format!(
                                "{} made no progress for {} s with input queued",
                                self.name(),
                                STALL_WAIT.as_secs()
                            )));
                        }
                        std::thread::park_timeout(std::time::Duration::from_millis(5));
                    }
                }
            }
        }
    }

    /// Whether the plan waits for an input that has nothing queued and has not ended.
    fn needs_input(&self) -> bool {
        let w = self.wanted.load(Ordering::Relaxed);
        let waiting_on = |f: &Arc<Mutex<Feed>>| {
            let f = f.lock().expect("feed lock");
            f.queue.is_empty() && !f.closed
        };
        match self.feeds.get(w) {
            Some(f) => waiting_on(f),
            // Not known yet (nothing polled an input): wait if every input is empty and open.
            None => self.feeds.iter().all(waiting_on),
        }
    }

    fn all_closed(&self) -> bool {
        self.feeds
            .iter()
            .all(|f| f.lock().expect("feed lock").closed)
    }

    /// Emits held-back output while the emitter has room, cutting a batch that does not fit.
    fn flush_pending(&mut self, out: &mut Emitter) {
        while let Some(b) = self.pending.pop_front() {
            let (bytes, room) = (adisk_core::stats::batch_bytes(&b), out.room());
            let rows = if bytes <= room {
                b.num_rows()
            } else {
                (b.num_rows() as u128 * room as u128 / bytes.max(1) as u128) as usize
            };
            if rows == 0 {
                self.pending.push_front(b);
                return;
            }
            let (now, later) = (b.slice(0, rows), b.slice(rows, b.num_rows() - rows));
            self.pending_bytes =
                self.pending_bytes.saturating_sub(bytes) + adisk_core::stats::batch_bytes(&later);
            self.emitted += 1;
            out.emit(0, now);
            if later.num_rows() > 0 {
                self.pending.push_front(later);
                return;
            }
        }
    }
}

impl Disklet for Fragment {
    fn name(&self) -> &'static str {
        self.kind.disklet_name()
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let feed = self.feeds.get(input.input).ok_or_else(|| {
            DiskOsError::InvalidJob(format!(
                "input {} of a fragment with {}",
                input.input,
                self.feeds.len()
            ))
        })?;
        // DataFusion's operators reserve what a batch holds: a batch decoded from IPC (its
        // columns share one message buffer) is copied apart first.
        let batch = crate::compact::compact(input.batch.clone());
        {
            let mut f = feed.lock().unwrap_or_else(|e| e.into_inner());
            match f.max_rows {
                n if n > 0 && batch.num_rows() > n => {
                    let mut at = 0;
                    while at < batch.num_rows() {
                        let len = n.min(batch.num_rows() - at);
                        f.queue.push_back(batch.slice(at, len));
                        at += len;
                    }
                }
                _ => f.queue.push_back(batch),
            }
        }
        let before = self.emitted;
        self.drive(out)?;
        // An aggregation that emits before its input ended has flushed groups early.
        if self.kind == FragmentKind::Aggregate && self.emitted > before {
            self.flushes += 1;
        }
        Ok(())
    }
    fn flushes(&self) -> u64 {
        self.flushes
    }
    fn sorted_output(&self, _port: usize) -> Vec<String> {
        self.sorted.clone()
    }
    fn sorts_dropped(&self) -> u64 {
        self.sorts_dropped
    }
    fn spilled_bytes(&self) -> u64 {
        spilled_by(&self.plan)
    }
    fn scan_filters(&self, input: usize) -> Vec<Arc<dyn PhysicalExpr>> {
        self.scan_filters.get(input).cloned().unwrap_or_default()
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        for f in &self.feeds {
            f.lock().expect("feed lock").closed = true;
        }
        self.drive(out)?;
        if !self.exhausted && self.pending.is_empty() {
            return Err(DiskOsError::InvalidJob(format!(
                "{} did not end with its input",
                self.name()
            )));
        }
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.pool.reserved() as u64 + self.pending_bytes
    }
    fn next_input(&self) -> NextInput {
        match self.wanted.load(Ordering::Relaxed) {
            w if w < self.feeds.len() && self.feeds.len() > 1 => NextInput::Input(w),
            _ => NextInput::Any,
        }
    }
    fn input_ended(&mut self, input: usize, out: &mut Emitter) -> Result<()> {
        if let Some(f) = self.feeds.get(input) {
            f.lock().expect("feed lock").closed = true;
        }
        self.drive(out)
    }
    fn has_more_output(&self) -> bool {
        !self.pending.is_empty() || (self.all_closed() && !self.exhausted)
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.drive(out)
    }
}
/// `task` with the fragment's sorts sharing a quarter of the pool (`pool_bytes`) as their
/// reserve for merging spilled runs, and sorting in place up to the same. DataFusion's
/// default, 10 MiB per sort, does not fit a disk's scratch; a quarter each did not fit a stage
/// with a sort-merge join's two sorts and a third: TPC-H Q18 at SF 1 with `--spill-joins` failed
/// with "Not enough memory to continue external sort".
fn share_sort_reserve(
    plan: &Arc<dyn ExecutionPlan>,
    task: &TaskContext,
    pool_bytes: u64,
) -> Arc<TaskContext> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut sorts = 0u64;
    let _ = plan.apply(|p| {
        if p.downcast_ref::<SortExec>()
            .is_some_and(|s| s.fetch().is_none())
        {
            sorts += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    let reserve = (pool_bytes / 4 / sorts.max(1)) as usize;
    let mut config = task.session_config().clone();
    config.options_mut().execution.sort_spill_reservation_bytes = reserve;
    config.options_mut().execution.sort_in_place_threshold_bytes = reserve;
    SessionContext::new_with_config_rt(config, task.runtime_env()).task_ctx()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_plan::expressions::col;

    #[test]
    fn the_sorts_of_a_fragment_share_a_quarter_of_its_pool() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let leaf: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema.clone()));
        let order = LexOrdering::new(vec![PhysicalSortExpr::new_default(
            col("a", &schema).unwrap(),
        )])
        .unwrap();
        let sort = |input| Arc::new(SortExec::new(order.clone(), input)) as Arc<dyn ExecutionPlan>;
        let task = SessionContext::new().task_ctx();
        let reserve = |plan: &Arc<dyn ExecutionPlan>| {
            let t = share_sort_reserve(plan, &task, 64 << 20);
            let e = &t.session_config().options().execution;
            assert_eq!(
                e.sort_in_place_threshold_bytes,
                e.sort_spill_reservation_bytes
            );
            e.sort_spill_reservation_bytes
        };
        assert_eq!(reserve(&sort(leaf.clone())), 16 << 20);
        assert_eq!(reserve(&sort(sort(leaf.clone()))), 8 << 20);
        // A top-k sort keeps its k rows and never spills: it takes no share.
        let top = Arc::new(SortExec::new(order.clone(), sort(leaf.clone())).with_fetch(Some(10)));
        assert_eq!(reserve(&(top as Arc<dyn ExecutionPlan>)), 16 << 20);
        assert_eq!(reserve(&leaf), 16 << 20);
    }

    fn count_sorts(plan: &Arc<dyn ExecutionPlan>) -> usize {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        let mut n = 0;
        let _ = plan.apply(|p| {
            n += usize::from(p.downcast_ref::<SortExec>().is_some());
            Ok(TreeNodeRecursion::Continue)
        });
        n
    }

    #[test]
    fn a_fragment_drops_the_sorts_its_sorted_input_makes_needless_and_says_what_stays_sorted() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        let leaf: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema.clone()));
        let on = |name: &str| {
            LexOrdering::new(vec![PhysicalSortExpr::new_default(
                col(name, &schema).unwrap(),
            )])
            .unwrap()
        };
        let sort_a = Arc::new(SortExec::new(on("a"), leaf.clone()));
        let sort_b = Arc::new(SortExec::new(on("b"), leaf.clone()));
        let build = |plan: Arc<dyn ExecutionPlan>, sorted: Vec<String>| {
            let bytes = datafusion_proto::bytes::physical_plan_to_bytes(plan).unwrap();
            Fragment::new(
                FragmentKind::Sort,
                &bytes,
                std::slice::from_ref(&(schema.clone() as SchemaRef)),
                &[sorted],
                64 << 20,
                None,
            )
            .unwrap()
        };
        // Sorted on `a`: the sort on `a` goes, and `a` is still sorted at the output.
        let f = build(sort_a.clone(), vec!["a".into()]);
        assert_eq!(count_sorts(&f.plan), 0);
        assert_eq!(f.sorted_output(0), vec!["a".to_string()]);
        // A sort on another column, or an input not known sorted, stays.
        let f = build(sort_b, vec!["a".into()]);
        assert_eq!(count_sorts(&f.plan), 1);
        assert_eq!(f.sorted_output(0), vec!["b".to_string()]);
        let f = build(sort_a, vec![]);
        assert_eq!(count_sorts(&f.plan), 1);
    }

    /// A partial aggregation grouping on `keys` over one leaf, as a fragment whose input is
    /// sorted on `sorted`: its aggregations' modes and the leaf's largest batch.
    fn aggregate_over_sorted(
        keys: &[&str],
        sorted: &[&str],
    ) -> (Vec<datafusion::physical_plan::InputOrderMode>, usize) {
        use datafusion::functions_aggregate::count::count_udaf;
        use datafusion::physical_expr::aggregate::AggregateExprBuilder;
        use datafusion::physical_plan::aggregates::{AggregateMode, PhysicalGroupBy};
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        let leaf: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema.clone()));
        let group = keys
            .iter()
            .map(|k| (col(k, &schema).unwrap(), k.to_string()))
            .collect();
        let count = AggregateExprBuilder::new(count_udaf(), vec![col("b", &schema).unwrap()])
            .schema(schema.clone())
            .alias("n")
            .build()
            .unwrap();
        let agg = AggregateExec::try_new(
            AggregateMode::Partial,
            PhysicalGroupBy::new_single(group),
            vec![Arc::new(count)],
            vec![None],
            leaf,
            schema.clone(),
        )
        .unwrap();
        let bytes = datafusion_proto::bytes::physical_plan_to_bytes(Arc::new(agg)).unwrap();
        let f = Fragment::new(
            FragmentKind::Aggregate,
            &bytes,
            std::slice::from_ref(&(schema as SchemaRef)),
            &[sorted.iter().map(|s| s.to_string()).collect()],
            1 << 20,
            None,
        )
        .unwrap();
        let modes = aggregate_modes(&f.plan)
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        let max_rows = f.feeds[0].lock().unwrap().max_rows;
        (modes, max_rows)
    }

    #[test]
    fn an_aggregation_streams_sorted_groups_in_small_batches_and_never_becomes_partly_sorted() {
        use datafusion::physical_plan::InputOrderMode;
        // Grouping on the sorted column: groups stream, a batch's worth at a time.
        let (modes, max_rows) = aggregate_over_sorted(&["a"], &["a"]);
        assert_eq!(modes, vec![InputOrderMode::Sorted]);
        assert!(
            max_rows > 0 && max_rows <= MAX_BATCH_ROWS as usize,
            "{max_rows}"
        );
        // Partly sorted keys could hold every group of one sorted value with no early flush:
        // the aggregation stays a hash aggregation.
        let (modes, max_rows) = aggregate_over_sorted(&["b", "a"], &["a"]);
        assert_eq!(modes, vec![InputOrderMode::Linear]);
        assert_eq!(max_rows, 0);
        let (modes, _) = aggregate_over_sorted(&["a"], &[]);
        assert_eq!(modes, vec![InputOrderMode::Linear]);
    }
}
