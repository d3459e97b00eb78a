//! The streams of a running job graph: what feeds its inputs (tables, files, pipes from other
//! disks, the host, temporary streams) and where its outputs go (the host, other disks by
//! hash, range or broadcast, temporary streams, named results).
//!
//! ```text
//!   table/file ─┐                            ┌─► host (the job's Flight call)
//!   pipe inbox ─┼─► stage ─► stage ─► port ──┼─► router ─► one stream per target ─► DoPut
//!   host input ─┤                            ├─► temp/NAME.arrow  (read back by Source::Temp)
//!   temp stream ┘                            └─► tables/NAME/part-P.parquet (a named result)
//! ```
//!
//! Every stream is a DiskOS stream ([`crate::stream`]): bounded buffers charged to the job.
//! A router's per-target streams are counted in the job's grant too. Temporary streams are
//! Arrow IPC files in a directory of the job's own, written through a cap of the job's
//! temporary-space grant, and removed when the job ends however it ends.
use crate::expr::ExprPlanner;
use crate::expr::evaluate_all;
use crate::memory::Account;
use crate::stream::{ReadCounters, StreamRx, StreamTx};
use crate::{DiskOsError, Result};
use adisk_core::protocol::{ExprBytes, Route};
use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// How an exchange output's rows are routed, planned at the disk.
pub enum Router {
    /// Every row to every target.
    Broadcast,
    /// `hash(keys) mod targets`.
    Hash(Vec<Arc<dyn PhysicalExpr>>),
    /// Target = number of bounds the key is above (NULL keys go to target 0).
    Range(Arc<dyn PhysicalExpr>, Vec<arrow::array::Scalar<ArrayRef>>),
}

impl Router {
    /// Plans `route` over the schema of the port it routes.
    ///
    /// # Errors
    /// Expressions that do not plan or bounds that are not literals of the key's type.
    pub fn new(route: &Route, schema: &SchemaRef, planner: &ExprPlanner) -> Result<Self> {
        Ok(match route {
            Route::Broadcast => Router::Broadcast,
            Route::Hash { keys } => {
                if keys.is_empty() {
                    return Err(DiskOsError::InvalidJob(
                        "a hash exchange needs at least one key".into(),
                    ));
                }
                Router::Hash(
                    keys.iter()
                        .map(|k| planner.physical(k, schema))
                        .collect::<Result<_>>()?,
                )
            }
            Route::Range { key, bounds } => {
                let key = planner.physical(key, schema)?;
                let key_type = key
                    .data_type(schema)
                    .map_err(crate::df_err("typing the range key"))?;
                let bounds = bounds
                    .iter()
                    .map(|b| literal(b, &key_type, planner))
                    .collect::<Result<_>>()?;
                Router::Range(key, bounds)
            }
        })
    }

    /// Splits `batch` by target: `None` for a target that gets no row.
    ///
    /// # Errors
    /// Evaluation of the keys.
    pub fn route(&self, batch: &RecordBatch, targets: usize) -> Result<Vec<Option<RecordBatch>>> {
        let of_row: Vec<u32> = match self {
            Router::Broadcast => return Ok(vec![Some(batch.clone()); targets]),
            Router::Hash(keys) => {
                let arrays = evaluate_all(keys, batch)?;
                let hashes = adisk_core::hash::hash_columns(&arrays, batch.num_rows())
                    .map_err(|e| DiskOsError::InvalidJob(e.to_string()))?;
                hashes.iter().map(|h| (h % targets as u64) as u32).collect()
            }
            Router::Range(key, bounds) => range_targets(key, bounds, batch)?,
        };
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); targets];
        for (row, t) in of_row.iter().enumerate() {
            rows[*t as usize].push(row as u32);
        }
        rows.into_iter()
            .map(|r| {
                if r.is_empty() {
                    return Ok(None);
                }
                take_record_batch(batch, &UInt32Array::from(r))
                    .map(Some)
                    .map_err(|e| DiskOsError::Decode {
                        context: "routing rows".into(),
                        message: e.to_string(),
                    })
            })
            .collect()
    }
}

