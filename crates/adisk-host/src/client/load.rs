//! Loading data into the disks, all or nothing.
//!
//! * TPC-H: every disk generates its own parts with `tpchgen` (range declustering on the
//!   primary key, orders and lineitem co-partitioned); nothing crosses the network but progress.
//! * Parquet / CSV files: the host reads them, routes rows with a declustering rule and streams
//!   each disk its partition over Flight `DoPut`.
//!
//! Either way a load is staged, then committed (`adisk_storage::staging`):
//!
//! 1. **Stage**: every partition is written under the load's id, invisible to scans and the
//!    catalog; the previous table stays readable. The host checks that every disk's progress
//!    stream ended with `done` (TPC-H) or its `DoPut` returned the partition with the rows sent.
//! 2. **Commit**: only then, the host sends `load_commit` to every disk in turn; each replaces
//!    its tables in one manifest replacement, stamped with the load id and the disks the load
//!    spans. The catalog accepts a table only if all those disks carry that stamp, so a host
//!    killed between two disks' commits leaves a table reported incomplete, never partial.
//! 3. **Abort**: on any failure before the commit the host sends `load_abort` to every disk.
//!    A host killed before it could leaves staged files that the disk removes when it starts
//!    or when the next load of the table starts.
use crate::client::cluster::{Cluster, flight_err};
use crate::{HostError, Result};
use adisk_core::protocol::{
    CommitTable, GenerateTpch, LoadCommit, LoadProgress, PartitionCopies, PartitionInfo,
    PutCommand, TableInfo, action,
};
use adisk_storage::decluster::{Decluster, Router, disk_of_part, replica_disks};
use adisk_storage::tpch;
use adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use futures::{StreamExt, TryStreamExt};
use std::path::PathBuf;
use std::sync::Arc;

/// Fault injection for tests: milliseconds the host waits after each disk's commit (so that a
/// test can kill it between two disks' commits).
pub const COMMIT_PAUSE_ENV: &str = "ADISK_FAULT_COMMIT_PAUSE_MS";

/// A new load id: the time in nanoseconds (hex, fixed width, so later loads sort later) and
/// the host's process id.
pub fn new_load_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("{nanos:016x}-{:x}", std::process::id())
}

/// Runs `stage` (which stages partitions under `load_id`), then commits `commits(staged)` on
/// every disk; on any failure before the commit, aborts the load on every disk.
async fn staged_load<T>(
    cluster: &Cluster,
    load_id: &str,
    stage: impl std::future::Future<Output = Result<(T, Vec<StagedTable>)>>,
) -> Result<T> {
    match stage.await {
        Ok((value, tables)) => {
            commit(cluster, load_id, &tables).await?;
            Ok(value)
        }
        Err(e) => {
            abort(cluster, load_id).await;
            Err(e)
        }
    }
}

/// Sends `load_abort` to every disk (a disk that cannot be reached removes what it staged
/// when it starts again).
pub async fn abort(cluster: &Cluster, load_id: &str) {
    let all = (0..cluster.disk_count())
        .map(|d| cluster.control(d, action::LOAD_ABORT, load_id.as_bytes().to_vec()));
    for (d, r) in futures::future::join_all(all).await.into_iter().enumerate() {
        if let Err(e) = r {
            tracing::warn!(disk = d, load = load_id, "abort not delivered: {e}");
        }
    }
}

