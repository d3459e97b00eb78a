//! Streams: fixed-size buffers between a source and disklets, and the stream sources.
//!
//! A stream is a bounded channel of `buffers_per_stream` [`Buffer`]s: the producer (a reader
//! or a disklet) fills one while the consumer works on another, so reading overlaps computing,
//! and a slow consumer stops the producer (backpressure) instead of growing memory.
//! Every buffer is charged to its job's [`Account`] while it exists.
use crate::memory::Account;
use crate::sched::JobCompute;
use crate::{DiskOsError, Result};
pub use adisk_core::builder::grant::{BUFFER_SLACK_BYTES, buffer_cap, slots_per_stream};
use adisk_core::protocol::{PartitionInfo, TableInfo};
use adisk_core::stats::batch_bytes;
use adisk_storage::store::DiskStore;
use arrow::array::{ArrayRef, BinaryArray, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::physical_optimizer::pruning::PruningPredicate;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use parquet::file::metadata::ParquetMetaData;
use std::collections::HashSet;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// One stream buffer: a batch of rows, charged to its job while alive.
pub struct Buffer {
    /// The rows.
    pub batch: RecordBatch,
    /// Position of the first row in the stream (rows, or bytes for file streams).
    pub position: u64,
    bytes: u64,
    account: Arc<Account>,
    /// The stream slot this buffer occupies (freed when the consumer drops it).
    _slot: Option<OwnedSemaphorePermit>,
}

impl Buffer {
    /// Wraps a batch and charges it to `account` (no stream slot: host-side or test use).
    pub fn new(batch: RecordBatch, position: u64, account: &Arc<Account>) -> Self {
        Self::in_slot(batch, position, account, None)
    }

    /// Wraps a batch of `bytes` (already measured) and charges it to `account`.
    pub fn charged(batch: RecordBatch, bytes: u64, position: u64, account: &Arc<Account>) -> Self {
        Self::sized(batch, bytes, position, account, None)
    }

    fn in_slot(
        batch: RecordBatch,
        position: u64,
        account: &Arc<Account>,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Self {
        let bytes = batch_bytes(&batch);
        Self::sized(batch, bytes, position, account, slot)
    }

    fn sized(
        batch: RecordBatch,
        bytes: u64,
        position: u64,
        account: &Arc<Account>,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Self {
        account.charge(bytes);
        Buffer {
            batch,
            position,
            bytes,
            account: account.clone(),
            _slot: slot,
        }
    }
    /// Bytes charged.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.account.release(self.bytes);
    }
}

/// Sending end of a stream. A stream has `buffers_per_stream` queued buffers plus the one its
/// producer is filling and the one its consumer is processing: [`slots_per_stream`] slots in
/// all, and a producer takes a slot before it fills a buffer, so no more ever exist.
#[derive(Clone)]
pub struct StreamTx {
    tx: mpsc::Sender<Buffer>,
    slots: Arc<Semaphore>,
}

/// Receiving end of a stream.
pub type StreamRx = mpsc::Receiver<Buffer>;

/// Keeps a stream open after its producer dropped its end. A job records a producer's
/// failure before it drops the producer's holds, so whoever sees the stream end after that
/// can tell a finished stream from a cut one ([`crate::job::JobState::intact`]).
pub struct StreamHold(#[allow(dead_code)] mpsc::Sender<Buffer>);

/// A stream of `buffers` queued buffers.
pub fn stream(buffers: u32) -> (StreamTx, StreamRx) {
    let (tx, rx) = mpsc::channel(buffers.max(1) as usize);
    (
        StreamTx {
            tx,
            slots: Arc::new(Semaphore::new(slots_per_stream(buffers) as usize)),
        },
        rx,
    )
}

impl StreamTx {
    /// Waits (blocking the thread) for a free buffer slot.
    pub fn blocking_slot(&self) -> Option<OwnedSemaphorePermit> {
        futures::executor::block_on(self.slots.clone().acquire_owned()).ok()
    }

    /// Waits for a free buffer slot.
    pub async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().acquire_owned().await.ok()
    }

    /// Wraps `batch` in the slot and sends it, blocking the thread. Err if the consumer is gone.
    pub fn blocking_send_in(
        &self,
        slot: OwnedSemaphorePermit,
        batch: RecordBatch,
        position: u64,
        account: &Arc<Account>,
    ) -> Result<u64, ()> {
        let b = Buffer::in_slot(batch, position, account, Some(slot));
        let bytes = b.bytes;
        self.tx.blocking_send(b).map(|()| bytes).map_err(|_| ())
    }

    /// [`StreamTx::blocking_send_in`] for a batch whose [`batch_bytes`] are known.
    pub fn blocking_send_sized(
        &self,
        slot: OwnedSemaphorePermit,
        batch: RecordBatch,
        bytes: u64,
        position: u64,
        account: &Arc<Account>,
    ) -> Result<u64, ()> {
        let b = Buffer::sized(batch, bytes, position, account, Some(slot));
        self.tx.blocking_send(b).map(|()| bytes).map_err(|_| ())
    }

    /// Takes a slot, wraps `batch` and sends it. Err if the consumer is gone.
    pub async fn send_batch(
        &self,
        batch: RecordBatch,
        position: u64,
        account: &Arc<Account>,
    ) -> Result<u64, ()> {
        let slot = self.slot().await.ok_or(())?;
        let b = Buffer::in_slot(batch, position, account, Some(slot));
        let bytes = b.bytes;
        self.tx.send(b).await.map(|()| bytes).map_err(|_| ())
    }

    /// Takes a slot for a buffer charged elsewhere (an inbox's), and sends it at `position`.
    /// Err if the consumer is gone.
    pub async fn send_charged(&self, mut b: Buffer, position: u64) -> Result<u64, ()> {
        let slot = self.slot().await.ok_or(())?;
        b._slot = Some(slot);
        b.position = position;
        let bytes = b.bytes;
        self.tx.send(b).await.map(|()| bytes).map_err(|_| ())
    }

    /// Forwards a buffer from another stream (it keeps its slot there).
    pub async fn send(&self, b: Buffer) -> Result<(), ()> {
        self.tx.send(b).await.map_err(|_| ())
    }

    /// A hold on this stream ([`StreamHold`]).
    pub fn hold(&self) -> StreamHold {
        StreamHold(self.tx.clone())
    }

    /// Completes when the consumer is gone.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// Cuts `batch` into consecutive slices of at most `cap` bytes each ([`batch_bytes`]): the
/// rows are split in proportion to the bytes, and a slice still over the cap (rows of uneven
/// size) is halved until it fits.
///
/// # Errors
/// [`DiskOsError::BufferExceeded`] when a single row is larger than `cap`.
pub fn cut(batch: &RecordBatch, cap: u64) -> Result<Vec<RecordBatch>> {
    Ok(cut_sized(batch, batch_bytes(batch), cap)?
        .into_iter()
        .map(|(piece, _)| piece)
        .collect())
}

/// [`cut`] for a batch of `bytes` ([`batch_bytes`]), each piece with its bytes.
///
/// # Errors
/// As [`cut`].
pub fn cut_sized(batch: &RecordBatch, bytes: u64, cap: u64) -> Result<Vec<(RecordBatch, u64)>> {
    let rows = batch.num_rows();
    if bytes <= cap || rows == 0 {
        return Ok(vec![(batch.clone(), bytes)]);
    }
    let even =
        ((rows as u128 * u128::from(cap)) / u128::from(bytes)).clamp(1, rows as u128) as usize;
    let mut pieces = Vec::with_capacity(rows.div_ceil(even));
    let mut offset = 0;
    while offset < rows {
        let mut len = even.min(rows - offset);
        let mut piece = batch.slice(offset, len);
        let mut piece_bytes = batch_bytes(&piece);
        while piece_bytes > cap {
            if len == 1 {
                return Err(DiskOsError::BufferExceeded {
                    what: format!("row {offset}"),
                    bytes: piece_bytes,
                    cap_bytes: cap,
                });
            }
            len /= 2;
            piece = batch.slice(offset, len);
            piece_bytes = batch_bytes(&piece);
        }
        offset += len;
        pieces.push((piece, piece_bytes));
    }
    Ok(pieces)
}

/// Skip requests of the consumer of a disk-resident stream.
#[derive(Default, Debug)]
pub struct SkipList {
    ranges: Mutex<Vec<Range<u64>>>,
}

impl SkipList {
    /// Adds ranges to skip.
    pub fn add(&self, ranges: impl IntoIterator<Item = Range<u64>>) {
        let mut r = self.ranges.lock().expect("skip lock");
        r.extend(ranges);
    }

    /// True if every position of `range` is to be skipped.
    pub fn covers(&self, range: &Range<u64>) -> bool {
        let r = self.ranges.lock().expect("skip lock");
        let mut pos = range.start;
        let mut sorted: Vec<_> = r
            .iter()
            .filter(|s| s.end > range.start && s.start < range.end)
            .cloned()
            .collect();
        sorted.sort_by_key(|s| s.start);
        for s in sorted {
            if s.start > pos {
                return false;
            }
            pos = pos.max(s.end);
            if pos >= range.end {
                return true;
            }
        }
        pos >= range.end
    }

    /// Row selection for the rows `range` (None if nothing in it is skipped).
    pub fn selection(&self, range: &Range<u64>) -> Option<(RowSelection, u64)> {
        let r = self.ranges.lock().expect("skip lock");
        let mut overlapping: Vec<_> = r
            .iter()
            .filter(|s| s.end > range.start && s.start < range.end)
            .cloned()
            .collect();
        if overlapping.is_empty() {
            return None;
        }
        overlapping.sort_by_key(|s| s.start);
        let mut selectors = Vec::new();
        let mut pos = range.start;
        let mut skipped = 0;
        for s in overlapping {
            let start = s.start.max(pos);
            let end = s.end.min(range.end);
            if start > pos {
                selectors.push(RowSelector::select((start - pos) as usize));
            }
            if end > start {
                selectors.push(RowSelector::skip((end - start) as usize));
                skipped += end - start;
            }
            pos = pos.max(end);
        }
        if pos < range.end {
            selectors.push(RowSelector::select((range.end - pos) as usize));
        }
        Some((RowSelection::from(selectors), skipped))
    }
}

/// What a source read and skipped.
#[derive(Default, Debug)]
pub struct ReadCounters {
    /// Bytes read from storage (measured at the file).
    pub bytes_read: Arc<AtomicU64>,
    /// Bytes of requested columns not read.
    pub bytes_skipped: AtomicU64,
    /// Partitions opened.
    pub partitions_read: AtomicU64,
    /// Partitions skipped whole.
    pub partitions_skipped: AtomicU64,
    /// Row groups read.
    pub row_groups_read: AtomicU64,
    /// Row groups skipped.
    pub row_groups_skipped: AtomicU64,
    /// Rows delivered.
    pub rows_read: AtomicU64,
    /// Rows dropped while decoding by pushed-down filters ([`crate::late`]).
    pub rows_dropped: Arc<AtomicU64>,
    /// Arrow bytes delivered.
    pub bytes_scanned: AtomicU64,
    /// CPU time of the reader.
    pub cpu_ns: AtomicU64,
}

/// Row-group statistics of one Parquet file, for DataFusion's [`PruningPredicate`].
struct RowGroupStatistics<'a> {
    metadata: &'a ParquetMetaData,
    arrow_schema: &'a Schema,
}

impl RowGroupStatistics<'_> {
    fn converter(&self, column: &Column) -> Option<StatisticsConverter<'_>> {
        StatisticsConverter::try_new(
            column.name(),
            self.arrow_schema,
            self.metadata.file_metadata().schema_descr(),
        )
        .ok()
    }
}

