//! Co-partitioned joins at the `disks` level: two tables whose equal join keys always sit on
//! the same disk join there, with no exchange (memik §4: relations declustered on their join
//! attribute; TPC-H's `orders` and `lineitem`, generated part by part on the same disks, are
//! range-declustered on the order key).
//!
//! Nothing here trusts how a table was loaded. Each partition carries the smallest and largest
//! value of its integer and date columns ([`PartitionInfo::bounds`], written at load), and a
//! query's scans say which disk reads which partition. A join of column `a` of table `A` with
//! column `b` of table `B` is co-located when every partition of `A` and every partition of
//! `B` whose key ranges overlap are read at the same disk: then every pair of rows with equal
//! keys meets at one disk, whatever the join type. A partition without bounds (loaded before
//! they existed, or a type without them) makes the answer no, and the join is hashed to the
//! disks as before.
//!
//! [`PartitionInfo::bounds`]: adisk_core::protocol::PartitionInfo::bounds
use super::scan::DiskScanExec;
use datafusion::common::{JoinType, NullEquality};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::Partitioning;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::limit::LocalLimitExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use std::sync::Arc;

/// A column whose values at each disk are values of one table column in the partitions that
/// disk reads (or NULL).
#[derive(Debug, Clone)]
pub(super) struct Origin {
    /// The [`DiskScanExec`].
    scan: Arc<dyn ExecutionPlan>,
    column: String,
}

/// Where a traced column ends: a scan's table column, or the leaf of a scan's fragment.
enum Traced {
    Table(Origin),
    Leaf(usize),
}

/// Whether the partitioned hash join `j` can run where its inputs are, without its two hash
/// exchanges: both inputs are hash repartitions, and on some key pair both columns come from
/// co-partitioned tables.
pub(super) fn colocated(j: &HashJoinExec) -> bool {
    if *j.partition_mode() != PartitionMode::Partitioned
        || j.null_equality() != NullEquality::NullEqualsNothing
    {
        return false;
    }
    let (Some(left), Some(right)) = (below_exchange(j.left()), below_exchange(j.right())) else {
        return false;
    };
    keys_copartitioned(j, &left, &right)
}

/// Whether the collect-left join `j` can run where its inputs are instead of broadcasting its
/// build side: on some key pair both columns come from co-partitioned tables, so every row's
/// matches sit at its own disk, whatever the join type.
pub(super) fn colocated_build(j: &HashJoinExec) -> bool {
    if *j.partition_mode() != PartitionMode::CollectLeft
        || j.null_equality() != NullEquality::NullEqualsNothing
    {
        return false;
    }
    build_input(j).is_some_and(|build| keys_copartitioned(j, &build, j.right()))
}

/// The build side of a collect-left join below the merge of its partitions.
pub(super) fn build_input(j: &HashJoinExec) -> Option<Arc<dyn ExecutionPlan>> {
    let left = j.left();
    if left.downcast_ref::<CoalescePartitionsExec>().is_some() {
        return left.children().first().map(|c| (*c).clone());
    }
    Some(left.clone())
}

/// Whether, on some key pair of `j`, the column of `left` and the column of `right` come from
/// co-partitioned tables.
fn keys_copartitioned(
    j: &HashJoinExec,
    left: &Arc<dyn ExecutionPlan>,
    right: &Arc<dyn ExecutionPlan>,
) -> bool {
    j.on().iter().any(|(l, r)| {
        let (Some(l), Some(r)) = (l.downcast_ref::<Column>(), r.downcast_ref::<Column>()) else {
            return false;
        };
        match (origin(left, l.index()), origin(right, r.index())) {
            (Some(a), Some(b)) => copartitioned(&a, &b),
            _ => false,
        }
    })
}

