//! Where a job's output goes: the host's stream, or stored results written to partitions and
//! committed only when the whole job succeeded.
use super::state::JobState;
use crate::memory::{Account, Held};
use crate::stream::{StreamRx, StreamTx};
use crate::wiring::Router;
use crate::{DiskOsError, Result};
use adisk_core::builder::grant::STORE_BUFFERS;
use adisk_core::stats::batch_bytes;
use adisk_storage::store::DiskStore;
use adisk_storage::writer::PartitionWriter;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Named-result partitions written but not yet committed (the job must succeed first).
pub(super) type PendingResults = Arc<Mutex<Vec<PartitionWriter>>>;

/// Moves a port's buffers to the host's stream (they keep their slots).
pub(super) async fn host_sink(
    mut out: StreamRx,
    host_tx: StreamTx,
    state: Arc<JobState>,
) -> Result<()> {
    while let Some(b) = out.recv().await {
        state
            .rows_shipped
            .fetch_add(b.batch.num_rows() as u64, Ordering::Relaxed);
        if host_tx.send(b).await.is_err() {
            return Err(DiskOsError::Cancelled);
        }
    }
    Ok(())
}

/// A target's routed rows are sent once they reach this many rows or [`ROUTED_BYTES`] (or the
/// input ends): a selective stage split among many disks would otherwise send a message of a
/// few dozen rows per input buffer and target. TPC-H Q14's `disks` plan sent about 280 such
/// messages per disk, and each costs the sender and the receiver more than its rows do.
pub const ROUTED_ROWS: usize = 8192;

/// See [`ROUTED_ROWS`].
pub const ROUTED_BYTES: u64 = 512 * 1024;

/// The parts routed to one target and not sent yet, charged to the job meanwhile, in the
/// stream slot (a buffer the job's grant counts) they will be sent in.
struct Pending {
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
    parts: Vec<RecordBatch>,
    rows: usize,
    bytes: u64,
    position: u64,
    held: Held,
}

/// Routes a port's rows into one stream per target (blocking on backpressure), gathering
/// each target's small parts into one batch of up to [`ROUTED_ROWS`] rows and half of
/// `buffer_bytes` (at most [`ROUTED_BYTES`]). The parts wait in the stream slot they will
/// be sent in, taken when the first one arrives: what waits stays within the buffers the
/// job's grant counts for the target's stream.
pub(super) fn route_rows(
    mut rx: StreamRx,
    router: &Router,
    txs: &[StreamTx],
    (account, buffer_bytes): (&Arc<Account>, u64),
) -> Result<()> {
    let gather = (buffer_bytes / 2).clamp(1, ROUTED_BYTES);
    let mut pending: Vec<Pending> = txs
        .iter()
        .map(|_| Pending {
            slot: None,
            parts: Vec::new(),
            rows: 0,
            bytes: 0,
            position: 0,
            held: Held::new(account, 0),
        })
        .collect();
    while let Some(buffer) = rx.blocking_recv() {
        for (i, part) in router
            .route(&buffer.batch, txs.len())?
            .into_iter()
            .enumerate()
        {
            let (Some(part), Some(p)) = (part, pending.get_mut(i)) else {
                continue;
            };
            let bytes = batch_bytes(&part);
            // What is gathered stays under `gather`: it goes first if this part would
            // take it over, and a part as large goes on its own.
            if p.bytes + bytes > gather || p.rows + part.num_rows() > ROUTED_ROWS {
                send_pending(&txs[i], p, account)?;
            }
            if p.parts.is_empty() {
                p.position = buffer.position;
                p.slot = Some(txs[i].blocking_slot().ok_or(DiskOsError::Cancelled)?);
            }
            p.held = Held::new(account, p.bytes + bytes);
            (p.rows, p.bytes) = (p.rows + part.num_rows(), p.bytes + bytes);
            p.parts.push(part);
            if p.rows >= ROUTED_ROWS || p.bytes >= gather {
                send_pending(&txs[i], p, account)?;
            }
        }
    }
    for (tx, p) in txs.iter().zip(&mut pending) {
        send_pending(tx, p, account)?;
    }
    Ok(())
}

