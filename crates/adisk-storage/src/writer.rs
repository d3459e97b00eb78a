//! Writing one partition: Parquet to a temporary name, checksum, rename.
use crate::{Result, StorageError, io_err};
use adisk_core::protocol::PartitionInfo;
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use std::fs::File;
use std::path::PathBuf;

/// Default rows per row group: small enough that zone maps can skip, large enough to scan fast.
pub const DEFAULT_ROW_GROUP_ROWS: usize = 65_536;
/// Rows per data page (page-level zone maps through the page index).
pub const PAGE_ROWS: usize = 8_192;
/// Upper bound on rows per row group accepted from a request.
pub const MAX_ROW_GROUP_ROWS: usize = 4 * 1024 * 1024;

/// Parquet properties of every partition ActiveDisk writes, its pages compressed with
/// `compression`.
pub fn writer_properties(
    row_group_rows: usize,
    compression: adisk_core::config::Compression,
) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(codec(compression))
        .set_max_row_group_row_count(Some(row_group_rows.clamp(1024, MAX_ROW_GROUP_ROWS)))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_created_by(format!("activedisk {}", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Parquet's codec for `compression`.
fn codec(compression: adisk_core::config::Compression) -> Compression {
    use adisk_core::config::Compression as C;
    match compression {
        C::None => Compression::UNCOMPRESSED,
        C::Lz4 => Compression::LZ4_RAW,
        C::Snappy => Compression::SNAPPY,
    }
}

/// An open partition being written. Nothing is visible until [`PartitionWriter::finish`].
pub struct PartitionWriter {
    pub(crate) table: String,
    pub(crate) partition: u32,
    pub(crate) tmp_path: PathBuf,
    pub(crate) final_path: PathBuf,
    pub(crate) relative: String,
    pub(crate) schema: SchemaRef,
    writer: Option<ArrowWriter<File>>,
    /// The file and its properties until the first rows open `writer` (they choose each
    /// column's encoding, [`plain_columns`]).
    pending: Option<(File, WriterProperties)>,
    rows: u64,
    ndv: Vec<Option<adisk_core::sketch::Hll>>,
    sample: adisk_core::sample::RowSampler,
    bounds: Vec<Bounds>,
    order: Vec<Order>,
    hashes: Vec<u64>,
}

/// The smallest and largest value seen in an integer or date column.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bounds {
    /// Not an integer or date column.
    Untracked,
    /// No non-NULL value yet.
    Empty,
    Seen(i64, i64),
}

impl Bounds {
    fn for_type(t: &arrow::datatypes::DataType) -> Self {
        use arrow::datatypes::DataType::*;
        match t {
            Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | Date32 | Date64 => {
                Bounds::Empty
            }
            _ => Bounds::Untracked,
        }
    }

    /// Widens to the values of `array` (of the type this was made for).
    fn update(&mut self, array: &dyn Array) {
        if matches!(self, Bounds::Untracked) {
            return;
        }
        let Some((lo, hi)) = int_min_max(array) else {
            return;
        };
        *self = match *self {
            Bounds::Seen(a, b) => Bounds::Seen(a.min(lo), b.max(hi)),
            _ => Bounds::Seen(lo, hi),
        };
    }

    fn finish(self) -> Option<[i64; 2]> {
        match self {
            Bounds::Seen(lo, hi) => Some([lo, hi]),
            _ => None,
        }
    }
}

/// Whether an integer or date column's values have never decreased from one row to the next,
/// with no NULL ([`PartitionInfo::sorted`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Order {
    /// Not an integer or date column.
    Untracked,
    /// Never decreased so far; the last value, once a row was seen.
    Ascending(Option<i64>),
    /// A value decreased, or was NULL.
    Broken,
}

impl Order {
    fn for_type(t: &arrow::datatypes::DataType) -> Self {
        match Bounds::for_type(t) {
            Bounds::Untracked => Order::Untracked,
            _ => Order::Ascending(None),
        }
    }

    /// Follows the rows of `array` (of the type this was made for).
    fn update(&mut self, array: &dyn Array) {
        let Order::Ascending(last) = *self else {
            return;
        };
        *self = match array.null_count() {
            0 => ascending_from(array, last).map_or(Order::Broken, Order::Ascending),
            _ => Order::Broken,
        };
    }

    fn finish(self) -> bool {
        matches!(self, Order::Ascending(_))
    }
}

