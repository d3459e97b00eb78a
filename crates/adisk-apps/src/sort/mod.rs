//! `sort`: the two-pass NOW-sort of uysal §5 on the disks, and its conventional baseline.
//!
//! ```text
//!  pass 0  every disk: scan key ─► sort.sample (every k-th key) ─► host: N−1 splitters
//!  pass 1  every disk: scan input ─► exchange by key range ─► disk r's pipe (N senders)
//!          ─► sort.runs (sorted runs, each ≤ half the scratch grant)
//!          ─► split result `T_runs` (one partition per run, written to the disk itself)
//!  pass 2  every disk: its k runs (k table inputs) ─► merge ─► named result `T_sorted`, partition d
//!  check   every disk: scan ─► sort.check (valsort summary) ─► host: order across disks,
//!          record count and checksum equal to the input's
//! ```
//!
//! Conventional: the host reads every record, sorts them in its own memory and writes the
//! sorted records back to the disks, range-declustered (a load), then the same check.
pub mod disklets;
pub mod records;

use crate::report::{Phase, Report};
use crate::{AppError, Mode, Result};
use adisk_core::builder::{self, JobBuilder, Sizes, exchange, new_id, store_result, table};
use adisk_core::protocol::{DiskletSpec, JobSpec, Route, Sink, SortKey, Source, StoredStream};
use adisk_host::Cluster;
use adisk_host::jobs::{encode_expr, run_phase};
use arrow::array::{Array, FixedSizeBinaryArray, RecordBatch};
use datafusion::common::ScalarValue;
use datafusion::prelude::{col, lit};
use records::{KEY_BYTES, Summary};

use std::time::Instant;

/// Parameters of a sort run.
#[derive(Clone, Debug)]
pub struct SortParams {
    /// Input table (records: `key`, `payload`).
    pub input: String,
    /// Output table (the sorted records, partition d at disk d).
    pub output: String,
    /// Active or conventional.
    pub mode: Mode,
    /// Bytes of one sorted run (active; `None`: a quarter of the smallest disk's memory).
    pub run_bytes: Option<u64>,
    /// Keys sampled per disk for the splitters (at least 1).
    pub samples_per_disk: u64,
}

/// Where the runs of pass 1 go: table `OUTPUT_runs`, partitions `disk × MAX_SPLIT_PARTITIONS + run`.
fn runs_table(output: &str) -> String {
    format!("{output}_runs")
}

const PROGRAM: &str = "app-sort";

fn app(disklet: &str, params: serde_json::Value) -> DiskletSpec {
    DiskletSpec::App {
        app: "sort".into(),
        name: disklet.into(),
        params,
        inputs: 1,
        ports: 1,
    }
}

/// Runs the sort, then validates its output. The report's `result` holds the validation.
///
/// # Errors
/// Missing or malformed input, parameters out of range, any disk failing (partial output
/// and runs are dropped).
pub async fn run(cluster: &Cluster, params: &SortParams) -> Result<Report> {
    adisk_storage::store::validate_table_name(&params.output)
        .map_err(adisk_host::HostError::from)?;
    if params.output == params.input {
        return Err(AppError::Invalid(
            "the output table must differ from the input".into(),
        ));
    }
    if params.samples_per_disk == 0 {
        return Err(AppError::Invalid(
            "--samples-per-disk must be at least 1: the splitters come from the sampled keys"
                .into(),
        ));
    }
    let placement = input_disks(cluster, &params.input).await?;
    let mut report = Report {
        app: "sort".into(),
        mode: params.mode.to_string(),
        ..Default::default()
    };
    let _ = drop_quietly(cluster, &params.output).await;
    let started = Instant::now();
    let outcome = match params.mode {
        Mode::Active => active(cluster, params, &placement, &mut report).await,
        Mode::Conventional => conventional(cluster, params, &placement, &mut report).await,
    };
    let _ = drop_quietly(cluster, &runs_table(&params.output)).await;
    if let Err(e) = outcome {
        let _ = drop_quietly(cluster, &params.output).await;
        return Err(e);
    }
    report.seconds = started.elapsed().as_secs_f64();
    let (input, output) = (
        summarize(cluster, &params.input).await?,
        summarize(cluster, &params.output).await?,
    );
    report.result = validation(&input, &output);
    Ok(report)
}