/// Commits `tables` (partitions per disk as each disk must hold them) disk by disk. A failure
/// at the first disk aborts the load everywhere; after it, the tables are incomplete.
async fn commit(cluster: &Cluster, load_id: &str, tables: &[StagedTable]) -> Result<()> {
    let pause = std::env::var(COMMIT_PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    for d in 0..cluster.disk_count() {
        let body = LoadCommit {
            load_id: load_id.to_string(),
            tables: tables.iter().map(|t| t.at(d)).collect(),
        };
        let reply = cluster
            .control(
                d,
                action::LOAD_COMMIT,
                serde_json::to_vec(&body).expect("commit serializes"),
            )
            .await;
        if let Err(e) = reply.and_then(|r| check_commit(d, &r)) {
            abort(cluster, load_id).await;
            if d == 0 {
                return Err(e);
            }
            let names: Vec<&str> = tables.iter().map(|t| t.table.as_str()).collect();
            return Err(HostError::Invalid(format!(
                "load {load_id}: disks 0..{d} committed, then: {e}; tables {names:?} are incomplete until loaded again"
            )));
        }
        if let Some(ms) = pause {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
    }
    Ok(())
}

fn check_commit(d: u32, replies: &[bytes::Bytes]) -> Result<()> {
    let first = replies.first().ok_or_else(|| HostError::Disk {
        disk: d,
        code: "Internal".into(),
        message: "empty reply to load_commit".into(),
    })?;
    serde_json::from_slice::<Vec<TableInfo>>(first)
        .map(|_| ())
        .map_err(|e| HostError::Disk {
            disk: d,
            code: "Internal".into(),
            message: format!("malformed reply to load_commit: {e}"),
        })
}

/// A staged table: the partitions each disk staged (and must hold once committed).
struct StagedTable {
    table: String,
    per_disk: Vec<Vec<u32>>,
    /// Every partition and the disks holding a copy, primary first.
    copies: Vec<PartitionCopies>,
}

impl StagedTable {
    /// The commit of this table at disk `d`, stamped with the disks holding partitions and
    /// every partition's copies.
    fn at(&self, d: u32) -> CommitTable {
        let disks = (0..self.per_disk.len() as u32)
            .filter(|d| !self.per_disk[*d as usize].is_empty())
            .collect();
        CommitTable {
            table: self.table.clone(),
            partitions: self.per_disk[d as usize].clone(),
            disks,
            copies: self.copies.clone(),
        }
    }
}

/// Checks `replicas` against the cluster: 1 ≤ R ≤ disks.
///
/// # Errors
/// [`HostError::TooManyReplicas`]; [`HostError::Invalid`] for 0.
pub fn check_replicas(replicas: u32, disks: u32) -> Result<()> {
    if replicas == 0 {
        return Err(HostError::Invalid("--replicas must be at least 1".into()));
    }
    if replicas > disks {
        return Err(HostError::TooManyReplicas { replicas, disks });
    }
    Ok(())
}

/// Options of a TPC-H load.
#[derive(Clone, Debug)]
pub struct TpchLoad {
    /// Scale factor.
    pub sf: f64,
    /// Partitions per disk for the split tables.
    pub partitions_per_disk: u32,
    /// Rows per row group.
    pub row_group_rows: usize,
    /// Tables (empty: all eight).
    pub tables: Vec<String>,
    /// Copies of each partition (chained declustering, [`replica_disks`]); 1: no replicas.
    pub replicas: u32,
    /// The disks the tables are placed on, e.g. one disk group's (empty: all).
    pub disks: Vec<u32>,
}

impl TpchLoad {
    /// The disks the tables go to, checked against a cluster of `disk_count` disks.
    ///
    /// # Errors
    /// A disk the cluster does not have, or one named twice.
    pub fn placement(&self, disk_count: u32) -> Result<Vec<u32>> {
        if self.disks.is_empty() {
            return Ok((0..disk_count).collect());
        }
        let mut seen = std::collections::BTreeSet::new();
        for d in &self.disks {
            if *d >= disk_count {
                return Err(HostError::Invalid(format!(
                    "cannot place tables on disk {d}: the cluster has disks 0..{}",
                    disk_count.saturating_sub(1)
                )));
            }
            if !seen.insert(*d) {
                return Err(HostError::Invalid(format!("disk {d} is named twice")));
            }
        }
        Ok(self.disks.clone())
    }
}

/// Generates TPC-H at the disks, all tables as one load: nothing is visible until every table
/// is staged on every disk, then all are committed together. `progress(table,
/// rows_so_far_total)` is called as disks report.
pub async fn load_tpch(
    cluster: &Cluster,
    load: &TpchLoad,
    mut progress: impl FnMut(&str, u64),
) -> Result<Vec<(String, u64)>> {
    tpch::validate_sf(load.sf)?;
    let members = load.placement(cluster.disk_count())?;
    check_replicas(load.replicas, members.len() as u32)?;
    let tables: Vec<String> = if load.tables.is_empty() {
        tpch::TABLES.iter().map(|s| s.to_string()).collect()
    } else {
        load.tables.clone()
    };
    for table in &tables {
        tpch::schema(table)?;
    }
    let load_id = new_load_id();
    let stage = async {
        let mut loaded = Vec::new();
        let mut staged = Vec::new();
        for table in &tables {
            let (rows, table_staged) =
                stage_tpch_table(cluster, load, &members, &load_id, table, &mut progress).await?;
            loaded.push((table.clone(), rows));
            staged.push(table_staged);
        }
        Ok((loaded, staged))
    };
    staged_load(cluster, &load_id, stage).await
}

/// Stages one TPC-H table at every disk holding a part of it; checks that each disk's
/// progress stream ended with `done`.
async fn stage_tpch_table(
    cluster: &Cluster,
    load: &TpchLoad,
    members: &[u32],
    load_id: &str,
    table: &str,
    progress: &mut impl FnMut(&str, u64),
) -> Result<(u64, StagedTable)> {
    let disks = cluster.disk_count();
    let n = members.len() as u32;
    let part_count = if tpch::is_unsplit(table) {
        1
    } else {
        n * load.partitions_per_disk.max(1)
    };
    // Part p (1-based) has its primary at disk_of_part (among the members) and copies on the
    // next members of the chain; every copy is generated at its disk (the generator is
    // deterministic).
    let copies: Vec<PartitionCopies> = (1..=part_count)
        .map(|p| PartitionCopies {
            partition: p - 1,
            disks: replica_disks(disk_of_part(p, part_count, n), load.replicas, n)
                .into_iter()
                .map(|i| members[i as usize])
                .collect(),
        })
        .collect();
    let per_disk: Vec<Vec<u32>> = (0..disks)
        .map(|d| {
            (1..=part_count)
                .filter(|p| copies[*p as usize - 1].disks.contains(&d))
                .collect()
        })
        .collect();
    let mut streams = Vec::new();
    for (d, parts) in per_disk.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
        let d = d as u32;
        let req = GenerateTpch {
            sf: load.sf,
            table: table.to_string(),
            parts: parts.clone(),
            part_count,
            row_group_rows: load.row_group_rows,
            load_id: load_id.to_string(),
        };
        let mut c = cluster.client(d);
        let address = cluster.address(d).to_string();
        let body = serde_json::to_vec(&req).expect("request serializes");
        let s = c
            .do_action(arrow_flight::Action::new(action::GENERATE_TPCH, body))
            .await
            .map_err(|e| flight_err(d, &address, e))?;
        streams.push(s.map(move |r| (d, r.map_err(|e| flight_err(d, &address, e)))));
    }
    let mut merged = futures::stream::select_all(streams);
    let mut last = vec![LoadProgress::default(); disks as usize];
    // Rows of the table counted once: each disk's share of the copies it generates.
    let share = |last: &[LoadProgress]| {
        last.iter().map(|p| p.rows).sum::<u64>() / u64::from(load.replicas.max(1))
    };
    while let Some((d, item)) = merged.next().await {
        last[d as usize] = serde_json::from_slice(&item?).map_err(|e| HostError::Disk {
            disk: d,
            code: "Internal".into(),
            message: format!("bad progress: {e}"),
        })?;
        progress(table, share(&last));
    }
    if let Some(d) =
        (0..disks).find(|d| !per_disk[*d as usize].is_empty() && !last[*d as usize].done)
    {
        let message = format!(
            "generating `{table}` ended without `done` after {} rows",
            last[d as usize].rows
        );
        return Err(HostError::Disk {
            disk: d,
            code: "Aborted".into(),
            message,
        });
    }
    let partitions = per_disk
        .into_iter()
        .map(|parts| parts.into_iter().map(|p| p - 1).collect())
        .collect();
    Ok((
        share(&last),
        StagedTable {
            table: table.to_string(),
            per_disk: partitions,
            copies,
        },
    ))
}

/// Input file format of [`load_files`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// Parquet.
    Parquet,
    /// CSV with a header row (schema inferred from the first 1000 rows).
    Csv,
}

