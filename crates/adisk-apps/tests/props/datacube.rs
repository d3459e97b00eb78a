//! datacube: fact tables of 1–2 000 rows in 1–4 dimensions, cardinalities 1–10⁹, uniform or
//! Zipf-skewed (`datacube::load`), cubed in both modes with 1–4 096 sampled rows and the
//! default scratch or 1 KiB–16 MiB (refusals of a scratch that cannot work, typed, with no
//! table or directory left, are accepted). Oracle: a
//! group-by with a `BTreeMap` in the test over the generator's rows, for every one of the 2^d
//! group-bys; every `cube_g<mask>` read back must hold exactly those groups, sums and counts.
use super::harness::{
    Disks, Shape, drop_tables, fail, finish, on_cluster, only_tables, read_table, within_grants,
};
use super::inputs;
use adisk_apps::Mode;
use adisk_apps::datacube::generator::{GenParams, Generator};
use arrow::array::{Array, Int64Array, RecordBatch, UInt32Array};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::BTreeMap;
use std::sync::Arc;

const INPUT: &str = "pcube_in";
const OUTPUT: &str = "pcube_out";

/// One data cube case.
#[derive(Clone, Debug)]
pub struct CubeCase {
    shape: Shape,
    mode: Mode,
    rows: u64,
    cardinalities: Vec<u32>,
    /// Zipf exponent in hundredths (0: uniform).
    zipf_hundredths: u32,
    seed: u64,
    samples: u64,
    /// Each pipeline disklet's scratch, KiB (None: from the disks' memory).
    memory_kib: Option<u64>,
}

/// Data cube cases.
pub fn cases() -> impl Strategy<Value = CubeCase> {
    let cards = proptest::collection::vec(
        prop_oneof![1 => inputs::log_uniform(1_000_000_000), 2 => 1u64..=20],
        1..=4,
    );
    (
        inputs::shape(),
        inputs::mode(),
        inputs::size(2000),
        cards,
        prop_oneof![Just(0u32), 1u32..=300],
        any::<u64>(),
        prop_oneof![Just(4096u64), 1u64..=64],
        prop_oneof![3 => Just(None), 1 => inputs::log_uniform(16_384).prop_map(Some)],
    )
        .prop_map(
            |(shape, mode, rows, cards, zipf, seed, samples, memory_kib)| CubeCase {
                shape,
                mode,
                rows,
                cardinalities: cards.into_iter().map(|c| c as u32).collect(),
                zipf_hundredths: zipf,
                seed,
                samples,
                memory_kib,
            },
        )
}

fn generator(c: &CubeCase) -> GenParams {
    GenParams {
        rows: c.rows,
        cardinalities: c.cardinalities.clone(),
        zipf: f64::from(c.zipf_hundredths) / 100.0,
        seed: c.seed,
    }
}

/// (mask, grouped values in increasing dimension) → (Σ measure, count).
type Cube = BTreeMap<(u32, Vec<u32>), (i64, i64)>;

/// The oracle: every group-by of the generator's rows.
fn expected(c: &CubeCase) -> Result<Cube, TestCaseError> {
    let g = Generator::new(generator(c)).map_err(|e| fail(format!("generator: {e}")))?;
    let d = c.cardinalities.len();
    let mut cube = Cube::new();
    for row in g.rows(0, c.rows) {
        for mask in 0..1u32 << d {
            let key = (0..d)
                .filter(|j| mask >> j & 1 == 1)
                .map(|j| row.dims[j])
                .collect();
            let e = cube.entry((mask, key)).or_insert((0, 0));
            e.0 += row.measure;
            e.1 += 1;
        }
    }
    Ok(cube)
}

