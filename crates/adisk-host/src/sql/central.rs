//! memik's central unit (§3, the smart-disk architecture): one disk does the combining work a
//! host-centric system does at the host — merging the disks' sorted streams, global limits,
//! aggregations over all rows — so the host only submits the plan and receives the result.
//!
//! After the `disks` level has cut a query into stages, what is left at the host above its
//! `DisksExec` is a chain of such operators. [`gather`] turns that chain into one more stage
//! for the central disk: the top stage's rows are all sent there, one stream from each disk,
//! and the chain runs over their union. A merge of sorted streams becomes a sort of the
//! union (the streams arrive interleaved), a coalesce disappears (one stream is already
//! there). Anything else at the host (a join of two `DisksExec`s, say) keeps the query at the
//! host, unchanged.
use super::disks_exec::DisksExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use std::sync::Arc;

/// The host's part of `plan` as a fragment for the central disk (one `EmptyExec` leaf: the
/// union of the top stage's streams) and the index of that top stage; None if the host's
/// part is not a single chain of combining operators over one `DisksExec`.
pub(super) fn gather(plan: &Arc<dyn ExecutionPlan>) -> Option<(Arc<dyn ExecutionPlan>, usize)> {
    let node: &dyn ExecutionPlan = plan.as_ref();
    if let Some(d) = node.downcast_ref::<DisksExec>() {
        return Some((Arc::new(EmptyExec::new(plan.schema())), d.root()));
    }
    let [child] = plan.children()[..] else {
        return None;
    };
    let (below, root) = gather(child)?;
    if let Some(m) = node.downcast_ref::<SortPreservingMergeExec>() {
        let sort = SortExec::new(m.expr().clone(), below).with_fetch(m.fetch());
        return Some((Arc::new(sort), root));
    }
    if let Some(c) = node.downcast_ref::<CoalescePartitionsExec>() {
        return Some(match c.fetch() {
            Some(n) => (Arc::new(GlobalLimitExec::new(below, 0, Some(n))), root),
            None => (below, root),
        });
    }
    // Cooperative scheduling wrappers are the host runtime's: a disk runs without.
    if node.downcast_ref::<CooperativeExec>().is_some() {
        return Some((below, root));
    }
    let chain = node.downcast_ref::<GlobalLimitExec>().is_some()
        || node.downcast_ref::<LocalLimitExec>().is_some()
        || node.downcast_ref::<ProjectionExec>().is_some()
        || node.downcast_ref::<FilterExec>().is_some()
        || node.downcast_ref::<AggregateExec>().is_some()
        || node.downcast_ref::<SortExec>().is_some();
    if !chain {
        return None;
    }
    let rewired = super::tree::rewire(plan.clone(), vec![below]).ok()?;
    Some((rewired, root))
}
