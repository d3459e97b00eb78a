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
//! within the grant whatever the number of groups; spilling to files is disabled.
use crate::disklet::{Disklet, Emitter, InputBuffer};
use crate::{DiskOsError, Result};
use adisk_core::protocol::FragmentKind;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::Stream;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Operators a fragment may contain besides its leaf.
pub const ALLOWED_OPERATORS: [&str; 3] = ["FilterExec", "ProjectionExec", "AggregateExec (partial)"];

/// Polls in a row that may return `Pending` while input is queued before the fragment is
/// declared stalled (operators that yield cooperatively return `Pending` once in a while).
const STALL_POLLS: u32 = 1024;

#[derive(Debug, Default)]
struct Feed {
    queue: VecDeque<RecordBatch>,
    closed: bool,
}

/// The leaf of a fragment at the disk: the stage's input stream, fed by [`Fragment::process`].
#[derive(Debug)]
pub struct FeedExec {
    schema: SchemaRef,
    feed: Arc<Mutex<Feed>>,
    properties: Arc<PlanProperties>,
}

impl FeedExec {
    fn new(schema: SchemaRef, feed: Arc<Mutex<Feed>>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        FeedExec { schema, feed, properties }
    }
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
        _f: &mut dyn FnMut(&Arc<dyn datafusion::physical_plan::PhysicalExpr>) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }
    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn execute(&self, _partition: usize, _context: Arc<TaskContext>) -> datafusion::error::Result<SendableRecordBatchStream> {
        let feed = self.feed.clone();
        let schema = self.schema.clone();
        let stream = futures::stream::poll_fn(move |_cx| {
            let mut f = feed.lock().expect("feed lock");
            match f.queue.pop_front() {
                Some(b) if schema.fields().is_empty() => {
                    let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
                    Poll::Ready(Some(RecordBatch::try_new_with_options(schema.clone(), vec![], &opts).map_err(Into::into)))
                }
                Some(b) => Poll::Ready(Some(Ok(b))),
                None if f.closed => Poll::Ready(None),
                None => Poll::Pending,
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream)))
    }
}

/// The disklet running a fragment.
pub struct Fragment {
    kind: FragmentKind,
    schema: SchemaRef,
    feed: Arc<Mutex<Feed>>,
    stream: SendableRecordBatchStream,
    pool: Arc<dyn MemoryPool>,
    exhausted: bool,
}

fn df(context: &str) -> impl FnOnce(datafusion::error::DataFusionError) -> DiskOsError + '_ {
    move |source| DiskOsError::DataFusion { context: context.to_string(), source }
}

fn rewire(plan: Arc<dyn ExecutionPlan>, children: Vec<Arc<dyn ExecutionPlan>>) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
    plan.replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))
}

/// Swaps the `EmptyExec` leaf for `feed`, refusing any operator a disk may not run.
fn attach(plan: Arc<dyn ExecutionPlan>, input: &SchemaRef, feed: &Arc<Mutex<Feed>>, leaves: &mut u32) -> Result<Arc<dyn ExecutionPlan>> {
    let any: &dyn ExecutionPlan = plan.as_ref();
    if any.downcast_ref::<EmptyExec>().is_some() {
        let want = plan.schema();
        // An empty leaf schema (count(*) and the like) takes any input: only row counts matter.
        let same = want.fields().is_empty()
            || want.fields().len() == input.fields().len()
            && want.fields().iter().zip(input.fields()).all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if !same {
            return Err(DiskOsError::InvalidJob(format!("fragment input schema {want:?} does not match the stream's {input:?}")));
        }
        *leaves += 1;
        return Ok(Arc::new(FeedExec::new(want, feed.clone())));
    }
    let allowed = any.downcast_ref::<FilterExec>().is_some()
        || any.downcast_ref::<ProjectionExec>().is_some()
        || any.downcast_ref::<AggregateExec>().is_some_and(|a| *a.mode() == AggregateMode::Partial);
    if !allowed {
        return Err(DiskOsError::InvalidJob(format!(
            "operator `{}` may not run at a disk (allowed: {})",
            plan.name(),
            ALLOWED_OPERATORS.join(", ")
        )));
    }
    let children = plan.children().into_iter().map(|c| attach(c.clone(), input, feed, leaves)).collect::<Result<Vec<_>>>()?;
    rewire(plan, children).map_err(df("rewiring a fragment"))
}

impl Fragment {
    /// Decodes and checks the fragment; its memory pool is the scratch grant.
    pub fn new(kind: FragmentKind, plan: &[u8], input: &SchemaRef, scratch_bytes: u64) -> Result<Self> {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(scratch_bytes as usize));
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(pool.clone())
            .with_disk_manager_builder(DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled))
            .build_arc()
            .map_err(df("building the fragment runtime"))?;
        let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
        let task = ctx.task_ctx();
        let plan = datafusion_proto::bytes::physical_plan_from_bytes(plan, &task).map_err(df("decoding a plan fragment"))?;
        if kind == FragmentKind::Aggregate && plan.downcast_ref::<AggregateExec>().is_none() {
            return Err(DiskOsError::InvalidJob("an aggregate fragment must end in a partial AggregateExec".into()));
        }
        let feed = Arc::new(Mutex::new(Feed::default()));
        let mut leaves = 0;
        let plan = attach(plan, input, &feed, &mut leaves)?;
        if leaves != 1 {
            return Err(DiskOsError::InvalidJob(format!("a fragment needs exactly one input leaf, found {leaves}")));
        }
        let schema = plan.schema();
        let stream = plan.execute(0, task).map_err(df("starting a plan fragment"))?;
        Ok(Fragment { kind, schema, feed, stream, pool, exhausted: false })
    }

    /// Polls the fragment until it needs more input (or ends), emitting what it produces.
    fn drive(&mut self, out: &mut Emitter) -> Result<()> {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut stalls = 0;
        while !self.exhausted {
            match Stream::poll_next(self.stream.as_mut(), &mut cx) {
                Poll::Ready(Some(Ok(b))) => out.emit(0, b),
                Poll::Ready(Some(Err(source))) => return Err(DiskOsError::DataFusion { context: format!("running {}", self.name()), source }),
                Poll::Ready(None) => self.exhausted = true,
                Poll::Pending => {
                    let f = self.feed.lock().expect("feed lock");
                    if f.queue.is_empty() && !f.closed {
                        return Ok(());
                    }
                    drop(f);
                    stalls += 1;
                    if stalls > STALL_POLLS {
                        return Err(DiskOsError::InvalidJob(format!("{} stalled with input queued", self.name())));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Disklet for Fragment {
    fn name(&self) -> &'static str {
        match self.kind {
            FragmentKind::Select => "sql_select",
            FragmentKind::Aggregate => "sql_aggregate",
        }
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        self.feed.lock().expect("feed lock").queue.push_back(input.batch.clone());
        self.drive(out)
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.feed.lock().expect("feed lock").closed = true;
        self.drive(out)?;
        if !self.exhausted {
            return Err(DiskOsError::InvalidJob(format!("{} did not end with its input", self.name())));
        }
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.pool.reserved() as u64
    }
}
