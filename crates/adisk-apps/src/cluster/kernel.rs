//! `cluster`: adaptive-grid, density-based subspace clustering (pMAFIA).
//!
//! The algorithm is the data-clustering primitive of Chiu, Liao and Choudhary, "Design and
//! Evaluation of Distributed Smart Disk Architecture for I/O-Intensive Workloads", §4.3
//! "Clustering for Large Data Sets", which follows pMAFIA (Nagesh, Goil and Choudhary,
//! "Parallel MAFIA: Parallel Subspace Clustering for Massive Data Sets", their reference
//! [18]): the space `A1 × … × Ad` is cut into a grid of cells, a cell is *dense* when it holds
//! more points than a factor α above what a uniform distribution would put there, and a
//! cluster is a union of connected dense cells.
//!
//! Steps, with who runs them (disks hold the points, the host reduces):
//! 1. disks: a fine [`Histogram`] per dimension; host: sum them ([`Histogram::merge`]);
//! 2. host: [`adaptive_bins`] merges adjacent fine bins whose counts are within β of each
//!    other into bins; each bin's threshold is α × the count a uniform distribution would put
//!    in it; dense bins are the dense 1-dimensional units ([`dense_bins`]);
//! 3. host: [`candidates`] of dimension k from the dense units of dimension k−1 (any two that
//!    share k−2 cells, pMAFIA's join; candidates with a non-dense (k−1)-face are dropped, which
//!    cannot change the result, see [`candidates`]); disks: a [`UnitCounter`] pass counts
//!    them; host: sum the counts, keep the [`dense`] ones; repeat while any are dense;
//! 4. host: [`clusters`] joins connected dense units of the highest subspaces.
//!
//! A unit (cell) is dense when its count exceeds the threshold of every bin it is made of
//! (pMAFIA's rule; [`thresholds`]). [`run_single`] runs the steps on one node;
//! [`run_distributed`] simulates disks with their own shares and the host's reductions.
//! [`Generator`] makes points with planted subspace clusters.

use crate::rng::{SplitMix64, mix};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use thiserror::Error;

/// Upper end of the generator's domain: every generated value is in `[0, DOMAIN_HI)`.
pub const DOMAIN_HI: f32 = 100.0;

/// The largest number of dimensions the generator accepts.
pub const MAX_DIMS: usize = 256;

/// The largest number of planted clusters.
pub const MAX_CLUSTERS: usize = 64;

/// The largest number of fine histogram bins per dimension.
pub const MAX_FINE_BINS: usize = 1 << 20;

/// The smallest gap between two planted clusters' ranges in a dimension they share.
pub const CLUSTER_GAP: f32 = 5.0;

/// Attempts to place a planted range before [`ClusterError::CannotPlace`].
const PLACE_TRIES: usize = 1000;

/// Rows per chunk fed to the kernels by [`run_distributed`] (as a disklet's batches would).
const SIM_CHUNK: usize = 1000;

/// Errors for bad parameters, malformed inputs and exceeded limits.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ClusterError {
    /// The generator was asked for zero points.
    #[error("zero points requested")]
    ZeroPoints,
    /// Dimensions outside `2..=MAX_DIMS`.
    #[error("dims {0} outside 2..={MAX_DIMS}")]
    Dims(usize),
    /// More than [`MAX_CLUSTERS`] planted clusters.
    #[error("{0} clusters exceed {MAX_CLUSTERS}")]
    Clusters(usize),
    /// The largest planted subspace is outside `2..=dims`.
    #[error("max_cluster_dims {max} outside 2..={dims}")]
    ClusterDims {
        /// Requested subspace size.
        max: usize,
        /// Dimensions of the space.
        dims: usize,
    },
    /// The noise fraction is outside `[0, 1]`.
    #[error("noise fraction {0} outside [0, 1]")]
    Noise(f64),
    /// Cluster widths not `0 < min <= max <= DOMAIN_HI / 2`.
    #[error("cluster widths {min}..={max} invalid")]
    Widths {
        /// Smallest width.
        min: f32,
        /// Largest width.
        max: f32,
    },
    /// A planted range could not be placed apart from the others in its dimension.
    #[error("cannot place cluster {0} apart from the others; use fewer or narrower clusters")]
    CannotPlace(usize),
    /// The histogram domain is not `lo < hi`, both finite.
    #[error("domain {lo}..{hi} invalid")]
    Domain {
        /// Lower end.
        lo: f32,
        /// Upper end.
        hi: f32,
    },
    /// Fine bins outside `1..=MAX_FINE_BINS`.
    #[error("fine bins {0} outside 1..={MAX_FINE_BINS}")]
    FineBins(usize),
    /// The density factor α is not finite and above 1.
    #[error("alpha {0} must be finite and > 1")]
    Alpha(f64),
    /// The merge tolerance β is outside `[0, 1]`.
    #[error("beta {0} outside [0, 1]")]
    Beta(f64),
    /// A batch has the wrong number of columns (dimensions).
    #[error("{got} columns given, {expected} expected")]
    Columns {
        /// Dimensions expected.
        expected: usize,
        /// Columns given.
        got: usize,
    },
    /// A column's length differs from the first column's.
    #[error("column {column} has {len} rows, column 0 has {expected}")]
    Ragged {
        /// The column.
        column: usize,
        /// Its length.
        len: usize,
        /// Column 0's length.
        expected: usize,
    },
    /// Inputs that must agree do not (histogram grids or row counts, count vector lengths,
    /// bins that do not tile the fine grid).
    #[error("mismatch: {0}")]
    Mismatch(&'static str),
    /// A unit names a dimension or bin that does not exist, or repeats a dimension.
    #[error("unit cell (dim {dim}, bin {bin}) invalid")]
    BadCell {
        /// The cell's dimension.
        dim: usize,
        /// The cell's bin.
        bin: usize,
    },
    /// A unit without cells.
    #[error("unit without cells")]
    EmptyUnit,
    /// No input (no histograms or no disks).
    #[error("no input")]
    NoInput,
    /// A level produced more candidates than allowed.
    #[error("{count} candidates of dimension {level} exceed the cap {max}")]
    TooManyCandidates {
        /// The dimension of the candidates.
        level: usize,
        /// Candidates generated.
        count: usize,
        /// The cap.
        max: usize,
    },
}

// ---------------------------------------------------------------------------------------------
// Generator
// ---------------------------------------------------------------------------------------------

/// Parameters of the point generator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenParams {
    /// Points in the data set (≥ 1).
    pub points: u64,
    /// Dimensions (`2..=MAX_DIMS`); every value is in `[0, DOMAIN_HI)`.
    pub dims: usize,
    /// Planted clusters (`0..=MAX_CLUSTERS`), each receiving an equal share of the non-noise
    /// points.
    pub clusters: usize,
    /// Largest subspace of a planted cluster (`2..=dims`); each cluster lives in `2..=this`
    /// dimensions.
    pub max_cluster_dims: usize,
    /// Fraction of points that are uniform noise, `[0, 1]`.
    pub noise: f64,
    /// Smallest width of a planted range.
    pub min_width: f32,
    /// Largest width of a planted range (≤ `DOMAIN_HI / 2`).
    pub max_width: f32,
    /// Seed of the data set.
    pub seed: u64,
}

/// A planted cluster: a hyper-rectangle in a subspace, uniform in the other dimensions.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// The subspace, ascending.
    pub dims: Vec<usize>,
    /// `[lo, hi)` per dimension of `dims`.
    pub ranges: Vec<(f32, f32)>,
}