/// Disks holding the input (each reads its own partitions), checked to be records.
async fn input_disks(cluster: &Cluster, table: &str) -> Result<Vec<u32>> {
    let catalog = cluster.catalog().await?;
    let entry = catalog
        .tables
        .get(table)
        .ok_or_else(|| AppError::InputMissing {
            table: table.into(),
            hint: "adisk load sort --records N".into(),
        })?;
    disklets_key_check(&entry.schema)?;
    let disks = entry.disks();
    if disks.is_empty() {
        return Err(AppError::InputMissing {
            table: table.into(),
            hint: "the table has no partitions".into(),
        });
    }
    Ok(disks)
}

fn disklets_key_check(schema: &arrow::datatypes::Schema) -> Result<()> {
    let ok = |name: &str, width: usize| {
        schema.field_with_name(name).is_ok_and(|f| {
            f.data_type() == &arrow::datatypes::DataType::FixedSizeBinary(width as i32)
        })
    };
    if ok("key", KEY_BYTES) && ok("payload", records::PAYLOAD_BYTES) {
        Ok(())
    } else {
        Err(AppError::Invalid(
            "the sort's input has 100-byte records: `key` FixedSizeBinary(10), `payload` FixedSizeBinary(90)"
                .into(),
        ))
    }
}

async fn drop_quietly(cluster: &Cluster, table: &str) -> Result<()> {
    cluster.drop_table(table).await.map_err(AppError::from)
}

/// The smallest memory budget among `disks`.
pub(crate) async fn smallest_memory(cluster: &Cluster, disks: &[u32]) -> Result<u64> {
    let status = cluster.status().await;
    let mut smallest = u64::MAX;
    for d in disks {
        let s = status[*d as usize]
            .as_ref()
            .map_err(|e| AppError::Invalid(format!("disk {d}: {e}")))?;
        smallest = smallest.min(s.memory_bytes);
    }
    Ok(smallest)
}

async fn active(
    cluster: &Cluster,
    params: &SortParams,
    disks: &[u32],
    report: &mut Report,
) -> Result<()> {
    let memory = smallest_memory(cluster, disks).await?;
    let run_bytes = check_run_bytes(params.run_bytes, memory)?;
    let relation = Relation {
        table: params.input.clone(),
        key: "key".into(),
        columns: vec![],
        schema: records::schema(),
    };
    let t = Instant::now();
    let (splitters, stats) =
        sample_splitters(cluster, &relation, disks, params.samples_per_disk).await?;
    report.phase("pass 0: sample keys", t.elapsed(), stats);
    let t = Instant::now();
    let runs = runs_table(&params.output);
    let stats = form_runs(cluster, &relation, disks, &splitters, run_bytes, &runs).await?;
    report.phase("pass 1: partition + runs", t.elapsed(), stats);
    let t = Instant::now();
    let stats = pass_two(cluster, params, memory).await?;
    report.phase("pass 2: merge runs", t.elapsed(), stats);
    Ok(())
}

/// The size of a sorted run: `asked`, or a quarter of `memory`; it needs twice that plus
/// stream buffers in a disk's memory.
///
/// # Errors
/// A run of 0 bytes, one smaller than 64 KiB or too large for the memory (each naming
/// `--run-kib`).
pub(crate) fn check_run_bytes(asked: Option<u64>, memory: u64) -> Result<u64> {
    if asked == Some(0) {
        return Err(AppError::Invalid(
            "--run-kib must be positive: a sorted run holds at least one record (runs start at 64 KiB)"
                .into(),
        ));
    }
    let run_bytes = asked.unwrap_or(memory / 4);
    if run_bytes < 64 * 1024 || run_bytes.saturating_mul(2).saturating_add(4 << 20) > memory {
        return Err(AppError::Invalid(format!(
            "--run-kib: a run of {run_bytes} bytes needs twice that plus stream buffers (4 MiB) in a disk's memory of {memory} bytes; runs start at 64 KiB"
        )));
    }
    Ok(run_bytes)
}

/// A relation a two-pass sort reads: its table, the key, the columns it keeps (empty: all)
/// and their schema.
#[derive(Clone, Debug)]
pub struct Relation {
    /// Table.
    pub table: String,
    /// Sort key column (integer or fixed-size binary).
    pub key: String,
    /// Columns read (empty: all).
    pub columns: Vec<String>,
    /// Schema of the columns read.
    pub schema: arrow::datatypes::SchemaRef,
}

