//! `bloom_probe`: the probe side of a Bloom-filter semi-join.
use crate::disklet::{Disklet, Emitter, InputBuffer};
use crate::expr::ExprPlanner;
use crate::expr::evaluate_all;
use crate::{DiskOsError, Result};
use adisk_core::bloom::BloomFilter;
use adisk_core::hash::hash_columns;
use adisk_core::protocol::ExprBytes;
use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::DataFusionError;
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// The `bloom_probe` disklet. The filter lives in its scratch (shared with the scan filter
/// it pushes down, not copied).
pub struct BloomProbe {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    filter: Arc<BloomFilter>,
    schema: SchemaRef,
}

impl BloomProbe {
    /// Checks the filter against the scratch grant and plans the key expressions.
    pub fn new(
        keys: &[ExprBytes],
        filter: BloomFilter,
        input: &SchemaRef,
        scratch_bytes: u64,
        planner: &ExprPlanner,
    ) -> Result<Self> {
        filter.validate().map_err(DiskOsError::InvalidJob)?;
        if filter.size_bytes() as u64 > scratch_bytes {
            return Err(DiskOsError::ScratchExceeded {
                disklet: "bloom_probe",
                granted_bytes: scratch_bytes,
                detail: format!("the Bloom filter has {} bytes", filter.size_bytes()),
            });
        }
        if keys.is_empty() {
            return Err(DiskOsError::InvalidJob(
                "bloom_probe needs at least one key".into(),
            ));
        }
        let keys = keys
            .iter()
            .map(|k| planner.physical(k, input))
            .collect::<Result<_>>()?;
        Ok(BloomProbe {
            keys,
            filter: Arc::new(filter),
            schema: input.clone(),
        })
    }
}

impl Disklet for BloomProbe {
    fn name(&self) -> &'static str {
        "bloom_probe"
    }
    /// The filter itself, for the scan to test each row's keys before it decodes the row's
    /// other columns (late materialization): a filter that drops most rows then saves most of
    /// the decoding.
    fn scan_filters(&self, input: usize) -> Vec<Arc<dyn PhysicalExpr>> {
        if input != 0 {
            return Vec::new();
        }
        let types = self.keys.iter().map(|k| k.data_type(&self.schema));
        let Ok(types) = types.collect::<datafusion::common::Result<Vec<_>>>() else {
            return Vec::new();
        };
        vec![Arc::new(BloomContains {
            keys: self.keys.clone(),
            types,
            filter: self.filter.clone(),
        })]
    }
    fn row_subset_of_input(&self) -> Option<Vec<String>> {
        Some(
            self.output_schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        )
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let batch = input.batch;
        let keys = evaluate_all(&self.keys, batch)?;
        let hashes = hash_columns(&keys, batch.num_rows())
            .map_err(|e| DiskOsError::InvalidJob(e.to_string()))?;
        // Rows with a NULL key can never join; the stable hash maps NULL to a constant that is
        // treated like any value here and filtered by the join at the host.
        let mask = BooleanArray::new(self.filter.probe(&hashes), None);
        let kept = filter_record_batch(batch, &mask).map_err(|e| DiskOsError::Decode {
            context: "bloom filtering".into(),
            message: e.to_string(),
        })?;
        out.emit(0, kept);
        Ok(())
    }
    fn finish(&mut self, _out: &mut Emitter) -> Result<()> {
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.filter.size_bytes() as u64
    }
}

/// `bloom_contains(keys…)`: whether a row's keys may be in the filter (the same test as
/// [`BloomProbe`], as an expression a scan can evaluate while it decodes). Keys that evaluate
/// to types hashing differently from the probe's (a column the file stores as another type)
/// are an error, so that the scan keeps every row rather than dropping by a wrong hash.
#[derive(Debug)]
struct BloomContains {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The keys' types on the probe's input.
    types: Vec<DataType>,
    filter: Arc<BloomFilter>,
}

impl PartialEq for BloomContains {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.filter, &other.filter) && self.keys == other.keys
    }
}
impl Eq for BloomContains {}
impl std::hash::Hash for BloomContains {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.filter) as usize).hash(state);
        self.keys.hash(state);
    }
}

impl std::fmt::Display for BloomContains {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bloom_contains(")?;
        for (i, k) in self.keys.iter().enumerate() {
            write!(f, "{}{k}", if i > 0 { ", " } else { "" })?;
        }
        write!(f, ")")
    }
}

