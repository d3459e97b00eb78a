//! `cluster`: adaptive-grid subspace clustering, pMAFIA as chiu §4.3 distributes it over
//! smart disks.
//!
//! ```text
//!  pass 1   every disk: scan points ─► cluster.histogram (fine bins per dimension) ─► host
//!           host: reduce the histograms, adaptive bins (α, β), dense 1-D units
//!  pass k   every disk: scan points ─► cluster.count (the level's candidate units) ─► host
//!           host: reduce counts, dense units, candidates of level k+1 … until none
//!  end      host: clusters = connected maximal dense units in the highest subspaces
//! ```
pub mod kernel;

use crate::disklet_util::{Params, invalid, scratch_exceeded};
use crate::report::Report;
use crate::{AppError, Mode, Result};
use adisk_core::builder::{self, JobBuilder, Sizes};
use adisk_core::protocol::{DiskletSpec, JobSpec, Sink};
use adisk_core::stats::DiskJobStats;
use adisk_diskos::apps::AppStage;
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer};
use adisk_host::Cluster;
use adisk_host::jobs::run_phase;
use arrow::array::{Array, ArrayRef, BinaryArray, Float32Array, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use kernel::{
    Bin, BinMap, ClusterParams, DenseUnit, FineGrid, GenParams, Generator, Histogram, Unit,
    UnitCounter,
};
use std::sync::Arc;
use std::time::Instant;

const PROGRAM: &str = "app-cluster";

/// Schema of `dims` point columns `d0 … d{dims−1}` (Float32).
pub fn points_schema(dims: usize) -> SchemaRef {
    Arc::new(Schema::new(
        (0..dims)
            .map(|d| Field::new(format!("d{d}"), DataType::Float32, false))
            .collect::<Vec<_>>(),
    ))
}

/// Schema of the disks' replies: `rows` and `counts` (u64 little-endian).
fn counts_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("rows", DataType::UInt64, false),
        Field::new("counts", DataType::Binary, false),
    ]))
}

fn counts_batch(rows: u64, counts: &[u64]) -> RecordBatch {
    let bytes: Vec<u8> = counts.iter().flat_map(|c| c.to_le_bytes()).collect();
    RecordBatch::try_new(
        counts_schema(),
        vec![
            Arc::new(UInt64Array::from(vec![rows])),
            Arc::new(BinaryArray::from_vec(vec![bytes.as_slice()])),
        ],
    )
    .expect("columns match the schema")
}

fn counts_of(batch: &RecordBatch) -> Option<Vec<(u64, Vec<u64>)>> {
    let rows = batch.column(0).as_any().downcast_ref::<UInt64Array>()?;
    let counts = batch.column(1).as_any().downcast_ref::<BinaryArray>()?;
    Some(
        (0..batch.num_rows())
            .map(|i| {
                let c = counts
                    .value(i)
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                (rows.value(i), c)
            })
            .collect(),
    )
}

/// The point columns of a batch (every column Float32).
fn columns_of(batch: &RecordBatch) -> Option<Vec<&[f32]>> {
    batch
        .columns()
        .iter()
        .map(|c| {
            c.as_any()
                .downcast_ref::<Float32Array>()
                .map(|a| a.values().as_ref())
        })
        .collect()
}

/// What the host sends the disks: the fine grid, the adaptive bins' fine ranges per
/// dimension and the candidate units of a level.
#[derive(serde::Serialize, serde::Deserialize)]
struct Level {
    lo: f32,
    hi: f32,
    fine_bins: usize,
    bins: Vec<Vec<(usize, usize)>>,
    candidates: Vec<Vec<(usize, usize)>>,
}

