//! Sorts that may spill sort plain strings. A sorted string-view column only reorders its
//! views: every sorted run keeps all of its input batches' value buffers alive, so
//! DataFusion's external sort cannot shrink its memory account after spilling and fails with
//! "Not enough memory to continue external sort" (apache/datafusion#12136; TPC-H Q18 at SF 1
//! with `--spill-joins`: the sort on `o_orderkey` over rows that carry `c_name`). In a fragment
//! with spill space, each such sort gets its string-view columns cast to plain strings below
//! it, so that it copies the values it moves, and cast back above it, so that the operators
//! around it see the schema they were planned with.
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{CastExpr, Column};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::sorts::sort::SortExec;
use std::sync::Arc;

/// `plan` with every full sort (no fetch) over string or binary views sorting plain strings or
/// binaries instead.
pub fn plain_string_sorts(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(sort) = node.downcast_ref::<SortExec>() else {
            return Ok(Transformed::no(node));
        };
        let original = sort.input().schema();
        if sort.fetch().is_some()
            || !original
                .fields()
                .iter()
                .any(|f| plain(f.data_type()).is_some())
        {
            return Ok(Transformed::no(node));
        }
        let below = cast_to(sort.input().clone(), |_, t| plain(t))?;
        let sorted = node.clone().replace_children(
            vec![below],
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )?;
        Ok(Transformed::yes(restore(sorted, &original)?))
    })
    .map(|t| t.data)
}

/// The plain type of a view type.
fn plain(t: &DataType) -> Option<DataType> {
    match t {
        DataType::Utf8View => Some(DataType::Utf8),
        DataType::BinaryView => Some(DataType::Binary),
        _ => None,
    }
}

/// `input` with the columns whose position and type `to` maps cast to that type, the others as
/// they are.
fn cast_to(
    input: Arc<dyn ExecutionPlan>,
    to: impl Fn(usize, &DataType) -> Option<DataType>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = input.schema();
    let exprs = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(f.name(), i));
            let expr = match to(i, f.data_type()) {
                Some(t) => Arc::new(CastExpr::new(column, t, None)) as Arc<dyn PhysicalExpr>,
                None => column,
            };
            ProjectionExpr {
                expr,
                alias: f.name().clone(),
            }
        })
        .collect::<Vec<_>>();
    Ok(Arc::new(ProjectionExec::try_new(exprs, input)?))
}

/// `plan` (the sort, whose columns sit where its input's did) with its columns cast back to the
/// types of `original` where they differ.
fn restore(plan: Arc<dyn ExecutionPlan>, original: &SchemaRef) -> Result<Arc<dyn ExecutionPlan>> {
    let original = original.clone();
    cast_to(plan, move |i, t| {
        let want = original.fields().get(i)?.data_type();
        (want != t).then(|| want.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, RecordBatch, StringViewArray};
    use arrow::datatypes::{Field, Schema};
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_plan::expressions::col;
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn a_sort_over_string_views_sorts_plain_strings_and_gives_back_views_in_order() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("name", DataType::Utf8View, true),
        ]));
        let long = |i: i64| format!("customer number {i:012}");
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![3, 1, 2])),
                Arc::new(StringViewArray::from(vec![
                    Some(long(3)),
                    None,
                    Some(long(2)),
                ])),
            ],
        )
        .unwrap();
        let input: Arc<dyn ExecutionPlan> =
            datafusion::datasource::memory::MemorySourceConfig::try_new_exec(
                &[vec![batch]],
                schema.clone(),
                None,
            )
            .unwrap();
        let order = LexOrdering::new(vec![PhysicalSortExpr::new_default(
            col("k", &schema).unwrap(),
        )])
        .unwrap();
        let sort: Arc<dyn ExecutionPlan> = Arc::new(SortExec::new(order.clone(), input.clone()));
        let plan = plain_string_sorts(sort).unwrap();
        // The sort now reads plain strings; what leaves has the planned schema.
        let inner = plan.children()[0].clone();
        assert!(inner.downcast_ref::<SortExec>().is_some());
        assert_eq!(inner.schema().field(1).data_type(), &DataType::Utf8);
        assert_eq!(plan.schema().fields(), schema.fields());
        let out = datafusion::physical_plan::collect(plan, SessionContext::new().task_ctx())
            .await
            .unwrap();
        let out = arrow::compute::concat_batches(&schema, &out).unwrap();
        let keys = out.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(keys.values(), &[1, 2, 3]);
        let names = out
            .column(1)
            .as_any()
            .downcast_ref::<StringViewArray>()
            .unwrap();
        assert!(names.is_null(0));
        assert_eq!(names.value(1), long(2));
        assert_eq!(names.value(2), long(3));
        // A sort without views, and a top-k sort, are left alone.
        let top: Arc<dyn ExecutionPlan> = Arc::new(SortExec::new(order, input).with_fetch(Some(1)));
        let same = plain_string_sorts(top.clone()).unwrap();
        assert!(Arc::ptr_eq(&same, &top));
    }
}