/// `$body` with `$a` bound to `$array` as the primitive array of its integer or date type
/// (whose values convert to i64); None for any other type.
macro_rules! with_int_array {
    ($array:expr, |$a:ident| $body:expr) => {{
        use arrow::array::AsArray;
        use arrow::datatypes::*;
        let array = $array;
        match array.data_type() {
            DataType::Int8 => {
                let $a = array.as_primitive::<Int8Type>();
                $body
            }
            DataType::Int16 => {
                let $a = array.as_primitive::<Int16Type>();
                $body
            }
            DataType::Int32 => {
                let $a = array.as_primitive::<Int32Type>();
                $body
            }
            DataType::Int64 => {
                let $a = array.as_primitive::<Int64Type>();
                $body
            }
            DataType::UInt8 => {
                let $a = array.as_primitive::<UInt8Type>();
                $body
            }
            DataType::UInt16 => {
                let $a = array.as_primitive::<UInt16Type>();
                $body
            }
            DataType::UInt32 => {
                let $a = array.as_primitive::<UInt32Type>();
                $body
            }
            DataType::Date32 => {
                let $a = array.as_primitive::<Date32Type>();
                $body
            }
            DataType::Date64 => {
                let $a = array.as_primitive::<Date64Type>();
                $body
            }
            _ => None,
        }
    }};
}

/// The last value of an integer or date array without NULLs if its values never decrease,
/// starting from `last`; None if one does.
fn ascending_from(array: &dyn Array, last: Option<i64>) -> Option<Option<i64>> {
    with_int_array!(array, |a| {
        let v = a.values();
        let first_ok = match (last, v.first()) {
            (Some(l), Some(f)) => l <= i64::from(*f),
            _ => true,
        };
        (first_ok && v.windows(2).all(|w| w[0] <= w[1]))
            .then(|| v.last().map(|x| i64::from(*x)).or(last))
    })
}

/// Smallest and largest non-NULL value of an integer or date array, as i64.
fn int_min_max(array: &dyn Array) -> Option<(i64, i64)> {
    use arrow::compute::{max, min};
    with_int_array!(array, |a| Some((i64::from(min(a)?), i64::from(max(a)?))))
}

/// Rows of a partition's first batch that choose its columns' encodings: with fewer, every
/// column keeps Parquet's dictionary.
pub const ENCODING_TRIAL_ROWS: usize = 4096;

/// The columns of `first` (a partition's first rows) written without a dictionary: those of
/// whose first [`ENCODING_TRIAL_ROWS`]–8192 rows at least 90 % hold a value seen only once.
/// Parquet's writer otherwise keeps a dictionary until it outgrows 1 MiB: for such a column a
/// row group's dictionary holds nearly every value once and each row adds an index, so its
/// pages are larger than plain ones and slower to decode (TPC-H's `l_extendedprice`: 629 KB
/// against 524 KB per row group of 65 536 rows).
pub fn plain_columns(first: &RecordBatch) -> Vec<String> {
    let rows = first.num_rows().min(2 * ENCODING_TRIAL_ROWS);
    if rows < ENCODING_TRIAL_ROWS {
        return Vec::new();
    }
    let mut hashes = vec![0u64; rows];
    let mut seen = std::collections::HashMap::<u64, u32>::with_capacity(rows);
    let mut plain = Vec::new();
    for (field, column) in first.schema().fields().iter().zip(first.columns()) {
        let column = column.slice(0, rows);
        if column.null_count() > 0
            || adisk_core::hash::hash_column(&column, &mut hashes, false).is_err()
        {
            continue;
        }
        seen.clear();
        for h in &hashes {
            *seen.entry(*h).or_default() += 1;
        }
        let once = seen.values().filter(|n| **n == 1).count();
        if once * 10 >= rows * 9 {
            plain.push(field.name().clone());
        }
    }
    plain
}