/// Builds `cluster.histogram` or `cluster.count`.
///
/// # Errors
/// Bad parameters, inputs that are not Float32 points, state past the scratch grant.
pub fn build(stage: &AppStage<'_>) -> adisk_diskos::Result<Box<dyn Disklet>> {
    let params = Params::new(stage)?;
    params.shape(1, 1)?;
    let dims = stage.inputs[0].fields().len();
    if dims == 0
        || stage.inputs[0]
            .fields()
            .iter()
            .any(|f| f.data_type() != &DataType::Float32)
    {
        return Err(invalid("cluster reads Float32 point columns"));
    }
    let bad = |e: kernel::ClusterError| invalid(format!("cluster: {e}"));
    match stage.disklet {
        "histogram" => {
            let grid = FineGrid::new(
                params.parse("lo")?,
                params.parse("hi")?,
                params.parse("fine_bins")?,
            )
            .map_err(bad)?;
            let hists = kernel::histograms(grid, dims);
            let bytes: usize = hists.iter().map(Histogram::bytes).sum();
            if bytes as u64 > stage.scratch_bytes {
                return Err(scratch_exceeded(
                    "cluster_histogram",
                    stage.scratch_bytes,
                    format!("{dims} histograms take {bytes} bytes"),
                ));
            }
            Ok(Box::new(Histograms { hists, rows: 0 }))
        }
        "count" => {
            let level: Level = params.parse("level")?;
            let grid = FineGrid::new(level.lo, level.hi, level.fine_bins).map_err(bad)?;
            let bins: Vec<Vec<Bin>> = level
                .bins
                .iter()
                .enumerate()
                .map(|(dim, fs)| fs.iter().map(|f| fine_bin(dim, *f)).collect())
                .collect();
            let map = BinMap::new(grid, &bins).map_err(bad)?;
            let candidates: Vec<Unit> = level
                .candidates
                .into_iter()
                .map(|cells| Unit { cells })
                .collect();
            let counter = UnitCounter::new(map, &candidates).map_err(bad)?;
            if counter.bytes() as u64 > stage.scratch_bytes {
                return Err(scratch_exceeded(
                    "cluster_count",
                    stage.scratch_bytes,
                    format!(
                        "{} candidates take {} bytes",
                        candidates.len(),
                        counter.bytes()
                    ),
                ));
            }
            Ok(Box::new(Counting { counter, rows: 0 }))
        }
        other => Err(invalid(format!("cluster has no disklet `{other}`"))),
    }
}

/// A bin known only by its fine range (what counting needs).
fn fine_bin(dim: usize, fine: (usize, usize)) -> Bin {
    Bin {
        dim,
        fine,
        lo: 0.0,
        hi: 0.0,
        count: 0,
        threshold: 0.0,
    }
}

/// Fine histograms of every dimension of the disk's points.
struct Histograms {
    hists: Vec<Histogram>,
    rows: u64,
}

impl Disklet for Histograms {
    fn name(&self) -> &'static str {
        "cluster_histogram"
    }
    fn output_schema(&self) -> SchemaRef {
        counts_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, _out: &mut Emitter) -> adisk_diskos::Result<()> {
        let cols = columns_of(input.batch).ok_or_else(|| invalid("cluster: not points"))?;
        kernel::feed_histograms(&mut self.hists, &cols).map_err(|e| invalid(e.to_string()))?;
        self.rows += input.batch.num_rows() as u64;
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> adisk_diskos::Result<()> {
        let all: Vec<u64> = self
            .hists
            .iter()
            .flat_map(|h| h.counts().iter().copied())
            .collect();
        out.emit(0, counts_batch(self.rows, &all));
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.hists.iter().map(Histogram::bytes).sum::<usize>() as u64
    }
}

/// Counts of one level's candidate units over the disk's points.
struct Counting {
    counter: UnitCounter,
    rows: u64,
}

impl Disklet for Counting {
    fn name(&self) -> &'static str {
        "cluster_count"
    }
    fn output_schema(&self) -> SchemaRef {
        counts_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, _out: &mut Emitter) -> adisk_diskos::Result<()> {
        let cols = columns_of(input.batch).ok_or_else(|| invalid("cluster: not points"))?;
        self.counter
            .feed(&cols)
            .map_err(|e| invalid(e.to_string()))?;
        self.rows += input.batch.num_rows() as u64;
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> adisk_diskos::Result<()> {
        out.emit(0, counts_batch(self.rows, self.counter.counts()));
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.counter.bytes() as u64
    }
}

/// Parameters of a clustering run.
#[derive(Clone, Debug)]
pub struct ClusterRun {
    /// Points table.
    pub table: String,
    /// Clustering parameters.
    pub params: ClusterParams,
    /// Active or conventional.
    pub mode: Mode,
    /// The generator's parameters, to check the result against (None: no check).
    pub check: Option<GenParams>,
}

