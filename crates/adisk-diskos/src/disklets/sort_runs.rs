//! `sort_runs`: local sort into runs that fit in scratch (the run-formation phase of an
//! external sort; merging the runs is the consumer's job).
//!
//! Input batches are kept until they fill half the scratch grant (the other half is the
//! sorted copy), then sorted and emitted as one run, in batches of at most [`OUT_ROWS`]
//! rows, with an extra `run` column (`UInt32`) numbering the runs of this disk.
use crate::disklet::{Disklet, Emitter, InputBuffer};
use crate::disklets::{batch_bytes, evaluate_all};
use crate::expr::ExprPlanner;
use crate::{DiskOsError, Result};
use adisk_core::protocol::SortKey;
use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{SortColumn, SortOptions, concat_batches, lexsort_to_indices, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// Rows per emitted batch.
pub const OUT_ROWS: usize = 8192;

/// The `sort_runs` disklet.
pub struct SortRuns {
    keys: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    input: SchemaRef,
    schema: SchemaRef,
    pending: Vec<RecordBatch>,
    pending_bytes: u64,
    scratch_bytes: u64,
    runs: u32,
}

impl SortRuns {
    /// Plans the sort keys.
    pub fn new(keys: &[SortKey], input: &SchemaRef, scratch_bytes: u64, planner: &ExprPlanner) -> Result<Self> {
        if keys.is_empty() {
            return Err(DiskOsError::InvalidJob("sort_runs needs at least one key".into()));
        }
        let keys = keys
            .iter()
            .map(|k| Ok((planner.physical(&k.expr, input)?, SortOptions { descending: k.descending, nulls_first: k.nulls_first })))
            .collect::<Result<_>>()?;
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("run", DataType::UInt32, false));
        Ok(SortRuns { keys, input: input.clone(), schema: Arc::new(Schema::new(fields)), pending: vec![], pending_bytes: 0, scratch_bytes, runs: 0 })
    }

    fn emit_run(&mut self, out: &mut Emitter) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let decode = |e: arrow::error::ArrowError| DiskOsError::Decode { context: "sorting a run".into(), message: e.to_string() };
        let all = concat_batches(&self.input, &self.pending).map_err(decode)?;
        self.pending.clear();
        self.pending_bytes = 0;
        let exprs: Vec<_> = self.keys.iter().map(|(e, _)| e.clone()).collect();
        let key_arrays = evaluate_all(&exprs, &all)?;
        let sort_columns: Vec<SortColumn> = key_arrays.into_iter().zip(&self.keys).map(|(values, (_, o))| SortColumn { values, options: Some(*o) }).collect();
        let order = lexsort_to_indices(&sort_columns, None).map_err(decode)?;
        let sorted = take_record_batch(&all, &order).map_err(decode)?;
        let mut offset = 0;
        while offset < sorted.num_rows() {
            let len = OUT_ROWS.min(sorted.num_rows() - offset);
            let part = sorted.slice(offset, len);
            let mut cols: Vec<ArrayRef> = part.columns().to_vec();
            cols.push(Arc::new(UInt32Array::from(vec![self.runs; len])));
            out.emit(0, RecordBatch::try_new(self.schema.clone(), cols).map_err(decode)?);
            offset += len;
        }
        self.runs += 1;
        Ok(())
    }
}

impl Disklet for SortRuns {
    fn name(&self) -> &'static str {
        "sort_runs"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let bytes = batch_bytes(input.batch);
        if bytes * 2 > self.scratch_bytes {
            return Err(DiskOsError::ScratchExceeded { disklet: "sort_runs", granted_bytes: self.scratch_bytes, detail: format!("one input buffer of {bytes} bytes does not fit twice") });
        }
        if (self.pending_bytes + bytes) * 2 > self.scratch_bytes {
            self.emit_run(out)?;
        }
        self.pending.push(input.batch.clone());
        self.pending_bytes += bytes;
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.emit_run(out)
    }
    fn scratch_bytes(&self) -> u64 {
        self.pending_bytes * 2
    }
    fn flushes(&self) -> u64 {
        u64::from(self.runs)
    }
}
