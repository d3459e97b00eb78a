//! Out-of-core 2-D FFT on distributed smart disks: the kernel of the 2-D FFT workload of
//! S. Chiu, W.-k. Liao and A. Choudhary, "Design and Evaluation of Distributed Smart Disk
//! Architecture for I/O-Intensive Workloads", §4.4 (a transpose- and redistribution-based
//! parallel out-of-core algorithm):
//!
//! 1. distribute the `n × m` input matrix `A` by rows as `(BLOCK, *)` over `p` disks;
//! 2. 1-D FFT of every row at its disk (`B = A·F_m`, row by row, one row in memory);
//! 3. transpose `B` by a disk-to-disk exchange through disk-resident streams;
//! 4. 1-D FFT of the rows of `Bᵀ` (the former columns).
//!
//! # Conventions
//! * Sign and scale are numpy's: `X[k][l] = Σ_r Σ_c x[r][c]·exp(-2πi (k·r/n + l·c/m))`, no
//!   normalisation, i.e. `X == numpy.fft.fft2(x)` for `x` of shape `(n, m)`.
//!   [`RowFft::process_inverse`] is numpy's `ifft` (scaled by `1/len`).
//! * Any `n, m ≥ 1` up to [`MAX_DIM`] (and `n·m ≤` [`MAX_ELEMENTS`]) is supported: rustfft
//!   plans every length (powers of two fastest; the paper uses 2048 × 2048).
//! * Split: `p` parts of a length `len` are [`block_range`]: part `d` owns
//!   `[⌊d·len/p⌋, ⌊(d+1)·len/p⌋)` (sizes differ by at most one; parts may be empty if `p > len`).
//!   Rows are split this way over the disks, and so are the columns for the exchange.
//! * **Output**: the algorithm produces `Xᵀ`. Disk `j` emits, in ascending order, output rows
//!   `l ∈ block_range(m, p, j)`, each of length `n`, whose element `k` is `X[k][l]` =
//!   `numpy.fft.fft2(x)[k, l]`. [`transpose`] maps it back for comparisons.
//!
//! # The out-of-core transpose (receiving side of disk `j`, share `n × w` with `w = |cols_j|`)
//! * Sender: [`split_row`] cuts each FFT'd row `r` into `p` [`Piece`]s; piece `j` (columns
//!   `cols_j` of row `r`) goes to disk `j`. Pieces may arrive in any order.
//! * Pass 1 (run formation): a [`PieceBuffer`] holds pieces up to `cap_bytes`; when the next piece
//!   would not fit it emits a [`Run`]: its pieces re-ordered column-major, streamed out as
//!   [`Segment`]s (one column, consecutive rows, at most `max_segment_values` values) sorted by
//!   `(column, first row)`. The driver writes each run to a disk-resident temp stream.
//!   I/O: the share is written once. Memory: ≤ `cap_bytes` + the arriving piece.
//! * Optional merge passes: while there are more runs than [`TransposePlan::final_fan_in`],
//!   groups of [`TransposePlan::merge_fan_in`] runs are k-way merged by a [`SegmentMerger`]
//!   into one longer run (memory: `k` run heads). Each pass reads and writes the share once;
//!   [`TransposePlan::intermediate_passes`] counts them.
//! * Final pass: a [`ColumnMerger`] k-way merges the remaining runs and emits whole columns
//!   `(l, [B[0][l], …, B[n-1][l]])` in ascending `l` as soon as each is complete (memory: one
//!   column + `k` run heads). I/O: the share is read once. Each emitted column is FFT'd with
//!   [`RowFft`] and written out as output row `l`. Collecting `g` consecutive columns gives a
//!   stripe of `g` whole columns (memory `g` columns).
//!
//! Memory per stage (the stages of one disk run one after another): row phase one row +
//! [`RowFft::state_bytes`]; pass 1 `cap_bytes` (+ the arriving piece, as the buffer flushes
//! before taking it); merges `cap_bytes`, checked: the mergers fail with
//! [`FftError::CapExceeded`] rather than exceed it. Byte sizes count `16` bytes per complex
//! value plus the record's header (`size_of::<Piece>()` / `size_of::<Segment>()`), see
//! [`TransposePlan`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::f64::consts::TAU;
use std::mem::size_of;
use std::ops::Range;
use std::sync::Arc;

use rustfft::num_complex::Complex64;
use rustfft::{Fft, FftPlanner};

use crate::rng::{SplitMix64, mix};

/// Largest number of rows or columns accepted by the generator and the plan.
pub const MAX_DIM: u64 = 1 << 24;
/// Largest number of matrix elements (`rows · cols`) accepted by the generator.
pub const MAX_ELEMENTS: u64 = 1 << 36;
/// Bytes of one complex value (two `f64`).
pub const COMPLEX_BYTES: usize = 16;
/// Half-width of the uniform noise added to each element (real and imaginary parts).
pub const NOISE_AMPLITUDE: f64 = 0.1;
/// Magnitudes of the planted tones (fewer tones when the matrix has fewer cells).
pub const TONE_AMPLITUDES: [f64; 3] = [1.0, 0.75, 0.5];
const TONE_SALT: u64 = 0x746f_6e65_7346_4654;

/// Errors for bad parameters or inconsistent streamed data.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FftError {
    /// A dimension is zero.
    #[error("{which} must be at least 1")]
    ZeroDimension {
        /// Which dimension.
        which: &'static str,
    },
    /// A dimension exceeds [`MAX_DIM`].
    #[error("{which} = {value} exceeds the maximum {max}")]
    DimensionTooLarge {
        /// Which dimension.
        which: &'static str,
        /// The value given.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// `rows · cols` exceeds [`MAX_ELEMENTS`].
    #[error("{elements} elements exceed the maximum {max}")]
    TooManyElements {
        /// `rows · cols`.
        elements: u64,
        /// The limit.
        max: u64,
    },
    /// The number of disks is zero.
    #[error("the number of disks must be at least 1")]
    ZeroDisks,
    /// A disk (part) index is not below the number of disks.
    #[error("disk {disk} out of range for {disks} disks")]
    DiskOutOfRange {
        /// The index given.
        disk: usize,
        /// The number of disks.
        disks: usize,
    },
    /// A row index is out of range.
    #[error("row {row} out of range for {rows} rows")]
    RowOutOfRange {
        /// The row index.
        row: u64,
        /// The number of rows.
        rows: u64,
    },
    /// A column index is outside the columns owned here.
    #[error("column {col} outside the owned columns {start}..{end}")]
    ColumnOutOfRange {
        /// The column index.
        col: u64,
        /// First owned column.
        start: u64,
        /// One past the last owned column.
        end: u64,
    },
    /// A row (or matrix row) has the wrong length.
    #[error("row has {got} values, expected {expected}")]
    RowLengthMismatch {
        /// Expected length.
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// Real and imaginary parts (or a block's arrays) have inconsistent lengths.
    #[error("re/im arrays have {re} and {im} values, expected {expected}")]
    ReImMismatch {
        /// Length of `re`.
        re: usize,
        /// Length of `im`.
        im: usize,
        /// Expected length of each.
        expected: usize,
    },
    /// `max_segment_values` is zero.
    #[error("max_segment_values must be at least 1")]
    ZeroSegmentLength,
    /// A single piece is larger than the buffer cap.
    #[error("a piece of {bytes} bytes exceeds the buffer cap of {cap} bytes")]
    PieceTooLarge {
        /// The piece's byte size.
        bytes: usize,
        /// The cap.
        cap: usize,
    },
    /// The cap cannot hold the minimum working set of a stage.
    #[error("cap of {cap} bytes is below the {needed} bytes needed")]
    CapTooSmall {
        /// Bytes needed at least.
        needed: usize,
        /// The cap.
        cap: usize,
    },
    /// Accepting data would exceed the memory cap.
    #[error("holding {needed} bytes would exceed the cap of {cap} bytes")]
    CapExceeded {
        /// Bytes that would be held.
        needed: usize,
        /// The cap.
        cap: usize,
    },
    /// More runs than the merge fan-in allows.
    #[error("{runs} runs exceed the fan-in {fan_in}")]
    FanInTooLarge {
        /// Runs requested.
        runs: usize,
        /// The largest fan-in the cap allows.
        fan_in: usize,
    },
    /// A run index is out of range.
    #[error("run {run} out of range for {runs} runs")]
    RunOutOfRange {
        /// The run index.
        run: usize,
        /// The number of runs.
        runs: usize,
    },
    /// A run was fed although the merger did not ask for it.
    #[error("run {run} was fed without being asked for")]
    UnexpectedFeed {
        /// The run index.
        run: usize,
    },
    /// A run's segments are not sorted by `(column, first row)`.
    #[error("run {run} is not sorted by (column, row)")]
    UnsortedRun {
        /// The run index.
        run: usize,
    },
    /// A segment with no values was fed.
    #[error("empty segment fed for run {run}")]
    EmptySegment {
        /// The run index.
        run: usize,
    },
    /// A value arrived twice.
    #[error("value (row {row}, column {col}) arrived twice")]
    DuplicateValue {
        /// Its column.
        col: u64,
        /// Its row.
        row: u64,
    },
    /// A column was left with missing rows.
    #[error("column {col} is missing {missing} rows")]
    IncompleteColumn {
        /// The column.
        col: u64,
        /// How many rows are missing.
        missing: u64,
    },
    /// A column got no value at all.
    #[error("column {col} received no values")]
    MissingColumn {
        /// The column.
        col: u64,
    },
}

// ---------------------------------------------------------------------------------------------
// Generator
// ---------------------------------------------------------------------------------------------

/// Parameters of the generated `rows × cols` complex matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenParams {
    /// Number of rows `n` (`1..=MAX_DIM`).
    pub rows: u64,
    /// Number of columns `m` (`1..=MAX_DIM`).
    pub cols: u64,
    /// Seed of the tones and the noise.
    pub seed: u64,
}

