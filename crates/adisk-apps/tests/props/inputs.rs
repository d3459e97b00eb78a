//! Strategies every property shares: cluster shapes, modes, sizes, key ranges and skews, and
//! the keys a skew draws.
use super::harness::{SHAPES, Shape};
use adisk_apps::Mode;
use adisk_apps::rng::SplitMix64;
use proptest::prelude::*;

/// One of the cluster shapes, exchanging disk to disk or (a quarter of the cases) through
/// the host's relay.
pub fn shape() -> impl Strategy<Value = Shape> {
    let via_host = prop_oneof![3 => Just(false), 1 => Just(true)];
    (proptest::sample::select(SHAPES.to_vec()), via_host)
        .prop_map(|(shape, via_host)| Shape { via_host, ..shape })
}

/// Active or conventional.
pub fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Active), Just(Mode::Conventional)]
}

/// A size in `1..=most`, a tiny one (1–8) in a quarter of the cases.
pub fn size(most: u64) -> impl Strategy<Value = u64> {
    prop_oneof![1 => 1..=most.min(8), 3 => 1..=most]
}

/// A value in `1..=most`, log-uniform, with both ends themselves often.
pub fn log_uniform(most: u64) -> impl Strategy<Value = u64> {
    let top = (most as f64).log10();
    prop_oneof![
        1 => Just(1u64),
        1 => Just(most),
        4 => (0.0..=top).prop_map(move |e| (10f64.powf(e).round() as u64).clamp(1, most)),
    ]
}

/// A key range `1..=10⁹` (keys are drawn in `0..range`).
pub fn key_range() -> impl Strategy<Value = u64> {
    log_uniform(1_000_000_000)
}

/// How keys are drawn from their range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skew {
    /// Uniform over the range.
    Uniform,
    /// `percent` % of the rows take key 0, the others are uniform.
    Hot {
        /// Share of the hot key, percent.
        percent: u8,
    },
    /// Every row takes the same key (`range − 1`).
    Single,
}

/// A skew: uniform, one hot key, or one key for every row.
pub fn skew() -> impl Strategy<Value = Skew> {
    prop_oneof![
        2 => Just(Skew::Uniform),
        2 => (1u8..=99).prop_map(|percent| Skew::Hot { percent }),
        1 => Just(Skew::Single),
    ]
}

/// Row `index`'s key under `skew` in `0..range`, drawn from `rng`.
pub fn key(skew: Skew, range: u64, rng: &mut SplitMix64) -> u64 {
    match skew {
        Skew::Uniform => rng.below(range),
        Skew::Hot { percent } if rng.below(100) < u64::from(percent) => 0,
        Skew::Hot { .. } => rng.below(range),
        Skew::Single => range - 1,
    }
}
