//! Synthetic retail transactions for `dmine`, after Agrawal & Srikant, "Fast Algorithms for
//! Mining Association Rules" (VLDB 1994), §4.3 "Generation of Synthetic Data" — the "Quest
//! datamining dataset generator" that Uysal et al. used for `dmine` (§6, "Datamining") and the
//! IBM generator of Chiu et al. (§5, "Association Rule Mining Frequent Set Counting").
//!
//! A table of `L` potentially-large itemsets ("patterns") is built once from the seed: sizes
//! are Poisson around `I`; a fraction of each pattern's items (exponential with mean
//! [`CORRELATION`], capped at 1) comes from the previous pattern, the rest are uniform over the
//! `N` items; weights are exponential (mean 1) then normalized; each pattern has a corruption
//! level drawn from normal([`CORRUPTION_MEAN`], [`CORRUPTION_SD`]). Transaction `tid` depends
//! only on `(seed, tid)` and that table: its size is Poisson around `T`, and it is filled with
//! patterns picked by weight, each corrupted by dropping random items while a uniform draw is
//! below the pattern's corruption level. A pattern that does not fit is added anyway in half the
//! cases and dropped otherwise (the paper carries it to the next transaction instead, which
//! would make transactions depend on each other); either way the transaction is then complete.

use std::collections::HashSet;
use std::ops::Range;

use super::kernel::{DmineError, Result};
use crate::rng::{SplitMix64, mix};

/// Mean of the exponential fraction of a pattern's items taken from the previous pattern.
pub const CORRELATION: f64 = 0.5;
/// Mean of a pattern's corruption level.
pub const CORRUPTION_MEAN: f64 = 0.5;
/// Standard deviation of a pattern's corruption level.
pub const CORRUPTION_SD: f64 = 0.1;
/// Largest accepted pattern count `L` (the table costs about `L * (I * 4 + 40)` bytes).
pub const MAX_PATTERNS: usize = 1 << 20;
/// Largest accepted average transaction length `T`.
pub const MAX_AVG_LEN: f64 = 10_000.0;

const TABLE_SALT: u64 = 0x6d69_6e65_7461_626c;
const TRANSACTION_SALT: u64 = 0x6d69_6e65_7472_616e;

/// Generator parameters, named as in Agrawal & Srikant's Table 2.
#[derive(Clone, Debug, PartialEq)]
pub struct GenParams {
    /// `|D|`: number of transactions (ids `0..transactions`).
    pub transactions: u64,
    /// `|T|`: average transaction length.
    pub avg_transaction_len: f64,
    /// `|I|`: average size of the maximal potentially-large itemsets.
    pub avg_pattern_len: f64,
    /// `|L|`: number of maximal potentially-large itemsets.
    pub patterns: usize,
    /// `N`: number of items (items are `0..items`).
    pub items: u32,
    /// Seed of the whole data set.
    pub seed: u64,
}

impl Default for GenParams {
    /// T10.I4.D100K with `N = 1000`, `|L| = 2000`, as in the paper's experiments.
    fn default() -> Self {
        GenParams {
            transactions: 100_000,
            avg_transaction_len: 10.0,
            avg_pattern_len: 4.0,
            patterns: 2000,
            items: 1000,
            seed: 1,
        }
    }
}

impl GenParams {
    /// Checks every parameter; the first problem found is returned as a typed error.
    pub fn validate(&self) -> Result<()> {
        if self.transactions == 0 {
            return Err(DmineError::NoTransactions);
        }
        if self.items == 0 {
            return Err(DmineError::NoItems);
        }
        if self.patterns == 0 || self.patterns > MAX_PATTERNS {
            return Err(DmineError::BadPatternCount(self.patterns));
        }
        let t = self.avg_transaction_len;
        if !(t.is_finite() && t > 0.0 && t <= MAX_AVG_LEN && t <= f64::from(self.items)) {
            return Err(DmineError::BadAvgTransactionLen(t));
        }
        let i = self.avg_pattern_len;
        if !(i.is_finite() && i > 0.0) {
            return Err(DmineError::BadAvgPatternLen(i));
        }
        if i > f64::from(self.items) {
            return Err(DmineError::PatternLenExceedsItems {
                avg_pattern_len: i,
                items: self.items,
            });
        }
        Ok(())
    }
}

/// One potentially-large itemset of the pattern table.
#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    /// Its items, sorted and distinct.
    pub items: Vec<u32>,
    /// Probability-like level: items are dropped while a uniform draw is below it.
    pub corruption: f64,
}

/// The transaction generator: parameters plus the pattern table built from the seed.
#[derive(Clone, Debug)]
pub struct Generator {
    params: GenParams,
    patterns: Vec<Pattern>,
    /// Cumulative normalized weights (last entry 1.0), for picking patterns by weight.
    cumulative: Vec<f64>,
}