impl GenParams {
    /// Checks both dimensions against `1..=MAX_DIM` and `rows · cols ≤ MAX_ELEMENTS`.
    pub fn validate(&self) -> Result<(), FftError> {
        check_dim("rows", self.rows)?;
        check_dim("cols", self.cols)?;
        let elements = self.rows * self.cols; // both ≤ 2^24: no overflow
        if elements > MAX_ELEMENTS {
            return Err(FftError::TooManyElements {
                elements,
                max: MAX_ELEMENTS,
            });
        }
        Ok(())
    }
}

fn check_dim(which: &'static str, value: u64) -> Result<(), FftError> {
    if value == 0 {
        return Err(FftError::ZeroDimension { which });
    }
    if value > MAX_DIM {
        return Err(FftError::DimensionTooLarge {
            which,
            value,
            max: MAX_DIM,
        });
    }
    Ok(())
}

/// A planted complex sinusoid `amplitude · exp(+2πi (row_freq·r/n + col_freq·c/m))`; its
/// forward 2-D FFT is the single peak `X[row_freq][col_freq] = amplitude · n · m`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tone {
    /// Row frequency `k` (`0..n`).
    pub row_freq: u64,
    /// Column frequency `l` (`0..m`).
    pub col_freq: u64,
    /// Complex amplitude (magnitude from [`TONE_AMPLITUDES`], seeded phase).
    pub amplitude: Complex64,
}

/// The deterministic matrix: `x[r][c] = Σ tones + noise(seed, r·cols + c)`, where the tones
/// depend on `(seed, rows, cols)` only and the noise is uniform in `±NOISE_AMPLITUDE` per part.
/// Any disk can generate any row alone.
#[derive(Debug, Clone)]
pub struct Generator {
    params: GenParams,
    tones: Vec<Tone>,
}

impl Generator {
    /// Validates `params` and plants up to three tones at distinct seeded frequencies.
    pub fn new(params: GenParams) -> Result<Self, FftError> {
        params.validate()?;
        Ok(Generator {
            params,
            tones: plant_tones(&params),
        })
    }

    /// The parameters.
    pub fn params(&self) -> GenParams {
        self.params
    }

    /// The planted tones (distinct `(row_freq, col_freq)`).
    pub fn tones(&self) -> &[Tone] {
        &self.tones
    }

    /// The noise-free value of `X[tone.row_freq][tone.col_freq]`: `amplitude · n · m`.
    pub fn expected_peak(&self, tone: &Tone) -> Complex64 {
        tone.amplitude * (self.params.rows * self.params.cols) as f64
    }

    /// Element `(r, c)`.
    pub fn element(&self, r: u64, c: u64) -> Result<Complex64, FftError> {
        self.check_row(r)?;
        if c >= self.params.cols {
            return Err(FftError::ColumnOutOfRange {
                col: c,
                start: 0,
                end: self.params.cols,
            });
        }
        Ok(self.value(r, c))
    }

    /// Row `r` (`cols` values; memory `16 · cols` bytes).
    pub fn row(&self, r: u64) -> Result<Vec<Complex64>, FftError> {
        self.check_row(r)?;
        Ok((0..self.params.cols).map(|c| self.value(r, c)).collect())
    }

    /// The whole matrix in memory (for oracles and small tests only).
    pub fn matrix(&self) -> Result<Vec<Vec<Complex64>>, FftError> {
        (0..self.params.rows).map(|r| self.row(r)).collect()
    }

    fn check_row(&self, r: u64) -> Result<(), FftError> {
        if r >= self.params.rows {
            return Err(FftError::RowOutOfRange {
                row: r,
                rows: self.params.rows,
            });
        }
        Ok(())
    }

    fn value(&self, r: u64, c: u64) -> Complex64 {
        let GenParams { rows, cols, seed } = self.params;
        let mut noise = SplitMix64::for_index(seed, r * cols + c);
        let mut v = Complex64::new(
            (2.0 * noise.unit() - 1.0) * NOISE_AMPLITUDE,
            (2.0 * noise.unit() - 1.0) * NOISE_AMPLITUDE,
        );
        for t in &self.tones {
            let turns = turn_fraction(t.row_freq, r, rows) + turn_fraction(t.col_freq, c, cols);
            v += t.amplitude * Complex64::cis(TAU * turns);
        }
        v
    }
}

/// `((a·b) mod n) / n`, exact in integers before the division.
fn turn_fraction(a: u64, b: u64, n: u64) -> f64 {
    ((u128::from(a) * u128::from(b)) % u128::from(n)) as f64 / n as f64
}

fn plant_tones(p: &GenParams) -> Vec<Tone> {
    let cells = p.rows * p.cols;
    let mut rng = SplitMix64::new(mix(p.seed ^ TONE_SALT));
    let mut taken: Vec<u64> = Vec::new();
    let mut tones = Vec::new();
    for &magnitude in TONE_AMPLITUDES.iter().take(cells.min(3) as usize) {
        let mut cell = rng.below(cells);
        while taken.contains(&cell) {
            cell = (cell + 1) % cells;
        }
        taken.push(cell);
        tones.push(Tone {
            row_freq: cell / p.cols,
            col_freq: cell % p.cols,
            amplitude: Complex64::from_polar(magnitude, TAU * rng.unit()),
        });
    }
    tones
}

// ---------------------------------------------------------------------------------------------
// Row layout
// ---------------------------------------------------------------------------------------------

/// Splits complex values into their real and imaginary parts (for Arrow `re`/`im` columns).
pub fn split_re_im(values: &[Complex64]) -> (Vec<f64>, Vec<f64>) {
    values.iter().map(|v| (v.re, v.im)).unzip()
}

/// Joins real and imaginary parts of equal length into complex values.
pub fn join_re_im(re: &[f64], im: &[f64]) -> Result<Vec<Complex64>, FftError> {
    if re.len() != im.len() {
        return Err(FftError::ReImMismatch {
            re: re.len(),
            im: im.len(),
            expected: re.len(),
        });
    }
    Ok(re
        .iter()
        .zip(im)
        .map(|(&a, &b)| Complex64::new(a, b))
        .collect())
}

/// Rows of equal width stored column-wise: row ids plus flat row-major `re` and `im` arrays
/// (`re[i·width + c]` is row `i`, column `c`), ready for Arrow `FixedSizeList<f64>` columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    row_ids: Vec<u64>,
    width: usize,
    re: Vec<f64>,
    im: Vec<f64>,
}

/// Packs `(row id, row)` pairs of equal length into a [`Block`].
pub fn pack_block(rows: &[(u64, Vec<Complex64>)]) -> Result<Block, FftError> {
    let width = rows.first().map_or(0, |(_, r)| r.len());
    let mut block = Block {
        row_ids: Vec::with_capacity(rows.len()),
        width,
        re: vec![],
        im: vec![],
    };
    for (id, row) in rows {
        if row.len() != width {
            return Err(FftError::RowLengthMismatch {
                expected: width,
                got: row.len(),
            });
        }
        block.row_ids.push(*id);
        block.re.extend(row.iter().map(|v| v.re));
        block.im.extend(row.iter().map(|v| v.im));
    }
    Ok(block)
}

impl Block {
    /// Rebuilds a block from its arrays; `re` and `im` must hold `row_ids.len() · width` values.
    pub fn from_parts(
        row_ids: Vec<u64>,
        width: usize,
        re: Vec<f64>,
        im: Vec<f64>,
    ) -> Result<Block, FftError> {
        let expected = row_ids.len().checked_mul(width);
        if expected.is_none_or(|e| re.len() != e || im.len() != e) {
            let expected = expected.unwrap_or(usize::MAX);
            return Err(FftError::ReImMismatch {
                re: re.len(),
                im: im.len(),
                expected,
            });
        }
        Ok(Block {
            row_ids,
            width,
            re,
            im,
        })
    }

    /// The row ids, in block order.
    pub fn row_ids(&self) -> &[u64] {
        &self.row_ids
    }

    /// Values per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Flat row-major real parts.
    pub fn re(&self) -> &[f64] {
        &self.re
    }