impl PartitionWriter {
    pub(crate) fn create(
        table: &str,
        partition: u32,
        tmp_path: PathBuf,
        final_path: PathBuf,
        relative: String,
        schema: SchemaRef,
        properties: WriterProperties,
    ) -> Result<Self> {
        let file =
            File::create(&tmp_path).map_err(io_err(format!("creating {}", tmp_path.display())))?;
        let columns = schema.fields().len();
        let sample = adisk_core::sample::RowSampler::new(schema.clone());
        let bounds = schema
            .fields()
            .iter()
            .map(|f| Bounds::for_type(f.data_type()))
            .collect();
        let order = schema
            .fields()
            .iter()
            .map(|f| Order::for_type(f.data_type()))
            .collect();
        Ok(PartitionWriter {
            table: table.to_string(),
            partition,
            tmp_path,
            final_path,
            relative,
            schema,
            writer: None,
            pending: Some((file, properties)),
            rows: 0,
            ndv: vec![Some(adisk_core::sketch::Hll::default()); columns],
            sample,
            bounds,
            order,
            hashes: Vec::new(),
        })
    }

    /// The Parquet writer, opened with `first` (the first rows written, None: no rows) if it
    /// is not open yet: columns whose first rows are nearly all distinct are written plain.
    fn encoder(&mut self, first: Option<&RecordBatch>) -> Result<&mut ArrowWriter<File>> {
        if let Some((file, properties)) = self.pending.take() {
            let plain = first.map(plain_columns).unwrap_or_default();
            let properties = plain.iter().fold(properties.into_builder(), |b, name| {
                b.set_column_dictionary_enabled(ColumnPath::from(name.as_str()), false)
            });
            let writer = ArrowWriter::try_new(file, self.schema.clone(), Some(properties.build()))
                .map_err(|source| StorageError::Parquet {
                    context: format!("opening writer for {}", self.tmp_path.display()),
                    source,
                })?;
            self.writer = Some(writer);
        }
        let path = &self.tmp_path;
        self.writer
            .as_mut()
            .ok_or_else(|| StorageError::Invalid(format!("{} was already closed", path.display())))
    }

    /// The table's schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Appends a batch (its schema must equal the partition's).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(StorageError::SchemaMismatch {
                table: self.table.clone(),
                reason: format!(
                    "batch schema {:?} differs from {:?}",
                    batch.schema(),
                    self.schema
                ),
            });
        }
        self.encoder(Some(batch))?
            .write(batch)
            .map_err(|source| StorageError::Parquet {
                context: format!("writing {}", self.tmp_path.display()),
                source,
            })?;
        self.rows += batch.num_rows() as u64;
        for (col, b) in batch.columns().iter().zip(self.bounds.iter_mut()) {
            b.update(col.as_ref());
        }
        for (col, o) in batch.columns().iter().zip(self.order.iter_mut()) {
            o.update(col.as_ref());
        }
        self.sample.update(batch);
        // Distinct-value sketches (planner statistics); NULLs are not values.
        self.hashes.resize(batch.num_rows(), 0);
        for (col, sketch) in batch.columns().iter().zip(self.ndv.iter_mut()) {
            let Some(h) = sketch else { continue };
            if adisk_core::hash::hash_column(col, &mut self.hashes, false).is_err() {
                *sketch = None;
                continue;
            }
            for (i, v) in self.hashes.iter().enumerate() {
                if !col.is_null(i) {
                    h.insert(*v);
                }
            }
        }
        Ok(())
    }

    /// Bytes of the row group being encoded, held in memory until it is flushed.
    pub fn in_progress_bytes(&self) -> u64 {
        self.writer
            .as_ref()
            .map(|w| w.in_progress_size() as u64)
            .unwrap_or(0)
    }

    /// Ends the row group in progress (its rows are encoded and written to the file), so that
    /// no more than one row group's rows are held in memory at once.
    ///
    /// # Errors
    /// Encoding or I/O failures.
    pub fn flush_row_group(&mut self) -> Result<()> {
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        w.flush().map_err(|source| StorageError::Parquet {
            context: format!("writing {}", self.tmp_path.display()),
            source,
        })
    }

    /// Bytes written to the file so far (approximate until finish).
    pub fn bytes_written(&self) -> u64 {
        self.writer
            .as_ref()
            .map(|w| w.bytes_written() as u64)
            .unwrap_or(0)
    }

    /// Closes the file, syncs it, checksums it and renames it into place.
    pub(crate) fn finish(mut self) -> Result<PartitionInfo> {
        let sample = std::mem::replace(
            &mut self.sample,
            adisk_core::sample::RowSampler::new(self.schema.clone()),
        )
        .finish();
        self.encoder(None)?;
        let writer = self.writer.take().expect("writer is present until finish");
        let metadata = writer.close().map_err(|source| StorageError::Parquet {
            context: format!("closing {}", self.tmp_path.display()),
            source,
        })?;
        let mut file = File::open(&self.tmp_path)
            .map_err(io_err(format!("reopening {}", self.tmp_path.display())))?;
        let (crc32, bytes) = crate::reader::file_crc32(&mut file)
            .map_err(io_err(format!("checksumming {}", self.tmp_path.display())))?;
        let checksums = crate::integrity::checksum_file(&file, &metadata).map_err(io_err(
            format!("checksumming the chunks of {}", self.tmp_path.display()),
        ))?;
        file.sync_all()
            .map_err(io_err(format!("syncing {}", self.tmp_path.display())))?;
        std::fs::rename(&self.tmp_path, &self.final_path).map_err(io_err(format!(
            "renaming {} into place",
            self.tmp_path.display()
        )))?;
        Ok(PartitionInfo {
            partition: self.partition,
            file: self.relative.clone(),
            rows: self.rows,
            bytes,
            crc32,
            row_groups: metadata.num_row_groups() as u32,
            ndv: std::mem::take(&mut self.ndv),
            bounds: self.bounds.iter().map(|b| b.finish()).collect(),
            sorted: self.order.iter().map(|o| o.finish()).collect(),
            checksums: Some(checksums),
            sample,
        })
    }
}

