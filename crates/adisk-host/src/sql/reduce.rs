//! Semi-join reduction at the disks: the `disks` level's counterpart of the host-centric Bloom
//! semi-join (Riedel §4.2's filtering before shipping, here before exchanging).
//!
//! A join whose inner or semi side is fed by a large scan through an exchange or an
//! aggregation would otherwise aggregate and send every row of that scan, though only rows
//! whose key the other side holds can matter. When the other side's key values come from a
//! small scan — directly, or through joins that equate the key with that scan's column —
//! the large scan is filtered at its disks by a semi-join with that small scan's keys
//! (broadcast to them; the small scan is read once more). The result is exact: a key set is a
//! superset of the other side's keys, so no row that could join is dropped.
//!
//! TPC-H Q20: lineitem (0.9 M rows of 1994) is aggregated by part and supplier and then
//! semi-joined with the partsupp rows of the parts named `forest%`; the part scan's keys
//! filter lineitem before the aggregation's exchange. Q17 likewise filters the lineitem
//! aggregated by part with the parts of one brand and container.
use super::colocate::join_side;
use super::scan::{DiskScanExec, ScanPlan};
use adisk_core::protocol::FragmentKind;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, NullEquality};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use std::sync::Arc;

/// Largest key source broadcast for a reduction (estimated rows).
const MAX_KEY_ROWS: usize = 100_000;
/// A reduction must be expected to keep at most this fraction of the filtered scan's rows:
/// probing the key set costs about what aggregating a row does.
const MAX_KEPT: f64 = 0.5;

/// A column of a scan's output.
#[derive(Clone)]
struct ScanColumn {
    scan: Arc<dyn ExecutionPlan>,
    index: usize,
}

impl ScanColumn {
    fn rows(&self) -> Option<usize> {
        super::sortmerge::estimated_rows(&self.scan)
    }
}

/// `plan` with the reductions that apply (see the module documentation).
pub(super) fn reduced(
    plan: Arc<dyn ExecutionPlan>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(j) = node.downcast_ref::<HashJoinExec>() else {
            return Ok(Transformed::no(node));
        };
        match reduce_join(j) {
            Some(children) => Ok(Transformed::yes(super::tree::rewire(node, children)?)),
            None => Ok(Transformed::no(node)),
        }
    })
    .map(|t| t.data)
}

/// The join's children with one side reduced, if a reduction applies.
fn reduce_join(j: &HashJoinExec) -> Option<Vec<Arc<dyn ExecutionPlan>>> {
    // A residual filter only drops more: rows without an equal key never pass it.
    if j.null_equality() != NullEquality::NullEqualsNothing {
        return None;
    }
    // Which sides may lose rows whose key the other side lacks without changing the result.
    let (left_ok, right_ok) = match j.join_type() {
        JoinType::Inner | JoinType::LeftSemi | JoinType::RightSemi => (true, true),
        JoinType::Left | JoinType::LeftAnti => (false, true),
        JoinType::Right | JoinType::RightAnti => (true, false),
        _ => return None,
    };
    let mut children = vec![j.left().clone(), j.right().clone()];
    for (l, r) in j.on() {
        let (Some(l), Some(r)) = (l.downcast_ref::<Column>(), r.downcast_ref::<Column>()) else {
            continue;
        };
        for (side, ok, own, other) in [(0, left_ok, l, r), (1, right_ok, r, l)] {
            if !ok {
                continue;
            }
            let other_plan = children[1 - side].clone();
            if let Some(new) = reduce_side(&children[side], own.index(), &other_plan, other.index())
            {
                children[side] = new;
                return Some(children);
            }
        }
    }
    None
}

/// `side` with the scan feeding its column `key` semi-joined with the smallest scan whose
/// column holds every value of `other`'s column `other_key`, if that pays.
fn reduce_side(
    side: &Arc<dyn ExecutionPlan>,
    key: usize,
    other: &Arc<dyn ExecutionPlan>,
    other_key: usize,
) -> Option<Arc<dyn ExecutionPlan>> {
    let mut through_exchange = false;
    let target = filterable(side, key, &mut through_exchange)?;
    if !through_exchange {
        return None; // the join itself filters as cheaply, where the rows already are
    }
    let mut sources = Vec::new();
    key_sources(other, other_key, &mut sources);
    let source = sources
        .into_iter()
        .filter(|s| !Arc::ptr_eq(&s.scan, &target.scan))
        .filter_map(|s| Some((s.rows()?, s)))
        .min_by_key(|(rows, _)| *rows)?;
    if source.0 > MAX_KEY_ROWS || kept(&target, source.0)? > MAX_KEPT {
        return None;
    }
    let semi = reduction(&source.1, &target)?;
    let target_scan = target.scan.clone();
    side.clone()
        .transform_up(|n| {
            Ok(if Arc::ptr_eq(&n, &target_scan) {
                Transformed::yes(semi.clone())
            } else {
                Transformed::no(n)
            })
        })
        .ok()
        .map(|t| t.data)
}

