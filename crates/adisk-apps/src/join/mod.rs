//! `join`: the sort-merge project-join of uysal §5, built on the two-pass NOW-sort.
//!
//! ```text
//!  pass 0  sample R's keys ─► host: N−1 splitters (the same for both relations)
//!  pass 1  R: scan, project (key + 7 fields) ─► exchange by key range ─► sorted runs ─► R_runs
//!  pass 2  S: the same ─► S_runs
//!  pass 3  every disk: merge(its R runs) ─┐
//!                      merge(its S runs) ─┴► join.merge_join ─► named result OUT, partition d
//! ```
//!
//! Conventional: the host reads both projected relations, joins them in its memory (a hash
//! join) and writes the result back to the disks.
pub mod disklets;

use crate::report::{Phase, Report};
use crate::sort::{Relation, form_runs, sample_splitters};
use crate::{AppError, Mode, Result};
use adisk_core::builder::{self, JobBuilder, Sizes, store_result};
use adisk_core::protocol::{DiskletSpec, JobSpec, Port, Sink, SortKey, Source};
use adisk_core::stats::DiskJobStats;
use adisk_host::Cluster;
use adisk_host::jobs::{encode_expr, run_phase};
use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::prelude::col;
use std::sync::Arc;
use std::time::Instant;

/// 4-byte fields of a tuple besides its key (64-byte tuples, as uysal's).
pub const FIELDS: usize = 15;
/// Fields the projection keeps besides the key (eight 4-byte fields in all).
pub const PROJECTED: usize = 7;

/// Schema of a relation: `key`, `f1` … `f15`, all UInt32.
pub fn schema() -> SchemaRef {
    let mut fields = vec![Field::new("key", DataType::UInt32, false)];
    fields.extend((1..=FIELDS).map(|i| Field::new(format!("f{i}"), DataType::UInt32, false)));
    Arc::new(Schema::new(fields))
}

/// The projected columns: `key`, `f1` … `f7`.
pub fn projected() -> Vec<String> {
    std::iter::once("key".to_string())
        .chain((1..=PROJECTED).map(|i| format!("f{i}")))
        .collect()
}

fn projected_schema() -> SchemaRef {
    let full = schema();
    let columns: Vec<usize> = (0..=PROJECTED).collect();
    Arc::new(full.project(&columns).expect("projected columns exist"))
}

/// Tuples `range` of relation `seed`: keys uniform in `0..keys`, fields derived from the row.
pub fn batch(seed: u64, keys: u32, range: std::ops::Range<u64>) -> RecordBatch {
    let n = (range.end - range.start) as usize;
    let mut columns: Vec<Vec<u32>> = vec![Vec::with_capacity(n); FIELDS + 1];
    for i in range {
        let mut rng = crate::rng::SplitMix64::for_index(seed, i);
        columns[0].push(rng.below(u64::from(keys)) as u32);
        for c in columns.iter_mut().skip(1) {
            c.push(rng.next_u64() as u32);
        }
    }
    let arrays: Vec<ArrayRef> = columns
        .into_iter()
        .map(|c| Arc::new(UInt32Array::from(c)) as ArrayRef)
        .collect();
    RecordBatch::try_new(schema(), arrays).expect("columns match the schema")
}

/// Parameters of a join run.
#[derive(Clone, Debug)]
pub struct JoinParams {
    /// Left relation.
    pub left: String,
    /// Right relation.
    pub right: String,
    /// Output table.
    pub output: String,
    /// Active or conventional.
    pub mode: Mode,
    /// Bytes of a sorted run (None: a quarter of the smallest disk's memory).
    pub run_bytes: Option<u64>,
}

const PROGRAM: &str = "app-join";

/// Generates relations `left` and `right` of `rows` tuples each, keys uniform in `0..keys`.
///
/// # Errors
/// Zero rows or keys; a load failing.
pub async fn load(
    cluster: &Cluster,
    (left, right): (&str, &str),
    rows: u64,
    keys: u32,
    seed: u64,
    progress: impl Fn(u64) + Send + Sync + Clone + 'static,
) -> Result<u64> {
    if rows == 0 || keys == 0 {
        return Err(AppError::Invalid(
            "--rows and --keys must be at least 1".into(),
        ));
    }
    if left == right {
        return Err(AppError::Invalid(
            "the two relations need different names".into(),
        ));
    }
    for (table, s) in [(left, seed), (right, seed ^ 0x5eed_5eed)] {
        let n = u64::from(cluster.disk_count());
        let generators = (0..n)
            .map(|d| {
                let (start, end) = (d * rows / n, (d + 1) * rows / n);
                Box::new(move |_| {
                    let chunks = (start..end)
                        .step_by(8192)
                        .map(move |c| Ok(batch(s, keys, c..(c + 8192).min(end))));
                    Box::new(chunks)
                        as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
                }) as adisk_host::load::DiskGenerator
            })
            .collect();
        adisk_host::load::load_generated(cluster, table, schema(), generators, progress.clone())
            .await?;
    }
    Ok(2 * rows * 64)
}