/// Whether values of types `a` and `b` hash alike ([`hash_columns`]): the same type, integers
/// of any width, or strings of any kind.
fn hash_alike(a: &DataType, b: &DataType) -> bool {
    a == b || (a.is_integer() && b.is_integer()) || (is_string(a) && is_string(b))
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

impl PhysicalExpr for BloomContains {
    fn data_type(&self, _input: &Schema) -> datafusion::common::Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn nullable(&self, _input: &Schema) -> datafusion::common::Result<bool> {
        Ok(false)
    }
    fn evaluate(&self, batch: &RecordBatch) -> datafusion::common::Result<ColumnarValue> {
        let keys = evaluate_all(&self.keys, batch)
            .map_err(|e| DataFusionError::Execution(e.to_string()))?;
        for (k, t) in keys.iter().zip(&self.types) {
            if !hash_alike(k.data_type(), t) {
                return Err(DataFusionError::Execution(format!(
                    "bloom_contains: a key of type {} where the probe hashes {t}",
                    k.data_type()
                )));
            }
        }
        let hashes = hash_columns(&keys, batch.num_rows())
            .map_err(|e| DataFusionError::Execution(e.to_string()))?;
        let keep = BooleanArray::new(self.filter.probe(&hashes), None);
        Ok(ColumnarValue::Array(Arc::new(keep)))
    }
    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.keys.iter().collect()
    }
    fn with_new_children(
        self: Arc<Self>,
        keys: Vec<Arc<dyn PhysicalExpr>>,
    ) -> datafusion::common::Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(BloomContains {
            keys,
            types: self.types.clone(),
            filter: self.filter.clone(),
        }))
    }
    fn fmt_sql(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::late::RowFilters;
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::datatypes::Field;
    use datafusion::prelude::col;
    use datafusion_proto::bytes::Serializeable;
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A file of one column `a` (10 000 rows of `column`), read with the probe's scan filter:
    /// (rows read, rows the filter dropped while decoding, whether `a` = 5, 500, 5000 came).
    fn read_filtered(probe: &BloomProbe, column: ArrayRef) -> (usize, u64, bool) {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "a",
            column.data_type().clone(),
            false,
        )]));
        let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
        let mut bytes = Vec::new();
        let mut w = ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut &file, &bytes).unwrap();
        let mut builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        let dropped = Arc::new(AtomicU64::new(0));
        let filters = RowFilters::new(probe.scan_filters(0), dropped.clone());
        let descr = builder.metadata().file_metadata().schema_descr_ptr();
        if let Some(rf) = filters.row_filter(builder.schema(), &descr) {
            builder = builder.with_row_filter(rf);
        }
        let batches: Vec<RecordBatch> = builder.build().unwrap().map(|b| b.unwrap()).collect();
        let rows = batches.iter().map(|b| b.num_rows()).sum();
        let text: Vec<String> = batches
            .iter()
            .flat_map(|b| {
                let a = arrow::compute::cast(b.column(0), &DataType::Utf8).unwrap();
                let a = a.as_any().downcast_ref::<StringArray>().unwrap().clone();
                a.iter().map(|v| v.unwrap().to_string()).collect::<Vec<_>>()
            })
            .collect();
        let all = ["5", "500", "5000"]
            .iter()
            .all(|k| text.iter().any(|t| t == k));
        (rows, dropped.load(Ordering::Relaxed), all)
    }

    /// The probe's filter, pushed down to the scan, drops the rows whose keys are not in it
    /// before their other columns are decoded, and keeps every row that is; a file that
    /// stores the key as a type hashing differently loses no rows.
    #[test]
    fn the_scan_drops_rows_the_filter_rejects_before_decoding_them() {
        let input: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("b", DataType::Utf8, true),
            Field::new("a", DataType::Int64, false),
        ]));
        let mut filter = BloomFilter::with_size(1024, 3);
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![5, 500, 5000]));
        for h in hash_columns(&[keys], 3).unwrap() {
            filter.insert(h);
        }
        let key = ExprBytes(col("a").to_bytes().unwrap().to_vec());
        let probe =
            BloomProbe::new(&[key], filter, &input, 1 << 20, &ExprPlanner::default()).unwrap();
        assert!(probe.scan_filters(1).is_empty());
        let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10_000));
        let (rows, dropped, all) = read_filtered(&probe, ints);
        assert!(all, "every key in the filter is read");
        assert!((3..20).contains(&rows), "{rows} rows read");
        assert_eq!(dropped, 10_000 - rows as u64);
        let strings: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..10_000).map(|v| v.to_string()),
        ));
        assert_eq!(read_filtered(&probe, strings), (10_000, 0, true));
    }
}
