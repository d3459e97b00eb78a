//! Frequent-itemset mining kernels for `dmine` (association rules over retail transactions).
//!
//! Uysal, Acharya & Saltz, "An Evaluation of Architectural Alternatives for Rapidly Growing
//! Datasets: Active Disks, Clusters, SMPs", §5 "Datamining": *"We used the eclat algorithm as
//! the starting point … It is a multi-pass algorithm with the first two passes same as the
//! Count distribution algorithm … After the first two passes, it clusters the candidate
//! itemsets into equivalence classes and uses these classes to filter, transpose and
//! repartition the input data sets. The third pass is localized and does not require any
//! communication."* They replaced the triangular pass-2 array by a sparse one; both are here
//! ([`PairCounter`]).
//!
//! Chiu, Liao & Choudhary, "Design and Evaluation of Distributed Smart Disk Architecture",
//! §4.2.1: *"In the CD method, each SD executes the Apriori algorithm serially, followed by a
//! global reduction to obtain the final results. The Hybrid Distribution (HD) method partitions
//! the frequent itemsets into sufficiently large sections, then assign a group of SDs to each
//! section."* Count distribution at any pass is [`candidates`] + [`CandidateCounter`] +
//! [`reduce_counts`]; hybrid distribution adds [`partition_candidates`] and [`HybridGrid`].
//!
//! The pieces, per disk and per pass:
//! - pass 1: [`ItemCounter`] → [`reduce`] → [`frequent`];
//! - pass 2: [`PairCounter`] over the frequent items → [`reduce`] → [`frequent`];
//! - eclat (pass 3, local): [`TidListBuilder`] per disk → [`equivalence_classes`] →
//!   [`assign_classes`] → partial lists shipped disk to disk, merged by [`merge_tid_lists`] →
//!   [`eclat_class`] per class;
//! - count / hybrid distribution at pass k ≥ 3: [`candidates`] → ([`partition_candidates`]) →
//!   [`CandidateCounter`] → [`reduce_counts`].
//!
//! [`apriori`] is the single-node oracle. Throughout, `min_count` 0 is treated as 1 (an itemset
//! must occur at least once to be reported). Transactions are item lists; unsorted input or
//! duplicate items are tolerated (each transaction counts an itemset at most once).

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};

/// Errors for bad parameters of the `dmine` generator and kernels.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DmineError {
    /// `|D| = 0`.
    #[error("the number of transactions must be positive")]
    NoTransactions,
    /// `N = 0`.
    #[error("the number of items must be positive")]
    NoItems,
    /// `|L|` is 0 or above the generator's limit.
    #[error("the number of patterns must be in 1..=2^20, got {0}")]
    BadPatternCount(usize),
    /// `|T|` is not a finite positive number at most `min(N, 10000)`.
    #[error("the average transaction length must be finite, positive and at most N, got {0}")]
    BadAvgTransactionLen(f64),
    /// `|I|` is not a finite positive number.
    #[error("the average pattern length must be finite and positive, got {0}")]
    BadAvgPatternLen(f64),
    /// `|I| > N`.
    #[error("the average pattern length {avg_pattern_len} exceeds the {items} items")]
    PatternLenExceedsItems {
        /// The requested `|I|`.
        avg_pattern_len: f64,
        /// The requested `N`.
        items: u32,
    },
    /// A disk index outside `0..disks`, or `disks = 0`.
    #[error("disk {disk} is not one of {disks} disks")]
    BadDisk {
        /// The disk asked for.
        disk: usize,
        /// The number of disks.
        disks: usize,
    },
    /// Zero disks (or sections) to spread work over.
    #[error("the number of disks (or sections) must be positive")]
    ZeroDisks,
    /// A hybrid grid whose disk count is not a multiple of its section count.
    #[error("{disks} disks cannot be split into groups for {sections} sections")]
    UnevenGrid {
        /// The number of disks.
        disks: usize,
        /// The number of candidate sections.
        sections: usize,
    },
    /// Itemsets of different sizes given to [`candidates`].
    #[error("all frequent itemsets of a pass must have the same size")]
    MixedItemsetSizes,
    /// Partial count vectors of different lengths given to [`reduce_counts`].
    #[error("partial count vectors differ in length ({0} vs {1})")]
    CountLengthMismatch(usize, usize),
    /// A support that is not a decimal fraction in `(0, 1]`.
    #[error("support must be in (0, 1], got {0}")]
    BadSupport(String),
    /// A support with more significant digits than [`Support`] holds exactly.
    #[error(
        "support {0} has more than {max} significant digits",
        max = Support::MAX_DIGITS
    )]
    SupportTooPrecise(String),
}

/// Result type of the `dmine` module.
pub type Result<T> = std::result::Result<T, DmineError>;

/// An item pair `(a, b)` with `a < b`: a 2-itemset.
pub type Pair = (u32, u32);

/// The absolute minimum count for a support fraction in `(0, 1]`: `ceil(support ·
/// transactions)`, at least 1, computed exactly on the decimal `support` stands for
/// ([`Support::from_f64`]): 0.0158 of 5 000 transactions is 79, although `0.0158 * 5000.0`
/// is 79.00000000000001 in floating point.
///
/// # Errors
/// A support that is not finite or outside `(0, 1]`.
pub fn min_count(support: f64, transactions: u64) -> Result<u64> {
    Ok(Support::from_f64(support)?.min_count(transactions))
}

/// A support fraction held exactly as the decimal it was written as: `digits / 10^scale`,
/// in `(0, 1]`, trailing zeros removed (so `0.50` equals `0.5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Support {
    digits: u64,
    scale: u32,
}

impl Support {
    /// Most significant digits a support may have (all of them fit a `u64`).
    pub const MAX_DIGITS: usize = 19;

    /// The decimal an `f64` stands for: the shortest one that reads back as the same
    /// `f64` (Rust's `Display`). That is the decimal the user typed whenever it has at most
    /// 15 significant digits.
    ///
    /// # Errors
    /// Not finite or outside `(0, 1]`.
    pub fn from_f64(value: f64) -> Result<Support> {
        if !value.is_finite() {
            return Err(DmineError::BadSupport(value.to_string()));
        }
        value.to_string().parse()
    }

    /// The nearest `f64` (correctly rounded).
    pub fn to_f64(self) -> f64 {
        format!("{}e-{}", self.digits, self.scale)
            .parse()
            .unwrap_or(f64::NAN)
    }

    /// `ceil(support · transactions)`, at least 1, in integers: no rounding anywhere.
    pub fn min_count(self, transactions: u64) -> u64 {
        // digits · transactions < 2^128 < 10^39: when 10^scale overflows, the quotient is
        // below 1.
        let Some(denominator) = 10u128.checked_pow(self.scale) else {
            return 1;
        };
        let count = (u128::from(self.digits) * u128::from(transactions)).div_ceil(denominator);
        // A support ≤ 1 gives at most `transactions`, which fits.
        u64::try_from(count).unwrap_or(u64::MAX).max(1)
    }
}

