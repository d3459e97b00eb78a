//! fft: matrices of up to 2 000 elements of any shape, 1×1, 1×N and N×1 included (`fft::load`),
//! transformed in both modes with run buffers, stream buffers and merge segments from tiny
//! to the defaults.
//! Oracle: the direct DFT by its definition, computed in the test (separably, with each
//! twiddle's angle reduced exactly, `(j·k mod n) / n`, before its sine and cosine), over the
//! regenerated matrix. Every element of `X` must be stored once, and
//! `max |X − DFT| ≤ 10⁻⁹ · max |DFT|`.
//!
//! Why 10⁻⁹: both sides are f64 (ε ≈ 1.1·10⁻¹⁶). The direct sum over n·m ≤ 2 000 terms errs
//! by at most about (n + m)·ε·max|x|·n·m, i.e. below 10⁻¹² of max |X| here, and rustfft's
//! error grows with log n; a misplaced, missing or wrongly twiddled element errs by O(1).
//! (The application's own check uses the same bound.)
use super::harness::{
    Disks, Shape, drop_tables, fail, finish, on_cluster, only_tables, read_table, within_grants,
};
use super::inputs;
use adisk_apps::Mode;
use adisk_apps::fft::kernel::{GenParams, Generator};
use arrow::array::{Array, Float64Array, UInt32Array};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::sync::Arc;

const INPUT: &str = "pfft_in";
const OUTPUT: &str = "pfft_out";
/// Largest relative error accepted.
const TOLERANCE: f64 = 1e-9;

/// One FFT case.
#[derive(Clone, Debug)]
pub struct FftCase {
    shape: Shape,
    mode: Mode,
    rows: u64,
    cols: u64,
    seed: u64,
    cap_kib: Option<u64>,
    /// Stream buffer of the active jobs, KiB (None: the default).
    buffer_kib: Option<u64>,
    segment_values: u64,
}

/// FFT cases.
pub fn cases() -> impl Strategy<Value = FftCase> {
    (inputs::log_uniform(2000), any::<u64>())
        .prop_flat_map(|(rows, seed)| (Just(rows), inputs::log_uniform(2000 / rows), Just(seed)))
        .prop_flat_map(|(rows, cols, seed)| {
            let sizes = (
                prop_oneof![Just(None), (1u64..=64).prop_map(Some)],
                prop_oneof![2 => Just(None), 1 => (16u64..=64).prop_map(Some)],
                prop_oneof![Just(256u64), 1u64..=16],
            );
            (
                inputs::shape(),
                inputs::mode(),
                Just((rows, cols, seed)),
                sizes,
            )
        })
        .prop_map(|(shape, mode, (rows, cols, seed), sizes)| FftCase {
            shape,
            mode,
            rows,
            cols,
            seed,
            cap_kib: sizes.0,
            buffer_kib: sizes.1,
            segment_values: sizes.2,
        })
}

type Complex = (f64, f64);

/// The 1-D DFT of `x` by definition.
fn dft(x: &[Complex]) -> Vec<Complex> {
    let n = x.len();
    let twiddles: Vec<Complex> = (0..n)
        .map(|j| {
            let angle = -2.0 * std::f64::consts::PI * j as f64 / n as f64;
            (angle.cos(), angle.sin())
        })
        .collect();
    (0..n)
        .map(|k| {
            x.iter().enumerate().fold((0.0, 0.0), |(re, im), (j, v)| {
                let w = twiddles[(j * k) % n];
                (re + v.0 * w.0 - v.1 * w.1, im + v.0 * w.1 + v.1 * w.0)
            })
        })
        .collect()
}

/// The 2-D DFT by definition: rows, then columns.
fn dft2(x: &[Vec<Complex>]) -> Vec<Vec<Complex>> {
    let rows: Vec<Vec<Complex>> = x.iter().map(|r| dft(r)).collect();
    let cols = rows.first().map_or(0, Vec::len);
    let mut out = vec![vec![(0.0, 0.0); cols]; rows.len()];
    for l in 0..cols {
        let column: Vec<Complex> = rows.iter().map(|r| r[l]).collect();
        for (k, v) in dft(&column).into_iter().enumerate() {
            out[k][l] = v;
        }
    }
    out
}

/// Runs one case and compares `X` with the direct DFT.
pub fn check(c: FftCase) -> Result<(), TestCaseError> {
    on_cluster(c.shape, |disks| run(disks, c))
}

