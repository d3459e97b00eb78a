//! Deterministic fact-table generator for the data cube (Acharya et al., "Active Disks:
//! Programming Model, Algorithms and Evaluation", §4 datacube; Uysal et al., "An Evaluation of
//! Architectural Alternatives for Rapidly Growing Datasets: Active Disks, Clusters, SMPs", §5/§6
//! `dcube` dataset: group-by attributes with fixed distinct-value counts and a summed measure).
//!
//! Row `i` depends only on `(seed, params, i)`: any disk can generate its own index range alone.
//! Each dimension `j` takes values in `0..cardinalities[j]`, either uniformly (`zipf == 0`) or
//! Zipf-like with exponent `zipf`: the value is `floor(x) - 1` for `x` drawn by inverting the CDF
//! of the continuous power law `p(x) ∝ x^-zipf` on `[1, card + 1)`, so `P(v) ≈ ∝ (v + 1.5)^-zipf`
//! and value 0 is the most frequent. The measure is uniform in `MEASURE_MIN..=MEASURE_MAX`.

use super::kernel::{CubeError, Key, MAX_DIMS, Row, validate_cardinalities};
use crate::rng::SplitMix64;

/// Largest accepted Zipf exponent.
pub const MAX_ZIPF: f64 = 10.0;
/// Smallest generated measure value.
pub const MEASURE_MIN: i64 = -1000;
/// Largest generated measure value.
pub const MEASURE_MAX: i64 = 1000;

/// Parameters of a generated fact table.
#[derive(Clone, Debug, PartialEq)]
pub struct GenParams {
    /// Number of rows (at least 1).
    pub rows: u64,
    /// Distinct-value count of each dimension (1..=8 dimensions, each at least 1).
    pub cardinalities: Vec<u32>,
    /// Skew: 0 = uniform, otherwise the Zipf-like exponent (finite, in `0..=MAX_ZIPF`).
    pub zipf: f64,
    /// Stream seed.
    pub seed: u64,
}

impl GenParams {
    /// Checks the parameters, returning the first problem found as a typed error.
    pub fn validate(&self) -> Result<(), CubeError> {
        validate_cardinalities(&self.cardinalities)?;
        if !self.zipf.is_finite() || !(0.0..=MAX_ZIPF).contains(&self.zipf) {
            return Err(CubeError::BadZipf(self.zipf));
        }
        if self.rows == 0 {
            return Err(CubeError::NoRows);
        }
        Ok(())
    }

    /// Number of dimensions `d`.
    pub fn dims(&self) -> usize {
        self.cardinalities.len()
    }
}

/// Per-dimension sampler with the power-law constants precomputed.
#[derive(Clone, Debug)]
struct DimSampler {
    card: u32,
    zipf: f64,
    /// `(card+1)^(1-s) - 1` for `s != 1`, `ln(card+1)` for `s == 1`.
    scale: f64,
}

impl DimSampler {
    fn new(card: u32, zipf: f64) -> Self {
        let top = f64::from(card) + 1.0;
        let scale = if is_log_case(zipf) {
            top.ln()
        } else {
            top.powf(1.0 - zipf) - 1.0
        };
        DimSampler { card, zipf, scale }
    }

    fn sample(&self, rng: &mut SplitMix64) -> u32 {
        if self.zipf == 0.0 {
            return rng.below(u64::from(self.card)) as u32;
        }
        let u = rng.unit();
        let x = if is_log_case(self.zipf) {
            (u * self.scale).exp()
        } else {
            (1.0 + u * self.scale).powf(1.0 / (1.0 - self.zipf))
        };
        let v = if x.is_finite() {
            x.floor() as u64
        } else {
            u64::MAX
        };
        v.saturating_sub(1).min(u64::from(self.card) - 1) as u32
    }
}

fn is_log_case(zipf: f64) -> bool {
    (zipf - 1.0).abs() < 1e-9
}

/// A validated generator: produces row `i` of the table described by its [`GenParams`].
#[derive(Clone, Debug)]
pub struct Generator {
    params: GenParams,
    dims: Vec<DimSampler>,
}

impl Generator {
    /// Validates `params` and precomputes the samplers.
    pub fn new(params: GenParams) -> Result<Self, CubeError> {
        params.validate()?;
        let dims = params
            .cardinalities
            .iter()
            .map(|&c| DimSampler::new(c, params.zipf))
            .collect();
        Ok(Generator { params, dims })
    }

    /// The parameters.
    pub fn params(&self) -> &GenParams {
        &self.params
    }

    /// Row `index` (a pure function of seed, params and index; dims beyond `d` are 0).
    pub fn row(&self, index: u64) -> Row {
        let mut rng = SplitMix64::for_index(self.params.seed, index);
        let mut dims: Key = [0; MAX_DIMS];
        for (slot, sampler) in dims.iter_mut().zip(&self.dims) {
            *slot = sampler.sample(&mut rng);
        }
        let span = (MEASURE_MAX - MEASURE_MIN + 1) as u64;
        let measure = MEASURE_MIN + rng.below(span) as i64;
        Row { dims, measure }
    }