impl Generator {
    /// Validates `params` and builds the pattern table (cost `O(L * I)`).
    pub fn new(params: &GenParams) -> Result<Self> {
        params.validate()?;
        let mut rng = SplitMix64::new(mix(params.seed ^ TABLE_SALT));
        let mut patterns: Vec<Pattern> = Vec::with_capacity(params.patterns);
        let mut weights = Vec::with_capacity(params.patterns);
        for _ in 0..params.patterns {
            let previous = patterns.last().map_or(&[][..], |p| &p.items[..]);
            let items = pattern_items(&mut rng, params, previous);
            weights.push(rng.exponential(1.0));
            let corruption = rng.normal(CORRUPTION_MEAN, CORRUPTION_SD).clamp(0.0, 1.0);
            patterns.push(Pattern { items, corruption });
        }
        Ok(Generator {
            params: params.clone(),
            patterns,
            cumulative: cumulative_weights(&weights),
        })
    }

    /// The parameters this generator was built from.
    pub fn params(&self) -> &GenParams {
        &self.params
    }

    /// The pattern table (for inspection and tests).
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Transaction `tid`: sorted, distinct items, a function of `(seed, tid)` only. Ids past
    /// `transactions` are generated the same way (the count only sizes [`Generator::disk_range`]).
    pub fn transaction(&self, tid: u64) -> Vec<u32> {
        let mut rng = SplitMix64::for_index(mix(self.params.seed ^ TRANSACTION_SALT), tid);
        let target = rng.poisson(self.params.avg_transaction_len) as usize;
        let mut out: Vec<u32> = Vec::with_capacity(target + 8);
        let mut attempts = 0;
        while out.len() < target && attempts < 4 * target + 16 {
            attempts += 1;
            let kept = self.corrupted_pattern(&mut rng);
            if out.len() + kept.len() > target && rng.unit() < 0.5 {
                break;
            }
            out.extend(kept);
            out.sort_unstable();
            out.dedup();
        }
        out
    }

    /// The transactions `range` (e.g. one disk's share), in id order.
    pub fn transactions(&self, range: Range<u64>) -> Vec<Vec<u32>> {
        range.map(|tid| self.transaction(tid)).collect()
    }

    /// The id range disk `disk` of `disks` generates: contiguous, near-equal shares.
    pub fn disk_range(&self, disk: usize, disks: usize) -> Result<Range<u64>> {
        if disks == 0 || disk >= disks {
            return Err(DmineError::BadDisk { disk, disks });
        }
        let total = u128::from(self.params.transactions);
        let bound = |d: usize| (total * d as u128 / disks as u128) as u64;
        Ok(bound(disk)..bound(disk + 1))
    }

    /// A pattern picked by weight, with items dropped by its corruption level.
    fn corrupted_pattern(&self, rng: &mut SplitMix64) -> Vec<u32> {
        let u = rng.unit();
        let index = self.cumulative.partition_point(|&c| c <= u);
        let pattern = &self.patterns[index.min(self.patterns.len() - 1)];
        let mut kept = pattern.items.clone();
        while !kept.is_empty() && rng.unit() < pattern.corruption {
            let drop = rng.below(kept.len() as u64) as usize;
            kept.swap_remove(drop);
        }
        kept
    }
}

/// The items of one pattern: some from `previous` (correlation), the rest uniform, all distinct.
fn pattern_items(rng: &mut SplitMix64, params: &GenParams, previous: &[u32]) -> Vec<u32> {
    let size = rng
        .poisson(params.avg_pattern_len)
        .clamp(1, u64::from(params.items)) as usize;
    let fraction = rng.exponential(CORRELATION).min(1.0);
    let shared = ((fraction * size as f64).round() as usize).min(previous.len());
    let mut pool = previous.to_vec();
    let mut chosen: HashSet<u32> = HashSet::with_capacity(size);
    for k in 0..shared {
        let pick = k + rng.below((pool.len() - k) as u64) as usize;
        pool.swap(k, pick);
        chosen.insert(pool[k]);
    }
    while chosen.len() < size {
        chosen.insert(rng.below(u64::from(params.items)) as u32);
    }
    let mut items: Vec<u32> = chosen.into_iter().collect();
    items.sort_unstable();
    items
}