/// Runs `f`, turning a panic inside it into an error message.
fn unpanicked<T>(
    f: impl FnOnce() -> std::result::Result<T, String>,
) -> std::result::Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => Err(format!(
            "malformed file (the decoder failed: {})",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("panic")
        )),
    }
}

fn open_batches(
    format: FileFormat,
    path: &PathBuf,
) -> Result<(
    SchemaRef,
    Box<dyn Iterator<Item = Result<RecordBatch>> + Send>,
)> {
    let io = |e: std::io::Error| HostError::Io {
        context: format!("opening {}", path.display()),
        source: e,
    };
    let bad = |m: String| HostError::Invalid(format!("{}: {m}", path.display()));
    match format {
        FileFormat::Parquet => {
            let file = std::fs::File::open(path).map_err(io)?;
            // The parquet crate panics on some malformed footers (an embedded Arrow schema
            // whose flatbuffer lacks a field, found by fuzzing): a user's file must never end
            // the process, so its decoding runs under catch_unwind and a panic is a typed error.
            let build = || {
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(|e| format!("not a readable Parquet file: {e}"))?
                    .with_batch_size(8192)
                    .build()
                    .map_err(|e| e.to_string())
            };
            let reader = unpanicked(build).map_err(bad)?;
            let schema = arrow::record_batch::RecordBatchReader::schema(&reader);
            let p = path.clone();
            let mut reader = reader;
            let batches = std::iter::from_fn(move || {
                unpanicked(|| Ok(reader.next()))
                    .unwrap_or_else(|m| Some(Err(parquet::errors::ParquetError::General(m).into())))
            });
            Ok((
                schema,
                Box::new(batches.map(move |b| {
                    b.map_err(|e| HostError::Invalid(format!("{}: {e}", p.display())))
                })),
            ))
        }
        FileFormat::Csv => {
            use arrow::csv::reader::Format;
            let mut file = std::fs::File::open(path).map_err(io)?;
            let (schema, _) = Format::default()
                .with_header(true)
                .infer_schema(&mut file, Some(1000))
                .map_err(|e| bad(format!("cannot infer a CSV schema: {e}")))?;
            let file = std::fs::File::open(path).map_err(io)?;
            let schema = Arc::new(schema);
            let reader = arrow::csv::ReaderBuilder::new(schema.clone())
                .with_header(true)
                .with_batch_size(8192)
                .build(file)
                .map_err(|e| bad(e.to_string()))?;
            let p = path.clone();
            Ok((
                schema,
                Box::new(reader.map(move |b| {
                    b.map_err(|e| HostError::Invalid(format!("{}: {e}", p.display())))
                })),
            ))
        }
    }
}