impl PruningStatistics for RowGroupStatistics<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.converter(column)?
            .row_group_mins(self.metadata.row_groups().iter())
            .ok()
    }
    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.converter(column)?
            .row_group_maxes(self.metadata.row_groups().iter())
            .ok()
    }
    fn num_containers(&self) -> usize {
        self.metadata.num_row_groups()
    }
    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        self.converter(column)?
            .row_group_null_counts(self.metadata.row_groups().iter())
            .ok()
            .map(|a| Arc::new(a) as ArrayRef)
    }
    fn row_counts(&self) -> Option<ArrayRef> {
        let counts: UInt64Array = self
            .metadata
            .row_groups()
            .iter()
            .map(|rg| Some(rg.num_rows() as u64))
            .collect();
        Some(Arc::new(counts))
    }
    fn contained(
        &self,
        _column: &Column,
        _values: &HashSet<ScalarValue>,
    ) -> Option<arrow::array::BooleanArray> {
        None
    }
}

/// A disk-resident table stream: chosen columns of the local partitions of a table.
pub struct TableScan {
    /// Store to read from.
    pub store: Arc<DiskStore>,
    /// The table.
    pub table: TableInfo,
    /// Column indices to read.
    pub projection: Vec<usize>,
    /// Zone-map predicate (row groups whose statistics cannot match are skipped).
    pub prune: Option<Arc<PruningPredicate>>,
    /// Target bytes per buffer.
    pub buffer_bytes: u64,
    /// Consumer's skip requests (row positions).
    pub skip: Arc<SkipList>,
    /// Counters.
    pub counters: Arc<ReadCounters>,
    /// The job's account.
    pub account: Arc<Account>,
    /// The disk's storage rate limit, if any.
    pub limiter: Option<Arc<ReadLimiter>>,
    /// Compute slots: each buffer is read and decoded under one, charged to the job's program.
    pub compute: JobCompute,
    /// Filters pushed down by the stages reading this scan, applied while decoding.
    pub filters: crate::late::RowFilters,
}

