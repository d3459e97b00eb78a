//! `datacube`: the data cube by PipeHash on the disks (acharya §4, uysal §5), and its
//! conventional baseline.
//!
//! ```text
//!  sample     every disk: scan d0..dk ─► datacube.sample (every k-th row) ─► host:
//!             estimated group-by sizes, the lattice's minimum spanning tree, the pipelines
//!             (PipeHash), per-dimension key ranges (one range per disk)
//!  pipeline i every disk, one job:
//!             root (raw rows, or its own partition of `OUT_g<root>`) ─► datacube.pipeline
//!               (hash tables of the pipeline's group-bys in scratch, shares ∝ estimates;
//!                a full table is folded into its children and shipped)
//!               ─► exchange by range of `dest` ─► responsible disk's pipe (N senders)
//!             pipe ─► datacube.merge (one table per group-by, capped at the scratch grant)
//!               ─┬─ port g ─► named result `OUT_g<mask>`, partition d   (one per group-by)
//!                └─ last  ─► host: groups, Σ count, Σ sum per group-by (the check)
//! ```
//!
//! Conventional: the host reads every row and computes the whole cube with the same kernel
//! (unbounded tables, one pipeline), then writes every group-by back to the disks, each
//! range-partitioned as the active run places it.
pub mod disklets;
pub mod generator;
pub mod kernel;