/// Loads files into `table`, routing rows with `rule`; each disk gets one partition. The load
/// replaces the table on every disk at once, or (a bad input row, a failed disk) leaves the
/// previous table as it was.
pub async fn load_files(
    cluster: &Cluster,
    table: &str,
    format: FileFormat,
    files: &[PathBuf],
    rule: Decluster,
    progress: impl FnMut(u64),
) -> Result<Vec<PartitionInfo>> {
    load_files_replicated(cluster, table, format, files, rule, 1, progress).await
}

/// [`load_files`] with `replicas` copies of each partition: partition `p` (the rows `rule`
/// routes to disk `p`) is also written to disks `p + 1, …, p + replicas − 1` (mod N). Returns
/// the primary copies' partitions.
pub async fn load_files_replicated(
    cluster: &Cluster,
    table: &str,
    format: FileFormat,
    files: &[PathBuf],
    rule: Decluster,
    replicas: u32,
    progress: impl FnMut(u64),
) -> Result<Vec<PartitionInfo>> {
    adisk_storage::store::validate_table_name(table)?;
    check_replicas(replicas, cluster.disk_count())?;
    if files.is_empty() {
        return Err(HostError::Invalid("no input files".into()));
    }
    let mut router = Router::new(rule, cluster.disk_count());
    let mut schema: Option<SchemaRef> = None;
    for f in files {
        let (s, batches) = open_batches(format, f)?;
        match &schema {
            None => schema = Some(s),
            Some(prev) if prev.fields() != s.fields() => {
                return Err(HostError::Invalid(format!(
                    "{} has a different schema than {}",
                    f.display(),
                    files[0].display()
                )));
            }
            _ => {}
        }
        if router.needs_first_pass() {
            for b in batches {
                router.observe(&b?)?;
            }
        }
    }
    let schema = schema.expect("at least one file");
    let load_id = new_load_id();
    let stage = stage_files(
        cluster, &load_id, table, format, files, schema, router, replicas, progress,
    );
    staged_load(cluster, &load_id, stage).await
}