/// Sends what `p` gathered for `tx` as one batch (nothing if it gathered nothing).
fn send_pending(tx: &StreamTx, p: &mut Pending, account: &Arc<Account>) -> Result<()> {
    if p.parts.is_empty() {
        return Ok(());
    }
    let parts = std::mem::take(&mut p.parts);
    let batch = match parts.as_slice() {
        [one] => one.clone(),
        _ => arrow::compute::concat_batches(&parts[0].schema(), &parts).map_err(|e| {
            DiskOsError::Decode {
                context: "gathering routed rows".into(),
                message: e.to_string(),
            }
        })?,
    };
    drop(parts);
    let slot = match p.slot.take() {
        Some(slot) => slot,
        None => tx.blocking_slot().ok_or(DiskOsError::Cancelled)?,
    };
    p.held.release(p.bytes); // the buffer charges it from now on
    (p.rows, p.bytes) = (0, 0);
    tx.blocking_send_in(slot, batch, p.position, account)
        .map_err(|()| DiskOsError::Cancelled)?;
    Ok(())
}

/// Writes a named-result partition through the storage layer's tmp path; the supervisor
/// commits it (rename + manifest) only if the whole job succeeds. Its row group in progress is
/// charged to the job and ended at [`STORE_BUFFERS`] buffers.
pub(super) fn write_result(
    store: &DiskStore,
    (name, partition): (&str, u32),
    schema: SchemaRef,
    mut rx: StreamRx,
    pending: &PendingResults,
    (account, buffer_bytes): (&Arc<Account>, u64),
) -> Result<()> {
    let rows = store_row_group_rows(&schema, buffer_bytes);
    let writer = store.create_partition(name, partition, schema, rows)?;
    let mut writer = ChargedWriter::new(writer, account, buffer_bytes);
    while let Some(buffer) = rx.blocking_recv() {
        writer.write(&buffer.batch)?;
    }
    pending.lock().expect("pending lock").push(writer.finish()?);
    Ok(())
}

/// Rows per row group of a stored output: about [`STORE_BUFFERS`] buffers of rows.
pub(super) fn store_row_group_rows(schema: &arrow::datatypes::Schema, buffer_bytes: u64) -> usize {
    (STORE_BUFFERS * buffer_bytes / estimated_row_bytes(schema).max(1)).max(1) as usize
}

/// A partition writer whose row group in progress is charged to the job's account, and
/// ended when it reaches [`STORE_BUFFERS`] buffers (whatever the row count).
pub(super) struct ChargedWriter {
    pub(super) writer: PartitionWriter,
    pub(super) account: Arc<Account>,
    pub(super) charged: u64,
    pub(super) cap: u64,
}

impl ChargedWriter {
    pub(super) fn new(writer: PartitionWriter, account: &Arc<Account>, buffer_bytes: u64) -> Self {
        ChargedWriter {
            writer,
            account: account.clone(),
            charged: 0,
            cap: STORE_BUFFERS.saturating_mul(buffer_bytes),
        }
    }

    pub(super) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer.write(batch)?;
        if self.writer.in_progress_bytes() >= self.cap {
            self.writer.flush_row_group()?;
        }
        self.recharge();
        Ok(())
    }

    pub(super) fn recharge(&mut self) {
        let now = self.writer.in_progress_bytes();
        self.account.release(self.charged);
        self.account.charge(now);
        self.charged = now;
    }

    /// Ends the last row group (nothing stays in memory until the commit).
    pub(super) fn finish(mut self) -> Result<PartitionWriter> {
        self.writer.flush_row_group()?;
        self.account.release(self.charged);
        Ok(self.writer)
    }
}

/// A [`StoredStream::Split`] being written: a partition per value of `by`.
pub(super) struct SplitWrite {
    pub(super) store: Arc<DiskStore>,
    pub(super) name: String,
    pub(super) first: u32,
    pub(super) by: String,
    pub(super) max: u32,
    pub(super) buffer_bytes: u64,
    pub(super) account: Arc<Account>,
    pub(super) pending: PendingResults,
}

