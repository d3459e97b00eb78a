//! `aggregate`: hash aggregation within a fixed scratch grant.
//!
//! Group keys are interned by DataFusion's `GroupValues`; aggregate states live in DataFusion
//! `GroupsAccumulator`s (`sum`, `count`, `min`, `max`, `avg`, …), so partial states computed at
//! the disks merge exactly at the host or at another disk.
//!
//! In [`AggregateMode::Partial`] the table never outgrows scratch: input is processed in
//! chunks of [`CHUNK_ROWS`] rows, and when the table's size passes [`FLUSH_FRACTION`] of the
//! grant the partial groups are emitted and the table starts again (the algorithm of the
//! active-disk group-by in Acharya et al. and Riedel et al.). Duplicated groups across flushes
//! are merged by the consumer. [`AggregateMode::Final`] and [`AggregateMode::Single`] must hold
//! every group, and fail with [`DiskOsError::ScratchExceeded`] if they cannot.
use crate::disklet::{Disklet, Emitter, InputBuffer};
use crate::disklets::evaluate_all;
use crate::expr::ExprPlanner;
use crate::{DiskOsError, Result, df_err};
use adisk_core::protocol::{AggregateMode, NamedExpr};
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{Field, FieldRef, Schema, SchemaRef};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use std::sync::Arc;

/// Rows interned between two scratch checks.
pub const CHUNK_ROWS: usize = 4096;
/// Fraction of the scratch grant at which partial groups are flushed. A flush turns the table
/// into output batches of about its size, held until the call returns while the next chunks
/// refill the table: at half the grant, table and output fit the grant together.
pub const FLUSH_FRACTION: f64 = 0.5;

/// The `aggregate` / group-by disklet (also used by the host to combine partial states).
pub struct Aggregate {
    mode: AggregateMode,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    group_schema: SchemaRef,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// Per aggregate: input expressions (Partial/Single) or state column indices (Final).
    arguments: Vec<AggregateArguments>,
    group_values: Option<Box<dyn GroupValues>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    scratch_bytes: u64,
    peak_bytes: u64,
    flushes: u64,
    /// Groups in the table of a keyless aggregate (0 or 1).
    keyless_groups: usize,
    group_indices: Vec<usize>,
}

enum AggregateArguments {
    Expressions(Vec<Arc<dyn PhysicalExpr>>),
    StateColumns(std::ops::Range<usize>),
}

fn fields_of(exprs: &[Arc<dyn PhysicalExpr>], names: &[NamedExpr], input: &SchemaRef) -> Result<Vec<Field>> {
    exprs
        .iter()
        .zip(names)
        .map(|(e, n)| {
            let t = e.data_type(input).map_err(df_err(format!("typing `{}`", n.name)))?;
            Ok(Field::new(&n.name, t, e.nullable(input).unwrap_or(true)))
        })
        .collect()
}