/// A staging `DoPut`: the disk it writes to, the partition, and the call.
type PutCall = (
    u32,
    u32,
    tokio::task::JoinHandle<Result<Vec<PartitionInfo>>>,
);

/// One `DoPut` per copy of each disk's partition (partition `p`'s copies on
/// [`replica_disks`]`(p, replicas, N)`), each fed through a bounded channel; senders per
/// partition.
fn start_puts(
    cluster: &Cluster,
    load_id: &str,
    table: &str,
    schema: &SchemaRef,
    replicas: u32,
) -> (
    Vec<Vec<tokio::sync::mpsc::Sender<RecordBatch>>>,
    Vec<PutCall>,
) {
    let mut senders: Vec<Vec<tokio::sync::mpsc::Sender<RecordBatch>>> =
        vec![Vec::new(); cluster.disk_count() as usize];
    let mut calls = Vec::new();
    for (partition, d) in (0..cluster.disk_count()).flat_map(|p| {
        replica_disks(p, replicas, cluster.disk_count())
            .into_iter()
            .map(move |d| (p, d))
    }) {
        let (tx, rx) = tokio::sync::mpsc::channel::<RecordBatch>(4);
        senders[partition as usize].push(tx);
        let command = PutCommand::Load {
            table: table.to_string(),
            partition,
            row_group_rows: DEFAULT_ROW_GROUP_ROWS,
            load_id: load_id.to_string(),
        };
        let data = FlightDataEncoderBuilder::new()
            .with_schema(schema.clone())
            .with_flight_descriptor(Some(FlightDescriptor::new_cmd(
                serde_json::to_vec(&command).expect("command serializes"),
            )))
            .build(tokio_stream_from(rx).map(Ok));
        let mut c = cluster.client(d);
        let address = cluster.address(d).to_string();
        calls.push((
            d,
            partition,
            tokio::spawn(async move {
                let results = c
                    .do_put(data)
                    .await
                    .map_err(|e| flight_err(d, &address, e))?;
                let replies: Vec<_> = results
                    .try_collect()
                    .await
                    .map_err(|e| flight_err(d, &address, e))?;
                replies
                    .iter()
                    .map(|r| {
                        serde_json::from_slice(&r.app_metadata).map_err(|e| HostError::Disk {
                            disk: d,
                            code: "Internal".into(),
                            message: format!("malformed load reply: {e}"),
                        })
                    })
                    .collect()
            }),
        ));
    }
    (senders, calls)
}

#[allow(clippy::too_many_arguments)]
async fn stage_files(
    cluster: &Cluster,
    load_id: &str,
    table: &str,
    format: FileFormat,
    files: &[PathBuf],
    schema: SchemaRef,
    mut router: Router,
    replicas: u32,
    mut progress: impl FnMut(u64),
) -> Result<(Vec<PartitionInfo>, Vec<StagedTable>)> {
    let (senders, calls) = start_puts(cluster, load_id, table, &schema, replicas);
    let mut rows_sent = vec![0u64; senders.len()];
    let fed = async {
        let mut rows = 0u64;
        for f in files {
            let (_, batches) = open_batches(format, f)?;
            for b in batches {
                let b = b?;
                rows += b.num_rows() as u64;
                for (d, part) in router.route(&b)?.into_iter().enumerate() {
                    rows_sent[d] += part.num_rows() as u64;
                    for copy in senders[d].iter().filter(|_| part.num_rows() > 0) {
                        if copy.send(part.clone()).await.is_err() {
                            return Ok(()); // the call failed; its error is reported below
                        }
                    }
                }
                progress(rows);
            }
        }
        Ok::<_, HostError>(())
    }
    .await;
    if let Err(e) = fed {
        // A bad input row: reset every call (the disks remove what they wrote), never end
        // the streams as if complete.
        calls.iter().for_each(|(_, _, c)| c.abort());
        return Err(e);
    }
    drop(senders);
    let disks = cluster.disk_count();
    collect_puts(table, calls, &rows_sent, replicas, disks).await
}

