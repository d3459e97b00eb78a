//! earth: 1–2 000 sensor records on grids of 1–2 048 × 1–1 024 pixels, either the swath
//! generator's (`earth::load`) or drawn by the test with hostile coordinates (the poles, the
//! date line, out-of-range and non-finite latitudes and longitudes, any value including
//! `i16::MIN`), in swath order or not, composed in both modes with windows of no bytes,
//! part of a row, or one grid row up to the whole grid (refused, typed, below one row in
//! active mode and at 0 bytes). Oracle: the max-composite computed in the test from the records,
//! with the projection as documented (row 0 at +90°, column 0 at −180°, half-open cells,
//! longitudes wrapped, −90° and the last column's edge clamped in); the run's image must
//! have the same CRC-32 (of its little-endian pixels) and the same count of composed pixels.
use super::harness::{
    Disks, Shape, drop_tables, fail, finish, load_rows, on_cluster, only_tables, within_grants,
};
use super::inputs;
use adisk_apps::Mode;
use adisk_apps::earth::kernel::{GenParams, Generator, Grid, NO_DATA, Record};
use adisk_apps::rng::SplitMix64;
use arrow::array::{ArrayRef, Float32Array, Int16Array, RecordBatch, UInt32Array};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::sync::Arc;

const INPUT: &str = "pearth_in";

/// Where a case's records come from.
#[derive(Clone, Debug)]
pub enum Records {
    /// `earth::load`'s swaths over `days` days.
    Swaths {
        /// Days.
        days: u32,
    },
    /// Drawn by the test; `ordered`: sorted by latitude (few band moves), else random.
    Drawn {
        /// Sorted by latitude.
        ordered: bool,
    },
}

/// One earth case.
#[derive(Clone, Debug)]
pub struct EarthCase {
    shape: Shape,
    mode: Mode,
    records: u64,
    source: Records,
    width: u32,
    height: u32,
    /// Window in whole grid rows (0 included), and extra bytes short of one more row
    /// (None: the default window).
    window: Option<(u32, u32)>,
    seed: u64,
}

/// earth cases: windows from none (0 bytes) through part of a row to the whole grid.
pub fn cases() -> impl Strategy<Value = EarthCase> {
    let source = prop_oneof![
        (1u32..=30).prop_map(|days| Records::Swaths { days }),
        any::<bool>().prop_map(|ordered| Records::Drawn { ordered }),
    ];
    (
        (inputs::shape(), inputs::mode(), inputs::size(2000), source),
        (inputs::log_uniform(2048), inputs::log_uniform(1024)),
        proptest::option::of((
            prop_oneof![1 => Just(0u64), 3 => inputs::log_uniform(1024)],
            prop_oneof![Just(0u32), any::<u32>()],
        )),
        any::<u64>(),
    )
        .prop_map(|((shape, mode, records, source), (w, h), window, seed)| {
            let (width, height) = (w as u32, h as u32);
            EarthCase {
                shape,
                mode,
                records,
                source,
                width,
                height,
                window: window
                    .map(|(rows, extra)| ((rows as u32).min(height), extra % (2 * width))),
                seed,
            }
        })
}

/// The documented refusals of a window: none at all, or (active mode) less than one grid
/// row. Any other window must run.
fn window_refused(c: &EarthCase, error: &str) -> bool {
    let row_bytes = u64::from(c.width) * 2;
    match window_bytes(c) {
        Some(0) => error.contains("must be positive"),
        Some(w) if w < row_bytes && c.mode == Mode::Active => error.contains("below one grid row"),
        _ => false,
    }
}

fn window_bytes(c: &EarthCase) -> Option<u64> {
    c.window
        .map(|(rows, extra)| u64::from(rows) * u64::from(c.width) * 2 + u64::from(extra))
}

/// A hostile coordinate: mostly in range, sometimes on an edge, out of range or not finite.
fn coordinate(rng: &mut SplitMix64, limit: f32) -> f32 {
    match rng.below(16) {
        0 => limit,
        1 => -limit,
        2 => limit * 1.001,
        3 => -limit * (1.0 + rng.unit() as f32 * 20.0),
        4 => [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][rng.below(3) as usize],
        5 => 0.0,
        _ => (rng.unit() as f32 * 2.0 - 1.0) * limit,
    }
}

/// The test's records: `(day, lat, lon, value)`, in latitude order if asked.
fn drawn(c: &EarthCase, ordered: bool) -> Vec<Record> {
    let mut records: Vec<Record> = (0..c.records)
        .map(|i| {
            let mut rng = SplitMix64::for_index(c.seed, i);
            let (lat, lon) = (coordinate(&mut rng, 90.0), coordinate(&mut rng, 180.0));
            let value = match rng.below(8) {
                0 => i16::MIN,
                1 => i16::MAX,
                _ => rng.next_u64() as i16,
            };
            Record {
                day: rng.below(30) as u32,
                lat,
                lon,
                value,
            }
        })
        .collect();
    if ordered {
        records.sort_by(|a, b| a.lat.total_cmp(&b.lat));
    }
    records
}