impl Aggregate {
    /// Plans the aggregation. In `Final` mode `input` is the partial schema (group columns
    /// followed by the state columns of each aggregate, as a Partial aggregate emits them),
    /// `group_by` name those columns, and `raw_input` is the schema the Partial aggregate read.
    pub fn new(
        group_by: &[NamedExpr],
        aggregates: &[NamedExpr],
        mode: AggregateMode,
        raw_input: Option<SchemaRef>,
        input: &SchemaRef,
        scratch_bytes: u64,
        planner: &ExprPlanner,
    ) -> Result<Self> {
        if aggregates.is_empty() && group_by.is_empty() {
            return Err(DiskOsError::InvalidJob("aggregate needs at least one aggregate or grouping expression".into()));
        }
        // In Final mode the aggregate functions are planned over the raw input schema the
        // partial aggregation saw (shipped in the spec), so their accumulators match the states.
        let (group_exprs, group_fields, aggs, arguments) = match mode {
            AggregateMode::Partial | AggregateMode::Single => {
                let group_exprs: Vec<_> = group_by.iter().map(|g| planner.physical(&g.expr, input)).collect::<Result<_>>()?;
                let group_fields = fields_of(&group_exprs, group_by, input)?;
                let aggs: Vec<_> = aggregates.iter().map(|a| planner.aggregate(&a.expr, &a.name, input)).collect::<Result<_>>()?;
                let arguments = aggs.iter().map(|a| AggregateArguments::Expressions(a.expressions())).collect();
                (group_exprs, group_fields, aggs, arguments)
            }
            AggregateMode::Final => {
                // Group columns come first in the partial schema, by name.
                let mut group_exprs = Vec::with_capacity(group_by.len());
                let mut group_fields = Vec::with_capacity(group_by.len());
                for (i, g) in group_by.iter().enumerate() {
                    let field = input.fields().get(i).ok_or_else(|| DiskOsError::InvalidJob(format!("partial input has no group column {i}")))?;
                    if field.name() != &g.name {
                        return Err(DiskOsError::InvalidJob(format!("partial input column {i} is `{}`, expected group `{}`", field.name(), g.name)));
                    }
                    group_exprs.push(Arc::new(datafusion::physical_expr::expressions::Column::new(&g.name, i)) as Arc<dyn PhysicalExpr>);
                    group_fields.push(field.as_ref().clone());
                }
                let raw_input = raw_input.ok_or_else(|| DiskOsError::InvalidJob("final aggregation needs the raw input schema".into()))?;
                let aggs: Vec<_> = aggregates.iter().map(|a| planner.aggregate(&a.expr, &a.name, &raw_input)).collect::<Result<_>>()?;
                let mut arguments = Vec::with_capacity(aggs.len());
                let mut next = group_by.len();
                for a in &aggs {
                    let n = a.state_fields().map_err(df_err("state fields"))?.len();
                    arguments.push(AggregateArguments::StateColumns(next..next + n));
                    next += n;
                }
                if next != input.fields().len() {
                    return Err(DiskOsError::InvalidJob(format!("partial input has {} columns, expected {next}", input.fields().len())));
                }
                (group_exprs, group_fields, aggs, arguments)
            }
        };
        let group_schema = Arc::new(Schema::new(group_fields.clone()));
        let mut out_fields: Vec<FieldRef> = group_fields.into_iter().map(Arc::new).collect();
        for a in &aggs {
            match mode {
                AggregateMode::Partial => out_fields.extend(a.state_fields().map_err(df_err("state fields"))?),
                AggregateMode::Final | AggregateMode::Single => out_fields.push(a.field()),
            }
        }
        let output_schema = Arc::new(Schema::new(out_fields));
        let mut me = Aggregate {
            mode,
            group_exprs,
            group_schema,
            aggregates: aggs,
            arguments,
            group_values: None,
            accumulators: vec![],
            input_schema: input.clone(),
            output_schema,
            scratch_bytes,
            peak_bytes: 0,
            flushes: 0,
            keyless_groups: 0,
            group_indices: Vec::with_capacity(CHUNK_ROWS),
        };
        me.reset()?;
        Ok(me)
    }

    fn reset(&mut self) -> Result<()> {
        self.group_values = if self.group_exprs.is_empty() {
            None
        } else {
            Some(new_group_values(self.group_schema.clone(), &GroupOrdering::None).map_err(df_err("creating the group table"))?)
        };
        self.accumulators = self.aggregates.iter().map(|a| a.create_groups_accumulator().map_err(df_err("creating an accumulator"))).collect::<Result<_>>()?;
        self.keyless_groups = 0;
        Ok(())
    }

    /// Creates the single group of a keyless aggregate by feeding empty input.
    fn ensure_keyless_group(&mut self) -> Result<()> {
        let empty = RecordBatch::new_empty(self.input_schema.clone());
        for (acc, args) in self.accumulators.iter_mut().zip(&self.arguments) {
            match args {
                AggregateArguments::Expressions(exprs) => {
                    let values = evaluate_all(exprs, &empty)?;
                    acc.update_batch(&values, &[], None, 1).map_err(df_err("aggregating"))?;
                }
                AggregateArguments::StateColumns(range) => {
                    let values: Vec<ArrayRef> = range.clone().map(|i| empty.column(i).clone()).collect();
                    acc.merge_batch(&values, &[], 1).map_err(df_err("merging partial states"))?;
                }
            }
        }
        self.keyless_groups = 1;
        Ok(())
    }