impl SplitWrite {
    /// Writes every value's rows to its partition (row groups of at most [`STORE_BUFFERS`]
    /// buffers, charged to the job while held); each partition is finished when the value
    /// changes.
    pub(super) fn run(self, schema: SchemaRef, mut rx: StreamRx) -> Result<()> {
        let bad = |m: String| DiskOsError::InvalidJob(format!("split result `{}`: {m}", self.name));
        let by = schema
            .index_of(&self.by)
            .map_err(|_| bad(format!("the stream has no column `{}`", self.by)))?;
        if schema.field(by).data_type() != &arrow::datatypes::DataType::UInt32 {
            return Err(bad(format!("column `{}` is not UInt32", self.by)));
        }
        let kept_columns: Vec<usize> = (0..schema.fields().len()).filter(|i| *i != by).collect();
        let kept = Arc::new(
            schema
                .project(&kept_columns)
                .map_err(|e| bad(e.to_string()))?,
        );
        let mut current: Option<(u32, ChargedWriter)> = None;
        while let Some(buffer) = rx.blocking_recv() {
            let batch = &buffer.batch;
            let values = batch
                .column(by)
                .as_any()
                .downcast_ref::<arrow::array::UInt32Array>()
                .expect("checked UInt32");
            let mut start = 0;
            while start < batch.num_rows() {
                let v = values.value(start);
                let end = (start..batch.num_rows())
                    .find(|&i| values.value(i) != v)
                    .unwrap_or(batch.num_rows());
                if current.as_ref().is_none_or(|(c, _)| *c != v) {
                    self.check_value(current.as_ref().map(|(c, _)| *c), v)
                        .map_err(bad)?;
                    if let Some((_, w)) = current.take() {
                        self.keep(w)?;
                    }
                    current = Some((v, self.open(v, &kept)?));
                }
                let rows = batch
                    .slice(start, end - start)
                    .project(&kept_columns)
                    .map_err(|e| bad(e.to_string()))?;
                current.as_mut().expect("opened above").1.write(&rows)?;
                start = end;
            }
        }
        if let Some((_, w)) = current {
            self.keep(w)?;
        }
        Ok(())
    }

    /// A value may follow the previous one if it is not smaller and within the partitions.
    pub(super) fn check_value(
        &self,
        previous: Option<u32>,
        v: u32,
    ) -> std::result::Result<(), String> {
        if let Some(c) = previous
            && v < c
        {
            return Err(format!("`{}` went down from {c} to {v}", self.by));
        }
        if v >= self.max {
            return Err(format!(
                "value {v} of `{}` is past the {} partitions the job allows",
                self.by, self.max
            ));
        }
        Ok(())
    }

    /// The partition of value `v`.
    pub(super) fn open(&self, v: u32, kept: &SchemaRef) -> Result<ChargedWriter> {
        let rows = store_row_group_rows(kept, self.buffer_bytes);
        let w = self
            .store
            .create_partition(&self.name, self.first + v, kept.clone(), rows)?;
        Ok(ChargedWriter::new(w, &self.account, self.buffer_bytes))
    }

    /// A finished partition, committed with the job.
    pub(super) fn keep(&self, w: ChargedWriter) -> Result<()> {
        self.pending.lock().expect("pending lock").push(w.finish()?);
        Ok(())
    }
}

/// Bytes of one row of `schema`, for sizing row groups: fixed widths as they are, 32 bytes
/// for each variable-width value.
pub(super) fn estimated_row_bytes(schema: &arrow::datatypes::Schema) -> u64 {
    schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            arrow::datatypes::DataType::FixedSizeBinary(n) => *n as u64,
            t => t.primitive_width().map_or(32, |w| w as u64),
        })
        .sum()
}

pub(super) async fn commit_results(
    store: &Arc<DiskStore>,
    writers: Vec<PartitionWriter>,
    written: &Arc<AtomicU64>,
) -> Result<()> {
    if writers.is_empty() {
        return Ok(());
    }
    let (store, written) = (store.clone(), written.clone());
    tokio::task::spawn_blocking(move || {
        writers.into_iter().try_for_each(|w| {
            store
                .commit_partition(w)
                .map(|info| written.fetch_add(info.bytes, Ordering::Relaxed))
                .map(|_| ())
        })
    })
    .await
    .map_err(|e| DiskOsError::InvalidJob(format!("committing results panicked: {e}")))?
    .map_err(DiskOsError::Storage)
}

