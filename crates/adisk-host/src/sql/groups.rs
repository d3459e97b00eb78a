//! How many groups an aggregation can make, where DataFusion cannot tell.
//!
//! DataFusion 55 bounds an aggregation's output by its group columns' distinct counts only when
//! each group expression is a plain column of its input with a known count. A group computed
//! below it (TPC-H Q9's `o_year`, `date_part(YEAR, o_orderdate)` in a projection) leaves the
//! estimate at the input's rows: Q9's `disks` plan was expected to send the host 65.7 MiB
//! (3.2 million groups) where it sends 175 rows, and `auto` took the host-centric plan on a
//! 100 Mbit/s link, 19× slower. Here a value computed from one column has at most that
//! column's distinct values, and a constant has one.
use datafusion::common::JoinType;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use std::sync::Arc;

/// Deepest chain of operators followed.
const MAX_DEPTH: usize = 32;

/// The most groups the aggregation at the top of `plan` (below operators that keep rows one
/// for one: projections, sorts, repartitions) can make: the product of its group
/// expressions' distinct values. None where one is unknown or there is no aggregation.
pub(super) fn group_bound(plan: &Arc<dyn ExecutionPlan>) -> Option<f64> {
    let mut node = plan.clone();
    for _ in 0..MAX_DEPTH {
        if let Some(agg) = node.downcast_ref::<AggregateExec>() {
            if agg.group_expr().expr().is_empty() {
                return Some(1.0);
            }
            return agg
                .group_expr()
                .expr()
                .iter()
                .map(|(e, _)| expr_ndv(e, agg.input(), 0))
                .product::<Option<f64>>();
        }
        let a: &dyn ExecutionPlan = node.as_ref();
        let one_for_one = super::rules::is_plumbing(&node)
            || a.downcast_ref::<ProjectionExec>().is_some()
            || a.downcast_ref::<SortExec>().is_some()
            || a.downcast_ref::<SortPreservingMergeExec>().is_some();
        match (one_for_one, node.children().as_slice()) {
            (true, [child]) => node = (*child).clone(),
            _ => return None,
        }
    }
    None
}

/// Distinct values of `e` over `input`'s rows: a column's, a one-column expression's at most
/// that column's, a constant's 1.
fn expr_ndv(
    e: &Arc<dyn PhysicalExpr>,
    input: &Arc<dyn ExecutionPlan>,
    depth: usize,
) -> Option<f64> {
    let columns = collect_columns(e);
    match columns.len() {
        // A constant; not a function without arguments (random() is not one value).
        0 => e.downcast_ref::<Literal>().map(|_| 1.0),
        1 => column_ndv(input, columns.iter().next()?.index(), depth),
        _ => None,
    }
}

/// Distinct values of column `i` of `plan`: DataFusion's count where it has one, else followed
/// through projections, filters and hash joins to where one is known.
fn column_ndv(plan: &Arc<dyn ExecutionPlan>, i: usize, depth: usize) -> Option<f64> {
    if depth > MAX_DEPTH {
        return None;
    }
    let stats = StatisticsContext::default()
        .compute(plan.as_ref(), &StatisticsArgs::new())
        .ok();
    let known = stats
        .as_ref()
        .and_then(|s| s.column_statistics.get(i))
        .and_then(|c| c.distinct_count.get_value().copied());
    if let Some(n) = known {
        return Some(n.max(1) as f64);
    }
    let a: &dyn ExecutionPlan = plan.as_ref();
    if let Some(p) = a.downcast_ref::<ProjectionExec>() {
        return expr_ndv(&p.expr().get(i)?.expr, p.input(), depth + 1);
    }
    if let Some(agg) = a.downcast_ref::<AggregateExec>() {
        // A group column (a final aggregation reads the partial one's groups first).
        let (e, _) = agg.group_expr().expr().get(i)?;
        return expr_ndv(e, agg.input(), depth + 1);
    }
    if let Some(f) = a.downcast_ref::<FilterExec>() {
        let i = match f.projection() {
            Some(p) => *p.get(i)?,
            None => i,
        };
        return column_ndv(f.input(), i, depth + 1);
    }
    if let Some(j) = a.downcast_ref::<HashJoinExec>() {
        let i = match &j.projection {
            Some(p) => *p.get(i)?,
            None => i,
        };
        let left = j.left().schema().fields().len();
        return match j.join_type() {
            JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                column_ndv(j.left(), i, depth + 1)
            }
            JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
                column_ndv(j.right(), i, depth + 1)
            }
            _ if i < left => column_ndv(j.left(), i, depth + 1),
            _ => column_ndv(j.right(), i - left, depth + 1),
        };
    }
    match plan.children().as_slice() {
        [child] if super::rules::is_plumbing(plan) => column_ndv(child, i, depth + 1),
        _ => None,
    }
}
