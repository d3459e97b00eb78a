//! `earth`: the satellite composite of acharya §4 and uysal §5 (AVHRR-like max-NDVI
//! composites from swaths of sensor records).
//!
//! ```text
//!  active        every disk: scan records ─► earth.composite (a band of grid rows in scratch;
//!                a record outside it ships the band and moves it) ─► host: max-compose tiles
//!  conventional  every disk: scan records ─► host composes every record itself
//!  check         the host's image against the plain composite of the regenerated records
//! ```
pub mod kernel;

use crate::disklet_util::{Params, invalid};
use crate::report::Report;
use crate::{AppError, Mode, Result};
use adisk_core::builder::{JobBuilder, Sizes, table};
use adisk_core::protocol::{DiskletSpec, JobSpec, Sink};
use adisk_diskos::apps::AppStage;
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer};
use adisk_host::Cluster;
use adisk_host::jobs::run_phase;
use arrow::array::{Array, ArrayRef, Float32Array, Int16Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use kernel::{Canvas, GenParams, Generator, Grid, Record, ShippedTile, SubGrid};
use std::sync::Arc;
use std::time::Instant;

const PROGRAM: &str = "app-earth";

/// Schema of the sensor records: `day`, `lat`, `lon`, `value`.
pub fn record_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("day", DataType::UInt32, false),
        Field::new("lat", DataType::Float32, false),
        Field::new("lon", DataType::Float32, false),
        Field::new("value", DataType::Int16, false),
    ]))
}

/// Schema of shipped tiles, sparse: the composed pixels of a band (`pixel`: row-major index
/// in the grid, `value`), pixels nothing was composed into left out.
pub fn tile_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("pixel", DataType::UInt32, false),
        Field::new("value", DataType::Int16, false),
    ]))
}

/// [`record_schema`] with the load's parameters recorded ([`crate::loaded`]): the grid the
/// records were generated for and the generator's parameters, which `run` reads back.
fn loaded_schema(params: &GenParams) -> SchemaRef {
    crate::loaded::record(
        &record_schema(),
        "earth",
        &[
            ("records", params.records),
            ("days", u64::from(params.days)),
            ("seed", params.seed),
            ("width", u64::from(params.grid.width())),
            ("height", u64::from(params.grid.height())),
        ],
    )
}

fn records_batch(schema: &SchemaRef, records: &[Record]) -> RecordBatch {
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
    RecordBatch::try_new(schema.clone(), columns).expect("columns match the schema")
}

/// The records of a batch of [`record_schema`].
fn records_of(batch: &RecordBatch) -> Option<Vec<Record>> {
    let day = batch
        .column_by_name("day")?
        .as_any()
        .downcast_ref::<UInt32Array>()?;
    let lat = batch
        .column_by_name("lat")?
        .as_any()
        .downcast_ref::<Float32Array>()?;
    let lon = batch
        .column_by_name("lon")?
        .as_any()
        .downcast_ref::<Float32Array>()?;
    let value = batch
        .column_by_name("value")?
        .as_any()
        .downcast_ref::<Int16Array>()?;
    Some(
        (0..batch.num_rows())
            .map(|i| Record {
                day: day.value(i),
                lat: lat.value(i),
                lon: lon.value(i),
                value: value.value(i),
            })
            .collect(),
    )
}

fn tiles_batch(tiles: &[ShippedTile]) -> RecordBatch {
    let (mut pixel, mut value) = (Vec::new(), Vec::new());
    for t in tiles {
        let first = t.row0 as usize * t.width as usize;
        for (i, v) in t.pixels.iter().enumerate() {
            if *v != kernel::NO_DATA {
                pixel.push((first + i) as u32);
                value.push(*v);
            }
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(pixel)),
        Arc::new(Int16Array::from(value)),
    ];
    RecordBatch::try_new(tile_schema(), columns).expect("columns match the schema")
}

/// Composes a batch of [`tile_schema`] into the canvas; false if it is not one.
fn compose_tiles(canvas: &mut Canvas, batch: &RecordBatch) -> bool {
    let (Some(pixel), Some(value)) = (
        batch.column(0).as_any().downcast_ref::<UInt32Array>(),
        batch.column(1).as_any().downcast_ref::<Int16Array>(),
    ) else {
        return false;
    };
    for (p, v) in pixel.values().iter().zip(value.values()) {
        canvas.compose_pixel(*p as usize, *v);
    }
    true
}