    /// Flat row-major imaginary parts.
    pub fn im(&self) -> &[f64] {
        &self.im
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.row_ids.len()
    }

    /// Whether the block has no rows.
    pub fn is_empty(&self) -> bool {
        self.row_ids.is_empty()
    }

    /// Payload bytes: 8 per row id plus 16 per value.
    pub fn byte_size(&self) -> usize {
        8 * self.row_ids.len() + 8 * (self.re.len() + self.im.len())
    }

    /// Unpacks into `(row id, row)` pairs.
    pub fn unpack(&self) -> Vec<(u64, Vec<Complex64>)> {
        let w = self.width;
        self.row_ids
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let row = (i * w..(i + 1) * w).map(|j| Complex64::new(self.re[j], self.im[j]));
                (id, row.collect())
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Row FFT
// ---------------------------------------------------------------------------------------------

/// In-place 1-D FFTs of rows, reusing one rustfft plan per (length, direction) and one scratch
/// buffer. Memory: scratch plus the plans' twiddles, see [`RowFft::state_bytes`].
pub struct RowFft {
    planner: FftPlanner<f64>,
    plans: HashMap<(usize, bool), Arc<dyn Fft<f64>>>,
    scratch: Vec<Complex64>,
}

impl Default for RowFft {
    fn default() -> Self {
        Self::new()
    }
}

impl RowFft {
    /// A transformer with no plans yet.
    pub fn new() -> Self {
        RowFft {
            planner: FftPlanner::new(),
            plans: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Forward FFT in place: `y[l] = Σ_c x[c]·exp(-2πi l·c/len)`, unnormalised (numpy `fft`).
    pub fn process(&mut self, row: &mut [Complex64]) {
        self.run(row, false);
    }

    /// Inverse FFT in place, scaled by `1/len` (numpy `ifft`): undoes [`RowFft::process`].
    pub fn process_inverse(&mut self, row: &mut [Complex64]) {
        self.run(row, true);
        let scale = 1.0 / row.len() as f64;
        row.iter_mut().for_each(|v| *v *= scale);
    }

    /// Estimated bytes held: the scratch buffer plus 16 bytes per point of each cached plan.
    pub fn state_bytes(&self) -> usize {
        let plans: usize = self.plans.keys().map(|(len, _)| len * COMPLEX_BYTES).sum();
        self.scratch.len() * COMPLEX_BYTES + plans
    }

    fn run(&mut self, row: &mut [Complex64], inverse: bool) {
        if row.is_empty() {
            return;
        }
        let planner = &mut self.planner;
        let fft = self.plans.entry((row.len(), inverse)).or_insert_with(|| {
            if inverse {
                planner.plan_fft_inverse(row.len())
            } else {
                planner.plan_fft_forward(row.len())
            }
        });
        let need = fft.get_inplace_scratch_len();
        if self.scratch.len() < need {
            self.scratch.resize(need, Complex64::default());
        }
        fft.process_with_scratch(row, &mut self.scratch[..need]);
    }
}

// ---------------------------------------------------------------------------------------------
// Distribution and exchange
// ---------------------------------------------------------------------------------------------

fn bound(len: u64, parts: usize, k: usize) -> u64 {
    (u128::from(len) * k as u128 / parts as u128) as u64
}

/// The indices `[⌊part·len/parts⌋, ⌊(part+1)·len/parts⌋)` owned by `part` of `parts`.
pub fn block_range(len: u64, parts: usize, part: usize) -> Result<Range<u64>, FftError> {
    if parts == 0 {
        return Err(FftError::ZeroDisks);
    }
    if part >= parts {
        return Err(FftError::DiskOutOfRange {
            disk: part,
            disks: parts,
        });
    }
    Ok(bound(len, parts, part)..bound(len, parts, part + 1))
}

/// The part owning `index` under [`block_range`]: `⌊((index+1)·parts − 1) / len⌋`.
pub fn block_owner(len: u64, parts: usize, index: u64) -> Result<usize, FftError> {
    if parts == 0 {
        return Err(FftError::ZeroDisks);
    }
    if index >= len {
        return Err(FftError::RowOutOfRange {
            row: index,
            rows: len,
        });
    }
    Ok((((u128::from(index) + 1) * parts as u128 - 1) / u128::from(len)) as usize)
}

/// Part of one row sent to one disk: `values[i]` is column `col_start + i` of row `row`.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// Row index `r`.
    pub row: u64,
    /// First column.
    pub col_start: u64,
    /// The values, consecutive columns.
    pub values: Vec<Complex64>,
}

impl Piece {
    /// The columns covered.
    pub fn cols(&self) -> Range<u64> {
        self.col_start..self.col_start.saturating_add(self.values.len() as u64)
    }

    /// Bytes held: the header plus 16 per value.
    pub fn byte_size(&self) -> usize {
        size_of::<Piece>() + COMPLEX_BYTES * self.values.len()
    }
}

/// Cuts row `row_index` (already row-FFT'd) into one piece per disk `j` holding the columns
/// `block_range(row.len(), disks, j)`; disks owning no column get no piece.
pub fn split_row(
    row_index: u64,
    row: &[Complex64],
    disks: usize,
) -> Result<Vec<(usize, Piece)>, FftError> {
    if disks == 0 {
        return Err(FftError::ZeroDisks);
    }
    let mut out = Vec::with_capacity(disks);
    for j in 0..disks {
        let cols = block_range(row.len() as u64, disks, j)?;
        if cols.is_empty() {
            continue;
        }
        let values = row[cols.start as usize..cols.end as usize].to_vec();
        out.push((
            j,
            Piece {
                row: row_index,
                col_start: cols.start,
                values,
            },
        ));
    }
    Ok(out)
}

/// Values of one column at consecutive rows: `values[i]` is `B[row_start + i][col]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Column index.
    pub col: u64,
    /// First row.
    pub row_start: u64,
    /// The values, consecutive rows.
    pub values: Vec<Complex64>,
}

impl Segment {
    /// Bytes held: the header plus 16 per value.
    pub fn byte_size(&self) -> usize {
        segment_bytes(self.values.len())
    }

    fn key(&self) -> (u64, u64) {
        (self.col, self.row_start)
    }

    fn end_row(&self) -> u64 {
        self.row_start.saturating_add(self.values.len() as u64)
    }
}

fn segment_bytes(values: usize) -> usize {
    COMPLEX_BYTES
        .saturating_mul(values)
        .saturating_add(size_of::<Segment>())
}

/// Column bytes of the assembler: 16 per row for the values plus 1 per row for the fill map.
pub fn column_bytes(rows: u64) -> usize {
    (rows as usize).saturating_mul(COMPLEX_BYTES + 1)
}

// ---------------------------------------------------------------------------------------------
// Pass 1: run formation
// ---------------------------------------------------------------------------------------------

/// Buffers received pieces up to `cap_bytes` and emits them as sorted [`Run`]s.
#[derive(Debug)]
pub struct PieceBuffer {
    cap_bytes: usize,
    max_segment_values: usize,
    pieces: Vec<Piece>,
    bytes: usize,
}

impl PieceBuffer {
    /// A buffer of at most `cap_bytes` whose runs yield segments of ≤ `max_segment_values`.
    pub fn new(cap_bytes: usize, max_segment_values: usize) -> Result<Self, FftError> {
        if max_segment_values == 0 {
            return Err(FftError::ZeroSegmentLength);
        }
        Ok(PieceBuffer {
            cap_bytes,
            max_segment_values,
            pieces: Vec::new(),
            bytes: 0,
        })
    }

    /// Accepts a piece; if it does not fit beside the buffered ones, first returns those as a
    /// run (peak while the caller writes it: `cap_bytes` + this piece). Empty pieces are ignored.
    pub fn push(&mut self, piece: Piece) -> Result<Option<Run>, FftError> {
        let bytes = piece.byte_size();
        if piece.values.is_empty() {
            return Ok(None);
        }
        if bytes > self.cap_bytes {
            return Err(FftError::PieceTooLarge {
                bytes,
                cap: self.cap_bytes,
            });
        }
        let run = (self.bytes + bytes > self.cap_bytes).then(|| self.take_run());
        self.bytes += bytes;
        self.pieces.push(piece);
        Ok(run.flatten())
    }

    /// Returns the buffered pieces as a last run (`None` if empty).
    pub fn finish(&mut self) -> Option<Run> {
        self.take_run()
    }

    /// Bytes currently buffered.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn take_run(&mut self) -> Option<Run> {
        if self.pieces.is_empty() {
            return None;
        }
        let mut pieces = std::mem::take(&mut self.pieces);
        pieces.sort_by_key(|p| (p.row, p.col_start));
        let bytes = std::mem::take(&mut self.bytes);
        Some(Run {
            pieces,
            max_segment_values: self.max_segment_values,
            bytes,
        })
    }
}

/// A buffer-full of pieces, readable column-major as segments sorted by `(column, row)`.
#[derive(Debug)]
pub struct Run {
    pieces: Vec<Piece>,
    max_segment_values: usize,
    bytes: usize,
}

impl Run {
    /// Bytes held (as counted by the buffer).
    pub fn byte_size(&self) -> usize {
        self.bytes
    }