/// The input of a hash repartition (seen through a cooperative wrapper), if `plan` is one.
pub(super) fn below_exchange(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let node: &dyn ExecutionPlan = plan.as_ref();
    if node.downcast_ref::<CooperativeExec>().is_some() {
        return below_exchange(plan.children().first()?);
    }
    let r = node.downcast_ref::<RepartitionExec>()?;
    if !matches!(r.partitioning(), Partitioning::Hash(..)) {
        return None;
    }
    let child = plan.children().first().map(|c| (*c).clone())?;
    // A round-robin repartition below only spreads batches within a disk's partition.
    match child.downcast_ref::<RepartitionExec>() {
        Some(rr) if matches!(rr.partitioning(), Partitioning::RoundRobinBatch(_)) => {
            rr.children().first().map(|c| (*c).clone())
        }
        _ => Some(child),
    }
}

/// The table column column `index` of `plan`'s output comes from, if its rows never left the
/// disk that read them.
pub(super) fn origin(plan: &Arc<dyn ExecutionPlan>, index: usize) -> Option<Origin> {
    match trace(plan, index)? {
        Traced::Table(o) => Some(o),
        Traced::Leaf(_) => None,
    }
}

fn trace(plan: &Arc<dyn ExecutionPlan>, index: usize) -> Option<Traced> {
    let node: &dyn ExecutionPlan = plan.as_ref();
    if let Some(scan) = node.downcast_ref::<DiskScanExec>() {
        return scan_column(plan, scan, index).map(Traced::Table);
    }
    if node.downcast_ref::<EmptyExec>().is_some() {
        return Some(Traced::Leaf(index));
    }
    let child = |i: usize| trace(plan.children().first()?, i);
    if node.downcast_ref::<CooperativeExec>().is_some()
        || node.downcast_ref::<LocalLimitExec>().is_some()
        || node.downcast_ref::<SortExec>().is_some()
    {
        return child(index);
    }
    if let Some(f) = node.downcast_ref::<FilterExec>() {
        let i = match f.projection() {
            Some(p) => *p.get(index)?,
            None => index,
        };
        return child(i);
    }
    if let Some(p) = node.downcast_ref::<ProjectionExec>() {
        let c = p.expr().get(index)?.expr.downcast_ref::<Column>()?;
        return child(c.index());
    }
    if let Some(r) = node.downcast_ref::<RepartitionExec>() {
        // Round robin spreads batches within a disk; an elided hash exchange moves nothing.
        if matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) || elided(plan) {
            return child(index);
        }
        return None;
    }
    if let Some(a) = node.downcast_ref::<AggregateExec>() {
        // A partial aggregation groups the rows of one disk, a partitioned one the rows its
        // input brought there; either way its keys keep their values.
        let per_partition = matches!(
            a.mode(),
            AggregateMode::Partial
                | AggregateMode::FinalPartitioned
                | AggregateMode::SinglePartitioned
        );
        if !per_partition || !a.group_expr().is_single() {
            return None;
        }
        let (e, _) = a.group_expr().expr().get(index)?;
        return child(e.downcast_ref::<Column>()?.index());
    }
    if let Some(j) = node.downcast_ref::<HashJoinExec>() {
        return join_column(j, index);
    }
    None
}

/// Column `index` of a scan's output, traced through its fragment to the table.
fn scan_column(plan: &Arc<dyn ExecutionPlan>, scan: &DiskScanExec, index: usize) -> Option<Origin> {
    let base = match &scan.plan.fragment {
        Some(f) => match trace(&f.plan, index)? {
            Traced::Leaf(i) => i,
            Traced::Table(_) => return None,
        },
        None => index,
    };
    let column = scan.plan.output_names.get(base)?;
    scan.entry.schema.index_of(column).ok()?;
    Some(Origin {
        scan: plan.clone(),
        column: column.clone(),
    })
}