/// A validated point generator. Cluster boxes depend on (seed, params) only; point `i` on
/// (seed, params, `i`) only. Two clusters' ranges in a shared dimension are at least
/// [`CLUSTER_GAP`] apart.
#[derive(Clone, Debug)]
pub struct Generator {
    params: GenParams,
    planted: Vec<Cluster>,
}

impl Generator {
    /// Validates `params` and places the clusters.
    pub fn new(params: GenParams) -> Result<Generator, ClusterError> {
        validate_gen(&params)?;
        let planted = place_clusters(&params)?;
        Ok(Generator { params, planted })
    }

    /// The parameters.
    pub fn params(&self) -> &GenParams {
        &self.params
    }

    /// The planted clusters.
    pub fn planted(&self) -> Vec<Cluster> {
        self.planted.clone()
    }

    /// Point `index` (one value per dimension), or `None` past the end.
    pub fn point(&self, index: u64) -> Option<Vec<f32>> {
        if index >= self.params.points {
            return None;
        }
        let mut rng = SplitMix64::for_index(self.params.seed, index);
        let noise = self.planted.is_empty() || rng.unit() < self.params.noise;
        let cluster = if noise {
            None
        } else {
            self.planted
                .get(rng.below(self.planted.len() as u64) as usize)
        };
        let point = (0..self.params.dims)
            .map(|d| {
                let range = cluster.and_then(|c| {
                    let at = c.dims.binary_search(&d).ok()?;
                    c.ranges.get(at).copied()
                });
                uniform_in(&mut rng, range.unwrap_or((0.0, DOMAIN_HI)))
            })
            .collect();
        Some(point)
    }

    /// Points `start..end` (clamped to the data set) as columns: one `Vec` per dimension.
    pub fn columns(&self, start: u64, end: u64) -> Vec<Vec<f32>> {
        let end = end.min(self.params.points);
        let start = start.min(end);
        let reserve = (end - start).min(1 << 20) as usize;
        let mut cols = vec![Vec::with_capacity(reserve); self.params.dims];
        for p in (start..end).filter_map(|i| self.point(i)) {
            for (col, v) in cols.iter_mut().zip(p) {
                col.push(v);
            }
        }
        cols
    }
}

fn validate_gen(p: &GenParams) -> Result<(), ClusterError> {
    if p.points == 0 {
        return Err(ClusterError::ZeroPoints);
    }
    if !(2..=MAX_DIMS).contains(&p.dims) {
        return Err(ClusterError::Dims(p.dims));
    }
    if p.clusters > MAX_CLUSTERS {
        return Err(ClusterError::Clusters(p.clusters));
    }
    if !(2..=p.dims).contains(&p.max_cluster_dims) {
        return Err(ClusterError::ClusterDims {
            max: p.max_cluster_dims,
            dims: p.dims,
        });
    }
    if !(0.0..=1.0).contains(&p.noise) {
        return Err(ClusterError::Noise(p.noise));
    }
    let widths_ok =
        p.min_width > 0.0 && p.min_width <= p.max_width && p.max_width <= DOMAIN_HI / 2.0;
    if !widths_ok {
        return Err(ClusterError::Widths {
            min: p.min_width,
            max: p.max_width,
        });
    }
    Ok(())
}

/// Places the clusters: subspace size uniform in `2..=max_cluster_dims`, dimensions a uniform
/// subset, widths uniform in `[min_width, max_width]`, positions uniform among those keeping
/// [`CLUSTER_GAP`] from other clusters' ranges in the same dimension.
fn place_clusters(p: &GenParams) -> Result<Vec<Cluster>, ClusterError> {
    let mut rng = SplitMix64::new(mix(p.seed ^ 0x5eed_c1a5_7e25_0001));
    let mut taken: Vec<Vec<(f32, f32)>> = vec![Vec::new(); p.dims];
    let mut clusters = Vec::with_capacity(p.clusters);
    for c in 0..p.clusters {
        let k = 2 + rng.below((p.max_cluster_dims - 1) as u64) as usize;
        let mut all: Vec<usize> = (0..p.dims).collect();
        for i in 0..k {
            let j = i + rng.below((p.dims - i) as u64) as usize;
            all.swap(i, j);
        }
        let mut dims = all[..k].to_vec();
        dims.sort_unstable();
        let mut ranges = Vec::with_capacity(k);
        for &d in &dims {
            let range = place_range(&mut rng, p, &taken[d]).ok_or(ClusterError::CannotPlace(c))?;
            taken[d].push(range);
            ranges.push(range);
        }
        clusters.push(Cluster { dims, ranges });
    }
    Ok(clusters)
}

fn place_range(rng: &mut SplitMix64, p: &GenParams, taken: &[(f32, f32)]) -> Option<(f32, f32)> {
    let width = f64::from(p.min_width) + rng.unit() * f64::from(p.max_width - p.min_width);
    (0..PLACE_TRIES).find_map(|_| {
        let lo = rng.unit() * (f64::from(DOMAIN_HI) - width);
        let range = (lo as f32, ((lo + width) as f32).min(DOMAIN_HI));
        let apart = taken
            .iter()
            .all(|t| range.1 + CLUSTER_GAP <= t.0 || t.1 + CLUSTER_GAP <= range.0);
        apart.then_some(range)
    })
}

/// A uniform `f32` in `[lo, hi)`.
fn uniform_in(rng: &mut SplitMix64, (lo, hi): (f32, f32)) -> f32 {
    let v = (f64::from(lo) + rng.unit() * f64::from(hi - lo)) as f32;
    if v >= hi { hi.next_down().max(lo) } else { v }
}

// ---------------------------------------------------------------------------------------------
// Fine grid and histograms
// ---------------------------------------------------------------------------------------------

/// The fine partition of every dimension's domain `[lo, hi)` into `bins` equal bins.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FineGrid {
    lo: f32,
    hi: f32,
    bins: usize,
}

impl FineGrid {
    /// A grid over `[lo, hi)` (finite, `lo < hi`) with `1..=MAX_FINE_BINS` bins.
    pub fn new(lo: f32, hi: f32, bins: usize) -> Result<FineGrid, ClusterError> {
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err(ClusterError::Domain { lo, hi });
        }
        if !(1..=MAX_FINE_BINS).contains(&bins) {
            return Err(ClusterError::FineBins(bins));
        }
        Ok(FineGrid { lo, hi, bins })
    }

    /// Number of fine bins.
    pub fn bins(&self) -> usize {
        self.bins
    }

    /// The fine bin holding `v`, or `None` if `v` is NaN or outside `[lo, hi)` (such values
    /// belong to no bin and so to no unit; they still count as rows for the thresholds).
    pub fn index(&self, v: f32) -> Option<usize> {
        if !(v >= self.lo && v < self.hi) {
            return None;
        }
        let x = (f64::from(v) - f64::from(self.lo)) / (f64::from(self.hi) - f64::from(self.lo));
        Some(((x * self.bins as f64) as usize).min(self.bins - 1))
    }

    /// The value at fine-bin edge `i` (`0..=bins`).
    pub fn edge(&self, i: usize) -> f32 {
        let span = f64::from(self.hi) - f64::from(self.lo);
        (f64::from(self.lo) + span * i as f64 / self.bins as f64) as f32
    }
}

/// Checks a batch of columns against `dims`; returns its rows.
fn check_columns<C: AsRef<[f32]>>(cols: &[C], dims: usize) -> Result<usize, ClusterError> {
    if cols.len() != dims {
        return Err(ClusterError::Columns {
            expected: dims,
            got: cols.len(),
        });
    }
    let rows = cols.first().map_or(0, |c| c.as_ref().len());
    for (column, c) in cols.iter().enumerate() {
        let len = c.as_ref().len();
        if len != rows {
            return Err(ClusterError::Ragged {
                column,
                len,
                expected: rows,
            });
        }
    }
    Ok(rows)
}

