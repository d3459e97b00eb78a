//! Physical optimizer rule that moves work into the disk scans.
//!
//! * **Partial aggregation** (`aggregate` and up): an `AggregateExec` in `Partial` mode whose
//!   input is, through filters, projections and batch/partition plumbing, a [`DiskScanExec`]
//!   becomes part of the scan: the chain is cut out with an `EmptyExec` leaf standing for the
//!   scan's stream, encoded with `datafusion-proto` and run at every disk as a `sql_aggregate`
//!   stage. The host's `Final` aggregation combines the partial states as before.
//! * **Bloom semi-join** (`semijoin` and up): for a hash join that collects its build side
//!   (`CollectLeft`) and whose probe side is a disk scan reached through row-preserving
//!   operators, a [`BloomBuildExec`] above the build side hashes the join keys into a Bloom
//!   filter while the join collects them; the probe scan waits for the filter and ships it to
//!   the disks in a `bloom_probe` stage, which drops rows that cannot join before they travel.
use super::scan::{BloomProbeSpec, BloomState, BuiltBloom, DiskScanExec, ScanFragment};
use super::tree::rewire;
use super::{Offload, SqlSettings};
use adisk_core::bloom::BloomFilter;
use adisk_core::hash::hash_columns;
use adisk_core::protocol::FragmentKind;
use arrow::array::RecordBatch;
use datafusion::common::JoinType;
use datafusion::common::NullEquality;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PhysicalExpr,
    PlanProperties,
};
use futures::StreamExt;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The rule; see the module documentation.
#[derive(Debug)]
pub struct OffloadRule {
    settings: Arc<SqlSettings>,
}

impl OffloadRule {
    /// A rule for these settings.
    pub fn new(settings: Arc<SqlSettings>) -> Self {
        OffloadRule { settings }
    }
}