/// Adds the groups of one result table's batch to `cube`; a group seen twice is an error.
fn add_groups(cube: &mut Cube, mask: u32, b: &RecordBatch) -> Result<(), TestCaseError> {
    let dims: Vec<&UInt32Array> = (0..8)
        .filter(|j| mask >> j & 1 == 1)
        .map(|j| {
            b.column_by_name(&format!("d{j}"))
                .and_then(|c| c.as_any().downcast_ref::<UInt32Array>())
                .ok_or_else(|| fail(format!("g{mask}: no UInt32 column d{j}")))
        })
        .collect::<Result<_, _>>()?;
    let int = |name: &str| {
        b.column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .ok_or_else(|| fail(format!("g{mask}: no Int64 column {name}")))
    };
    let (sum, count) = (int("sum")?, int("count")?);
    for i in 0..b.num_rows() {
        let key: Vec<u32> = dims.iter().map(|c| c.value(i)).collect();
        if cube
            .insert((mask, key.clone()), (sum.value(i), count.value(i)))
            .is_some()
        {
            return Err(fail(format!("g{mask}: group {key:?} stored twice")));
        }
    }
    Ok(())
}

/// The documented refusals of a scratch asked for (active mode): too small for a pipeline
/// disklet or its merges (planned at the host), too large for a disk's memory, or a merge
/// past its grant at a disk (the merge does not spill).
fn scratch_refused(c: &CubeCase, error: &str) -> bool {
    c.mode == Mode::Active
        && c.memory_kib.is_some()
        && (error.contains("--memory-kib") || error.contains("needs more scratch than granted"))
}

/// Runs one case and compares every group-by with the oracle's.
pub fn check(c: CubeCase) -> Result<(), TestCaseError> {
    on_cluster(c.shape, |disks| run(disks, c))
}

async fn run(disks: Arc<Disks>, c: CubeCase) -> Result<(), TestCaseError> {
    let cluster = &disks.cluster;
    drop_tables(cluster, "pcube_").await.map_err(fail)?;
    adisk_apps::datacube::load(cluster, INPUT, generator(&c), |_| {})
        .await
        .map_err(|e| fail(format!("datacube::load: {e}")))?;
    let params = adisk_apps::datacube::CubeParams {
        input: INPUT.into(),
        output: OUTPUT.into(),
        mode: c.mode,
        memory_bytes: c.memory_kib.map(|k| k * 1024),
        samples: c.samples,
    };
    let report = match adisk_apps::datacube::run(cluster, &params).await {
        Err(e) if scratch_refused(&c, &e.to_string()) => {
            super::harness::refused("datacube");
            only_tables(cluster, "pcube_", &[INPUT], &[]).await?;
            return finish(&disks, "pcube_").await;
        }
        other => other.map_err(|e| fail(format!("datacube failed: {e}")))?,
    };
    within_grants(&report)?;
    if report.result["valid"] != serde_json::json!(true) {
        return Err(fail(format!("the run's own check: {}", report.result)));
    }
    let d = c.cardinalities.len();
    let masks: Vec<u32> = (0..1u32 << d).collect();
    let names: Vec<String> = masks
        .iter()
        .map(|m| adisk_apps::datacube::result_table(OUTPUT, *m))
        .collect();
    let mut tables: Vec<&str> = names.iter().map(String::as_str).collect();
    tables.push(INPUT);
    only_tables(cluster, "pcube_", &tables, &[]).await?;
    let mut got = Cube::new();
    for (mask, name) in masks.iter().zip(&names) {
        for b in read_table(cluster, name)
            .await
            .map_err(fail)?
            .iter()
            .flat_map(|p| &p.2)
        {
            add_groups(&mut got, *mask, b)?;
        }
    }
    compare(&got, &expected(&c)?)?;
    finish(&disks, "pcube_").await
}

fn compare(got: &Cube, want: &Cube) -> Result<(), TestCaseError> {
    if got == want {
        return Ok(());
    }
    let wrong = want
        .iter()
        .find(|(k, v)| got.get(*k) != Some(*v))
        .map(|(k, v)| format!("group {k:?}: stored {:?}, oracle {v:?}", got.get(k)));
    let extra = got
        .keys()
        .find(|k| !want.contains_key(*k))
        .map(|k| format!("group {k:?} stored, not in the oracle"));
    Err(fail(format!(
        "{} groups stored, {} in the oracle; {}",
        got.len(),
        want.len(),
        wrong.or(extra).unwrap_or_default()
    )))
}