/// The fine histogram of one dimension (`8 × bins` bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    grid: FineGrid,
    counts: Vec<u64>,
    rows: u64,
}

impl Histogram {
    /// An empty histogram.
    pub fn new(grid: FineGrid) -> Histogram {
        Histogram {
            grid,
            counts: vec![0; grid.bins()],
            rows: 0,
        }
    }

    /// A histogram from shipped counts (e.g. a disk's reply); `counts.len()` must equal the
    /// grid's bins and their sum must not exceed `rows`.
    pub fn from_counts(grid: FineGrid, counts: Vec<u64>, rows: u64) -> Result<Self, ClusterError> {
        if counts.len() != grid.bins() {
            return Err(ClusterError::Mismatch("histogram counts vs fine bins"));
        }
        let total = counts.iter().try_fold(0u64, |a, &c| a.checked_add(c));
        if total.is_none_or(|t| t > rows) {
            return Err(ClusterError::Mismatch("histogram counts exceed rows"));
        }
        Ok(Histogram { grid, counts, rows })
    }

    /// Counts one column of values (one per row).
    pub fn feed(&mut self, column: &[f32]) {
        for &v in column {
            if let Some(i) = self.grid.index(v) {
                self.counts[i] += 1;
            }
        }
        self.rows += column.len() as u64;
    }

    /// Adds another histogram of the same grid (the host's reduction).
    pub fn merge(&mut self, other: &Histogram) -> Result<(), ClusterError> {
        if self.grid != other.grid {
            return Err(ClusterError::Mismatch("histogram grids differ"));
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.rows += other.rows;
        Ok(())
    }

    /// The fine grid.
    pub fn grid(&self) -> FineGrid {
        self.grid
    }

    /// Count per fine bin.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Rows fed (including values outside the domain).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes of the counts.
    pub fn bytes(&self) -> usize {
        self.counts.len() * std::mem::size_of::<u64>()
    }
}

/// One empty histogram per dimension.
pub fn histograms(grid: FineGrid, dims: usize) -> Vec<Histogram> {
    vec![Histogram::new(grid); dims]
}

/// Feeds a batch of columns (one per dimension, equal lengths) into per-dimension histograms.
pub fn feed_histograms<C: AsRef<[f32]>>(
    hists: &mut [Histogram],
    cols: &[C],
) -> Result<(), ClusterError> {
    check_columns(cols, hists.len())?;
    for (h, c) in hists.iter_mut().zip(cols) {
        h.feed(c.as_ref());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Adaptive bins
// ---------------------------------------------------------------------------------------------

/// An adaptive bin: consecutive fine bins of one dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct Bin {
    /// The dimension.
    pub dim: usize,
    /// Fine bins `fine.0..fine.1`.
    pub fine: (usize, usize),
    /// Value range `[lo, hi)`.
    pub lo: f32,
    /// Upper end of the value range.
    pub hi: f32,
    /// Points in the bin.
    pub count: u64,
    /// α × the points a uniform distribution would put in the bin.
    pub threshold: f64,
}

impl Bin {
    /// Whether the bin is dense (`count > threshold`).
    pub fn is_dense(&self) -> bool {
        self.count as f64 > self.threshold
    }
}

/// Builds the adaptive bins of every dimension from the reduced histograms.
///
/// Scanning each dimension left to right, fine bin `i + 1` joins the bin of fine bin `i` when
/// `|c[i+1] − c[i]| ≤ β · max(c[i], c[i+1])` (pMAFIA merges adjacent windows whose values
/// differ by less than β). A bin of width `w` fine bins out of `F` gets the threshold
/// `α · N · w / F`, `N` the rows fed. A dimension left as one bin (no structure) gets the
/// threshold `α · N > N`, so it can never be dense: pMAFIA treats such dimensions as
/// uninteresting. Needs `α > 1` (finite) and `β ∈ [0, 1]`, and histograms of one grid and one
/// row count.
pub fn adaptive_bins(
    histograms: &[Histogram],
    alpha: f64,
    beta: f64,
) -> Result<Vec<Vec<Bin>>, ClusterError> {
    if !(alpha.is_finite() && alpha > 1.0) {
        return Err(ClusterError::Alpha(alpha));
    }
    if !(0.0..=1.0).contains(&beta) {
        return Err(ClusterError::Beta(beta));
    }
    let first = histograms.first().ok_or(ClusterError::NoInput)?;
    if histograms
        .iter()
        .any(|h| h.grid != first.grid || h.rows != first.rows)
    {
        return Err(ClusterError::Mismatch(
            "histograms of different grids or rows",
        ));
    }
    let bins = histograms
        .iter()
        .enumerate()
        .map(|(dim, h)| dim_bins(dim, h, alpha, beta))
        .collect();
    Ok(bins)
}

fn dim_bins(dim: usize, h: &Histogram, alpha: f64, beta: f64) -> Vec<Bin> {
    let c = &h.counts;
    let similar = |a: u64, b: u64| a.abs_diff(b) as f64 <= beta * a.max(b) as f64;
    let mut bins = Vec::new();
    let mut start = 0;
    for i in 1..=c.len() {
        if i == c.len() || !similar(c[i - 1], c[i]) {
            let count = c[start..i].iter().sum();
            let width = (i - start) as f64 / c.len() as f64;
            bins.push(Bin {
                dim,
                fine: (start, i),
                lo: h.grid.edge(start),
                hi: h.grid.edge(i),
                count,
                threshold: alpha * h.rows as f64 * width,
            });
            start = i;
        }
    }
    bins
}

// ---------------------------------------------------------------------------------------------
// Units
// ---------------------------------------------------------------------------------------------

/// A unit (grid cell) of a subspace: one adaptive bin per dimension of the subspace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unit {
    /// `(dimension, bin index in that dimension)`, ascending by dimension, dimensions
    /// distinct.
    pub cells: Vec<(usize, usize)>,
}

impl Unit {
    /// The unit's subspace.
    pub fn dims(&self) -> Vec<usize> {
        self.cells.iter().map(|c| c.0).collect()
    }

    /// Whether every cell of `other` is a cell of `self` (`other` is a face of `self`).
    pub fn contains(&self, other: &Unit) -> bool {
        other
            .cells
            .iter()
            .all(|c| self.cells.binary_search(c).is_ok())
    }
}

/// A dense unit and its point count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenseUnit {
    /// The unit.
    pub unit: Unit,
    /// Points in it.
    pub count: u64,
}

/// The dense 1-dimensional units: the dense bins, in (dimension, bin) order.
pub fn dense_bins(bins: &[Vec<Bin>]) -> Vec<DenseUnit> {
    bins.iter()
        .enumerate()
        .flat_map(|(d, bs)| {
            bs.iter()
                .enumerate()
                .filter(|(_, b)| b.is_dense())
                .map(move |(i, b)| DenseUnit {
                    unit: Unit {
                        cells: vec![(d, i)],
                    },
                    count: b.count,
                })
        })
        .collect()
}

/// Candidate dense units of dimension k from the dense units of dimension k−1 (all of one
/// dimension), sorted and without duplicates.
///
/// pMAFIA's join: any two units sharing k−2 cells whose remaining cells lie in different
/// dimensions give the union as a candidate. A candidate one of whose (k−1)-faces is not dense
/// is dropped: its count is at most that face's count, which is at most the face's threshold,
/// which is at most the candidate's threshold (a maximum over a superset of bins), so it
/// could not be dense. The result is therefore exactly the k-cell sets all of whose
/// (k−1)-faces are dense. Cost: O(n² k) for n input units.
pub fn candidates(prev: &[DenseUnit]) -> Vec<Unit> {
    let known: HashSet<&Unit> = prev.iter().map(|d| &d.unit).collect();
    let mut out = BTreeSet::new();
    for (i, a) in prev.iter().enumerate() {
        for b in &prev[i + 1..] {
            if let Some(u) = join(&a.unit, &b.unit)
                && !out.contains(&u)
                && faces_known(&u, &known)
            {
                out.insert(u);
            }
        }
    }
    out.into_iter().collect()
}

