//! cluster: 1–2 000 points in 2–8 dimensions, either the generator's (0–4 planted clusters,
//! any noise, `cluster::load`) or drawn by the test from a few values (heavy duplicates, the
//! domain's edges, values outside it, NaN), clustered in both modes with 1–100 fine bins,
//! α in (1, 3] and β in [0, 1]. Oracle: the application's single-node run
//! (`kernel::run_single`, a plain pass over all points in one memory) over the same points
//! regenerated in the test: the clusters (subspace, ranges, points) and the dense units per
//! level must be equal, or both runs must refuse the same level for too many candidates.
//!
//! Tolerance: none. The ranges are f32 bin edges computed by one formula from integer bin
//! indices, and the bins from integer counts that are equal when the disks count right; any
//! difference is a wrong count.
use super::harness::{
    Disks, Shape, drop_tables, fail, finish, load_rows, on_cluster, only_tables, within_grants,
};
use super::inputs;
use adisk_apps::Mode;
use adisk_apps::cluster::kernel::{ClusterParams, GenParams, Generator};
use adisk_apps::rng::SplitMix64;
use arrow::array::{ArrayRef, Float32Array, RecordBatch};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::sync::Arc;

const INPUT: &str = "ppoints_in";

/// Where a case's points come from.
#[derive(Clone, Debug)]
pub enum Points {
    /// `cluster::load`'s generator.
    Generated(GenParams),
    /// Drawn by the test: `dims` values per point from `values` distinct ones.
    Drawn {
        /// Points.
        points: u64,
        /// Dimensions.
        dims: usize,
        /// Distinct values drawn from.
        values: u64,
        /// Seed.
        seed: u64,
    },
}

/// One clustering case.
#[derive(Clone, Debug)]
pub struct ClusterCase {
    shape: Shape,
    mode: Mode,
    points: Points,
    fine_bins: usize,
    /// α − 1 and β, in hundredths.
    alpha_hundredths: u32,
    beta_hundredths: u32,
}

fn generated() -> impl Strategy<Value = Points> {
    (
        inputs::size(2000),
        2usize..=8,
        0usize..=4,
        0u32..=100,
        any::<u64>(),
    )
        .prop_flat_map(|(points, dims, clusters, noise, seed)| {
            (
                Just((points, dims, clusters, noise, seed)),
                2..=dims,
                1u32..=20,
                0u32..=30,
            )
        })
        .prop_map(
            |((points, dims, clusters, noise, seed), max_dims, min_w, extra)| {
                Points::Generated(GenParams {
                    points,
                    dims,
                    clusters,
                    max_cluster_dims: max_dims,
                    noise: f64::from(noise) / 100.0,
                    min_width: min_w as f32,
                    max_width: (min_w + extra).min(50) as f32,
                    seed,
                })
            },
        )
}

/// Clustering cases.
pub fn cases() -> impl Strategy<Value = ClusterCase> {
    let drawn = (inputs::size(2000), 2usize..=6, 1u64..=12, any::<u64>()).prop_map(
        |(points, dims, values, seed)| Points::Drawn {
            points,
            dims,
            values,
            seed,
        },
    );
    (
        inputs::shape(),
        inputs::mode(),
        prop_oneof![2 => generated(), 1 => drawn],
        prop_oneof![Just(100usize), 1usize..=100],
        1u32..=200,
        0u32..=100,
    )
        .prop_map(
            |(shape, mode, points, fine_bins, alpha, beta)| ClusterCase {
                shape,
                mode,
                points,
                fine_bins,
                alpha_hundredths: alpha,
                beta_hundredths: beta,
            },
        )
}

fn params(c: &ClusterCase) -> ClusterParams {
    ClusterParams {
        fine_bins: c.fine_bins,
        alpha: 1.0 + f64::from(c.alpha_hundredths) / 100.0,
        beta: f64::from(c.beta_hundredths) / 100.0,
        ..Default::default()
    }
}

/// Value `v` of the drawn palette: the domain's edges, just outside it, NaN, and values
/// spread over it.
fn palette(v: u64, seed: u64) -> f32 {
    match v {
        0 => 0.0,
        1 => 100.0f32.next_down(),
        2 => 100.0,
        3 => f32::NAN,
        4 => -0.5,
        _ => (SplitMix64::for_index(seed, v).unit() * 100.0) as f32,
    }
}