    /// Rows `start..start+count`, clipped to the table's `0..rows`.
    pub fn rows(&self, start: u64, count: u64) -> Vec<Row> {
        let end = start.saturating_add(count).min(self.params.rows);
        (start.min(end)..end).map(|i| self.row(i)).collect()
    }

    /// `m` rows at evenly spaced indices (a sample for [`super::kernel::estimate_sizes`];
    /// rows are independent draws, so any index set is a random sample).
    pub fn sample(&self, m: u64) -> Vec<Row> {
        let n = self.params.rows;
        let m = m.min(n);
        (0..m)
            .map(|k| self.row((u128::from(k) * u128::from(n) / u128::from(m)) as u64))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(cards: Vec<u32>, zipf: f64) -> GenParams {
        GenParams {
            rows: 20_000,
            cardinalities: cards,
            zipf,
            seed: 42,
        }
    }

    fn histogram(g: &Generator, dim: usize, card: usize) -> Vec<u64> {
        let mut h = vec![0u64; card];
        for r in g.rows(0, g.params().rows) {
            h[r.dims[dim] as usize] += 1;
        }
        h
    }

    #[test]
    fn deterministic_per_index() {
        let g1 = Generator::new(params(vec![10, 300, 7], 0.8)).unwrap();
        let g2 = Generator::new(params(vec![10, 300, 7], 0.8)).unwrap();
        let all = g1.rows(0, 1000);
        assert_eq!(all, g2.rows(0, 1000));
        assert_eq!(&all[600..700], &g2.rows(600, 100)[..]);
        assert_eq!(all[123], g2.row(123));
        let other = Generator::new(GenParams {
            seed: 43,
            ..params(vec![10, 300, 7], 0.8)
        })
        .unwrap();
        assert_ne!(all, other.rows(0, 1000));
        assert_eq!(g1.rows(19_990, 100).len(), 10);
        for r in &all {
            assert!(r.dims[0] < 10 && r.dims[1] < 300 && r.dims[2] < 7);
            assert_eq!(&r.dims[3..], &[0; MAX_DIMS - 3]);
            assert!((MEASURE_MIN..=MEASURE_MAX).contains(&r.measure));
        }
    }

    #[test]
    fn uniform_is_flat() {
        let g = Generator::new(params(vec![10], 0.0)).unwrap();
        let h = histogram(&g, 0, 10);
        let (lo, hi) = (h.iter().min().unwrap(), h.iter().max().unwrap());
        assert!(*lo > 1800 && *hi < 2200, "{h:?}");
    }

    #[test]
    fn zipf_is_skewed() {
        let g = Generator::new(params(vec![1000, 4_000_000_000], 1.0)).unwrap();
        let h = histogram(&g, 0, 1000);
        // Continuous power law with s = 1: P(0) = ln 2 / ln 1001 ≈ 0.100, P(1) ≈ 0.059.
        assert!((1800..2200).contains(&h[0]), "{}", h[0]);
        assert!((1000..1350).contains(&h[1]), "{}", h[1]);
        assert!(h[1] > h[3] && h[3] > h[20] && h[20] > h[500]);
        let g = Generator::new(params(vec![50], 2.5)).unwrap();
        let h = histogram(&g, 0, 50);
        // P(0) = (2^-1.5 - 1) / (51^-1.5 - 1) ≈ 0.648.
        assert!((12_500..13_500).contains(&h[0]), "{}", h[0]);
        let huge = Generator::new(params(vec![u32::MAX], MAX_ZIPF)).unwrap();
        assert!(huge.rows(0, 100).iter().all(|r| r.dims[0] < 3));
    }

    #[test]
    fn bad_params() {
        let ok = params(vec![4, 5], 0.5);
        assert_eq!(ok.validate(), Ok(()));
        let err = |p: GenParams| Generator::new(p).unwrap_err();
        assert_eq!(err(params(vec![], 0.0)), CubeError::BadDims(0));
        assert_eq!(err(params(vec![2; 9], 0.0)), CubeError::BadDims(9));
        assert_eq!(
            err(params(vec![3, 0], 0.0)),
            CubeError::ZeroCardinality { dim: 1 }
        );
        assert_eq!(err(params(vec![3], -0.5)), CubeError::BadZipf(-0.5));
        assert_eq!(err(params(vec![3], 11.0)), CubeError::BadZipf(11.0));
        assert!(matches!(
            err(params(vec![3], f64::NAN)),
            CubeError::BadZipf(_)
        ));
        assert_eq!(err(GenParams { rows: 0, ..ok }), CubeError::NoRows);
    }
}
