//! Broadcast where it moves fewer bytes (memik §4, joins with replication): at the `disks`
//! level, a partitioned join whose build side is small turns into a collect-left join whose
//! build side is copied to every disk while the probe side stays where it was read.
//!
//! DataFusion chooses between the two with fixed thresholds ([`BROADCAST_BYTES`]).
//! Here the choice compares what each moves: `n` copies of the build side against what the
//! partitioned join sends — both sides, or only one when the other is range-declustered on
//! the key ([`super::colocate::range_join`]), or nothing when both are co-partitioned. The
//! build side must also fit what a join stage may hold at one disk.
//!
//! The output of a partitioned join is hash-partitioned on its keys, and DataFusion leaves out
//! exchanges above that rely on it; a collect-left join's output is placed like its probe side.
//! So a join is only turned when the operators between it and the next exchange (or merge of
//! partitions) only filter and project.
use super::colocate::{below_exchange, colocated, range_join};
use datafusion::common::JoinType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use std::sync::Arc;

/// `plan` with every partitioned join that moves fewer bytes as a broadcast turned into one;
/// `disks` is the number of disks, `budget` the bytes of build side a join stage may hold.
pub(super) fn small_builds(
    plan: Arc<dyn ExecutionPlan>,
    disks: u64,
    budget: u64,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    plan.transform_down(|node| {
        let a: &dyn ExecutionPlan = node.as_ref();
        let boundary = a.downcast_ref::<RepartitionExec>().is_some()
            || a.downcast_ref::<CoalescePartitionsExec>().is_some();
        if !boundary {
            return Ok(Transformed::no(node));
        }
        let Some(child) = node.children().first().map(|c| (*c).clone()) else {
            return Ok(Transformed::no(node));
        };
        match turned(&child, disks, budget) {
            Some(new) => Ok(Transformed::yes(super::tree::rewire(node, vec![new])?)),
            None => Ok(Transformed::no(node)),
        }
    })
    .map(|t| t.data)
}

/// `plan` (a join under filters and projections) with the join broadcast, if that is cheaper.
fn turned(
    plan: &Arc<dyn ExecutionPlan>,
    disks: u64,
    budget: u64,
) -> Option<Arc<dyn ExecutionPlan>> {
    let a: &dyn ExecutionPlan = plan.as_ref();
    let passes = a.downcast_ref::<ProjectionExec>().is_some()
        || a.downcast_ref::<FilterExec>().is_some()
        || a.downcast_ref::<CooperativeExec>().is_some();
    if passes {
        let child = turned(plan.children().first()?, disks, budget)?;
        return super::tree::rewire(plan.clone(), vec![child]).ok();
    }
    let j = a.downcast_ref::<HashJoinExec>()?;
    let (build, probe) = cheaper_as_broadcast(j, disks, budget)?;
    j.builder()
        .with_partition_mode(PartitionMode::CollectLeft)
        .with_new_children(vec![Arc::new(CoalescePartitionsExec::new(build)), probe])
        .ok()?
        .build_exec()
        .ok()
}

/// The build and probe inputs (below their exchanges) of partitioned join `j`, if copying
/// the build side to every disk moves fewer bytes than the join would.
fn cheaper_as_broadcast(
    j: &HashJoinExec,
    disks: u64,
    budget: u64,
) -> Option<(Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>)> {
    let probe_kept = matches!(
        j.join_type(),
        JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
    );
    if *j.partition_mode() != PartitionMode::Partitioned
        || !probe_kept
        || j.null_aware
        || colocated(j)
    {
        return None;
    }
    let (build, probe) = (below_exchange(j.left())?, below_exchange(j.right())?);
    let est = |p: &Arc<dyn ExecutionPlan>| super::sortmerge::estimated_bytes(p);
    let build_bytes = est(&build)?;
    let moved = match range_join(j) {
        Some(rj) if rj.stay == 1 => build_bytes,
        Some(_) => est(&probe)?,
        None => build_bytes.saturating_add(est(&probe)?),
    };
    (build_bytes <= budget && build_bytes.saturating_mul(disks) < moved).then_some((build, probe))
}

/// Largest build side the `disks` level broadcasts to every disk of the probe side, bytes and
/// rows (DataFusion's estimates); larger ones are hashed disk to disk with the probe side.
pub const BROADCAST_BYTES: usize = 4 << 20;
/// See [`BROADCAST_BYTES`].
pub const BROADCAST_ROWS: usize = 128 << 10;
