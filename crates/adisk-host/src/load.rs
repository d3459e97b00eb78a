//! Loading data into the disks.
//!
//! * TPC-H: every disk generates its own parts with `tpchgen` (range declustering on the
//!   primary key, orders and lineitem co-partitioned); nothing crosses the network but progress.
//! * Parquet / CSV files: the host reads them, routes rows with a declustering rule and streams
//!   each disk its partition over Flight `DoPut`; the disk writes it to a temporary file and
//!   renames it into place when complete.
use crate::cluster::{Cluster, flight_err};
use crate::{HostError, Result};
use adisk_core::protocol::{GenerateTpch, LoadProgress, PartitionInfo, PutCommand, action};
use adisk_storage::decluster::{Decluster, Router, disk_of_part};
use adisk_storage::tpch;
use adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use futures::{StreamExt, TryStreamExt};
use std::path::PathBuf;
use std::sync::Arc;

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
}

/// Generates TPC-H at the disks. `progress(table, rows_so_far_total)` is called as disks report.
pub async fn load_tpch(cluster: &Cluster, load: &TpchLoad, mut progress: impl FnMut(&str, u64)) -> Result<Vec<(String, u64)>> {
    tpch::validate_sf(load.sf)?;
    let disks = cluster.disk_count();
    let tables: Vec<String> = if load.tables.is_empty() { tpch::TABLES.iter().map(|s| s.to_string()).collect() } else { load.tables.clone() };
    let mut loaded = Vec::new();
    for table in &tables {
        tpch::schema(table)?;
        cluster.drop_table(table).await?;
        let part_count = if tpch::is_unsplit(table) { 1 } else { disks * load.partitions_per_disk.max(1) };
        let mut requests = Vec::new();
        for d in 0..disks {
            let parts: Vec<u32> = (1..=part_count).filter(|p| disk_of_part(*p, part_count, disks) == d).collect();
            if parts.is_empty() {
                continue;
            }
            let req = GenerateTpch { sf: load.sf, table: table.clone(), parts, part_count, row_group_rows: load.row_group_rows };
            requests.push((d, serde_json::to_vec(&req).expect("request serializes")));
        }
        let mut streams = Vec::new();
        for (d, body) in requests {
            let mut c = cluster.client(d);
            let address = cluster.address(d).to_string();
            let s = c.do_action(arrow_flight::Action::new(action::GENERATE_TPCH, body)).await.map_err(|e| flight_err(d, &address, e))?;
            streams.push(s.map(move |r| (d, r.map_err(|e| flight_err(d, &address, e)))));
        }
        let mut merged = futures::stream::select_all(streams);
        let mut rows_per_disk = vec![0u64; disks as usize];
        while let Some((d, item)) = merged.next().await {
            let p: LoadProgress = serde_json::from_slice(&item?).map_err(|e| HostError::Disk { disk: d, code: "Internal".into(), message: format!("bad progress: {e}") })?;
            rows_per_disk[d as usize] = p.rows;
            progress(table, rows_per_disk.iter().sum());
        }
        loaded.push((table.clone(), rows_per_disk.iter().sum()));
    }
    Ok(loaded)
}

/// Input file format of [`load_files`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// Parquet.
    Parquet,
    /// CSV with a header row (schema inferred from the first 1000 rows).
    Csv,
}