impl std::str::FromStr for Support {
    type Err = DmineError;

    /// A decimal fraction such as `0.0158`, `.5`, `1` or `158e-4`, read exactly.
    fn from_str(text: &str) -> Result<Support> {
        let bad = || DmineError::BadSupport(text.to_string());
        let t = text.trim();
        let t = t.strip_prefix('+').unwrap_or(t);
        let (mantissa, exponent) = match t.find(['e', 'E']) {
            Some(i) => (&t[..i], t[i + 1..].parse::<i32>().map_err(|_| bad())?),
            None => (t, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() && fraction.is_empty() || !all_digits(whole) || !all_digits(fraction) {
            return Err(bad());
        }
        let written = format!("{whole}{fraction}");
        let significant = written.trim_start_matches('0');
        let kept = significant.trim_end_matches('0');
        // value = kept · 10^-scale
        let scale =
            fraction.len() as i64 - i64::from(exponent) - (significant.len() - kept.len()) as i64;
        match (kept.len() as i64).cmp(&scale) {
            _ if kept.is_empty() => Err(bad()),
            // kept has no leading zero: below 1 exactly when it has at most `scale` digits.
            std::cmp::Ordering::Less | std::cmp::Ordering::Equal => {
                if kept.len() > Self::MAX_DIGITS {
                    return Err(DmineError::SupportTooPrecise(text.to_string()));
                }
                Ok(Support {
                    digits: kept.parse().map_err(|_| bad())?,
                    scale: u32::try_from(scale).map_err(|_| bad())?,
                })
            }
            std::cmp::Ordering::Greater if kept == "1" && scale == 0 => Ok(Support {
                digits: 1,
                scale: 0,
            }),
            std::cmp::Ordering::Greater => Err(bad()),
        }
    }
}

/// `transaction` sorted and deduplicated, borrowed when it already is.
fn normalized(transaction: &[u32]) -> Cow<'_, [u32]> {
    if transaction.windows(2).all(|w| w[0] < w[1]) {
        Cow::Borrowed(transaction)
    } else {
        let mut t = transaction.to_vec();
        t.sort_unstable();
        t.dedup();
        Cow::Owned(t)
    }
}

// ---------------------------------------------------------------------------------------------
// Oracle
// ---------------------------------------------------------------------------------------------

/// Single-node Apriori (Agrawal & Srikant 1994), written plainly as the test oracle: every
/// frequent itemset (sorted items) of every size with its count. Memory `O(candidates)`;
/// time `O(passes * candidates * transactions)` — for tests and small data only.
pub fn apriori(transactions: &[Vec<u32>], min_count: u64) -> BTreeMap<Vec<u32>, u64> {
    let min = min_count.max(1);
    let sets: Vec<Vec<u32>> = transactions
        .iter()
        .map(|t| {
            t.iter()
                .copied()
                .collect::<BTreeSet<u32>>()
                .into_iter()
                .collect()
        })
        .collect();
    let mut level: BTreeMap<Vec<u32>, u64> = BTreeMap::new();
    for set in &sets {
        for &item in set {
            *level.entry(vec![item]).or_insert(0) += 1;
        }
    }
    level.retain(|_, c| *c >= min);
    let items: Vec<u32> = level.keys().map(|k| k[0]).collect();
    let mut result = BTreeMap::new();
    while !level.is_empty() {
        let mut next: BTreeMap<Vec<u32>, u64> = BTreeMap::new();
        for set in level.keys() {
            let last = set[set.len() - 1];
            for &item in items.iter().filter(|&&i| i > last) {
                let mut candidate = set.clone();
                candidate.push(item);
                let all_subsets_frequent = (0..candidate.len()).all(|skip| {
                    let subset: Vec<u32> = candidate
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i != skip)
                        .map(|(_, &x)| x)
                        .collect();
                    level.contains_key(&subset)
                });
                if all_subsets_frequent {
                    next.insert(candidate, 0);
                }
            }
        }
        for set in &sets {
            for (candidate, count) in next.iter_mut() {
                if candidate.iter().all(|i| set.binary_search(i).is_ok()) {
                    *count += 1;
                }
            }
        }
        next.retain(|_, c| *c >= min);
        result.append(&mut level);
        level = next;
    }
    result
}

// ---------------------------------------------------------------------------------------------
// Count distribution: passes 1 and 2, reduction
// ---------------------------------------------------------------------------------------------

/// Pass 1 of count distribution: one disk's partial item counts.
/// Memory: one hash entry per distinct item seen (see [`ItemCounter::bytes`]).
#[derive(Clone, Debug, Default)]
pub struct ItemCounter {
    counts: HashMap<u32, u64>,
    transactions: u64,
}

impl ItemCounter {
    /// An empty counter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts each distinct item of one transaction once.
    pub fn feed(&mut self, transaction: &[u32]) {
        for &item in normalized(transaction).iter() {
            *self.counts.entry(item).or_insert(0) += 1;
        }
        self.transactions += 1;
    }

    /// Feeds a batch of transactions.
    pub fn feed_all(&mut self, transactions: &[Vec<u32>]) {
        transactions.iter().for_each(|t| self.feed(t));
    }

    /// Transactions fed so far (their sum over disks is `|D|`, for [`min_count`]).
    pub fn transactions(&self) -> u64 {
        self.transactions
    }

    /// Approximate heap bytes held (hash entries with ~50% slack).
    pub fn bytes(&self) -> u64 {
        self.counts.capacity() as u64 * 24
    }

    /// The partial counts, sorted by item.
    pub fn finish(self) -> Vec<(u32, u64)> {
        let mut out: Vec<(u32, u64)> = self.counts.into_iter().collect();
        out.sort_unstable();
        out
    }
}

/// How a [`PairCounter`] stores its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairStorage {
    /// A dense triangular array over the frequent items (eclat's original pass 2).
    Triangular,
    /// A hash map of the pairs actually seen (Uysal et al.'s sparse array).
    Sparse,
}

#[derive(Clone, Debug)]
enum PairTable {
    Triangular(Vec<u64>),
    Sparse(HashMap<(u32, u32), u64>),
}

/// Pass 2 of count distribution: one disk's partial counts of pairs of frequent items.
#[derive(Clone, Debug)]
pub struct PairCounter {
    items: Vec<u32>,
    rank: HashMap<u32, u32>,
    table: PairTable,
    ranks: Vec<u32>,
}