impl Drop for PartitionWriter {
    fn drop(&mut self) {
        if self.writer.is_some() || self.pending.is_some() {
            // Abandoned (error or cancellation): leave no half partition behind, nor the
            // table directory it made when nothing else is in it (remove_dir of a directory
            // that is not empty fails and keeps it).
            let _ = std::fs::remove_file(&self.tmp_path);
            if let Some(dir) = self.tmp_path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::DataType;
    use std::sync::Arc;

    fn follow(batches: &[Vec<Option<i64>>]) -> bool {
        let mut order = Order::for_type(&DataType::Int64);
        for b in batches {
            order.update(&Int64Array::from(b.clone()));
        }
        order.finish()
    }

    #[test]
    fn a_column_is_sorted_when_no_value_decreases_across_batches_and_none_is_null() {
        assert!(follow(&[
            vec![Some(1), Some(1), Some(2)],
            vec![Some(2), Some(5)]
        ]));
        assert!(follow(&[vec![], vec![Some(3)], vec![]]));
        assert!(follow(&[]));
        // A decrease inside a batch, across two batches, or a NULL breaks it for good.
        assert!(!follow(&[vec![Some(2), Some(1)]]));
        assert!(!follow(&[vec![Some(1), Some(5)], vec![Some(4)]]));
        assert!(!follow(&[vec![Some(1), None, Some(2)]]));
        assert!(!follow(&[vec![Some(3), Some(2)], vec![Some(9)]]));
        // Other types are not followed.
        let mut strings = Order::for_type(&DataType::Utf8);
        strings.update(&StringArray::from(vec!["a", "b"]));
        assert!(!strings.finish());
    }

    /// The choice needs ENCODING_TRIAL_ROWS rows; NULLs keep the dictionary; 90 % is the bound.
    #[test]
    fn plain_columns_at_the_boundaries() {
        use arrow::datatypes::{Field, Schema};
        let batch = |rows: i64, repeat_every: i64, nulls: bool| {
            let values: Int64Array = (0..rows)
                .map(|i| (!nulls || i != 0).then_some(if i % repeat_every == 0 { 0 } else { i }))
                .collect();
            let schema = Arc::new(Schema::new(vec![Field::new("c", DataType::Int64, true)]));
            RecordBatch::try_new(schema, vec![Arc::new(values)]).unwrap()
        };
        let n = ENCODING_TRIAL_ROWS as i64;
        assert!(
            plain_columns(&batch(n - 1, i64::MAX, false)).is_empty(),
            "too few rows"
        );
        assert_eq!(
            plain_columns(&batch(n, i64::MAX, false)),
            vec!["c".to_string()]
        );
        assert!(
            plain_columns(&batch(n, i64::MAX, true)).is_empty(),
            "a NULL"
        );
        // Every 8th row repeats one value: 87.5 % seen once, under 90 %.
        assert!(plain_columns(&batch(n, 8, false)).is_empty());
        // Every 16th: 93.75 %.
        assert_eq!(plain_columns(&batch(n, 16, false)).len(), 1);
        assert!(plain_columns(&batch(0, 1, false)).is_empty());
    }
}