fn join(a: &Unit, b: &Unit) -> Option<Unit> {
    if a.cells.len() != b.cells.len() {
        return None;
    }
    let mut cells: Vec<(usize, usize)> = a.cells.iter().chain(&b.cells).copied().collect();
    cells.sort_unstable();
    cells.dedup();
    let distinct_dims = cells.windows(2).all(|w| w[0].0 != w[1].0);
    (cells.len() == a.cells.len() + 1 && distinct_dims).then_some(Unit { cells })
}

fn faces_known(u: &Unit, known: &HashSet<&Unit>) -> bool {
    (0..u.cells.len()).all(|skip| {
        let mut face = u.cells.clone();
        face.remove(skip);
        known.contains(&Unit { cells: face })
    })
}

/// Each unit's threshold: the largest threshold of its bins (a unit is dense only if it
/// exceeds the threshold of every bin it is made of). Units must be non-empty.
pub fn thresholds(units: &[Unit], bins: &[Vec<Bin>]) -> Result<Vec<f64>, ClusterError> {
    units.iter().map(|u| unit_threshold(u, bins)).collect()
}

fn unit_threshold(u: &Unit, bins: &[Vec<Bin>]) -> Result<f64, ClusterError> {
    if u.cells.is_empty() {
        return Err(ClusterError::EmptyUnit);
    }
    u.cells
        .iter()
        .try_fold(f64::NEG_INFINITY, |t, &(dim, bin)| {
            let b = bins.get(dim).and_then(|bs| bs.get(bin));
            b.map(|b| t.max(b.threshold))
                .ok_or(ClusterError::BadCell { dim, bin })
        })
}

/// The dense units among `candidates` given their reduced `counts` and their `thresholds`
/// (all three aligned): those with `count > threshold`, in candidate order.
pub fn dense(
    candidates: &[Unit],
    counts: &[u64],
    thresholds: &[f64],
) -> Result<Vec<DenseUnit>, ClusterError> {
    if counts.len() != candidates.len() || thresholds.len() != candidates.len() {
        return Err(ClusterError::Mismatch("candidates, counts and thresholds"));
    }
    let dense = candidates
        .iter()
        .zip(counts.iter().zip(thresholds))
        .filter(|(_, (c, t))| **c as f64 > **t)
        .map(|(u, (c, _))| DenseUnit {
            unit: u.clone(),
            count: *c,
        })
        .collect();
    Ok(dense)
}

// ---------------------------------------------------------------------------------------------
// Counting candidates at the disks
// ---------------------------------------------------------------------------------------------

/// Value → adaptive bin lookup for every dimension (`4 × dims × fine bins` bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct BinMap {
    grid: FineGrid,
    fine_to_bin: Vec<Vec<u32>>,
}

impl BinMap {
    /// The lookup for `bins` over `grid`; each dimension's bins must tile the fine bins in
    /// order.
    pub fn new(grid: FineGrid, bins: &[Vec<Bin>]) -> Result<BinMap, ClusterError> {
        let mut fine_to_bin = Vec::with_capacity(bins.len());
        for bs in bins {
            let mut map = Vec::with_capacity(grid.bins());
            for (i, b) in bs.iter().enumerate() {
                if b.fine.0 != map.len() || b.fine.1 <= b.fine.0 || b.fine.1 > grid.bins() {
                    return Err(ClusterError::Mismatch("bins do not tile the fine grid"));
                }
                map.resize(b.fine.1, i as u32);
            }
            if map.len() != grid.bins() {
                return Err(ClusterError::Mismatch("bins do not tile the fine grid"));
            }
            fine_to_bin.push(map);
        }
        Ok(BinMap { grid, fine_to_bin })
    }

    /// Dimensions.
    pub fn dims(&self) -> usize {
        self.fine_to_bin.len()
    }

    /// Bins in dimension `dim` (0 if there is no such dimension).
    pub fn bins_in(&self, dim: usize) -> usize {
        self.fine_to_bin
            .get(dim)
            .and_then(|m| m.last())
            .map_or(0, |&b| b as usize + 1)
    }

    /// The adaptive bin of value `v` in dimension `dim`, `None` outside the domain.
    pub fn locate(&self, dim: usize, v: f32) -> Option<usize> {
        let map = self.fine_to_bin.get(dim)?;
        Some(map[self.grid.index(v)?] as usize)
    }

    /// Bytes of the lookup tables.
    pub fn bytes(&self) -> usize {
        self.fine_to_bin.iter().map(|m| m.len() * 4).sum()
    }
}

/// One subspace's candidates, sorted by their bin tuples (`keys` holds `dims.len()` bins per
/// candidate, `ids` the candidate indexes).
#[derive(Clone, Debug)]
struct Subspace {
    dims: Vec<usize>,
    keys: Vec<u32>,
    ids: Vec<usize>,
}

impl Subspace {
    /// The candidate index of a bin tuple, by binary search.
    fn find(&self, key: &[u32]) -> Option<usize> {
        let k = self.dims.len();
        let entry = |i: usize| &self.keys[i * k..(i + 1) * k];
        let (mut lo, mut hi) = (0, self.ids.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match entry(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.ids[mid]),
            }
        }
        None
    }
}

/// Counts a level's candidate units over the points of a disk, batch by batch.
///
/// Candidates are grouped by subspace and found by binary search on their bin tuples; a point
/// only visits the subspaces whose candidates start with one of its cells, so it costs
/// O(dims + visited subspaces × k log n). Memory: see [`UnitCounter::bytes`] (`16 + 4k` bytes
/// per candidate, plus the [`BinMap`] and a list head per bin of every dimension).
#[derive(Clone, Debug)]
pub struct UnitCounter {
    map: BinMap,
    subspaces: Vec<Subspace>,
    starts: Vec<Vec<Vec<usize>>>,
    counts: Vec<u64>,
    used: Vec<usize>,
    located: Vec<Option<u32>>,
    key: Vec<u32>,
}

impl UnitCounter {
    /// A counter for `candidates` (each cell must name an existing dimension and bin, with
    /// dimensions strictly ascending).
    pub fn new(map: BinMap, candidates: &[Unit]) -> Result<UnitCounter, ClusterError> {
        let mut groups: BTreeMap<Vec<usize>, BTreeMap<Vec<u32>, usize>> = BTreeMap::new();
        for (i, u) in candidates.iter().enumerate() {
            check_unit(&map, u)?;
            let key = u.cells.iter().map(|c| c.1 as u32).collect();
            groups.entry(u.dims()).or_default().insert(key, i);
        }
        let used: BTreeSet<usize> = groups.keys().flatten().copied().collect();
        let subspaces: Vec<Subspace> = groups
            .into_iter()
            .map(|(dims, entries)| subspace(dims, entries))
            .collect();
        let mut starts: Vec<Vec<Vec<usize>>> = (0..map.dims())
            .map(|d| vec![Vec::new(); map.bins_in(d)])
            .collect();
        for (i, s) in subspaces.iter().enumerate() {
            let k = s.dims.len();
            let firsts: BTreeSet<u32> = s.keys.chunks(k).map(|key| key[0]).collect();
            for b in firsts {
                starts[s.dims[0]][b as usize].push(i);
            }
        }
        Ok(UnitCounter {
            starts,
            used: used.into_iter().collect(),
            located: vec![None; map.dims()],
            map,
            subspaces,
            counts: vec![0; candidates.len()],
            key: Vec::new(),
        })
    }