    /// Streams the segments in `(column, first row)` order; one segment in memory at a time.
    pub fn segments(&self) -> RunSegments<'_> {
        let col = self.pieces.iter().map(|p| p.col_start).min();
        RunSegments {
            run: self,
            col,
            next_piece: 0,
        }
    }

    /// All segments at once (convenience for small runs and tests).
    pub fn into_segments(self) -> Vec<Segment> {
        self.segments().collect()
    }

    /// An owning iterator over the segments (as [`Run::segments`]), for a driver that hands a
    /// run out over several calls; the run's memory is freed when the cursor is dropped.
    pub fn into_cursor(self) -> RunCursor {
        let col = self.pieces.iter().map(|p| p.col_start).min();
        RunCursor {
            run: self,
            col,
            next_piece: 0,
        }
    }

    /// The smallest covered column above `col`.
    fn next_col(&self, col: u64) -> Option<u64> {
        let candidates = self
            .pieces
            .iter()
            .map(|p| (p.col_start.max(col + 1), p.cols().end));
        candidates.filter(|(c, end)| c < end).map(|(c, _)| c).min()
    }
}

/// Iterator over a run's segments (see [`Run::segments`]).
#[derive(Debug)]
pub struct RunSegments<'a> {
    run: &'a Run,
    col: Option<u64>,
    next_piece: usize,
}

impl Iterator for RunSegments<'_> {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        next_segment(self.run, &mut self.col, &mut self.next_piece)
    }
}

/// Owning iterator over a run's segments (see [`Run::into_cursor`]).
#[derive(Debug)]
pub struct RunCursor {
    run: Run,
    col: Option<u64>,
    next_piece: usize,
}

impl RunCursor {
    /// Bytes held (the whole run, until the cursor is dropped).
    pub fn byte_size(&self) -> usize {
        self.run.byte_size()
    }
}

impl Iterator for RunCursor {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        next_segment(&self.run, &mut self.col, &mut self.next_piece)
    }
}

/// The next segment of `run` from the cursor `(col, next_piece)` on.
fn next_segment(run: &Run, col: &mut Option<u64>, next_piece: &mut usize) -> Option<Segment> {
    loop {
        let c = (*col)?;
        if let Some(seg) = scan_column(run, c, next_piece) {
            return Some(seg);
        }
        *col = run.next_col(c);
        *next_piece = 0;
    }
}

/// The next segment of column `col` from piece `next_piece` on, or `None` when the column is
/// done.
fn scan_column(run: &Run, col: u64, next_piece: &mut usize) -> Option<Segment> {
    let mut seg: Option<Segment> = None;
    while let Some(p) = run.pieces.get(*next_piece) {
        if p.cols().contains(&col) {
            let v = p.values[(col - p.col_start) as usize];
            match seg.as_mut() {
                None => {
                    seg = Some(Segment {
                        col,
                        row_start: p.row,
                        values: vec![v],
                    })
                }
                Some(s) if s.end_row() == p.row && s.values.len() < run.max_segment_values => {
                    s.values.push(v)
                }
                Some(_) => return seg,
            }
        }
        *next_piece += 1;
    }
    seg
}

// ---------------------------------------------------------------------------------------------
// Merging
// ---------------------------------------------------------------------------------------------

/// One step of a push-driven merge.
#[derive(Debug, Clone, PartialEq)]
pub enum Step<T> {
    /// Feed the next segment of this run (or `None` if it is exhausted), then step again.
    Need(usize),
    /// The next output item.
    Item(T),
    /// All runs exhausted (and, for [`ColumnMerger`], every owned column emitted).
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum SlotState {
    Needed,
    Holding,
    Finished,
}

#[derive(Debug)]
struct Slot {
    last: Option<(u64, u64)>,
    state: SlotState,
}

/// A run head in the merge heap, ordered by `(column, first row, run)`.
#[derive(Debug)]
struct Head {
    run: usize,
    seg: Segment,
}

impl Head {
    fn order(&self) -> (u64, u64, usize) {
        (self.seg.col, self.seg.row_start, self.run)
    }
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.order() == other.order()
    }
}

impl Eq for Head {}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Head {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order().cmp(&other.order())
    }
}

/// k-way merge of sorted runs into one stream sorted by `(column, first row)`; used for
/// intermediate merge passes (its output is a new run). Memory: the `k` run heads, checked
/// against `cap_bytes`.
#[derive(Debug)]
pub struct SegmentMerger {
    slots: Vec<Slot>,
    pending: Vec<usize>,
    heap: BinaryHeap<Reverse<Head>>,
    bytes: usize,
    cap_bytes: usize,
}

impl SegmentMerger {
    /// A merger of `runs` runs whose heads may hold at most `cap_bytes` together.
    pub fn new(runs: usize, cap_bytes: usize) -> Self {
        let slot = || Slot {
            last: None,
            state: SlotState::Needed,
        };
        SegmentMerger {
            slots: (0..runs).map(|_| slot()).collect(),
            pending: (0..runs).rev().collect(),
            heap: BinaryHeap::new(),
            bytes: 0,
            cap_bytes,
        }
    }

    /// Asks for a run's next segment (at the start every run is asked for, lowest first; later
    /// the run whose head was just yielded), or yields the smallest head, or reports the end.
    pub fn step(&mut self) -> Step<Segment> {
        if let Some(&run) = self.pending.last() {
            return Step::Need(run);
        }
        let Some(Reverse(Head { run, seg })) = self.heap.pop() else {
            return Step::Done;
        };
        self.slots[run].state = SlotState::Needed;
        self.pending.push(run);
        self.bytes -= seg.byte_size();
        Step::Item(seg)
    }

    /// Feeds a run that is waiting for its next segment (`None`: the run is exhausted). Fails
    /// on a run not waiting, an empty or out-of-order segment, or if the heads would exceed
    /// the cap.
    pub fn feed(&mut self, run: usize, seg: Option<Segment>) -> Result<(), FftError> {
        let runs = self.slots.len();
        let slot = self
            .slots
            .get_mut(run)
            .ok_or(FftError::RunOutOfRange { run, runs })?;
        if slot.state != SlotState::Needed {
            return Err(FftError::UnexpectedFeed { run });
        }
        let Some(seg) = seg else {
            slot.state = SlotState::Finished;
            self.pending.retain(|&r| r != run);
            return Ok(());
        };
        if seg.values.is_empty() {
            return Err(FftError::EmptySegment { run });
        }
        if slot.last.is_some_and(|last| seg.key() < last) {
            return Err(FftError::UnsortedRun { run });
        }
        let needed = self.bytes + seg.byte_size();
        if needed > self.cap_bytes {
            return Err(FftError::CapExceeded {
                needed,
                cap: self.cap_bytes,
            });
        }
        self.bytes = needed;
        slot.last = Some(seg.key());
        slot.state = SlotState::Holding;
        self.heap.push(Reverse(Head { run, seg }));
        self.pending.retain(|&r| r != run);
        Ok(())
    }

    /// Bytes held by the run heads.
    pub fn state_bytes(&self) -> usize {
        self.bytes
    }
}

#[derive(Debug)]
struct PartialColumn {
    col: u64,
    values: Vec<Complex64>,
    filled: Vec<bool>,
    count: u64,
}

/// Places segments arriving in column order into whole columns of `rows` values and emits each
/// column when complete, checking for duplicate, missing and foreign values.
/// Memory: one column, [`column_bytes`]`(rows)`.
#[derive(Debug)]
pub struct ColumnAssembler {
    rows: u64,
    cols: Range<u64>,
    next_col: u64,
    current: Option<PartialColumn>,
}

impl ColumnAssembler {
    /// An assembler of columns `cols` (all of which must be produced) of `rows` values.
    pub fn new(rows: u64, cols: Range<u64>) -> Result<Self, FftError> {
        check_dim("rows", rows)?;
        let next_col = cols.start;
        Ok(ColumnAssembler {
            rows,
            cols,
            next_col,
            current: None,
        })
    }

    /// Adds a segment; returns `(column, values)` if this completed a column.
    pub fn push(&mut self, seg: Segment) -> Result<Option<(u64, Vec<Complex64>)>, FftError> {
        self.check_segment(&seg)?;
        let column = match self.current.take() {
            Some(pc) if pc.col == seg.col => pc,
            Some(pc) => return Err(self.leave_error(&pc, &seg)),
            None => self.open(&seg)?,
        };
        let column = self.current.insert(column);
        for (i, v) in seg.values.into_iter().enumerate() {
            let row = seg.row_start + i as u64;
            let at = row as usize;
            if column.filled[at] {
                return Err(FftError::DuplicateValue { col: seg.col, row });
            }
            column.filled[at] = true;
            column.values[at] = v;
            column.count += 1;
        }
        if column.count < self.rows {
            return Ok(None);
        }
        self.next_col = seg.col + 1;
        Ok(self.current.take().map(|pc| (pc.col, pc.values)))
    }