use crate::report::{Phase, Report};
use crate::{AppError, Mode, Result};
use adisk_core::builder::{JobBuilder, Sizes, exchange, new_id, store_result, table};
use adisk_core::protocol::{DiskletSpec, JobSpec, Route, Sink, Source};
use adisk_core::stats::DiskJobStats;
use adisk_host::Cluster;
use adisk_host::jobs::{encode_expr, run_phase};
use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, UInt32Array, UInt64Array};
use datafusion::common::ScalarValue;
use datafusion::prelude::{col, lit};
use disklets::{dim_name, fact_schema, partial_schema, result_schema};
use generator::{GenParams, Generator};
use kernel::{
    Agg, CubeError, ENTRY_BYTES, KeyRanges, MAX_DIMS, Mask, Pipeline, PipelineExec, Plan, Row,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

const PROGRAM: &str = "app-datacube";

/// Parameters of a data cube run.
#[derive(Clone, Debug)]
pub struct CubeParams {
    /// Fact table (`d0..dk` UInt32, `measure` Int64).
    pub input: String,
    /// Prefix of the result tables: group-by `mask` goes to `OUTPUT_g<mask>`.
    pub output: String,
    /// Active or conventional.
    pub mode: Mode,
    /// Scratch of each disklet of a pipeline job (active; `None`: from the disks' memory).
    pub memory_bytes: Option<u64>,
    /// Rows sampled in all for the size estimates and the key ranges (at least 1).
    pub samples: u64,
}

/// The result table of group-by `mask` (bit `j` set: dimension `d{j}` is grouped).
pub fn result_table(output: &str, mask: Mask) -> String {
    format!("{output}_g{mask}")
}

fn cube_err(e: CubeError) -> AppError {
    AppError::Invalid(format!("datacube: {e}"))
}

fn arrow_err(e: arrow::error::ArrowError) -> AppError {
    AppError::Invalid(format!("datacube: {e}"))
}

/// What the host knows of the fact table.
struct Input {
    d: usize,
    /// Largest value + 1 per dimension, from the partitions' bounds (`None`: not recorded).
    cards: Option<Vec<u32>>,
    rows: u64,
    /// Which disk reads which partitions.
    assignment: Vec<(u32, Option<Vec<u32>>)>,
}

/// Per group-by: groups, Σ count, Σ sum (from the merges' summaries or the host).
type Totals = BTreeMap<Mask, (u64, u64, i64)>;

/// Runs the data cube; the report's `result` holds its check (every group-by's counts add up
/// to the input's rows, every group-by's sums to the same total).
///
/// # Errors
/// Missing or malformed input, bad parameters, any disk failing (the result tables are then
/// dropped).
pub async fn run(cluster: &Cluster, params: &CubeParams) -> Result<Report> {
    adisk_storage::store::validate_table_name(&result_table(&params.output, 255))
        .map_err(adisk_host::HostError::from)?;
    if params.output == params.input || result_table(&params.output, 0).len() < 3 {
        return Err(AppError::Invalid(
            "the output prefix must differ from the input".into(),
        ));
    }
    if params.samples == 0 {
        return Err(AppError::Invalid(
            "--samples must be at least 1: the size estimates and key ranges come from the sample"
                .into(),
        ));
    }
    if params.memory_bytes == Some(0) {
        return Err(AppError::Invalid(
            "--memory-kib must be positive: it is the scratch of each pipeline disklet".into(),
        ));
    }
    let input = describe_input(cluster, &params.input).await?;
    drop_outputs(cluster, &params.output).await?;
    let mut report = Report {
        app: "datacube".into(),
        mode: params.mode.to_string(),
        ..Default::default()
    };
    let started = Instant::now();
    let outcome = match params.mode {
        Mode::Active => active(cluster, params, &input, &mut report).await,
        Mode::Conventional => conventional(cluster, params, &input, &mut report).await,
    };
    let (summary, totals) = match outcome {
        Ok(v) => v,
        Err(e) => {
            let _ = drop_outputs(cluster, &params.output).await;
            return Err(e);
        }
    };
    report.seconds = started.elapsed().as_secs_f64();
    report.result = validation(params, &input, summary, &totals);
    Ok(report)
}

async fn describe_input(cluster: &Cluster, table: &str) -> Result<Input> {
    let catalog = cluster.catalog().await?;
    let entry = catalog
        .tables
        .get(table)
        .ok_or_else(|| AppError::InputMissing {
            table: table.into(),
            hint: "adisk load datacube --rows N --cards 100,50,20,10".into(),
        })?;
    let schema = &entry.schema;
    let d = (0..=MAX_DIMS + 1)
        .take_while(|j| schema.field_with_name(&dim_name(*j)).is_ok())
        .count();
    if d == 0 || d > MAX_DIMS {
        return Err(cube_err(CubeError::BadDims(d)));
    }
    let want = fact_schema(d);
    for f in want.fields() {
        let ok = schema
            .field_with_name(f.name())
            .is_ok_and(|g| g.data_type() == f.data_type());
        if !ok {
            return Err(AppError::Invalid(format!(
                "datacube: the fact table needs columns d0..d{} UInt32 and `measure` Int64 (`{}` is missing or of another type)",
                d - 1,
                f.name()
            )));
        }
    }
    let rows = entry.rows();
    if rows == 0 {
        return Err(AppError::InputMissing {
            table: table.into(),
            hint: "the table has no rows".into(),
        });
    }
    let mut cards = vec![0u32; d];
    let mut known = true;
    for (_, p) in entry.placements.iter().filter(|(_, p)| p.rows > 0) {
        for (j, card) in cards.iter_mut().enumerate() {
            let index = schema.index_of(&dim_name(j)).ok();
            match index.and_then(|i| p.bounds.get(i).copied().flatten()) {
                Some([_, max]) => {
                    *card = (*card).max(u32::try_from(max.saturating_add(1)).unwrap_or(u32::MAX));
                }
                None => known = false,
            }
        }
    }
    let cards = known.then_some(cards);
    let assignment = entry.assign(&BTreeSet::new())?;
    Ok(Input {
        d,
        cards,
        rows,
        assignment,
    })
}

/// Drops every `OUTPUT_g<mask>` table.
async fn drop_outputs(cluster: &Cluster, output: &str) -> Result<()> {
    let prefix = format!("{output}_g");
    let catalog = cluster.catalog().await?;
    for name in catalog.tables.keys() {
        let ours = name
            .strip_prefix(&prefix)
            .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
        if ours {
            cluster.drop_table(name).await?;
        }
    }
    Ok(())
}

fn app(disklet: &str, params: serde_json::Value, ports: u32) -> DiskletSpec {
    DiskletSpec::App {
        app: "datacube".into(),
        name: disklet.into(),
        params,
        inputs: 1,
        ports,
    }
}

fn dims_and_measure(d: usize) -> Vec<String> {
    (0..d).map(dim_name).chain(["measure".into()]).collect()
}

/// Sample phase: every disk sends every k-th row of its partitions.
async fn sample(
    cluster: &Cluster,
    params: &CubeParams,
    input: &Input,
    report: &mut Report,
) -> Result<Vec<Row>> {
    let t = Instant::now();
    let every = (input.rows / params.samples.max(1)).max(1);
    let specs = input
        .assignment
        .iter()
        .map(|(d, parts)| {
            let source = table(params.input.clone(), (0..input.d).map(dim_name).collect());
            let stages = vec![app("sample", serde_json::json!({ "every": every }), 1)];
            let spec = JobBuilder::chain("cube-sample", source, stages, Sink::Host)
                .program(PROGRAM)
                .reading(parts.clone())
                .build()?;
            Ok((*d, spec))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut rows = Vec::new();
    let stats = run_phase(cluster, specs, |_, b| {
        rows.extend(fact_rows(&b, input.d, false).map_err(host_err)?);
        Ok(())
    })
    .await?;
    report.phase("sample", t.elapsed(), stats);
    Ok(rows)
}

fn host_err(e: AppError) -> adisk_host::HostError {
    adisk_host::HostError::Invalid(e.to_string())
}

/// Fact rows of a batch (`measure` 0 when `with_measure` is false).
fn fact_rows(batch: &RecordBatch, d: usize, with_measure: bool) -> Result<Vec<Row>> {
    let col = |name: &str| batch.column_by_name(name).map(|c| c.as_any());
    let dims: Vec<&UInt32Array> = (0..d)
        .map(|j| {
            col(&dim_name(j))
                .and_then(|c| c.downcast_ref::<UInt32Array>())
                .ok_or_else(|| AppError::Invalid(format!("datacube: no UInt32 column d{j}")))
        })
        .collect::<Result<_>>()?;
    let measure = match with_measure {
        true => Some(
            col("measure")
                .and_then(|c| c.downcast_ref::<Int64Array>())
                .ok_or_else(|| AppError::Invalid("datacube: no Int64 column measure".into()))?,
        ),
        false => None,
    };
    Ok((0..batch.num_rows())
        .map(|i| {
            let mut key = [0u32; MAX_DIMS];
            for (k, c) in key.iter_mut().zip(&dims) {
                *k = c.value(i);
            }
            Row {
                dims: key,
                measure: measure.map_or(0, |m| m.value(i)),
            }
        })
        .collect())
}

/// The disks' memory and stream buffers as the host sizes pipeline jobs by.
struct Budget {
    /// Smallest disk memory.
    memory: u64,
    buffers_per_stream: u64,
    /// Stream buffer of the cube's jobs, bytes.
    buffer: u64,
    disks: usize,
}

impl Budget {
    async fn of(cluster: &Cluster) -> Result<Self> {
        let (mut memory, mut bps) = (u64::MAX, 2u64);
        for (d, s) in cluster.status().await.into_iter().enumerate() {
            let s = s.map_err(|e| AppError::Invalid(format!("disk {d}: {e}")))?;
            memory = memory.min(s.memory_bytes);
            bps = bps.max(u64::from(s.buffers_per_stream));
        }
        let buffer = (memory / 512).clamp(16 << 10, 256 << 10) / 1024 * 1024;
        Ok(Budget {
            memory,
            buffers_per_stream: bps,
            buffer,
            disks: cluster.disk_count() as usize,
        })
    }

    /// A pipeline job's grant without its scratch (DiskOS's formula): stream slots, output
    /// allowances, the pipe's inbox; `k` result ports, sending or not.
    fn fixed(&self, k: usize, sender: bool) -> u64 {
        let b = self.buffer + 1024;
        let slots = self.buffers_per_stream + 2;
        let routed = if self.disks > 1 { self.disks as u64 } else { 0 };
        let mut streams = 1 + (k as u64 + 1);
        let mut outputs = 2 * b * (k as u64 + 1);
        if sender {
            streams += 2 + routed;
            outputs += 2 * b;
        }
        // The inbox queues its messages plus one of up to 2 buffers per sender; each stored
        // group-by holds its row group in progress (DiskOS's STORE_BUFFERS).
        let inbox = (self.buffers_per_stream + 2 * self.disks as u64) * b;
        let stored = adisk_core::builder::grant::STORE_BUFFERS * b * k as u64;
        streams * slots * b + outputs + inbox + stored
    }

    /// Most group-bys a pipeline job may write while its fixed part stays within half the memory.
    fn max_group_bys(&self) -> usize {
        let limit = adisk_core::protocol::MAX_JOB_GRAPH_NODES - 6;
        (1..=limit)
            .rev()
            .find(|k| self.fixed(*k, true) <= self.memory / 2)
            .unwrap_or(1)
    }
}

/// The PipeHash schedule for the disks: pipelines whose group-bys fit a quarter of the merges
/// memory over all disks, at most `max_group_bys` each; every source table's share of a
/// quarter of `scratch` in proportion to its estimate (the rest holds the input buffer and
/// the partials a cascade of drains (a table folded into its children) releases at once).
fn plan_for_disks(sizes: &[u64], d: usize, scratch: u64, budget: &Budget) -> Result<Plan> {
    let together = (scratch / 4).saturating_mul(budget.disks as u64);
    let plan = kernel::plan(sizes, d, together, ENTRY_BYTES).map_err(cube_err)?;
    let mut plan = kernel::limit_group_bys(plan, budget.max_group_bys());
    for p in &mut plan.pipelines {
        // Each share rounds up to at least one entry: keep the sum within half the scratch.
        let rounding = p.group_bys.len() as u64 * ENTRY_BYTES;
        p.reshare(
            (scratch / 4).saturating_sub(rounding).max(ENTRY_BYTES),
            ENTRY_BYTES,
        );
    }
    Ok(plan)
}

/// Key ranges balanced by groups: quantiles of each dimension over the distinct sample rows.
fn key_ranges(sample: &[Row], cards: &[u32], disks: usize) -> Result<KeyRanges> {
    let mut distinct: Vec<Row> = sample.iter().map(|r| Row { measure: 0, ..*r }).collect();
    distinct.sort_unstable_by_key(|r| r.dims);
    distinct.dedup();
    KeyRanges::from_sample(&distinct, cards, disks).map_err(cube_err)
}

async fn active(
    cluster: &Cluster,
    params: &CubeParams,
    input: &Input,
    report: &mut Report,
) -> Result<(serde_json::Value, Totals)> {
    let budget = Budget::of(cluster).await?;
    let scratch = match params.memory_bytes {
        Some(m) => m,
        None => {
            let free = budget
                .memory
                .saturating_sub(budget.fixed(budget.max_group_bys(), true));
            (free / 2 * 3 / 4).min(256 << 20) / 1024 * 1024
        }
    };
    let least = 4 * budget.buffer;
    if scratch < least {
        return Err(AppError::Invalid(format!(
            "datacube: --memory-kib: a scratch of {scratch} bytes is too small: a pipeline disklet needs at least 4 stream buffers ({least} bytes)"
        )));
    }
    let sample = sample(cluster, params, input, report).await?;
    let cards = cardinalities(input, &sample)?;
    let sizes = kernel::estimate_sizes(&sample, input.rows, &cards).map_err(cube_err)?;
    let plan = plan_for_disks(&sizes, input.d, scratch, &budget)?;
    let largest = plan
        .pipelines
        .iter()
        .map(|p| budget.fixed(p.group_bys.len(), true) + 2 * scratch)
        .max()
        .unwrap_or(0);
    if largest > budget.memory {
        return Err(AppError::Invalid(format!(
            "datacube: a pipeline job needs {largest} bytes (2 × {scratch} scratch + stream buffers) in a disk's memory of {} bytes: ask for less (--memory-kib)",
            budget.memory
        )));
    }
    let ranges = key_ranges(&sample, &cards, budget.disks)?;
    merges_fit(&plan, &sample, &ranges, scratch)?;
    let mut totals = Totals::new();
    let mut flushes = 0u64;
    for (i, pipe) in plan.pipelines.iter().enumerate() {
        let t = Instant::now();
        let specs = pipeline_jobs(cluster, params, input, pipe, &ranges, &budget, scratch)?;
        let stats = run_phase(cluster, specs, |_, b| {
            add_summary(&mut totals, &b).map_err(host_err)
        })
        .await?;
        flushes += pipeline_flushes(&stats);
        let name = format!(
            "pipeline {i}: {} → {:?}",
            pipe.root.map_or("raw".into(), |r| format!("g{r}")),
            pipe.group_bys.iter().map(|g| g.mask).collect::<Vec<_>>()
        );
        report.phase(&name, t.elapsed(), stats);
    }
    let summary = serde_json::json!({
        "cardinalities": cards,
        "scratch_bytes": scratch,
        "buffer_bytes": budget.buffer,
        "sample_rows": sample.len(),
        "pipelines": plan_json(&plan),
        "estimates": sizes,
        "table_spills": flushes,
        "key_bounds": ranges.bounds(),
    });
    Ok((summary, totals))
}

/// Refuses, before any job runs (and so before any result table is begun at a disk), a plan
/// whose merges are estimated not to fit their scratch: the merge does not spill, so it would
/// fail at the disk. A pipeline's groups at a disk are estimated from the sample: each
/// group-by's estimate spread over the disks as its distinct sample keys fall in the key
/// ranges.
///
/// # Errors
/// The busiest disk's estimated groups of some pipeline, plus a quarter, exceed `scratch`
/// (naming `--memory-kib`).
fn merges_fit(plan: &Plan, sample: &[Row], ranges: &KeyRanges, scratch: u64) -> Result<()> {
    let full = kernel::full_mask(MAX_DIMS);
    for (i, pipe) in plan.pipelines.iter().enumerate() {
        let mut groups = vec![0f64; ranges.disks()];
        for g in &pipe.group_bys {
            let keys: BTreeSet<kernel::Key> = sample
                .iter()
                .map(|r| kernel::project(&r.dims, full, g.mask))
                .collect();
            let share = g.estimate as f64 / keys.len().max(1) as f64;
            for key in &keys {
                groups[ranges.responsible_disk(g.mask, key)] += share;
            }
        }
        let busiest = groups.iter().copied().fold(0.0, f64::max);
        let bytes = (busiest * ENTRY_BYTES as f64) as u64;
        // A quarter's margin for the estimate's error (a merge past its grant fails at the
        // disk, after the jobs began their result tables).
        if bytes.saturating_add(bytes / 4) > scratch {
            return Err(AppError::Invalid(format!(
                "datacube: --memory-kib: pipeline {i}'s group-bys are estimated at {} groups at one disk ({bytes} bytes, plus a quarter for the estimate's error), more than the merge's scratch of {scratch} bytes; the merge does not spill: raise --memory-kib or add disks",
                busiest.round()
            )));
        }
    }
    Ok(())
}

fn cardinalities(input: &Input, sample: &[Row]) -> Result<Vec<u32>> {
    let cards = input.cards.clone().unwrap_or_else(|| {
        (0..input.d)
            .map(|j| sample.iter().map(|r| r.dims[j] + 1).max().unwrap_or(1))
            .collect()
    });
    kernel::validate_cardinalities(&cards).map_err(cube_err)?;
    Ok(cards)
}

fn plan_json(plan: &Plan) -> serde_json::Value {
    plan.pipelines
        .iter()
        .map(|p| {
            serde_json::json!({
                "root": p.root,
                "group_bys": p.group_bys.iter().map(|g| g.mask).collect::<Vec<_>>(),
                "table_bytes": p.group_bys.iter().map(|g| g.table_bytes).collect::<Vec<_>>(),
            })
        })
        .collect()
}

fn pipeline_flushes(stats: &[DiskJobStats]) -> u64 {
    stats
        .iter()
        .flat_map(|s| &s.stages)
        .filter(|s| s.disklet == "datacube_pipeline")
        .map(|s| s.flushes)
        .sum()
}

fn add_summary(totals: &mut Totals, batch: &RecordBatch) -> Result<()> {
    let get = |i: usize| batch.column(i).as_any();
    let (Some(mask), Some(groups), Some(count), Some(sum)) = (
        get(0).downcast_ref::<UInt32Array>(),
        get(1).downcast_ref::<UInt64Array>(),
        get(2).downcast_ref::<UInt64Array>(),
        get(3).downcast_ref::<Int64Array>(),
    ) else {
        return Err(AppError::Invalid(
            "datacube: malformed merge summary".into(),
        ));
    };
    for i in 0..batch.num_rows() {
        let t = totals.entry(mask.value(i)).or_default();
        t.0 += groups.value(i);
        t.1 += count.value(i);
        t.2 = t.2.wrapping_add(sum.value(i));
    }
    Ok(())
}

/// One job per disk for pipeline `pipe`: the merge of its key ranges (every disk) and, at
/// each disk holding root data, the pipeline disklet sending partials to the merges.
fn pipeline_jobs(
    cluster: &Cluster,
    params: &CubeParams,
    input: &Input,
    pipe: &Pipeline,
    ranges: &KeyRanges,
    budget: &Budget,
    scratch: u64,
) -> Result<Vec<(u32, JobSpec)>> {
    let n = budget.disks as u32;
    let sources: BTreeMap<u32, Source> = match pipe.root {
        None => input
            .assignment
            .iter()
            .map(|(d, parts)| {
                let source = Source::Table {
                    table: params.input.clone(),
                    columns: dims_and_measure(input.d),
                    prune: None,
                    partitions: parts.clone(),
                };
                (*d, source)
            })
            .collect(),
        Some(root) => (0..n)
            .map(|d| {
                let source = table(result_table(&params.output, root), vec![]);
                (d, source)
            })
            .collect(),
    };
    let targets: Vec<String> = (0..n).map(|d| cluster.address(d).to_string()).collect();
    let route = Route::Range {
        key: encode_expr(&col("dest"))?,
        bounds: (0..n.saturating_sub(1))
            .map(|b| encode_expr(&lit(ScalarValue::UInt32(Some(b)))))
            .collect::<adisk_host::Result<_>>()?,
    };
    let wiring = PipelineWiring {
        exchange_id: new_id("cube-x"),
        targets,
        route,
        sources,
        masks: pipe.group_bys.iter().map(|g| g.mask).collect(),
        pipeline_params: serde_json::json!({
            "d": input.d,
            "pipeline": pipe,
            "bounds": ranges.bounds(),
            "disks": n,
        }),
        output: &params.output,
        dims: input.d,
        sizes: Sizes {
            scratch_kib: scratch.div_ceil(1024),
            buffer_kib: budget.buffer / 1024,
            temp_kib: 0,
        },
    };
    (0..n).map(|d| Ok((d, pipeline_job(&wiring, d)?))).collect()
}

/// What the pipeline jobs of every disk share: the exchange of partials to the merges.
struct PipelineWiring<'a> {
    exchange_id: String,
    /// Every disk's address, by disk.
    targets: Vec<String>,
    /// Partials by key range to the disk merging it.
    route: Route,
    /// The root data each sending disk reads.
    sources: BTreeMap<u32, Source>,
    /// The group-bys, in the merge's port order.
    masks: Vec<Mask>,
    pipeline_params: serde_json::Value,
    /// The output table's name.
    output: &'a str,
    /// Dimensions of the fact table.
    dims: usize,
    sizes: Sizes,
}

/// Disk `d`'s pipeline job: the merge of its key range, each group-by stored and a summary
/// to the host; if `d` holds root data, the pipeline disklet sending its partials.
fn pipeline_job(w: &PipelineWiring<'_>, d: u32) -> Result<JobSpec> {
    let k = w.masks.len() as u32;
    let mut job = JobBuilder::new("cube-pipeline").program(PROGRAM);
    let partials = job.input(Source::Pipe {
        exchange_id: w.exchange_id.clone(),
        senders: w.sources.len() as u32,
        schema: partial_schema(w.dims).as_ref().clone(),
    });
    let merge_params = serde_json::json!({"d": w.dims, "masks": w.masks});
    let merged = job.stage(app("merge", merge_params, k + 1), vec![partials]);
    for (p, m) in w.masks.iter().enumerate() {
        let sink = store_result(result_table(w.output, *m), d);
        job.output(merged.port(p as u32), sink);
    }
    job.output(merged.port(k), Sink::Host);
    let sender = w.sources.keys().position(|s| *s == d);
    if let (Some(sender), Some(source)) = (sender, w.sources.get(&d)) {
        let rows = job.input(source.clone());
        let sent = job.stage(app("pipeline", w.pipeline_params.clone(), 1), vec![rows]);
        let sink = exchange(
            w.exchange_id.clone(),
            w.targets.clone(),
            sender as u32,
            w.route.clone(),
        );
        job.output(sent, sink);
    }
    Ok(job.sizes(w.sizes).build()?)
}

/// Conventional: the host reads every row, computes the cube with the same kernel (one
/// pipeline, unbounded tables) and writes each group-by back to the disks.
async fn conventional(
    cluster: &Cluster,
    params: &CubeParams,
    input: &Input,
    report: &mut Report,
) -> Result<(serde_json::Value, Totals)> {
    let n = cluster.disk_count() as usize;
    let t = Instant::now();
    let cards = match &input.cards {
        Some(c) => c.clone(),
        None => {
            return Err(AppError::Invalid(
                "datacube: the fact table's partitions record no value bounds".into(),
            ));
        }
    };
    let sizes = kernel::estimate_sizes(&[], input.rows, &cards).map_err(cube_err)?;
    let plan = kernel::plan(&sizes, input.d, u64::MAX / 4, ENTRY_BYTES).map_err(cube_err)?;
    let ranges = KeyRanges::uniform(&cards, n).map_err(cube_err)?;
    let pipe = &plan.pipelines[0];
    let mut exec = PipelineExec::new(pipe, input.d, ENTRY_BYTES, &ranges).map_err(cube_err)?;
    let specs = input
        .assignment
        .iter()
        .map(|(d, parts)| {
            let source = table(params.input.clone(), dims_and_measure(input.d));
            let spec = JobBuilder::chain("cube-read", source, vec![], Sink::Host)
                .program(PROGRAM)
                .reading(parts.clone())
                .build()?;
            Ok((*d, spec))
        })
        .collect::<Result<Vec<_>>>()?;
    let stats = run_phase(cluster, specs, |_, b| {
        let rows = fact_rows(&b, input.d, true).map_err(host_err)?;
        exec.feed_rows(&rows).map_err(|e| host_err(cube_err(e)))
    })
    .await?;
    report.phase("read + cube at host", t.elapsed(), stats);
    exec.finish();
    let t = Instant::now();
    let mut per_mask: BTreeMap<Mask, Vec<Vec<Agg>>> = pipe
        .group_bys
        .iter()
        .map(|g| (g.mask, vec![Vec::new(); n]))
        .collect();
    for (disk, list) in exec.take_outgoing().into_iter().enumerate() {
        for (mask, a) in list {
            if let Some(v) = per_mask.get_mut(&mask) {
                v[disk].push(a);
            }
        }
    }
    let mut totals = Totals::new();
    let mut sent = 0u64;
    for (mask, disks) in per_mask {
        let t = totals.entry(mask).or_default();
        for a in disks.iter().flatten() {
            t.0 += 1;
            t.1 += a.count;
            t.2 = t.2.wrapping_add(a.sum);
        }
        sent += write_back(cluster, &params.output, mask, disks).await?;
    }
    report.phases.push(Phase {
        name: "write group-bys back".into(),
        seconds: t.elapsed().as_secs_f64(),
        disks: Vec::new(),
        host_sent_bytes: sent,
    });
    let summary = serde_json::json!({
        "cardinalities": cards,
        "pipelines": plan_json(&plan),
    });
    Ok((summary, totals))
}

/// Writes one group-by's rows to `OUTPUT_g<mask>`, disk d's share as its partition d.
async fn write_back(
    cluster: &Cluster,
    output: &str,
    mask: Mask,
    disks: Vec<Vec<Agg>>,
) -> Result<u64> {
    let schema = result_schema(mask);
    let mut sent = 0;
    let mut generators: Vec<adisk_host::load::DiskGenerator> = Vec::new();
    for rows in disks {
        let batches: Vec<RecordBatch> = rows
            .chunks(8192)
            .map(|c| aggs_batch(mask, c))
            .collect::<Result<_>>()?;
        // A disk without rows still gets its (empty) partition: the table spans every disk.
        let batches = match batches.is_empty() {
            true => vec![RecordBatch::new_empty(schema.clone())],
            false => batches,
        };
        sent += batches
            .iter()
            .map(adisk_core::stats::batch_bytes)
            .sum::<u64>();
        generators.push(Box::new(move |_| {
            Box::new(batches.into_iter().map(Ok))
                as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
        }));
    }
    adisk_host::load::load_generated(
        cluster,
        &result_table(output, mask),
        schema,
        generators,
        |_| {},
    )
    .await?;
    Ok(sent)
}

fn aggs_batch(mask: Mask, rows: &[Agg]) -> Result<RecordBatch> {
    let width = mask.count_ones() as usize;
    let mut columns: Vec<ArrayRef> = (0..width)
        .map(|p| Arc::new(UInt32Array::from_iter_values(rows.iter().map(|a| a.key[p]))) as ArrayRef)
        .collect();
    columns.push(Arc::new(Int64Array::from_iter_values(
        rows.iter().map(|a| a.sum),
    )));
    columns.push(Arc::new(Int64Array::from_iter_values(
        rows.iter().map(|a| a.count as i64),
    )));
    RecordBatch::try_new(result_schema(mask), columns).map_err(arrow_err)
}

/// The check: every group-by is there, its counts add up to the input's rows, and its sums
/// to the same total as every other group-by's.
fn validation(
    params: &CubeParams,
    input: &Input,
    mut summary: serde_json::Value,
    totals: &Totals,
) -> serde_json::Value {
    let n = 1usize << input.d;
    let total_sum = totals.get(&0).map_or(0, |t| t.2);
    let bad: Vec<Mask> = (0..n as Mask)
        .filter(|m| {
            totals
                .get(m)
                .is_none_or(|t| t.1 != input.rows || t.2 != total_sum || t.0 == 0)
        })
        .collect();
    summary["valid"] = serde_json::json!(bad.is_empty());
    summary["failed_group_bys"] = serde_json::json!(bad);
    summary["rows"] = serde_json::json!(input.rows);
    summary["dims"] = serde_json::json!(input.d);
    summary["input_bytes"] = serde_json::json!(input.rows * (4 * input.d as u64 + 8));
    summary["group_bys"] = serde_json::json!(n);
    summary["groups"] = serde_json::json!(totals.values().map(|t| t.0).sum::<u64>());
    summary["groups_per_group_by"] = serde_json::json!(
        totals
            .iter()
            .map(|(m, t)| (m.to_string(), t.0))
            .collect::<BTreeMap<_, _>>()
    );
    summary["measure_sum"] = serde_json::json!(total_sum);
    summary["tables"] = serde_json::json!(format!("{}_g<mask>", params.output));
    summary
}

/// Generates the fact table: disk d gets rows `[d·R/N, (d+1)·R/N)` of the deterministic
/// generator, in batches of 8192, staged like any load. Returns the bytes generated.
///
/// # Errors
/// Bad parameters (no dimensions, more than 8, a zero cardinality, a bad Zipf exponent, no
/// rows), a bad table name, a disk failing the load.
pub async fn load(
    cluster: &Cluster,
    table: &str,
    params: GenParams,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<u64> {
    let generator = Generator::new(params).map_err(cube_err)?;
    let (count, d) = (generator.params().rows, generator.params().dims());
    let n = u64::from(cluster.disk_count());
    let generators: Vec<adisk_host::load::DiskGenerator> = (0..n)
        .map(|disk| {
            let (start, end) = (disk * count / n, (disk + 1) * count / n);
            let g = generator.clone();
            Box::new(move |_| {
                let chunks = (start..end)
                    .step_by(8192)
                    .map(move |s| Ok(rows_batch(&g.rows(s, (end - s).min(8192)), d)));
                Box::new(chunks) as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(cluster, table, fact_schema(d), generators, progress).await?;
    Ok(count * (4 * d as u64 + 8))
}

fn rows_batch(rows: &[Row], d: usize) -> RecordBatch {
    let mut columns: Vec<ArrayRef> = (0..d)
        .map(|j| {
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|r| r.dims[j]),
            )) as _
        })
        .collect();
    columns.push(Arc::new(Int64Array::from_iter_values(
        rows.iter().map(|r| r.measure),
    )));
    RecordBatch::try_new(fact_schema(d), columns).expect("columns match the fact schema")
}
