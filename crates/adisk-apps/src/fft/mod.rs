//! `fft`: the out-of-core 2-D FFT of chiu §4.4 on the disks, and its conventional baseline.
//!
//! ```text
//!  pass 1  every disk d: scan its rows (BLOCK, *) ─► fft.rows (row FFT, cut into p pieces)
//!          ─► exchange by `target` (range route: piece j to disk j) ─► disk j's pipe (p senders)
//!          ─► fft.runs (pieces buffered up to cap_bytes, re-ordered column-major)
//!          ─► split result `OUT_runs` (one partition per run, on disk j itself)
//!  pass 2  every disk j: its k runs (k table inputs) ─► fft.columns (k-way merge into whole
//!          columns l ∈ block j, FFT of each) ─► split result `OUT`, partition j (X[·][l])
//!  check   host: the output against fft2_plain of the generator's matrix; the planted peaks
//! ```
//!
//! Conventional: the host reads every element, runs `fft2_plain` in its memory and writes
//! `X` back to the disks in the same layout (partition j = the columns of block j), then the
//! same check.
pub mod disklets;
pub mod kernel;
pub mod layout;

use crate::report::{Phase, Report};
use crate::{AppError, Mode, Result};
use adisk_core::builder::{self, JobBuilder, Sizes, exchange, new_id};
use adisk_core::protocol::{DiskletSpec, Route, Sink, Source, StoredStream};
use adisk_host::Cluster;
use adisk_host::jobs::{encode_expr, run_phase};
use arrow::array::{Float64Array, RecordBatch, UInt32Array};
use arrow::datatypes::Schema;
use datafusion::common::ScalarValue;
use datafusion::prelude::{col, lit};
use kernel::{FftError, GenParams, Generator, TransposePlan, block_range};
use layout::ElementRows;
use rustfft::num_complex::Complex64;
use std::time::Instant;

/// Parameters of an FFT run.
#[derive(Clone, Debug)]
pub struct FftParams {
    /// Input matrix table (`adisk load fft`).
    pub input: String,
    /// Output table (`X`, partition j at disk j holds the columns of block j).
    pub output: String,
    /// Active or conventional.
    pub mode: Mode,
    /// Seed the input was generated with (the oracle regenerates the matrix from it).
    pub seed: u64,
    /// Bytes a disk buffers before writing a run (active; `None`: 1/16 of the smallest disk's
    /// memory).
    pub cap_bytes: Option<u64>,
    /// Stream buffer of the active jobs, KiB (`None`: 16 KiB, or larger for wide rows).
    pub buffer_kib: Option<u64>,
    /// Most values of one column segment in a run.
    pub segment_values: u64,
}

/// Largest matrix the host validates against the in-memory oracle (elements).
pub const MAX_CHECKED_ELEMENTS: u64 = 1 << 24;

/// Smallest matrix whose planted peaks the check requires (elements). The noise's transform
/// at a cell is about `0.06 · √(n·m)`, against a weakest peak of `0.5 · n·m`: from 256
/// elements on, a peak misses 5 % with a probability below 10⁻¹⁰; at a few elements it
/// misses often, and a peak check would fail exact results.
pub const PEAK_CHECK_ELEMENTS: u64 = 256;

/// Largest matrix the check also compares with the direct DFT by its definition
/// ([`kernel::dft2_direct`], `O((n·m)²)`), a second oracle independent of rustfft where the
/// peaks cannot serve as one.
pub const DIRECT_DFT_ELEMENTS: u64 = 1024;

/// Largest relative error the check accepts against each oracle.
pub const MAX_RELATIVE_ERROR: f64 = 1e-9;

const PROGRAM: &str = "app-fft";

fn app(disklet: &str, params: serde_json::Value) -> DiskletSpec {
    DiskletSpec::App {
        app: "fft".into(),
        name: disklet.into(),
        params,
        inputs: 1,
        ports: 1,
    }
}

fn runs_table(output: &str) -> String {
    format!("{output}_runs")
}

fn fft_err(e: FftError) -> AppError {
    AppError::Invalid(format!("fft: {e}"))
}

/// The input matrix: its shape (from the partitions' integer bounds) and where it lives.
#[derive(Clone, Debug)]
struct Input {
    rows: u64,
    cols: u64,
    disks: Vec<u32>,
    /// The seed `adisk load fft` recorded (None: a table that records none).
    seed: Option<u64>,
}

