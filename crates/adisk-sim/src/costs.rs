//! Every processing cost parameter, with its default and its source.
//!
//! Costs are in processor cycles (per byte, per tuple, per operation) and are turned into
//! time by the clock rate of the processor that executes them, as ADsim and Howsim scale
//! their traces (acharya-… §5.1, uysal-… §3). A source is either a paper's table or a
//! stated assumption (marked "assumption"). Nothing here was tuned to any result.
//! Experiment files may override any of them under `[workload.cost_overrides]`.

use std::collections::BTreeMap;

/// (name, default value, source).
pub const COSTS: &[(&str, f64, &str)] = &[
    (
        "select_cycles_per_byte",
        6.5,
        "riedel-… Table 7/8: database select on the 133 MHz Alpha prototype, 6.5 cycles/byte",
    ),
    (
        "sort_aggregate_cycles_per_byte",
        31.1,
        "riedel-… Table 7/8: aggregation by replacement-selection sort, 31.1 cycles/byte",
    ),
    (
        "bloom_probe_cycles_per_byte",
        6.2,
        "riedel-… Table 7/8: join (Bloom-filter semi-join at the drive), 6.2 cycles/byte",
    ),
    (
        "scan_sum_cycles_per_byte",
        6.5,
        "assumption: scan + SUM of one 4-byte field costs the same per byte as riedel-…'s select (predicate on one field)",
    ),
    (
        "hash_group_cycles_per_tuple",
        200.0,
        "assumption: hash the key, probe, update one aggregate; about two cache misses on a late-1990s processor; no source found, holding ranges in docs/simulator.md (Robustness)",
    ),
    (
        "merge_partial_cycles_per_entry",
        150.0,
        "assumption: receiver probes its table and combines one partial aggregate; no source found, holding ranges in docs/simulator.md (Robustness)",
    ),
    (
        "copy_cycles_per_byte",
        1.0,
        "assumption: memory-to-memory copy (concatenation, forwarding through a host)",
    ),
    (
        "partition_cycles_per_tuple",
        60.0,
        "assumption: NOW-sort partitioner reads a key and appends the 100-byte record to a bucket",
    ),
    (
        "radix_sort_cycles_per_tuple",
        100.0,
        "assumption: partial radix sort, two passes of 11-bit digits over keys (acharya-… §4 footnote 2) plus pointer moves",
    ),
    (
        "merge_cycles_per_tuple",
        150.0,
        "assumption: merge step selects the lowest key among run heads and copies the record",
    ),
    (
        "join_merge_cycles_per_tuple",
        80.0,
        "assumption: sort-merge join step over two sorted streams",
    ),
    (
        "mac_cycles",
        2.0,
        "assumption: one multiply-accumulate of the convolution kernel costs 2 cycles",
    ),
    (
        "earth_cycles_per_byte",
        200.0,
        "assumption: AVHRR preprocessing + navigation/projection of one 10-byte sensor sample ≈ 2000 cycles",
    ),
    (
        "composite_cycles_per_byte",
        20.0,
        "assumption: max-like per-pixel composition of a received sub-image",
    ),
    (
        "dmine_count_cycles_per_item",
        40.0,
        "assumption: count distribution, update one (sparse) counter per item or item pair",
    ),
    (
        "dmine_eclat_cycles_per_byte",
        100.0,
        "assumption: eclat's localized third pass, tid-list intersections per byte of its filtered partition",
    ),
    (
        "index_probe_cycles",
        2000.0,
        "assumption: one B-tree descent (3 levels, cache misses) per index lookup; no source found, holding ranges in docs/simulator.md (Robustness)",
    ),
    (
        "hash_build_cycles_per_tuple",
        200.0,
        "assumption: insert one tuple into a hash table",
    ),
    (
        "hash_probe_cycles_per_tuple",
        150.0,
        "assumption: probe a hash table with one tuple; no source found, holding ranges in docs/simulator.md (Robustness)",
    ),
    (
        "sort_compare_cycles",
        20.0,
        "assumption: one key comparison + swap in an in-memory sort (× log2 n per tuple); no source found, holding ranges in docs/simulator.md (Robustness)",
    ),
    (
        "agg_cycles_per_tuple",
        50.0,
        "assumption: add one tuple into a running aggregate",
    ),
    (
        "fsc_cycles_per_subset",
        50.0,
        "assumption: Apriori hash-tree probe for one k-subset of a transaction",
    ),
    (
        "cluster_cycles_per_value",
        10.0,
        "assumption: pMAFIA histogram/grid update per attribute value",
    ),
    (
        "fft_cycles_per_flop",
        1.0,
        "assumption: one floating-point operation per cycle (500 MHz Pentium III, chiu-… §5); 1-D FFT of N points = 5·N·log2 N flops",
    ),
    (
        "shared_queue_lock_us",
        3.0,
        "uysal-… §3: at-memory fetch-and-op spin lock on the Origin, about 3 µs, taken to grab each block from a shared work queue",
    ),
    (
        "message_bytes_sync",
        64.0,
        "assumption: size of a completion/synchronisation or command message",
    ),
];

/// Cost lookup with overrides applied.
#[derive(Clone, Debug)]
pub struct Costs {
    values: BTreeMap<&'static str, f64>,
}

impl Costs {
    /// Defaults with `overrides` applied; unknown names or negative values are rejected.
    pub fn new(overrides: &BTreeMap<String, f64>) -> Result<Costs, String> {
        let mut values: BTreeMap<&'static str, f64> =
            COSTS.iter().map(|(k, v, _)| (*k, *v)).collect();
        for (k, v) in overrides {
            let Some((name, _, _)) = COSTS.iter().find(|(n, _, _)| n == k) else {
                return Err(format!(
                    "workload.cost_overrides.{k}: unknown cost parameter"
                ));
            };
            if !(v.is_finite() && *v >= 0.0) {
                return Err(format!(
                    "workload.cost_overrides.{k}: must be >= 0, got {v}"
                ));
            }
            values.insert(name, *v);
        }
        Ok(Costs { values })
    }
    /// The value of a named cost (panics on a name not in [`COSTS`]: a programming error).
    pub fn get(&self, name: &str) -> f64 {
        match self.values.get(name) {
            Some(v) => *v,
            None => panic!("cost parameter {name} is not declared in COSTS"),
        }
    }
}