/// Points `range` of a drawn case, as columns.
fn drawn_columns(
    dims: usize,
    values: u64,
    seed: u64,
    range: std::ops::Range<u64>,
) -> Vec<Vec<f32>> {
    let mut cols = vec![Vec::new(); dims];
    for i in range {
        let mut rng = SplitMix64::for_index(seed ^ 0xc1a5, i);
        for col in cols.iter_mut() {
            col.push(palette(rng.below(values), seed));
        }
    }
    cols
}

fn batch(cols: Vec<Vec<f32>>) -> RecordBatch {
    let dims = cols.len();
    let arrays: Vec<ArrayRef> = cols
        .into_iter()
        .map(|v| Arc::new(Float32Array::from(v)) as ArrayRef)
        .collect();
    RecordBatch::try_new(adisk_apps::cluster::points_schema(dims), arrays).expect("points")
}

/// Loads the case's points; returns them as columns.
async fn load(disks: &Disks, c: &ClusterCase) -> Result<Vec<Vec<f32>>, TestCaseError> {
    let cluster = &disks.cluster;
    match c.points.clone() {
        Points::Generated(g) => {
            adisk_apps::cluster::load(cluster, INPUT, g, |_| {})
                .await
                .map_err(|e| fail(format!("cluster::load: {e}")))?;
            Ok(Generator::new(g).map_err(fail)?.columns(0, g.points))
        }
        Points::Drawn {
            points,
            dims,
            values,
            seed,
        } => {
            let schema = adisk_apps::cluster::points_schema(dims);
            let make = move |r| batch(drawn_columns(dims, values, seed, r));
            load_rows(cluster, INPUT, schema, points, make)
                .await
                .map_err(fail)?;
            Ok(drawn_columns(dims, values, seed, 0..points))
        }
    }
}

/// Runs one case and compares it with the single-node run.
pub fn check(c: ClusterCase) -> Result<(), TestCaseError> {
    on_cluster(c.shape, |disks| run(disks, c))
}

async fn run(disks: Arc<Disks>, c: ClusterCase) -> Result<(), TestCaseError> {
    let cluster = &disks.cluster;
    drop_tables(cluster, "ppoints_").await.map_err(fail)?;
    let columns = match load(&disks, &c).await {
        // The generator cannot always keep the planted ranges apart: its typed refusal.
        Err(e) if format!("{e}").contains("cannot place") => {
            super::harness::refused("cluster");
            return Ok(());
        }
        other => other?,
    };
    let run = adisk_apps::cluster::ClusterRun {
        table: INPUT.into(),
        params: params(&c),
        mode: c.mode,
        check: None,
    };
    let got = adisk_apps::cluster::run(cluster, &run).await;
    let want = adisk_apps::cluster::kernel::run_single(&columns, &params(&c));
    only_tables(cluster, "ppoints_", &[INPUT], &[]).await?;
    match (got, want) {
        (Ok(report), Ok(want)) => {
            within_grants(&report)?;
            compare(&report.result, &want)?;
        }
        (Err(e), Err(w))
            if e.to_string().contains("candidate") && w.to_string().contains("candidates") =>
        {
            super::harness::refused("cluster");
        }
        (got, want) => {
            return Err(fail(format!(
                "the run gave {:?}, the single-node run {:?}",
                got.map(|r| r.result),
                want.map(|w| w.clusters)
            )));
        }
    }
    finish(&disks, "ppoints_").await
}

fn compare(
    got: &serde_json::Value,
    want: &adisk_apps::cluster::kernel::ClusterResult,
) -> Result<(), TestCaseError> {
    let clusters: Vec<serde_json::Value> = want
        .clusters
        .iter()
        .map(|c| serde_json::json!({ "dims": c.dims, "ranges": c.ranges, "points": c.points }))
        .collect();
    let levels: Vec<usize> = want.levels.iter().map(Vec::len).collect();
    let expected = (serde_json::json!(clusters), serde_json::json!(levels));
    let found = (
        got["clusters"].clone(),
        got["dense_units_per_level"].clone(),
    );
    if found != expected {
        return Err(fail(format!(
            "clusters {} with dense units per level {}; the single-node run: {} with {}",
            found.0, found.1, expected.0, expected.1
        )));
    }
    Ok(())
}