    /// Checks that nothing is left half-filled and every owned column was emitted.
    pub fn finish(&self) -> Result<(), FftError> {
        if let Some(pc) = &self.current {
            return Err(FftError::IncompleteColumn {
                col: pc.col,
                missing: self.rows - pc.count,
            });
        }
        if self.next_col < self.cols.end {
            return Err(FftError::MissingColumn { col: self.next_col });
        }
        Ok(())
    }

    /// Bytes held by the column being filled (0 between columns).
    pub fn state_bytes(&self) -> usize {
        self.current.as_ref().map_or(0, |_| column_bytes(self.rows))
    }

    fn check_segment(&self, seg: &Segment) -> Result<(), FftError> {
        if !self.cols.contains(&seg.col) {
            let (start, end) = (self.cols.start, self.cols.end);
            return Err(FftError::ColumnOutOfRange {
                col: seg.col,
                start,
                end,
            });
        }
        let end = seg.row_start.saturating_add(seg.values.len() as u64);
        if end > self.rows {
            return Err(FftError::RowOutOfRange {
                row: end - 1,
                rows: self.rows,
            });
        }
        Ok(())
    }

    fn leave_error(&self, pc: &PartialColumn, seg: &Segment) -> FftError {
        if seg.col < pc.col {
            FftError::DuplicateValue {
                col: seg.col,
                row: seg.row_start,
            }
        } else {
            FftError::IncompleteColumn {
                col: pc.col,
                missing: self.rows - pc.count,
            }
        }
    }

    fn open(&self, seg: &Segment) -> Result<PartialColumn, FftError> {
        let col = seg.col;
        if col < self.next_col {
            return Err(FftError::DuplicateValue {
                col,
                row: seg.row_start,
            });
        }
        if col > self.next_col {
            return Err(FftError::MissingColumn { col: self.next_col });
        }
        let n = self.rows as usize;
        let values = vec![Complex64::default(); n];
        Ok(PartialColumn {
            col,
            values,
            filled: vec![false; n],
            count: 0,
        })
    }
}

/// The final pass: k-way merges runs and emits whole columns in ascending order.
/// Memory: one column ([`column_bytes`]) + the `k` run heads, together ≤ `cap_bytes`.
#[derive(Debug)]
pub struct ColumnMerger {
    merger: SegmentMerger,
    assembler: ColumnAssembler,
}

impl ColumnMerger {
    /// A merger of `runs` runs into the columns `cols` of `rows` values within `cap_bytes`.
    pub fn new(
        runs: usize,
        rows: u64,
        cols: Range<u64>,
        cap_bytes: usize,
    ) -> Result<Self, FftError> {
        let assembler = ColumnAssembler::new(rows, cols)?;
        let needed = column_bytes(rows);
        let heads_cap = cap_bytes.checked_sub(needed).ok_or(FftError::CapTooSmall {
            needed,
            cap: cap_bytes,
        })?;
        Ok(ColumnMerger {
            merger: SegmentMerger::new(runs, heads_cap),
            assembler,
        })
    }

    /// Asks for a run's next segment, yields the next complete column `(l, values)`, or
    /// reports the end after checking that every owned column was emitted.
    pub fn step(&mut self) -> Result<Step<(u64, Vec<Complex64>)>, FftError> {
        loop {
            match self.merger.step() {
                Step::Need(run) => return Ok(Step::Need(run)),
                Step::Done => return self.assembler.finish().map(|()| Step::Done),
                Step::Item(seg) => {
                    if let Some(column) = self.assembler.push(seg)? {
                        return Ok(Step::Item(column));
                    }
                }
            }
        }
    }

    /// Feeds the segment asked for (see [`SegmentMerger::feed`]).
    pub fn feed(&mut self, run: usize, seg: Option<Segment>) -> Result<(), FftError> {
        self.merger.feed(run, seg)
    }

    /// Bytes held: run heads plus the column being filled.
    pub fn state_bytes(&self) -> usize {
        self.merger.state_bytes() + self.assembler.state_bytes()
    }
}

// ---------------------------------------------------------------------------------------------
// Memory plan
// ---------------------------------------------------------------------------------------------

/// The memory plan of the receiving side on one disk: `rows` (= `n`) values per column, owned
/// columns `cols`, a per-stage cap and the segment length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransposePlan {
    rows: u64,
    cols: Range<u64>,
    cap_bytes: usize,
    max_segment_values: usize,
}

impl TransposePlan {
    /// Validates that `cap_bytes` holds one piece (`cols.len()` values) and one column plus two
    /// run heads of `max_segment_values` values.
    pub fn new(
        rows: u64,
        cols: Range<u64>,
        cap_bytes: usize,
        max_segment_values: usize,
    ) -> Result<Self, FftError> {
        check_dim("rows", rows)?;
        if max_segment_values == 0 {
            return Err(FftError::ZeroSegmentLength);
        }
        let plan = TransposePlan {
            rows,
            cols,
            cap_bytes,
            max_segment_values,
        };
        let needed = plan.piece_bytes().max(
            plan.column_bytes()
                .saturating_add(plan.head_bytes().saturating_mul(2)),
        );
        if needed > cap_bytes {
            return Err(FftError::CapTooSmall {
                needed,
                cap: cap_bytes,
            });
        }
        Ok(plan)
    }

    /// Bytes of one column in the final pass.
    pub fn column_bytes(&self) -> usize {
        column_bytes(self.rows)
    }

    /// Bytes of one run head (a segment of `max_segment_values` values).
    pub fn head_bytes(&self) -> usize {
        segment_bytes(self.max_segment_values)
    }

    /// Bytes of one received piece (one row's share of the owned columns).
    pub fn piece_bytes(&self) -> usize {
        let width = self.cols.end.saturating_sub(self.cols.start) as usize;
        COMPLEX_BYTES
            .saturating_mul(width)
            .saturating_add(size_of::<Piece>())
    }

    /// Most runs the final [`ColumnMerger`] may merge (≥ 2).
    pub fn final_fan_in(&self) -> usize {
        (self.cap_bytes - self.column_bytes()) / self.head_bytes()
    }

    /// Most runs an intermediate [`SegmentMerger`] pass may merge (≥ 2).
    pub fn merge_fan_in(&self) -> usize {
        self.cap_bytes / self.head_bytes()
    }

    /// Intermediate passes needed for `runs` runs when each merges groups of
    /// [`TransposePlan::merge_fan_in`] consecutive runs, until ≤ `final_fan_in` remain.
    pub fn intermediate_passes(&self, runs: usize) -> usize {
        let (mut runs, mut passes) = (runs, 0);
        while runs > self.final_fan_in() {
            runs = runs.div_ceil(self.merge_fan_in());
            passes += 1;
        }
        passes
    }

    /// The pass-1 buffer.
    pub fn piece_buffer(&self) -> PieceBuffer {
        let (cap_bytes, max_segment_values) = (self.cap_bytes, self.max_segment_values);
        PieceBuffer {
            cap_bytes,
            max_segment_values,
            pieces: Vec::new(),
            bytes: 0,
        }
    }

    /// An intermediate merger of `runs ≤ merge_fan_in` runs.
    pub fn segment_merger(&self, runs: usize) -> Result<SegmentMerger, FftError> {
        let fan_in = self.merge_fan_in();
        if runs > fan_in {
            return Err(FftError::FanInTooLarge { runs, fan_in });
        }
        Ok(SegmentMerger::new(runs, self.cap_bytes))
    }

    /// The final merger of `runs ≤ final_fan_in` runs.
    pub fn column_merger(&self, runs: usize) -> Result<ColumnMerger, FftError> {
        let fan_in = self.final_fan_in();
        if runs > fan_in {
            return Err(FftError::FanInTooLarge { runs, fan_in });
        }
        ColumnMerger::new(runs, self.rows, self.cols.clone(), self.cap_bytes)
    }
}

// ---------------------------------------------------------------------------------------------
// Single-node oracles
// ---------------------------------------------------------------------------------------------

/// Checks that `matrix` is a non-empty rectangle; returns `(rows, cols)`.
fn shape(matrix: &[Vec<Complex64>]) -> Result<(usize, usize), FftError> {
    let cols = matrix.first().map_or(0, Vec::len);
    if matrix.is_empty() || cols == 0 {
        return Err(FftError::ZeroDimension {
            which: if matrix.is_empty() { "rows" } else { "cols" },
        });
    }
    if let Some(bad) = matrix.iter().find(|r| r.len() != cols) {
        return Err(FftError::RowLengthMismatch {
            expected: cols,
            got: bad.len(),
        });
    }
    Ok((matrix.len(), cols))
}