/// The seed a run's check regenerates the matrix from: `given` (`--seed`), which must agree
/// with the seed the load recorded in the table's `schema`; the recorded one when not given;
/// 1 when neither.
///
/// # Errors
/// A seed disagreeing with the load ([`AppError::LoadedMismatch`]).
pub fn seed_from_load(schema: Option<&Schema>, table: &str, given: Option<u64>) -> Result<u64> {
    let recorded = match schema {
        Some(s) => crate::loaded::value(s, "fft", "seed")?,
        None => None,
    };
    crate::loaded::resolve("--seed", table, given, recorded, 1)
}

/// Runs the 2-D FFT, then validates its output against the single-node oracle.
///
/// # Errors
/// Missing or malformed input, parameters out of range (a grant too small for one column or
/// one row's piece), any disk failing (partial output and runs are dropped).
pub async fn run(cluster: &Cluster, params: &FftParams) -> Result<Report> {
    adisk_storage::store::validate_table_name(&params.output)
        .map_err(adisk_host::HostError::from)?;
    if params.output == params.input {
        return Err(AppError::Invalid(
            "the output table must differ from the input".into(),
        ));
    }
    let input = input(cluster, &params.input).await?;
    crate::loaded::resolve("--seed", &params.input, Some(params.seed), input.seed, 1)?;
    let mut report = Report {
        app: "fft".into(),
        mode: params.mode.to_string(),
        ..Default::default()
    };
    let _ = cluster.drop_table(&params.output).await;
    let started = Instant::now();
    let outcome = match params.mode {
        Mode::Active => active(cluster, params, &input, &mut report).await,
        Mode::Conventional => conventional(cluster, params, &input, &mut report).await,
    };
    let _ = cluster.drop_table(&runs_table(&params.output)).await;
    let extra = match outcome {
        Ok(extra) => extra,
        Err(e) => {
            let _ = cluster.drop_table(&params.output).await;
            return Err(e);
        }
    };
    report.seconds = started.elapsed().as_secs_f64();
    report.result = validation(cluster, params, &input, extra).await?;
    Ok(report)
}

/// The input's shape and disks, checked to be a whole `rows × cols` matrix table.
async fn input(cluster: &Cluster, table: &str) -> Result<Input> {
    let catalog = cluster.catalog().await?;
    let missing = |hint: &str| AppError::InputMissing {
        table: table.into(),
        hint: hint.into(),
    };
    let entry = catalog
        .tables
        .get(table)
        .ok_or_else(|| missing("adisk load fft --rows N --cols M"))?;
    layout::check_columns(&entry.schema, "input", &layout::element_columns()).map_err(|_| {
        AppError::Invalid(format!(
            "`{table}` is not a matrix table: the fft's input has columns row UInt32, col UInt32, re Float64, im Float64 (adisk load fft)"
        ))
    })?;
    let index = |name: &str| entry.schema.index_of(name).unwrap_or(0);
    let (ri, ci) = (index("row"), index("col"));
    let (mut rows, mut cols) = (0u64, 0u64);
    for (_, p) in entry.placements.iter().filter(|(_, p)| p.rows > 0) {
        let hi = |i: usize| p.bounds.get(i).copied().flatten().map(|[_, hi]| hi);
        let (Some(r), Some(c)) = (hi(ri), hi(ci)) else {
            return Err(AppError::Invalid(format!(
                "`{table}` has partitions without row/col bounds: load it again with adisk load fft"
            )));
        };
        rows = rows.max(r as u64 + 1);
        cols = cols.max(c as u64 + 1);
    }
    let elements = entry.rows();
    if elements == 0 {
        return Err(missing("the table holds no elements"));
    }
    if rows.checked_mul(cols) != Some(elements) {
        return Err(AppError::Invalid(format!(
            "`{table}` holds {elements} elements, not a whole {rows} x {cols} matrix (each row must have every column)"
        )));
    }
    let recorded = |name: &str| crate::loaded::value(&entry.schema, "fft", name);
    if let (Some(r), Some(c)) = (recorded("rows")?, recorded("cols")?)
        && (r, c) != (rows, cols)
    {
        return Err(AppError::Invalid(format!(
            "`{table}` was loaded as a {r} x {c} matrix but holds a {rows} x {cols} one"
        )));
    }
    Ok(Input {
        rows,
        cols,
        disks: entry.disks(),
        seed: recorded("seed")?,
    })
}

