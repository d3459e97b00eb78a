//! Data cube by PipeHash on active disks: the algorithmic kernel.
//!
//! Sources: Acharya, Uysal, Saltz, "Active Disks: Programming Model, Algorithms and Evaluation"
//! §4 (datacube: lattice, minimum spanning tree by estimated sizes, pipelines, one disklet per
//! pipeline with hash tables sized in proportion to the estimates); Uysal, Acharya, Saltz, "An
//! Evaluation of Architectural Alternatives for Rapidly Growing Datasets: Active Disks, Clusters,
//! SMPs" §5 (per group-by the value range is partitioned over the disks, each disk combines the
//! partials of its range; a disk aggregates locally until memory fills, then partitions its
//! partial results and ships each part to the responsible disk; pipeline results are stored and
//! read by later pipelines); Agarwal et al., "On the Computation of Multidimensional Aggregates"
//! (VLDB 1996), PipeHash: each group-by from its smallest parent, subtrees of that tree chosen to
//! fit memory and computed in one scan of their root, children computed from the parent's hash
//! table.
//!
//! Conventions: a group-by is a [`Mask`] over `d <= 8` dimensions (bit `j` set = dimension `j`
//! grouped; 0 = the "all" group-by). A [`Key`] holds the values of the mask's dimensions packed
//! in increasing dimension order, unused slots 0. Aggregates are `sum(measure)` (i64, wrapping)
//! and `count` (u64), both distributive, so partials can be combined in any order.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use thiserror::Error;

/// Largest number of dimensions.
pub const MAX_DIMS: usize = 8;
/// Accounted bytes per hash-table entry: key (32) + sum (8) + count (8) + table overhead (16).
pub const ENTRY_BYTES: u64 = 64;

/// A group-by: bit `j` set means dimension `j` is a grouping attribute.
pub type Mask = u32;
/// Packed key values of a group-by (see the module doc).
pub type Key = [u32; MAX_DIMS];

/// One fact row: all `d` dimension values (slots beyond `d` are 0) and the measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Dimension values, `dims[j] < cardinalities[j]`.
    pub dims: Key,
    /// The summed measure.
    pub measure: i64,
}

/// One aggregate (partial or final) of a group-by: key, `sum(measure)` and `count(*)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Agg {
    /// Packed key of the group-by this aggregate belongs to.
    pub key: Key,
    /// Sum of the measure (wrapping i64).
    pub sum: i64,
    /// Number of rows.
    pub count: u64,
}

/// Typed errors for bad parameters.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum CubeError {
    /// The number of dimensions is outside `1..=8`.
    #[error("dimension count {0} outside 1..=8")]
    BadDims(usize),
    /// A dimension has cardinality 0.
    #[error("cardinality of dimension {dim} is 0")]
    ZeroCardinality {
        /// The dimension.
        dim: usize,
    },
    /// The Zipf exponent is not finite or outside `0..=10`.
    #[error("zipf exponent {0} must be finite and in 0..=10")]
    BadZipf(f64),
    /// The table has no rows.
    #[error("row count must be at least 1")]
    NoRows,
    /// A sample value is not below its dimension's cardinality.
    #[error("value {value} of dimension {dim} is not below its cardinality {cardinality}")]
    ValueOutOfRange {
        /// The dimension.
        dim: usize,
        /// The offending value.
        value: u32,
        /// The dimension's cardinality.
        cardinality: u32,
    },
    /// The size vector does not have one entry per group-by.
    #[error("expected {expected} size estimates (2^d), got {got}")]
    SizesLen {
        /// `2^d`.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// Bytes per entry is 0.
    #[error("bytes per entry must be at least 1")]
    ZeroEntryBytes,
    /// The memory budget cannot hold a single entry.
    #[error("memory budget of {memory} bytes is below one entry of {entry} bytes")]
    MemoryTooSmall {
        /// The budget.
        memory: u64,
        /// Bytes per entry.
        entry: u64,
    },
    /// Zero disks.
    #[error("disk count must be at least 1")]
    NoDisks,
    /// Key ranges built for a different number of dimensions.
    #[error("key ranges are for {got} dimensions, the plan has {expected}")]
    DimsMismatch {
        /// Dimensions of the plan.
        expected: usize,
        /// Dimensions of the ranges.
        got: usize,
    },
    /// A mask is not a group-by over `d` dimensions.
    #[error("mask {mask:#b} is not a group-by over {d} dimensions")]
    BadMask {
        /// The mask.
        mask: Mask,
        /// Dimensions.
        d: usize,
    },
    /// A group-by's parent is neither the pipeline root nor an earlier group-by containing it.
    #[error("group-by {mask:#b} cannot be computed from {parent:?} in this pipeline")]
    BadParent {
        /// The group-by.
        mask: Mask,
        /// Its declared parent (`None` = raw data).
        parent: Option<Mask>,
    },
    /// A group-by appears twice in a pipeline.
    #[error("group-by {0:#b} appears twice in the pipeline")]
    DuplicateGroupBy(Mask),
    /// Key-range bounds that are not `disks − 1` ascending values per dimension.
    #[error("key-range bounds: {0}")]
    BadBounds(String),
    /// Raw rows fed to a pipeline rooted at a stored group-by, or stored records to a raw one.
    #[error("input does not match the pipeline root {root:?}")]
    RootMismatch {
        /// The pipeline root.
        root: Option<Mask>,
    },
}

/// Checks `1..=8` dimensions, each of cardinality at least 1.
pub fn validate_cardinalities(cards: &[u32]) -> Result<(), CubeError> {
    if cards.is_empty() || cards.len() > MAX_DIMS {
        return Err(CubeError::BadDims(cards.len()));
    }
    match cards.iter().position(|&c| c == 0) {
        Some(dim) => Err(CubeError::ZeroCardinality { dim }),
        None => Ok(()),
    }
}

fn validate_d(d: usize) -> Result<(), CubeError> {
    if d == 0 || d > MAX_DIMS {
        return Err(CubeError::BadDims(d));
    }
    Ok(())
}

/// The finest group-by (all `d` dimensions).
pub fn full_mask(d: usize) -> Mask {
    ((1u64 << d.min(MAX_DIMS)) - 1) as Mask
}

/// The values of `mask`'s dimensions in `key` (its first `popcount(mask)` slots).
pub fn key_values(mask: Mask, key: &Key) -> &[u32] {
    &key[..(mask.count_ones() as usize).min(MAX_DIMS)]
}