/// The plain in-memory 2-D FFT `X` (numpy `fft2` convention): row FFTs, then column FFTs.
pub fn fft2_plain(matrix: &[Vec<Complex64>]) -> Result<Vec<Vec<Complex64>>, FftError> {
    let (n, m) = shape(matrix)?;
    let mut planner = FftPlanner::<f64>::new();
    let (row_fft, col_fft) = (planner.plan_fft_forward(m), planner.plan_fft_forward(n));
    let mut out = matrix.to_vec();
    out.iter_mut().for_each(|row| row_fft.process(row));
    let mut column = vec![Complex64::default(); n];
    for c in 0..m {
        column.iter_mut().zip(&out).for_each(|(v, row)| *v = row[c]);
        col_fft.process(&mut column);
        out.iter_mut().zip(&column).for_each(|(row, v)| row[c] = *v);
    }
    Ok(out)
}

/// The direct 2-D DFT by its definition, `O(n²m²)`: for small matrices only.
pub fn dft2_direct(matrix: &[Vec<Complex64>]) -> Result<Vec<Vec<Complex64>>, FftError> {
    let (n, m) = shape(matrix)?;
    let twiddle = |k: usize, r: usize, n: usize| -turn_fraction(k as u64, r as u64, n as u64);
    let cell = |k: usize, l: usize| -> Complex64 {
        let mut sum = Complex64::default();
        for (r, row) in matrix.iter().enumerate() {
            for (c, x) in row.iter().enumerate() {
                sum += x * Complex64::cis(TAU * (twiddle(k, r, n) + twiddle(l, c, m)));
            }
        }
        sum
    };
    Ok((0..n)
        .map(|k| (0..m).map(|l| cell(k, l)).collect())
        .collect())
}

/// The transpose of a rectangular matrix.
pub fn transpose(matrix: &[Vec<Complex64>]) -> Result<Vec<Vec<Complex64>>, FftError> {
    let (_, m) = shape(matrix)?;
    Ok((0..m)
        .map(|c| matrix.iter().map(|row| row[c]).collect())
        .collect())
}