/// Column `index` of a hash join's output: a probe-side column of a broadcast join (rows stay
/// at the probe side's disk), or either side's column of a co-located join.
fn join_column(j: &HashJoinExec, index: usize) -> Option<Traced> {
    let (side, i) = join_side(j, index)?;
    match j.partition_mode() {
        PartitionMode::CollectLeft
            if side == 1
                && matches!(
                    j.join_type(),
                    JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
                ) =>
        {
            trace(j.right(), i)
        }
        PartitionMode::CollectLeft if colocated_build(j) => match side {
            0 => trace(&build_input(j)?, i),
            _ => trace(j.right(), i),
        },
        PartitionMode::Partitioned if colocated(j) => {
            let input = if side == 0 { j.left() } else { j.right() };
            trace(&below_exchange(input)?, i)
        }
        _ => match range_join(j) {
            Some(rj) if rj.stay == side => {
                let (left, right) = join_inputs(j)?;
                trace(if side == 0 { &left } else { &right }, i)
            }
            _ => None,
        },
    }
}

/// The side (0 left, 1 right) and that side's column of a hash join's output column `index`.
pub(super) fn join_side(j: &HashJoinExec, index: usize) -> Option<(usize, usize)> {
    let index = match &j.projection {
        Some(p) => *p.get(index)?,
        None => index,
    };
    let left_len = j.left().schema().fields().len();
    Some(match j.join_type() {
        JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
            if index < left_len {
                (0, index)
            } else {
                (1, index - left_len)
            }
        }
        JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => (0, index),
        JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => (1, index),
    })
}

/// Whether equal values of `a` and `b` always sit on the same disk: every pair of partitions
/// whose ranges of the two columns overlap is read at one disk.
fn copartitioned(a: &Origin, b: &Origin) -> bool {
    match (ranges(a), ranges(b)) {
        (Some(ra), Some(rb)) => overlaps_meet(&ra, &rb),
        _ => false,
    }
}

/// Whether every two ranges, one of each side, that overlap are on the same disk.
fn overlaps_meet(a: &[(u32, [i64; 2])], b: &[(u32, [i64; 2])]) -> bool {
    a.iter().all(|(da, [lo_a, hi_a])| {
        b.iter()
            .all(|(db, [lo_b, hi_b])| da == db || hi_a < lo_b || hi_b < lo_a)
    })
}

/// (reading disk, [min, max] of the column) per non-empty partition the scan reads; None if
/// one lacks bounds.
fn ranges(o: &Origin) -> Option<Vec<(u32, [i64; 2])>> {
    let scan = o.scan.downcast_ref::<DiskScanExec>()?;
    let column = scan.entry.schema.index_of(&o.column).ok()?;
    let mut out = Vec::new();
    for (i, disk) in scan.disks.iter().enumerate() {
        let reads = scan.reads.get(i)?;
        for (d, p) in &scan.entry.placements {
            let read_here = match reads {
                Some(list) => list.contains(&p.partition),
                None => d == disk,
            };
            if !read_here || p.rows == 0 {
                continue;
            }
            out.push((*disk, (*p.bounds.get(column)?)?));
        }
    }
    Some(out)
}

/// Where the rows of a range-declustered column sit: each disk holds one key range that no
/// other disk's overlaps. `disks` are in key order; `bounds[i]` is the largest key at
/// `disks[i]` (none for the last), so a row with key `k` belongs to the first disk whose
/// bound is at least `k` — the targets and bounds of a range exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Placement {
    pub disks: Vec<u32>,
    pub bounds: Vec<i64>,
}

/// The placement of column `index` of `plan`'s output, if its rows never left the disks that
/// read them, every disk of the scan reads some of them, and each disk's key range is its own.
pub(super) fn placement(plan: &Arc<dyn ExecutionPlan>, index: usize) -> Option<Placement> {
    let o = origin(plan, index)?;
    let scan = o.scan.downcast_ref::<DiskScanExec>()?;
    let ranges = ranges(&o)?;
    let placed = disjoint(&ranges)?;
    let mut all = scan.disks.clone();
    all.sort_unstable();
    let mut have = placed.disks.clone();
    have.sort_unstable();
    (all == have).then_some(placed)
}