/// Seconds of its rate a [`ReadLimiter`] lets pass at once.
pub const READ_BURST_S: f64 = 0.02;

/// A storage read-rate limit shared by every job of a disk (`--read-mbps`): readers pay for
/// the bytes they read and sleep off any debt, so the disk as a whole reads at most the rate.
#[derive(Debug)]
pub struct ReadLimiter {
    bytes_per_sec: f64,
    state: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl ReadLimiter {
    /// A limiter of `bytes_per_sec`.
    pub fn new(bytes_per_sec: u64) -> Self {
        ReadLimiter {
            bytes_per_sec: bytes_per_sec.max(1) as f64,
            state: std::sync::Mutex::new((0.0, std::time::Instant::now())),
        }
    }
    /// Pays for `bytes` just read; blocks the calling (reader) thread while in debt.
    pub fn pay(&self, bytes: u64) {
        let wait = {
            let mut s = self.state.lock().expect("limiter lock");
            let now = std::time::Instant::now();
            let burst = self.bytes_per_sec * READ_BURST_S;
            s.0 = (s.0 + now.duration_since(s.1).as_secs_f64() * self.bytes_per_sec).min(burst);
            s.1 = now;
            s.0 -= bytes as f64;
            if s.0 < 0.0 {
                -s.0 / self.bytes_per_sec
            } else {
                0.0
            }
        };
        if wait > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(wait));
        }
    }
}