    /// Counts a batch of columns (one per dimension, equal lengths).
    pub fn feed<C: AsRef<[f32]>>(&mut self, cols: &[C]) -> Result<(), ClusterError> {
        let rows = check_columns(cols, self.map.dims())?;
        for row in 0..rows {
            for &d in &self.used {
                let v = cols[d].as_ref()[row];
                self.located[d] = self.map.locate(d, v).map(|b| b as u32);
            }
            self.count_row();
        }
        Ok(())
    }

    fn count_row(&mut self) {
        let UnitCounter {
            subspaces,
            starts,
            counts,
            used,
            located,
            key,
            ..
        } = self;
        for &d in used.iter() {
            let Some(b) = located[d] else { continue };
            for &i in &starts[d][b as usize] {
                count_in(&subspaces[i], located, key, counts);
            }
        }
    }

    /// Count per candidate, in candidate order (what a disk ships).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The counts, by value.
    pub fn into_counts(self) -> Vec<u64> {
        self.counts
    }

    /// Bytes held: counts, the subspace tables (keys, entries, control bytes) and the
    /// [`BinMap`].
    pub fn bytes(&self) -> usize {
        let tables: usize = self
            .subspaces
            .iter()
            .map(|s| s.keys.len() * 4 + s.ids.len() * 8 + s.dims.len() * 8)
            .sum();
        let starts: usize = self.starts.iter().flatten().map(|v| 24 + v.len() * 8).sum();
        self.counts.len() * 8 + tables + starts + self.map.bytes() + self.located.len() * 8
    }
}

/// Counts the row whose bins are `located` in subspace `s`, if it falls in a candidate.
fn count_in(s: &Subspace, located: &[Option<u32>], key: &mut Vec<u32>, counts: &mut [u64]) {
    key.clear();
    for &d in &s.dims {
        match located[d] {
            Some(b) => key.push(b),
            None => return,
        }
    }
    if let Some(i) = s.find(key) {
        counts[i] += 1;
    }
}

fn subspace(dims: Vec<usize>, entries: BTreeMap<Vec<u32>, usize>) -> Subspace {
    let (mut keys, mut ids) = (Vec::new(), Vec::new());
    for (key, id) in entries {
        keys.extend(key);
        ids.push(id);
    }
    Subspace { dims, keys, ids }
}

fn check_unit(map: &BinMap, u: &Unit) -> Result<(), ClusterError> {
    if u.cells.is_empty() {
        return Err(ClusterError::EmptyUnit);
    }
    let mut last = None;
    for &(dim, bin) in &u.cells {
        let ascending = last.is_none_or(|l| dim > l);
        if !ascending || bin >= map.bins_in(dim) {
            return Err(ClusterError::BadCell { dim, bin });
        }
        last = Some(dim);
    }
    Ok(())
}