#[cfg(test)]
mod route_tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::physical_expr::expressions::Column;

    /// Routes `buffers` buffers of `rows` keys (0, 1, 2, …) by hash to `targets` targets with
    /// `buffer_bytes` buffers; per target, the batches it received as (rows, bytes), and every
    /// key received. Also checks that nothing stays charged to the job.
    fn route(
        buffers: i64,
        rows: i64,
        targets: usize,
        buffer_bytes: u64,
    ) -> (Vec<Vec<(usize, u64)>>, Vec<i64>) {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let router = Router::Hash(vec![Arc::new(Column::new("k", 0))]);
        let account = Arc::new(Account::default());
        let (in_tx, in_rx) = crate::stream::stream(8);
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..targets).map(|_| crate::stream::stream(64)).unzip();
        let producer = {
            let account = account.clone();
            std::thread::spawn(move || {
                for i in 0..buffers {
                    let keys = Int64Array::from_iter_values(i * rows..(i + 1) * rows);
                    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(keys)]).unwrap();
                    let slot = in_tx.blocking_slot().unwrap();
                    in_tx
                        .blocking_send_in(slot, batch, i as u64, &account)
                        .unwrap();
                }
            })
        };
        let router_thread = {
            let account = account.clone();
            std::thread::spawn(move || route_rows(in_rx, &router, &txs, (&account, buffer_bytes)))
        };
        let consumers: Vec<_> = rxs
            .into_iter()
            .map(|mut rx| {
                std::thread::spawn(move || {
                    let mut got = (Vec::new(), Vec::new());
                    while let Some(b) = rx.blocking_recv() {
                        got.0.push((b.batch.num_rows(), batch_bytes(&b.batch)));
                        let keys = b.batch.column(0).as_primitive::<Int64Type>();
                        got.1.extend(keys.values().iter().copied());
                    }
                    got
                })
            })
            .collect();
        producer.join().unwrap();
        router_thread.join().unwrap().unwrap();
        let (mut batches, mut all) = (Vec::new(), Vec::new());
        for c in consumers {
            let (b, keys) = c.join().unwrap();
            batches.push(b);
            all.extend(keys);
        }
        all.sort_unstable();
        assert_eq!(all, (0..buffers * rows).collect::<Vec<i64>>());
        assert_eq!(account.in_use(), 0);
        (batches, all)
    }

    /// 500 buffers of 30 rows, hashed to 3 targets: each target gets a few gathered batches
    /// (not 500 of about ten rows), every row arrives exactly once.
    #[test]
    fn small_routed_parts_are_gathered_and_every_row_arrives_once() {
        let (batches, _) = route(500, 30, 3, 1 << 20);
        for b in &batches {
            assert!((1..=3).contains(&b.len()), "{b:?}");
        }
    }

    /// At the thresholds: no gathered batch passes ROUTED_ROWS, nor half of a small buffer
    /// (a part of 30 keys is 240 bytes; half of a 2 KiB buffer holds four of them), and one
    /// buffer of one row, or none at all, still arrives or ends the streams.
    #[test]
    fn gathered_batches_stay_within_the_row_and_byte_limits() {
        let (batches, _) = route(1000, 30, 1, 1 << 20);
        assert!(
            batches[0].iter().all(|(r, _)| *r <= ROUTED_ROWS),
            "{:?}",
            batches[0]
        );
        assert_eq!(batches[0].len(), 30_000usize.div_ceil(ROUTED_ROWS));
        let (batches, _) = route(100, 30, 1, 2048);
        assert!(
            batches[0].iter().all(|(_, b)| *b <= 1024),
            "{:?}",
            batches[0]
        );
        assert!(batches[0].len() >= 25, "{:?}", batches[0]);
        let (batches, keys) = route(1, 1, 3, 1 << 20);
        assert_eq!(
            (batches.iter().map(Vec::len).sum::<usize>(), keys),
            (1, vec![0])
        );
        let (batches, _) = route(0, 30, 3, 1 << 20);
        assert!(batches.iter().all(Vec::is_empty));
    }
}