fn batch(records: &[Record]) -> RecordBatch {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(records.iter().map(|r| r.day))),
        Arc::new(Float32Array::from_iter_values(
            records.iter().map(|r| r.lat),
        )),
        Arc::new(Float32Array::from_iter_values(
            records.iter().map(|r| r.lon),
        )),
        Arc::new(Int16Array::from_iter_values(
            records.iter().map(|r| r.value),
        )),
    ];
    RecordBatch::try_new(adisk_apps::earth::record_schema(), columns).expect("records")
}

/// The documented projection, written here: the pixel of (lat, lon), if any.
fn pixel(c: &EarthCase, lat: f32, lon: f32) -> Option<usize> {
    if !(lat.is_finite() && lon.is_finite() && (-90.0..=90.0).contains(&lat)) {
        return None;
    }
    let (w, h) = (f64::from(c.width), f64::from(c.height));
    let y = (90.0 - f64::from(lat)) / 180.0 * h;
    let x = (f64::from(lon) + 180.0).rem_euclid(360.0) / 360.0 * w;
    let row = (y.floor() as usize).min(c.height as usize - 1);
    let col = (x.floor() as usize).min(c.width as usize - 1);
    Some(row * c.width as usize + col)
}

/// The oracle: (CRC-32 of the image's little-endian pixels, pixels composed).
fn expected(c: &EarthCase, records: &[Record]) -> (String, usize) {
    let mut image = vec![NO_DATA; c.width as usize * c.height as usize];
    for r in records {
        if let Some(p) = pixel(c, r.lat, r.lon) {
            image[p] = image[p].max(r.value);
        }
    }
    let bytes: Vec<u8> = image.iter().flat_map(|p| p.to_le_bytes()).collect();
    let composed = image.iter().filter(|p| **p != NO_DATA).count();
    (format!("{:08x}", crc32fast::hash(&bytes)), composed)
}

/// Runs one case and compares the image with the oracle's.
pub fn check(c: EarthCase) -> Result<(), TestCaseError> {
    on_cluster(c.shape, |disks| run(disks, c))
}

/// Loads the case's records; returns them and the run's check parameters.
async fn load(
    disks: &Disks,
    c: &EarthCase,
) -> Result<(Vec<Record>, Option<(u64, u32, u64)>), TestCaseError> {
    let cluster = &disks.cluster;
    match c.source {
        Records::Swaths { days } => {
            let size = (c.records, days, c.seed);
            adisk_apps::earth::load(cluster, INPUT, size, (c.width, c.height), |_| {})
                .await
                .map_err(|e| fail(format!("earth::load: {e}")))?;
            let grid = Grid::new(c.width, c.height).map_err(fail)?;
            let params = GenParams {
                records: c.records,
                days,
                grid,
                seed: c.seed,
            };
            let g = Generator::new(params).map_err(fail)?;
            Ok((g.records(0, c.records), Some(size)))
        }
        Records::Drawn { ordered } => {
            let records = Arc::new(drawn(c, ordered));
            let all = records.clone();
            let schema = adisk_apps::earth::record_schema();
            let slice =
                move |r: std::ops::Range<u64>| batch(&all[r.start as usize..r.end as usize]);
            load_rows(cluster, INPUT, schema, c.records, slice)
                .await
                .map_err(fail)?;
            Ok((records.to_vec(), None))
        }
    }
}

async fn run(disks: Arc<Disks>, c: EarthCase) -> Result<(), TestCaseError> {
    let cluster = &disks.cluster;
    drop_tables(cluster, "pearth_").await.map_err(fail)?;
    let (records, check) = load(&disks, &c).await?;
    let params = adisk_apps::earth::EarthParams {
        table: INPUT.into(),
        width: c.width,
        height: c.height,
        window_bytes: window_bytes(&c),
        mode: c.mode,
        check,
    };
    let report = match adisk_apps::earth::run(cluster, &params).await {
        Err(e) if window_refused(&c, &e.to_string()) => {
            super::harness::refused("earth");
            only_tables(cluster, "pearth_", &[INPUT], &[]).await?;
            return finish(&disks, "pearth_").await;
        }
        other => other.map_err(|e| fail(format!("earth failed: {e}")))?,
    };
    within_grants(&report)?;
    only_tables(cluster, "pearth_", &[INPUT], &[]).await?;
    if check.is_some() && report.result["valid"] != serde_json::json!(true) {
        return Err(fail(format!("the run's own check: {}", report.result)));
    }
    let (crc, composed) = expected(&c, &records);
    let got = (&report.result["crc32"], &report.result["pixels_composed"]);
    if got != (&serde_json::json!(crc), &serde_json::json!(composed)) {
        return Err(fail(format!(
            "image crc32 {} with {} pixels composed, the oracle's {crc} with {composed}",
            got.0, got.1
        )));
    }
    finish(&disks, "pearth_").await
}