impl PairCounter {
    /// Bytes of the triangular array for `f` frequent items (`f (f-1) / 2` 8-byte counters).
    pub fn triangular_bytes(f: usize) -> u64 {
        let f = f as u128;
        u64::try_from(f * f.saturating_sub(1) / 2 * 8).unwrap_or(u64::MAX)
    }

    /// A counter over `frequent_items`: triangular when its array fits `max_table_bytes`, else
    /// sparse (which then grows with the distinct pairs seen; watch [`PairCounter::bytes`]).
    pub fn new(frequent_items: &[u32], max_table_bytes: u64) -> Self {
        let mut items = frequent_items.to_vec();
        items.sort_unstable();
        items.dedup();
        let rank = items
            .iter()
            .enumerate()
            .map(|(r, &i)| (i, r as u32))
            .collect();
        let table = if Self::triangular_bytes(items.len()) <= max_table_bytes {
            PairTable::Triangular(vec![0; items.len() * items.len().saturating_sub(1) / 2])
        } else {
            PairTable::Sparse(HashMap::new())
        };
        PairCounter {
            items,
            rank,
            table,
            ranks: Vec::new(),
        }
    }

    /// The storage chosen by [`PairCounter::new`].
    pub fn storage(&self) -> PairStorage {
        match self.table {
            PairTable::Triangular(_) => PairStorage::Triangular,
            PairTable::Sparse(_) => PairStorage::Sparse,
        }
    }

    /// Counts every pair of frequent items of one transaction once.
    pub fn feed(&mut self, transaction: &[u32]) {
        let t = normalized(transaction);
        self.ranks.clear();
        self.ranks.extend(t.iter().filter_map(|i| self.rank.get(i)));
        let f = self.items.len();
        for (x, &i) in self.ranks.iter().enumerate() {
            for &j in &self.ranks[x + 1..] {
                match &mut self.table {
                    PairTable::Triangular(v) => v[triangle_index(f, i as usize, j as usize)] += 1,
                    PairTable::Sparse(m) => *m.entry((i, j)).or_insert(0) += 1,
                }
            }
        }
    }

    /// Feeds a batch of transactions.
    pub fn feed_all(&mut self, transactions: &[Vec<u32>]) {
        transactions.iter().for_each(|t| self.feed(t));
    }

    /// Approximate heap bytes held by the counters and the item index.
    pub fn bytes(&self) -> u64 {
        let table = match &self.table {
            PairTable::Triangular(v) => v.capacity() as u64 * 8,
            PairTable::Sparse(m) => m.capacity() as u64 * 24,
        };
        table + self.items.capacity() as u64 * 4 + self.rank.capacity() as u64 * 12
    }

    /// The nonzero partial counts as `((a, b), count)` with `a < b`, sorted.
    pub fn finish(self) -> Vec<(Pair, u64)> {
        let items = &self.items;
        let mut out: Vec<(Pair, u64)> = match self.table {
            PairTable::Triangular(v) => {
                let f = items.len();
                let mut out = Vec::new();
                for i in 0..f {
                    for j in i + 1..f {
                        let c = v[triangle_index(f, i, j)];
                        if c > 0 {
                            out.push(((items[i], items[j]), c));
                        }
                    }
                }
                out
            }
            PairTable::Sparse(m) => m
                .into_iter()
                .map(|((i, j), c)| ((items[i as usize], items[j as usize]), c))
                .collect(),
        };
        out.sort_unstable();
        out
    }
}

impl PairCounter {
    /// The nonzero partial counts, to be handed out in chunks ([`PairCounts::next_chunk`])
    /// without a second copy of a triangular table: its array is walked in place; a sparse
    /// table becomes a sorted vector (16 bytes per pair, less than its hash map).
    pub fn into_counts(self) -> PairCounts {
        let rest = match self.table {
            PairTable::Triangular(v) => CountsLeft::Triangular { v, i: 0, j: 1 },
            PairTable::Sparse(m) => {
                let mut pairs: Vec<(Pair, u64)> = m
                    .into_iter()
                    .map(|((i, j), c)| ((self.items[i as usize], self.items[j as usize]), c))
                    .collect();
                pairs.sort_unstable();
                CountsLeft::Sorted { pairs, next: 0 }
            }
        };
        PairCounts {
            items: self.items,
            rest,
        }
    }
}

/// The nonzero counts of a finished [`PairCounter`], handed out in pair order.
#[derive(Clone, Debug)]
pub struct PairCounts {
    items: Vec<u32>,
    rest: CountsLeft,
}

#[derive(Clone, Debug)]
enum CountsLeft {
    Triangular {
        v: Vec<u64>,
        i: usize,
        j: usize,
    },
    Sorted {
        pairs: Vec<(Pair, u64)>,
        next: usize,
    },
}

impl PairCounts {
    /// Up to `max` more nonzero counts, in pair order (empty once all were handed out).
    pub fn next_chunk(&mut self, max: usize) -> Vec<(Pair, u64)> {
        let f = self.items.len();
        match &mut self.rest {
            CountsLeft::Triangular { v, i, j } => {
                let mut out = Vec::with_capacity(max.min(4096));
                while out.len() < max && *i + 1 < f {
                    let c = v[triangle_index(f, *i, *j)];
                    if c > 0 {
                        out.push(((self.items[*i], self.items[*j]), c));
                    }
                    *j += 1;
                    if *j == f {
                        *i += 1;
                        *j = *i + 1;
                    }
                }
                out
            }
            CountsLeft::Sorted { pairs, next } => {
                let end = (*next + max).min(pairs.len());
                let out = pairs[*next..end].to_vec();
                *next = end;
                out
            }
        }
    }

    /// Whether every count was handed out.
    pub fn is_done(&self) -> bool {
        match &self.rest {
            CountsLeft::Triangular { i, .. } => *i + 1 >= self.items.len(),
            CountsLeft::Sorted { pairs, next } => *next >= pairs.len(),
        }
    }

    /// Approximate heap bytes held.
    pub fn bytes(&self) -> u64 {
        let rest = match &self.rest {
            CountsLeft::Triangular { v, .. } => v.capacity() * 8,
            CountsLeft::Sorted { pairs, .. } => pairs.capacity() * 16,
        };
        (rest + self.items.capacity() * 4) as u64
    }
}

/// Index of pair `(i, j)`, `i < j < f`, in a row-major upper triangle without diagonal.
fn triangle_index(f: usize, i: usize, j: usize) -> usize {
    i * (2 * f - i - 1) / 2 + (j - i - 1)
}

/// Sums keyed partial counts from several disks (the global reduction); sorted by key.
pub fn reduce<K: Ord + Clone>(parts: &[Vec<(K, u64)>]) -> Vec<(K, u64)> {
    let mut sum: BTreeMap<K, u64> = BTreeMap::new();
    for (key, count) in parts.iter().flatten() {
        *sum.entry(key.clone()).or_insert(0) += count;
    }
    sum.into_iter().collect()
}

