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
use adisk_core::protocol::{
    DiskletSpec, JobSpec, Output, Port, Route, Sink, SortKey, Source, Stage, StoredStream,
};
use adisk_host::Cluster;
use adisk_host::jobs::{Sizes, encode_expr, new_id, run_phase, sized};
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
    /// Keys sampled per disk for the splitters.
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
async fn smallest_memory(cluster: &Cluster, disks: &[u32]) -> Result<u64> {
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
    let run_bytes = params.run_bytes.unwrap_or(memory / 4);
    if run_bytes < 64 * 1024 || run_bytes * 2 + (4 << 20) > memory {
        return Err(AppError::Invalid(format!(
            "a run of {run_bytes} bytes needs twice that plus stream buffers (4 MiB) in a disk's memory of {memory} bytes; runs start at 64 KiB"
        )));
    }
    let t = Instant::now();
    let splitters = sample(cluster, params, disks, report).await?;
    report.phases.last_mut().expect("sample phase").seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let stats = pass_one(cluster, params, disks, &splitters, run_bytes).await?;
    report.phase("pass 1: partition + runs", t.elapsed(), stats);
    let t = Instant::now();
    let stats = pass_two(cluster, params, memory).await?;
    report.phase("pass 2: merge runs", t.elapsed(), stats);
    Ok(())
}

/// Pass 0: every disk samples keys; the host sorts them and picks N−1 splitters.
async fn sample(
    cluster: &Cluster,
    params: &SortParams,
    disks: &[u32],
    report: &mut Report,
) -> Result<Vec<Vec<u8>>> {
    let catalog = cluster.catalog().await?;
    let rows = catalog.tables[&params.input].rows();
    let per_disk = rows / disks.len() as u64;
    let every = (per_disk / params.samples_per_disk.max(1)).max(1);
    let specs = disks
        .iter()
        .map(|d| {
            let spec = JobSpec::chain(
                new_id("sort-sample"),
                PROGRAM,
                Source::Table {
                    table: params.input.clone(),
                    columns: vec!["key".into()],
                    prune: None,
                    partitions: None,
                },
                vec![app("sample", serde_json::json!({ "every": every }))],
                Sink::Host,
            );
            (*d, spec)
        })
        .collect();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let stats = run_phase(cluster, specs, |_, batch| {
        let k = batch
            .column(0)
            .as_any()
            .downcast_ref::<FixedSizeBinaryArray>()
            .ok_or_else(|| adisk_host::HostError::Invalid("sample: not a key column".into()))?;
        keys.extend((0..k.len()).map(|i| k.value(i).to_vec()));
        Ok(())
    })
    .await?;
    report.phase("pass 0: sample keys", std::time::Duration::ZERO, stats);
    keys.sort_unstable();
    let targets = cluster.disk_count() as usize;
    Ok((1..targets)
        .filter_map(|i| keys.get(i * keys.len() / targets).cloned())
        .collect())
}

fn key_literal(key: &[u8]) -> Result<adisk_core::protocol::ExprBytes> {
    Ok(encode_expr(&lit(ScalarValue::FixedSizeBinary(
        KEY_BYTES as i32,
        Some(key.to_vec()),
    )))?)
}