/// The smallest memory budget among the cluster's disks, and the most buffers per stream.
async fn smallest_memory(cluster: &Cluster) -> Result<(u64, u64)> {
    let (mut smallest, mut buffers) = (u64::MAX, 1u64);
    for (d, s) in cluster.status().await.iter().enumerate() {
        let s = s
            .as_ref()
            .map_err(|e| AppError::Invalid(format!("disk {d}: {e}")))?;
        smallest = smallest.min(s.memory_bytes);
        buffers = buffers.max(u64::from(s.buffers_per_stream));
    }
    Ok((smallest, buffers))
}

/// The sizes of the active jobs.
#[derive(Clone, Debug)]
struct Plan {
    disks: usize,
    buffer_bytes: u64,
    batch_bytes: u64,
    cap_bytes: u64,
    segment_values: u64,
}

impl Plan {
    fn new(
        params: &FftParams,
        input: &Input,
        disks: usize,
        (memory, buffers_per_stream): (u64, u64),
    ) -> Result<Self> {
        let widest = input.cols.div_ceil(disks as u64);
        let piece = 16 * widest + 128;
        let buffer_bytes = match params.buffer_kib {
            Some(k) if !(16..=16384).contains(&k) => {
                return Err(AppError::Invalid(format!(
                    "--buffer-kib {k}: a stream buffer is 16 to 16384 KiB"
                )));
            }
            Some(k) => k * 1024,
            None => (2 * piece).next_power_of_two().clamp(16 << 10, 16 << 20),
        };
        if 2 * piece > buffer_bytes {
            return Err(AppError::Invalid(format!(
                "a row's piece of {piece} bytes (columns / disks = {widest}) needs buffers of at least {} KiB",
                (2 * piece).div_ceil(1024)
            )));
        }
        let batch_bytes = buffer_bytes / 2;
        let segment_values = params.segment_values.clamp(1, (batch_bytes / 2 - 64) / 16);
        let mut plan = Plan {
            disks,
            buffer_bytes,
            batch_bytes,
            cap_bytes: 0,
            segment_values,
        };
        plan.cap_bytes = match params.cap_bytes {
            Some(c) => c,
            None => plan.balanced_cap(input, memory, buffers_per_stream + 2),
        };
        let cap_bytes = plan.cap_bytes;
        for d in 0..disks {
            TransposePlan::new(
                input.rows,
                plan.cols_of(input, d)?,
                cap_bytes as usize,
                segment_values as usize,
            )
            .map_err(|e| {
                AppError::Invalid(format!(
                    "the run buffer (--cap-kib) is too small for one column of {} values plus two segments: {e}",
                    input.rows
                ))
            })?;
        }
        Ok(plan)
    }

    /// The run buffer that makes the two passes' grants about equal (the larger cap, the
    /// larger pass 1's scratch, but the fewer runs pass 2 merges, each a stream of `slots`
    /// buffers): the best of the caps from one column's merge up to a quarter of `memory`.
    fn balanced_cap(&self, input: &Input, memory: u64, slots: u64) -> u64 {
        let slot = self.buffer_bytes + 1024;
        let piece = 16 * input.cols.div_ceil(self.disks as u64) + 48;
        let smallest = (17 * input.rows + 2 * (16 * self.segment_values + 64)).max(piece) + 1024;
        let grants = |cap: u64| {
            let runs = input.rows.div_ceil((cap / piece).max(1));
            let one = 2 * (cap + piece + 4 * self.batch_bytes) + 8 * slots * slot;
            let two = runs * (slots * slot + 2 * self.batch_bytes) + 16 * input.rows;
            one.max(two)
        };
        let mut best = smallest;
        let mut cap = smallest;
        while cap <= (memory / 4).max(smallest) {
            if grants(cap) < grants(best) {
                best = cap;
            }
            cap += 16 * 1024;
        }
        best
    }

    fn cols_of(&self, input: &Input, disk: usize) -> Result<std::ops::Range<u64>> {
        block_range(input.cols, self.disks, disk).map_err(fft_err)
    }

    /// Parameters shared by every disklet.
    fn params(&self, input: &Input, disk: usize) -> serde_json::Value {
        serde_json::json!({
            "rows": input.rows,
            "cols": input.cols,
            "disks": self.disks,
            "disk": disk,
            "cap_bytes": self.cap_bytes,
            "segment_values": self.segment_values,
            "batch_bytes": self.batch_bytes,
        })
    }