impl PhysicalOptimizerRule for OffloadRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let level = self.settings.offload;
        let aggregates = level >= Offload::Aggregate;
        // At `disks` joins run at the disks: no Bloom filters built at the host.
        let semijoins = matches!(level, Offload::Semijoin | Offload::Auto);
        plan.transform_up(|node| {
            if aggregates
                && let Some(agg) = node.downcast_ref::<AggregateExec>()
                && let Some(pushed) = push_aggregate(agg, &node)
            {
                return Ok(Transformed::yes(pushed));
            }
            if level >= Offload::Select
                && let Some(sort) = node.downcast_ref::<SortExec>()
                && let Some(pushed) = push_sort(sort, &node)
            {
                return Ok(Transformed::yes(pushed));
            }
            if semijoins
                && let Some(join) = node.downcast_ref::<HashJoinExec>()
                && let Some(pushed) = push_bloom(join, &node, &self.settings)?
            {
                return Ok(Transformed::yes(pushed));
            }
            Ok(Transformed::no(node))
        })
        .and_then(|t| refresh_passes(t.data))
    }
    fn name(&self) -> &str {
        "adisk_offload"
    }
    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` with a Bloom semi-join for every hash join that can take one (see
/// [`push_bloom`]), whatever the level: at `disks`, for the joins left at the host once the
/// stages are cut (their probe scans are the host-centric scans this rule's semi-joins are
/// for).
pub(super) fn push_blooms(
    plan: Arc<dyn ExecutionPlan>,
    settings: &SqlSettings,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if let Some(join) = node.downcast_ref::<HashJoinExec>()
            && let Some(pushed) = push_bloom(join, &node, settings)?
        {
            return Ok(Transformed::yes(pushed));
        }
        Ok(Transformed::no(node))
    })
    .and_then(|t| refresh_passes(t.data))
}

/// Estimates again what each Bloom semi-join passes once every filter is placed: a build side
/// may have been given filters of its own after its join was (TPC-H Q11's suppliers are
/// filtered by nation through the join above them), and fewer build keys pass fewer rows.
/// Bottom up, so a build side's own estimates are fresh when its join's are made.
fn refresh_passes(
    plan: Arc<dyn ExecutionPlan>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(join) = node.downcast_ref::<HashJoinExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(build) = join.left().downcast_ref::<BloomBuildExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(keys) = build_key_estimate(join.left(), &build.keys) else {
            tracing::debug!(keys = ?build.keys, "a Bloom semi-join's build side: no estimate");
            return Ok(Transformed::no(node));
        };
        let slot = build.slot.subscribe();
        let right = join.right().clone().transform_down(|n| {
            let Some(scan) = n.downcast_ref::<DiskScanExec>() else {
                return Ok(Transformed::no(n));
            };
            let mut plan = scan.plan.clone();
            let mut changed = false;
            for spec in plan.bloom.iter_mut().chain(plan.extra_blooms.iter_mut()) {
                if spec.slot.same_channel(&slot) {
                    spec.est_pass = pass_fraction(scan, &spec.keys, keys);
                    tracing::debug!(
                        table = scan.table(),
                        keys = ?spec.keys,
                        build_keys = keys,
                        pass = ?spec.est_pass,
                        "a Bloom semi-join's estimate"
                    );
                    changed = true;
                }
            }
            Ok(if changed {
                Transformed::new(
                    Arc::new(scan.with_plan(plan)),
                    true,
                    TreeNodeRecursion::Jump,
                )
            } else {
                Transformed::no(n)
            })
        })?;
        if !right.transformed {
            return Ok(Transformed::no(node));
        }
        let left = join.left().clone();
        Ok(Transformed::yes(rewire(
            node.clone(),
            vec![left, right.data],
        )?))
    })
    .map(|t| t.data)
}

/// At most how many distinct keys `keys` (expressions over `build`'s output) take: the
/// product of each key column's distinct values followed down to the scans
/// ([`keys_distinct`]), else DataFusion's distinct count of a single key; at most the build
/// side's estimated rows.
fn build_key_estimate(
    build: &Arc<dyn ExecutionPlan>,
    keys: &[Arc<dyn PhysicalExpr>],
) -> Option<usize> {
    let stats = StatisticsContext::default()
        .compute(build.as_ref(), &StatisticsArgs::new())
        .ok();
    let rows = stats.as_ref().and_then(|s| s.num_rows.get_value().copied());
    let followed = keys
        .iter()
        .map(|k| k.downcast_ref::<Column>().map(|c| c.index()))
        .collect::<Option<Vec<_>>>()
        .and_then(|cols| keys_distinct(build, &cols, 0));
    let distinct = followed
        .map(|f| f as usize)
        .or_else(|| match (&stats, keys) {
            (Some(s), [k]) => k
                .downcast_ref::<Column>()
                .and_then(|c| s.column_statistics.get(c.index()))
                .and_then(|c| c.distinct_count.get_value().copied()),
            _ => None,
        });
    match (distinct, rows) {
        (Some(d), Some(r)) => Some(d.min(r)),
        (d, r) => d.or(r),
    }
}

/// Operators that only move batches between partitions or resize them.
pub(super) fn is_plumbing(p: &Arc<dyn ExecutionPlan>) -> bool {
    let a: &dyn ExecutionPlan = p.as_ref();
    a.downcast_ref::<RepartitionExec>().is_some()
        || a.downcast_ref::<CooperativeExec>().is_some()
        || a.downcast_ref::<CoalescePartitionsExec>().is_some()
}

fn push_aggregate(
    agg: &AggregateExec,
    node: &Arc<dyn ExecutionPlan>,
) -> Option<Arc<dyn ExecutionPlan>> {
    if *agg.mode() != AggregateMode::Partial {
        return None;
    }
    // Walk down to the scan, keeping the filters and projections.
    let mut chain: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    let mut cur = agg.input().clone();
    let scan = loop {
        if let Some(scan) = cur.downcast_ref::<DiskScanExec>() {
            break scan;
        }
        let a: &dyn ExecutionPlan = cur.as_ref();
        if a.downcast_ref::<ProjectionExec>().is_some() || a.downcast_ref::<FilterExec>().is_some()
        {
            chain.push(cur.clone());
        } else if !is_plumbing(&cur) {
            return None;
        }
        let child = cur.children().first().map(|c| (*c).clone())?;
        cur = child;
    };
    if scan.plan.fragment.is_some() || scan.plan.bloom.is_some() {
        return None;
    }
    let mut frag: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(scan.schema()));
    for op in chain.iter().rev() {
        frag = rewire(op.clone(), vec![frag]).ok()?;
    }
    frag = rewire(node.clone(), vec![frag]).ok()?;
    if frag.schema() != node.schema() {
        return None;
    }
    let bytes = datafusion_proto::bytes::physical_plan_to_bytes(frag.clone())
        .ok()?
        .to_vec();
    if !decodable(&bytes) {
        return None;
    }
    // Output rows: one per group per disk, at most the rows it takes in (see
    // `DiskScanExec::expected`); no grouping: one row per disk.
    let disks = scan.disks.len() as f64;
    let groups: Vec<Arc<dyn PhysicalExpr>> = agg
        .group_expr()
        .expr()
        .iter()
        .map(|(e, _)| e.clone())
        .collect();
    let group_columns = group_columns(&groups, &chain, scan);
    let est_rows = Some(match &group_columns {
        Some(cols) if cols.is_empty() => disks,
        _ => scan.plan.est_rows,
    });
    let mut plan = scan.plan.clone();
    plan.fragment = Some(ScanFragment {
        kind: FragmentKind::Aggregate,
        plan: frag,
        bytes,
        est_rows,
        group_columns,
    });
    Some(Arc::new(scan.with_plan(plan)))
}

/// The scan columns `groups` (expressions over the top of `chain`) are computed from, through
/// the chain's projections and filters (top first): the groups are at most as many as those
/// columns' combinations. None when a step cannot be followed.
fn group_columns(
    groups: &[Arc<dyn PhysicalExpr>],
    chain: &[Arc<dyn ExecutionPlan>],
    scan: &DiskScanExec,
) -> Option<Vec<String>> {
    use datafusion::physical_expr::utils::collect_columns;
    let mut cols: HashSet<usize> = groups
        .iter()
        .flat_map(collect_columns)
        .map(|c| c.index())
        .collect();
    for op in chain {
        let a: &dyn ExecutionPlan = op.as_ref();
        cols = if let Some(p) = a.downcast_ref::<ProjectionExec>() {
            let exprs = p.expr();
            let mut below = HashSet::new();
            for i in cols {
                below.extend(
                    collect_columns(&exprs.get(i)?.expr)
                        .iter()
                        .map(|c| c.index()),
                );
            }
            below
        } else if let Some(f) = a.downcast_ref::<FilterExec>() {
            match f.projection() {
                Some(p) => cols
                    .iter()
                    .map(|i| p.get(*i).copied())
                    .collect::<Option<_>>()?,
                None => cols,
            }
        } else {
            return None;
        };
    }
    let schema = scan.schema();
    let mut names = cols
        .iter()
        .map(|i| schema.fields().get(*i).map(|f| f.name().clone()))
        .collect::<Option<Vec<_>>>()?;
    names.sort();
    Some(names)
}

/// Whether a disk could decode the fragment on its own: some expressions only decode inside
/// their host operator (a scalar subquery's value comes from the host's `ScalarSubqueryExec`).
fn decodable(bytes: &[u8]) -> bool {
    datafusion_proto::bytes::physical_plan_from_bytes(bytes, &decoding_task()).is_ok()
}

/// A task context to decode plans with, as a disk does. Made once: a session registers
/// hundreds of functions, and the planner decodes every candidate fragment (2.7 % of the
/// host's CPU over small TPC-H queries when each check made its own).
pub(super) fn decoding_task() -> Arc<TaskContext> {
    static TASK: std::sync::LazyLock<Arc<TaskContext>> =
        std::sync::LazyLock::new(|| datafusion::prelude::SessionContext::new().task_ctx());
    TASK.clone()
}

/// The filters and projections between `input` and the scan below it, top first, and the scan.
fn row_chain(
    input: &Arc<dyn ExecutionPlan>,
) -> Option<(Vec<Arc<dyn ExecutionPlan>>, &DiskScanExec)> {
    let mut chain: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    let mut cur = input;
    loop {
        if let Some(scan) = cur.downcast_ref::<DiskScanExec>() {
            return Some((chain, scan));
        }
        let a: &dyn ExecutionPlan = cur.as_ref();
        if a.downcast_ref::<ProjectionExec>().is_some() || a.downcast_ref::<FilterExec>().is_some()
        {
            chain.push(cur.clone());
        } else if a.downcast_ref::<CooperativeExec>().is_none() {
            // Repartitioning would mix the disks' streams: a sort must stay on one.
            return None;
        }
        cur = cur.children().into_iter().next()?;
    }
}

/// A sort of each disk's stream (`SortExec` keeping partitions, under the host's merge of
/// sorted streams) moves into the scan: every disk sorts its part — DataFusion's sort, runs
/// within the scratch grant, merged — and the host only merges the disks' sorted streams.
fn push_sort(sort: &SortExec, node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let (chain, scan) = row_chain(sort.input())?;
    if !(sort.preserve_partitioning() || scan.disks.len() <= 1)
        || scan.plan.fragment.is_some()
        || scan.plan.bloom.is_some()
        || !scan.plan.extra_blooms.is_empty()
    {
        return None;
    }
    let mut frag: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(scan.schema()));
    for op in chain.iter().rev() {
        frag = rewire(op.clone(), vec![frag]).ok()?;
    }
    let one = SortExec::new(sort.expr().clone(), frag).with_fetch(sort.fetch());
    let frag: Arc<dyn ExecutionPlan> = Arc::new(one);
    if frag.schema() != node.schema() {
        return None;
    }
    let bytes = datafusion_proto::bytes::physical_plan_to_bytes(frag.clone())
        .ok()?
        .to_vec();
    if !decodable(&bytes) {
        return None;
    }
    // A sort keeps its rows (the operators below it only drop some): the scan's estimate, or
    // a top-k's rows per disk when fewer.
    let est_rows = Some(sort.fetch().map_or(scan.plan.est_rows, |f| {
        ((f * scan.disks.len()) as f64).min(scan.plan.est_rows)
    }));
    let mut plan = scan.plan.clone();
    plan.fragment = Some(ScanFragment {
        kind: FragmentKind::Sort,
        plan: frag,
        bytes,
        est_rows,
        group_columns: None,
    });
    Some(Arc::new(scan.with_plan(plan)))
}

/// Join types for which dropping probe rows that match no build key changes nothing.
fn probe_filterable(t: &JoinType) -> bool {
    matches!(
        t,
        JoinType::Inner
            | JoinType::Left
            | JoinType::LeftSemi
            | JoinType::LeftAnti
            | JoinType::RightSemi
            | JoinType::LeftMark
    )
}

/// At most how many distinct combinations columns `cols` of `plan`'s output hold, followed
/// down to the disk scans: through projections, filters, aggregations' grouping columns and
/// operators that only move batches. Columns of one scan hold at most its expected rows; at
/// a hash join each side's columns count apart, and an inner join's key holds only the values
/// both sides hold. None where a column cannot be followed (or past 64 operators).
fn keys_distinct(plan: &Arc<dyn ExecutionPlan>, cols: &[usize], depth: usize) -> Option<f64> {
    if depth > 64 {
        return None;
    }
    if cols.is_empty() {
        return Some(1.0);
    }
    let a: &dyn ExecutionPlan = plan.as_ref();
    let below = |child: &Arc<dyn ExecutionPlan>, c: Vec<usize>| keys_distinct(child, &c, depth + 1);
    if let Some(scan) = a.downcast_ref::<DiskScanExec>() {
        return scan.expected_distinct(cols);
    }
    if let Some(p) = a.downcast_ref::<ProjectionExec>() {
        let exprs = p.expr();
        let c = cols
            .iter()
            .map(|i| Some(exprs.get(*i)?.expr.downcast_ref::<Column>()?.index()))
            .collect::<Option<Vec<_>>>()?;
        return below(p.input(), c);
    }
    if let Some(f) = a.downcast_ref::<FilterExec>() {
        let c = match f.projection() {
            Some(p) => cols
                .iter()
                .map(|i| p.get(*i).copied())
                .collect::<Option<_>>()?,
            None => cols.to_vec(),
        };
        return below(f.input(), c);
    }
    if let Some(agg) = a.downcast_ref::<AggregateExec>() {
        let groups = agg.group_expr().expr();
        let c = cols
            .iter()
            .map(|i| Some(groups.get(*i)?.0.downcast_ref::<Column>()?.index()))
            .collect::<Option<Vec<_>>>()?;
        return below(agg.input(), c);
    }
    if let Some(join) = a.downcast_ref::<HashJoinExec>() {
        return join_keys_distinct(join, cols, depth);
    }
    if is_plumbing(plan) || a.downcast_ref::<BloomBuildExec>().is_some() {
        return below(plan.children().first()?, cols.to_vec());
    }
    None
}

/// [`keys_distinct`] of a hash join's output columns `cols`.
///
/// An inner join's output holds equal values in the two columns of each key pair, so a
/// requested column that is a join key is counted on the other side when the other side has
/// requested columns too: (part key, supplier key) over partsupp ⋈ part ⋈ supplier is then
/// counted on partsupp's own pairs, not as the product of the two tables' keys (TPC-H Q9 at
/// SF 10: 5·10¹⁰ estimated where partsupp holds 8·10⁶ pairs). And a side's key values survive
/// only where the other side holds them: each of its join keys scales its count by the other
/// side's distinct values of that key over its own (at most 1).
fn join_keys_distinct(join: &HashJoinExec, cols: &[usize], depth: usize) -> Option<f64> {
    let left_width = join.left().schema().fields().len();
    let (mut left, mut right) = (Vec::new(), Vec::new());
    for &c in cols {
        let c = match &join.projection {
            Some(p) => *p.get(c)?,
            None => c,
        };
        match join.join_type() {
            JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => left.push(c),
            JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => right.push(c),
            _ if c < left_width => left.push(c),
            _ => right.push(c - left_width),
        }
    }
    let index = |e: &Arc<dyn PhysicalExpr>| e.downcast_ref::<Column>().map(|c| c.index());
    let pairs: Vec<(usize, usize)> = match join.join_type() {
        JoinType::Inner => join
            .on()
            .iter()
            .filter_map(|(lk, rk)| Some((index(lk)?, index(rk)?)))
            .collect(),
        _ => vec![],
    };
    move_join_keys(&mut left, &mut right, &pairs);
    let mut l = keys_distinct(join.left(), &left, depth + 1)?;
    let mut r = keys_distinct(join.right(), &right, depth + 1)?;
    let one = |side: &Arc<dyn ExecutionPlan>, c: usize| keys_distinct(side, &[c], depth + 1);
    for &(li, ri) in &pairs {
        let (Some(ln), Some(rn)) = (one(join.left(), li), one(join.right(), ri)) else {
            continue;
        };
        if left.contains(&li) {
            l = (l * (rn / ln.max(1.0)).min(1.0)).max(1.0);
        }
        if right.contains(&ri) {
            r = (r * (ln / rn.max(1.0)).min(1.0)).max(1.0);
        }
    }
    Some(l * r)
}

/// Moves requested join-key columns to the other side of an inner join (`pairs`: left and
/// right column of each key) while both sides have requested columns: equal values, counted
/// once, on one side.
fn move_join_keys(left: &mut Vec<usize>, right: &mut Vec<usize>, pairs: &[(usize, usize)]) {
    for &(li, ri) in pairs {
        if !right.is_empty() && left.contains(&li) {
            left.retain(|c| *c != li);
            if !right.contains(&ri) {
                right.push(ri);
            }
        } else if !left.is_empty() && right.contains(&ri) {
            right.retain(|c| *c != ri);
            if !left.contains(&li) {
                left.push(li);
            }
        }
    }
}

/// The fraction of a scan's rows a filter of `build_keys` distinct keys on columns `names`
/// passes: those keys over the distinct key values here — one column's distinct count; for
/// several, the product of theirs, at most the table's rows (keys of several columns are
/// often correlated, as a line item's part and supplier). None when a count is unknown.
fn pass_fraction(scan: &DiskScanExec, names: &[String], build_keys: usize) -> Option<f64> {
    let mut distinct = 1.0f64;
    for name in names {
        distinct *= scan.column_ndv(name)?.max(1) as f64;
    }
    if names.len() > 1 {
        distinct = distinct.min(scan.entry.rows().max(1) as f64);
    }
    Some((build_keys as f64 / distinct).min(1.0))
}

/// What a Bloom filter's probe scan expects: its rows, and the share of them the filter
/// passes ([`pass_fraction`]).
#[derive(Clone, Copy, Debug, Default)]
struct ProbeEst {
    rows: Option<usize>,
    pass: Option<f64>,
}

/// Rebuilds the probe side with the Bloom filter attached to its scan; `keys` are column
/// indices of `plan`'s output.
fn attach_bloom(
    plan: &Arc<dyn ExecutionPlan>,
    keys: &[usize],
    slot: &watch::Receiver<BloomState>,
    (bytes, build_keys): (usize, Option<usize>),
    est: &mut ProbeEst,
) -> Option<Arc<dyn ExecutionPlan>> {
    let a: &dyn ExecutionPlan = plan.as_ref();
    if let Some(scan) = a.downcast_ref::<DiskScanExec>() {
        // With a fragment, the keys are followed down to the scan's base columns: the Bloom
        // stage runs before the fragment.
        let keys = match &scan.plan.fragment {
            Some(f) => keys_below_fragment(&f.plan, keys)?,
            None => keys.to_vec(),
        };
        let schema = scan.plan.base_schema.clone();
        let names = keys
            .iter()
            .map(|k| schema.fields().get(*k).map(|f| f.name().clone()))
            .collect::<Option<Vec<_>>>()?;
        let mut p = scan.plan.clone();
        let est_pass = build_keys.and_then(|b| pass_fraction(scan, &names, b));
        *est = ProbeEst {
            rows: Some(p.est_rows as usize),
            pass: est_pass,
        };
        let spec = BloomProbeSpec {
            keys: names,
            slot: slot.clone(),
            bytes,
            est_pass,
        };
        if p.bloom.is_none() {
            p.bloom = Some(spec);
        } else if p.extra_blooms.len() < MAX_BLOOMS_PER_SCAN - 1 {
            p.extra_blooms.push(spec);
        } else {
            return None;
        }
        return Some(Arc::new(scan.with_plan(p)));
    }
    let child_keys: Vec<usize> = if let Some(k) = keys_below_row_operator(a, keys) {
        k?
    } else if is_plumbing(plan)
        || a.downcast_ref::<SortExec>().is_some()
        || a.downcast_ref::<BloomBuildExec>().is_some()
    {
        keys.to_vec()
    } else if let Some(agg) = a.downcast_ref::<AggregateExec>() {
        group_key_inputs(agg, keys)?
    } else if let Some(j) = a.downcast_ref::<HashJoinExec>() {
        return attach_bloom_through_join(plan, j, keys, slot, (bytes, build_keys), est);
    } else {
        return None;
    };
    let child = plan.children().first().map(|c| (*c).clone())?;
    let new_child = attach_bloom(&child, &child_keys, slot, (bytes, build_keys), est)?;
    rewire(plan.clone(), vec![new_child]).ok()
}

/// The input columns of an aggregation's group keys `keys` (output positions). Dropping input
/// rows whose group key cannot match drops exactly those groups, so a filter on group keys
/// may pass below the aggregation.
pub(super) fn group_key_inputs(agg: &AggregateExec, keys: &[usize]) -> Option<Vec<usize>> {
    let groups = agg.group_expr();
    if !groups.is_single() {
        return None;
    }
    let exprs = groups.expr();
    keys.iter()
        .map(|k| {
            exprs
                .get(*k)
                .and_then(|(e, _)| e.downcast_ref::<Column>().map(|c| c.index()))
        })
        .collect()
}

/// Input columns of output columns `keys` of a projection (plain columns only) or a filter
/// (through its projection, if any). `None`: `a` is neither; `Some(None)`: a key is computed.
pub(super) fn keys_below_row_operator(
    a: &dyn ExecutionPlan,
    keys: &[usize],
) -> Option<Option<Vec<usize>>> {
    if let Some(proj) = a.downcast_ref::<ProjectionExec>() {
        let exprs: Vec<_> = proj.projection_expr().iter().collect();
        return Some(
            keys.iter()
                .map(|k| {
                    exprs
                        .get(*k)
                        .and_then(|e| e.expr.downcast_ref::<Column>().map(|c| c.index()))
                })
                .collect(),
        );
    }
    let f = a.downcast_ref::<FilterExec>()?;
    Some(match f.projection() {
        Some(p) => keys.iter().map(|k| p.get(*k).copied()).collect(),
        None => Some(keys.to_vec()),
    })
}

/// Follows output columns of a scan's fragment down to its leaf (the scan's base columns).
pub(super) fn keys_below_fragment(
    plan: &Arc<dyn ExecutionPlan>,
    keys: &[usize],
) -> Option<Vec<usize>> {
    let a: &dyn ExecutionPlan = plan.as_ref();
    if a.downcast_ref::<EmptyExec>().is_some() {
        return Some(keys.to_vec());
    }
    let child_keys: Vec<usize> = if let Some(agg) = a.downcast_ref::<AggregateExec>() {
        group_key_inputs(agg, keys)?
    } else if let Some(k) = keys_below_row_operator(a, keys) {
        k?
    } else {
        return None;
    };
    let child = plan.children().first().map(|c| (*c).clone())?;
    keys_below_fragment(&child, &child_keys)
}

/// Filter size for an estimated build side: 32 bits per key, at least 16 KiB, at most `max`.
fn filter_bytes(build_rows: Option<usize>, max: usize) -> usize {
    match build_rows {
        Some(r) => r
            .saturating_mul(4)
            .next_power_of_two()
            .max(16 * 1024)
            .min(max),
        None => max,
    }
}

/// `auto`'s filters may take up to this fraction of a stage's scratch (a scan applies at most
/// [`MAX_BLOOMS_PER_SCAN`] of them): 1/32, 4 filters, an eighth.
const AUTO_BLOOM_SHARE: u64 = 32;

/// The largest filter `auto` makes: at 32 bits a key, 4 million keys (TPC-H Q9 at SF 10 has
/// 435 128, estimated 1.9 million: with filters capped at 1 MiB it shipped all 4 GiB of
/// lineitem's columns to the host).
const AUTO_BLOOM_MAX: u64 = 16 << 20;

/// Most Bloom filters one scan applies.
const MAX_BLOOMS_PER_SCAN: usize = 4;

/// Follows probe keys through a hash join into the input that produces them. Dropping input
/// rows whose key cannot match only drops output rows with that key when the side's rows are
/// never NULL-extended: both sides of an inner join, the preserved side of an outer join, the
/// output side of a semi or anti join.
fn attach_bloom_through_join(
    plan: &Arc<dyn ExecutionPlan>,
    j: &HashJoinExec,
    keys: &[usize],
    slot: &watch::Receiver<BloomState>,
    sizes: (usize, Option<usize>),
    est: &mut ProbeEst,
) -> Option<Arc<dyn ExecutionPlan>> {
    let idx: Vec<usize> = match &j.projection {
        Some(p) => keys
            .iter()
            .map(|k| p.get(*k).copied())
            .collect::<Option<_>>()?,
        None => keys.to_vec(),
    };
    let left_len = j.left().schema().fields().len();
    let all_left = idx.iter().all(|i| *i < left_len);
    let all_right = idx.iter().all(|i| *i >= left_len);
    let side = match j.join_type() {
        JoinType::Inner if all_left => Some((true, idx.clone())),
        JoinType::Inner if all_right => Some((false, idx.iter().map(|i| i - left_len).collect())),
        JoinType::Left if all_left => Some((true, idx.clone())),
        JoinType::Right if all_right => Some((false, idx.iter().map(|i| i - left_len).collect())),
        JoinType::LeftSemi | JoinType::LeftAnti if all_left => Some((true, idx.clone())),
        JoinType::RightSemi | JoinType::RightAnti => Some((false, idx.clone())),
        _ => None,
    };
    let (into_left, child_keys) = side?;
    let (left, right) = (j.left().clone(), j.right().clone());
    let children = if into_left {
        vec![attach_bloom(&left, &child_keys, slot, sizes, est)?, right]
    } else {
        vec![left, attach_bloom(&right, &child_keys, slot, sizes, est)?]
    };
    rewire(plan.clone(), children).ok()
}

fn push_bloom(
    join: &HashJoinExec,
    node: &Arc<dyn ExecutionPlan>,
    settings: &SqlSettings,
) -> datafusion::error::Result<Option<Arc<dyn ExecutionPlan>>> {
    if *join.partition_mode() != PartitionMode::CollectLeft
        || !probe_filterable(join.join_type())
        || join.null_equality() != NullEquality::NullEqualsNothing
        || join.left().output_partitioning().partition_count() != 1
    {
        return Ok(None);
    }
    let left_schema = join.left().schema();
    let right_schema = join.right().schema();
    // Key pairs a filter can use: the probe side's key is a column of the same type.
    let mut pairs = Vec::new();
    for (l, r) in join.on() {
        let Some(rc) = r.downcast_ref::<Column>() else {
            continue;
        };
        let Some(probe_field) = right_schema.fields().get(rc.index()) else {
            continue;
        };
        if l.data_type(&left_schema)? == *probe_field.data_type() {
            pairs.push((l.clone(), rc.index()));
        }
    }
    // All keys if they all reach a scan; otherwise the first single key that does. A filter on
    // some of the keys is still a semi-join filter: a row matching every key matches those.
    let all_keys = pairs.len() == join.on().len();
    let mut subsets: Vec<Vec<usize>> = Vec::new();
    if all_keys && !pairs.is_empty() {
        subsets.push((0..pairs.len()).collect());
    }
    if pairs.len() > 1 || !all_keys {
        subsets.extend((0..pairs.len()).map(|i| vec![i]));
    }
    let (tx, rx) = watch::channel(BloomState::Pending);
    let mut chosen = None;
    for subset in subsets {
        let probe_cols: Vec<usize> = subset.iter().map(|i| pairs[*i].1).collect();
        let mut probe_est = ProbeEst::default();
        // Sized below, once the build keys are known; the size travels with the filter.
        if let Some(right) = attach_bloom(join.right(), &probe_cols, &rx, (0, None), &mut probe_est)
        {
            chosen = Some((subset, right, probe_est));
            break;
        }
    }
    let Some((subset, _, _)) = chosen else {
        return Ok(None);
    };
    let build_keys: Vec<Arc<dyn PhysicalExpr>> =
        subset.iter().map(|i| pairs[*i].0.clone()).collect();
    let probe_cols: Vec<usize> = subset.iter().map(|i| pairs[*i].1).collect();
    // Distinct build keys bound the filter's contents (a key with few distinct values needs
    // no more room than that, however many rows carry it) and what it passes.
    let build_rows = build_key_estimate(join.left(), &build_keys);
    // `auto` sizes the filter to the build side (32 bits per estimated key, 16 KiB at least),
    // up to `--bloom-kib` or, where the disks' memory allows more, AUTO_BLOOM_SHARE of a
    // stage's scratch (at most AUTO_BLOOM_MAX); `--bloom-kib` is the size at `semijoin`.
    let bytes = if settings.offload == Offload::Auto {
        let roomy = (settings.cost.max_scratch_bytes / AUTO_BLOOM_SHARE).min(AUTO_BLOOM_MAX);
        filter_bytes(build_rows, settings.bloom_bytes.max(roomy as usize))
    } else {
        settings.bloom_bytes
    };
    let mut probe_est = ProbeEst::default();
    let sizes = (bytes, build_rows);
    let Some(right) = attach_bloom(join.right(), &probe_cols, &rx, sizes, &mut probe_est) else {
        return Ok(None);
    };
    let probe = (probe_est.rows, probe_est.pass);
    if settings.offload == Offload::Auto && !settings.cost.push_bloom(build_rows, probe, bytes) {
        tracing::debug!(
            build_keys = ?build_rows,
            probe_rows = ?probe_est.rows,
            probe_pass = ?probe_est.pass,
            filter_bytes = bytes,
            "auto: no Bloom semi-join on this join"
        );
        return Ok(None);
    }
    // Hash functions are chosen for the expected number of keys (10 bits per key if unknown,
    // at most 20 bits per key so that an underestimate cannot saturate the filter).
    let expected_keys = build_rows
        .map(|r| r as u64)
        .unwrap_or((bytes * 8 / 10) as u64)
        .max((bytes * 8 / 20) as u64);
    let left: Arc<dyn ExecutionPlan> = Arc::new(BloomBuildExec::new(
        join.left().clone(),
        build_keys,
        Arc::new(tx),
        bytes,
        expected_keys,
        settings.analyze,
    ));
    let new = rewire(node.clone(), vec![left, right])?;
    Ok(Some(new))
}

/// Bits per key a published filter keeps at least (it is folded down to them,
/// [`BloomFilter::fold_to`]): under 0.2 % false positives, in a filter that crosses the host's
/// link once per disk (a 1 MiB filter of 10 000 keys becomes 64 KiB).
pub const SHIPPED_BITS_PER_KEY: u64 = 32;

/// Passes the build side of a join through, hashing its join keys into a Bloom filter that is
/// published (folded to its keys) when the input ends.
#[derive(Debug)]
pub struct BloomBuildExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    slot: Arc<watch::Sender<BloomState>>,
    bytes: usize,
    expected_keys: u64,
    exact: bool,
}

impl BloomBuildExec {
    fn new(
        input: Arc<dyn ExecutionPlan>,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        slot: Arc<watch::Sender<BloomState>>,
        bytes: usize,
        expected_keys: u64,
        exact: bool,
    ) -> Self {
        BloomBuildExec {
            input,
            keys,
            slot,
            bytes,
            expected_keys,
            exact,
        }
    }
}

impl DisplayAs for BloomBuildExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(|k| k.to_string()).collect();
        write!(
            f,
            "BloomBuildExec: keys=[{}] filter={} KiB",
            keys.join(", "),
            self.bytes / 1024
        )
    }
}

struct Building {
    filter: BloomFilter,
    exact: Option<HashSet<u64>>,
    keys: u64,
    slot: Arc<watch::Sender<BloomState>>,
    published: bool,
}

impl Drop for Building {
    fn drop(&mut self) {
        if !self.published {
            // The build side went away unfinished: let the probe side run without a filter.
            self.slot.send_replace(BloomState::Ready(None));
        }
    }
}

impl ExecutionPlan for BloomBuildExec {
    fn name(&self) -> &str {
        "BloomBuildExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> datafusion::error::Result<TreeNodeRecursion>,
    ) -> datafusion::error::Result<TreeNodeRecursion> {
        for k in &self.keys {
            if f(k)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let input = children.into_iter().next().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("BloomBuildExec needs one child".into())
        })?;
        Ok(Arc::new(BloomBuildExec::new(
            input,
            self.keys.clone(),
            self.slot.clone(),
            self.bytes,
            self.expected_keys,
            self.exact,
        )))
    }
    // It does not ask DataFusion for its input's statistics (`child_stats_requests`), so
    // `inputs` is empty and its statistics unknown: `refresh_passes` keeps each Bloom pass
    // estimate at 1.0. Asking for them (2026-11-29) made `auto`'s host-centric estimates of
    // TPC-H Q5 and Q7 23-38x too low (passes multiplied along chains of filters); left until
    // the chain estimate is right.
    fn statistics_from_inputs(
        &self,
        inputs: &[Arc<datafusion::common::Statistics>],
        _args: &StatisticsArgs,
    ) -> datafusion::error::Result<Arc<datafusion::common::Statistics>> {
        Ok(inputs.first().cloned().unwrap_or_else(|| {
            Arc::new(datafusion::common::Statistics::new_unknown(&self.schema()))
        }))
    }
    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> datafusion::error::Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let building = Arc::new(Mutex::new(Building {
            filter: BloomFilter::with_size(self.bytes, self.expected_keys),
            exact: self.exact.then(HashSet::new),
            keys: 0,
            slot: self.slot.clone(),
            published: false,
        }));
        let keys = self.keys.clone();
        let on_batch = building.clone();
        let stream = input
            .map(move |item| {
                let batch: RecordBatch = item?;
                let cols = keys
                    .iter()
                    .map(|k| {
                        k.evaluate(&batch)
                            .and_then(|v| v.into_array(batch.num_rows()))
                    })
                    .collect::<datafusion::error::Result<Vec<_>>>()?;
                let hashes = hash_columns(&cols, batch.num_rows())
                    .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
                let mut b = on_batch.lock().expect("bloom lock");
                for (row, h) in hashes.iter().enumerate() {
                    if cols.iter().any(|c| c.is_null(row)) {
                        continue; // NULL keys never join.
                    }
                    b.filter.insert(*h);
                    if let Some(e) = &mut b.exact {
                        e.insert(*h);
                    }
                    b.keys += 1;
                }
                Ok(batch)
            })
            .map(Some)
            .chain(futures::stream::once(async move {
                let mut b = building.lock().expect("bloom lock");
                // Shipped to every disk of the probe side: as small as its keys allow.
                b.filter.fold_to(SHIPPED_BITS_PER_KEY);
                let built = BuiltBloom {
                    filter: b.filter.clone(),
                    keys: b.keys,
                    exact: b.exact.take(),
                };
                b.published = true;
                b.slot
                    .send_replace(BloomState::Ready(Some(Arc::new(built))));
                None
            }))
            .filter_map(|x: Option<datafusion::error::Result<RecordBatch>>| async move { x })
            .boxed();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

#[cfg(test)]
mod tests {
    use super::move_join_keys;

    /// (part key, supplier key) over supplier ⋈ (part ⋈ partsupp): the supplier key is the
    /// join's key, so both end up counted on the right side; a side alone keeps its columns.
    #[test]
    fn join_keys_requested_on_both_sides_are_counted_on_one() {
        // supplier (left: 0 = s_suppkey) ⋈ right (0 = ps_suppkey, 2 = p_partkey)
        let (mut l, mut r) = (vec![0], vec![2]);
        move_join_keys(&mut l, &mut r, &[(0, 0)]);
        assert!(l.is_empty());
        assert_eq!(r, vec![2, 0]);
        // Only one side asked for: nothing moves.
        let (mut l, mut r) = (vec![0, 1], vec![]);
        move_join_keys(&mut l, &mut r, &[(0, 3)]);
        assert_eq!((l, r), (vec![0, 1], vec![]));
        // The partner already requested: the column is dropped from its side, not doubled.
        let (mut l, mut r) = (vec![0, 1], vec![3]);
        move_join_keys(&mut l, &mut r, &[(0, 3)]);
        assert_eq!((l, r), (vec![1], vec![3]));
        // A column that is not a join key stays where it is.
        let (mut l, mut r) = (vec![1], vec![2]);
        move_join_keys(&mut l, &mut r, &[(0, 0)]);
        assert_eq!((l, r), (vec![1], vec![2]));
    }
}