/// Schema of a table projected on `projection`.
pub fn projected_schema(schema: &Schema, projection: &[usize]) -> SchemaRef {
    Arc::new(Schema::new(
        projection
            .iter()
            .map(|i| schema.field(*i).clone())
            .collect::<Vec<_>>(),
    ))
}

impl TableScan {
    /// Reads every local partition in order, sending buffers to `tx`. Runs on a blocking thread.
    pub fn run(self, tx: StreamTx) -> Result<()> {
        let cpu_start = crate::thread_cpu_ns();
        let result = self.read_all(&tx);
        self.counters.cpu_ns.fetch_add(
            crate::thread_cpu_ns().saturating_sub(cpu_start),
            Ordering::Relaxed,
        );
        result
    }

    fn read_all(&self, tx: &StreamTx) -> Result<()> {
        let mut row_base = 0u64;
        for part in &self.table.partitions {
            if self.skip.covers(&(row_base..row_base + part.rows)) {
                self.counters
                    .partitions_skipped
                    .fetch_add(1, Ordering::Relaxed);
                self.counters
                    .bytes_skipped
                    .fetch_add(part.bytes, Ordering::Relaxed);
                row_base += part.rows;
                continue;
            }
            if !self.read_partition(part, row_base, tx)? {
                return Ok(()); // consumer gone
            }
            row_base += part.rows;
        }
        Ok(())
    }

