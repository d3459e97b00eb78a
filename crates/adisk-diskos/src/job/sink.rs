//! Where a job's output goes: the host's stream, or stored results written to partitions and
//! committed only when the whole job succeeded.
use super::state::JobState;
use crate::memory::Account;
use crate::stream::{StreamRx, StreamTx};
use crate::wiring::Router;
use crate::{DiskOsError, Result};
use adisk_core::builder::grant::STORE_BUFFERS;
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

/// Routes a port's rows into one stream per target (blocking on backpressure).
pub(super) fn route_rows(
    mut rx: StreamRx,
    router: &Router,
    txs: &[StreamTx],
    account: &Arc<Account>,
) -> Result<()> {
    while let Some(buffer) = rx.blocking_recv() {
        for (tx, part) in txs.iter().zip(router.route(&buffer.batch, txs.len())?) {
            let Some(part) = part else { continue };
            let slot = tx.blocking_slot().ok_or(DiskOsError::Cancelled)?;
            tx.blocking_send_in(slot, part, buffer.position, account)
                .map_err(|()| DiskOsError::Cancelled)?;
        }
    }
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
