//! Joins too large for a disk's memory at the `disks` level: a hash join keeps its whole build
//! side in memory and cannot spill, so a join whose build side is estimated past what its stage
//! will be granted runs as a sort-merge join instead. Both inputs are sorted on the join keys
//! (DataFusion's sort writes sorted runs to the job's temporary space when the stage's scratch
//! fills, and merges them), then merged; the merge join keeps one key's rows of its buffered
//! side in memory and spills them too past the grant. The temporary space is capped by the
//! job's disk-space grant, past which the stage fails with a typed error.
use datafusion::arrow::compute::SortOptions;
use datafusion::common::stats::Precision;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::{HashJoinExec, SortMergeJoinExec};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use std::sync::Arc;

/// Estimated bytes of `plan`'s whole output (all partitions), if DataFusion can tell.
pub(super) fn estimated_bytes(plan: &Arc<dyn ExecutionPlan>) -> Option<u64> {
    let stats = StatisticsContext::default()
        .compute(plan.as_ref(), &StatisticsArgs::new())
        .ok()?;
    let width: u64 = plan
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().primitive_width().unwrap_or(24) as u64)
        .sum();
    let rows = precise(stats.num_rows);
    let bytes = precise(stats.total_byte_size).or(rows.map(|r| r.saturating_mul(width.max(1))))?;
    // An aggregation makes at most as many groups as its group values allow.
    match (super::groups::group_bound(plan), rows) {
        (Some(groups), Some(r)) if groups < r as f64 => {
            Some((bytes as f64 * groups / r.max(1) as f64).ceil() as u64)
        }
        (Some(groups), None) => Some(bytes.min((groups * width.max(1) as f64) as u64)),
        _ => Some(bytes),
    }
}

/// Estimated rows of `plan`'s whole output (all partitions), if DataFusion can tell.
pub(super) fn estimated_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    let stats = StatisticsContext::default()
        .compute(plan.as_ref(), &StatisticsArgs::new())
        .ok()?;
    let rows = precise(stats.num_rows)? as usize;
    Some(match super::groups::group_bound(plan) {
        Some(groups) => rows.min(groups.ceil() as usize),
        None => rows,
    })
}

fn precise(p: Precision<usize>) -> Option<u64> {
    match p {
        Precision::Exact(v) | Precision::Inexact(v) => Some(v as u64),
        Precision::Absent => None,
    }
}

/// The join `j` as a sort-merge join over `left` and `right` (the stage's inputs of its two
/// sides, with the schemas of `j`'s children), with `j`'s output schema; None where DataFusion
/// has no sort-merge form of it.
pub(super) fn sort_merge(
    j: &HashJoinExec,
    left: Arc<dyn ExecutionPlan>,
    right: Arc<dyn ExecutionPlan>,
) -> Option<Arc<dyn ExecutionPlan>> {
    // With a join filter, DataFusion 55's sort-merge join sent a disk stage batches whose
    // columns were out of order (TPC-H Q19): such joins keep their hash join.
    if j.filter().is_some() {
        return None;
    }
    let options = SortOptions::default();
    let sorted = |input: Arc<dyn ExecutionPlan>, keys: Vec<Arc<dyn PhysicalExpr>>| {
        let ordering =
            LexOrdering::new(keys.into_iter().map(|e| PhysicalSortExpr::new(e, options)))?;
        Some(
            Arc::new(SortExec::new(ordering, input).with_preserve_partitioning(true))
                as Arc<dyn ExecutionPlan>,
        )
    };
    let left = sorted(left, j.on().iter().map(|(l, _)| l.clone()).collect())?;
    let right = sorted(right, j.on().iter().map(|(_, r)| r.clone()).collect())?;
    let joined: Arc<dyn ExecutionPlan> = Arc::new(
        SortMergeJoinExec::try_new(
            left,
            right,
            j.on().to_vec(),
            j.filter().cloned(),
            *j.join_type(),
            vec![options; j.on().len()],
            j.null_equality(),
        )
        .ok()?,
    );
    let out = match &j.projection {
        None => joined,
        Some(columns) => {
            let schema = j.schema();
            let inner = joined.schema();
            let exprs: Vec<ProjectionExpr> = columns
                .iter()
                .enumerate()
                .map(|(k, i)| ProjectionExpr {
                    expr: Arc::new(Column::new(inner.field(*i).name(), *i)),
                    alias: schema.field(k).name().clone(),
                })
                .collect();
            Arc::new(ProjectionExec::try_new(exprs, joined).ok()?)
        }
    };
    // The stage above reads columns by position and type: they must not change.
    let same = out.schema().fields().len() == j.schema().fields().len()
        && out
            .schema()
            .fields()
            .iter()
            .zip(j.schema().fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    same.then_some(out)
}