/// Runs the join. The report's `result` counts the output rows.
///
/// # Errors
/// Missing relations, bad parameters, a disk failing (partial output and runs dropped).
pub async fn run(cluster: &Cluster, params: &JoinParams) -> Result<Report> {
    adisk_storage::store::validate_table_name(&params.output)
        .map_err(adisk_host::HostError::from)?;
    if [&params.left, &params.right].contains(&&params.output) {
        return Err(AppError::Invalid(
            "the output table must differ from the inputs".into(),
        ));
    }
    let disks = relation_disks(cluster, [&params.left, &params.right]).await?;
    let mut report = Report {
        app: "join".into(),
        mode: params.mode.to_string(),
        ..Default::default()
    };
    let runs = [
        format!("{}_rruns", params.output),
        format!("{}_sruns", params.output),
    ];
    let _ = cluster.drop_table(&params.output).await;
    let started = Instant::now();
    let outcome = match params.mode {
        Mode::Active => active(cluster, params, &disks, &runs, &mut report).await,
        Mode::Conventional => conventional(cluster, params, &disks, &mut report).await,
    };
    for r in &runs {
        let _ = cluster.drop_table(r).await;
    }
    if let Err(e) = outcome {
        let _ = cluster.drop_table(&params.output).await;
        return Err(e);
    }
    report.seconds = started.elapsed().as_secs_f64();
    let catalog = cluster.catalog().await?;
    let rows = catalog.tables.get(&params.output).map_or(0, |t| t.rows());
    report.result = serde_json::json!({ "output": params.output, "rows": rows });
    Ok(report)
}

/// The disks holding each relation, and all of them.
struct RelationDisks {
    /// The left relation's disks, then the right's: a relation smaller than the cluster
    /// has partitions on fewer disks than the other, and a disk holding none of it has no
    /// such table to read.
    each: [Vec<u32>; 2],
    /// The disks holding either.
    all: Vec<u32>,
}

/// The disks holding each relation (which must be join relations).
async fn relation_disks(cluster: &Cluster, tables: [&str; 2]) -> Result<RelationDisks> {
    let catalog = cluster.catalog().await?;
    let mut each: [Vec<u32>; 2] = Default::default();
    for (t, disks) in tables.iter().zip(&mut each) {
        let entry = catalog
            .tables
            .get(*t)
            .ok_or_else(|| AppError::InputMissing {
                table: t.to_string(),
                hint: "adisk load join --rows N".into(),
            })?;
        let key = entry
            .schema
            .field_with_name("key")
            .map(|f| f.data_type().clone());
        if key.ok() != Some(DataType::UInt32)
            || projected()
                .iter()
                .any(|c| entry.schema.index_of(c).is_err())
        {
            return Err(AppError::Invalid(format!(
                "`{t}` is not a join relation (UInt32 `key`, `f1`…`f{PROJECTED}`)"
            )));
        }
        *disks = entry.disks();
    }
    let mut all: Vec<u32> = each.concat();
    all.sort_unstable();
    all.dedup();
    Ok(RelationDisks { each, all })
}