/// Adds one disk's counts into the running sum (the host's reduction).
pub fn reduce_counts(sum: &mut [u64], counts: &[u64]) -> Result<(), ClusterError> {
    if sum.len() != counts.len() {
        return Err(ClusterError::Mismatch("count vectors of different lengths"));
    }
    for (s, c) in sum.iter_mut().zip(counts) {
        *s += c;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Clusters
// ---------------------------------------------------------------------------------------------

/// A cluster found: connected dense units of one subspace.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundCluster {
    /// The subspace, ascending.
    pub dims: Vec<usize>,
    /// Bounding `[lo, hi)` of the units per dimension of `dims`.
    pub ranges: Vec<(f32, f32)>,
    /// Dense units joined.
    pub units: usize,
    /// Points in those units.
    pub points: u64,
}

/// The clusters of the dense units found, `levels[k − 1]` holding the dense units of
/// dimension k.
///
/// 1. A dense unit is *maximal* if no dense unit of the next level contains it (it is not a
///    face of a higher dense unit; pMAFIA's terminal dense units).
/// 2. Maximal units of one subspace are joined when they differ in one dimension only, by
///    adjacent bins; each connected group is a cluster with its bounding box.
/// 3. "Highest subspaces": a cluster is dropped when another cluster lives in a strict
///    superset of its subspace and their ranges touch or overlap in every dimension of the
///    smaller one (it is a fringe of the higher cluster's projection, e.g. a partly covered
///    fine bin at the edge of a planted range, which adaptive binning leaves as a bin of its
///    own). This rule is this kernel's addition to pMAFIA's output step; it also removes
///    everything rule 1 removes, rule 1 only keeps the components small.
///
/// The clusters come sorted by subspace, then ranges. Cost: O(n²) in the dense units of a
/// level (adjacency and containment are checked pairwise), negligible next to counting.
pub fn clusters(
    levels: &[Vec<DenseUnit>],
    bins: &[Vec<Bin>],
) -> Result<Vec<FoundCluster>, ClusterError> {
    let mut groups: BTreeMap<Vec<usize>, Vec<&DenseUnit>> = BTreeMap::new();
    for (k, level) in levels.iter().enumerate() {
        let next = levels.get(k + 1);
        for u in level {
            let covered = next.is_some_and(|n| n.iter().any(|h| h.unit.contains(&u.unit)));
            if !covered {
                groups.entry(u.unit.dims()).or_default().push(u);
            }
        }
    }
    let mut found = Vec::new();
    for (dims, units) in groups {
        for component in components(&units) {
            found.push(bounding(&dims, &component, bins)?);
        }
    }
    let mut kept: Vec<FoundCluster> = found
        .iter()
        .filter(|c| !found.iter().any(|h| is_fringe(c, h)))
        .cloned()
        .collect();
    kept.sort_by(|a, b| {
        (&a.dims, &a.ranges)
            .partial_cmp(&(&b.dims, &b.ranges))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    Ok(kept)
}

/// Connected components (adjacent units) by union–find; each component in input order.
fn components<'a>(units: &[&'a DenseUnit]) -> Vec<Vec<&'a DenseUnit>> {
    let mut parent: Vec<usize> = (0..units.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for i in 0..units.len() {
        for j in i + 1..units.len() {
            if adjacent(&units[i].unit, &units[j].unit) {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut by_root: BTreeMap<usize, Vec<&DenseUnit>> = BTreeMap::new();
    for (i, u) in units.iter().enumerate() {
        let r = root(&mut parent, i);
        by_root.entry(r).or_default().push(u);
    }
    by_root.into_values().collect()
}

/// Same subspace, bins equal in all dimensions but one, where they are neighbours.
fn adjacent(a: &Unit, b: &Unit) -> bool {
    let mut differing = 0;
    for (x, y) in a.cells.iter().zip(&b.cells) {
        if x.0 != y.0 || x.1.abs_diff(y.1) > 1 {
            return false;
        }
        differing += usize::from(x.1 != y.1);
    }
    a.cells.len() == b.cells.len() && differing == 1
}

fn bounding(
    dims: &[usize],
    units: &[&DenseUnit],
    bins: &[Vec<Bin>],
) -> Result<FoundCluster, ClusterError> {
    let mut ranges = vec![(f32::INFINITY, f32::NEG_INFINITY); dims.len()];
    for u in units {
        for (r, &(dim, bin)) in ranges.iter_mut().zip(&u.unit.cells) {
            let b = bins
                .get(dim)
                .and_then(|bs| bs.get(bin))
                .ok_or(ClusterError::BadCell { dim, bin })?;
            *r = (r.0.min(b.lo), r.1.max(b.hi));
        }
    }
    Ok(FoundCluster {
        dims: dims.to_vec(),
        ranges,
        units: units.len(),
        points: units.iter().map(|u| u.count).sum(),
    })
}

/// Whether `low` is a fringe of `high` (see [`clusters`], rule 3).
fn is_fringe(low: &FoundCluster, high: &FoundCluster) -> bool {
    if low.dims.len() >= high.dims.len() {
        return false;
    }
    low.dims.iter().zip(&low.ranges).all(|(d, r)| {
        let at = high.dims.iter().position(|h| h == d);
        at.is_some_and(|i| {
            let h = high.ranges[i];
            r.0 <= h.1 && h.0 <= r.1
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Drivers
// ---------------------------------------------------------------------------------------------

/// Parameters of a clustering run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClusterParams {
    /// Lower end of every dimension's domain.
    pub lo: f32,
    /// Upper end (exclusive) of every dimension's domain.
    pub hi: f32,
    /// Fine histogram bins per dimension.
    pub fine_bins: usize,
    /// Density factor α (> 1): dense means more than α × the uniform expectation.
    pub alpha: f64,
    /// Merge tolerance β in `[0, 1]` for adjacent fine bins.
    pub beta: f64,
    /// Cap on the candidates of one level (bounds the [`UnitCounter`] memory).
    pub max_candidates: usize,
}

impl Default for ClusterParams {
    /// The generator's domain `[0, 100)`, 100 fine bins, α = 1.5, β = 0.35, 100,000
    /// candidates.
    fn default() -> Self {
        ClusterParams {
            lo: 0.0,
            hi: DOMAIN_HI,
            fine_bins: 100,
            alpha: 1.5,
            beta: 0.35,
            max_candidates: 100_000,
        }
    }
}

impl ClusterParams {
    /// The fine grid these parameters describe.
    pub fn grid(&self) -> Result<FineGrid, ClusterError> {
        FineGrid::new(self.lo, self.hi, self.fine_bins)
    }
}

/// Everything a run finds.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterResult {
    /// Adaptive bins per dimension.
    pub bins: Vec<Vec<Bin>>,
    /// Dense units per level (`levels[k − 1]`: dimension k); empty levels are not kept.
    pub levels: Vec<Vec<DenseUnit>>,
    /// The clusters ([`clusters`]).
    pub clusters: Vec<FoundCluster>,
}

/// The level-by-level search shared by the drivers: `count` returns the reduced counts of
/// the candidates it is given.
fn search<F>(
    bins: Vec<Vec<Bin>>,
    params: &ClusterParams,
    mut count: F,
) -> Result<ClusterResult, ClusterError>
where
    F: FnMut(&[Unit]) -> Result<Vec<u64>, ClusterError>,
{
    let mut levels = Vec::new();
    let mut current = dense_bins(&bins);
    while !current.is_empty() {
        let cands = candidates(&current);
        levels.push(current);
        if cands.len() > params.max_candidates {
            return Err(ClusterError::TooManyCandidates {
                level: levels.len() + 1,
                count: cands.len(),
                max: params.max_candidates,
            });
        }
        if cands.is_empty() {
            break;
        }
        let counts = count(&cands)?;
        current = dense(&cands, &counts, &thresholds(&cands, &bins)?)?;
    }
    let clusters = clusters(&levels, &bins)?;
    Ok(ClusterResult {
        bins,
        levels,
        clusters,
    })
}

/// Clusters `points` (one column per dimension) on one node with the same kernels.
pub fn run_single<C: AsRef<[f32]>>(
    points: &[C],
    params: &ClusterParams,
) -> Result<ClusterResult, ClusterError> {
    let grid = params.grid()?;
    if points.is_empty() {
        return Err(ClusterError::NoInput);
    }
    let mut hists = histograms(grid, points.len());
    feed_histograms(&mut hists, points)?;
    let bins = adaptive_bins(&hists, params.alpha, params.beta)?;
    let map = BinMap::new(grid, &bins)?;
    search(bins, params, |cands| {
        let mut counter = UnitCounter::new(map.clone(), cands)?;
        counter.feed(points)?;
        Ok(counter.into_counts())
    })
}

/// Simulates the distributed run: each element of `parts` is one disk's points (columns);
/// disks build histograms and count candidates over their own points in batches, the host
/// sums histograms and counts and does everything else.
pub fn run_distributed<P, C>(
    parts: &[P],
    params: &ClusterParams,
) -> Result<ClusterResult, ClusterError>
where
    P: AsRef<[C]>,
    C: AsRef<[f32]>,
{
    let grid = params.grid()?;
    let dims = parts.first().ok_or(ClusterError::NoInput)?.as_ref().len();
    if dims == 0 {
        return Err(ClusterError::NoInput);
    }
    let mut total = histograms(grid, dims);
    for part in parts {
        let mut local = histograms(grid, dims);
        in_chunks(part.as_ref(), dims, |chunk| {
            feed_histograms(&mut local, chunk)
        })?;
        for (t, l) in total.iter_mut().zip(&local) {
            t.merge(l)?;
        }
    }
    let bins = adaptive_bins(&total, params.alpha, params.beta)?;
    let map = BinMap::new(grid, &bins)?;
    search(bins, params, |cands| {
        let mut sum = vec![0; cands.len()];
        for part in parts {
            let mut counter = UnitCounter::new(map.clone(), cands)?;
            in_chunks(part.as_ref(), dims, |chunk| counter.feed(chunk))?;
            reduce_counts(&mut sum, counter.counts())?;
        }
        Ok(sum)
    })
}

/// Calls `f` on consecutive row chunks of `cols` ([`SIM_CHUNK`] rows each).
fn in_chunks<C, F>(cols: &[C], dims: usize, mut f: F) -> Result<(), ClusterError>
where
    C: AsRef<[f32]>,
    F: FnMut(&[&[f32]]) -> Result<(), ClusterError>,
{
    let rows = check_columns(cols, dims)?;
    let mut start = 0;
    while start < rows {
        let end = (start + SIM_CHUNK).min(rows);
        let chunk: Vec<&[f32]> = cols.iter().map(|c| &c.as_ref()[start..end]).collect();
        f(&chunk)?;
        start = end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen_params() -> GenParams {
        GenParams {
            points: 30_000,
            dims: 10,
            clusters: 3,
            max_cluster_dims: 5,
            noise: 0.1,
            min_width: 8.0,
            max_width: 15.0,
            seed: 7,
        }
    }

    /// Overlap of `[a)` with `[b)` as a fraction of each: (of a, of b).
    fn overlap(a: (f32, f32), b: (f32, f32)) -> (f32, f32) {
        let inter = (a.1.min(b.1) - a.0.max(b.0)).max(0.0);
        (inter / (a.1 - a.0), inter / (b.1 - b.0))
    }

    fn assert_recovered(planted: &[Cluster], found: &[FoundCluster]) {
        for p in planted {
            let hit = found.iter().any(|f| {
                f.dims == p.dims
                    && f.ranges.iter().zip(&p.ranges).all(|(fr, pr)| {
                        let (of_p, of_f) = overlap(*pr, *fr);
                        of_p >= 0.8 && of_f >= 0.8
                    })
            });
            assert!(hit, "planted {p:?} not in {found:#?}");
        }
    }

    /// Plain fine-bin index, written independently of `FineGrid::index`.
    fn naive_fine(v: f32, bins: usize) -> Option<usize> {
        if !(0.0..100.0).contains(&v) {
            return None;
        }
        Some(((v as f64 / 100.0 * bins as f64).floor() as usize).min(bins - 1))
    }

    #[test]
    fn histogram_matches_plain_count_and_merges() {
        let g = Generator::new(gen_params()).unwrap();
        let cols = g.columns(0, 5_000);
        let grid = FineGrid::new(0.0, 100.0, 37).unwrap();
        let mut whole = histograms(grid, 10);
        feed_histograms(&mut whole, &cols).unwrap();
        for (d, h) in whole.iter().enumerate() {
            let mut want = vec![0u64; 37];
            for &v in &cols[d] {
                want[naive_fine(v, 37).unwrap()] += 1;
            }
            assert_eq!(h.counts(), &want[..]);
            assert_eq!(h.rows(), 5_000);
        }
        let mut a = histograms(grid, 10);
        let mut b = histograms(grid, 10);
        let (x, y): (Vec<&[f32]>, Vec<&[f32]>) = cols.iter().map(|c| c.split_at(1234)).unzip();
        feed_histograms(&mut a, &x).unwrap();
        feed_histograms(&mut b, &y).unwrap();
        for ((a, b), w) in a.iter_mut().zip(&b).zip(&whole) {
            a.merge(b).unwrap();
            assert_eq!(a, w);
        }
        let mut h = Histogram::new(grid);
        h.feed(&[f32::NAN, -1.0, 100.0, 99.99]);
        assert_eq!((h.rows(), h.counts().iter().sum::<u64>()), (4, 1));
    }

    #[test]
    fn adaptive_bins_by_hand() {
        let grid = FineGrid::new(0.0, 8.0, 8).unwrap();
        let counts = vec![10, 10, 11, 30, 31, 30, 10, 9];
        let h = Histogram::from_counts(grid, counts, 160).unwrap();
        let flat = Histogram::from_counts(grid, vec![5; 8], 160).unwrap();
        let bins = adaptive_bins(&[h, flat], 1.5, 0.2).unwrap();
        let shape: Vec<_> = bins[0].iter().map(|b| (b.fine, b.count)).collect();
        assert_eq!(shape, vec![((0, 3), 31), ((3, 6), 91), ((6, 8), 19)]);
        assert_eq!(bins[0][1].threshold, 1.5 * 160.0 * 3.0 / 8.0);
        assert_eq!((bins[0][1].lo, bins[0][1].hi), (3.0, 6.0));
        let dense: Vec<bool> = bins[0].iter().map(Bin::is_dense).collect();
        assert_eq!(dense, vec![false, true, false]);
        assert_eq!(bins[1].len(), 1);
        assert!(!bins[1][0].is_dense());
        let units = dense_bins(&bins);
        assert_eq!(units.len(), 1);
        assert_eq!(units[0].unit.cells, vec![(0, 1)]);
    }

    /// All k-cell units over `cells` whose (k−1)-faces are all in `dense`, by enumeration.
    fn brute_candidates(dense: &[DenseUnit], dims: usize, bins: usize) -> Vec<Unit> {
        let k = dense[0].unit.cells.len() + 1;
        let known: HashSet<&Unit> = dense.iter().map(|d| &d.unit).collect();
        let mut out = Vec::new();
        let combos = (bins + 1).pow(dims as u32);
        for code in 0..combos {
            let mut c = code;
            let mut cells = Vec::new();
            for d in 0..dims {
                let b = c % (bins + 1);
                c /= bins + 1;
                if b > 0 {
                    cells.push((d, b - 1));
                }
            }
            if cells.len() != k {
                continue;
            }
            let all = (0..k).all(|s| {
                let mut f = cells.clone();
                f.remove(s);
                known.contains(&Unit { cells: f })
            });
            if all {
                out.push(Unit { cells });
            }
        }
        out.sort();
        out
    }

    #[test]
    fn candidates_equal_brute_force() {
        let mut rng = SplitMix64::new(3);
        for round in 0..40 {
            let (dims, bins) = (5, 3);
            let k = 1 + round % 3;
            let mut units = BTreeSet::new();
            for _ in 0..(4 + rng.below(20)) {
                let mut ds: Vec<usize> = (0..dims).collect();
                for i in 0..k {
                    let j = i + rng.below((dims - i) as u64) as usize;
                    ds.swap(i, j);
                }
                let mut cells: Vec<_> = ds[..k]
                    .iter()
                    .map(|&d| (d, rng.below(bins as u64) as usize))
                    .collect();
                cells.sort();
                units.insert(Unit { cells });
            }
            let dense: Vec<DenseUnit> = units
                .into_iter()
                .map(|unit| DenseUnit { unit, count: 1 })
                .collect();
            assert_eq!(candidates(&dense), brute_candidates(&dense, dims, bins));
        }
    }

    #[test]
    fn unit_counter_matches_plain_scan() {
        let g = Generator::new(gen_params()).unwrap();
        let cols = g.columns(0, 4_000);
        let grid = FineGrid::new(0.0, 100.0, 50).unwrap();
        let mut hists = histograms(grid, 10);
        feed_histograms(&mut hists, &cols).unwrap();
        let bins = adaptive_bins(&hists, 1.2, 0.3).unwrap();
        let mut cands = Vec::new();
        for (d, bs) in bins.iter().enumerate().take(4) {
            for (e, es) in bins.iter().enumerate().take(5).skip(d + 1) {
                for b in 0..bs.len() {
                    cands.push(Unit {
                        cells: vec![(d, b), (e, (b * 7) % es.len())],
                    });
                }
            }
        }
        cands.push(Unit {
            cells: vec![(1, 0), (3, 0), (9, 0)],
        });
        let mut counter = UnitCounter::new(BinMap::new(grid, &bins).unwrap(), &cands).unwrap();
        for chunk in 0..4 {
            let part: Vec<&[f32]> = cols.iter().map(|c| &c[chunk * 1000..][..1000]).collect();
            counter.feed(&part).unwrap();
        }
        assert!(counter.bytes() > cands.len() * 8);
        for (u, &got) in cands.iter().zip(counter.counts()) {
            let want = (0..4_000)
                .filter(|&r| {
                    u.cells.iter().all(|&(d, b)| {
                        let f = naive_fine(cols[d][r], 50);
                        let bin = &bins[d][b];
                        f.is_some_and(|f| bin.fine.0 <= f && f < bin.fine.1)
                    })
                })
                .count() as u64;
            assert_eq!(got, want, "{u:?}");
        }
    }

    #[test]
    fn dense_and_thresholds() {
        let grid = FineGrid::new(0.0, 4.0, 4).unwrap();
        let h0 = Histogram::from_counts(grid, vec![1, 50, 50, 1], 102).unwrap();
        let h1 = Histogram::from_counts(grid, vec![1, 1, 90, 10], 102).unwrap();
        let bins = adaptive_bins(&[h0, h1], 2.0, 0.1).unwrap();
        let u = |cells: Vec<(usize, usize)>| Unit { cells };
        let cands = vec![u(vec![(0, 1), (1, 1)]), u(vec![(0, 1), (1, 2)])];
        let th = thresholds(&cands, &bins).unwrap();
        assert_eq!(th, vec![102.0, 102.0]);
        let d = dense(&cands, &[103, 102], &th).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].unit, cands[0]);
        assert!(matches!(
            dense(&cands, &[1], &th),
            Err(ClusterError::Mismatch(_))
        ));
        assert!(matches!(
            thresholds(&[u(vec![(0, 9)])], &bins),
            Err(ClusterError::BadCell { dim: 0, bin: 9 })
        ));
    }

    #[test]
    fn clusters_by_hand() {
        let bin = |dim, i: usize| Bin {
            dim,
            fine: (i, i + 1),
            lo: i as f32,
            hi: i as f32 + 1.0,
            count: 0,
            threshold: 0.0,
        };
        let bins: Vec<Vec<Bin>> = (0..4)
            .map(|d| (0..6).map(|i| bin(d, i)).collect())
            .collect();
        let du = |cells: Vec<(usize, usize)>, count| DenseUnit {
            unit: Unit { cells },
            count,
        };
        let levels = vec![
            vec![
                du(vec![(0, 1)], 9),
                du(vec![(0, 3)], 9),
                du(vec![(2, 5)], 4),
            ],
            vec![
                du(vec![(0, 1), (1, 2)], 5),
                du(vec![(0, 1), (1, 3)], 6),
                du(vec![(0, 2), (1, 3)], 7),
                du(vec![(0, 5), (1, 5)], 8),
            ],
        ];
        let found = clusters(&levels, &bins).unwrap();
        let summary: Vec<_> = found
            .iter()
            .map(|c| (c.dims.clone(), c.ranges.clone(), c.units, c.points))
            .collect();
        assert_eq!(
            summary,
            vec![
                (vec![0, 1], vec![(1.0, 3.0), (2.0, 4.0)], 3, 18),
                (vec![0, 1], vec![(5.0, 6.0), (5.0, 6.0)], 1, 8),
                (vec![2], vec![(5.0, 6.0)], 1, 4),
            ]
        );
    }

    #[test]
    fn planted_clusters_recovered_and_distributed_equals_single() {
        let g = Generator::new(gen_params()).unwrap();
        let planted = g.planted();
        assert_eq!(planted.len(), 3);
        let all = g.columns(0, 30_000);
        let params = ClusterParams::default();
        let single = run_single(&all, &params).unwrap();
        assert_recovered(&planted, &single.clusters);
        assert_eq!(single.clusters.len(), 3, "{:#?}", single.clusters);
        let cuts = [0, 5_000, 12_345, 20_000, 30_000];
        let parts: Vec<Vec<Vec<f32>>> = cuts.windows(2).map(|w| g.columns(w[0], w[1])).collect();
        let distributed = run_distributed(&parts, &params).unwrap();
        assert_eq!(distributed, single);
        assert!(single.levels.len() >= 2);
    }

    #[test]
    fn chiu_like_workload_recovered() {
        // Chiu et al. §5.3: 20 dimensions, 5 clusters of up to 5 dimensions each.
        let g = Generator::new(GenParams {
            points: 20_000,
            dims: 20,
            clusters: 5,
            max_cluster_dims: 5,
            noise: 0.1,
            min_width: 6.0,
            max_width: 10.0,
            seed: 1,
        })
        .unwrap();
        let params = ClusterParams {
            alpha: 1.3,
            ..ClusterParams::default()
        };
        let result = run_single(&g.columns(0, 20_000), &params).unwrap();
        assert_recovered(&g.planted(), &result.clusters);
        assert_eq!(result.clusters.len(), 5, "{:#?}", result.clusters);
    }

    #[test]
    fn generator_is_per_index_and_in_range() {
        let g = Generator::new(gen_params()).unwrap();
        let cols = g.columns(0, 2_000);
        let some = g.columns(700, 710);
        for (d, c) in some.iter().enumerate() {
            assert_eq!(&c[..], &cols[d][700..710]);
        }
        assert_eq!(g.point(30_000), None);
        assert!(cols.iter().flatten().all(|v| (0.0..DOMAIN_HI).contains(v)));
        for c in g.planted() {
            assert!((2..=5).contains(&c.dims.len()));
            assert!(c.dims.windows(2).all(|w| w[0] < w[1]));
            for r in &c.ranges {
                assert!(r.0 >= 0.0 && r.1 <= DOMAIN_HI && r.1 - r.0 >= 7.99);
            }
        }
        let again = Generator::new(gen_params()).unwrap();
        assert_eq!(again.planted(), g.planted());
        assert_eq!(again.point(1234), g.point(1234));
    }

    #[test]
    fn typed_errors() {
        let p = gen_params();
        let err = |q: GenParams| Generator::new(q).err();
        assert_eq!(
            err(GenParams { points: 0, ..p }),
            Some(ClusterError::ZeroPoints)
        );
        assert_eq!(err(GenParams { dims: 1, ..p }), Some(ClusterError::Dims(1)));
        assert_eq!(
            err(GenParams {
                max_cluster_dims: 11,
                ..p
            }),
            Some(ClusterError::ClusterDims { max: 11, dims: 10 })
        );
        assert_eq!(
            err(GenParams { noise: 1.5, ..p }),
            Some(ClusterError::Noise(1.5))
        );
        assert!(matches!(
            err(GenParams {
                min_width: 0.0,
                ..p
            }),
            Some(ClusterError::Widths { .. })
        ));
        assert!(matches!(
            err(GenParams {
                clusters: 40,
                dims: 2,
                max_cluster_dims: 2,
                min_width: 20.0,
                max_width: 20.0,
                ..p
            }),
            Some(ClusterError::CannotPlace(_))
        ));
        assert!(matches!(
            FineGrid::new(1.0, 1.0, 5),
            Err(ClusterError::Domain { .. })
        ));
        assert_eq!(FineGrid::new(0.0, 1.0, 0), Err(ClusterError::FineBins(0)));
        let grid = FineGrid::new(0.0, 1.0, 4).unwrap();
        let h = histograms(grid, 2);
        assert_eq!(
            adaptive_bins(&h, 1.0, 0.3).err(),
            Some(ClusterError::Alpha(1.0))
        );
        assert_eq!(
            adaptive_bins(&h, 2.0, -0.1).err(),
            Some(ClusterError::Beta(-0.1))
        );
        assert_eq!(
            adaptive_bins(&[], 2.0, 0.1).err(),
            Some(ClusterError::NoInput)
        );
        let mut hs = histograms(grid, 1);
        assert!(
            hs[0]
                .merge(&Histogram::new(FineGrid::new(0.0, 2.0, 4).unwrap()))
                .is_err()
        );
        assert!(Histogram::from_counts(grid, vec![1; 4], 3).is_err());
        let ragged: Vec<Vec<f32>> = vec![vec![0.5; 3], vec![0.5; 2]];
        assert_eq!(
            feed_histograms(&mut hs, &ragged).err(),
            Some(ClusterError::Columns {
                expected: 1,
                got: 2
            })
        );
        let mut hs = histograms(grid, 2);
        assert!(matches!(
            feed_histograms(&mut hs, &ragged),
            Err(ClusterError::Ragged { column: 1, .. })
        ));
        let bins = adaptive_bins(&hs, 2.0, 0.1).unwrap();
        let map = BinMap::new(grid, &bins).unwrap();
        let dup = Unit {
            cells: vec![(1, 0), (0, 0)],
        };
        assert!(matches!(
            UnitCounter::new(map.clone(), &[dup]),
            Err(ClusterError::BadCell { .. })
        ));
        let empty = Unit { cells: Vec::new() };
        assert_eq!(
            UnitCounter::new(map, std::slice::from_ref(&empty)).err(),
            Some(ClusterError::EmptyUnit)
        );
        assert_eq!(
            thresholds(&[empty], &bins).err(),
            Some(ClusterError::EmptyUnit)
        );
        let small = ClusterParams {
            max_candidates: 1,
            ..ClusterParams::default()
        };
        let g = Generator::new(p).unwrap();
        assert!(matches!(
            run_single(&g.columns(0, 5_000), &small),
            Err(ClusterError::TooManyCandidates { level: 2, .. })
        ));
        let none: Vec<Vec<Vec<f32>>> = Vec::new();
        assert_eq!(
            run_distributed(&none, &small).err(),
            Some(ClusterError::NoInput)
        );
    }
}