    /// Scratch of each stage of pass 1 (every stage gets the same): the larger of `rows`' (a
    /// row, its FFT, pieces built and waiting) and `runs`' (the run buffer, a piece, an input
    /// buffer's pieces waiting, segments being emitted), as the disklets check them.
    fn pass_one_scratch(&self, input: &Input) -> u64 {
        let rows = 5 * 16 * input.cols + 4 * self.batch_bytes;
        let runs = self.cap_bytes + self.piece_bytes(input) + 4 * self.batch_bytes;
        rows.max(runs) + 4096
    }

    /// Extra scratch per stage (KiB) so that the grant covers the pipe's senders: DiskOS grants
    /// a pipe input `capacity + 2` buffers, but each sender's `DoPut` may hold a whole message
    /// (up to `MAX_MESSAGE_BUFFERS` buffers, charged to the job) while it waits for room in
    /// the inbox, so `senders` of them may hold that many at once. Likewise the split result's
    /// writer holds its row group in progress (at least 1024 rows, with its encoders), charged
    /// to the job but not counted in the grant: four buffers.
    fn inbox_pad(&self, senders: usize, stages: usize) -> u64 {
        let buffer = self.buffer_bytes + 1024;
        let message = adisk_diskos::exchange::MAX_MESSAGE_BUFFERS * buffer;
        (senders as u64 * message + 4 * buffer).div_ceil(1024 * stages.max(1) as u64)
    }

    /// Bytes of one row's piece (the widest block of columns).
    fn piece_bytes(&self, input: &Input) -> u64 {
        16 * input.cols.div_ceil(self.disks as u64) + 128
    }

    /// The run buffer of pass 2's merge of `runs` runs: one column plus a head per run (and a
    /// piece, which the plan checks for).
    fn merge_cap(&self, input: &Input, runs: usize) -> u64 {
        let head = 16 * self.segment_values + 64;
        let column = 17 * input.rows;
        (column + runs.max(2) as u64 * head).max(self.piece_bytes(input))
    }

    /// Scratch of pass 2's merge: its cap, an input buffer queued per run, the column's FFT,
    /// its elements (as the disklet checks them).
    fn pass_two_scratch(&self, input: &Input, runs: usize) -> u64 {
        let cap = self.merge_cap(input, runs);
        let column = 16 * input.rows;
        cap + runs as u64 * 2 * self.batch_bytes + 4 * column + 4 * self.batch_bytes + 4096
    }
}

async fn active(
    cluster: &Cluster,
    params: &FftParams,
    input: &Input,
    report: &mut Report,
) -> Result<serde_json::Value> {
    let disks = cluster.disk_count() as usize;
    let memory = smallest_memory(cluster).await?;
    let plan = Plan::new(params, input, disks, memory)?;
    let t = Instant::now();
    let stats = pass_one(cluster, params, input, &plan).await?;
    report.phase("pass 1: row FFT + exchange + runs", t.elapsed(), stats);
    let t = Instant::now();
    let (stats, runs) = pass_two(cluster, params, input, &plan).await?;
    report.phase("pass 2: merge + column FFT", t.elapsed(), stats);
    Ok(serde_json::json!({
        "runs_per_disk": runs,
        "cap_bytes": plan.cap_bytes,
        "buffer_bytes": plan.buffer_bytes,
        "segment_values": plan.segment_values,
    }))
}

/// The exchange's route: piece `target = j` to disk j.
fn route(disks: usize) -> Result<Route> {
    if disks == 1 {
        return Ok(Route::Broadcast);
    }
    let bounds = (0..disks as u32 - 1)
        .map(|b| encode_expr(&lit(ScalarValue::UInt32(Some(b)))))
        .collect::<adisk_host::Result<Vec<_>>>()?;
    Ok(Route::Range {
        key: encode_expr(&col("target"))?,
        bounds,
    })
}