async fn active(
    cluster: &Cluster,
    params: &JoinParams,
    disks: &RelationDisks,
    runs: &[String; 2],
    report: &mut Report,
) -> Result<()> {
    let memory = crate::sort::smallest_memory(cluster, &disks.all).await?;
    let run_bytes = crate::sort::check_run_bytes(params.run_bytes, memory)?;
    let relation = |table: &str| Relation {
        table: table.into(),
        key: "key".into(),
        columns: projected(),
        schema: projected_schema(),
    };
    let t = Instant::now();
    let (splitters, stats) =
        sample_splitters(cluster, &relation(&params.left), &disks.each[0], 1000).await?;
    report.phase("pass 0: sample keys", t.elapsed(), stats);
    for (name, (table, (runs, holding))) in ["pass 1: runs of R", "pass 2: runs of S"].iter().zip([
        (&params.left, (&runs[0], &disks.each[0])),
        (&params.right, (&runs[1], &disks.each[1])),
    ]) {
        let t = Instant::now();
        let stats = form_runs(
            cluster,
            &relation(table),
            holding,
            &splitters,
            run_bytes,
            runs,
        )
        .await?;
        report.phase(name, t.elapsed(), stats);
    }
    let t = Instant::now();
    let stats = merge_join(cluster, params, runs, memory).await?;
    report.phase("pass 3: merge join", t.elapsed(), stats);
    Ok(())
}

/// Each disk's runs of one relation (partition numbers), from the catalog.
async fn runs_by_disk(
    cluster: &Cluster,
    runs: &str,
) -> Result<std::collections::BTreeMap<u32, Vec<u32>>> {
    let catalog = cluster.catalog().await?;
    let mut by_disk: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    if let Some(t) = catalog.tables.get(runs) {
        for (d, p) in &t.placements {
            by_disk.entry(*d).or_default().push(p.partition);
        }
    }
    Ok(by_disk)
}

/// Pass 3: at every disk holding runs of both relations, merge each relation's runs and join.
async fn merge_join(
    cluster: &Cluster,
    params: &JoinParams,
    runs: &[String; 2],
    memory: u64,
) -> Result<Vec<DiskJobStats>> {
    let (left, right) = (
        runs_by_disk(cluster, &runs[0]).await?,
        runs_by_disk(cluster, &runs[1]).await?,
    );
    let mut specs = Vec::new();
    for (d, l) in &left {
        let Some(r) = right.get(d) else { continue };
        let k = (l.len() + r.len()) as u64;
        // k streams of 4 buffer slots, k merge heads, two merge outputs and the join's scratch.
        let buffer = (memory / 2 / (k * 6 + 16)).min(256 * 1024) / 1024 * 1024;
        if buffer < 16 * 1024 || l.len() + r.len() + 4 > adisk_core::protocol::MAX_JOB_GRAPH_NODES {
            return Err(AppError::Invalid(format!(
                "disk {d} holds {k} runs, too many to merge in one pass within its memory of {memory} bytes: use larger runs (--run-kib)"
            )));
        }
        let sizes = Sizes {
            scratch_kib: (k * buffer * 2).div_ceil(1024).max(memory / 8 / 1024),
            buffer_kib: buffer / 1024,
            temp_kib: 0,
        };
        let job = merge_join_job(*d, params, runs, (l, r))?;
        specs.push((*d, job.sizes(sizes).build()?));
    }
    Ok(run_phase(cluster, specs, |_, _| Ok(())).await?)
}

/// Disk `d`'s pass-3 job, to be sized: its runs of each relation (`l`, `r`) merged, the two
/// merged streams joined into partition `d` of the output.
fn merge_join_job(
    d: u32,
    params: &JoinParams,
    runs: &[String; 2],
    (l, r): (&[u32], &[u32]),
) -> Result<JobBuilder> {
    let key = vec![SortKey {
        expr: encode_expr(&col("key"))?,
        descending: false,
        nulls_first: false,
    }];
    let input = |table: &str, p: u32| Source::Table {
        table: table.into(),
        columns: vec![],
        prune: None,
        partitions: Some(vec![p]),
    };
    let mut job = JobBuilder::new("join-pass3").program(PROGRAM);
    let left: Vec<Port> = l.iter().map(|p| job.input(input(&runs[0], *p))).collect();
    let right: Vec<Port> = r.iter().map(|p| job.input(input(&runs[1], *p))).collect();
    let left = job.stage(DiskletSpec::Merge { keys: key.clone() }, left);
    let right = job.stage(DiskletSpec::Merge { keys: key }, right);
    let join = DiskletSpec::App {
        app: "join".into(),
        name: "merge_join".into(),
        params: serde_json::Value::Null,
        inputs: 2,
        ports: 1,
    };
    let joined = job.stage(join, vec![left, right]);
    job.output(joined, store_result(params.output.clone(), d));
    Ok(job)
}

