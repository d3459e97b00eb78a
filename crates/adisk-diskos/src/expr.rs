//! Turning shipped expressions ([`ExprBytes`]) into DataFusion physical expressions.
//!
//! The host parses, resolves and type-checks expressions (DataFusion's SQL parser and type
//! coercion) and ships them as `datafusion-proto` bytes; the disk decodes them against the
//! schema of the stage's input and plans them with DataFusion's physical planner.
//!
//! Every decoded expression and plan fragment is measured without recursion and refused when
//! it is deeper or wider than [`adisk_core::limits`] allows, before anything recursive
//! (printing, planning, evaluating, dropping) touches it: a flat operand list of 20 000 `+`
//! terms decodes into a tree 20 000 levels deep, which overflowed a worker's stack while the
//! planner printed it.
use crate::{DiskOsError, Result, df_err};
use adisk_core::limits::{
    self, LimitExceeded, MAX_EXPR_DEPTH, MAX_EXPR_NODES, MAX_PLAN_DEPTH, MAX_PLAN_NODES, TreeShape,
};
use adisk_core::protocol::ExprBytes;
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::ExecutionPlan;
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
        ExprPlanner {
            ctx: SessionContext::new(),
        }
    }
}

impl ExprPlanner {
    /// Decodes a logical expression and checks its shape.
    ///
    /// Decoding recurses only as deep as the Protocol Buffers nesting, which prost bounds at
    /// 100 messages; a binary operator's flat operand list is folded into a tree in a loop.
    ///
    /// # Errors
    /// [`DiskOsError::DataFusion`] for malformed bytes; [`DiskOsError::Limit`] for a tree past
    /// [`MAX_EXPR_DEPTH`] or [`MAX_EXPR_NODES`] (the tree is then taken apart without
    /// recursion).
    pub fn logical(&self, bytes: &ExprBytes) -> Result<Expr> {
        let expr = Expr::from_bytes_with_ctx(&bytes.0, &self.ctx.task_ctx())
            .map_err(df_err("decoding a shipped expression"))?;
        checked_expr(expr, "a shipped expression").map_err(DiskOsError::Limit)
    }

    /// Decodes and plans a scalar expression over `schema`.
    pub fn physical(&self, bytes: &ExprBytes, schema: &SchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
        let expr = self.logical(bytes)?;
        self.plan(expr, schema)
    }

    /// Plans a logical scalar expression over `schema`.
    pub fn plan(&self, expr: Expr, schema: &SchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
        let dfschema = DFSchema::try_from(schema.as_ref().clone())
            .map_err(df_err("building the input schema"))?;
        let text = expr.to_string();
        self.ctx
            .create_physical_expr(expr, &dfschema)
            .map(crate::like::rewrite)
            .map_err(df_err(format!("planning `{text}`")))
    }

    /// Decodes and plans an aggregate function call (`sum(x)`, `count(*)`, …) over `schema`.
    pub fn aggregate(
        &self,
        bytes: &ExprBytes,
        name: &str,
        schema: &SchemaRef,
    ) -> Result<Arc<AggregateFunctionExpr>> {
        let expr = self.logical(bytes)?;
        let expr = match expr {
            Expr::Alias(a) => *a.expr,
            e => e,
        };
        if !matches!(expr, Expr::AggregateFunction(_)) {
            return Err(DiskOsError::InvalidJob(format!(
                "`{expr}` is not an aggregate function call"
            )));
        }
        let named = expr.alias(name);
        let dfschema = DFSchema::try_from(schema.as_ref().clone())
            .map_err(df_err("building the input schema"))?;
        let props = self.ctx.state().execution_props().clone();
        #[allow(deprecated)]
        let (agg, filter, _order) =
            create_aggregate_expr_and_maybe_filter(&named, &dfschema, schema, &props)
                .map_err(df_err(format!("planning aggregate `{name}`")))?;
        if filter.is_some() {
            return Err(DiskOsError::InvalidJob(format!(
                "aggregate `{name}`: FILTER clauses are not supported at the disks"
            )));
        }
        if agg.is_distinct() {
            return Err(DiskOsError::InvalidJob(format!(
                "aggregate `{name}`: DISTINCT aggregates cannot be combined from partial states"
            )));
        }
        if !agg.groups_accumulator_supported() {
            return Err(DiskOsError::InvalidJob(format!(
                "aggregate `{name}` has no grouped accumulator"
            )));
        }
        Ok(agg)
    }
}