/// The entries of `counts` reaching `min_count`.
pub fn frequent<K: Clone>(counts: &[(K, u64)], min_count: u64) -> Vec<(K, u64)> {
    let min = min_count.max(1);
    counts.iter().filter(|(_, c)| *c >= min).cloned().collect()
}

/// Sums positional partial counts (one vector per disk, all over the same candidate list).
pub fn reduce_counts(parts: &[Vec<u64>]) -> Result<Vec<u64>> {
    let len = parts.first().map_or(0, Vec::len);
    let mut sum = vec![0u64; len];
    for part in parts {
        if part.len() != len {
            return Err(DmineError::CountLengthMismatch(len, part.len()));
        }
        sum.iter_mut().zip(part).for_each(|(s, c)| *s += c);
    }
    Ok(sum)
}

// ---------------------------------------------------------------------------------------------
// Count distribution at pass k: apriori-gen and candidate counting
// ---------------------------------------------------------------------------------------------

/// Apriori-gen: the k-candidates from the frequent (k-1)-itemsets — join pairs sharing their
/// first k-2 items, then prune candidates with an infrequent (k-1)-subset. Output sorted.
/// Itemsets are normalized (sorted, deduplicated) first; mixed sizes are an error.
pub fn candidates(frequent_k_minus_1: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
    let mut sets: Vec<Vec<u32>> = frequent_k_minus_1
        .iter()
        .map(|s| normalized(s).into_owned())
        .collect();
    sets.sort_unstable();
    sets.dedup();
    let size = sets.first().map_or(0, Vec::len);
    if sets.iter().any(|s| s.len() != size) {
        return Err(DmineError::MixedItemsetSizes);
    }
    if size == 0 {
        return Ok(Vec::new());
    }
    let known: HashSet<&[u32]> = sets.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    let mut start = 0;
    while start < sets.len() {
        let prefix = &sets[start][..size - 1];
        let end = start + sets[start..].partition_point(|s| &s[..size - 1] == prefix);
        for a in start..end {
            for b in a + 1..end {
                let mut candidate = sets[a].clone();
                candidate.push(sets[b][size - 1]);
                if all_subsets_known(&candidate, &known) {
                    out.push(candidate);
                }
            }
        }
        start = end;
    }
    Ok(out)
}

/// Whether every subset of `candidate` missing one item is in `known`.
fn all_subsets_known(candidate: &[u32], known: &HashSet<&[u32]>) -> bool {
    let mut subset = Vec::with_capacity(candidate.len());
    (0..candidate.len()).all(|skip| {
        subset.clear();
        subset.extend_from_slice(&candidate[..skip]);
        subset.extend_from_slice(&candidate[skip + 1..]);
        known.contains(subset.as_slice())
    })
}

/// Counts a fixed candidate list over one disk's transactions (count distribution at any pass,
/// and a section's counting in hybrid distribution). Candidates are indexed by first item, so a
/// transaction only probes candidates starting with one of its items.
/// Memory: the candidates, one counter each and the index (see [`CandidateCounter::bytes`]).
#[derive(Clone, Debug)]
pub struct CandidateCounter {
    candidates: Vec<Vec<u32>>,
    counts: Vec<u64>,
    by_first: HashMap<u32, Vec<usize>>,
    empty: Vec<usize>,
}

impl CandidateCounter {
    /// A counter for `candidates` (each normalized; counts keep the given order).
    pub fn new(candidates: &[Vec<u32>]) -> Self {
        let candidates: Vec<Vec<u32>> = candidates
            .iter()
            .map(|c| normalized(c).into_owned())
            .collect();
        let mut by_first: HashMap<u32, Vec<usize>> = HashMap::new();
        let mut empty = Vec::new();
        for (index, c) in candidates.iter().enumerate() {
            match c.first() {
                Some(&first) => by_first.entry(first).or_default().push(index),
                None => empty.push(index),
            }
        }
        CandidateCounter {
            counts: vec![0; candidates.len()],
            candidates,
            by_first,
            empty,
        }
    }

    /// Counts the candidates contained in one transaction.
    pub fn feed(&mut self, transaction: &[u32]) {
        let t = normalized(transaction);
        for (pos, item) in t.iter().enumerate() {
            let Some(indices) = self.by_first.get(item) else {
                continue;
            };
            for &index in indices {
                if is_subset(&self.candidates[index][1..], &t[pos + 1..]) {
                    self.counts[index] += 1;
                }
            }
        }
        self.empty.iter().for_each(|&index| self.counts[index] += 1);
    }

    /// Feeds a batch of transactions.
    pub fn feed_all(&mut self, transactions: &[Vec<u32>]) {
        transactions.iter().for_each(|t| self.feed(t));
    }

    /// The counts so far, in candidate order.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Approximate heap bytes held.
    pub fn bytes(&self) -> u64 {
        let sets: usize = self.candidates.iter().map(|c| c.capacity() * 4 + 24).sum();
        let index = self.by_first.capacity() * 40 + self.candidates.len() * 8;
        (sets + index + self.counts.capacity() * 8) as u64
    }

    /// The counts, in candidate order.
    pub fn finish(self) -> Vec<u64> {
        self.counts
    }
}

/// Whether sorted `small` ⊆ sorted `large` (merge walk).
fn is_subset(small: &[u32], large: &[u32]) -> bool {
    let mut rest = large.iter();
    small.iter().all(|s| rest.any(|l| l == s))
}

/// Counts `candidates` over `transactions` in one go (see [`CandidateCounter`]).
pub fn count_candidates(transactions: &[Vec<u32>], candidates: &[Vec<u32>]) -> Vec<u64> {
    let mut counter = CandidateCounter::new(candidates);
    counter.feed_all(transactions);
    counter.finish()
}

// ---------------------------------------------------------------------------------------------
// Eclat: tid-lists, equivalence classes, repartitioning, local mining
// ---------------------------------------------------------------------------------------------

/// Builds one disk's partial tid-lists of the frequent 2-itemsets (the "transposed" data).
/// Tids are globally unique, so the partial lists of one pair from several disks merge with
/// [`merge_tid_lists`]. Memory: 8 bytes per (transaction, contained frequent pair).
#[derive(Clone, Debug)]
pub struct TidListBuilder {
    pairs: Vec<Pair>,
    index: HashMap<Pair, usize>,
    items: HashSet<u32>,
    lists: Vec<Vec<u64>>,
    last_tid: Option<u64>,
    in_order: bool,
    scratch: Vec<u32>,
}