async fn run(disks: Arc<Disks>, c: FftCase) -> Result<(), TestCaseError> {
    let cluster = &disks.cluster;
    drop_tables(cluster, "pfft_").await.map_err(fail)?;
    adisk_apps::fft::load(cluster, INPUT, c.rows, c.cols, c.seed, |_| {})
        .await
        .map_err(|e| fail(format!("fft::load: {e}")))?;
    let params = adisk_apps::fft::FftParams {
        input: INPUT.into(),
        output: OUTPUT.into(),
        mode: c.mode,
        seed: c.seed,
        cap_bytes: c.cap_kib.map(|k| k * 1024),
        buffer_kib: c.buffer_kib,
        segment_values: c.segment_values,
    };
    let report = match adisk_apps::fft::run(cluster, &params).await {
        Err(e) if c.cap_kib.is_some() && e.to_string().contains("too small") => {
            super::harness::refused("fft");
            only_tables(cluster, "pfft_", &[INPUT], &[]).await?;
            return finish(&disks, "pfft_").await;
        }
        other => other.map_err(|e| fail(format!("fft failed: {e}")))?,
    };
    within_grants(&report)?;
    only_tables(cluster, "pfft_", &[INPUT, OUTPUT], &[]).await?;
    let got = stored(cluster, &c).await?;
    compare(&c, &got)?;
    if report.result["valid"] != serde_json::json!(true) {
        return Err(fail(format!("the run's own check: {}", report.result)));
    }
    finish(&disks, "pfft_").await
}

/// `X` as stored, every element exactly once.
async fn stored(
    cluster: &adisk_host::Cluster,
    c: &FftCase,
) -> Result<Vec<Vec<Complex>>, TestCaseError> {
    let (rows, cols) = (c.rows as usize, c.cols as usize);
    let mut x: Vec<Vec<Option<Complex>>> = vec![vec![None; cols]; rows];
    for b in read_table(cluster, OUTPUT)
        .await
        .map_err(fail)?
        .iter()
        .flat_map(|p| &p.2)
    {
        let u32s = |n: &str| {
            b.column_by_name(n)
                .and_then(|a| a.as_any().downcast_ref::<UInt32Array>())
        };
        let f64s = |n: &str| {
            b.column_by_name(n)
                .and_then(|a| a.as_any().downcast_ref::<Float64Array>())
        };
        let (Some(row), Some(col), Some(re), Some(im)) =
            (u32s("row"), u32s("col"), f64s("re"), f64s("im"))
        else {
            return Err(fail(format!(
                "the output is not (row, col, re, im): {:?}",
                b.schema()
            )));
        };
        for i in 0..b.num_rows() {
            let (r, l) = (row.value(i) as usize, col.value(i) as usize);
            let cell = x
                .get_mut(r)
                .and_then(|v| v.get_mut(l))
                .ok_or_else(|| fail(format!("element ({r}, {l}) outside {rows}×{cols}")))?;
            if cell.replace((re.value(i), im.value(i))).is_some() {
                return Err(fail(format!("element ({r}, {l}) stored twice")));
            }
        }
    }
    x.into_iter()
        .enumerate()
        .map(|(r, v)| {
            v.into_iter()
                .enumerate()
                .map(|(l, e)| e.ok_or_else(|| fail(format!("element ({r}, {l}) missing"))))
                .collect()
        })
        .collect()
}

fn compare(c: &FftCase, got: &[Vec<Complex>]) -> Result<(), TestCaseError> {
    let g = Generator::new(GenParams {
        rows: c.rows,
        cols: c.cols,
        seed: c.seed,
    })
    .map_err(fail)?;
    let input: Vec<Vec<Complex>> = g
        .matrix()
        .map_err(fail)?
        .into_iter()
        .map(|r| r.into_iter().map(|v| (v.re, v.im)).collect())
        .collect();
    let want = dft2(&input);
    let norm = |v: Complex| v.0.hypot(v.1);
    let scale = want
        .iter()
        .flatten()
        .map(|v| norm(*v))
        .fold(f64::MIN_POSITIVE, f64::max);
    let mut worst = (0.0f64, 0, 0);
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        for (l, (x, y)) in a.iter().zip(b).enumerate() {
            let error = norm((x.0 - y.0, x.1 - y.1)) / scale;
            if error.is_nan() || error > worst.0 {
                worst = (error, k, l);
            }
        }
    }
    if worst.0.is_nan() || worst.0 > TOLERANCE {
        let (k, l) = (worst.1, worst.2);
        return Err(fail(format!(
            "X[{k}][{l}] = {:?}, the direct DFT's {:?}: relative error {:e}",
            got[k][l], want[k][l], worst.0
        )));
    }
    Ok(())
}