/// One key range per disk (the hull of its partitions'), in key order, if no two disks'
/// hulls overlap.
fn disjoint(ranges: &[(u32, [i64; 2])]) -> Option<Placement> {
    let mut hull = std::collections::BTreeMap::<u32, [i64; 2]>::new();
    for (d, [lo, hi]) in ranges {
        let h = hull.entry(*d).or_insert([*lo, *hi]);
        *h = [h[0].min(*lo), h[1].max(*hi)];
    }
    let mut by_key: Vec<(u32, [i64; 2])> = hull.into_iter().collect();
    by_key.sort_by_key(|(_, r)| r[0]);
    if by_key.is_empty() || by_key.windows(2).any(|w| w[0].1[1] >= w[1].1[0]) {
        return None;
    }
    Some(Placement {
        disks: by_key.iter().map(|(d, _)| *d).collect(),
        bounds: by_key[..by_key.len() - 1]
            .iter()
            .map(|(_, r)| r[1])
            .collect(),
    })
}

/// A join one of whose inputs is range-declustered on a join key: that input stays where it
/// is and the other is routed to it by range on the matching key (one exchange instead of
/// two, or instead of a broadcast).
#[derive(Debug, Clone)]
pub(super) struct RangeJoin {
    /// The input that stays: 0 left (build), 1 right (probe).
    pub stay: usize,
    /// The moved input's key column name (the exchange routes on it).
    pub moved_key: String,
    pub placement: Placement,
}

/// The inputs of join `j` as its disks see them: below the hash exchanges of a partitioned
/// join, the build side below the merge of its partitions for a collect-left one.
pub(super) fn join_inputs(
    j: &HashJoinExec,
) -> Option<(Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>)> {
    match j.partition_mode() {
        PartitionMode::Partitioned => Some((
            below_exchange(j.left()).unwrap_or_else(|| j.left().clone()),
            below_exchange(j.right()).unwrap_or_else(|| j.right().clone()),
        )),
        PartitionMode::CollectLeft => Some((build_input(j)?, j.right().clone())),
        PartitionMode::Auto => None,
    }
}

/// Whether `j` can run as a [`RangeJoin`], and how. Every key value then has one disk on both
/// sides, so any join type is exact — except a null-aware anti join (`NOT IN`), which must see
/// every build row. A collect-left join keeps its probe side.
pub(super) fn range_join(j: &HashJoinExec) -> Option<RangeJoin> {
    if j.null_equality() != NullEquality::NullEqualsNothing || j.null_aware {
        return None;
    }
    let (left, right) = join_inputs(j)?;
    let sides = match j.partition_mode() {
        PartitionMode::CollectLeft => vec![1],
        _ => vec![1, 0],
    };
    for stay in sides {
        for (l, r) in j.on() {
            let (Some(l), Some(r)) = (l.downcast_ref::<Column>(), r.downcast_ref::<Column>())
            else {
                continue;
            };
            let (stay_plan, stay_col, moved_plan, moved_col) = match stay {
                1 => (&right, r, &left, l),
                _ => (&left, l, &right, r),
            };
            let moved_schema = moved_plan.schema();
            let unique = moved_schema
                .fields()
                .iter()
                .filter(|f| f.name() == moved_col.name())
                .count()
                == 1;
            let same_type = moved_schema.field(moved_col.index()).data_type()
                == stay_plan.schema().field(stay_col.index()).data_type();
            if !unique
                || !same_type
                || bound_literal(0, moved_schema.field(moved_col.index()).data_type()).is_none()
            {
                continue;
            }
            if let Some(placement) = placement(stay_plan, stay_col.index()) {
                return Some(RangeJoin {
                    stay,
                    moved_key: moved_col.name().to_string(),
                    placement,
                });
            }
        }
    }
    None
}