impl TidListBuilder {
    /// A builder for the given frequent pairs (each normalized to `a < b`; `(a, a)` ignored).
    pub fn new(frequent_pairs: &[Pair]) -> Self {
        let mut pairs: Vec<Pair> = frequent_pairs
            .iter()
            .filter(|(a, b)| a != b)
            .map(|&(a, b)| (a.min(b), a.max(b)))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        let index = pairs.iter().enumerate().map(|(i, &p)| (p, i)).collect();
        let items = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        TidListBuilder {
            lists: vec![Vec::new(); pairs.len()],
            pairs,
            index,
            items,
            last_tid: None,
            in_order: true,
            scratch: Vec::new(),
        }
    }

    /// Appends `tid` to the list of every frequent pair contained in `items`. Tids fed in
    /// increasing order keep lists sorted for free; otherwise [`TidListBuilder::finish`] sorts.
    pub fn feed(&mut self, tid: u64, items: &[u32]) {
        if self.last_tid.is_some_and(|last| tid <= last) {
            self.in_order = false;
        }
        self.last_tid = Some(tid);
        let t = normalized(items);
        self.scratch.clear();
        self.scratch
            .extend(t.iter().filter(|i| self.items.contains(i)));
        for (x, &a) in self.scratch.iter().enumerate() {
            for &b in &self.scratch[x + 1..] {
                if let Some(&i) = self.index.get(&(a, b)) {
                    self.lists[i].push(tid);
                }
            }
        }
    }

    /// Approximate heap bytes held (the lists dominate).
    pub fn bytes(&self) -> u64 {
        let lists: usize = self.lists.iter().map(|l| l.capacity() * 8 + 24).sum();
        (lists + self.index.capacity() * 24 + self.items.capacity() * 8) as u64
    }

    /// The nonempty partial lists, sorted by pair, each sorted and duplicate-free.
    pub fn finish(self) -> Vec<(Pair, Vec<u64>)> {
        let in_order = self.in_order;
        self.pairs
            .into_iter()
            .zip(self.lists)
            .filter(|(_, l)| !l.is_empty())
            .map(|(p, mut l)| {
                if !in_order {
                    l.sort_unstable();
                    l.dedup();
                }
                (p, l)
            })
            .collect()
    }
}

/// An equivalence class of frequent 2-itemsets sharing their first item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EqClass {
    /// The shared first item.
    pub prefix: u32,
    /// The second items `b` of the class's pairs `(prefix, b)`, sorted.
    pub members: Vec<u32>,
    /// Work estimate: `s (s-1) / 2` for `s` members (the pairs intersected at the next level),
    /// the class weight of Zaki et al.'s eclat scheduling.
    pub weight: u64,
}

/// Groups frequent pairs into equivalence classes by prefix (first item), sorted by prefix.
pub fn equivalence_classes(frequent_pairs: &[Pair]) -> Vec<EqClass> {
    let mut by_prefix: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for &(a, b) in frequent_pairs.iter().filter(|(a, b)| a != b) {
        by_prefix.entry(a.min(b)).or_default().insert(a.max(b));
    }
    by_prefix
        .into_iter()
        .map(|(prefix, members)| {
            let s = members.len() as u64;
            EqClass {
                prefix,
                members: members.into_iter().collect(),
                weight: s * s.saturating_sub(1) / 2,
            }
        })
        .collect()
}

/// Greedy load balancing: classes by decreasing weight (ties: lower index first), each to the
/// currently least-loaded disk (ties: lower disk). Returns the disk of each class.
pub fn assign_classes(weights: &[u64], disks: usize) -> Result<Vec<usize>> {
    if disks == 0 {
        return Err(DmineError::ZeroDisks);
    }
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| (Reverse(weights[i]), i));
    let mut loads: BinaryHeap<Reverse<(u64, usize)>> =
        (0..disks).map(|d| Reverse((0, d))).collect();
    let mut disk_of = vec![0; weights.len()];
    for class in order {
        if let Some(Reverse((load, disk))) = loads.pop() {
            disk_of[class] = disk;
            loads.push(Reverse((load.saturating_add(weights[class]), disk)));
        }
    }
    Ok(disk_of)
}

/// Sort-merge of sorted tid-lists (partials of one itemset from several disks); the union,
/// sorted and duplicate-free.
pub fn merge_tid_lists(parts: &[Vec<u64>]) -> Vec<u64> {
    parts
        .iter()
        .fold(Vec::new(), |acc, part| merge_two(&acc, part))
}

fn merge_two(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let next = a[i].min(b[j]);
        i += usize::from(a[i] == next);
        j += usize::from(b[j] == next);
        if out.last() != Some(&next) {
            out.push(next);
        }
    }
    for &x in a[i..].iter().chain(&b[j..]) {
        if out.last() != Some(&x) {
            out.push(x);
        }
    }
    out
}

/// Intersection of two sorted tid-lists.
pub fn intersect_tid_lists(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// The local third pass: every frequent itemset of the class `prefix` (size ≥ 2, starting with
/// `prefix`) with its count, by depth-first tid-list intersection. `members` are `(b, tids of
/// (prefix, b))`; several entries for one `b` (partials from several disks) are merged, lists
/// need not be sorted, and members below `min_count` are dropped. Output sorted by itemset.
/// Memory: the members' lists plus, along the current depth-first path, one set of
/// intersected lists per level (each no longer than its parent's).
pub fn eclat_class(
    prefix: u32,
    members: Vec<(u32, Vec<u64>)>,
    min_count: u64,
) -> Vec<(Vec<u32>, u64)> {
    let min = min_count.max(1);
    let mut grouped: BTreeMap<u32, Vec<Vec<u64>>> = BTreeMap::new();
    for (item, mut tids) in members.into_iter().filter(|(item, _)| *item != prefix) {
        if !tids.windows(2).all(|w| w[0] < w[1]) {
            tids.sort_unstable();
            tids.dedup();
        }
        grouped.entry(item).or_default().push(tids);
    }
    let level: Vec<(u32, Vec<u64>)> = grouped
        .into_iter()
        .map(|(item, parts)| (item, merge_tid_lists(&parts)))
        .filter(|(_, tids)| tids.len() as u64 >= min)
        .collect();
    let mut out = Vec::new();
    mine_level(&[prefix], &level, min, &mut out);
    out.sort_unstable();
    out
}

/// Emits `prefix + item` for each member, then recurses into the class it prefixes.
fn mine_level(prefix: &[u32], level: &[(u32, Vec<u64>)], min: u64, out: &mut Vec<(Vec<u32>, u64)>) {
    for (i, (item, tids)) in level.iter().enumerate() {
        let mut itemset = prefix.to_vec();
        itemset.push(*item);
        let next: Vec<(u32, Vec<u64>)> = level[i + 1..]
            .iter()
            .map(|(other, other_tids)| (*other, intersect_tid_lists(tids, other_tids)))
            .filter(|(_, t)| t.len() as u64 >= min)
            .collect();
        if !next.is_empty() {
            mine_level(&itemset, &next, min, out);
        }
        out.push((itemset, tids.len() as u64));
    }
}

// ---------------------------------------------------------------------------------------------
// Hybrid distribution
// ---------------------------------------------------------------------------------------------

/// Splits candidates into `sections` for hybrid distribution (Chiu §4.2.1: *"partitions the
/// frequent itemsets into sufficiently large sections"*). As in Han, Karypis & Kumar's
/// intelligent data distribution (Chiu's reference for HD), candidates are kept together by
/// first item, and first-item groups are spread by [`assign_classes`] weighted by their
/// candidate count, so a section only probes transactions at its own first items. Empty
/// candidates go with first item 0. Candidate order within a section is preserved.
pub fn partition_candidates(
    candidates: &[Vec<u32>],
    sections: usize,
) -> Result<Vec<Vec<Vec<u32>>>> {
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, c) in candidates.iter().enumerate() {
        groups
            .entry(c.iter().copied().min().unwrap_or(0))
            .or_default()
            .push(i);
    }
    let weights: Vec<u64> = groups.values().map(|g| g.len() as u64).collect();
    let section_of_group = assign_classes(&weights, sections)?;
    let mut section_of = vec![0; candidates.len()];
    for (group, &section) in groups.values().zip(&section_of_group) {
        group.iter().for_each(|&i| section_of[i] = section);
    }
    let mut out = vec![Vec::new(); sections];
    for (c, &s) in candidates.iter().zip(&section_of) {
        out[s].push(c.clone());
    }
    Ok(out)
}