/// Builds `earth.composite`.
///
/// # Errors
/// Bad parameters or inputs; a window that does not fit the scratch grant.
pub fn build(stage: &AppStage<'_>) -> adisk_diskos::Result<Box<dyn Disklet>> {
    let params = Params::new(stage)?;
    params.shape(1, 1)?;
    if stage.disklet != "composite" {
        return Err(invalid(format!("earth has no disklet `{}`", stage.disklet)));
    }
    if records_of(&RecordBatch::new_empty(stage.inputs[0].clone())).is_none() {
        return Err(invalid(
            "earth.composite reads sensor records (day, lat, lon, value)",
        ));
    }
    let grid = Grid::new(params.parse("width")?, params.parse("height")?)
        .map_err(|e| invalid(e.to_string()))?;
    let window = SubGrid::new(grid, stage.scratch_bytes as usize)
        .map_err(|e| invalid(format!("earth.composite: {e}")))?;
    Ok(Box::new(Composite {
        window,
        pending: Vec::new(),
    }))
}

/// The disk's composite window.
struct Composite {
    window: SubGrid,
    pending: Vec<ShippedTile>,
}

impl Composite {
    /// Emits the pending tiles one at a time as room allows.
    fn flush(&mut self, out: &mut Emitter) {
        while let Some(t) = self.pending.first() {
            if (t.bytes() as u64) + 64 > out.room() {
                return;
            }
            let t = self.pending.remove(0);
            out.emit(0, tiles_batch(std::slice::from_ref(&t)));
        }
    }
}