/// A literal bound of a range exchange, as a one-value array of the key's type.
fn literal(
    bytes: &ExprBytes,
    key_type: &arrow::datatypes::DataType,
    planner: &ExprPlanner,
) -> Result<arrow::array::Scalar<ArrayRef>> {
    let empty = Arc::new(Schema::empty());
    let expr = planner.physical(bytes, &empty)?;
    let one_row = RecordBatch::try_new_with_options(
        empty,
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )
    .map_err(|e| DiskOsError::InvalidJob(e.to_string()))?;
    let value = expr
        .evaluate(&one_row)
        .and_then(|v| v.into_array(1))
        .map_err(crate::df_err("evaluating a range bound"))?;
    let value = arrow::compute::cast(&value, key_type).map_err(|e| {
        DiskOsError::InvalidJob(format!("range bound `{expr}` is not a {key_type}: {e}"))
    })?;
    if value.is_null(0) {
        return Err(DiskOsError::InvalidJob("a range bound is NULL".into()));
    }
    Ok(arrow::array::Scalar::new(value))
}

fn range_targets(
    key: &Arc<dyn PhysicalExpr>,
    bounds: &[arrow::array::Scalar<ArrayRef>],
    batch: &RecordBatch,
) -> Result<Vec<u32>> {
    let values = evaluate_all(std::slice::from_ref(key), batch)?.remove(0);
    let mut targets = vec![0u32; batch.num_rows()];
    for bound in bounds {
        let above: BooleanArray =
            arrow::compute::kernels::cmp::gt(&values, bound).map_err(|e| DiskOsError::Decode {
                context: "range routing".into(),
                message: e.to_string(),
            })?;
        for (row, t) in targets.iter_mut().enumerate() {
            if above.is_valid(row) && above.value(row) {
                *t += 1;
            }
        }
    }
    Ok(targets)
}

/// Completion of a temporary stream: the finished file, or why writing it failed.
type TempDone = Option<std::result::Result<PathBuf, String>>;

/// The temporary streams of one job: a directory of its own under the disk's `tmp/`, the
/// bytes written against the job's temporary-space grant, and a completion signal per stream.
pub struct TempArea {
    dir: PathBuf,
    limit_bytes: u64,
    written: Arc<AtomicU64>,
    done: Mutex<HashMap<String, watch::Sender<TempDone>>>,
}

impl TempArea {
    /// The area of one job: `root/job-N` (created at the first write), at most `limit_bytes`.
    pub fn new(root: &Path, serial: u64, limit_bytes: u64) -> Self {
        TempArea {
            dir: root.join(format!("job-{serial}")),
            limit_bytes,
            written: Arc::new(AtomicU64::new(0)),
            done: Mutex::new(HashMap::new()),
        }
    }

    /// The counter of bytes written to the area (statistics).
    pub fn written_counter(&self) -> Arc<AtomicU64> {
        self.written.clone()
    }