/// The fraction of `target`'s rows expected to pass a filter by `keys` distinct values: over
/// the distinct values of the target's column where known, else over the rows it reads
/// (before any fragment of its own, a partial aggregation).
fn kept(target: &ScanColumn, keys: usize) -> Option<f64> {
    let scan = target.scan.downcast_ref::<DiskScanExec>()?;
    let name = target.scan.schema().field(target.index).name().clone();
    let domain = scan
        .column_ndv(&name)
        .map(|n| n as f64)
        .unwrap_or(scan.plan.est_rows);
    (domain > 0.0).then(|| keys as f64 / domain)
}

/// `target`'s scan reduced by `keys`: below the scan's own partial aggregation when it has
/// one, so that the aggregation takes only the rows kept (TPC-H Q17's lineitem, 6 M rows,
/// aggregated by part), else above the scan.
fn reduction(keys: &ScanColumn, target: &ScanColumn) -> Option<Arc<dyn ExecutionPlan>> {
    below_fragment(keys, target).or_else(|| semi_join(keys, target))
}

/// [`reduction`] below the target scan's partial aggregation, if it has one.
fn below_fragment(keys: &ScanColumn, target: &ScanColumn) -> Option<Arc<dyn ExecutionPlan>> {
    let scan = target.scan.downcast_ref::<DiskScanExec>()?;
    let f = scan
        .plan
        .fragment
        .as_ref()
        .filter(|f| matches!(f.kind, FragmentKind::Aggregate))?;
    let base_index = *super::rules::keys_below_fragment(&f.plan, &[target.index])?.first()?;
    let base: Arc<dyn ExecutionPlan> = Arc::new(scan.with_plan(ScanPlan {
        fragment: None,
        ..scan.plan.clone()
    }));
    let kept = semi_join(
        keys,
        &ScanColumn {
            scan: base,
            index: base_index,
        },
    )?;
    // The fragment's operators over the kept rows, in place of its leaf.
    f.plan
        .clone()
        .transform_up(|n| {
            Ok(if n.downcast_ref::<EmptyExec>().is_some() {
                Transformed::yes(kept.clone())
            } else {
                Transformed::no(n)
            })
        })
        .ok()
        .map(|t| t.data)
        .filter(|p| p.schema().fields() == target.scan.schema().fields())
}

/// `target`'s scan keeping the rows whose column is among `keys`' column values: a
/// collect-left right-semi join (its output is the scan's rows, placed where they are read).
fn semi_join(keys: &ScanColumn, target: &ScanColumn) -> Option<Arc<dyn ExecutionPlan>> {
    let ks = keys.scan.schema();
    let ts = target.scan.schema();
    let (kf, tf) = (ks.field(keys.index), ts.field(target.index));
    if kf.data_type() != tf.data_type() {
        return None;
    }
    let projected: Arc<dyn ExecutionPlan> = Arc::new(
        ProjectionExec::try_new(
            vec![ProjectionExpr {
                expr: Arc::new(Column::new(kf.name(), keys.index)),
                alias: kf.name().clone(),
            }],
            keys.scan.clone(),
        )
        .ok()?,
    );
    let build = Arc::new(CoalescePartitionsExec::new(projected));
    let on = vec![(
        Arc::new(Column::new(kf.name(), 0)) as _,
        Arc::new(Column::new(tf.name(), target.index)) as _,
    )];
    let join = HashJoinExec::try_new(
        build,
        target.scan.clone(),
        on,
        None,
        &JoinType::RightSemi,
        None,
        PartitionMode::CollectLeft,
        NullEquality::NullEqualsNothing,
        false,
    )
    .ok()?;
    Some(Arc::new(join))
}

