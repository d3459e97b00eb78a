//! sort: records with keys drawn from a range and a skew (duplicates, one hot key, one key
//! for all), sorted by the cluster in both modes. Oracle: the input's records sorted in the
//! test; the output read back partition by partition must have exactly the sorted keys in
//! order and exactly the input's records (as a multiset).
use super::harness::{
    Disks, Shape, drop_tables, fail, finish, load_rows, on_cluster, only_tables, read_table,
    within_grants,
};
use super::inputs::{self, Skew};
use adisk_apps::Mode;
use adisk_apps::rng::SplitMix64;
use adisk_apps::sort::records::{KEY_BYTES, PAYLOAD_BYTES};
use arrow::array::{Array, FixedSizeBinaryArray, RecordBatch};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::sync::Arc;

const INPUT: &str = "psort_in";
const OUTPUT: &str = "psort_out";

/// One sort case.
#[derive(Clone, Debug)]
pub struct SortCase {
    shape: Shape,
    mode: Mode,
    records: u64,
    key_range: u64,
    skew: Skew,
    seed: u64,
    /// Run size, KiB (None: a quarter of the disk's memory).
    run_kib: Option<u64>,
    samples_per_disk: u64,
}

/// Sort cases: 1–2 000 records, keys in ranges of 1–10⁹ under every skew.
pub fn cases() -> impl Strategy<Value = SortCase> {
    (
        inputs::shape(),
        inputs::mode(),
        inputs::size(2000),
        inputs::key_range(),
        inputs::skew(),
        any::<u64>(),
        prop_oneof![Just(None), Just(Some(64u64))],
        prop_oneof![Just(1000u64), 1u64..=4],
    )
        .prop_map(
            |(shape, mode, records, key_range, skew, seed, run_kib, samples_per_disk)| SortCase {
                shape,
                mode,
                records,
                key_range,
                skew,
                seed,
                run_kib,
                samples_per_disk,
            },
        )
}

/// Record `index`: a 10-byte key (the drawn key big-endian, then two zero bytes, so that
/// equal draws are equal keys) and a payload unique to the record.
fn record(c: &SortCase, index: u64) -> ([u8; KEY_BYTES], [u8; PAYLOAD_BYTES]) {
    let mut rng = SplitMix64::for_index(c.seed, index);
    let mut key = [0u8; KEY_BYTES];
    key[..8].copy_from_slice(&inputs::key(c.skew, c.key_range, &mut rng).to_be_bytes());
    let mut payload = [0u8; PAYLOAD_BYTES];
    payload[..8].copy_from_slice(&index.to_be_bytes());
    for chunk in payload[8..].chunks_mut(8) {
        let bytes = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    (key, payload)
}

fn batch(c: &SortCase, range: std::ops::Range<u64>) -> RecordBatch {
    let (keys, payloads): (Vec<_>, Vec<_>) = range.map(|i| record(c, i)).unzip();
    RecordBatch::try_new(
        adisk_apps::sort::records::schema(),
        vec![
            Arc::new(FixedSizeBinaryArray::try_from_iter(keys.iter()).expect("keys")),
            Arc::new(FixedSizeBinaryArray::try_from_iter(payloads.iter()).expect("payloads")),
        ],
    )
    .expect("a batch of records")
}

type Record = (Vec<u8>, Vec<u8>);

/// The output's records, partition after partition.
fn records_of(parts: &[(u32, u32, Vec<RecordBatch>)]) -> Result<Vec<Record>, TestCaseError> {
    let mut out = Vec::new();
    for b in parts.iter().flat_map(|(_, _, bs)| bs) {
        let column = |name: &str| {
            b.column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<FixedSizeBinaryArray>())
                .ok_or_else(|| fail(format!("the output has no binary column `{name}`")))
        };
        let (keys, payloads) = (column("key")?, column("payload")?);
        for i in 0..keys.len() {
            out.push((keys.value(i).to_vec(), payloads.value(i).to_vec()));
        }
    }
    Ok(out)
}

/// Runs one case and compares the output with the sorted input.
pub fn check(c: SortCase) -> Result<(), TestCaseError> {
    on_cluster(c.shape, |disks| run(disks, c))
}

async fn run(disks: Arc<Disks>, c: SortCase) -> Result<(), TestCaseError> {
    let cluster = &disks.cluster;
    drop_tables(cluster, "psort_").await.map_err(fail)?;
    let generated = c.clone();
    load_rows(
        cluster,
        INPUT,
        adisk_apps::sort::records::schema(),
        c.records,
        move |r| batch(&generated, r),
    )
    .await
    .map_err(fail)?;
    let params = adisk_apps::sort::SortParams {
        input: INPUT.into(),
        output: OUTPUT.into(),
        mode: c.mode,
        run_bytes: c.run_kib.map(|k| k * 1024),
        samples_per_disk: c.samples_per_disk,
    };
    let outcome = adisk_apps::sort::run(cluster, &params).await;
    let report = match outcome {
        Err(e) if too_few_to_sample(&c, &e.to_string()) => {
            super::harness::refused("sort");
            only_tables(cluster, "psort_", &[INPUT], &[]).await?;
            return finish(&disks, "psort_").await;
        }
        other => other.map_err(|e| fail(format!("sort failed: {e}")))?,
    };
    within_grants(&report)?;
    if report.result["valid"] != serde_json::json!(true) {
        return Err(fail(format!("the run's own check: {}", report.result)));
    }
    only_tables(cluster, "psort_", &[INPUT, OUTPUT], &[]).await?;
    let got = records_of(&read_table(cluster, OUTPUT).await.map_err(fail)?)?;
    compare(&c, got)?;
    finish(&disks, "psort_").await
}

/// The documented refusal of a sort with fewer records than disks (active mode samples a
/// splitter per disk): accepted only then.
fn too_few_to_sample(c: &SortCase, error: &str) -> bool {
    c.mode == Mode::Active && c.records < u64::from(c.shape.disks) && error.contains("too few rows")
}

fn compare(c: &SortCase, got: Vec<Record>) -> Result<(), TestCaseError> {
    let mut want: Vec<Record> = (0..c.records)
        .map(|i| {
            let (k, p) = record(c, i);
            (k.to_vec(), p.to_vec())
        })
        .collect();
    want.sort();
    let got_keys: Vec<&[u8]> = got.iter().map(|(k, _)| k.as_slice()).collect();
    let want_keys: Vec<&[u8]> = want.iter().map(|(k, _)| k.as_slice()).collect();
    if got_keys != want_keys {
        let at = got_keys
            .iter()
            .zip(&want_keys)
            .position(|(a, b)| a != b)
            .unwrap_or(got_keys.len().min(want_keys.len()));
        return Err(fail(format!(
            "keys differ from the sorted input at record {at} of {} (expected {})",
            got_keys.len(),
            want_keys.len()
        )));
    }
    let mut got = got;
    got.sort();
    if got != want {
        return Err(fail("the output's records are not the input's"));
    }
    Ok(())
}