/// Generates the points of `gen` into `table`.
///
/// # Errors
/// Bad parameters; a load failing.
pub async fn load(
    cluster: &Cluster,
    table: &str,
    gen_params: GenParams,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<u64> {
    let generator =
        Arc::new(Generator::new(gen_params).map_err(|e| AppError::Invalid(e.to_string()))?);
    let (points, dims) = (gen_params.points, gen_params.dims);
    let n = u64::from(cluster.disk_count());
    let generators = (0..n)
        .map(|d| {
            let (start, end) = (d * points / n, (d + 1) * points / n);
            let g = generator.clone();
            Box::new(move |_| {
                let chunks = (start..end).step_by(16_384).map(move |c| {
                    let cols = g.columns(c, (c + 16_384).min(end));
                    let arrays: Vec<ArrayRef> = cols
                        .into_iter()
                        .map(|v| Arc::new(Float32Array::from(v)) as ArrayRef)
                        .collect();
                    RecordBatch::try_new(points_schema(dims), arrays)
                        .map_err(|e| adisk_host::HostError::Invalid(e.to_string()))
                });
                Box::new(chunks) as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(cluster, table, points_schema(dims), generators, progress)
        .await?;
    Ok(points * dims as u64 * 4)
}

/// One pass over every disk's points with `stage`; the counts summed over the disks.
async fn pass(
    cluster: &Cluster,
    table: &str,
    disks: &[u32],
    stage: DiskletSpec,
    scratch: u64,
) -> Result<(u64, Vec<u64>, Vec<DiskJobStats>)> {
    let sizes = Sizes {
        scratch_kib: scratch.div_ceil(1024),
        buffer_kib: 256,
        temp_kib: 0,
    };
    let specs = disks
        .iter()
        .map(|d| {
            let spec = JobBuilder::chain(
                "cluster",
                builder::table(table, vec![]),
                vec![stage.clone()],
                Sink::Host,
            )
            .program(PROGRAM)
            .sizes(sizes)
            .build()?;
            Ok((*d, spec))
        })
        .collect::<Result<Vec<(u32, JobSpec)>>>()?;
    let (mut rows, mut sum): (u64, Vec<u64>) = (0, Vec::new());
    let mut malformed = false;
    let stats = run_phase(cluster, specs, |_, b| {
        match counts_of(&b) {
            Some(replies) => {
                for (r, c) in replies {
                    rows += r;
                    if sum.is_empty() {
                        sum = vec![0; c.len()];
                    }
                    if kernel::reduce_counts(&mut sum, &c).is_err() {
                        malformed = true;
                    }
                }
            }
            None => malformed = true,
        }
        Ok(())
    })
    .await?;
    if malformed {
        return Err(AppError::Invalid(
            "cluster: a disk's counts did not match the others'".into(),
        ));
    }
    Ok((rows, sum, stats))
}

fn app(name: &str, params: serde_json::Value) -> DiskletSpec {
    DiskletSpec::App {
        app: "cluster".into(),
        name: name.into(),
        params,
        inputs: 1,
        ports: 1,
    }
}

/// Runs the clustering; with `check`, compares it with a single-node run over the regenerated
/// points and with the planted clusters.
///
/// # Errors
/// Missing points, bad parameters, too many candidates, a disk failing.
pub async fn run(cluster: &Cluster, run: &ClusterRun) -> Result<Report> {
    let catalog = cluster.catalog().await?;
    let entry = catalog
        .tables
        .get(&run.table)
        .ok_or_else(|| AppError::InputMissing {
            table: run.table.clone(),
            hint: "adisk load cluster --points N".into(),
        })?;
    let dims = entry.schema.fields().len();
    if entry.schema.fields() != points_schema(dims).fields() {
        return Err(AppError::Invalid(format!(
            "`{}` is not a table of points (d0, d1, … Float32)",
            run.table
        )));
    }
    let disks = entry.disks();
    let memory = crate::sort::smallest_memory(cluster, &disks).await?;
    let p = run.params;
    let err = |e: kernel::ClusterError| AppError::Invalid(format!("cluster: {e}"));
    let grid = p.grid().map_err(err)?;
    let mut report = Report {
        app: "cluster".into(),
        mode: run.mode.to_string(),
        ..Default::default()
    };
    let started = Instant::now();
    let result = match run.mode {
        Mode::Active => {
            let histogram = app(
                "histogram",
                serde_json::json!({ "lo": p.lo, "hi": p.hi, "fine_bins": p.fine_bins }),
            );
            let t = Instant::now();
            let (rows, counts, stats) =
                pass(cluster, &run.table, &disks, histogram, memory / 4).await?;
            report.phase("pass 1: histograms", t.elapsed(), stats);
            let hists = counts
                .chunks(p.fine_bins)
                .map(|c| Histogram::from_counts(grid, c.to_vec(), rows))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(err)?;
            let bins = kernel::adaptive_bins(&hists, p.alpha, p.beta).map_err(err)?;
            search(cluster, run, &disks, bins, memory, &mut report).await?
        }
        Mode::Conventional => {
            let t = Instant::now();
            let (cols, stats) = read_points(cluster, &run.table, &disks, dims).await?;
            report.phase("read points at host", t.elapsed(), stats);
            let t = Instant::now();
            let r = kernel::run_single(&cols, &p).map_err(err)?;
            report.phase("cluster at host", t.elapsed(), Vec::new());
            r
        }
    };
    report.seconds = started.elapsed().as_secs_f64();
    report.result = summary(&result, run)?;
    Ok(report)
}

/// The level-wise search with the counting at the disks.
async fn search(
    cluster: &Cluster,
    run: &ClusterRun,
    disks: &[u32],
    bins: Vec<Vec<Bin>>,
    memory: u64,
    report: &mut Report,
) -> Result<kernel::ClusterResult> {
    let p = run.params;
    let err = |e: kernel::ClusterError| AppError::Invalid(format!("cluster: {e}"));
    let mut levels: Vec<Vec<DenseUnit>> = Vec::new();
    let mut current = kernel::dense_bins(&bins);
    while !current.is_empty() {
        let cands = kernel::candidates(&current);
        levels.push(current);
        if cands.len() > p.max_candidates {
            return Err(AppError::Invalid(format!(
                "cluster: level {} has {} candidate units, more than --max-candidates {}",
                levels.len() + 1,
                cands.len(),
                p.max_candidates
            )));
        }
        if cands.is_empty() {
            break;
        }
        let level = Level {
            lo: p.lo,
            hi: p.hi,
            fine_bins: p.fine_bins,
            bins: bins
                .iter()
                .map(|bs| bs.iter().map(|b| b.fine).collect())
                .collect(),
            candidates: cands.iter().map(|u| u.cells.clone()).collect(),
        };
        let t = Instant::now();
        let (_, counts, stats) = pass(
            cluster,
            &run.table,
            disks,
            app("count", serde_json::json!({ "level": level })),
            memory / 4,
        )
        .await?;
        report.phase(
            &format!(
                "pass {}: count {} candidates",
                levels.len() + 1,
                cands.len()
            ),
            t.elapsed(),
            stats,
        );
        current = kernel::dense(
            &cands,
            &counts,
            &kernel::thresholds(&cands, &bins).map_err(err)?,
        )
        .map_err(err)?;
    }
    let clusters = kernel::clusters(&levels, &bins).map_err(err)?;
    Ok(kernel::ClusterResult {
        bins,
        levels,
        clusters,
    })
}

async fn read_points(
    cluster: &Cluster,
    table: &str,
    disks: &[u32],
    dims: usize,
) -> Result<(Vec<Vec<f32>>, Vec<DiskJobStats>)> {
    let specs = disks
        .iter()
        .map(|d| {
            let source = builder::table(table, vec![]);
            let spec = JobBuilder::chain("cluster-read", source, vec![], Sink::Host)
                .program(PROGRAM)
                .build()?;
            Ok((*d, spec))
        })
        .collect::<Result<Vec<(u32, JobSpec)>>>()?;
    let mut cols: Vec<Vec<f32>> = vec![Vec::new(); dims];
    let stats = run_phase(cluster, specs, |_, b| {
        if let Some(c) = columns_of(&b) {
            for (all, part) in cols.iter_mut().zip(c) {
                all.extend_from_slice(part);
            }
        }
        Ok(())
    })
    .await?;
    Ok((cols, stats))
}

/// The clusters found, and with a check: equal to a single-node run over the regenerated
/// points, and every planted cluster recovered (same subspace, ≥ 80 % overlap both ways).
fn summary(result: &kernel::ClusterResult, run: &ClusterRun) -> Result<serde_json::Value> {
    let found: Vec<serde_json::Value> = result
        .clusters
        .iter()
        .map(|c| serde_json::json!({ "dims": c.dims, "ranges": c.ranges, "points": c.points }))
        .collect();
    let mut v = serde_json::json!({
        "clusters": found,
        "dense_units_per_level": result.levels.iter().map(Vec::len).collect::<Vec<_>>(),
    });
    if let Some(g) = run.check {
        let generator = Generator::new(g).map_err(|e| AppError::Invalid(e.to_string()))?;
        let single = kernel::run_single(&generator.columns(0, g.points), &run.params)
            .map_err(|e| AppError::Invalid(e.to_string()))?;
        let planted = generator.planted();
        let recovered = planted
            .iter()
            .filter(|p| result.clusters.iter().any(|f| matches(p, f)))
            .count();
        v["equals_single_node"] = serde_json::Value::Bool(
            single.clusters == result.clusters && single.levels == result.levels,
        );
        v["planted"] = planted.len().into();
        v["recovered"] = recovered.into();
        v["valid"] = serde_json::Value::Bool(
            single.clusters == result.clusters && recovered == planted.len(),
        );
    }
    Ok(v)
}

/// Whether `found` recovers `planted`: the same subspace and, in every dimension, an overlap
/// of at least 80 % of both ranges.
fn matches(planted: &kernel::Cluster, found: &kernel::FoundCluster) -> bool {
    planted.dims == found.dims
        && planted.ranges.iter().zip(&found.ranges).all(|(p, f)| {
            let overlap = (p.1.min(f.1) - p.0.max(f.0)).max(0.0);
            overlap >= 0.8 * (p.1 - p.0) && overlap >= 0.8 * (f.1 - f.0)
        })
}
