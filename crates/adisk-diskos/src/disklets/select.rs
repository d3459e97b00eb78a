//! `select`: qualification (a predicate) and projection (expressions), with an optional limit.
use crate::disklet::{Disklet, Emitter, InputBuffer};
use crate::disklets::evaluate_all;
use crate::expr::ExprPlanner;
use crate::{DiskOsError, Result, df_err};
use adisk_core::protocol::{ExprBytes, NamedExpr};
use arrow::array::{AsArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// The `select` disklet.
pub struct Select {
    predicate: Option<Arc<dyn PhysicalExpr>>,
    projection: Option<Vec<Arc<dyn PhysicalExpr>>>,
    schema: SchemaRef,
    limit: Option<u64>,
    emitted: u64,
}

impl Select {
    /// Plans the predicate and projection over `input`.
    pub fn new(predicate: Option<&ExprBytes>, projection: &[NamedExpr], limit: Option<u64>, input: &SchemaRef, planner: &ExprPlanner) -> Result<Self> {
        let predicate = predicate.map(|p| planner.physical(p, input)).transpose()?;
        if let Some(p) = &predicate {
            let t = p.data_type(input).map_err(df_err("typing the predicate"))?;
            if t != DataType::Boolean {
                return Err(DiskOsError::InvalidJob(format!("predicate `{p}` is {t}, not boolean")));
            }
        }
        let (projection, schema) = if projection.is_empty() {
            (None, input.clone())
        } else {
            let mut exprs = Vec::with_capacity(projection.len());
            let mut fields = Vec::with_capacity(projection.len());
            for ne in projection {
                let e = planner.physical(&ne.expr, input)?;
                let t = e.data_type(input).map_err(df_err(format!("typing `{}`", ne.name)))?;
                let nullable = e.nullable(input).unwrap_or(true);
                fields.push(Field::new(&ne.name, t, nullable));
                exprs.push(e);
            }
            (Some(exprs), Arc::new(Schema::new(fields)))
        };
        Ok(Select { predicate, projection, schema, limit, emitted: 0 })
    }
}

impl Disklet for Select {
    fn name(&self) -> &'static str {
        "select"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let batch = input.batch;
        let filtered = match &self.predicate {
            None => batch.clone(),
            Some(p) => {
                let mask = p
                    .evaluate(batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
                    .map_err(df_err(format!("evaluating `{p}`")))?;
                filter_record_batch(batch, mask.as_boolean()).map_err(|e| DiskOsError::Decode { context: "filtering".into(), message: e.to_string() })?
            }
        };
        let mut result = match &self.projection {
            None => filtered,
            Some(exprs) => {
                let cols = evaluate_all(exprs, &filtered)?;
                RecordBatch::try_new(self.schema.clone(), cols).map_err(|e| DiskOsError::Decode { context: "projecting".into(), message: e.to_string() })?
            }
        };
        if let Some(limit) = self.limit {
            let room = limit.saturating_sub(self.emitted) as usize;
            if result.num_rows() >= room {
                result = result.slice(0, room);
                out.done();
            }
        }
        self.emitted += result.num_rows() as u64;
        out.emit(0, result);
        Ok(())
    }
    fn finish(&mut self, _out: &mut Emitter) -> Result<()> {
        Ok(())
    }
}