/// Pass 1: every disk FFTs its rows and sends each row's column blocks to their disks; every
/// disk forms runs of what it receives, each written to its own partition of the runs table.
async fn pass_one(
    cluster: &Cluster,
    params: &FftParams,
    input: &Input,
    plan: &Plan,
) -> Result<Vec<adisk_core::stats::DiskJobStats>> {
    let targets: Vec<String> = (0..plan.disks as u32)
        .map(|d| cluster.address(d).to_string())
        .collect();
    let exchange_id = new_id("fft-x");
    let route = route(plan.disks)?;
    let max = adisk_core::graph::MAX_SPLIT_PARTITIONS;
    let scratch_kib = plan.pass_one_scratch(input).div_ceil(1024);
    let mut specs = Vec::new();
    for d in 0..plan.disks as u32 {
        let disklet_params = plan.params(input, d as usize);
        let mut job = JobBuilder::new("fft-pass1").program(PROGRAM);
        let pieces = job.input(Source::Pipe {
            exchange_id: exchange_id.clone(),
            senders: input.disks.len() as u32,
            schema: layout::pieces_schema().as_ref().clone(),
        });
        let runs = job.stage(app("runs", disklet_params.clone()), vec![pieces]);
        let split = StoredStream::Split {
            name: runs_table(&params.output),
            first_partition: d * max,
            by: "run".into(),
            max_partitions: max,
        };
        job.output(runs, Sink::Store { stream: split });
        if let Some(sender) = input.disks.iter().position(|x| *x == d) {
            let columns = ["row", "col", "re", "im"].map(String::from).to_vec();
            let rows = job.input(builder::table(params.input.clone(), columns));
            let blocks = job.stage(app("rows", disklet_params), vec![rows]);
            let sink = exchange(
                exchange_id.clone(),
                targets.clone(),
                sender as u32,
                route.clone(),
            );
            job.output(blocks, sink);
        }
        let stages = job.spec().stages.len();
        let sizes = Sizes {
            scratch_kib: scratch_kib + plan.inbox_pad(input.disks.len(), stages),
            buffer_kib: plan.buffer_bytes / 1024,
            temp_kib: 0,
        };
        specs.push((d, job.sizes(sizes).build()?));
    }
    Ok(run_phase(cluster, specs, |_, _| Ok(())).await?)
}

/// Pass 2: every disk merges its runs into whole columns, FFTs them and writes partition j of
/// the output. Returns the statistics and the runs per disk.
async fn pass_two(
    cluster: &Cluster,
    params: &FftParams,
    input: &Input,
    plan: &Plan,
) -> Result<(Vec<adisk_core::stats::DiskJobStats>, Vec<usize>)> {
    let catalog = cluster.catalog().await?;
    let runs_name = runs_table(&params.output);
    let mut per_disk: Vec<Vec<u32>> = vec![Vec::new(); plan.disks];
    if let Some(runs) = catalog.tables.get(&runs_name) {
        for (d, p) in &runs.placements {
            if let Some(v) = per_disk.get_mut(*d as usize) {
                v.push(p.partition);
            }
        }
    }
    let limit = adisk_core::protocol::MAX_JOB_GRAPH_NODES - 2;
    let mut specs = Vec::new();
    for (d, parts) in per_disk.iter_mut().enumerate() {
        parts.sort_unstable();
        if plan.cols_of(input, d)?.is_empty() {
            continue;
        }
        let k = parts.len();
        if k == 0 || k > limit {
            return Err(AppError::Invalid(format!(
                "disk {d} formed {k} runs; one merge pass takes 1 to {limit}: raise --cap-kib"
            )));
        }
        let mut disklet_params = plan.params(input, d);
        disklet_params["cap_bytes"] = plan.merge_cap(input, k).into();
        let mut job = JobBuilder::new("fft-pass2").program(PROGRAM);
        let runs = parts
            .iter()
            .map(|p| {
                job.input(Source::Table {
                    table: runs_name.clone(),
                    columns: vec![],
                    prune: None,
                    partitions: Some(vec![*p]),
                })
            })
            .collect();
        let merge = DiskletSpec::App {
            app: "fft".into(),
            name: "columns".into(),
            params: disklet_params,
            inputs: k as u32,
            ports: 1,
        };
        let columns = job.stage(merge, runs);
        let split = StoredStream::Split {
            name: params.output.clone(),
            first_partition: d as u32,
            by: "part".into(),
            max_partitions: 1,
        };
        job.output(columns, Sink::Store { stream: split });
        let sizes = Sizes {
            scratch_kib: plan.pass_two_scratch(input, k).div_ceil(1024),
            buffer_kib: plan.buffer_bytes / 1024,
            temp_kib: 0,
        };
        specs.push((d as u32, job.sizes(sizes).build()?));
    }
    let stats = run_phase(cluster, specs, |_, _| Ok(())).await?;
    Ok((stats, per_disk.iter().map(Vec::len).collect()))
}