/// Shape of a logical expression, measured without recursion; the measurement stops just past
/// [`MAX_EXPR_DEPTH`] or [`MAX_EXPR_NODES`].
pub fn expr_shape(expr: &Expr) -> TreeShape {
    limits::measure_tree(expr, MAX_EXPR_DEPTH, MAX_EXPR_NODES, |e, push| {
        // One level only: `apply_children` calls the closure on direct children.
        let _ = e.apply_children(|child| {
            push(child);
            Ok(TreeNodeRecursion::Continue)
        });
    })
}

/// `expr` if it is within [`MAX_EXPR_DEPTH`] and [`MAX_EXPR_NODES`]; otherwise the limit it
/// passes, after taking the tree apart without recursion (dropping a deep tree recurses once
/// per level).
pub fn checked_expr(expr: Expr, what: &str) -> std::result::Result<Expr, LimitExceeded> {
    match limits::check_shape(
        what,
        expr_shape(&expr),
        ("MAX_EXPR_DEPTH", MAX_EXPR_DEPTH),
        ("MAX_EXPR_NODES", MAX_EXPR_NODES),
    ) {
        Ok(()) => Ok(expr),
        Err(e) => {
            dismantle(expr);
            Err(e)
        }
    }
}

/// Drops a tree of any depth with a heap stack: each node's children are moved out (replaced
/// by a literal) before the node is dropped.
fn dismantle(expr: Expr) {
    let mut stack = vec![expr];
    while let Some(node) = stack.pop() {
        let _ = node.map_children(|child| {
            stack.push(child);
            Ok(Transformed::no(Expr::Literal(ScalarValue::Null, None)))
        });
    }
}

/// Decodes a physical plan fragment and checks its shape: operators within [`MAX_PLAN_DEPTH`]
/// and [`MAX_PLAN_NODES`], each of their expressions within [`MAX_EXPR_DEPTH`] and
/// [`MAX_EXPR_NODES`]. Decoding recurses only as deep as the Protocol Buffers nesting (at
/// most 100 messages, prost's limit), so the decoded trees are shallow enough to measure and
/// drop; the check keeps what runs next (wiring, planning, evaluating) within the limits.
///
/// # Errors
/// [`DiskOsError::DataFusion`] for malformed bytes; [`DiskOsError::Limit`].
pub fn decode_plan_fragment(bytes: &[u8], task: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = datafusion_proto::bytes::physical_plan_from_bytes(bytes, task)
        .map_err(df_err("decoding a plan fragment"))?;
    check_plan(plan.as_ref()).map_err(DiskOsError::Limit)?;
    Ok(plan)
}

/// Checks a physical plan's operators and expressions against the limits, without recursion.
pub fn check_plan(plan: &dyn ExecutionPlan) -> std::result::Result<(), LimitExceeded> {
    let shape = limits::measure_tree(plan, MAX_PLAN_DEPTH, MAX_PLAN_NODES, |p, push| {
        p.children().into_iter().for_each(|c| push(c.as_ref()))
    });
    limits::check_shape(
        "a plan fragment",
        shape,
        ("MAX_PLAN_DEPTH", MAX_PLAN_DEPTH),
        ("MAX_PLAN_NODES", MAX_PLAN_NODES),
    )?;
    let mut operators = vec![plan];
    while let Some(p) = operators.pop() {
        let mut result = Ok(());
        let _ = p.apply_expressions(&mut |e| {
            let shape =
                limits::measure_tree(e.as_ref(), MAX_EXPR_DEPTH, MAX_EXPR_NODES, |e, push| {
                    e.children().into_iter().for_each(|c| push(c.as_ref()))
                });
            result = limits::check_shape(
                &format!("an expression of operator `{}`", p.name()),
                shape,
                ("MAX_EXPR_DEPTH", MAX_EXPR_DEPTH),
                ("MAX_EXPR_NODES", MAX_EXPR_NODES),
            );
            Ok(if result.is_ok() {
                TreeNodeRecursion::Continue
            } else {
                TreeNodeRecursion::Stop
            })
        });
        result?;
        operators.extend(p.children().into_iter().map(|c| c.as_ref()));
    }
    Ok(())
}

/// Evaluates expressions into arrays of the batch's length.
pub(crate) fn evaluate_all(
    exprs: &[Arc<dyn PhysicalExpr>],
    batch: &RecordBatch,
) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| {
            e.evaluate(batch)
                .and_then(|v| v.into_array(batch.num_rows()))
                .map_err(|source| DiskOsError::DataFusion {
                    context: format!("evaluating `{e}`"),
                    source,
                })
        })
        .collect()
}