/// A partition bound `v` (as recorded at load) as a literal of the key's type.
pub(super) fn bound_literal(
    v: i64,
    t: &datafusion::arrow::datatypes::DataType,
) -> Option<datafusion::common::ScalarValue> {
    use datafusion::arrow::datatypes::DataType::*;
    use datafusion::common::ScalarValue as S;
    Some(match t {
        Int8 => S::Int8(Some(i8::try_from(v).ok()?)),
        Int16 => S::Int16(Some(i16::try_from(v).ok()?)),
        Int32 => S::Int32(Some(i32::try_from(v).ok()?)),
        Int64 => S::Int64(Some(v)),
        UInt8 => S::UInt8(Some(u8::try_from(v).ok()?)),
        UInt16 => S::UInt16(Some(u16::try_from(v).ok()?)),
        UInt32 => S::UInt32(Some(u32::try_from(v).ok()?)),
        Date32 => S::Date32(Some(i32::try_from(v).ok()?)),
        Date64 => S::Date64(Some(v)),
        _ => return None,
    })
}

/// Whether the hash exchange `plan` can be left out: one of its keys is range-declustered on
/// the disks (see [`placement`]), so rows with equal keys already sit on one disk.
pub(super) fn elided(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let Some(r) = plan.downcast_ref::<RepartitionExec>() else {
        return false;
    };
    let Partitioning::Hash(exprs, _) = r.partitioning() else {
        return false;
    };
    let Some(child) = plan.children().first().map(|c| (*c).clone()) else {
        return false;
    };
    exprs.iter().any(|e| {
        e.downcast_ref::<Column>()
            .is_some_and(|c| placement(&child, c.index()).is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::{Placement, disjoint, overlaps_meet};

    #[test]
    fn a_placement_is_one_key_range_per_disk_in_key_order() {
        // Disks listed out of key order; disk 2 holds two adjacent partitions.
        let ranges = [
            (1, [101, 200]),
            (2, [201, 250]),
            (2, [251, 300]),
            (0, [1, 100]),
        ];
        assert_eq!(
            disjoint(&ranges),
            Some(Placement {
                disks: vec![0, 1, 2],
                bounds: vec![100, 200],
            })
        );
        // One disk: no bounds, every row to it.
        let one = disjoint(&[(3, [5, 9])]).expect("one disk");
        assert!(one.bounds.is_empty() && one.disks == vec![3]);
        // A disk whose partitions straddle another disk's range has no range of its own.
        assert_eq!(
            disjoint(&[(0, [1, 100]), (0, [201, 300]), (1, [101, 200])]),
            None
        );
        // Hash-like declustering: every disk spans the whole key space.
        assert_eq!(disjoint(&[(0, [1, 300]), (1, [2, 299])]), None);
        // Touching at one key is overlapping.
        assert_eq!(disjoint(&[(0, [1, 100]), (1, [100, 200])]), None);
        assert_eq!(disjoint(&[]), None);
    }

    #[test]
    fn equal_keys_meet_only_when_overlapping_ranges_share_a_disk() {
        // TPC-H style: part k of both tables on disk k, the same key ranges.
        let orders = [(0, [1, 100]), (1, [101, 200]), (2, [201, 300])];
        let lineitem = [(0, [1, 99]), (1, [103, 200]), (2, [201, 300])];
        assert!(overlaps_meet(&orders, &lineitem));
        // Two partitions of one side on one disk is fine.
        let merged = [(0, [1, 200]), (2, [201, 300])];
        let split = [(0, [1, 50]), (0, [51, 200]), (2, [201, 250])];
        assert!(overlaps_meet(&merged, &split));
        // A range crossing a boundary (hash or round-robin declustering) is not.
        let hashed = [(0, [1, 300]), (1, [2, 299]), (2, [3, 298])];
        assert!(!overlaps_meet(&orders, &hashed));
        // Adjacent ranges touching at one key on different disks are not.
        let shifted = [(0, [1, 101]), (1, [102, 200]), (2, [201, 300])];
        assert!(!overlaps_meet(&orders, &shifted));
        // A dead disk's partition read elsewhere moves its range with it.
        let failed_over = [(0, [1, 100]), (0, [101, 200]), (2, [201, 300])];
        assert!(!overlaps_meet(&orders, &failed_over));
    }
}
