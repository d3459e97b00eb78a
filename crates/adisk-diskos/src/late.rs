//! Late materialization: a table scan applies the filters its readers pushed down (a join's
//! dynamic filter on its probe input: the build side's key set and bounds) while it decodes,
//! and decodes its other columns only for the rows that pass.
//!
//! A fragment's joins push their dynamic filters down to the fragment's input leaves
//! ([`crate::Disklet::scan_filters`]); [`scan_filters`] carries them back along the job graph to
//! the table scan that feeds the input, through stages that only pass a subset of their input
//! rows on (a qualification, a Bloom probe). The scan evaluates the filter's current state per
//! row group as a Parquet row filter ([`RowFilters::row_filter`]): the filter's columns are
//! decoded for every row, the others for the rows that pass. A filter not filled in yet (the
//! join still building) passes every row. The operators above still apply the filters, so a
//! scan that cannot use one (a column it does not have) loses time, never rows.
use crate::disklet::Disklet;
use adisk_core::protocol::{JobSpec, Port};
use arrow::array::{Array, BooleanArray, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::utils::{collect_columns, reassign_expr_columns};
use datafusion::physical_expr_common::physical_expr::snapshot_physical_expr;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowPredicate, ArrowPredicateFn, RowFilter};
use parquet::schema::types::SchemaDescriptor;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Per input of `spec`, the filters its readers pushed down to it, carried through stages
/// whose output is a subset of their input's rows (on the columns such a stage passes on
/// unchanged).
pub fn scan_filters(
    spec: &JobSpec,
    stages: &[Box<dyn Disklet>],
) -> Vec<Vec<Arc<dyn PhysicalExpr>>> {
    let mut out = vec![Vec::new(); spec.inputs.len()];
    for (i, stage) in spec.stages.iter().enumerate() {
        for (k, port) in stage.inputs.iter().enumerate() {
            let mut filters = stages[i].scan_filters(k);
            let mut port = *port;
            while !filters.is_empty() {
                match port {
                    Port::Input(n) => {
                        if let Some(o) = out.get_mut(n as usize) {
                            o.append(&mut filters);
                        }
                    }
                    Port::Stage { stage: j, port: 0 } => {
                        let j = j as usize;
                        let passed = stages.get(j).and_then(|d| d.row_subset_of_input());
                        let (Some(columns), [from]) = (passed, spec.stages[j].inputs.as_slice())
                        else {
                            break;
                        };
                        filters.retain(|f| {
                            collect_columns(f)
                                .iter()
                                .all(|c| columns.iter().any(|n| n == c.name()))
                        });
                        port = *from;
                    }
                    Port::Stage { .. } => break,
                }
            }
        }
    }
    out
}

/// Parquet decodes a selection whose runs of kept rows and of skipped rows average fewer rows
/// than this by decoding every row and filtering (its default policy): filtering first then
/// saves no decoding and costs the filter's columns twice.
pub const MIN_MEAN_RUN: u64 = 32;

/// Rows a scan's filters looked at before it judges whether they pay.
const TRIAL_ROWS: u64 = 1 << 16;

/// The filters a table scan applies while decoding, and what they dropped.
#[derive(Debug, Default, Clone)]
pub struct RowFilters {
    filters: Vec<Arc<dyn PhysicalExpr>>,
    /// Rows the filters dropped before their other columns were decoded.
    dropped: Arc<AtomicU64>,
    /// Rows the filters looked at, and the runs of kept rows they found.
    seen: Arc<AtomicU64>,
    runs: Arc<AtomicU64>,
}

impl RowFilters {
    /// Filters on the columns of the scan's output (by name), counting into `dropped`.
    pub fn new(filters: Vec<Arc<dyn PhysicalExpr>>, dropped: Arc<AtomicU64>) -> Self {
        RowFilters {
            filters: if enabled() { filters } else { Vec::new() },
            dropped,
            ..RowFilters::default()
        }
    }

    /// Whether filtering while decoding pays so far: after a trial, the kept rows must come in
    /// runs (of kept and of dropped rows) of at least [`MIN_MEAN_RUN`] rows on average. When
    /// they do not (a join keeping a row in four, scattered), the scan stops filtering and the
    /// join filters alone.
    pub fn pays(&self) -> bool {
        let (seen, runs) = (
            self.seen.load(Ordering::Relaxed),
            self.runs.load(Ordering::Relaxed),
        );
        seen < TRIAL_ROWS || seen / (2 * runs).max(1) >= MIN_MEAN_RUN
    }

    /// A Parquet row filter of the filters' current state over a file of `file_schema`
    /// (`descr`), or None when none of them filters anything yet or filtering does not pay
    /// ([`RowFilters::pays`]). A filter whose columns the file does not have is left out.
    pub fn row_filter(
        &self,
        file_schema: &SchemaRef,
        descr: &SchemaDescriptor,
    ) -> Option<RowFilter> {
        if !self.pays() {
            return None;
        }
        let predicates: Vec<Box<dyn ArrowPredicate>> = self
            .filters
            .iter()
            .filter_map(|f| self.predicate(f, file_schema, descr))
            .collect();
        (!predicates.is_empty()).then(|| RowFilter::new(predicates))
    }