/// Reads every element of `table` at the host into a `rows × cols` matrix (each exactly once).
async fn read_matrix(
    cluster: &Cluster,
    table: &str,
    rows: u64,
    cols: u64,
) -> Result<(Vec<Vec<Complex64>>, Vec<adisk_core::stats::DiskJobStats>)> {
    let catalog = cluster.catalog().await?;
    let disks = catalog
        .tables
        .get(table)
        .map(|e| e.disks())
        .unwrap_or_default();
    let specs = disks
        .iter()
        .map(|d| {
            let columns = ["row", "col", "re", "im"].map(String::from).to_vec();
            let source = builder::table(table, columns);
            let spec = JobBuilder::chain("fft-read", source, vec![], Sink::Host)
                .program(PROGRAM)
                .build()?;
            Ok((*d, spec))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut matrix = vec![vec![Complex64::default(); cols as usize]; rows as usize];
    let mut seen = 0u64;
    let stats = run_phase(cluster, specs, |_, b| {
        seen += place(&mut matrix, &b).map_err(adisk_host::HostError::Invalid)?;
        Ok(())
    })
    .await?;
    if seen != rows * cols {
        return Err(AppError::Invalid(format!(
            "`{table}` holds {seen} elements, expected {}",
            rows * cols
        )));
    }
    Ok((matrix, stats))
}

/// Places a batch of elements into `matrix`; returns how many.
fn place(matrix: &mut [Vec<Complex64>], b: &RecordBatch) -> Result<u64, String> {
    let get = |name: &str| b.column_by_name(name).map(|c| c.as_any());
    let row = get("row").and_then(|c| c.downcast_ref::<UInt32Array>());
    let col = get("col").and_then(|c| c.downcast_ref::<UInt32Array>());
    let re = get("re").and_then(|c| c.downcast_ref::<Float64Array>());
    let im = get("im").and_then(|c| c.downcast_ref::<Float64Array>());
    let (Some(row), Some(col), Some(re), Some(im)) = (row, col, re, im) else {
        return Err("not a matrix stream".into());
    };
    for i in 0..b.num_rows() {
        let (r, c) = (row.value(i) as usize, col.value(i) as usize);
        let cell = matrix
            .get_mut(r)
            .and_then(|x| x.get_mut(c))
            .ok_or_else(|| format!("element ({r}, {c}) outside the matrix"))?;
        *cell = Complex64::new(re.value(i), im.value(i));
    }
    Ok(b.num_rows() as u64)
}

/// Conventional: the host reads the matrix, transforms it in memory (the same kernel) and
/// writes `X` back, partition j holding the columns of block j.
async fn conventional(
    cluster: &Cluster,
    params: &FftParams,
    input: &Input,
    report: &mut Report,
) -> Result<serde_json::Value> {
    let t = Instant::now();
    let (matrix, stats) = read_matrix(cluster, &params.input, input.rows, input.cols).await?;
    report.phase("read at host", t.elapsed(), stats);
    let t = Instant::now();
    let x = std::sync::Arc::new(kernel::fft2_plain(&matrix).map_err(fft_err)?);
    drop(matrix);
    report.phase("fft2 at host", t.elapsed(), Vec::new());
    let t = Instant::now();
    let disks = cluster.disk_count() as usize;
    let generators = (0..disks)
        .map(|d| {
            let cols = block_range(input.cols, disks, d).map_err(fft_err)?;
            let x = x.clone();
            Ok(Box::new(move |_| {
                let batches = cols.flat_map(move |l| column_batches(&x, l));
                Box::new(batches)
                    as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator)
        })
        .collect::<Result<Vec<_>>>()?;
    adisk_host::load::load_generated(
        cluster,
        &params.output,
        layout::elements_schema(),
        generators,
        |_| {},
    )
    .await?;
    report.phases.push(Phase {
        name: "write back by column blocks".into(),
        seconds: t.elapsed().as_secs_f64(),
        disks: Vec::new(),
        host_sent_bytes: input.rows * input.cols * 24,
    });
    Ok(serde_json::json!({}))
}

/// Column `l` of `x` as element batches `(k, l, X[k][l])`.
fn column_batches(x: &[Vec<Complex64>], l: u64) -> Vec<adisk_host::Result<RecordBatch>> {
    let mut out = Vec::new();
    let mut rows = ElementRows::new(None);
    for (k, row) in x.iter().enumerate() {
        rows.push(k as u32, l as u32, row[l as usize]);
        if rows.len() == 8192 || k + 1 == x.len() {
            out.push(
                rows.take()
                    .map_err(|e| adisk_host::HostError::Invalid(e.to_string())),
            );
        }
    }
    out
}

/// The validation: the output against `fft2_plain` of the generator's matrix (numpy's
/// `fft2` convention), and the planted tones' peaks.
async fn validation(
    cluster: &Cluster,
    params: &FftParams,
    input: &Input,
    extra: serde_json::Value,
) -> Result<serde_json::Value> {
    let (rows, cols) = (input.rows, input.cols);
    let generator = Generator::new(GenParams {
        rows,
        cols,
        seed: params.seed,
    })
    .map_err(fft_err)?;
    let mut result = serde_json::json!({
        "rows": rows,
        "cols": cols,
        "elements": rows * cols,
        "matrix_bytes": rows * cols * 16,
        "seed": params.seed,
        "output": params.output,
    });
    if let serde_json::Value::Object(m) = extra {
        result.as_object_mut().expect("object").extend(m);
    }
    if rows * cols > MAX_CHECKED_ELEMENTS {
        result["valid"] = serde_json::Value::Null;
        result["oracle"] = format!("skipped above {MAX_CHECKED_ELEMENTS} elements").into();
        return Ok(result);
    }
    let (got, _) = read_matrix(cluster, &params.output, rows, cols).await?;
    result["oracle"] = format!(
        "fft2_plain of the generator's matrix (seed {})",
        params.seed
    )
    .into();
    if let serde_json::Value::Object(m) = check_output(&generator, &got)? {
        result.as_object_mut().expect("object").extend(m);
    }
    Ok(result)
}

/// The check of `got`, the transform of `generator`'s matrix: its largest error relative to
/// `fft2_plain` of the regenerated matrix (`max_relative_error`); up to
/// [`DIRECT_DFT_ELEMENTS`], also to the direct DFT by definition
/// (`direct_dft_relative_error`, null above); the planted tones' peaks (`peaks`), required
/// within 5 % from [`PEAK_CHECK_ELEMENTS`] on (`peaks_checked`). `valid` holds when every
/// required comparison does, so that any shape, `1 × 1` included, can pass.
///
/// # Errors
/// `got` not of the generator's shape.
pub fn check_output(generator: &Generator, got: &[Vec<Complex64>]) -> Result<serde_json::Value> {
    let GenParams { rows, cols, .. } = generator.params();
    let matrix = generator.matrix().map_err(fft_err)?;
    let oracle = kernel::fft2_plain(&matrix).map_err(fft_err)?;
    let error = kernel::relative_error(got, &oracle).map_err(fft_err)?;
    let direct = if rows * cols <= DIRECT_DFT_ELEMENTS {
        let exact = kernel::dft2_direct(&matrix).map_err(fft_err)?;
        Some(kernel::relative_error(got, &exact).map_err(fft_err)?)
    } else {
        None
    };
    let peaks: Vec<serde_json::Value> = generator
        .tones()
        .iter()
        .map(|t| {
            let (expected, found) = (
                generator.expected_peak(t),
                got[t.row_freq as usize][t.col_freq as usize],
            );
            serde_json::json!({
                "k": t.row_freq,
                "l": t.col_freq,
                "expected": [expected.re, expected.im],
                "found": [found.re, found.im],
                "relative_difference": (found - expected).norm() / expected.norm(),
            })
        })
        .collect();
    let peaks_checked = rows * cols >= PEAK_CHECK_ELEMENTS;
    let peaks_ok = peaks
        .iter()
        .all(|p| p["relative_difference"].as_f64().is_some_and(|d| d < 0.05));
    // NaN fails every comparison.
    let within = |e: f64| e <= MAX_RELATIVE_ERROR;
    let valid = within(error) && direct.is_none_or(within) && (peaks_ok || !peaks_checked);
    Ok(serde_json::json!({
        "max_relative_error": error,
        "direct_dft_relative_error": direct,
        "peaks": peaks,
        "peaks_checked": peaks_checked,
        "valid": valid,
    }))
}

/// Generates the `rows × cols` matrix of `seed` into `table`: disk d gets the rows
/// `block_range(rows, disks, d)`, element by element in row-major order, staged like any load.
/// Returns the matrix's bytes (16 per element).
///
/// # Errors
/// Zero or too large dimensions, a bad table name, a disk failing the load.
pub async fn load(
    cluster: &Cluster,
    table: &str,
    rows: u64,
    cols: u64,
    seed: u64,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<u64> {
    let generator = Generator::new(GenParams { rows, cols, seed })
        .map_err(|e| AppError::Invalid(format!("--rows {rows} --cols {cols}: {e}")))?;
    let disks = cluster.disk_count() as usize;
    // The shape and the seed go with the table: `run` reads the seed back for its check.
    let schema = crate::loaded::record(
        &layout::elements_schema(),
        "fft",
        &[("rows", rows), ("cols", cols), ("seed", seed)],
    );
    let generators = (0..disks)
        .map(|d| {
            let range = block_range(rows, disks, d).map_err(fft_err)?;
            let (generator, schema) = (generator.clone(), schema.clone());
            Ok(Box::new(move |_| {
                let batches = RowBatches {
                    generator,
                    next: range.start,
                    end: range.end,
                    built: ElementRows::new(None),
                }
                .map(move |b| {
                    b?.with_schema(schema.clone())
                        .map_err(|e| adisk_host::HostError::Invalid(e.to_string()))
                });
                Box::new(batches)
                    as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator)
        })
        .collect::<Result<Vec<_>>>()?;
    adisk_host::load::load_generated(cluster, table, schema, generators, progress).await?;
    Ok(rows * cols * 16)
}

/// Batches of about 8192 elements of the rows `next..end`, in row-major order.
struct RowBatches {
    generator: Generator,
    next: u64,
    end: u64,
    built: ElementRows,
}

impl Iterator for RowBatches {
    type Item = adisk_host::Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.built.len() < 8192 && self.next < self.end {
            let r = self.next;
            self.next += 1;
            let row = match self.generator.row(r) {
                Ok(row) => row,
                Err(e) => return Some(Err(adisk_host::HostError::Invalid(e.to_string()))),
            };
            for (c, v) in row.into_iter().enumerate() {
                self.built.push(r as u32, c as u32, v);
            }
        }
        if self.built.is_empty() {
            return None;
        }
        Some(
            self.built
                .take()
                .map_err(|e| adisk_host::HostError::Invalid(e.to_string())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(rows: u64, cols: u64) -> Generator {
        Generator::new(GenParams {
            rows,
            cols,
            seed: 1,
        })
        .unwrap()
    }

    fn transform(g: &Generator) -> Vec<Vec<Complex64>> {
        kernel::fft2_plain(&g.matrix().unwrap()).unwrap()
    }

    #[test]
    fn exact_outputs_of_tiny_shapes_pass_the_check() {
        for (rows, cols) in [
            (1, 1),
            (2, 2),
            (1, 3),
            (2, 1),
            (3, 1),
            (4, 1),
            (1, 5),
            (3, 7),
        ] {
            let g = generator(rows, cols);
            let check = check_output(&g, &transform(&g)).unwrap();
            assert_eq!(check["valid"], true, "{rows} x {cols}: {check}");
            assert_eq!(check["peaks_checked"], false, "{rows} x {cols}");
            assert!(check["direct_dft_relative_error"].as_f64().unwrap() <= 1e-12);
        }
        // Large enough for the peaks, and for the direct DFT too.
        let g = generator(20, 30);
        let check = check_output(&g, &transform(&g)).unwrap();
        assert_eq!(check["valid"], true, "{check}");
        assert_eq!(check["peaks_checked"], true);
        // Past the direct DFT's size: the peaks still checked.
        let g = generator(40, 40);
        let check = check_output(&g, &transform(&g)).unwrap();
        assert_eq!(check["valid"], true, "{check}");
        assert!(check["direct_dft_relative_error"].is_null());
    }

    #[test]
    fn wrong_outputs_fail_the_check_at_every_shape() {
        for (rows, cols) in [(1, 1), (2, 2), (1, 3), (3, 1), (1, 5), (20, 30), (40, 40)] {
            let g = generator(rows, cols);
            let right = transform(&g);
            let scale = right.iter().flatten().map(|v| v.norm()).fold(0.0, f64::max);
            let mut off = right.clone();
            off[0][0] += Complex64::new(scale * 1e-6, 0.0);
            let mut zero = right.clone();
            zero.iter_mut()
                .flatten()
                .for_each(|v| *v = Complex64::default());
            let input = g.matrix().unwrap();
            let mut nan = right.clone();
            nan[rows as usize - 1][cols as usize - 1] = Complex64::new(f64::NAN, 0.0);
            for (what, got) in [("off", off), ("zero", zero), ("input", input), ("nan", nan)] {
                if what == "input" && rows * cols == 1 {
                    continue; // one element is its own transform
                }
                let check = check_output(&g, &got).unwrap();
                assert_eq!(check["valid"], false, "{rows} x {cols} {what}: {check}");
            }
        }
        // Another shape than the generator's is an error, not a panic.
        let g = generator(2, 2);
        assert!(check_output(&g, &transform(&generator(2, 3))).is_err());
    }
}