    /// Returns false if the consumer went away.
    fn read_partition(&self, part: &PartitionInfo, row_base: u64, tx: &StreamTx) -> Result<bool> {
        // Every byte decoded below was read and verified against the manifest's checksums
        // in this same read (adisk_storage::integrity): the footer here, each row group's
        // column chunks before decoding them.
        let file = self
            .store
            .partition_reader(part, self.counters.bytes_read.clone())?;
        let meta = self.compute.run(|| file.metadata())??;
        let md = meta.metadata().clone();
        let keep: Vec<bool> = match &self.prune {
            Some(p) => {
                let stats = RowGroupStatistics {
                    metadata: &md,
                    arrow_schema: meta.schema(),
                };
                p.prune(&stats)
                    .unwrap_or_else(|_| vec![true; md.num_row_groups()])
            }
            None => vec![true; md.num_row_groups()],
        };
        let counter = if keep.iter().any(|k| *k) {
            &self.counters.partitions_read
        } else {
            &self.counters.partitions_skipped
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let open = OpenPartition {
            mask: ProjectionMask::roots(
                md.file_metadata().schema_descr(),
                self.projection.iter().copied(),
            ),
            reorder: self.reorder(),
            path: file.path().to_path_buf(),
            file,
            meta,
        };
        let mut rg_base = row_base;
        for (rg_index, rg) in md.row_groups().iter().enumerate() {
            let rg_rows = rg.num_rows() as u64;
            let range = rg_base..rg_base + rg_rows;
            rg_base += rg_rows;
            let projected_bytes: u64 = self
                .projection
                .iter()
                .map(|c| rg.column(*c).compressed_size() as u64)
                .sum();
            if !keep[rg_index] || self.skip.covers(&range) {
                self.counters
                    .row_groups_skipped
                    .fetch_add(1, Ordering::Relaxed);
                self.counters
                    .bytes_skipped
                    .fetch_add(projected_bytes, Ordering::Relaxed);
                continue;
            }
            if !self.read_row_group(&open, (rg_index, range, projected_bytes), tx)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The columns' order in the stream from the file's order, where they differ: the reader
    /// returns the projected columns in file order, the stream's schema has them in the order
    /// asked for.
    fn reorder(&self) -> Option<Vec<usize>> {
        let mut sorted = self.projection.clone();
        sorted.sort_unstable();
        sorted.dedup();
        (sorted != self.projection).then(|| {
            self.projection
                .iter()
                .map(|c| sorted.binary_search(c).unwrap_or(0))
                .collect()
        })
    }

    /// Rows per buffer for row group `rg` from its own width (row groups differ): per column,
    /// its Parquet bytes per row or its Arrow width, whichever is larger (a decimal of 8
    /// Parquet bytes is 16 in Arrow), plus an offset or validity allowance.
    fn rows_per_buffer(
        &self,
        arrow: &Schema,
        rg: &parquet::file::metadata::RowGroupMetaData,
    ) -> usize {
        let rg_rows = rg.num_rows() as u64;
        let per_row: u64 = self
            .projection
            .iter()
            .map(|c| {
                let parquet = rg.column(*c).uncompressed_size() as u64 / rg_rows.max(1);
                let width = arrow
                    .fields()
                    .get(*c)
                    .and_then(|f| f.data_type().primitive_width())
                    .unwrap_or(0) as u64;
                parquet.max(width) + 8
            })
            .sum::<u64>()
            .max(1);
        ((self.buffer_bytes * 4 / 5) / per_row).clamp(1, 1 << 20) as usize
    }

    /// Reads and sends row group `rg_index` of `open` (its rows `range` of the table, its
    /// projected columns `projected_bytes` on disk), less the rows the skip list drops and
    /// those the pushed-down filters reject. False if the consumer went away.
    fn read_row_group(
        &self,
        open: &OpenPartition,
        (rg_index, range, projected_bytes): (usize, Range<u64>, u64),
        tx: &StreamTx,
    ) -> Result<bool> {
        let (meta, md) = (&open.meta, open.meta.metadata());
        let rg_rows = range.end - range.start;
        let rows = self.rows_per_buffer(meta.schema(), md.row_group(rg_index));
        // The row group's chunks are read here, before decoding: the rate limit pays for them.
        let mut paid = self.counters.bytes_read.load(Ordering::Relaxed);
        let chunks = self
            .compute
            .run(|| open.file.row_group(md, rg_index, &open.mask))??;
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(chunks, meta.clone())
            .with_projection(open.mask.clone())
            .with_row_groups(vec![rg_index])
            .with_batch_size(rows);
        if let Some((selection, skipped)) = self.skip.selection(&range) {
            builder = builder.with_row_selection(selection);
            let skipped_bytes = projected_bytes * skipped / rg_rows.max(1);
            self.counters
                .bytes_skipped
                .fetch_add(skipped_bytes, Ordering::Relaxed);
        }
        // Filters pushed down by a join reading this scan, in their state now: a reader
        // with a row filter decodes the filter's columns batch by batch as it is built,
        // so it is built holding a stream slot, as a decoded batch is.
        let mut held_slot = None;
        if let Some(filter) = self
            .filters
            .row_filter(meta.schema(), md.file_metadata().schema_descr())
        {
            let Some(slot) = tx.blocking_slot() else {
                return Ok(false);
            };
            held_slot = Some(slot);
            builder = builder.with_row_filter(filter);
        }
        self.counters
            .row_groups_read
            .fetch_add(1, Ordering::Relaxed);
        let corrupt = |e: &dyn std::fmt::Display| {
            DiskOsError::Storage(adisk_storage::StorageError::Corrupt {
                path: open.path.clone(),
                reason: e.to_string(),
            })
        };
        let mut reader = self
            .compute
            .run(|| builder.build())?
            .map_err(|e| corrupt(&e))?;
        let mut position = range.start;
        loop {
            // Take a stream slot before decoding: at most buffers_per_stream buffers exist.
            // The compute slot is held for the decoding only, never while blocked on the stream.
            let Some(slot) = held_slot.take().or_else(|| tx.blocking_slot()) else {
                return Ok(false);
            };
            let Some(batch) = self.compute.run(|| reader.next())? else {
                break;
            };
            if let Some(l) = &self.limiter {
                let now = self.counters.bytes_read.load(Ordering::Relaxed);
                l.pay(now.saturating_sub(paid));
                paid = now;
            }
            let mut batch = batch.map_err(|e| corrupt(&e))?;
            if let Some(order) = &open.reorder {
                batch = batch.project(order).map_err(|e| DiskOsError::Decode {
                    context: "ordering scanned columns".into(),
                    message: e.to_string(),
                })?;
            }
            if !self.send_capped(tx, slot, batch, &mut position)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A partition file open for a scan: its reader, metadata, the projection, and the order the
/// stream wants its columns in.
struct OpenPartition {
    file: adisk_storage::integrity::PartitionReader,
    meta: parquet::arrow::arrow_reader::ArrowReaderMetadata,
    mask: ProjectionMask,
    reorder: Option<Vec<usize>>,
    path: std::path::PathBuf,
}

impl TableScan {
    /// Sends a decoded batch in `slot`; a batch over the buffer size (rows wider than the row
    /// group's average) is cut into buffers that fit, each in its own slot, and what waits to
    /// be sent is charged to the job meanwhile. False if the consumer went away.
    fn send_capped(
        &self,
        tx: &StreamTx,
        slot: OwnedSemaphorePermit,
        batch: RecordBatch,
        position: &mut u64,
    ) -> Result<bool> {
        let bytes = batch_bytes(&batch);
        let mut held = crate::memory::Held::new(&self.account, bytes);
        let mut slot = Some(slot);
        for (piece, piece_bytes) in cut_sized(&batch, bytes, buffer_cap(self.buffer_bytes))? {
            let slot = match slot.take() {
                Some(s) => s,
                None => match tx.blocking_slot() {
                    Some(s) => s,
                    None => return Ok(false),
                },
            };
            let n = piece.num_rows() as u64;
            held.release(piece_bytes); // the buffer charges it from now on
            let Ok(bytes) =
                tx.blocking_send_sized(slot, piece, piece_bytes, *position, &self.account)
            else {
                return Ok(false);
            };
            self.counters.rows_read.fetch_add(n, Ordering::Relaxed);
            self.counters
                .bytes_scanned
                .fetch_add(bytes, Ordering::Relaxed);
            *position += n;
        }
        Ok(true)
    }
}

/// Schema of a file stream: `offset` (UInt64) and `bytes` (Binary), one row per buffer.
pub fn file_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("offset", DataType::UInt64, false),
        Field::new("bytes", DataType::Binary, false),
    ]))
}

/// A disk-resident byte-range stream of a plain file.
pub struct FileScan {
    /// Absolute path (already checked to be under `files/`).
    pub path: std::path::PathBuf,
    /// First byte.
    pub offset: u64,
    /// Bytes to read (None: to the end).
    pub length: Option<u64>,
    /// Bytes per buffer.
    pub buffer_bytes: u64,
    /// Consumer's skip requests (byte positions).
    pub skip: Arc<SkipList>,
    /// Counters.
    pub counters: Arc<ReadCounters>,
    /// The job's account.
    pub account: Arc<Account>,
    /// Compute slots: each buffer is read under one, charged to the job's program.
    pub compute: JobCompute,
}

impl FileScan {
    /// Reads the range in buffers. Runs on a blocking thread.
    pub fn run(self, tx: StreamTx) -> Result<()> {
        let cpu_start = crate::thread_cpu_ns();
        let io = |e: std::io::Error| {
            DiskOsError::Storage(adisk_storage::StorageError::Io {
                context: format!("reading {}", self.path.display()),
                source: e,
            })
        };
        let file = std::fs::File::open(&self.path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        let end = self
            .length
            .map_or(size, |l| self.offset.saturating_add(l).min(size));
        let mut pos = self.offset.min(end);
        let schema = file_schema();
        let mut buf = vec![0u8; self.buffer_bytes as usize];
        self.counters
            .partitions_read
            .fetch_add(1, Ordering::Relaxed);
        while pos < end {
            let len = (end - pos).min(self.buffer_bytes);
            let range = pos..pos + len;
            if self.skip.covers(&range) {
                self.counters
                    .bytes_skipped
                    .fetch_add(len, Ordering::Relaxed);
                pos += len;
                continue;
            }
            let Some(slot) = tx.blocking_slot() else {
                break;
            };
            let chunk = &mut buf[..len as usize];
            self.compute
                .run(|| file.read_exact_at(chunk, pos))?
                .map_err(io)?;
            self.counters.bytes_read.fetch_add(len, Ordering::Relaxed);
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(UInt64Array::from(vec![pos])),
                    Arc::new(BinaryArray::from(vec![&buf[..len as usize]])),
                ],
            )
            .map_err(|e| DiskOsError::Decode {
                context: "file buffer".into(),
                message: e.to_string(),
            })?;
            let Ok(bytes) = tx.blocking_send_in(slot, batch, pos, &self.account) else {
                break;
            };
            self.counters.rows_read.fetch_add(1, Ordering::Relaxed);
            self.counters
                .bytes_scanned
                .fetch_add(bytes, Ordering::Relaxed);
            pos += len;
        }
        self.counters.cpu_ns.fetch_add(
            crate::thread_cpu_ns().saturating_sub(cpu_start),
            Ordering::Relaxed,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    #[test]
    fn skip_list_selection() {
        let s = SkipList::default();
        s.add([10..20, 15..30]);
        assert!(s.covers(&(12..28)));
        assert!(!s.covers(&(5..12)));
        let (sel, skipped) = s.selection(&(0..40)).unwrap();
        assert_eq!(skipped, 20);
        assert_eq!(sel.row_count(), 20);
    }

    fn strings(lengths: &[usize]) -> RecordBatch {
        let values: Vec<String> = lengths.iter().map(|n| "x".repeat(*n)).collect();
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(arrow::array::StringArray::from(values))],
        )
        .unwrap()
    }

    #[test]
    fn cut_keeps_every_row_in_order_and_every_piece_under_the_cap() {
        // Short rows, then rows 100 times longer: an even split by rows would overflow.
        let lengths: Vec<usize> = (0..1000).map(|i| if i < 900 { 10 } else { 1000 }).collect();
        let batch = strings(&lengths);
        let cap = 8 * 1024;
        let pieces = cut(&batch, cap).unwrap();
        assert!(
            pieces.iter().all(|p| batch_bytes(p) <= cap),
            "{:?}",
            pieces.iter().map(batch_bytes).collect::<Vec<_>>()
        );
        let rows: Vec<usize> = pieces
            .iter()
            .flat_map(|p| {
                p.column(0)
                    .as_string::<i32>()
                    .iter()
                    .map(|s| s.unwrap().len())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(rows, lengths);
        assert_eq!(
            cut(&batch, u64::MAX).unwrap().len(),
            1,
            "a batch under the cap stays whole"
        );
    }

    #[test]
    fn cut_refuses_a_row_larger_than_the_cap() {
        let err = cut(&strings(&[10, 100_000]), 4096).unwrap_err();
        assert!(
            matches!(
                err,
                DiskOsError::BufferExceeded {
                    cap_bytes: 4096,
                    ..
                }
            ),
            "{err}"
        );
    }
}