/// Pass 1: every disk range-partitions its records to all disks and forms sorted runs of
/// what it receives, each written to its own partition of the runs table.
async fn pass_one(
    cluster: &Cluster,
    params: &SortParams,
    disks: &[u32],
    splitters: &[Vec<u8>],
    run_bytes: u64,
) -> Result<Vec<adisk_core::stats::DiskJobStats>> {
    let all: Vec<u32> = (0..cluster.disk_count()).collect();
    let targets: Vec<String> = all
        .iter()
        .map(|d| cluster.address(*d).to_string())
        .collect();
    let exchange_id = new_id("sort-x");
    let route = if splitters.len() + 1 == targets.len() {
        Route::Range {
            key: encode_expr(&col("key"))?,
            bounds: splitters
                .iter()
                .map(|k| key_literal(k))
                .collect::<Result<_>>()?,
        }
    } else {
        Route::Hash {
            keys: vec![encode_expr(&col("key"))?],
        }
    };
    if !matches!(route, Route::Range { .. }) {
        return Err(AppError::Invalid(
            "too few records to sample a splitter for every disk".into(),
        ));
    }
    let max = adisk_core::graph::MAX_SPLIT_PARTITIONS;
    let specs = all
        .iter()
        .map(|d| {
            let mut inputs = vec![Source::Pipe {
                exchange_id: exchange_id.clone(),
                senders: disks.len() as u32,
                schema: records::schema().as_ref().clone(),
            }];
            let mut outputs = vec![Output {
                from: Port::Stage { stage: 0, port: 0 },
                sink: Sink::Store {
                    stream: StoredStream::Split {
                        name: runs_table(&params.output),
                        first_partition: d * max,
                        by: "run".into(),
                        max_partitions: max,
                    },
                },
            }];
            if let Some(sender) = disks.iter().position(|x| x == d) {
                inputs.push(Source::Table {
                    table: params.input.clone(),
                    columns: vec![],
                    prune: None,
                    partitions: None,
                });
                outputs.push(Output {
                    from: Port::Input(1),
                    sink: Sink::Exchange {
                        exchange_id: exchange_id.clone(),
                        targets: targets.clone(),
                        sender: sender as u32,
                        route: route.clone(),
                        relay: None,
                        target_relays: vec![],
                    },
                });
            }
            let spec = JobSpec {
                job_id: new_id("sort-pass1"),
                program: PROGRAM.into(),
                inputs,
                stages: vec![Stage {
                    disklet: app("runs", serde_json::json!({ "run_bytes": run_bytes })),
                    inputs: vec![Port::Input(0)],
                }],
                outputs,
                scratch_kib: 0,
                buffer_kib: 0,
                temp_kib: 0,
            };
            let sizes = Sizes {
                scratch_kib: (run_bytes * 2).div_ceil(1024),
                buffer_kib: 64,
                temp_kib: 0,
            };
            (*d, sized(spec, sizes))
        })
        .collect();
    Ok(run_phase(cluster, specs, |_, _| Ok(())).await?)
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
        let spec = JobSpec {
            job_id: new_id("sort-pass2"),
            program: PROGRAM.into(),
            inputs: parts
                .iter()
                .map(|p| Source::Table {
                    table: runs.name.clone(),
                    columns: vec![],
                    prune: None,
                    partitions: Some(vec![*p]),
                })
                .collect(),
            stages: vec![Stage {
                disklet: DiskletSpec::Merge { keys: key.clone() },
                inputs: (0..parts.len() as u32).map(Port::Input).collect(),
            }],
            outputs: vec![Output {
                from: Port::Stage { stage: 0, port: 0 },
                sink: Sink::Store {
                    stream: StoredStream::Result {
                        name: params.output.clone(),
                        partition: d,
                    },
                },
            }],
            scratch_kib: 0,
            buffer_kib: 0,
            temp_kib: 0,
        };
        let sizes = Sizes {
            scratch_kib: (k * buffer * 2).div_ceil(1024),
            buffer_kib: buffer / 1024,
            temp_kib: 0,
        };
        specs.push((d, sized(spec, sizes)));
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
            let spec = JobSpec::chain(
                new_id("sort-read"),
                PROGRAM,
                Source::Table {
                    table: params.input.clone(),
                    columns: vec![],
                    prune: None,
                    partitions: None,
                },
                vec![],
                Sink::Host,
            );
            (*d, spec)
        })
        .collect();
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
    let sent: u64 = adisk_diskos::disklets::batch_bytes(&sorted);
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
    let specs: Vec<(u32, JobSpec)> = entry
        .disks()
        .into_iter()
        .map(|d| {
            let spec = JobSpec::chain(
                new_id("sort-check"),
                PROGRAM,
                Source::Table {
                    table: table.into(),
                    columns: vec![],
                    prune: None,
                    partitions: None,
                },
                vec![app("check", serde_json::json!({}))],
                Sink::Host,
            );
            (d, spec)
        })
        .collect();
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