    /// The area's directory (created at the first write).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The job's temporary-space grant, bytes.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Bytes written so far.
    pub fn written_bytes(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn signal(&self, name: &str) -> watch::Sender<TempDone> {
        self.done
            .lock()
            .expect("temp lock")
            .entry(name.to_string())
            .or_insert_with(|| watch::Sender::new(None))
            .clone()
    }

    /// Writes stream `name` from `rx` (blocking): `NAME.arrow.tmp`, renamed to `NAME.arrow` when
    /// complete, then its readers start. Every byte counts against the temporary-space grant.
    ///
    /// # Errors
    /// [`DiskOsError::TempSpaceExceeded`] past the grant, I/O errors; readers are told.
    pub fn write_stream(&self, name: &str, schema: &SchemaRef, mut rx: StreamRx) -> Result<u64> {
        let signal = self.signal(name);
        let result = self.write_file(name, schema, &mut rx);
        signal.send_replace(Some(
            result
                .as_ref()
                .map(|(p, _)| p.clone())
                .map_err(|e| e.to_string()),
        ));
        result.map(|(_, rows)| rows)
    }

    fn write_file(
        &self,
        name: &str,
        schema: &SchemaRef,
        rx: &mut StreamRx,
    ) -> Result<(PathBuf, u64)> {
        let io = |context: String| {
            move |source: std::io::Error| {
                DiskOsError::Storage(adisk_storage::StorageError::Io { context, source })
            }
        };
        std::fs::create_dir_all(&self.dir)
            .map_err(io(format!("creating {}", self.dir.display())))?;
        let (tmp, path) = (
            self.dir.join(format!("{}.arrow.tmp", file_name(name))),
            self.dir.join(format!("{}.arrow", file_name(name))),
        );
        let file =
            std::fs::File::create(&tmp).map_err(io(format!("creating {}", tmp.display())))?;
        let capped = CappedWriter {
            file,
            written: self.written.clone(),
            limit_bytes: self.limit_bytes,
        };
        let ipc = |e: arrow::error::ArrowError| self.ipc_error(&tmp, e);
        let mut writer = arrow::ipc::writer::FileWriter::try_new(capped, schema).map_err(ipc)?;
        let mut rows = 0u64;
        while let Some(buffer) = rx.blocking_recv() {
            rows += buffer.batch.num_rows() as u64;
            writer.write(&buffer.batch).map_err(ipc)?;
        }
        writer.finish().map_err(ipc)?;
        std::fs::rename(&tmp, &path).map_err(io(format!("renaming {}", tmp.display())))?;
        Ok((path, rows))
    }

    fn ipc_error(&self, path: &Path, e: arrow::error::ArrowError) -> DiskOsError {
        if let arrow::error::ArrowError::IoError(_, source) = &e
            && source.kind() == std::io::ErrorKind::StorageFull
        {
            return DiskOsError::TempSpaceExceeded {
                granted_bytes: self.limit_bytes,
                detail: format!("writing {}", path.display()),
            };
        }
        DiskOsError::Decode {
            context: format!("writing {}", path.display()),
            message: e.to_string(),
        }
    }

    /// Reads stream `name` once its writer completed, into `tx` (in the batches it was written in).
    ///
    /// # Errors
    /// The writer failed, the file does not decode, the job was cancelled.
    pub async fn read_stream(
        &self,
        name: &str,
        tx: &StreamTx,
        account: &Arc<Account>,
        counters: &ReadCounters,
        mut cancel: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut done = self.signal(name).subscribe();
        let outcome = tokio::select! {
            r = done.wait_for(|d| d.is_some()) => r.map_err(|_| DiskOsError::Cancelled)?.clone(),
            _ = cancel.wait_for(|c| *c) => return Err(DiskOsError::Cancelled),
        };
        let path = match outcome {
            Some(Ok(path)) => path,
            Some(Err(why)) => {
                return Err(DiskOsError::Pipe(format!(
                    "temporary stream `{name}` was not written: {why}"
                )));
            }
            None => return Err(DiskOsError::Cancelled),
        };
        let file = std::fs::File::open(&path).map_err(|source| {
            DiskOsError::Storage(adisk_storage::StorageError::Io {
                context: format!("opening {}", path.display()),
                source,
            })
        })?;
        let reader = arrow::ipc::reader::FileReader::try_new(file, None).map_err(|e| {
            DiskOsError::Decode {
                context: format!("reading {}", path.display()),
                message: e.to_string(),
            }
        })?;
        let mut position = 0u64;
        for batch in reader {
            let batch = batch.map_err(|e| DiskOsError::Decode {
                context: format!("reading {}", path.display()),
                message: e.to_string(),
            })?;
            let n = batch.num_rows() as u64;
            let Ok(bytes) = tx.send_batch(batch, position, account).await else {
                return Ok(());
            };
            position += n;
            counters.rows_read.fetch_add(n, Ordering::Relaxed);
            counters.bytes_scanned.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes every file of the area (the job ended, however it ended).
    pub fn remove(&self) {
        if self.dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&self.dir)
        {
            tracing::warn!(dir = %self.dir.display(), "could not remove a job's temporary directory: {e}");
        }
    }
}

/// The area goes with its job: dropping it removes the files, whatever path the job took.
impl Drop for TempArea {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A temporary stream's file name: its name with every character outside `[A-Za-z0-9_-]`
/// replaced (names come from the host; they never leave the job's directory).
fn file_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!(
        "{clean}-{:016x}",
        adisk_core::hash::hash_bytes(name.as_bytes())
    )
}

/// A file that refuses to grow past a byte limit shared by all of a job's temporary streams.
struct CappedWriter {
    file: std::fs::File,
    written: Arc<AtomicU64>,
    limit_bytes: u64,
}

impl Write for CappedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let before = self.written.fetch_add(buf.len() as u64, Ordering::SeqCst);
        if before + buf.len() as u64 > self.limit_bytes {
            self.written.fetch_sub(buf.len() as u64, Ordering::SeqCst);
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!(
                    "the job's temporary-space grant of {} bytes is used up",
                    self.limit_bytes
                ),
            ));
        }
        self.file.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type};
    use datafusion::prelude::{col, lit};
    use datafusion_proto::bytes::Serializeable;

    fn bytes(e: datafusion::prelude::Expr) -> ExprBytes {
        ExprBytes(e.to_bytes().unwrap().to_vec())
    }

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(vec![
                Some(5),
                Some(15),
                None,
                Some(25),
                Some(10),
                Some(11),
            ]))],
        )
        .unwrap()
    }

    fn keys(part: &Option<RecordBatch>) -> Vec<Option<i64>> {
        part.as_ref().map_or(vec![], |b| {
            b.column(0).as_primitive::<Int64Type>().iter().collect()
        })
    }

    #[test]
    fn range_routes_by_bounds_and_nulls_go_first() {
        let b = batch();
        let route = Route::Range {
            key: bytes(col("k")),
            bounds: vec![bytes(lit(10i64)), bytes(lit(20i64))],
        };
        let parts = Router::new(&route, &b.schema(), &ExprPlanner::default())
            .unwrap()
            .route(&b, 3)
            .unwrap();
        assert_eq!(keys(&parts[0]), vec![Some(5), None, Some(10)]);
        assert_eq!(keys(&parts[1]), vec![Some(15), Some(11)]);
        assert_eq!(keys(&parts[2]), vec![Some(25)]);
    }

    #[test]
    fn hash_routes_every_row_once_and_agrees_with_the_stable_hash() {
        let b = batch();
        let route = Route::Hash {
            keys: vec![bytes(col("k"))],
        };
        let parts = Router::new(&route, &b.schema(), &ExprPlanner::default())
            .unwrap()
            .route(&b, 4)
            .unwrap();
        let total: usize = parts.iter().flatten().map(|p| p.num_rows()).sum();
        assert_eq!(total, b.num_rows());
        let hashes = adisk_core::hash::hash_columns(&[b.column(0).clone()], b.num_rows()).unwrap();
        for (t, part) in parts.iter().enumerate() {
            for k in keys(part) {
                let row = (0..b.num_rows())
                    .find(|r| {
                        b.column(0)
                            .as_primitive::<Int64Type>()
                            .iter()
                            .nth(*r)
                            .unwrap()
                            == k
                    })
                    .unwrap();
                assert_eq!(hashes[row] % 4, t as u64);
            }
        }
        let all = Router::new(&Route::Broadcast, &b.schema(), &ExprPlanner::default())
            .unwrap()
            .route(&b, 3)
            .unwrap();
        assert!(
            all.iter()
                .all(|p| p.as_ref().is_some_and(|p| p.num_rows() == 6))
        );
    }

    #[test]
    fn temp_stream_capped_and_removed() {
        let root = tempfile::tempdir().unwrap();
        let area = TempArea::new(root.path(), 1, 256);
        let b = batch();
        let (tx, rx) = crate::stream::stream(2);
        let account = Arc::new(Account::default());
        let writer = std::thread::spawn({
            let schema = b.schema();
            let area_dir = root.path().to_path_buf();
            move || {
                let area = TempArea::new(&area_dir, 2, 256);
                let r = area.write_stream("runs/../x", &schema, rx);
                (r.map_err(|e| e.to_string()), area.dir.exists())
            }
        });
        for _ in 0..100 {
            let slot = tx.blocking_slot().unwrap();
            if tx.blocking_send_in(slot, b.clone(), 0, &account).is_err() {
                break;
            }
        }
        drop(tx);
        let (result, existed) = writer.join().unwrap();
        assert!(
            result
                .as_ref()
                .is_err_and(|e| e.contains("temporary space exceeded")),
            "past the grant, a typed error: {result:?}"
        );
        assert!(existed, "the area existed while its job ran");
        assert!(
            !root.path().join("job-2").exists(),
            "dropping the area removed its files"
        );
        drop(area);
    }
}
