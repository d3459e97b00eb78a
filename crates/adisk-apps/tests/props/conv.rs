//! conv: 1–12 generated images of 128–256 pixels a side (`load_images`), convolved in both
//! modes with random k×k kernels (k 1–9, negative weights, any non-zero divisor of either
//! sign; any `i32` weights). Oracle: the convolution written here from the documented semantics (anchor
//! (k−1)/2, borders copied, `clamp(Σ w·p / divisor, 0, 255)` with division toward zero, in
//! 64-bit integers) over the regenerated input; every stored image must equal it byte for
//! byte, and every image must be stored once.
//! Kernels whose Σ|w| · 255 passes 2³¹ − 1 must be refused by `Kernel::new` (the disks'
//! kernel sums in `i32`); every other kernel must run.
use super::harness::{
    Disks, Shape, drop_tables, fail, finish, on_cluster, only_tables, read_table, within_grants,
};
use super::inputs;
use adisk_apps::Mode;
use adisk_apps::conv::kernel::Kernel;
use arrow::array::{Array, BinaryArray, UInt32Array};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::BTreeMap;
use std::sync::Arc;

const OUTPUT: &str = "pconv_out";

/// One convolution case.
#[derive(Clone, Debug)]
pub struct ConvCase {
    shape: Shape,
    mode: Mode,
    images: u32,
    side: u32,
    k: usize,
    weights: Vec<i32>,
    divisor: i32,
}

/// Whether a kernel's largest neighbourhood sum, Σ|w| · 255, passes `i32::MAX`: the disks'
/// kernel sums in `i32`, and `Kernel::new` refuses such kernels (typed).
fn overflows(weights: &[i32]) -> bool {
    weights.iter().map(|w| i64::from(*w).abs()).sum::<i64>() * 255 > i64::from(i32::MAX)
}

/// Convolution cases: small weights, weights up to the 32-bit limit, and any `i32` (mostly
/// refused).
pub fn cases() -> impl Strategy<Value = ConvCase> {
    (
        inputs::shape(),
        inputs::mode(),
        1u32..=12,
        (4u32..=8).prop_map(|s| s * 32),
        1usize..=9,
    )
        .prop_flat_map(move |(shape, mode, images, side, k)| {
            let bound = i32::MAX / 255 / (k * k) as i32;
            // One range for all k² weights: small, within 32-bit sums, or any (refused).
            let weights = prop_oneof![
                6 => proptest::collection::vec(-8i32..=8, k * k),
                3 => proptest::collection::vec(-bound..=bound, k * k),
                1 => proptest::collection::vec(any::<i32>(), k * k),
            ];
            let divisor = prop_oneof![-300i32..=300, Just(i32::MIN), Just(i32::MAX)]
                .prop_filter("a divisor is non-zero", |d| *d != 0);
            (Just((shape, mode, images, side, k)), weights, divisor)
        })
        .prop_map(
            |((shape, mode, images, side, k), weights, divisor)| ConvCase {
                shape,
                mode,
                images,
                side,
                k,
                weights,
                divisor,
            },
        )
}

/// The documented convolution of one image, in 64-bit integers.
pub fn convolve(pixels: &[u8], side: usize, k: usize, weights: &[i32], divisor: i32) -> Vec<u8> {
    let a = (k - 1) / 2;
    let mut out = pixels.to_vec();
    if side < k {
        return out;
    }
    for y in a..side - (k - 1 - a) {
        for x in a..side - (k - 1 - a) {
            let mut sum = 0i64;
            for ky in 0..k {
                for kx in 0..k {
                    let p = pixels[(y - a + ky) * side + (x - a + kx)];
                    sum += i64::from(weights[ky * k + kx]) * i64::from(p);
                }
            }
            out[y * side + x] = (sum / i64::from(divisor)).clamp(0, 255) as u8;
        }
    }
    out
}

/// Runs one case and compares every stored image with the oracle's.
pub fn check(c: ConvCase) -> Result<(), TestCaseError> {
    on_cluster(c.shape, |disks| run(disks, c))
}

/// Removes the images earlier cases left at the disks (files/images of each disk).
fn remove_images(disks: &Disks) -> Result<(), TestCaseError> {
    for dir in &disks.dirs {
        let images = dir.path().join("files").join("images");
        match std::fs::remove_dir_all(&images) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(fail(format!("removing {}: {e}", images.display())));
            }
            _ => {}
        }
    }
    Ok(())
}

async fn run(disks: Arc<Disks>, c: ConvCase) -> Result<(), TestCaseError> {
    let cluster = &disks.cluster;
    drop_tables(cluster, "pconv_").await.map_err(fail)?;
    remove_images(&disks)?;
    adisk_host::disklet::load_images(cluster, c.images, c.side)
        .await
        .map_err(|e| fail(format!("load_images: {e}")))?;
    let kernel = match Kernel::new(c.weights.clone(), c.divisor) {
        Err(e) if overflows(&c.weights) && e.to_string().contains("too large") => {
            super::harness::refused("conv");
            return finish(&disks, "pconv_").await;
        }
        other => other.map_err(fail)?,
    };
    let params = adisk_apps::conv::ConvParams {
        images: "images".into(),
        side: c.side,
        kernel,
        output: OUTPUT.into(),
        mode: c.mode,
    };
    let report = adisk_apps::conv::run(cluster, &params)
        .await
        .map_err(|e| fail(format!("conv failed: {e}")))?;
    within_grants(&report)?;
    only_tables(cluster, "pconv_", &[OUTPUT], &[]).await?;
    let mut stored: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for b in read_table(cluster, OUTPUT)
        .await
        .map_err(fail)?
        .iter()
        .flat_map(|p| &p.2)
    {
        let (Some(images), Some(pixels)) = (
            b.column(0).as_any().downcast_ref::<UInt32Array>(),
            b.column(1).as_any().downcast_ref::<BinaryArray>(),
        ) else {
            return Err(fail("the output is not (image, pixels)"));
        };
        for i in 0..b.num_rows() {
            if stored
                .insert(images.value(i), pixels.value(i).to_vec())
                .is_some()
            {
                return Err(fail(format!("image {} stored twice", images.value(i))));
            }
        }
    }
    compare(&c, &stored)?;
    if report.result["valid"] != serde_json::json!(true) {
        return Err(fail(format!("the run's own check: {}", report.result)));
    }
    finish(&disks, "pconv_").await
}

fn compare(c: &ConvCase, stored: &BTreeMap<u32, Vec<u8>>) -> Result<(), TestCaseError> {
    let numbers: Vec<u32> = stored.keys().copied().collect();
    if numbers != (0..c.images).collect::<Vec<_>>() {
        return Err(fail(format!(
            "images stored: {numbers:?}, expected 0..{}",
            c.images
        )));
    }
    let side = c.side as usize;
    for (i, got) in stored {
        let input = adisk_storage::images::generate(*i, c.side);
        let want = convolve(&input, side, c.k, &c.weights, c.divisor);
        if let Some(at) = got.iter().zip(&want).position(|(a, b)| a != b) {
            return Err(fail(format!(
                "image {i}: pixel ({}, {}) is {}, the oracle's {}",
                at % side,
                at / side,
                got[at],
                want[at]
            )));
        }
        if got.len() != want.len() {
            return Err(fail(format!("image {i}: {} bytes", got.len())));
        }
    }
    Ok(())
}