/// The scan column that column `index` of `plan` comes from, if dropping that scan's rows
/// whose column value is not wanted drops exactly the rows of `plan` with that value.
/// `exchanged` is set when the path crosses an exchange or an aggregation.
fn filterable(
    plan: &Arc<dyn ExecutionPlan>,
    index: usize,
    exchanged: &mut bool,
) -> Option<ScanColumn> {
    let node: &dyn ExecutionPlan = plan.as_ref();
    if node.downcast_ref::<DiskScanExec>().is_some() {
        return Some(ScanColumn {
            scan: plan.clone(),
            index,
        });
    }
    // Below a limit (a top-k, a fetch), fewer input rows change which rows come out.
    if node.fetch().is_some() {
        return None;
    }
    let crosses = node.downcast_ref::<RepartitionExec>().is_some()
        || node.downcast_ref::<AggregateExec>().is_some();
    *exchanged |= crosses;
    let mut child = |i: usize| filterable(plan.children().first()?, i, exchanged);
    if node.downcast_ref::<RepartitionExec>().is_some() {
        return child(index);
    }
    if node.downcast_ref::<CooperativeExec>().is_some()
        || node.downcast_ref::<CoalescePartitionsExec>().is_some()
        || node.downcast_ref::<SortExec>().is_some()
    {
        return child(index);
    }
    if let Some(i) = row_operator_input(node, index) {
        return child(i?);
    }
    if let Some(a) = node.downcast_ref::<AggregateExec>() {
        if a.limit_options().is_some() {
            return None; // which groups a limited aggregation keeps depends on its input
        }
        return child(group_key_input(a, index)?);
    }
    let j = node.downcast_ref::<HashJoinExec>()?;
    let (side, i) = join_side(j, index)?;
    // Rows of the side whose column this is may go: those of a NULL-extended side may not.
    let keeps = match j.join_type() {
        JoinType::Inner => true,
        JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti => side == 0,
        JoinType::Right | JoinType::RightSemi | JoinType::RightAnti => side == 1,
        _ => false,
    };
    if !keeps {
        return None;
    }
    filterable(&j.children()[side].clone(), i, exchanged)
}

/// Every scan column whose values include all values of column `index` of `plan`: through
/// rows passed on unchanged, group keys, and both sides of an inner or semi join on it.
fn key_sources(plan: &Arc<dyn ExecutionPlan>, index: usize, out: &mut Vec<ScanColumn>) {
    let node: &dyn ExecutionPlan = plan.as_ref();
    if node.downcast_ref::<DiskScanExec>().is_some() {
        out.push(ScanColumn {
            scan: plan.clone(),
            index,
        });
        return;
    }
    let Some(first) = plan.children().first().map(|c| (*c).clone()) else {
        return;
    };
    if node.downcast_ref::<RepartitionExec>().is_some()
        || node.downcast_ref::<CooperativeExec>().is_some()
        || node.downcast_ref::<CoalescePartitionsExec>().is_some()
        || node.downcast_ref::<SortExec>().is_some()
    {
        return key_sources(&first, index, out);
    }
    if let Some(i) = row_operator_input(node, index) {
        if let Some(i) = i {
            key_sources(&first, i, out);
        }
        return;
    }
    if let Some(a) = node.downcast_ref::<AggregateExec>() {
        if let Some(i) = group_key_input(a, index) {
            key_sources(&first, i, out);
        }
        return;
    }
    let Some(j) = node.downcast_ref::<HashJoinExec>() else {
        return;
    };
    let Some((side, i)) = join_side(j, index) else {
        return;
    };
    let children = [j.left().clone(), j.right().clone()];
    // Only an inner or semi join restricts its output's keys to both sides' keys.
    let restricting = matches!(
        j.join_type(),
        JoinType::Inner | JoinType::LeftSemi | JoinType::RightSemi
    ) && j.null_equality() == NullEquality::NullEqualsNothing;
    let kept_side = match j.join_type() {
        JoinType::Inner => true,
        JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti => side == 0,
        JoinType::Right | JoinType::RightSemi | JoinType::RightAnti => side == 1,
        _ => false,
    };
    if kept_side || restricting {
        key_sources(&children[side], i, out);
    }
    if !restricting {
        return;
    }
    for (l, r) in j.on() {
        let (Some(l), Some(r)) = (l.downcast_ref::<Column>(), r.downcast_ref::<Column>()) else {
            continue;
        };
        let (own, other) = if side == 0 { (l, r) } else { (r, l) };
        if own.index() == i {
            key_sources(&children[1 - side], other.index(), out);
        }
    }
}

/// The input column of output column `index` of a projection (a plain column) or a filter:
/// None if `node` is neither, Some(None) if the column is computed.
fn row_operator_input(node: &dyn ExecutionPlan, index: usize) -> Option<Option<usize>> {
    super::rules::keys_below_row_operator(node, &[index])
        .map(|k| k.and_then(|k| k.first().copied()))
}

/// The input column of group key `index` of an aggregation (a plain column).
fn group_key_input(a: &AggregateExec, index: usize) -> Option<usize> {
    super::rules::group_key_inputs(a, &[index])?
        .first()
        .copied()
}