/// Conventional: the host reads both projected relations, hash-joins them and writes the
/// result back, a partition per disk.
async fn conventional(
    cluster: &Cluster,
    params: &JoinParams,
    disks: &RelationDisks,
    report: &mut Report,
) -> Result<()> {
    let t = Instant::now();
    let mut sides = Vec::new();
    let mut stats = Vec::new();
    for (table, holding) in [&params.left, &params.right].into_iter().zip(&disks.each) {
        let (batches, s) = read_at_host(cluster, table, holding).await?;
        sides.push(batches);
        stats.extend(s);
    }
    report.phase("read both at host", t.elapsed(), stats);
    let t = Instant::now();
    let joined = hash_join(&sides[0], &sides[1])?;
    drop(sides);
    report.phase("join at host", t.elapsed(), Vec::new());
    let t = Instant::now();
    let sent = joined.iter().map(adisk_core::stats::batch_bytes).sum();
    let n = cluster.disk_count() as usize;
    let mut per_disk: Vec<Vec<RecordBatch>> = vec![Vec::new(); n];
    for (i, b) in joined.into_iter().enumerate() {
        per_disk[i % n].push(b);
    }
    let generators = per_disk
        .into_iter()
        .map(|bs| {
            Box::new(move |_| {
                Box::new(bs.into_iter().map(Ok))
                    as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(cluster, &params.output, output_schema(), generators, |_| {})
        .await?;
    report.phases.push(Phase {
        name: "write back".into(),
        seconds: t.elapsed().as_secs_f64(),
        disks: Vec::new(),
        host_sent_bytes: sent,
    });
    Ok(())
}

/// The output schema: `r_key`, `r_f1`…, `s_key`, `s_f1`….
pub fn output_schema() -> SchemaRef {
    let p = projected_schema();
    let fields: Vec<Field> = ["r_", "s_"]
        .iter()
        .flat_map(|prefix| {
            p.fields().iter().map(move |f| {
                Field::new(
                    format!("{prefix}{}", f.name()),
                    f.data_type().clone(),
                    f.is_nullable(),
                )
            })
        })
        .collect();
    Arc::new(Schema::new(fields))
}

async fn read_at_host(
    cluster: &Cluster,
    table: &str,
    disks: &[u32],
) -> Result<(Vec<RecordBatch>, Vec<DiskJobStats>)> {
    let specs = disks
        .iter()
        .map(|d| {
            let source = builder::table(table, projected());
            let spec = JobBuilder::chain("join-read", source, vec![], Sink::Host)
                .program(PROGRAM)
                .build()?;
            Ok((*d, spec))
        })
        .collect::<Result<Vec<(u32, JobSpec)>>>()?;
    let mut batches = Vec::new();
    let stats = run_phase(cluster, specs, |_, b| {
        batches.push(b);
        Ok(())
    })
    .await?;
    Ok((batches, stats))
}

/// An in-memory hash join of the projected relations on `key` (build: the right side).
fn hash_join(left: &[RecordBatch], right: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let schema = projected_schema();
    let err = |e: arrow::error::ArrowError| AppError::Invalid(e.to_string());
    let r = arrow::compute::concat_batches(&schema, right).map_err(err)?;
    let r_keys = r
        .column(0)
        .as_any()
        .downcast_ref::<UInt32Array>()
        .ok_or_else(|| AppError::Invalid("right key".into()))?;
    let mut table: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    for i in 0..r.num_rows() {
        table.entry(r_keys.value(i)).or_default().push(i as u32);
    }
    let mut out = Vec::new();
    for l in left {
        let keys = l
            .column(0)
            .as_any()
            .downcast_ref::<UInt32Array>()
            .ok_or_else(|| AppError::Invalid("left key".into()))?;
        let (mut li, mut ri) = (Vec::new(), Vec::new());
        for i in 0..l.num_rows() {
            for j in table.get(&keys.value(i)).map(Vec::as_slice).unwrap_or(&[]) {
                li.push(i as u32);
                ri.push(*j);
            }
        }
        if li.is_empty() {
            continue;
        }
        let (li, ri) = (UInt32Array::from(li), UInt32Array::from(ri));
        let mut columns: Vec<ArrayRef> = Vec::new();
        for c in l.columns() {
            columns.push(arrow::compute::take(c.as_ref(), &li, None).map_err(err)?);
        }
        for c in r.columns() {
            columns.push(arrow::compute::take(c.as_ref(), &ri, None).map_err(err)?);
        }
        out.push(RecordBatch::try_new(output_schema(), columns).map_err(err)?);
    }
    Ok(out)
}