/// Waits for every `DoPut`; checks each copy staged exactly the rows its partition was sent.
async fn collect_puts(
    table: &str,
    calls: Vec<PutCall>,
    rows_sent: &[u64],
    replicas: u32,
    disks: u32,
) -> Result<(Vec<PartitionInfo>, Vec<StagedTable>)> {
    let mut infos = Vec::new();
    let mut per_disk = vec![Vec::new(); disks as usize];
    for (d, partition, c) in calls {
        let staged: Vec<PartitionInfo> =
            c.await.map_err(|e| HostError::Invalid(e.to_string()))??;
        let rows: u64 = staged.iter().map(|p| p.rows).sum();
        if rows != rows_sent[partition as usize] {
            return Err(HostError::Disk {
                disk: d,
                code: "DataLoss".into(),
                message: format!(
                    "staged {rows} rows of `{table}` partition {partition}, the host sent {}",
                    rows_sent[partition as usize]
                ),
            });
        }
        per_disk[d as usize].extend(staged.iter().map(|p| p.partition));
        if d == partition {
            infos.extend(staged);
        }
    }
    // Only partitions some disk staged have copies: a disk that got no rows holds none (a
    // small table, or a generator with nothing for that disk).
    let staged: std::collections::BTreeSet<u32> = per_disk.iter().flatten().copied().collect();
    let copies = (0..disks)
        .filter(|p| staged.contains(p))
        .map(|p| PartitionCopies {
            partition: p,
            disks: replica_disks(p, replicas, disks),
        })
        .collect();
    Ok((
        infos,
        vec![StagedTable {
            table: table.to_string(),
            per_disk,
            copies,
        }],
    ))
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> futures::stream::BoxStream<'static, T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

/// Generates a batch stream for one disk's partition (applications' generators).
pub type DiskGenerator =
    Box<dyn FnOnce(u32) -> Box<dyn Iterator<Item = Result<RecordBatch>> + Send> + Send>;

/// Loads generated data into `table`: disk `d`'s partition `d` is what `generators[d]`
/// yields (each generator runs on a blocking thread, all disks at once), staged and committed
/// like a file load (all or nothing); what is sent pays the host link (`host_link_mbps`).
/// `progress` gets the rows sent so far.
///
/// # Errors
/// A generator failing, a disk refusing or failing (the load is then aborted everywhere).
pub async fn load_generated(
    cluster: &Cluster,
    table: &str,
    schema: SchemaRef,
    generators: Vec<DiskGenerator>,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<Vec<PartitionInfo>> {
    adisk_storage::store::validate_table_name(table)?;
    if generators.len() != cluster.disk_count() as usize {
        return Err(HostError::Invalid(format!(
            "{} generators for {} disks",
            generators.len(),
            cluster.disk_count()
        )));
    }
    let load_id = new_load_id();
    let stage = async {
        let (senders, calls) = start_puts(cluster, &load_id, table, &schema, 1);
        let progress = Arc::new(progress);
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let runtime = tokio::runtime::Handle::current();
        let feeds =
            senders
                .into_iter()
                .zip(generators)
                .enumerate()
                .map(|(d, (copies, generate))| {
                    let (progress, sent) = (progress.clone(), sent.clone());
                    let (link, runtime) = (cluster.host_link().cloned(), runtime.clone());
                    tokio::task::spawn_blocking(move || {
                        let mut rows = 0u64;
                        for batch in generate(d as u32) {
                            let batch = batch?;
                            if let Some(link) = &link {
                                let bytes = adisk_core::stats::batch_bytes(&batch);
                                runtime.block_on(link.acquire(bytes * copies.len() as u64));
                            }
                            rows += batch.num_rows() as u64;
                            for copy in &copies {
                                if copy.blocking_send(batch.clone()).is_err() {
                                    return Ok(rows); // the call failed; its error is reported
                                }
                            }
                            let all = sent.fetch_add(
                                batch.num_rows() as u64,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                            progress(all + batch.num_rows() as u64);
                        }
                        Ok::<u64, HostError>(rows)
                    })
                });
        let fed = futures::future::join_all(feeds).await;
        let mut rows_sent = Vec::new();
        for f in fed {
            match f.map_err(|e| HostError::Invalid(format!("generator panicked: {e}")))? {
                Ok(rows) => rows_sent.push(rows),
                Err(e) => {
                    calls.iter().for_each(|(_, _, c)| c.abort());
                    return Err(e);
                }
            }
        }
        collect_puts(table, calls, &rows_sent, 1, cluster.disk_count()).await
    };
    staged_load(cluster, &load_id, stage).await
}
