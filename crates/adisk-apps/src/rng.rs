//! A small deterministic generator (SplitMix64) for the applications' data generators: every
//! record is derived from a seed and its index, so any disk can generate its share alone and
//! the host can regenerate any record.

/// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit state advanced by a constant, output mixed.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting at `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// A generator for item `index` of the stream `seed` (independent of every other index).
    pub fn for_index(seed: u64, index: u64) -> Self {
        SplitMix64::new(mix(seed ^ mix(index.wrapping_add(0x632b_e59b_d9b4_e019))))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// A uniform integer in `0..bound` (`bound > 0`), by Lemire's multiply-shift.
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A uniform float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponentially distributed float with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// A normally distributed float (Box–Muller).
    pub fn normal(&mut self, mean: f64, sd: f64) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        mean + sd * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// A Poisson-distributed integer with the given mean (Knuth's method below 30, a rounded
    /// normal above).
    pub fn poisson(&mut self, mean: f64) -> u64 {
        if mean <= 0.0 {
            return 0;
        }
        if mean > 30.0 {
            return self.normal(mean, mean.sqrt()).round().max(0.0) as u64;
        }
        let limit = (-mean).exp();
        let mut product = self.unit();
        let mut count = 0;
        while product > limit {
            product *= self.unit();
            count += 1;
        }
        count
    }
}

/// The SplitMix64 output mix (a bijection on `u64`).
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_spread() {
        let a: Vec<u64> = (0..4)
            .map(|i| SplitMix64::for_index(7, i).next_u64())
            .collect();
        let b: Vec<u64> = (0..4)
            .map(|i| SplitMix64::for_index(7, i).next_u64())
            .collect();
        assert_eq!(a, b);
        let mut r = SplitMix64::new(1);
        let mean = (0..10_000).map(|_| r.below(100) as f64).sum::<f64>() / 10_000.0;
        assert!((mean - 49.5).abs() < 2.0, "{mean}");
        let p = (0..10_000).map(|_| r.poisson(4.0) as f64).sum::<f64>() / 10_000.0;
        assert!((p - 4.0).abs() < 0.2, "{p}");
    }
}