fn open_batches(format: FileFormat, path: &PathBuf) -> Result<(SchemaRef, Box<dyn Iterator<Item = Result<RecordBatch>> + Send>)> {
    let io = |e: std::io::Error| HostError::Io { context: format!("opening {}", path.display()), source: e };
    let bad = |m: String| HostError::Invalid(format!("{}: {m}", path.display()));
    match format {
        FileFormat::Parquet => {
            let file = std::fs::File::open(path).map_err(io)?;
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?
                .with_batch_size(8192)
                .build()
                .map_err(|e| bad(e.to_string()))?;
            let schema = arrow::record_batch::RecordBatchReader::schema(&reader);
            let p = path.clone();
            Ok((schema, Box::new(reader.map(move |b| b.map_err(|e| HostError::Invalid(format!("{}: {e}", p.display())))))))
        }
        FileFormat::Csv => {
            use arrow::csv::reader::Format;
            let mut file = std::fs::File::open(path).map_err(io)?;
            let (schema, _) = Format::default().with_header(true).infer_schema(&mut file, Some(1000)).map_err(|e| bad(format!("cannot infer a CSV schema: {e}")))?;
            let file = std::fs::File::open(path).map_err(io)?;
            let schema = Arc::new(schema);
            let reader = arrow::csv::ReaderBuilder::new(schema.clone()).with_header(true).with_batch_size(8192).build(file).map_err(|e| bad(e.to_string()))?;
            let p = path.clone();
            Ok((schema, Box::new(reader.map(move |b| b.map_err(|e| HostError::Invalid(format!("{}: {e}", p.display())))))))
        }
    }
}

/// Loads files into `table`, routing rows with `rule`; each disk gets (and replaces) one partition.
pub async fn load_files(cluster: &Cluster, table: &str, format: FileFormat, files: &[PathBuf], rule: Decluster, mut progress: impl FnMut(u64)) -> Result<Vec<PartitionInfo>> {
    adisk_storage::store::validate_table_name(table)?;
    if files.is_empty() {
        return Err(HostError::Invalid("no input files".into()));
    }
    let disks = cluster.disk_count();
    let mut router = Router::new(rule, disks);
    let mut schema: Option<SchemaRef> = None;
    for f in files {
        let (s, batches) = open_batches(format, f)?;
        match &schema {
            None => schema = Some(s),
            Some(prev) if prev.fields() != s.fields() => return Err(HostError::Invalid(format!("{} has a different schema than {}", f.display(), files[0].display()))),
            _ => {}
        }
        if router.needs_first_pass() {
            for b in batches {
                router.observe(&b?)?;
            }
        }
    }
    let schema = schema.expect("at least one file");
    cluster.drop_table(table).await?;
    // One DoPut per disk, fed through a bounded channel.
    let mut senders = Vec::new();
    let mut calls = Vec::new();
    for d in 0..disks {
        let (tx, rx) = tokio::sync::mpsc::channel::<RecordBatch>(4);
        senders.push(tx);
        let cmd = serde_json::to_vec(&PutCommand::Load { table: table.to_string(), partition: d, row_group_rows: DEFAULT_ROW_GROUP_ROWS }).expect("command serializes");
        let data = FlightDataEncoderBuilder::new()
            .with_schema(schema.clone())
            .with_flight_descriptor(Some(FlightDescriptor::new_cmd(cmd)))
            .build(tokio_stream_from(rx).map(Ok));
        let mut c = cluster.client(d);
        let address = cluster.address(d).to_string();
        calls.push(tokio::spawn(async move {
            let results = c.do_put(data).await.map_err(|e| flight_err(d, &address, e))?;
            let replies: Vec<_> = results.try_collect().await.map_err(|e| flight_err(d, &address, e))?;
            let infos: Vec<PartitionInfo> = replies.iter().filter_map(|r| serde_json::from_slice(&r.app_metadata).ok()).collect();
            Ok::<_, HostError>(infos)
        }));
    }
    let mut rows = 0u64;
    for f in files {
        let (_, batches) = open_batches(format, f)?;
        for b in batches {
            let b = b?;
            rows += b.num_rows() as u64;
            for (d, part) in router.route(&b)?.into_iter().enumerate() {
                if part.num_rows() > 0 && senders[d].send(part).await.is_err() {
                    break; // the call failed; its error is reported below
                }
            }
            progress(rows);
        }
    }
    drop(senders);
    let mut infos = Vec::new();
    for c in calls {
        infos.extend(c.await.map_err(|e| HostError::Invalid(e.to_string()))??);
    }
    Ok(infos)
}

fn tokio_stream_from<T: Send + 'static>(mut rx: tokio::sync::mpsc::Receiver<T>) -> futures::stream::BoxStream<'static, T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}