    fn predicate(
        &self,
        filter: &Arc<dyn PhysicalExpr>,
        file_schema: &SchemaRef,
        descr: &SchemaDescriptor,
    ) -> Option<Box<dyn ArrowPredicate>> {
        let now = snapshot_physical_expr(filter.clone()).ok()?;
        if passes_all(&now) {
            return None;
        }
        let mut columns: Vec<usize> = collect_columns(&now)
            .iter()
            .map(|c| file_schema.index_of(c.name()).ok())
            .collect::<Option<_>>()?;
        columns.sort_unstable();
        columns.dedup();
        // The predicate sees the filter's columns in file order.
        let schema = Schema::new(
            columns
                .iter()
                .map(|i| file_schema.field(*i).clone())
                .collect::<Vec<_>>(),
        );
        let expr = reassign_expr_columns(now, &schema).ok()?;
        let (dropped, seen, runs) = (self.dropped.clone(), self.seen.clone(), self.runs.clone());
        let mask = ProjectionMask::roots(descr, columns);
        Some(Box::new(ArrowPredicateFn::new(mask, move |batch| {
            let rows = batch.num_rows();
            // The filter is advisory (the join applies it again): one that cannot be evaluated
            // keeps every row rather than failing the scan.
            let Some(keep) = evaluate(&expr, &batch) else {
                return Ok(BooleanArray::from(vec![true; rows]));
            };
            dropped.fetch_add((rows - keep.true_count()) as u64, Ordering::Relaxed);
            seen.fetch_add(rows as u64, Ordering::Relaxed);
            runs.fetch_add(kept_runs(&keep), Ordering::Relaxed);
            Ok(keep)
        })))
    }
}

/// Whether scans filter while decoding: yes unless the disk's environment sets
/// `ADISK_LATE_MATERIALIZATION=off` (for measuring what it gains).
pub fn enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED
        .get_or_init(|| std::env::var("ADISK_LATE_MATERIALIZATION").map_or(true, |v| v != "off"))
}

/// Whether `expr` is the literal `true` (a dynamic filter before its operator filled it in).
fn passes_all(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<Literal>()
        .is_some_and(|l| l.value() == &ScalarValue::Boolean(Some(true)))
}

/// The rows of `batch` that pass `expr` (a null does not), or None if it cannot be evaluated.
fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Option<BooleanArray> {
    let value = expr
        .evaluate(batch)
        .ok()?
        .into_array(batch.num_rows())
        .ok()?;
    let keep = value.as_any().downcast_ref::<BooleanArray>()?;
    Some(match keep.nulls() {
        Some(_) => arrow::compute::prep_null_mask_filter(keep),
        None => keep.clone(),
    })
}

/// Runs of consecutive `true` values in `keep`.
fn kept_runs(keep: &BooleanArray) -> u64 {
    let mut runs = 0;
    let mut next = usize::MAX; // the index that would continue the current run
    for i in keep.values().set_indices() {
        if i != next {
            runs += 1;
        }
        next = i + 1;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_runs_counts_runs_of_true() {
        let keep = BooleanArray::from(vec![true, true, false, true, false, false, true, true]);
        assert_eq!(kept_runs(&keep), 3);
        assert_eq!(kept_runs(&BooleanArray::from(vec![false, false])), 0);
    }

    /// A filter on the stream's columns (by name, in the stream's order) filters a file whose
    /// columns are in another order; unknown columns and a filter not filled in filter nothing.
    #[test]
    fn a_row_filter_reads_only_the_rows_that_pass() {
        use arrow::array::Int64Array;
        use arrow::datatypes::{DataType, Field};
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::expressions::{BinaryExpr, Column, lit};
        use parquet::arrow::ArrowWriter;
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int64, false),
        ]));
        let a = Int64Array::from_iter_values(0..1000);
        let b = Int64Array::from_iter_values((0..1000).map(|v| v * 10));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(a), Arc::new(b)]).unwrap();
        let mut bytes = Vec::new();
        let mut w = ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        std::fs::write(&path, bytes).unwrap();
        // `a < 100`, with `a` at index 1 of the stream (b, a).
        let filter: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            Arc::new(Column::new("a", 1)),
            Operator::Lt,
            lit(100i64),
        ));
        let read = |filters: Vec<Arc<dyn PhysicalExpr>>| {
            let dropped = Arc::new(AtomicU64::new(0));
            let f = RowFilters::new(filters, dropped.clone());
            let mut builder =
                ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
                    .unwrap();
            let row_filter = f.row_filter(
                builder.schema(),
                builder.metadata().file_metadata().schema_descr(),
            );
            let filtered = row_filter.is_some();
            if let Some(rf) = row_filter {
                builder = builder.with_row_filter(rf);
            }
            let rows: usize = builder
                .build()
                .unwrap()
                .map(|b| b.unwrap().num_rows())
                .sum();
            (filtered, rows, dropped.load(Ordering::Relaxed))
        };
        assert_eq!(read(vec![filter]), (true, 100, 900));
        let unknown: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            Arc::new(Column::new("z", 0)),
            Operator::Lt,
            lit(100i64),
        ));
        assert_eq!(read(vec![unknown]), (false, 1000, 0));
        assert_eq!(read(vec![lit(true)]), (false, 1000, 0));
    }

    #[test]
    fn filtering_stops_paying_when_kept_rows_are_scattered() {
        let f = RowFilters::default();
        assert!(f.pays(), "untried filters are tried");
        f.seen.store(TRIAL_ROWS, Ordering::Relaxed);
        f.runs.store(TRIAL_ROWS / 8, Ordering::Relaxed); // runs of 4 rows
        assert!(!f.pays());
        f.runs.store(TRIAL_ROWS / 1000, Ordering::Relaxed); // runs of 500 rows
        assert!(f.pays());
    }
}
