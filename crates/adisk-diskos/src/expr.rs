//! Turning shipped expressions ([`ExprBytes`]) into DataFusion physical expressions.
//!
//! The host parses, resolves and type-checks expressions (DataFusion's SQL parser and type
//! coercion) and ships them as `datafusion-proto` bytes; the disk decodes them against the
//! schema of the stage's input and plans them with DataFusion's physical planner.
use crate::{DiskOsError, Result, df_err};
use adisk_core::protocol::ExprBytes;
use arrow::datatypes::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
#[allow(deprecated)]
use datafusion::physical_planner::create_aggregate_expr_and_maybe_filter;
use datafusion_proto::bytes::Serializeable;
use std::sync::Arc;

/// Function registry and planner used to decode expressions at a disk.
#[derive(Clone)]
pub struct ExprPlanner {
    ctx: SessionContext,
}

impl Default for ExprPlanner {
    fn default() -> Self {
        ExprPlanner { ctx: SessionContext::new() }
    }
}

impl ExprPlanner {
    /// Decodes a logical expression.
    pub fn logical(&self, bytes: &ExprBytes) -> Result<Expr> {
        Expr::from_bytes_with_ctx(&bytes.0, &self.ctx.task_ctx()).map_err(df_err("decoding a shipped expression"))
    }

    /// Decodes and plans a scalar expression over `schema`.
    pub fn physical(&self, bytes: &ExprBytes, schema: &SchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
        let expr = self.logical(bytes)?;
        self.plan(expr, schema)
    }

    /// Plans a logical scalar expression over `schema`.
    pub fn plan(&self, expr: Expr, schema: &SchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
        let dfschema = DFSchema::try_from(schema.as_ref().clone()).map_err(df_err("building the input schema"))?;
        let text = expr.to_string();
        self.ctx.create_physical_expr(expr, &dfschema).map_err(df_err(format!("planning `{text}`")))
    }

    /// Decodes and plans an aggregate function call (`sum(x)`, `count(*)`, …) over `schema`.
    pub fn aggregate(&self, bytes: &ExprBytes, name: &str, schema: &SchemaRef) -> Result<Arc<AggregateFunctionExpr>> {
        let expr = self.logical(bytes)?;
        let expr = match expr {
            Expr::Alias(a) => *a.expr,
            e => e,
        };
        if !matches!(expr, Expr::AggregateFunction(_)) {
            return Err(DiskOsError::InvalidJob(format!("`{expr}` is not an aggregate function call")));
        }
        let named = expr.alias(name);
        let dfschema = DFSchema::try_from(schema.as_ref().clone()).map_err(df_err("building the input schema"))?;
        let props = self.ctx.state().execution_props().clone();
        #[allow(deprecated)]
        let (agg, filter, _order) = create_aggregate_expr_and_maybe_filter(&named, &dfschema, schema, &props)
            .map_err(df_err(format!("planning aggregate `{name}`")))?;
        if filter.is_some() {
            return Err(DiskOsError::InvalidJob(format!("aggregate `{name}`: FILTER clauses are not supported at the disks")));
        }
        if agg.is_distinct() {
            return Err(DiskOsError::InvalidJob(format!("aggregate `{name}`: DISTINCT aggregates cannot be combined from partial states")));
        }
        if !agg.groups_accumulator_supported() {
            return Err(DiskOsError::InvalidJob(format!("aggregate `{name}` has no grouped accumulator")));
        }
        Ok(agg)
    }
}