/// Pass 0: every disk samples about `samples_per_disk` keys of `relation`; the host sorts
/// them and picks N−1 splitters, N the cluster's disks.
///
/// # Errors
/// Too few keys for a splitter per disk; a disk failing.
pub async fn sample_splitters(
    cluster: &Cluster,
    relation: &Relation,
    disks: &[u32],
    samples_per_disk: u64,
) -> Result<(Vec<ScalarValue>, Vec<adisk_core::stats::DiskJobStats>)> {
    let catalog = cluster.catalog().await?;
    let rows = catalog.tables.get(&relation.table).map_or(0, |t| t.rows());
    let per_disk = rows / disks.len().max(1) as u64;
    let every = (per_disk / samples_per_disk.max(1)).max(1);
    let params = serde_json::json!({ "every": every, "key": relation.key });
    let specs = disks
        .iter()
        .map(|d| {
            let source = table(relation.table.clone(), vec![relation.key.clone()]);
            let stages = vec![app("sample", params.clone())];
            let spec = JobBuilder::chain("sort-sample", source, stages, Sink::Host)
                .program(PROGRAM)
                .build()?;
            Ok((*d, spec))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut keys: Vec<ScalarValue> = Vec::new();
    let stats = run_phase(cluster, specs, |_, batch| {
        for i in 0..batch.num_rows() {
            keys.push(
                ScalarValue::try_from_array(batch.column(0), i)
                    .map_err(|e| adisk_host::HostError::Invalid(format!("a sampled key: {e}")))?,
            );
        }
        Ok(())
    })
    .await?;
    keys.sort_unstable_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let targets = cluster.disk_count() as usize;
    if keys.len() < targets {
        return Err(AppError::Invalid(format!(
            "too few rows in `{}` to sample a splitter for each of {targets} disks",
            relation.table
        )));
    }
    let splitters = (1..targets)
        .map(|i| keys[i * keys.len() / targets].clone())
        .collect();
    Ok((splitters, stats))
}

/// Pass 1 of a two-pass sort: every disk holding `relation` range-partitions its rows by
/// `splitters` to all disks, and each disk forms sorted runs (each at most `run_bytes`, in
/// twice that of scratch) of what it receives, each written to its own partition of table
/// `runs` (disk d's runs from partition d·4096).
///
/// # Errors
/// A disk refusing or failing.
pub async fn form_runs(
    cluster: &Cluster,
    relation: &Relation,
    disks: &[u32],
    splitters: &[ScalarValue],
    run_bytes: u64,
    runs: &str,
) -> Result<Vec<adisk_core::stats::DiskJobStats>> {
    let targets: Vec<String> = (0..cluster.disk_count())
        .map(|d| cluster.address(d).to_string())
        .collect();
    let route = Route::Range {
        key: encode_expr(&col(relation.key.as_str()))?,
        bounds: splitters
            .iter()
            .map(|k| encode_expr(&lit(k.clone())).map_err(AppError::from))
            .collect::<Result<_>>()?,
    };
    let exchange_id = new_id("sort-x");
    let runs_params = serde_json::json!({ "run_bytes": run_bytes, "key": relation.key });
    let sizes = Sizes {
        scratch_kib: (run_bytes * 2).div_ceil(1024),
        buffer_kib: 64,
        temp_kib: 0,
    };
    let specs = (0..cluster.disk_count())
        .map(|d| {
            let sender = disks.iter().position(|x| *x == d).map(|s| Sender {
                relation,
                number: s as u32,
                exchange_id: &exchange_id,
                targets: &targets,
                route: &route,
            });
            let job = runs_job(
                d,
                relation,
                disks.len() as u32,
                &exchange_id,
                sender,
                runs,
                &runs_params,
            );
            Ok((d, job.sizes(sizes).build()?))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(run_phase(cluster, specs, |_, _| Ok(())).await?)
}

/// The sending half of a pass-1 job.
struct Sender<'a> {
    relation: &'a Relation,
    number: u32,
    exchange_id: &'a str,
    targets: &'a [String],
    route: &'a Route,
}

/// Disk d's pass-1 job, to be sized: receive its key range from every sender into sorted
/// runs; and, if it holds the relation, send its rows.
fn runs_job(
    d: u32,
    relation: &Relation,
    senders: u32,
    exchange_id: &str,
    sender: Option<Sender<'_>>,
    runs: &str,
    runs_params: &serde_json::Value,
) -> JobBuilder {
    let max = adisk_core::graph::MAX_SPLIT_PARTITIONS;
    let mut job = JobBuilder::new("sort-pass1").program(PROGRAM);
    let received = job.input(Source::Pipe {
        exchange_id: exchange_id.into(),
        senders,
        schema: relation.schema.as_ref().clone(),
    });
    let sorted = job.stage(app("runs", runs_params.clone()), vec![received]);
    let split = StoredStream::Split {
        name: runs.into(),
        first_partition: d * max,
        by: "run".into(),
        max_partitions: max,
    };
    job.output(sorted, Sink::Store { stream: split });
    if let Some(s) = sender {
        let rows = job.input(table(s.relation.table.clone(), s.relation.columns.clone()));
        let sink = exchange(s.exchange_id, s.targets.to_vec(), s.number, s.route.clone());
        job.output(rows, sink);
    }
    job
}

/// Pass 2: every disk merges its runs into partition d of the output.
async fn pass_two(
    cluster: &Cluster,
    params: &SortParams,
    memory: u64,
) -> Result<Vec<adisk_core::stats::DiskJobStats>> {
    let catalog = cluster.catalog().await?;
    let Some(runs) = catalog.tables.get(&runs_table(&params.output)) else {
        return Ok(Vec::new()); // no records at all
    };
    let mut per_disk: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    for (d, p) in &runs.placements {
        per_disk.entry(*d).or_default().push(p.partition);
    }
    let key = vec![SortKey {
        expr: encode_expr(&col("key"))?,
        descending: false,
        nulls_first: false,
    }];
    let mut specs = Vec::new();
    for (d, parts) in per_disk {
        let k = parts.len() as u64;
        // k streams of 4 buffer slots, k heads in the merge's scratch, 2 output buffers.
        let buffer = (memory / 2 / (k * 6 + 4)).min(256 * 1024) / 1024 * 1024;
        if buffer < 16 * 1024 || parts.len() + 2 > adisk_core::protocol::MAX_JOB_GRAPH_NODES {
            return Err(AppError::Invalid(format!(
                "disk {d} holds {k} runs, too many to merge in one pass within its memory of {memory} bytes: use larger runs (--run-kib)"
            )));
        }
        let mut job = JobBuilder::new("sort-pass2").program(PROGRAM);
        let inputs = parts
            .iter()
            .map(|p| {
                job.input(Source::Table {
                    table: runs.name.clone(),
                    columns: vec![],
                    prune: None,
                    partitions: Some(vec![*p]),
                })
            })
            .collect();
        let merged = job.stage(DiskletSpec::Merge { keys: key.clone() }, inputs);
        job.output(merged, store_result(params.output.clone(), d));
        let sizes = Sizes {
            scratch_kib: (k * buffer * 2).div_ceil(1024),
            buffer_kib: buffer / 1024,
            temp_kib: 0,
        };
        specs.push((d, job.sizes(sizes).build()?));
    }
    Ok(run_phase(cluster, specs, |_, _| Ok(())).await?)
}

/// Conventional: the host reads every record, sorts in its memory and loads the sorted
/// records back range-declustered.
async fn conventional(
    cluster: &Cluster,
    params: &SortParams,
    disks: &[u32],
    report: &mut Report,
) -> Result<()> {
    let t = Instant::now();
    let specs = disks
        .iter()
        .map(|d| {
            let source = table(params.input.clone(), vec![]);
            let spec = JobBuilder::chain("sort-read", source, vec![], Sink::Host)
                .program(PROGRAM)
                .build()?;
            Ok((*d, spec))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut batches = Vec::new();
    let stats = run_phase(cluster, specs, |_, b| {
        batches.push(b);
        Ok(())
    })
    .await?;
    report.phase("read at host", t.elapsed(), stats);
    let t = Instant::now();
    let sorted = sort_in_memory(&batches)?;
    drop(batches);
    report.phase("sort at host", t.elapsed(), Vec::new());
    let t = Instant::now();
    let n = cluster.disk_count() as usize;
    let rows = sorted.num_rows();
    let sent: u64 = adisk_core::stats::batch_bytes(&sorted);
    let generators: Vec<adisk_host::load::DiskGenerator> = (0..n)
        .map(|d| {
            let part = sorted.slice(d * rows / n, (d + 1) * rows / n - d * rows / n);
            Box::new(move |_| {
                let chunks: Vec<_> = (0..part.num_rows())
                    .step_by(8192)
                    .map(|s| Ok(part.slice(s, 8192.min(part.num_rows() - s))))
                    .collect();
                Box::new(chunks.into_iter())
                    as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(
        cluster,
        &params.output,
        records::schema(),
        generators,
        |_| {},
    )
    .await?;
    report.phases.push(Phase {
        name: "write back range-declustered".into(),
        seconds: t.elapsed().as_secs_f64(),
        disks: Vec::new(),
        host_sent_bytes: sent,
    });
    Ok(())
}

/// Sorts records by key in memory (the conventional host).
fn sort_in_memory(batches: &[RecordBatch]) -> Result<RecordBatch> {
    let all = arrow::compute::concat_batches(&records::schema(), batches)
        .map_err(|e| AppError::Invalid(format!("records at the host: {e}")))?;
    let keys = all
        .column(0)
        .as_any()
        .downcast_ref::<FixedSizeBinaryArray>()
        .ok_or_else(|| AppError::Invalid("records without keys".into()))?;
    let mut order: Vec<u32> = (0..all.num_rows() as u32).collect();
    order.sort_unstable_by(|a, b| keys.value(*a as usize).cmp(keys.value(*b as usize)));
    arrow::compute::take_record_batch(&all, &arrow::array::UInt32Array::from(order))
        .map_err(|e| AppError::Invalid(e.to_string()))
}

/// The valsort summary of `table`: each disk summarizes its partitions; the host composes
/// them in disk order (for a sort's output, partition d at disk d holds the d-th key range).
///
/// # Errors
/// A disk failing its job.
pub async fn summarize(cluster: &Cluster, table: &str) -> Result<Summary> {
    let catalog = cluster.catalog().await?;
    let Some(entry) = catalog.tables.get(table) else {
        return Ok(Summary::default());
    };
    let specs = entry
        .disks()
        .into_iter()
        .map(|d| {
            let source = builder::table(table, vec![]);
            let stages = vec![app("check", serde_json::json!({}))];
            let spec = JobBuilder::chain("sort-check", source, stages, Sink::Host)
                .program(PROGRAM)
                .build()?;
            Ok((d, spec))
        })
        .collect::<Result<Vec<(u32, JobSpec)>>>()?;
    let mut got: Vec<(u32, Summary)> = Vec::new();
    run_phase(cluster, specs, |d, b| {
        let s = Summary::from_batch(&b).map_err(adisk_host::HostError::Invalid)?;
        got.extend(s.into_iter().map(|s| (d, s)));
        Ok(())
    })
    .await?;
    got.sort_by_key(|(d, _)| *d);
    Ok(got
        .iter()
        .fold(Summary::default(), |total, (_, s)| total.then(s)))
}

/// The validation: the output is ordered within and across partitions, holds as many records
/// as the input, and its checksum equals the input's.
fn validation(input: &Summary, output: &Summary) -> serde_json::Value {
    let valid = output.unordered == 0
        && output.records == input.records
        && output.checksum == input.checksum;
    serde_json::json!({
        "valid": valid,
        "records": output.records,
        "input_records": input.records,
        "unordered": output.unordered,
        "duplicate_keys": output.duplicates,
        "checksum": format!("{:016x}", output.checksum),
        "input_checksum": format!("{:016x}", input.checksum),
    })
}

/// Generates `records` sort records of stream `seed` into `table`: disk d gets records
/// `[d·R/N, (d+1)·R/N)`, generated in batches of 8192 and staged like any load.
///
/// # Errors
/// Zero records, a bad table name, a disk failing the load.
pub async fn load(
    cluster: &Cluster,
    table: &str,
    count: u64,
    seed: u64,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<u64> {
    if count == 0 {
        return Err(AppError::Invalid("--records must be at least 1".into()));
    }
    let n = u64::from(cluster.disk_count());
    let generators: Vec<adisk_host::load::DiskGenerator> = (0..n)
        .map(|d| {
            let (start, end) = (d * count / n, (d + 1) * count / n);
            Box::new(move |_| {
                let chunks = (start..end)
                    .step_by(8192)
                    .map(move |s| Ok(records::batch(seed, s..(s + 8192).min(end))));
                Box::new(chunks) as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(cluster, table, records::schema(), generators, progress)
        .await?;
    Ok(count * records::RECORD_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_sizes_are_checked_naming_the_flag() {
        let memory = 64 << 20;
        assert_eq!(check_run_bytes(None, memory).unwrap(), memory / 4);
        assert_eq!(check_run_bytes(Some(1 << 20), memory).unwrap(), 1 << 20);
        for bad in [0, 1024, memory] {
            let err = check_run_bytes(Some(bad), memory).unwrap_err().to_string();
            assert!(err.contains("--run-kib"), "{bad}: {err}");
        }
    }
}