    fn num_groups(&self) -> usize {
        match &self.group_values {
            Some(g) => g.len(),
            None => self.keyless_groups,
        }
    }

    /// Estimated bytes of the group table and accumulators.
    pub fn table_bytes(&self) -> u64 {
        let groups = self.group_values.as_ref().map(|g| g.size()).unwrap_or(0);
        (groups + self.accumulators.iter().map(|a| a.size()).sum::<usize>()) as u64
    }

    fn update_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        let n = chunk.num_rows();
        self.group_indices.clear();
        match &mut self.group_values {
            Some(gv) => {
                let keys = evaluate_all(&self.group_exprs, chunk)?;
                gv.intern(&keys, &mut self.group_indices).map_err(df_err("grouping"))?;
            }
            None => {
                self.group_indices.resize(n, 0);
                self.keyless_groups = 1;
            }
        }
        let total = self.num_groups();
        for (acc, args) in self.accumulators.iter_mut().zip(&self.arguments) {
            match args {
                AggregateArguments::Expressions(exprs) => {
                    let values = evaluate_all(exprs, chunk)?;
                    acc.update_batch(&values, &self.group_indices, None, total).map_err(df_err("aggregating"))?;
                }
                AggregateArguments::StateColumns(range) => {
                    let values: Vec<ArrayRef> = range.clone().map(|i| chunk.column(i).clone()).collect();
                    acc.merge_batch(&values, &self.group_indices, total).map_err(df_err("merging partial states"))?;
                }
            }
        }
        Ok(())
    }

    /// Emits every group (states in Partial mode, final values otherwise) and empties the table.
    pub fn emit_all(&mut self) -> Result<Option<RecordBatch>> {
        if self.num_groups() == 0 && !(self.group_exprs.is_empty() && self.mode != AggregateMode::Partial) {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = match &mut self.group_values {
            Some(gv) => gv.emit(EmitTo::All).map_err(df_err("emitting groups"))?,
            None => vec![],
        };
        if self.group_exprs.is_empty() && self.keyless_groups == 0 {
            // Keyless Final/Single aggregate over no rows: one row of the functions' empty values.
            self.ensure_keyless_group()?;
        }
        for acc in &mut self.accumulators {
            match self.mode {
                AggregateMode::Partial => columns.extend(acc.state(EmitTo::All).map_err(df_err("emitting states"))?),
                _ => columns.push(acc.evaluate(EmitTo::All).map_err(df_err("evaluating aggregates"))?),
            }
        }
        let batch = RecordBatch::try_new(self.output_schema.clone(), columns)
            .map_err(|e| DiskOsError::Decode { context: "building aggregate output".into(), message: e.to_string() })?;
        self.reset()?;
        Ok(Some(batch))
    }

    /// Feeds a batch (rows, or partial states in Final mode).
    pub fn push(&mut self, batch: &RecordBatch, out: &mut Emitter) -> Result<()> {
        let limit = (self.scratch_bytes as f64 * FLUSH_FRACTION) as u64;
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = CHUNK_ROWS.min(batch.num_rows() - offset);
            self.update_chunk(&batch.slice(offset, len))?;
            offset += len;
            let size = self.table_bytes();
            self.peak_bytes = self.peak_bytes.max(size);
            if size > limit {
                match self.mode {
                    AggregateMode::Partial => {
                        if let Some(b) = self.emit_all()? {
                            out.emit(0, b);
                        }
                        self.flushes += 1;
                    }
                    _ if size > self.scratch_bytes => {
                        return Err(DiskOsError::ScratchExceeded {
                            disklet: "aggregate",
                            granted_bytes: self.scratch_bytes,
                            detail: format!("{} groups take {size} bytes in {:?} mode", self.num_groups(), self.mode),
                        });
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

impl Disklet for Aggregate {
    fn name(&self) -> &'static str {
        "aggregate"
    }
    fn output_schema(&self) -> SchemaRef {
        self.output_schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        self.push(input.batch, out)
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        if let Some(b) = self.emit_all()? {
            out.emit(0, b);
        }
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.table_bytes()
    }
    fn flushes(&self) -> u64 {
        self.flushes
    }
}