/// Normalized running sums of `weights`, the last forced to exactly 1.
fn cumulative_weights(weights: &[f64]) -> Vec<f64> {
    let total: f64 = weights.iter().sum();
    let mut running = 0.0;
    let mut cumulative: Vec<f64> = weights
        .iter()
        .map(|w| {
            running += w / total;
            running
        })
        .collect();
    if let Some(last) = cumulative.last_mut() {
        *last = 1.0;
    }
    cumulative
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> GenParams {
        GenParams {
            transactions: 4000,
            avg_transaction_len: 10.0,
            avg_pattern_len: 4.0,
            patterns: 200,
            items: 500,
            seed: 42,
        }
    }

    #[test]
    fn same_tid_same_transaction_in_any_order() {
        let g = Generator::new(&small()).unwrap();
        let forward: Vec<Vec<u32>> = (0..300).map(|t| g.transaction(t)).collect();
        let again = Generator::new(&small()).unwrap();
        let mut backward: Vec<Vec<u32>> = (0..300).rev().map(|t| again.transaction(t)).collect();
        backward.reverse();
        assert_eq!(forward, backward);
        let other = Generator::new(&GenParams {
            seed: 43,
            ..small()
        })
        .unwrap();
        assert_ne!(forward, other.transactions(0..300));
    }

    #[test]
    fn transactions_sorted_distinct_in_range() {
        let g = Generator::new(&small()).unwrap();
        for t in g.transactions(0..500) {
            assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
            assert!(t.iter().all(|&i| i < 500));
        }
    }

    #[test]
    fn rough_statistics() {
        let p = small();
        let g = Generator::new(&p).unwrap();
        let txs = g.transactions(0..p.transactions);
        let mean = txs.iter().map(Vec::len).sum::<usize>() as f64 / txs.len() as f64;
        assert!((mean - 10.0).abs() < 2.5, "mean length {mean}");
        let sizes = g.patterns().iter().map(|p| p.items.len()).sum::<usize>();
        let mean_pattern = sizes as f64 / p.patterns as f64;
        assert!(
            (mean_pattern - 4.0).abs() < 0.6,
            "mean pattern {mean_pattern}"
        );
        let corr = g.patterns().iter().map(|p| p.corruption).sum::<f64>() / 200.0;
        assert!((corr - 0.5).abs() < 0.05, "corruption {corr}");
        // Patterns make some items far more frequent than uniform (T/N = 2% each).
        let mut counts = vec![0u64; 500];
        txs.iter().flatten().for_each(|&i| counts[i as usize] += 1);
        let max = counts.iter().copied().max().unwrap_or(0);
        assert!(
            max as f64 > 3.0 * 0.02 * p.transactions as f64,
            "max item count {max}"
        );
    }

    #[test]
    fn consecutive_patterns_share_items() {
        let g = Generator::new(&small()).unwrap();
        let shared = g
            .patterns()
            .windows(2)
            .filter(|w| w[1].items.iter().any(|i| w[0].items.contains(i)))
            .count();
        // Uniform picks from 500 items would almost never overlap; correlation makes most do.
        assert!(shared > 100, "{shared}");
    }

    #[test]
    fn disk_ranges_cover_all() {
        let g = Generator::new(&GenParams {
            transactions: 10,
            ..small()
        })
        .unwrap();
        let ranges: Vec<_> = (0..3).map(|d| g.disk_range(d, 3).unwrap()).collect();
        assert_eq!(ranges, vec![0..3, 3..6, 6..10]);
        assert!(matches!(
            g.disk_range(3, 3),
            Err(DmineError::BadDisk { disk: 3, disks: 3 })
        ));
    }

    #[test]
    fn invalid_parameters_are_typed_errors() {
        let bad = |p: GenParams| Generator::new(&p).err();
        let ok = small();
        assert_eq!(
            bad(GenParams {
                transactions: 0,
                ..ok.clone()
            }),
            Some(DmineError::NoTransactions)
        );
        assert_eq!(
            bad(GenParams {
                items: 0,
                ..ok.clone()
            }),
            Some(DmineError::NoItems)
        );
        assert_eq!(
            bad(GenParams {
                patterns: 0,
                ..ok.clone()
            }),
            Some(DmineError::BadPatternCount(0))
        );
        assert_eq!(
            bad(GenParams {
                avg_transaction_len: 0.0,
                ..ok.clone()
            }),
            Some(DmineError::BadAvgTransactionLen(0.0))
        );
        assert!(matches!(
            bad(GenParams {
                avg_transaction_len: f64::NAN,
                ..ok.clone()
            }),
            Some(DmineError::BadAvgTransactionLen(_))
        ));
        assert_eq!(
            bad(GenParams {
                avg_pattern_len: -1.0,
                ..ok.clone()
            }),
            Some(DmineError::BadAvgPatternLen(-1.0))
        );
        assert_eq!(
            bad(GenParams {
                avg_pattern_len: 6.0,
                avg_transaction_len: 2.0,
                items: 5,
                ..ok
            }),
            Some(DmineError::PatternLenExceedsItems {
                avg_pattern_len: 6.0,
                items: 5
            })
        );
    }

    #[test]
    fn tiny_item_universe_terminates() {
        let g = Generator::new(&GenParams {
            items: 1,
            avg_transaction_len: 1.0,
            avg_pattern_len: 1.0,
            patterns: 3,
            ..small()
        })
        .unwrap();
        assert!(
            g.transactions(0..50)
                .iter()
                .all(|t| t.is_empty() || t == &[0])
        );
    }
}