/// Projects a packed key of group-by `from` onto its sub-group-by `to` (`to ⊆ from`).
pub fn project(key: &Key, from: Mask, to: Mask) -> Key {
    Projection::new(from, to).apply(key)
}

/// Packs the dims of `mask` out of a full row.
fn pack_row(dims: &Key, mask: Mask) -> Key {
    project(dims, full_mask(MAX_DIMS), mask)
}

/// Precomputed positions for [`project`].
#[derive(Clone, Copy, Debug)]
struct Projection {
    idx: [u8; MAX_DIMS],
    len: u8,
}

impl Projection {
    fn new(from: Mask, to: Mask) -> Self {
        let mut idx = [0u8; MAX_DIMS];
        let (mut pos, mut len) = (0u8, 0u8);
        for j in 0..MAX_DIMS {
            if from >> j & 1 == 1 {
                if to >> j & 1 == 1 {
                    idx[len as usize] = pos;
                    len += 1;
                }
                pos += 1;
            }
        }
        Projection { idx, len }
    }

    fn apply(&self, key: &Key) -> Key {
        let mut out = [0u32; MAX_DIMS];
        for (o, &i) in out.iter_mut().zip(&self.idx[..self.len as usize]) {
            *o = key[i as usize];
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Size estimates
// ---------------------------------------------------------------------------------------------

/// Cardenas' formula: expected distinct values among `n` uniform draws from `domain` values.
fn cardenas(domain: f64, n: f64) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    if domain <= 1.0 {
        return 1.0;
    }
    -domain * (n * (-1.0 / domain).ln_1p()).exp_m1()
}

/// The effective domain `D` for which Cardenas' formula gives `s` distinct in `m` draws
/// (bisection in log space, capped at `domain`).
fn fit_domain(s: f64, m: f64, domain: f64) -> f64 {
    if s >= m || cardenas(domain, m) <= s {
        return domain;
    }
    let (mut lo, mut hi) = (s.max(1.0), domain);
    for _ in 0..100 {
        let mid = (lo * hi).sqrt();
        if cardenas(mid, m) < s {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// Estimated number of groups of every group-by (indexed by mask, `2^d` entries, each ≥ 1).
///
/// Estimator ("Cardenas fit"): for each group-by with domain `D` = product of its dimensions'
/// cardinalities, count the distinct keys `s` among the `m` sample rows, solve Cardenas'
/// formula `D_eff·(1 − (1 − 1/D_eff)^m) = s` for the effective domain `D_eff ≤ D` (which
/// absorbs skew), and answer `D_eff·(1 − (1 − 1/D_eff)^total_rows)`, clamped to
/// `[max(s, 1), min(D, total_rows)]`. An empty sample gives plain Cardenas with `D`; a sample at
/// least as large as `total_rows` gives `s`. Memory: one hash set of at most `m` keys at a time.
pub fn estimate_sizes(
    sample: &[Row],
    total_rows: u64,
    cardinalities: &[u32],
) -> Result<Vec<u64>, CubeError> {
    validate_cardinalities(cardinalities)?;
    validate_sample(sample, cardinalities)?;
    let d = cardinalities.len();
    let (m, n) = (sample.len() as f64, total_rows as f64);
    let estimate = |mask: Mask| {
        let domain: f64 = (0..d)
            .filter(|j| mask >> j & 1 == 1)
            .map(|j| f64::from(cardinalities[j]))
            .product();
        let s = sample
            .iter()
            .map(|r| pack_row(&r.dims, mask))
            .collect::<HashSet<Key>>()
            .len() as f64;
        let est = if sample.is_empty() {
            cardenas(domain, n)
        } else if m >= n {
            s
        } else {
            cardenas(fit_domain(s, m, domain), n)
        };
        est.round().max(s).min(domain.min(n)).max(1.0) as u64
    };
    Ok((0..=full_mask(d)).map(estimate).collect())
}

fn validate_sample(sample: &[Row], cards: &[u32]) -> Result<(), CubeError> {
    for row in sample {
        for (dim, (&value, &cardinality)) in row.dims.iter().zip(cards).enumerate() {
            if value >= cardinality {
                return Err(CubeError::ValueOutOfRange {
                    dim,
                    value,
                    cardinality,
                });
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Plan: minimum spanning tree and pipelines
// ---------------------------------------------------------------------------------------------

/// One group-by of a pipeline.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlannedGroupBy {
    /// The group-by.
    pub mask: Mask,
    /// Its MST parent: `None` = raw data, otherwise the mask with one more dimension.
    pub parent: Option<Mask>,
    /// Estimated number of groups (≥ 1).
    pub estimate: u64,
    /// Its hash table's share of the memory budget, in proportion to the estimates.
    pub table_bytes: u64,
}

/// A pipeline: group-bys computed in one scan of `root`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pipeline {
    /// What is scanned: `None` = raw data, `Some(m)` = stored results of `m` (from an earlier
    /// pipeline).
    pub root: Option<Mask>,
    /// Group-bys in topological order: each parent is `root` or an earlier entry.
    pub group_bys: Vec<PlannedGroupBy>,
}

/// The PipeHash schedule of the whole cube.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Number of dimensions.
    pub d: usize,
    /// MST parent of every mask (`None` for the full mask, which is computed from raw data).
    pub parent: Vec<Option<Mask>>,
    /// Pipelines in execution order; every group-by appears in exactly one.
    pub pipelines: Vec<Pipeline>,
}

/// The lattice's minimum spanning tree: each group-by's parent is its smallest-estimate parent
/// (a mask with one more dimension; ties to the smaller mask); the full mask's is raw data.
pub fn min_spanning_tree(sizes: &[u64], d: usize) -> Result<Vec<Option<Mask>>, CubeError> {
    validate_d(d)?;
    check_sizes_len(sizes, d)?;
    let full = full_mask(d);
    let parent_of = |m: Mask| {
        (0..d)
            .filter(|j| m >> j & 1 == 0)
            .map(|j| m | 1 << j)
            .min_by_key(|&p| (sizes[p as usize], p))
    };
    Ok((0..=full).map(parent_of).collect())
}

fn check_sizes_len(sizes: &[u64], d: usize) -> Result<(), CubeError> {
    let expected = 1usize << d;
    if sizes.len() != expected {
        return Err(CubeError::SizesLen {
            expected,
            got: sizes.len(),
        });
    }
    Ok(())
}

/// PipeHash schedule: the MST, cut into pipelines whose hash tables fit `memory_bytes`.
///
/// Greedy, as PipeHash's "select a subtree that fits, compute it in one scan of its root,
/// repeat on the rest": roots are taken in order (raw data first, then computed group-bys in
/// the order they were computed); from a root, uncomputed MST descendants are added
/// smallest-estimate first while `Σ estimate × bytes_per_entry ≤ memory_bytes` (a child only
/// after its parent). A group-by too large on its own forms a single-group-by pipeline (its
/// table then spills, which the active-disk algorithm handles). Table shares:
/// `max(bytes_per_entry, memory × estimate / Σ estimates)`, so shares sum to ≤ `memory_bytes`.
pub fn plan(
    sizes: &[u64],
    d: usize,
    memory_bytes: u64,
    bytes_per_entry: u64,
) -> Result<Plan, CubeError> {
    let parent = min_spanning_tree(sizes, d)?;
    check_memory(memory_bytes, bytes_per_entry)?;
    let est = |m: Mask| sizes[m as usize].max(1);
    let mut children: Vec<Vec<Mask>> = vec![Vec::new(); parent.len() + 1];
    let child_slot = |p: Option<Mask>| p.map_or(parent.len(), |m| m as usize);
    for (m, &p) in parent.iter().enumerate() {
        children[child_slot(p)].push(m as Mask);
    }
    let mut done = vec![false; parent.len()];
    let mut roots: VecDeque<Option<Mask>> = VecDeque::from([None]);
    let mut pipelines = Vec::new();
    while let Some(&root) = roots.front() {
        let chosen = select_subtree(
            &children,
            child_slot(root),
            &done,
            &est,
            memory_bytes,
            bytes_per_entry,
        );
        if chosen.is_empty() {
            roots.pop_front();
            continue;
        }
        for &m in &chosen {
            done[m as usize] = true;
            roots.push_back(Some(m));
        }
        let group_bys = share_memory(&chosen, &parent, &est, memory_bytes, bytes_per_entry);
        pipelines.push(Pipeline { root, group_bys });
    }
    Ok(Plan {
        d,
        parent,
        pipelines,
    })
}

/// Splits every pipeline of more than `max` group-bys (at least 1): its first `max` (a prefix
/// of a topological order, so closed under parents) stay; the rest become pipelines rooted at
/// their nearest ancestor among those kept (or the same root), placed right after it, so every
/// root is still stored before it is read. A job graph bounds the result tables one job writes.
pub fn limit_group_bys(plan: Plan, max: usize) -> Plan {
    let max = max.max(1);
    let mut queue: VecDeque<Pipeline> = plan.pipelines.into();
    let mut pipelines = Vec::new();
    while let Some(p) = queue.pop_front() {
        if p.group_bys.len() <= max {
            pipelines.push(p);
            continue;
        }
        let (head, tail) = p.group_bys.split_at(max);
        let mut anchor: HashMap<Mask, Option<Mask>> = HashMap::new();
        let mut rest: Vec<Pipeline> = Vec::new();
        for g in tail {
            let a = match g.parent {
                Some(m) if head.iter().any(|h| h.mask == m) => Some(m),
                Some(m) if anchor.contains_key(&m) => anchor[&m],
                _ => p.root,
            };
            anchor.insert(g.mask, a);
            match rest.iter_mut().find(|r| r.root == a) {
                Some(r) => r.group_bys.push(g.clone()),
                None => rest.push(Pipeline {
                    root: a,
                    group_bys: vec![g.clone()],
                }),
            }
        }
        pipelines.push(Pipeline {
            root: p.root,
            group_bys: head.to_vec(),
        });
        for r in rest.into_iter().rev() {
            queue.push_front(r);
        }
    }
    Plan { pipelines, ..plan }
}

impl Pipeline {
    /// Re-divides `memory_bytes` among the pipeline's hash tables in proportion to their
    /// estimates (each at least one entry), as [`plan`] does.
    pub fn reshare(&mut self, memory_bytes: u64, bytes_per_entry: u64) {
        let total: u128 = self.group_bys.iter().map(|g| u128::from(g.estimate)).sum();
        for g in &mut self.group_bys {
            let share = u128::from(memory_bytes) * u128::from(g.estimate) / total.max(1);
            g.table_bytes = (share as u64).max(bytes_per_entry);
        }
    }
}

fn check_memory(memory_bytes: u64, bytes_per_entry: u64) -> Result<(), CubeError> {
    if bytes_per_entry == 0 {
        return Err(CubeError::ZeroEntryBytes);
    }
    if memory_bytes < bytes_per_entry {
        return Err(CubeError::MemoryTooSmall {
            memory: memory_bytes,
            entry: bytes_per_entry,
        });
    }
    Ok(())
}

/// Uncomputed descendants of the root at `slot`, smallest first, while they fit (topological).
fn select_subtree(
    children: &[Vec<Mask>],
    slot: usize,
    done: &[bool],
    est: &dyn Fn(Mask) -> u64,
    memory: u64,
    entry: u64,
) -> Vec<Mask> {
    let mut frontier: BinaryHeap<Reverse<(u64, Mask)>> = BinaryHeap::new();
    let push = |f: &mut BinaryHeap<_>, list: &[Mask]| {
        for &c in list.iter().filter(|&&c| !done[c as usize]) {
            f.push(Reverse((est(c), c)));
        }
    };
    push(&mut frontier, &children[slot]);
    let (mut chosen, mut used) = (Vec::new(), 0u64);
    while let Some(Reverse((e, c))) = frontier.pop() {
        let need = e.saturating_mul(entry);
        if chosen.is_empty() || used.saturating_add(need) <= memory {
            chosen.push(c);
            used = used.saturating_add(need);
            push(&mut frontier, &children[c as usize]);
        }
    }
    chosen
}

fn share_memory(
    chosen: &[Mask],
    parent: &[Option<Mask>],
    est: &dyn Fn(Mask) -> u64,
    memory: u64,
    entry: u64,
) -> Vec<PlannedGroupBy> {
    let total: u128 = chosen.iter().map(|&m| u128::from(est(m))).sum();
    chosen
        .iter()
        .map(|&mask| {
            let share = u128::from(memory) * u128::from(est(mask)) / total.max(1);
            PlannedGroupBy {
                mask,
                parent: parent[mask as usize],
                estimate: est(mask),
                table_bytes: (share as u64).max(entry),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Hash table of one group-by
// ---------------------------------------------------------------------------------------------

/// Hash table of aggregates for one group-by, capped at a number of entries.
#[derive(Clone, Debug)]
pub struct GroupTable {
    mask: Mask,
    cap_entries: usize,
    entry_bytes: u64,
    map: HashMap<Key, (i64, u64)>,
}

impl GroupTable {
    /// A table for `mask` holding at most `max(1, cap_bytes / bytes_per_entry)` entries.
    pub fn new(mask: Mask, cap_bytes: u64, bytes_per_entry: u64) -> Result<Self, CubeError> {
        if bytes_per_entry == 0 {
            return Err(CubeError::ZeroEntryBytes);
        }
        let cap = (cap_bytes / bytes_per_entry).max(1);
        Ok(GroupTable {
            mask,
            cap_entries: usize::try_from(cap).unwrap_or(usize::MAX),
            entry_bytes: bytes_per_entry,
            map: HashMap::new(),
        })
    }

    /// An uncapped table (for the responsible disk's final merge of its key range).
    pub fn unbounded(mask: Mask) -> Self {
        GroupTable {
            mask,
            cap_entries: usize::MAX,
            entry_bytes: ENTRY_BYTES,
            map: HashMap::new(),
        }
    }

    /// The group-by.
    pub fn mask(&self) -> Mask {
        self.mask
    }

    /// Adds `(sum, count)` to `key`'s aggregate. Returns `true` when the table has reached its
    /// cap: the caller must [`drain`](Self::drain) before inserting again (an insert into a
    /// full table is still accepted, so nothing is lost, but then exceeds the cap).
    #[must_use]
    pub fn insert(&mut self, key: Key, sum: i64, count: u64) -> bool {
        let e = self.map.entry(key).or_insert((0, 0));
        e.0 = e.0.wrapping_add(sum);
        e.1 += count;
        self.is_full()
    }

    /// Adds partial aggregates; returns `true` if the table is at or over its cap afterwards.
    pub fn merge(&mut self, partials: &[Agg]) -> bool {
        for p in partials {
            let _ = self.insert(p.key, p.sum, p.count);
        }
        self.is_full()
    }

    /// Whether the table holds its cap of entries.
    pub fn is_full(&self) -> bool {
        self.map.len() >= self.cap_entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Accounted bytes: entries × bytes per entry.
    pub fn bytes(&self) -> u64 {
        self.map.len() as u64 * self.entry_bytes
    }

    /// The cap in bytes (entries × bytes per entry).
    pub fn cap_bytes(&self) -> u64 {
        (self.cap_entries as u64).saturating_mul(self.entry_bytes)
    }

    /// Hands out all entries sorted by key and empties the table (keeps its allocation).
    pub fn drain(&mut self) -> Vec<Agg> {
        let mut out: Vec<Agg> = self
            .map
            .drain()
            .map(|(key, (sum, count))| Agg { key, sum, count })
            .collect();
        out.sort_unstable();
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Key ranges: which disk combines which part of a group-by
// ---------------------------------------------------------------------------------------------

/// Per group-by range partitioning of the keys over the disks (Uysal §5: "for each group-by,
/// they partition the range of values over all the disks"): a group-by is range-partitioned on
/// its first (lowest-numbered) dimension; `bounds[j]` are the `disks − 1` ascending split
/// values of dimension `j`. The "all" group-by (one key) belongs to disk 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRanges {
    disks: usize,
    bounds: Vec<Vec<u32>>,
}

impl KeyRanges {
    /// Equal-width ranges: disk `k` gets values `[⌈card·k/disks⌉, ⌈card·(k+1)/disks⌉)`.
    pub fn uniform(cardinalities: &[u32], disks: usize) -> Result<Self, CubeError> {
        validate_cardinalities(cardinalities)?;
        if disks == 0 {
            return Err(CubeError::NoDisks);
        }
        let bounds = cardinalities
            .iter()
            .map(|&c| {
                (1..disks as u64)
                    .map(|k| (u64::from(c) * k).div_ceil(disks as u64) as u32)
                    .collect()
            })
            .collect();
        Ok(KeyRanges { disks, bounds })
    }

    /// Equal-frequency ranges from the sample's quantiles of each dimension (balances skewed
    /// data); an empty sample gives [`uniform`](Self::uniform).
    pub fn from_sample(
        sample: &[Row],
        cardinalities: &[u32],
        disks: usize,
    ) -> Result<Self, CubeError> {
        let mut ranges = Self::uniform(cardinalities, disks)?;
        validate_sample(sample, cardinalities)?;
        if sample.is_empty() {
            return Ok(ranges);
        }
        for (j, b) in ranges.bounds.iter_mut().enumerate() {
            let mut vals: Vec<u32> = sample.iter().map(|r| r.dims[j]).collect();
            vals.sort_unstable();
            *b = (1..disks).map(|k| vals[k * vals.len() / disks]).collect();
        }
        Ok(ranges)
    }

    /// Ranges with the given split values: `bounds[j]` holds `disks − 1` ascending values of
    /// dimension `j` (1..=8 dimensions).
    pub fn from_bounds(bounds: Vec<Vec<u32>>, disks: usize) -> Result<Self, CubeError> {
        validate_d(bounds.len())?;
        if disks == 0 {
            return Err(CubeError::NoDisks);
        }
        for (j, b) in bounds.iter().enumerate() {
            if b.len() + 1 != disks {
                return Err(CubeError::BadBounds(format!(
                    "dimension {j} has {} split values for {disks} disks",
                    b.len()
                )));
            }
            if b.windows(2).any(|w| w[0] > w[1]) {
                return Err(CubeError::BadBounds(format!(
                    "dimension {j}: split values must not decrease"
                )));
            }
        }
        Ok(KeyRanges { disks, bounds })
    }

    /// The split values of every dimension.
    pub fn bounds(&self) -> &[Vec<u32>] {
        &self.bounds
    }

    /// Number of disks.
    pub fn disks(&self) -> usize {
        self.disks
    }

    /// Number of dimensions.
    pub fn dims(&self) -> usize {
        self.bounds.len()
    }

    /// The disk responsible for combining `key` of group-by `mask` (`0..disks`).
    pub fn responsible_disk(&self, mask: Mask, key: &Key) -> usize {
        if mask == 0 {
            return 0;
        }
        let first = mask.trailing_zeros() as usize;
        self.bounds
            .get(first)
            .map_or(0, |b| b.partition_point(|&s| s <= key[0]))
    }
}

// ---------------------------------------------------------------------------------------------
// Pipeline executor (one disk, one pipeline)
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Node {
    mask: Mask,
    proj: Projection,
    children: Vec<usize>,
    table: GroupTable,
}

/// Runs one [`Pipeline`] on one disk's share of its root (the disklet of Acharya §4).
///
/// Root records are projected into the tables of the group-bys whose parent is the root. A
/// child is computed from its parent's hash table, as in PipeHash: whenever a table is drained
/// (because it reached its cap, or at [`finish`](Self::finish), parents before children), its
/// entries are first folded into its children's tables and then partitioned by
/// [`KeyRanges::responsible_disk`] into the outgoing queues. Since sum and count are
/// distributive, merging all shipped partials of a group-by at the responsible disks gives its
/// exact result. Memory: tables ≤ Σ `table_bytes` of the pipeline, plus the outgoing queues
/// ([`outgoing_bytes`](Self::outgoing_bytes)) until taken.
#[derive(Clone, Debug)]
pub struct PipelineExec {
    root: Option<Mask>,
    root_mask: Mask,
    d: usize,
    top: Vec<usize>,
    nodes: Vec<Node>,
    ranges: KeyRanges,
    outgoing: Vec<Vec<(Mask, Agg)>>,
    outgoing_len: u64,
    entry_bytes: u64,
    spills: u64,
}

impl PipelineExec {
    /// Validates `pipeline` against `d` and `ranges` and allocates its (empty) tables.
    pub fn new(
        pipeline: &Pipeline,
        d: usize,
        bytes_per_entry: u64,
        ranges: &KeyRanges,
    ) -> Result<Self, CubeError> {
        validate_d(d)?;
        if ranges.dims() != d {
            return Err(CubeError::DimsMismatch {
                expected: d,
                got: ranges.dims(),
            });
        }
        let full = full_mask(d);
        let root_mask = pipeline.root.unwrap_or(full);
        if root_mask > full {
            return Err(CubeError::BadMask { mask: root_mask, d });
        }
        let mut exec = PipelineExec {
            root: pipeline.root,
            root_mask,
            d,
            top: Vec::new(),
            nodes: Vec::new(),
            ranges: ranges.clone(),
            outgoing: vec![Vec::new(); ranges.disks()],
            outgoing_len: 0,
            entry_bytes: bytes_per_entry,
            spills: 0,
        };
        for g in &pipeline.group_bys {
            exec.add_node(g, bytes_per_entry)?;
        }
        Ok(exec)
    }

    fn add_node(&mut self, g: &PlannedGroupBy, entry: u64) -> Result<(), CubeError> {
        let full = full_mask(self.d);
        if g.mask > full {
            return Err(CubeError::BadMask {
                mask: g.mask,
                d: self.d,
            });
        }
        if self.nodes.iter().any(|n| n.mask == g.mask) {
            return Err(CubeError::DuplicateGroupBy(g.mask));
        }
        let bad = CubeError::BadParent {
            mask: g.mask,
            parent: g.parent,
        };
        let (parent_mask, parent_idx) = if g.parent == self.root {
            (self.root_mask, None)
        } else {
            let p = g.parent.ok_or_else(|| bad.clone())?;
            let idx = self
                .nodes
                .iter()
                .position(|n| n.mask == p)
                .ok_or_else(|| bad.clone())?;
            (p, Some(idx))
        };
        let strict = parent_mask != g.mask || (self.root.is_none() && parent_idx.is_none());
        if parent_mask & g.mask != g.mask || !strict {
            return Err(bad);
        }
        let idx = self.nodes.len();
        match parent_idx {
            None => self.top.push(idx),
            Some(p) => self.nodes[p].children.push(idx),
        }
        self.nodes.push(Node {
            mask: g.mask,
            proj: Projection::new(parent_mask, g.mask),
            children: Vec::new(),
            table: GroupTable::new(g.mask, g.table_bytes, entry)?,
        });
        Ok(())
    }

    /// Feeds raw fact rows (pipelines rooted at raw data only).
    pub fn feed_rows(&mut self, rows: &[Row]) -> Result<(), CubeError> {
        if self.root.is_some() {
            return Err(CubeError::RootMismatch { root: self.root });
        }
        for r in rows {
            let key = pack_row(&r.dims, self.root_mask);
            self.push_root(&key, r.measure, 1);
        }
        Ok(())
    }

    /// Feeds stored results of the root group-by (pipelines rooted at a stored group-by only).
    pub fn feed_stored(&mut self, records: &[Agg]) -> Result<(), CubeError> {
        if self.root.is_none() {
            return Err(CubeError::RootMismatch { root: None });
        }
        for a in records {
            self.push_root(&a.key, a.sum, a.count);
        }
        Ok(())
    }

    fn push_root(&mut self, key: &Key, sum: i64, count: u64) {
        for t in 0..self.top.len() {
            let idx = self.top[t];
            let k = self.nodes[idx].proj.apply(key);
            self.insert(idx, k, sum, count);
        }
    }

    fn insert(&mut self, idx: usize, key: Key, sum: i64, count: u64) {
        if self.nodes[idx].table.insert(key, sum, count) {
            self.spills += 1;
            self.flush(idx);
        }
    }

    /// Drains node `idx`: fold its entries into its children, then ship them.
    fn flush(&mut self, idx: usize) {
        let entries = self.nodes[idx].table.drain();
        for c in 0..self.nodes[idx].children.len() {
            let child = self.nodes[idx].children[c];
            let proj = self.nodes[child].proj;
            for e in &entries {
                self.insert(child, proj.apply(&e.key), e.sum, e.count);
            }
        }
        let mask = self.nodes[idx].mask;
        self.outgoing_len += entries.len() as u64;
        for e in entries {
            let dest = self.ranges.responsible_disk(mask, &e.key);
            self.outgoing[dest].push((mask, e));
        }
    }

    /// Ends the scan: drains every table (parents first) into the outgoing queues.
    pub fn finish(&mut self) {
        for idx in 0..self.nodes.len() {
            self.flush(idx);
        }
    }

    /// Takes the queued partials, indexed by destination disk: `(group-by, aggregate)`.
    pub fn take_outgoing(&mut self) -> Vec<Vec<(Mask, Agg)>> {
        self.outgoing_len = 0;
        let empty = vec![Vec::new(); self.outgoing.len()];
        std::mem::replace(&mut self.outgoing, empty)
    }

    /// Accounted bytes of the queued partials (entries × bytes per entry).
    pub fn outgoing_bytes(&self) -> u64 {
        self.outgoing_len * self.entry_bytes
    }

    /// Accounted bytes of all hash tables (≤ the pipeline's Σ `table_bytes`).
    pub fn table_bytes(&self) -> u64 {
        self.nodes.iter().map(|n| n.table.bytes()).sum()
    }

    /// How many times a table reached its cap and was drained early.
    pub fn spills(&self) -> u64 {
        self.spills
    }
}

// ---------------------------------------------------------------------------------------------
// Oracle
// ---------------------------------------------------------------------------------------------

/// Naive cube: every group-by computed directly from the rows (`d` clamped to 8). Keys are the
/// mask's dimension values in increasing dimension order; values `(sum, count)`.
pub fn naive_cube(rows: &[Row], d: usize) -> BTreeMap<(Mask, Vec<u32>), (i64, u64)> {
    let d = d.min(MAX_DIMS);
    let mut cube = BTreeMap::new();
    for row in rows {
        for mask in 0..(1u32 << d) {
            let key: Vec<u32> = (0..d)
                .filter(|j| mask & (1 << j) != 0)
                .map(|j| row.dims[j])
                .collect();
            let e = cube.entry((mask, key)).or_insert((0i64, 0u64));
            e.0 = e.0.wrapping_add(row.measure);
            e.1 += 1;
        }
    }
    cube
}

#[cfg(test)]
mod tests {
    use super::super::generator::{GenParams, Generator};
    use super::*;
    use crate::rng::SplitMix64;

    fn generator(rows: u64, cards: &[u32], zipf: f64, seed: u64) -> Generator {
        Generator::new(GenParams {
            rows,
            cardinalities: cards.to_vec(),
            zipf,
            seed,
        })
        .unwrap()
    }

    /// Exact group-by sizes, counted from the oracle.
    fn exact_sizes(cube: &BTreeMap<(Mask, Vec<u32>), (i64, u64)>, d: usize) -> Vec<u64> {
        let mut sizes = vec![0u64; 1 << d];
        for (mask, _) in cube.keys() {
            sizes[*mask as usize] += 1;
        }
        sizes
    }

    fn random_sizes(d: usize, seed: u64, spread: u64) -> Vec<u64> {
        let mut r = SplitMix64::new(seed);
        (0..1u64 << d).map(|_| 1 + r.below(spread)).collect()
    }

    #[test]
    fn estimates_within_loose_factor_on_uniform_data() {
        let cards = [8, 30, 120, 5];
        let g = generator(8000, &cards, 0.0, 3);
        let rows = g.rows(0, 8000);
        let exact = exact_sizes(&naive_cube(&rows, 4), 4);
        let est = estimate_sizes(&g.sample(800), 8000, &cards).unwrap();
        assert_eq!(est[0], 1);
        for (m, (&e, &x)) in est.iter().zip(&exact).enumerate() {
            let ratio = e as f64 / x as f64;
            assert!(
                (0.5..2.0).contains(&ratio),
                "mask {m:#b}: est {e} exact {x}"
            );
        }
        assert_eq!(estimate_sizes(&rows, 8000, &cards).unwrap(), exact);
        let blind = estimate_sizes(&[], 8000, &cards).unwrap();
        assert_eq!(blind[0b0001], 8);
        assert!(blind[0b1111] <= 8000);
    }

    #[test]
    fn mst_parent_is_smallest_estimate_parent() {
        for d in 1..=6 {
            let sizes = random_sizes(d, d as u64, 10); // small spread: many ties
            let parent = min_spanning_tree(&sizes, d).unwrap();
            let full = (1u32 << d) - 1;
            assert_eq!(parent[full as usize], None);
            for m in 0..full {
                let mut best: Option<(u64, u32)> = None;
                for p in 0..=full {
                    let is_parent = p & m == m && (p ^ m).count_ones() == 1;
                    if is_parent && best.is_none_or(|b| (sizes[p as usize], p) < b) {
                        best = Some((sizes[p as usize], p));
                    }
                }
                assert_eq!(parent[m as usize], best.map(|b| b.1), "d {d} mask {m:#b}");
            }
        }
    }

    fn check_plan(plan: &Plan, sizes: &[u64], memory: u64, entry: u64) {
        let n = 1usize << plan.d;
        let mst = min_spanning_tree(sizes, plan.d).unwrap();
        let mut when = vec![None; n];
        for (i, p) in plan.pipelines.iter().enumerate() {
            if let Some(r) = p.root {
                assert!(
                    when[r as usize].is_some_and(|w| w < i),
                    "root {r:#b} not stored yet"
                );
            }
            let mut in_pipe = Vec::new();
            for g in &p.group_bys {
                assert!(when[g.mask as usize].is_none(), "{:#b} twice", g.mask);
                when[g.mask as usize] = Some(i);
                assert_eq!(g.parent, mst[g.mask as usize]);
                assert!(g.parent == p.root || in_pipe.contains(&g.parent));
                assert_eq!(g.estimate, sizes[g.mask as usize].max(1));
                assert!(g.table_bytes >= entry);
                in_pipe.push(Some(g.mask));
            }
            let shares: u64 = p.group_bys.iter().map(|g| g.table_bytes).sum();
            let need: u64 = p.group_bys.iter().map(|g| g.estimate * entry).sum();
            assert!(shares <= memory, "pipeline {i} shares {shares} > {memory}");
            assert!(
                need <= memory || p.group_bys.len() == 1,
                "pipeline {i} does not fit"
            );
        }
        assert!(when.iter().all(Option::is_some), "a group-by is missing");
    }

    #[test]
    fn plan_covers_every_group_by_once_and_fits() {
        for d in 1..=8 {
            let sizes = random_sizes(d, 100 + d as u64, 1000);
            for memory in [64, 64 * 500, 64 * 5000, u64::MAX / 2] {
                let p = plan(&sizes, d, memory, 64).unwrap();
                check_plan(&p, &sizes, memory, 64);
            }
            let all = plan(&sizes, d, u64::MAX / 2, 64).unwrap();
            assert_eq!(all.pipelines.len(), 1);
            assert_eq!(all.pipelines[0].root, None);
        }
        let sizes = estimate_sizes(&[], 1_000_000, &[1000, 100, 10, 10]).unwrap();
        let p = plan(&sizes, 4, 64 * 20_000, 64).unwrap();
        check_plan(&p, &sizes, 64 * 20_000, 64);
        assert_eq!(p.pipelines[0].group_bys.len(), 1, "full group-by alone");
        assert!(p.pipelines.len() > 2);
    }

    #[test]
    fn limited_plans_stay_valid() {
        for d in [4, 6, 8] {
            let sizes = random_sizes(d, 7 + d as u64, 1000);
            for memory in [64 * 500, u64::MAX / 2] {
                let p = plan(&sizes, d, memory, 64).unwrap();
                for max in [1, 3, 7, 250] {
                    let l = limit_group_bys(p.clone(), max);
                    assert!(l.pipelines.iter().all(|q| q.group_bys.len() <= max));
                    check_plan(&l, &sizes, u64::MAX, 64);
                    let ranges = KeyRanges::uniform(&vec![3; d], 2).unwrap();
                    for q in &l.pipelines {
                        PipelineExec::new(q, d, 64, &ranges).unwrap();
                    }
                }
            }
        }
        let r = KeyRanges::from_bounds(vec![vec![3, 5], vec![0, 0]], 3).unwrap();
        assert_eq!(r.responsible_disk(0b10, &[0; 8]), 2);
        assert_eq!(r.responsible_disk(0b01, &[4; 8]), 1);
        assert!(KeyRanges::from_bounds(vec![vec![5, 3]], 3).is_err());
        assert!(KeyRanges::from_bounds(vec![vec![5]], 3).is_err());
    }

    #[test]
    fn group_table_caps_drains_and_merges() {
        let mut t = GroupTable::new(0b11, 3 * 64 + 10, 64).unwrap();
        let k = |a: u32, b: u32| [a, b, 0, 0, 0, 0, 0, 0];
        assert!(!t.insert(k(1, 2), 5, 1));
        assert!(!t.insert(k(1, 2), -7, 2));
        assert!(!t.insert(k(0, 9), 1, 1));
        assert_eq!((t.len(), t.bytes(), t.cap_bytes()), (2, 128, 192));
        assert!(t.insert(k(3, 3), 4, 1), "third key fills the cap of 3");
        let out = t.drain();
        assert!(t.is_empty() && t.bytes() == 0);
        let want = vec![
            Agg {
                key: k(0, 9),
                sum: 1,
                count: 1,
            },
            Agg {
                key: k(1, 2),
                sum: -2,
                count: 3,
            },
            Agg {
                key: k(3, 3),
                sum: 4,
                count: 1,
            },
        ];
        assert_eq!(out, want);
        let mut u = GroupTable::unbounded(0b11);
        assert!(!u.merge(&out) && !u.merge(&out));
        let twice: Vec<Agg> = want
            .iter()
            .map(|a| Agg {
                sum: a.sum * 2,
                count: a.count * 2,
                ..*a
            })
            .collect();
        assert_eq!(u.drain(), twice);
        assert!(
            GroupTable::new(1, 0, 64).unwrap().insert(k(0, 0), 1, 1),
            "cap ≥ 1 entry"
        );
    }

    #[test]
    fn projection_and_key_ranges() {
        let key = [10, 20, 30, 40, 0, 0, 0, 0]; // mask 0b11110: dims 1, 2, 3, 4
        assert_eq!(project(&key, 0b11110, 0b10100), [20, 40, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            key_values(0b10100, &project(&key, 0b11110, 0b10100)),
            &[20, 40]
        );
        let r = KeyRanges::uniform(&[8, 3], 4).unwrap();
        let disk = |m, v| r.responsible_disk(m, &[v, 99, 0, 0, 0, 0, 0, 0]);
        let dim0: Vec<usize> = (0..8).map(|v| disk(0b01, v)).collect();
        assert_eq!(dim0, [0, 0, 1, 1, 2, 2, 3, 3]);
        let dim1: Vec<usize> = (0..3).map(|v| disk(0b10, v)).collect();
        assert_eq!(dim1, [0, 1, 2]);
        assert_eq!(
            disk(0b11, 5),
            2,
            "partitioned on the first dim of the group-by"
        );
        assert_eq!(r.responsible_disk(0, &[0; 8]), 0);
        let g = generator(4000, &[1000], 2.0, 9);
        let max_load = |ranges: &KeyRanges| {
            let mut load = [0u32; 4];
            for row in g.rows(0, 4000) {
                load[ranges.responsible_disk(1, &row.dims)] += 1;
            }
            load.into_iter().max()
        };
        let by_sample = KeyRanges::from_sample(&g.sample(400), &[1000], 4).unwrap();
        let by_width = KeyRanges::uniform(&[1000], 4).unwrap();
        assert!(max_load(&by_sample) < max_load(&by_width));
    }

    /// Simulated multi-disk run: rows split over the disks, small tables that spill, partials
    /// shipped to and merged at the responsible disks, results stored there and read back as
    /// roots of later pipelines. Returns the union of the stored results and the spill count.
    fn run_disks(g: &Generator, disks: usize, memory: u64, ranges: &KeyRanges) -> (Cube, u64) {
        let p = g.params();
        let d = p.dims();
        let sizes = estimate_sizes(&g.sample(500), p.rows, &p.cardinalities).unwrap();
        let plan = plan(&sizes, d, memory, ENTRY_BYTES).unwrap();
        check_plan(&plan, &sizes, memory, ENTRY_BYTES);
        let mut stored: Vec<HashMap<Mask, Vec<Agg>>> = vec![HashMap::new(); disks];
        let mut spills = 0;
        let share = p.rows.div_ceil(disks as u64);
        for pipe in &plan.pipelines {
            let mut merge: Vec<BTreeMap<Mask, GroupTable>> = vec![BTreeMap::new(); disks];
            for (k, disk) in stored.iter().enumerate() {
                let mut ex = PipelineExec::new(pipe, d, ENTRY_BYTES, ranges).unwrap();
                match pipe.root {
                    None => {
                        for chunk in g.rows(k as u64 * share, share).chunks(97) {
                            ex.feed_rows(chunk).unwrap();
                            assert!(ex.table_bytes() <= memory);
                            deliver(ex.take_outgoing(), &mut merge);
                        }
                    }
                    Some(r) => {
                        let input = disk.get(&r).map_or(&[][..], |v| &v[..]);
                        for chunk in input.chunks(31) {
                            ex.feed_stored(chunk).unwrap();
                            assert!(ex.table_bytes() <= memory);
                            deliver(ex.take_outgoing(), &mut merge);
                        }
                    }
                }
                ex.finish();
                assert_eq!(ex.table_bytes(), 0);
                deliver(ex.take_outgoing(), &mut merge);
                assert_eq!(ex.outgoing_bytes(), 0);
                spills += ex.spills();
            }
            for (k, tables) in merge.into_iter().enumerate() {
                for (mask, mut t) in tables {
                    stored[k].insert(mask, t.drain());
                }
            }
        }
        (collect(&stored, ranges), spills)
    }

    type Cube = BTreeMap<(Mask, Vec<u32>), (i64, u64)>;

    fn deliver(out: Vec<Vec<(Mask, Agg)>>, merge: &mut [BTreeMap<Mask, GroupTable>]) {
        for (dest, list) in out.into_iter().enumerate() {
            for (mask, a) in list {
                let t = merge[dest]
                    .entry(mask)
                    .or_insert_with(|| GroupTable::unbounded(mask));
                let _ = t.merge(&[a]);
            }
        }
    }

    fn collect(stored: &[HashMap<Mask, Vec<Agg>>], ranges: &KeyRanges) -> Cube {
        let mut cube = BTreeMap::new();
        for (k, disk) in stored.iter().enumerate() {
            for (&mask, aggs) in disk {
                for a in aggs {
                    assert_eq!(ranges.responsible_disk(mask, &a.key), k);
                    let key = key_values(mask, &a.key).to_vec();
                    assert!(cube.insert((mask, key), (a.sum, a.count)).is_none());
                }
            }
        }
        cube
    }

    #[test]
    fn four_disks_with_spills_equal_naive_cube() {
        let cards = [24, 10, 6, 4];
        let g = generator(6000, &cards, 0.0, 11);
        let oracle = naive_cube(&g.rows(0, 6000), 4);
        let ranges = KeyRanges::uniform(&cards, 4).unwrap();
        let (cube, spills) = run_disks(&g, 4, ENTRY_BYTES * 150, &ranges);
        assert!(
            spills > 100,
            "memory must be small enough to spill: {spills}"
        );
        assert_eq!(cube, oracle);
        let (single, spills) = run_disks(&g, 1, ENTRY_BYTES * 100_000, &ranges_1(&cards));
        assert_eq!(spills, 0);
        assert_eq!(single, oracle);
    }

    fn ranges_1(cards: &[u32]) -> KeyRanges {
        KeyRanges::uniform(cards, 1).unwrap()
    }

    #[test]
    fn skewed_five_dims_three_disks_equal_naive_cube() {
        let cards = [50, 20, 9, 5, 3];
        let g = generator(4000, &cards, 1.2, 5);
        let oracle = naive_cube(&g.rows(0, 4000), 5);
        let ranges = KeyRanges::from_sample(&g.sample(300), &cards, 3).unwrap();
        let (cube, spills) = run_disks(&g, 3, ENTRY_BYTES * 300, &ranges);
        assert!(spills > 10, "{spills}");
        assert_eq!(cube, oracle);
        let one = generator(50, &[7], 0.0, 1);
        let (cube, _) = run_disks(&one, 4, ENTRY_BYTES, &KeyRanges::uniform(&[7], 4).unwrap());
        assert_eq!(cube, naive_cube(&one.rows(0, 50), 1));
    }

    #[test]
    fn bad_parameters_give_typed_errors() {
        let sizes = vec![1u64; 16];
        assert_eq!(plan(&sizes, 0, 640, 64), Err(CubeError::BadDims(0)));
        assert_eq!(plan(&sizes, 9, 640, 64), Err(CubeError::BadDims(9)));
        assert_eq!(
            plan(&sizes, 3, 640, 64),
            Err(CubeError::SizesLen {
                expected: 8,
                got: 16
            })
        );
        assert_eq!(plan(&sizes, 4, 640, 0), Err(CubeError::ZeroEntryBytes));
        assert_eq!(
            plan(&sizes, 4, 63, 64),
            Err(CubeError::MemoryTooSmall {
                memory: 63,
                entry: 64
            })
        );
        let row = Row {
            dims: [1, 5, 0, 0, 0, 0, 0, 0],
            measure: 0,
        };
        assert_eq!(
            estimate_sizes(&[row], 10, &[2, 5]),
            Err(CubeError::ValueOutOfRange {
                dim: 1,
                value: 5,
                cardinality: 5
            })
        );
        assert_eq!(estimate_sizes(&[], 10, &[]), Err(CubeError::BadDims(0)));
        assert_eq!(KeyRanges::uniform(&[2, 5], 0), Err(CubeError::NoDisks));
        assert_eq!(
            KeyRanges::uniform(&[2, 0], 1),
            Err(CubeError::ZeroCardinality { dim: 1 })
        );
        assert_eq!(
            GroupTable::new(1, 64, 0).unwrap_err(),
            CubeError::ZeroEntryBytes
        );
        exec_errors();
    }

    fn exec_errors() {
        let ranges = KeyRanges::uniform(&[4, 4, 4], 2).unwrap();
        let gb = |mask, parent| PlannedGroupBy {
            mask,
            parent,
            estimate: 1,
            table_bytes: 64,
        };
        let pipe = |root, group_bys| Pipeline { root, group_bys };
        let new = |p: &Pipeline, d| PipelineExec::new(p, d, 64, &ranges).unwrap_err();
        let raw = pipe(None, vec![gb(0b111, None), gb(0b011, Some(0b111))]);
        assert_eq!(
            new(&raw, 2),
            CubeError::DimsMismatch {
                expected: 2,
                got: 3
            }
        );
        let bad = pipe(Some(0b011), vec![gb(0b101, Some(0b011))]);
        assert_eq!(
            new(&bad, 3),
            CubeError::BadParent {
                mask: 0b101,
                parent: Some(0b011)
            }
        );
        let same = pipe(Some(0b011), vec![gb(0b011, Some(0b011))]);
        assert!(matches!(new(&same, 3), CubeError::BadParent { .. }));
        let orphan = pipe(Some(0b111), vec![gb(0b001, Some(0b011))]);
        assert!(matches!(new(&orphan, 3), CubeError::BadParent { .. }));
        let dup = pipe(
            Some(0b111),
            vec![gb(0b001, Some(0b111)), gb(0b001, Some(0b111))],
        );
        assert_eq!(new(&dup, 3), CubeError::DuplicateGroupBy(0b001));
        let big = pipe(Some(0b1000), vec![]);
        assert_eq!(new(&big, 3), CubeError::BadMask { mask: 0b1000, d: 3 });
        let mut ex = PipelineExec::new(&raw, 3, 64, &ranges).unwrap();
        assert_eq!(
            ex.feed_stored(&[]),
            Err(CubeError::RootMismatch { root: None })
        );
        let stored = pipe(Some(0b111), vec![gb(0b001, Some(0b111))]);
        let mut ex = PipelineExec::new(&stored, 3, 64, &ranges).unwrap();
        assert_eq!(
            ex.feed_rows(&[]),
            Err(CubeError::RootMismatch { root: Some(0b111) })
        );
    }
}