/// `max |a − b| / max |b|` over all elements (the absolute error if `b` is all zero); a NaN
/// or infinite difference anywhere makes it infinite.
pub fn relative_error(a: &[Vec<Complex64>], b: &[Vec<Complex64>]) -> Result<f64, FftError> {
    let (n, m) = shape(b)?;
    let (na, ma) = shape(a)?;
    if (na, ma) != (n, m) {
        return Err(FftError::RowLengthMismatch {
            expected: n * m,
            got: na * ma,
        });
    }
    let pairs = a.iter().flatten().zip(b.iter().flatten());
    let diff = pairs
        .map(|(x, y)| (x - y).norm())
        .map(|d| if d.is_finite() { d } else { f64::INFINITY })
        .fold(0.0, f64::max);
    let scale = b.iter().flatten().map(|y| y.norm()).fold(0.0, f64::max);
    Ok(if scale > 0.0 { diff / scale } else { diff })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(re: f64, im: f64) -> Complex64 {
        Complex64::new(re, im)
    }

    fn gen_matrix(rows: u64, cols: u64, seed: u64) -> Vec<Vec<Complex64>> {
        Generator::new(GenParams { rows, cols, seed })
            .unwrap()
            .matrix()
            .unwrap()
    }

    /// A naive 1-D DFT, written independently of everything above.
    fn naive_dft(x: &[Complex64]) -> Vec<Complex64> {
        let n = x.len();
        (0..n)
            .map(|k| {
                x.iter()
                    .enumerate()
                    .map(|(j, v)| v * Complex64::cis(-TAU * ((k * j) % n) as f64 / n as f64))
                    .sum()
            })
            .collect()
    }

    #[test]
    fn generator_validates() {
        let g = |rows, cols| {
            Generator::new(GenParams {
                rows,
                cols,
                seed: 1,
            })
            .map(|_| ())
        };
        assert_eq!(g(0, 4), Err(FftError::ZeroDimension { which: "rows" }));
        assert_eq!(g(4, 0), Err(FftError::ZeroDimension { which: "cols" }));
        let big = MAX_DIM + 1;
        assert_eq!(
            g(4, big),
            Err(FftError::DimensionTooLarge {
                which: "cols",
                value: big,
                max: MAX_DIM
            })
        );
        let e = MAX_DIM * MAX_DIM;
        assert_eq!(
            g(MAX_DIM, MAX_DIM),
            Err(FftError::TooManyElements {
                elements: e,
                max: MAX_ELEMENTS
            })
        );
        assert!(g(1, 1).is_ok());
        let generator = Generator::new(GenParams {
            rows: 3,
            cols: 5,
            seed: 1,
        })
        .unwrap();
        assert_eq!(
            generator.row(3),
            Err(FftError::RowOutOfRange { row: 3, rows: 3 })
        );
        assert!(matches!(
            generator.element(0, 5),
            Err(FftError::ColumnOutOfRange { .. })
        ));
    }

    #[test]
    fn generator_is_deterministic_per_element() {
        let p = GenParams {
            rows: 16,
            cols: 12,
            seed: 42,
        };
        let (a, b) = (Generator::new(p).unwrap(), Generator::new(p).unwrap());
        assert_eq!(a.row(7).unwrap(), b.row(7).unwrap());
        assert_eq!(a.row(7).unwrap()[3], b.element(7, 3).unwrap());
        let other = Generator::new(GenParams { seed: 43, ..p }).unwrap();
        assert_ne!(a.row(7).unwrap(), other.row(7).unwrap());
        assert_eq!(
            Generator::new(GenParams {
                rows: 1,
                cols: 1,
                seed: 5
            })
            .unwrap()
            .tones()
            .len(),
            1
        );
        let tones = a.tones();
        assert_eq!(tones.len(), 3);
        for (i, t) in tones.iter().enumerate() {
            assert!((t.amplitude.norm() - TONE_AMPLITUDES[i]).abs() < 1e-12);
            assert!(
                tones[..i]
                    .iter()
                    .all(|u| (u.row_freq, u.col_freq) != (t.row_freq, t.col_freq))
            );
        }
    }

    #[test]
    fn direct_dft_has_numpy_sign_convention() {
        // A unit impulse at (1, 2): X[k][l] = exp(-2πi (k/n + 2l/m)).
        let (n, m) = (4, 8);
        let mut x = vec![vec![c(0.0, 0.0); m]; n];
        x[1][2] = c(1.0, 0.0);
        let got = dft2_direct(&x).unwrap();
        for (k, row) in got.iter().enumerate() {
            for (l, v) in row.iter().enumerate() {
                let angle = -TAU * (k as f64 / n as f64 + 2.0 * l as f64 / m as f64);
                assert!((v - c(angle.cos(), angle.sin())).norm() < 1e-12);
            }
        }
        // 1×1: identity; constant matrix: one peak of n·m at DC.
        let ones = vec![vec![c(1.0, 0.0); 3]; 2];
        let d = dft2_direct(&ones).unwrap();
        assert!((d[0][0] - c(6.0, 0.0)).norm() < 1e-12);
        assert!(d.iter().flatten().skip(1).all(|v| v.norm() < 1e-12));
    }

    #[test]
    fn direct_dft_validates_plain_fft() {
        for (n, m, seed) in [(8, 8, 1), (6, 10, 2), (1, 7, 3), (5, 1, 4)] {
            let x = gen_matrix(n, m, seed);
            let err = relative_error(&fft2_plain(&x).unwrap(), &dft2_direct(&x).unwrap()).unwrap();
            assert!(err < 1e-12, "{n}x{m}: {err}");
        }
    }

    #[test]
    fn planted_tones_are_the_peaks() {
        let generator = Generator::new(GenParams {
            rows: 32,
            cols: 16,
            seed: 9,
        })
        .unwrap();
        let x = fft2_plain(&generator.matrix().unwrap()).unwrap();
        let mut cells: Vec<(f64, usize, usize)> = x
            .iter()
            .enumerate()
            .flat_map(|(k, row)| row.iter().enumerate().map(move |(l, v)| (v.norm(), k, l)))
            .collect();
        cells.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (t, cell) in generator.tones().iter().zip(&cells) {
            assert_eq!((cell.1 as u64, cell.2 as u64), (t.row_freq, t.col_freq));
            let want = generator.expected_peak(t);
            assert!((x[cell.1][cell.2] - want).norm() < 0.02 * want.norm());
        }
        assert!(
            cells[3].0 < 0.1 * cells[2].0,
            "noise floor {} vs {}",
            cells[3].0,
            cells[2].0
        );
    }

    #[test]
    fn row_fft_matches_naive_dft_and_inverts() {
        let mut fft = RowFft::new();
        for len in [1usize, 2, 12, 16, 17] {
            let x: Vec<Complex64> = (0..len).map(|i| c(i as f64, (i * i % 7) as f64)).collect();
            let mut y = x.clone();
            fft.process(&mut y);
            let want = naive_dft(&x);
            assert!(
                y.iter().zip(&want).all(|(a, b)| (a - b).norm() < 1e-9),
                "len {len}"
            );
            fft.process_inverse(&mut y);
            assert!(y.iter().zip(&x).all(|(a, b)| (a - b).norm() < 1e-12));
        }
        let before = fft.plans.len();
        let mut row = vec![c(1.0, 0.0); 16];
        fft.process(&mut row);
        fft.process(&mut row);
        assert_eq!(fft.plans.len(), before, "plans are reused");
        assert!(fft.state_bytes() > 0);
        fft.process(&mut []);
    }

    #[test]
    fn blocks_round_trip() {
        let rows = vec![
            (5u64, vec![c(1.0, 2.0), c(3.0, 4.0)]),
            (9, vec![c(-1.0, 0.5), c(0.0, -2.0)]),
        ];
        let block = pack_block(&rows).unwrap();
        assert_eq!(block.re(), &[1.0, 3.0, -1.0, 0.0]);
        assert_eq!(block.im(), &[2.0, 4.0, 0.5, -2.0]);
        assert_eq!(
            (block.len(), block.width(), block.byte_size()),
            (2, 2, 2 * 8 + 4 * 16)
        );
        assert_eq!(block.unpack(), rows);
        let rebuilt = Block::from_parts(
            block.row_ids().to_vec(),
            2,
            block.re().to_vec(),
            block.im().to_vec(),
        );
        assert_eq!(rebuilt.unwrap(), block);
        assert!(matches!(
            Block::from_parts(vec![1], 2, vec![0.0; 2], vec![0.0]),
            Err(FftError::ReImMismatch { .. })
        ));
        let ragged = vec![(0u64, vec![c(0.0, 0.0)]), (1, vec![])];
        assert_eq!(
            pack_block(&ragged),
            Err(FftError::RowLengthMismatch {
                expected: 1,
                got: 0
            })
        );
        assert!(pack_block(&[]).unwrap().is_empty());
        let (re, im) = split_re_im(&rows[0].1);
        assert_eq!(join_re_im(&re, &im).unwrap(), rows[0].1);
        assert!(join_re_im(&re, &im[..1]).is_err());
    }

    #[test]
    fn block_split_partitions_and_owner_inverts() {
        for len in 1..40u64 {
            for parts in 1..10usize {
                let mut next = 0;
                for part in 0..parts {
                    let r = block_range(len, parts, part).unwrap();
                    assert_eq!(r.start, next);
                    let size = r.end - r.start;
                    assert!(size == len / parts as u64 || size == len.div_ceil(parts as u64));
                    for i in r.clone() {
                        assert_eq!(block_owner(len, parts, i).unwrap(), part);
                    }
                    next = r.end;
                }
                assert_eq!(next, len);
            }
        }
        assert_eq!(block_range(10, 0, 0), Err(FftError::ZeroDisks));
        assert_eq!(
            block_range(10, 4, 4),
            Err(FftError::DiskOutOfRange { disk: 4, disks: 4 })
        );
        assert_eq!(block_owner(10, 0, 0), Err(FftError::ZeroDisks));
        assert!(block_owner(10, 2, 10).is_err());
    }

    #[test]
    fn split_row_covers_the_row() {
        let row: Vec<Complex64> = (0..10).map(|i| c(i as f64, 0.0)).collect();
        let pieces = split_row(7, &row, 4).unwrap();
        assert_eq!(
            pieces.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        let joined: Vec<Complex64> = pieces.iter().flat_map(|(_, p)| p.values.clone()).collect();
        assert_eq!(joined, row);
        for (t, p) in &pieces {
            assert_eq!(p.row, 7);
            assert_eq!(p.cols(), block_range(10, 4, *t).unwrap());
        }
        let few = split_row(0, &row[..2], 5).unwrap();
        assert_eq!(few.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![2, 4]);
        assert_eq!(split_row(0, &row, 0), Err(FftError::ZeroDisks));
    }

    #[test]
    fn runs_are_column_major_and_bounded() {
        let mut buf = PieceBuffer::new(10_000, 3).unwrap();
        for r in [4u64, 0, 2, 1, 3, 6] {
            let values = (0..3).map(|i| c(r as f64, i as f64)).collect();
            assert!(
                buf.push(Piece {
                    row: r,
                    col_start: 10,
                    values
                })
                .unwrap()
                .is_none()
            );
        }
        let segs = buf.finish().unwrap().into_segments();
        let keys: Vec<(u64, u64, usize)> = segs
            .iter()
            .map(|s| (s.col, s.row_start, s.values.len()))
            .collect();
        let want: Vec<(u64, u64, usize)> = (10..13)
            .flat_map(|col| [(col, 0, 3), (col, 3, 2), (col, 6, 1)])
            .collect();
        assert_eq!(keys, want);
        for s in &segs {
            for (i, v) in s.values.iter().enumerate() {
                assert_eq!(*v, c((s.row_start + i as u64) as f64, (s.col - 10) as f64));
            }
        }
        assert!(buf.finish().is_none());
        let mut small = PieceBuffer::new(size_of::<Piece>() + 32, 4).unwrap();
        let piece = |row| Piece {
            row,
            col_start: 0,
            values: vec![c(0.0, 0.0); 2],
        };
        assert!(small.push(piece(0)).unwrap().is_none());
        assert_eq!(
            small.push(piece(1)).unwrap().map(|r| r.byte_size()),
            Some(size_of::<Piece>() + 32)
        );
        let big = Piece {
            row: 0,
            col_start: 0,
            values: vec![c(0.0, 0.0); 3],
        };
        assert!(matches!(
            small.push(big),
            Err(FftError::PieceTooLarge { .. })
        ));
        assert_eq!(
            PieceBuffer::new(10, 0).unwrap_err(),
            FftError::ZeroSegmentLength
        );
    }

    fn seg(col: u64, row_start: u64, len: usize) -> Segment {
        Segment {
            col,
            row_start,
            values: vec![c(col as f64, row_start as f64); len],
        }
    }

    #[test]
    fn assembler_rejects_bad_streams() {
        let asm = || ColumnAssembler::new(4, 2..4).unwrap();
        let mut a = asm();
        assert!(a.push(seg(2, 0, 2)).unwrap().is_none());
        assert_eq!(
            a.push(seg(2, 1, 1)),
            Err(FftError::DuplicateValue { col: 2, row: 1 })
        );
        let mut a = asm();
        a.push(seg(2, 0, 2)).unwrap();
        assert_eq!(
            a.push(seg(3, 0, 4)),
            Err(FftError::IncompleteColumn { col: 2, missing: 2 })
        );
        let mut a = asm();
        assert_eq!(
            a.push(seg(3, 0, 4)),
            Err(FftError::MissingColumn { col: 2 })
        );
        assert!(matches!(
            asm().push(seg(4, 0, 1)),
            Err(FftError::ColumnOutOfRange { .. })
        ));
        assert!(matches!(
            asm().push(seg(2, 3, 2)),
            Err(FftError::RowOutOfRange { .. })
        ));
        let mut a = asm();
        assert_eq!(
            a.push(seg(2, 0, 4)).unwrap().map(|(col, v)| (col, v.len())),
            Some((2, 4))
        );
        assert_eq!(a.finish(), Err(FftError::MissingColumn { col: 3 }));
        assert!(matches!(
            a.push(seg(2, 0, 1)),
            Err(FftError::DuplicateValue { .. })
        ));
        assert!(ColumnAssembler::new(0, 0..1).is_err());
    }

    #[test]
    fn segment_merger_checks_protocol() {
        let mut m = SegmentMerger::new(2, 10_000);
        assert_eq!(m.step(), Step::Need(0));
        assert_eq!(
            m.feed(2, None),
            Err(FftError::RunOutOfRange { run: 2, runs: 2 })
        );
        m.feed(0, Some(seg(1, 0, 1))).unwrap();
        assert_eq!(
            m.feed(0, Some(seg(2, 0, 1))),
            Err(FftError::UnexpectedFeed { run: 0 })
        );
        assert_eq!(m.step(), Step::Need(1));
        assert_eq!(
            m.feed(1, Some(seg(0, 0, 0))),
            Err(FftError::EmptySegment { run: 1 })
        );
        m.feed(1, Some(seg(0, 5, 1))).unwrap();
        assert_eq!(m.step(), Step::Item(seg(0, 5, 1)));
        assert_eq!(m.step(), Step::Need(1));
        assert_eq!(
            m.feed(1, Some(seg(0, 4, 1))),
            Err(FftError::UnsortedRun { run: 1 })
        );
        m.feed(1, None).unwrap();
        assert_eq!(m.step(), Step::Item(seg(1, 0, 1)));
        m.feed(0, None).unwrap();
        assert_eq!(m.step(), Step::Done);
        let mut tight = SegmentMerger::new(1, segment_bytes(2));
        assert!(matches!(
            tight.feed(0, Some(seg(0, 0, 3))),
            Err(FftError::CapExceeded { .. })
        ));
    }

    #[test]
    fn plan_checks_caps() {
        let plan = TransposePlan::new(64, 0..32, 4096, 8).unwrap();
        assert_eq!(plan.final_fan_in(), (4096 - 64 * 17) / segment_bytes(8));
        assert!(plan.final_fan_in() >= 2 && plan.merge_fan_in() >= plan.final_fan_in());
        assert_eq!(plan.intermediate_passes(plan.final_fan_in()), 0);
        assert_eq!(plan.intermediate_passes(plan.final_fan_in() + 1), 1);
        assert!(matches!(
            TransposePlan::new(64, 0..32, 1000, 8),
            Err(FftError::CapTooSmall { .. })
        ));
        assert!(matches!(
            TransposePlan::new(4, 0..500, 4096, 8),
            Err(FftError::CapTooSmall { .. })
        ));
        assert_eq!(
            TransposePlan::new(4, 0..5, 4096, 0),
            Err(FftError::ZeroSegmentLength)
        );
        let runs = plan.final_fan_in() + 1;
        assert!(matches!(
            plan.column_merger(runs),
            Err(FftError::FanInTooLarge { .. })
        ));
        assert!(matches!(
            plan.segment_merger(plan.merge_fan_in() + 1),
            Err(FftError::FanInTooLarge { .. })
        ));
        assert!(matches!(
            ColumnMerger::new(1, 64, 0..1, 100),
            Err(FftError::CapTooSmall { .. })
        ));
    }

    /// Memory high-water marks seen by the simulation.
    #[derive(Default)]
    struct Peaks {
        buffer: usize,
        merge: usize,
        runs: usize,
        passes: usize,
    }

    /// Merges `runs` (each a disk-resident segment stream) down to ≤ final_fan_in runs.
    fn merge_passes(
        plan: &TransposePlan,
        mut runs: Vec<Vec<Segment>>,
        peaks: &mut Peaks,
    ) -> Vec<Vec<Segment>> {
        while runs.len() > plan.final_fan_in() {
            peaks.passes += 1;
            let mut next = Vec::new();
            for group in runs.chunks(plan.merge_fan_in()) {
                let mut m = plan.segment_merger(group.len()).unwrap();
                let mut readers: Vec<_> = group.iter().map(|r| r.iter().cloned()).collect();
                let mut out = Vec::new();
                loop {
                    match m.step() {
                        Step::Need(r) => m.feed(r, readers[r].next()).unwrap(),
                        Step::Item(s) => out.push(s),
                        Step::Done => break,
                    }
                    peaks.merge = peaks.merge.max(m.state_bytes());
                }
                next.push(out);
            }
            runs = next;
        }
        runs
    }

    /// Receiving side of disk `j`: runs, merges, column FFTs; returns output rows `(l, X[·][l])`.
    fn receive(
        plan: &TransposePlan,
        inbox: Vec<Piece>,
        peaks: &mut Peaks,
    ) -> Vec<(u64, Vec<Complex64>)> {
        let mut buf = plan.piece_buffer();
        let mut runs: Vec<Vec<Segment>> = Vec::new();
        for piece in inbox {
            runs.extend(buf.push(piece).unwrap().map(|r| r.segments().collect()));
            peaks.buffer = peaks.buffer.max(buf.bytes());
        }
        runs.extend(buf.finish().map(|r| r.segments().collect()));
        peaks.runs = peaks.runs.max(runs.len());
        let runs = merge_passes(plan, runs, peaks);
        let mut merger = plan.column_merger(runs.len()).unwrap();
        let mut readers: Vec<_> = runs.iter().map(|r| r.iter().cloned()).collect();
        let (mut fft, mut out) = (RowFft::new(), Vec::new());
        loop {
            match merger.step().unwrap() {
                Step::Need(r) => merger.feed(r, readers[r].next()).unwrap(),
                Step::Item((l, mut column)) => {
                    fft.process(&mut column);
                    out.push((l, column));
                }
                Step::Done => break,
            }
            peaks.merge = peaks.merge.max(merger.state_bytes());
        }
        out
    }

    /// The whole distributed algorithm on `disks` simulated disks; returns `Xᵀ` and the peaks.
    fn distributed(
        p: GenParams,
        disks: usize,
        cap: usize,
        seg_len: usize,
        shuffle: u64,
    ) -> (Vec<Vec<Complex64>>, Peaks) {
        let generator = Generator::new(p).unwrap();
        let mut inboxes: Vec<Vec<Piece>> = vec![Vec::new(); disks];
        let mut fft = RowFft::new();
        for d in 0..disks {
            for r in block_range(p.rows, disks, d).unwrap() {
                let mut row = generator.row(r).unwrap();
                fft.process(&mut row);
                for (t, piece) in split_row(r, &row, disks).unwrap() {
                    inboxes[t].push(piece);
                }
            }
        }
        let mut rng = SplitMix64::new(shuffle);
        let (mut out, mut peaks) = (vec![Vec::new(); p.cols as usize], Peaks::default());
        for (j, mut inbox) in inboxes.into_iter().enumerate() {
            for i in (1..inbox.len()).rev() {
                inbox.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let plan =
                TransposePlan::new(p.rows, block_range(p.cols, disks, j).unwrap(), cap, seg_len)
                    .unwrap();
            let rows = receive(&plan, inbox, &mut peaks);
            let want: Vec<u64> = block_range(p.cols, disks, j).unwrap().collect();
            assert_eq!(
                rows.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
                want,
                "disk {j} order"
            );
            rows.into_iter().for_each(|(l, v)| out[l as usize] = v);
        }
        (out, peaks)
    }

    fn check_distributed(p: GenParams, disks: usize, cap: usize, seg_len: usize) -> Peaks {
        let (xt, peaks) = distributed(p, disks, cap, seg_len, p.seed);
        let oracle = fft2_plain(&gen_matrix(p.rows, p.cols, p.seed)).unwrap();
        let err = relative_error(&transpose(&xt).unwrap(), &oracle).unwrap();
        assert!(err < 1e-9, "{p:?}: {err}");
        assert!(
            peaks.buffer <= cap && peaks.merge <= cap,
            "{} {}",
            peaks.buffer,
            peaks.merge
        );
        peaks
    }

    #[test]
    fn distributed_matches_single_node_out_of_core() {
        let p = GenParams {
            rows: 64,
            cols: 128,
            seed: 11,
        };
        let matrix_bytes = (p.rows * p.cols) as usize * COMPLEX_BYTES;
        let peaks = check_distributed(p, 4, 4096, 8);
        assert!(
            peaks.runs > 4 && 4096 * 30 < matrix_bytes,
            "runs {}",
            peaks.runs
        );
        assert_eq!(peaks.passes, 0);
        let peaks = check_distributed(p, 4, 3072, 8);
        assert!(peaks.passes >= 1, "an intermediate merge pass is exercised");
    }

    #[test]
    fn distributed_irregular_sizes() {
        let peaks = check_distributed(
            GenParams {
                rows: 37,
                cols: 50,
                seed: 5,
            },
            3,
            1000,
            3,
        );
        assert!(peaks.passes >= 1);
        check_distributed(
            GenParams {
                rows: 4,
                cols: 3,
                seed: 6,
            },
            5,
            1000,
            2,
        );
        check_distributed(
            GenParams {
                rows: 1,
                cols: 1,
                seed: 7,
            },
            2,
            1000,
            1,
        );
    }

    /// Feeds disk 0's pieces of `rows` (of an 8×8 matrix over 2 disks) through one run and the
    /// final merger; returns the first error or the number of columns emitted.
    fn merge_pieces_of(rows: &[u64]) -> Result<usize, FftError> {
        let p = GenParams {
            rows: 8,
            cols: 8,
            seed: 3,
        };
        let generator = Generator::new(p).unwrap();
        let plan = TransposePlan::new(8, 0..4, 2000, 8).unwrap();
        let mut buf = plan.piece_buffer();
        for &r in rows {
            let (_, piece) = split_row(r, &generator.row(r).unwrap(), 2)
                .unwrap()
                .swap_remove(0);
            assert!(buf.push(piece).unwrap().is_none());
        }
        let run: Vec<Segment> = buf.finish().unwrap().into_segments();
        let (mut merger, mut reader, mut columns) = (plan.column_merger(1)?, run.into_iter(), 0);
        loop {
            match merger.step()? {
                Step::Need(r) => merger.feed(r, reader.next())?,
                Step::Item(_) => columns += 1,
                Step::Done => return Ok(columns),
            }
        }
    }

    #[test]
    fn lost_and_duplicate_pieces_are_detected() {
        let all: Vec<u64> = (0..8).collect();
        assert_eq!(merge_pieces_of(&all), Ok(4));
        let lost: Vec<u64> = (0..8).filter(|&r| r != 5).collect();
        assert_eq!(
            merge_pieces_of(&lost),
            Err(FftError::IncompleteColumn { col: 0, missing: 1 })
        );
        let twice = [0, 1, 2, 3, 3, 4, 5, 6, 7];
        assert_eq!(
            merge_pieces_of(&twice),
            Err(FftError::DuplicateValue { col: 0, row: 3 })
        );
    }
}