/// The processor grid of hybrid distribution: `disks = sections × rows`. Disk `d` counts
/// section `d % sections` and sits in row `d / sections`.
///
/// Chiu §4.2.1: *"The Hybrid Distribution (HD) method partitions the frequent itemsets into
/// sufficiently large sections, then assign a group of SDs to each section. Thus, the HD method
/// dynamically configures the processor grid for more effective load balancing."* Following
/// Han, Karypis & Kumar: within a row, the disks' transactions circulate
/// ([`HybridGrid::row_peers`]) so each disk counts its section over the whole row's data
/// (candidates split, data moved); the disks of one section — its group,
/// [`HybridGrid::section_group`] — count disjoint rows, and their counts are summed with
/// [`reduce_counts`] (count distribution). `sections = 1` is pure count distribution;
/// `sections = disks` is pure candidate partitioning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HybridGrid {
    disks: usize,
    sections: usize,
}

impl HybridGrid {
    /// A grid of `disks` disks for `sections` candidate sections (`sections` divides `disks`).
    pub fn new(disks: usize, sections: usize) -> Result<Self> {
        if disks == 0 || sections == 0 {
            return Err(DmineError::ZeroDisks);
        }
        if !disks.is_multiple_of(sections) {
            return Err(DmineError::UnevenGrid { disks, sections });
        }
        Ok(HybridGrid { disks, sections })
    }

    /// Number of disks.
    pub fn disks(&self) -> usize {
        self.disks
    }

    /// Number of candidate sections.
    pub fn sections(&self) -> usize {
        self.sections
    }

    /// Number of rows (= disks per section group).
    pub fn rows(&self) -> usize {
        self.disks / self.sections
    }

    /// The section disk `disk` counts.
    pub fn section_of(&self, disk: usize) -> Result<usize> {
        self.check(disk)?;
        Ok(disk % self.sections)
    }

    /// The disks sharing a section (their counts are reduced together), by row.
    pub fn section_group(&self, section: usize) -> Result<Vec<usize>> {
        if section >= self.sections {
            return Err(DmineError::BadDisk {
                disk: section,
                disks: self.sections,
            });
        }
        Ok((0..self.rows())
            .map(|r| r * self.sections + section)
            .collect())
    }

    /// The other disks of `disk`'s row, in ring order after it: whose transactions it must
    /// also count (received by shifting around the row).
    pub fn row_peers(&self, disk: usize) -> Result<Vec<usize>> {
        self.check(disk)?;
        let base = disk - disk % self.sections;
        Ok((1..self.sections)
            .map(|k| base + (disk % self.sections + k) % self.sections)
            .collect())
    }