impl Disklet for Composite {
    fn name(&self) -> &'static str {
        "earth_composite"
    }
    fn output_schema(&self) -> SchemaRef {
        tile_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> adisk_diskos::Result<()> {
        let records =
            records_of(input.batch).ok_or_else(|| invalid("earth: not sensor records"))?;
        self.window.feed_batch(&records, &mut self.pending);
        self.flush(out);
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> adisk_diskos::Result<()> {
        self.pending.extend(self.window.finish());
        self.flush(out);
        Ok(())
    }
    fn has_more_output(&self) -> bool {
        !self.pending.is_empty()
    }
    fn more_output(&mut self, out: &mut Emitter) -> adisk_diskos::Result<()> {
        self.flush(out);
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        (self.window.bytes() + self.pending.iter().map(ShippedTile::bytes).sum::<usize>()) as u64
    }
    fn flushes(&self) -> u64 {
        self.window.shipped()
    }
}

/// Parameters of a composite run.
#[derive(Clone, Debug)]
pub struct EarthParams {
    /// Records table.
    pub table: String,
    /// Output grid width (must agree with the grid the load recorded, if any).
    pub width: u32,
    /// Output grid height (must agree with the grid the load recorded, if any).
    pub height: u32,
    /// The disks' window (scratch), bytes (None: a quarter of the smallest disk's memory).
    pub window_bytes: Option<u64>,
    /// Active or conventional.
    pub mode: Mode,
    /// The generator's parameters, to check the result against (None: no check); they must
    /// agree with those the load recorded.
    pub check: Option<RecordsDaysSeed>,
}

/// Generates `records` sensor records over `days` days for a `width`×`height` grid.
///
/// # Errors
/// Bad parameters; a load failing.
pub async fn load(
    cluster: &Cluster,
    table: &str,
    (records, days, seed): (u64, u32, u64),
    (width, height): (u32, u32),
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<u64> {
    let grid = Grid::new(width, height).map_err(|e| AppError::Invalid(e.to_string()))?;
    let params = GenParams {
        records,
        days,
        grid,
        seed,
    };
    let generator = Arc::new(Generator::new(params).map_err(|e| AppError::Invalid(e.to_string()))?);
    let schema = loaded_schema(&params);
    let n = u64::from(cluster.disk_count());
    let generators = (0..n)
        .map(|d| {
            let (start, end) = (d * records / n, (d + 1) * records / n);
            let (g, schema) = (generator.clone(), schema.clone());
            Box::new(move |_| {
                let chunks = (start..end)
                    .step_by(16_384)
                    .map(move |c| Ok(records_batch(&schema, &g.records(c, (c + 16_384).min(end)))));
                Box::new(chunks) as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(cluster, table, schema, generators, progress).await?;
    Ok(records * 14)
}

/// Runs the composite; with `check`, compares it with the plain composite of the regenerated
/// records.
///
/// # Errors
/// Missing records, a grid or window out of range, a disk failing.
pub async fn run(cluster: &Cluster, params: &EarthParams) -> Result<Report> {
    let grid =
        Grid::new(params.width, params.height).map_err(|e| AppError::Invalid(e.to_string()))?;
    let catalog = cluster.catalog().await?;
    let entry = catalog
        .tables
        .get(&params.table)
        .ok_or_else(|| AppError::InputMissing {
            table: params.table.clone(),
            hint: "adisk load earth --records N".into(),
        })?;
    if entry.schema.fields() != record_schema().fields() {
        return Err(AppError::Invalid(format!(
            "`{}` is not a table of sensor records",
            params.table
        )));
    }
    agree_with_load(&entry.schema, params)?;
    let disks = entry.disks();
    let memory = crate::sort::smallest_memory(cluster, &disks).await?;
    let window = window_bytes(params, grid, memory)?;
    let mut report = Report {
        app: "earth".into(),
        mode: params.mode.to_string(),
        ..Default::default()
    };
    let started = Instant::now();
    let mut canvas = Canvas::new(grid);
    let (name, stages): (&str, Vec<DiskletSpec>) = match params.mode {
        Mode::Active => (
            "composite at the disks, compose tiles at host",
            vec![DiskletSpec::App {
                app: "earth".into(),
                name: "composite".into(),
                params: serde_json::json!({ "width": params.width, "height": params.height }),
                inputs: 1,
                ports: 1,
            }],
        ),
        Mode::Conventional => ("records to host, composed there", vec![]),
    };
    let sizes = Sizes {
        scratch_kib: window.div_ceil(1024),
        buffer_kib: 256,
        temp_kib: 0,
    };
    let specs = disks
        .iter()
        .map(|d| {
            let source = table(params.table.clone(), vec![]);
            let spec = JobBuilder::chain("earth", source, stages.clone(), Sink::Host)
                .program(PROGRAM)
                .sizes(sizes)
                .build()?;
            Ok((*d, spec))
        })
        .collect::<Result<Vec<(u32, JobSpec)>>>()?;
    let mut failure: Option<String> = None;
    let stats = run_phase(cluster, specs, |_, b| {
        let composed = match params.mode {
            Mode::Active => compose_tiles(&mut canvas, &b).then_some(Ok(())),
            Mode::Conventional => records_of(&b).map(|rs| {
                compose_records(&mut canvas, &rs);
                Ok(())
            }),
        };
        match composed {
            Some(Ok(())) => {}
            Some(Err(e)) => failure = Some(e),
            None => failure = Some(format!("unexpected batch {:?}", b.schema())),
        }
        Ok(())
    })
    .await?;
    if let Some(e) = failure {
        return Err(AppError::Invalid(format!("earth: {e}")));
    }
    report.phase(name, started.elapsed(), stats);
    report.seconds = started.elapsed().as_secs_f64();
    report.result = summary(&canvas, params, grid);
    Ok(report)
}

/// The disks' window: asked for, or a quarter of the smallest disk's `memory`.
///
/// # Errors
/// A window of 0 (a job's zero scratch would mean "the default"), one below a grid row (in
/// active mode), or one that does not fit a disk's memory with the stream buffers.
fn window_bytes(params: &EarthParams, grid: Grid, memory: u64) -> Result<u64> {
    if params.window_bytes == Some(0) {
        return Err(AppError::Invalid(
            "--window-kib must be positive: the window holds at least one grid row".into(),
        ));
    }
    let window = params.window_bytes.unwrap_or(memory / 4);
    let row_bytes = u64::from(grid.width()) * std::mem::size_of::<i16>() as u64;
    if params.mode == Mode::Active && window < row_bytes {
        return Err(AppError::Invalid(format!(
            "--window-kib: a window of {window} bytes is below one grid row ({row_bytes} bytes at width {})",
            grid.width()
        )));
    }
    if window + (2 << 20) > memory {
        return Err(AppError::Invalid(format!(
            "--window-kib: a window of {window} bytes and stream buffers do not fit a disk's memory of {memory} bytes"
        )));
    }
    Ok(window)
}

/// The generator's parameters a check regenerates the records from: `(records, days, seed)`.
pub type RecordsDaysSeed = (u64, u32, u64);

/// The grid and the check's generator parameters a run takes from the table's load.
///
/// `width` and `height` not given take the grid `schema` records (1024 × 512 when it records
/// none); `check` given as an empty list (`--check` alone) takes the recorded `RECORDS,DAYS,
/// SEED`. Anything given must agree with what the load recorded.
///
/// # Errors
/// A zero dimension, a value disagreeing with the load ([`AppError::LoadedMismatch`]),
/// `--check` alone on a table that records no parameters, a check that is not three values.
pub fn from_load(
    schema: Option<&Schema>,
    table: &str,
    (width, height): (Option<u32>, Option<u32>),
    check: Option<&[u64]>,
) -> Result<((u32, u32), Option<RecordsDaysSeed>)> {
    let recorded = match schema {
        Some(s) => recorded(s)?,
        None => Recorded::default(),
    };
    let (w, h) = (
        width.or(recorded.width).unwrap_or(1024),
        height.or(recorded.height).unwrap_or(512),
    );
    // A zero dimension is refused as such before it is compared with the load.
    Grid::new(w, h).map_err(|e| AppError::Invalid(e.to_string()))?;
    let grid = (
        crate::loaded::resolve("--width", table, width, recorded.width, 1024)?,
        crate::loaded::resolve("--height", table, height, recorded.height, 512)?,
    );
    let check = match (check, recorded.generator) {
        (None, _) => None,
        (Some([]), Some(g)) => Some(g),
        (Some([]), None) => {
            return Err(AppError::Invalid(format!(
                "--check: table `{table}` records no generator parameters; give --check RECORDS,DAYS,SEED as loaded"
            )));
        }
        (Some([r, d, s]), loaded) => {
            let days = u32::try_from(*d)
                .map_err(|_| AppError::Invalid(format!("--check: {d} days is too many")))?;
            let given = (*r, days, *s);
            match loaded {
                Some(l) if l != given => {
                    return Err(AppError::LoadedMismatch {
                        flag: "--check".into(),
                        given: format!("{r},{days},{s}"),
                        recorded: format!("{},{},{}", l.0, l.1, l.2),
                        table: table.into(),
                    });
                }
                _ => Some(given),
            }
        }
        (Some(_), _) => {
            return Err(AppError::Invalid(
                "--check takes RECORDS,DAYS,SEED (or nothing: the values the load recorded)".into(),
            ));
        }
    };
    Ok((grid, check))
}

/// What `load` recorded in a table's schema (all `None` for a table loaded before).
#[derive(Clone, Copy, Debug, Default)]
struct Recorded {
    width: Option<u32>,
    height: Option<u32>,
    generator: Option<RecordsDaysSeed>,
}

fn recorded(schema: &Schema) -> Result<Recorded> {
    let get = |name: &str| crate::loaded::value(schema, "earth", name);
    let narrow = |name: &str| -> Result<Option<u32>> {
        get(name)?
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    AppError::Invalid(format!(
                        "the table's recorded earth {name} {v} is too large"
                    ))
                })
            })
            .transpose()
    };
    let generator = match (get("records")?, narrow("days")?, get("seed")?) {
        (Some(r), Some(d), Some(s)) => Some((r, d, s)),
        _ => None,
    };
    Ok(Recorded {
        width: narrow("width")?,
        height: narrow("height")?,
        generator,
    })
}

/// Checks a run's grid and check parameters against what the table's load recorded.
fn agree_with_load(schema: &Schema, params: &EarthParams) -> Result<()> {
    let check = params.check.map(|(r, d, s)| [r, u64::from(d), s]);
    from_load(
        Some(schema),
        &params.table,
        (Some(params.width), Some(params.height)),
        check.as_ref().map(|c| &c[..]),
    )
    .map(|_| ())
}

/// Composes raw records straight into the canvas (the conventional host).
fn compose_records(canvas: &mut Canvas, records: &[Record]) {
    for r in records {
        canvas.compose_record(r);
    }
}

fn summary(canvas: &Canvas, params: &EarthParams, grid: Grid) -> serde_json::Value {
    let bytes: Vec<u8> = canvas
        .pixels()
        .iter()
        .flat_map(|p| p.to_le_bytes())
        .collect();
    let composed = canvas
        .pixels()
        .iter()
        .filter(|p| **p != kernel::NO_DATA)
        .count();
    let mut v = serde_json::json!({
        "width": grid.width(),
        "height": grid.height(),
        "pixels_composed": composed,
        "crc32": format!("{:08x}", crc32fast::hash(&bytes)),
    });
    if let Some((records, days, seed)) = params.check
        && let Ok(g) = Generator::new(GenParams {
            records,
            days,
            grid,
            seed,
        })
    {
        let reference = kernel::reference_composite(&g.records(0, records), grid);
        v["valid"] = serde_json::Value::Bool(reference == canvas.pixels());
    }
    v
}
