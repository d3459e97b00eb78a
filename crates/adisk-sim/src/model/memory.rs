//! Memory-dependent algorithm behaviour.
//!
//! * **Hash aggregation with flushing** (group-by, datacube; acharya-… §4, uysal-… §5): a
//!   node processes `n` tuples whose keys are uniform over `G` groups with a table of
//!   `M = memory / entry_bytes` entries. With uniform keys the expected number of distinct
//!   groups after `t` tuples is `G(1 − e^{−t/G})`, so the table fills after
//!   `t_fill = −G·ln(1 − M/G)` tuples (`M < G`). Each fill ships `M` partial aggregates and
//!   resets the table; at the end the remaining distinct groups are shipped. If the groups
//!   seen in all `n` tuples fit (`G(1 − e^{−n/G}) ≤ M`) there is no flush: one output per
//!   distinct group seen.
//! * **External sort** (NOW-sort, acharya-… §4): runs of the memory size,
//!   `runs = ⌈D / M⌉`; merge fan-in `F = max(2, M / buffer)`; merge passes `⌈log_F runs⌉`.
//!   Data that fits (`runs ≤ 1`) is sorted in memory with no merge pass.
//! * **Hash join**: the build side fits (`R · overhead ≤ M`) or the join partitions both
//!   inputs to disk and reads them back once (one extra pass, Grace style).

/// Outcome of local hash aggregation.
#[derive(Clone, Debug, PartialEq)]
pub struct HashOutcome {
    /// Partial aggregates shipped (including the final table).
    pub output_entries: f64,
    /// Times the table filled and was flushed before the end.
    pub flushes: f64,
    /// True when the whole local result fitted without flushing.
    pub fits: bool,
}

/// Expected distinct groups among `n` uniform draws over `g` groups.
pub fn expected_distinct(n: f64, g: f64) -> f64 {
    if g <= 0.0 || n <= 0.0 {
        return 0.0;
    }
    g * (1.0 - (-n / g).exp())
}

/// Local hash aggregation of `n_tuples` uniform over `groups` with `memory_bytes` of table.
pub fn hash_aggregate(
    n_tuples: f64,
    groups: f64,
    entry_bytes: f64,
    memory_bytes: f64,
) -> HashOutcome {
    let capacity = (memory_bytes / entry_bytes.max(1.0)).floor().max(1.0);
    let seen = expected_distinct(n_tuples, groups);
    if seen <= capacity {
        return HashOutcome {
            output_entries: seen,
            flushes: 0.0,
            fits: true,
        };
    }
    let t_fill = -groups * (1.0 - capacity / groups).ln();
    let flushes = (n_tuples / t_fill).floor();
    let rest = n_tuples - flushes * t_fill;
    let output = flushes * capacity + expected_distinct(rest, groups);
    HashOutcome {
        output_entries: output,
        flushes,
        fits: false,
    }
}

/// Plan of an external sort.
#[derive(Clone, Debug, PartialEq)]
pub struct SortPlan {
    /// Sorted runs produced by run formation.
    pub runs: u64,
    /// Merge passes over the data after run formation (0 when it fits in memory).
    pub merge_passes: u32,
    /// True when the whole input is sorted in memory.
    pub in_memory: bool,
}

/// Runs and merge passes for `data_bytes` with `memory_bytes` and merge buffers of `buffer_bytes`.
pub fn sort_plan(data_bytes: f64, memory_bytes: f64, buffer_bytes: f64) -> SortPlan {
    let mem = memory_bytes.max(1.0);
    let runs = (data_bytes / mem).ceil().max(1.0) as u64;
    if runs <= 1 {
        return SortPlan {
            runs: 1,
            merge_passes: 0,
            in_memory: true,
        };
    }
    let fan_in = (mem / buffer_bytes.max(1.0)).floor().max(2.0);
    let passes = ((runs as f64).ln() / fan_in.ln()).ceil().max(1.0) as u32;
    SortPlan {
        runs,
        merge_passes: passes,
        in_memory: false,
    }
}

/// Extra passes (write + read of both inputs) a hash join needs: 0 if the build side fits.
pub fn hash_join_extra_passes(build_bytes: f64, table_overhead: f64, memory_bytes: f64) -> u32 {
    if build_bytes * table_overhead <= memory_bytes {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fitting_aggregation_ships_each_group_once() {
        let o = hash_aggregate(1e6, 1000.0, 16.0, 1e6);
        assert!(o.fits);
        assert_eq!(o.flushes, 0.0);
        assert!((o.output_entries - 1000.0).abs() < 1.0);
    }

    #[test]
    fn overflowing_aggregation_flushes_and_ships_more_than_the_groups() {
        let o = hash_aggregate(67e6, 3.35e6, 16.0, 16e6);
        assert!(!o.fits);
        assert!(o.flushes >= 1.0);
        assert!(o.output_entries > 3.35e6 * 0.9);
        assert!(o.output_entries <= 67e6);
        // More memory never ships more.
        let o2 = hash_aggregate(67e6, 3.35e6, 16.0, 32e6);
        assert!(o2.output_entries <= o.output_entries);
    }

    #[test]
    fn sort_that_fits_has_no_merge_pass() {
        let p = sort_plan(10e6, 32e6, 256e3);
        assert!(p.in_memory);
        assert_eq!(p.merge_passes, 0);
        let p = sort_plan(1e9, 32e6, 256e3);
        assert_eq!(p.runs, 32);
        assert_eq!(p.merge_passes, 1);
        let p = sort_plan(1e12, 8e6, 1e6);
        assert!(p.merge_passes >= 2);
    }
}