    fn check(&self, disk: usize) -> Result<()> {
        if disk >= self.disks {
            return Err(DmineError::BadDisk {
                disk,
                disks: self.disks,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dmine::generator::{GenParams, Generator};

    const DISKS: usize = 4;

    /// Test data: 600 transactions split into 4 "disks" by id range.
    fn data() -> (Vec<Vec<u32>>, Vec<std::ops::Range<usize>>) {
        let g = Generator::new(&GenParams {
            transactions: 600,
            avg_transaction_len: 6.0,
            avg_pattern_len: 3.0,
            patterns: 50,
            items: 300,
            seed: 7,
        })
        .unwrap();
        let splits = (0..DISKS)
            .map(|d| {
                let r = g.disk_range(d, DISKS).unwrap();
                r.start as usize..r.end as usize
            })
            .collect();
        (g.transactions(0..600), splits)
    }

    /// The oracle's answer on [`data`] at minimum count `min`, computed once per process.
    fn oracle(min: u64) -> Found {
        static CACHE: std::sync::Mutex<BTreeMap<u64, Found>> =
            std::sync::Mutex::new(BTreeMap::new());
        let mut cache = CACHE.lock().unwrap();
        let found = cache.entry(min).or_insert_with(|| apriori(&data().0, min));
        assert!(
            found.keys().any(|k| k.len() >= 4),
            "support {min} too high to test"
        );
        found.clone()
    }

    type Found = BTreeMap<Vec<u32>, u64>;
    type Counts<K> = Vec<(K, u64)>;

    /// Passes 1 and 2 by count distribution; returns frequent items and pairs.
    fn passes_1_2(
        txs: &[Vec<u32>],
        splits: &[std::ops::Range<usize>],
        min: u64,
        table_bytes: u64,
    ) -> (Counts<u32>, Counts<Pair>) {
        let parts: Vec<_> = splits
            .iter()
            .map(|r| {
                let mut c = ItemCounter::new();
                c.feed_all(&txs[r.clone()]);
                c.finish()
            })
            .collect();
        let items = frequent(&reduce(&parts), min);
        let ids: Vec<u32> = items.iter().map(|(i, _)| *i).collect();
        let parts: Vec<_> = splits
            .iter()
            .map(|r| {
                let mut c = PairCounter::new(&ids, table_bytes);
                c.feed_all(&txs[r.clone()]);
                c.finish()
            })
            .collect();
        (items, frequent(&reduce(&parts), min))
    }

    fn insert_level(
        found: &mut Found,
        sets: &[Vec<u32>],
        counts: &[u64],
        min: u64,
    ) -> Vec<Vec<u32>> {
        let mut next = Vec::new();
        for (s, &c) in sets.iter().zip(counts).filter(|(_, c)| **c >= min) {
            found.insert(s.clone(), c);
            next.push(s.clone());
        }
        next
    }

    fn start(items: &[(u32, u64)], pairs: &[(Pair, u64)]) -> (Found, Vec<Vec<u32>>) {
        let mut found: Found = items.iter().map(|(i, c)| (vec![*i], *c)).collect();
        let level: Vec<Vec<u32>> = pairs.iter().map(|((a, b), _)| vec![*a, *b]).collect();
        for ((a, b), c) in pairs {
            found.insert(vec![*a, *b], *c);
        }
        (found, level)
    }

    fn count_distribution(
        txs: &[Vec<u32>],
        splits: &[std::ops::Range<usize>],
        min: u64,
        table: u64,
    ) -> Found {
        let (items, pairs) = passes_1_2(txs, splits, min, table);
        let (mut found, mut level) = start(&items, &pairs);
        while !level.is_empty() {
            let cands = candidates(&level).unwrap();
            let parts: Vec<Vec<u64>> = splits
                .iter()
                .map(|r| count_candidates(&txs[r.clone()], &cands))
                .collect();
            level = insert_level(&mut found, &cands, &reduce_counts(&parts).unwrap(), min);
        }
        found
    }

    fn eclat(txs: &[Vec<u32>], splits: &[std::ops::Range<usize>], min: u64) -> Found {
        let (items, pairs) = passes_1_2(txs, splits, min, u64::MAX);
        let mut found: Found = items.iter().map(|(i, c)| (vec![*i], *c)).collect();
        let frequent_pairs: Vec<Pair> = pairs.iter().map(|(p, _)| *p).collect();
        let partials: Vec<Vec<(Pair, Vec<u64>)>> = splits
            .iter()
            .map(|r| {
                let mut b = TidListBuilder::new(&frequent_pairs);
                r.clone().for_each(|tid| b.feed(tid as u64, &txs[tid]));
                b.finish()
            })
            .collect();
        let classes = equivalence_classes(&frequent_pairs);
        let weights: Vec<u64> = classes.iter().map(|c| c.weight).collect();
        let disk_of = assign_classes(&weights, DISKS).unwrap();
        for disk in 0..DISKS {
            let mine = classes.iter().zip(&disk_of).filter(|(_, d)| **d == disk);
            for (class, _) in mine {
                // Partial lists from every disk, shipped unmerged: eclat_class merges them.
                let members: Vec<(u32, Vec<u64>)> = partials
                    .iter()
                    .flatten()
                    .filter(|((a, _), _)| *a == class.prefix)
                    .map(|((_, b), l)| (*b, l.clone()))
                    .collect();
                found.extend(eclat_class(class.prefix, members, min));
            }
        }
        found
    }

    fn hybrid(
        txs: &[Vec<u32>],
        splits: &[std::ops::Range<usize>],
        min: u64,
        sections: usize,
    ) -> Found {
        let grid = HybridGrid::new(splits.len(), sections).unwrap();
        let (items, pairs) = passes_1_2(txs, splits, min, 0);
        let (mut found, mut level) = start(&items, &pairs);
        while !level.is_empty() {
            let cands = candidates(&level).unwrap();
            let Some(size) = cands.first().map(Vec::len) else {
                break;
            };
            let parts = partition_candidates(&cands, sections).unwrap();
            for (s, section) in parts.iter().enumerate() {
                let counts: Vec<Vec<u64>> = grid
                    .section_group(s)
                    .unwrap()
                    .into_iter()
                    .map(|disk| {
                        let mut c = CandidateCounter::new(section);
                        c.feed_all(&txs[splits[disk].clone()]);
                        for peer in grid.row_peers(disk).unwrap() {
                            c.feed_all(&txs[splits[peer].clone()]);
                        }
                        c.finish()
                    })
                    .collect();
                let sum = reduce_counts(&counts).unwrap();
                insert_level(&mut found, section, &sum, min);
            }
            level = found.keys().filter(|k| k.len() == size).cloned().collect();
        }
        found
    }

    #[test]
    fn oracle_on_a_hand_example() {
        let txs = vec![vec![1, 3, 4], vec![2, 3, 5], vec![1, 2, 3, 5], vec![2, 5]];
        let got = apriori(&txs, 2);
        let want: Found = [
            (vec![1], 2),
            (vec![2], 3),
            (vec![3], 3),
            (vec![5], 3),
            (vec![1, 3], 2),
            (vec![2, 3], 2),
            (vec![2, 5], 3),
            (vec![3, 5], 2),
            (vec![2, 3, 5], 2),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn apriori_gen_joins_and_prunes() {
        let l3 = vec![
            vec![1, 2, 3],
            vec![1, 2, 4],
            vec![1, 3, 4],
            vec![1, 3, 5],
            vec![2, 3, 4],
        ];
        assert_eq!(candidates(&l3).unwrap(), vec![vec![1, 2, 3, 4]]);
        let l1 = vec![vec![3], vec![1], vec![2]];
        assert_eq!(
            candidates(&l1).unwrap(),
            vec![vec![1, 2], vec![1, 3], vec![2, 3]]
        );
        assert_eq!(
            candidates(&[vec![1], vec![1, 2]]),
            Err(DmineError::MixedItemsetSizes)
        );
        assert_eq!(candidates(&[]).unwrap(), Vec::<Vec<u32>>::new());
    }

    #[test]
    fn count_distribution_equals_apriori() {
        let (txs, splits) = data();
        for min in [15, 30, 45] {
            let want = oracle(min);
            assert_eq!(
                count_distribution(&txs, &splits, min, u64::MAX),
                want,
                "min {min}"
            );
            assert_eq!(
                count_distribution(&txs, &splits, min, 0),
                want,
                "sparse, min {min}"
            );
        }
    }

    #[test]
    fn eclat_equals_apriori() {
        let (txs, splits) = data();
        for min in [15, 30, 45] {
            assert_eq!(eclat(&txs, &splits, min), oracle(min), "min {min}");
        }
    }

    #[test]
    fn hybrid_equals_apriori() {
        let (txs, splits) = data();
        for min in [15, 45] {
            let want = oracle(min);
            for sections in [1, 2, 4] {
                assert_eq!(
                    hybrid(&txs, &splits, min, sections),
                    want,
                    "min {min} s {sections}"
                );
            }
        }
    }

    #[test]
    fn pair_counter_storages_agree_and_report_bytes() {
        let (txs, _) = data();
        let items: Vec<u32> = (0..200).collect();
        let mut dense = PairCounter::new(&items, u64::MAX);
        let mut sparse = PairCounter::new(&items, 0);
        assert_eq!(dense.storage(), PairStorage::Triangular);
        assert_eq!(sparse.storage(), PairStorage::Sparse);
        assert!(
            dense.bytes() >= PairCounter::triangular_bytes(200),
            "{}",
            dense.bytes()
        );
        dense.feed_all(&txs[..300]);
        sparse.feed_all(&txs[..300]);
        assert!(sparse.bytes() > 0);
        let chunked = |c: PairCounter| {
            let mut counts = c.into_counts();
            let mut all = Vec::new();
            while !counts.is_done() {
                let chunk = counts.next_chunk(7);
                assert!(chunk.len() <= 7);
                all.extend(chunk);
            }
            assert!(counts.next_chunk(7).is_empty());
            all
        };
        let (d2, s2) = (chunked(dense.clone()), chunked(sparse.clone()));
        let whole = dense.finish();
        assert_eq!(whole, sparse.finish());
        assert_eq!((&d2, &s2), (&whole, &whole));
    }

    #[test]
    fn tid_lists_merge_across_disks_and_order() {
        let pairs = [(1, 2), (2, 3)];
        let mut a = TidListBuilder::new(&pairs);
        a.feed(5, &[3, 2, 1]);
        a.feed(2, &[1, 2]);
        let mut b = TidListBuilder::new(&pairs);
        b.feed(3, &[1, 2, 3]);
        assert!(b.bytes() > 0);
        let (a, b) = (a.finish(), b.finish());
        assert_eq!(a, vec![((1, 2), vec![2, 5]), ((2, 3), vec![5])]);
        assert_eq!(
            merge_tid_lists(&[a[0].1.clone(), b[0].1.clone()]),
            vec![2, 3, 5]
        );
        assert_eq!(
            intersect_tid_lists(&[1, 3, 5, 7], &[2, 3, 7, 8]),
            vec![3, 7]
        );
    }

    #[test]
    fn classes_are_balanced_greedily() {
        let classes = equivalence_classes(&[(1, 2), (1, 3), (1, 4), (2, 3), (5, 6), (6, 5)]);
        let summary: Vec<(u32, usize, u64)> = classes
            .iter()
            .map(|c| (c.prefix, c.members.len(), c.weight))
            .collect();
        assert_eq!(summary, vec![(1, 3, 3), (2, 1, 0), (5, 1, 0)]);
        assert_eq!(
            assign_classes(&[5, 9, 4, 3, 1], 2).unwrap(),
            vec![1, 0, 1, 0, 1]
        );
        assert_eq!(assign_classes(&[1], 0), Err(DmineError::ZeroDisks));
    }

    #[test]
    fn hybrid_grid_layout_and_errors() {
        let g = HybridGrid::new(6, 3).unwrap();
        assert_eq!(g.rows(), 2);
        assert_eq!(g.section_group(1).unwrap(), vec![1, 4]);
        assert_eq!(g.row_peers(4).unwrap(), vec![5, 3]);
        assert_eq!(g.section_of(5).unwrap(), 2);
        assert_eq!(
            HybridGrid::new(6, 4),
            Err(DmineError::UnevenGrid {
                disks: 6,
                sections: 4
            })
        );
        assert_eq!(HybridGrid::new(0, 1), Err(DmineError::ZeroDisks));
        assert!(g.row_peers(6).is_err());
        let parts = partition_candidates(&[vec![1, 2], vec![1, 3], vec![2, 3]], 2).unwrap();
        assert_eq!(parts, vec![vec![vec![1, 2], vec![1, 3]], vec![vec![2, 3]]]);
    }

    #[test]
    fn min_count_is_exact_where_support_times_transactions_is_whole() {
        // 0.0158 × 5000 is 79.00000000000001 in floating point; the threshold is 79.
        assert_eq!(0.0158 * 5000.0, 79.00000000000001);
        assert_eq!(min_count(0.0158, 5000), Ok(79));
        assert_eq!(min_count(0.0158, 5001), Ok(80));
        assert_eq!(
            "0.0158".parse::<Support>().map(|s| s.min_count(5000)),
            Ok(79)
        );
        // Every support of three decimals against transaction counts that make whole and
        // fractional products: ceil(p · D / 1000) in integers.
        for p in 1..=1000u64 {
            let text = format!("0.{p:03}");
            let support: Support = if p == 1000 {
                "1".parse().unwrap()
            } else {
                text.parse().unwrap()
            };
            let value = if p == 1000 {
                1.0
            } else {
                text.parse::<f64>().unwrap()
            };
            for d in [1u64, 7, 100, 1000, 3000, 5000, 99_999, 1 << 40] {
                let want = (p * d).div_ceil(1000).max(1);
                assert_eq!(support.min_count(d), want, "{text} of {d}");
                assert_eq!(min_count(value, d), Ok(want), "{value} of {d}");
            }
        }
    }

    #[test]
    fn support_reads_decimals_exactly() {
        let s = |t: &str| t.parse::<Support>();
        assert_eq!(s("0.50"), s("0.5"));
        assert_eq!(s(".5"), s("5e-1"));
        assert_eq!(s("158e-4"), s("0.0158"));
        assert_eq!(s("1.000"), s("1"));
        assert_eq!(s("1e-400").map(|s| s.min_count(u64::MAX)), Ok(1));
        assert_eq!(s("0.25").map(|s| s.min_count(10)), Ok(3));
        assert_eq!(s("1").map(|s| s.min_count(10)), Ok(10));
        assert_eq!(s("0.0158").map(Support::to_f64), Ok(0.0158));
        assert_eq!(Support::from_f64(0.0158), s("0.0158"));
        for bad in [
            "0", "0.000", "-0.1", "1.5", "10", "5.", "", ".", "NaN", "inf", "1e", "x",
        ] {
            assert!(
                matches!(s(bad), Err(DmineError::BadSupport(_))),
                "{bad}: {:?}",
                s(bad)
            );
        }
        assert!(matches!(
            s("0.12345678901234567890123"),
            Err(DmineError::SupportTooPrecise(_))
        ));
        // Trailing zeros are not significant.
        assert!(s("0.1000000000000000000000000").is_ok());
    }

    #[test]
    fn bad_support_and_count_lengths() {
        assert_eq!(min_count(0.001, 300), Ok(1));
        assert_eq!(min_count(0.25, 10), Ok(3));
        assert_eq!(min_count(0.0, 10), Err(DmineError::BadSupport("0".into())));
        assert!(min_count(f64::NAN, 10).is_err());
        assert!(min_count(f64::INFINITY, 10).is_err());
        assert!(min_count(-0.5, 10).is_err());
        assert!(min_count(1.0000001, 10).is_err());
        assert_eq!(
            reduce_counts(&[vec![1, 2], vec![3]]),
            Err(DmineError::CountLengthMismatch(2, 1))
        );
    }
}
