//! Uncorrelated scalar subqueries run before their query is planned, and their values planned
//! in as constants.
//!
//! DataFusion plans `x > (SELECT avg(y) FROM t)` as a `ScalarSubqueryExec` whose expression
//! is filled in at run time. A disk cannot decode that expression, so every operator above
//! it stays at the host: TPC-H Q22's customers were all shipped to the host to be compared
//! with their average there, and Q11's groups to be cut by their threshold. Run first, the
//! subquery is a constant: the filter goes down to the scan (and its zone maps), and the
//! `disks` level can place the whole plan.
//!
//! ```text
//! optimized logical plan ─► its uncorrelated scalar subqueries (outside other subqueries)
//!   ─► each run through the engine (its disk jobs counted in the query's statistics)
//!   ─► each replaced by its value (column names kept) ─► physical planning as before
//! ```
//!
//! The value follows DataFusion's rules: NULL for no row, an error for more than one. The
//! subqueries ran eagerly before too (DataFusion evaluates them before the first row of the
//! main plan), so no query evaluates more than it did. EXPLAIN runs them as well, to show the
//! plan that would run; its note names each value. `ADISK_SCALARS_FIRST=off` turns this off.
use super::metrics::ScanReport;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan, Subquery};

/// Whether subqueries run first (`ADISK_SCALARS_FIRST=off`: no; they run inside the plan).
pub fn enabled() -> bool {
    std::env::var("ADISK_SCALARS_FIRST").map_or(true, |v| v != "off")
}

/// What running a query's scalar subqueries first gave.
#[derive(Clone, Debug, Default)]
pub(super) struct First {
    /// Each subquery's key ([`key`]) and value.
    pub values: Vec<(String, ScalarValue)>,
    /// What their disk jobs did, counted with the query's.
    pub scans: Vec<ScanReport>,
    /// The query's optimized logical plan in the session that ran them, values in place.
    pub plan: Option<LogicalPlan>,
    /// For EXPLAIN and `--stats`: the values and how long they took.
    pub note: Option<String>,
}

/// Whether `sql` may hold a subquery at all (a second SELECT): the others pay nothing.
pub(super) fn may_hold(sql: &str) -> bool {
    enabled() && sql.to_ascii_lowercase().matches("select").nth(1).is_some()
}

/// A subquery's identity across sessions: its plan written back as SQL (where a session
/// keeps a filter above a scan that another pushes into it, the SQL is the same), else as
/// displayed.
pub(super) fn key(s: &Subquery) -> String {
    sql_of(s).unwrap_or_else(|| s.subquery.display_indent().to_string())
}

/// The subquery written back as SQL (DataFusion's unparser), if it can be.
pub(super) fn sql_of(s: &Subquery) -> Option<String> {
    match datafusion::sql::unparser::plan_to_sql(&s.subquery) {
        Ok(q) => Some(q.to_string()),
        Err(e) => {
            tracing::debug!(%e, "a scalar subquery cannot be written as SQL");
            None
        }
    }
}

/// The value for subquery `s` of a plan whose subqueries are `found`: the one under its key;
/// failing that, when the plan and `values` hold one subquery each, of the same type, that
/// one (another session may have ordered a subquery's joins differently).
fn value_for<'a>(
    s: &Subquery,
    found: &[Subquery],
    values: &'a [(String, ScalarValue)],
) -> Option<&'a ScalarValue> {
    let k = key(s);
    if let Some((_, v)) = values.iter().find(|(vk, _)| *vk == k) {
        return Some(v);
    }
    let typed = s.subquery.schema().fields().first()?.data_type().clone();
    match (found, values) {
        ([_], [(_, v)]) if v.data_type() == typed => Some(v),
        _ => None,
    }
}

/// Whether `plan` holds an uncorrelated scalar subquery outside other subqueries: a cheap
/// test on the unoptimized plan before paying for anything else.
pub(super) fn any(plan: &LogicalPlan) -> bool {
    !find(plan).is_empty()
}

/// The uncorrelated scalar subqueries of `plan` (not those inside other subqueries: they run
/// with theirs), each once, in the order met.
pub(super) fn find(plan: &LogicalPlan) -> Vec<Subquery> {
    let mut found: Vec<Subquery> = Vec::new();
    let _ = plan.apply(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::ScalarSubquery(s) = e
                    && s.outer_ref_columns.is_empty()
                    && !found.iter().any(|f| f.subquery == s.subquery)
                {
                    found.push(s.clone());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    found
}

/// `plan` with each subquery whose key is in `values` replaced by its value; a column a
/// subquery named keeps its name.
pub(super) fn substitute(
    plan: LogicalPlan,
    values: &[(String, ScalarValue)],
) -> datafusion::error::Result<LogicalPlan> {
    if values.is_empty() {
        return Ok(plan);
    }
    let found = find(&plan);
    let out = plan.transform_up(|node| {
        let names = NamePreserver::new(&node);
        node.map_expressions(|e| {
            let saved = names.save(&e);
            let replaced = e.transform_up(|e| match &e {
                Expr::ScalarSubquery(s) if s.outer_ref_columns.is_empty() => {
                    match value_for(s, &found, values) {
                        Some(v) => Ok(Transformed::yes(Expr::Literal(v.clone(), None))),
                        None => Ok(Transformed::no(e)),
                    }
                }
                _ => Ok(Transformed::no(e)),
            })?;
            Ok(if replaced.transformed {
                Transformed::yes(saved.restore(replaced.data))
            } else {
                replaced
            })
        })
    })?;
    out.data.recompute_schema()
}

/// The value of a scalar subquery from its result (one column): NULL of the column's type for
/// no row, the row's value for one.
///
/// # Errors
/// More than one row, as DataFusion words it; a result that is not one column.
pub(super) fn value_of(
    schema: &arrow::datatypes::Schema,
    batches: &[arrow::array::RecordBatch],
) -> datafusion::error::Result<ScalarValue> {
    use datafusion::common::exec_err;
    if schema.fields().len() != 1 {
        return exec_err!(
            "a scalar subquery must return one column, not {}",
            schema.fields().len()
        );
    }
    let mut rows = batches.iter().filter(|b| b.num_rows() > 0);
    match (rows.next(), rows.next()) {
        (None, _) => ScalarValue::try_from(schema.field(0).data_type()),
        (Some(b), None) if b.num_rows() == 1 => ScalarValue::try_from_array(b.column(0), 0),
        _ => exec_err!("Scalar subquery returned more than one row"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::SessionContext;
    use std::sync::Arc;

    fn ctx() -> SessionContext {
        let ctx = SessionContext::new();
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int64, false),
            Field::new("v", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 1, 2, 3])),
                Arc::new(Int64Array::from(vec![Some(10), Some(20), None, Some(5)])),
            ],
        )
        .unwrap();
        ctx.register_batch("t", batch).unwrap();
        ctx
    }

    async fn optimized(ctx: &SessionContext, sql: &str) -> LogicalPlan {
        ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap()
    }

    #[tokio::test]
    async fn uncorrelated_subqueries_are_found_once_and_correlated_ones_not() {
        let ctx = ctx();
        let sql = "SELECT g, (SELECT max(v) FROM t) AS m FROM t \
                   WHERE v > (SELECT avg(v) FROM t) OR v = (SELECT max(v) FROM t)";
        let plan = ctx.sql(sql).await.unwrap().into_unoptimized_plan();
        assert!(any(&plan));
        assert_eq!(find(&optimized(&ctx, sql).await).len(), 2);
        let correlated = "SELECT g FROM t a WHERE v > (SELECT avg(v) FROM t b WHERE b.g = a.g)";
        let plan = ctx.sql(correlated).await.unwrap().into_unoptimized_plan();
        assert!(
            !any(&plan),
            "a correlated subquery is decorrelated, not run first"
        );
        assert!(find(&optimized(&ctx, "SELECT g FROM t").await).is_empty());
    }

    /// Planned with values in place of the subqueries, a query gives what it gave with them,
    /// with the same column names.
    #[tokio::test]
    async fn substituted_values_give_the_same_answer_and_names() {
        let ctx = ctx();
        for sql in [
            "SELECT g, (SELECT max(v) FROM t) FROM t WHERE v >= (SELECT avg(v) FROM t) ORDER BY g",
            "SELECT g FROM t WHERE v = (SELECT max(v) FROM t WHERE g > 9) ORDER BY g",
            "SELECT g, count(*) FROM t GROUP BY g HAVING sum(v) > (SELECT min(v) FROM t) ORDER BY g",
        ] {
            let plan = optimized(&ctx, sql).await;
            let mut values = Vec::new();
            for s in find(&plan) {
                let df = ctx
                    .execute_logical_plan(s.subquery.as_ref().clone())
                    .await
                    .unwrap();
                let schema = df.schema().as_arrow().clone();
                let batches = df.collect().await.unwrap();
                values.push((key(&s), value_of(&schema, &batches).unwrap()));
            }
            assert!(!values.is_empty(), "{sql}");
            let planned = substitute(plan, &values).unwrap();
            assert!(find(&planned).is_empty(), "{sql}");
            let got = ctx.execute_logical_plan(planned).await.unwrap();
            let names: Vec<String> = got
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            let got = got.collect().await.unwrap();
            let want = ctx.sql(sql).await.unwrap();
            let want_names: Vec<String> = want
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            let want = want.collect().await.unwrap();
            assert_eq!(names, want_names, "{sql}");
            assert_eq!(
                arrow::util::pretty::pretty_format_batches(&got)
                    .unwrap()
                    .to_string(),
                arrow::util::pretty::pretty_format_batches(&want)
                    .unwrap()
                    .to_string(),
                "{sql}"
            );
        }
    }

    /// Another session may write a subquery differently: one subquery and one value of its
    /// type still match; a value of another type does not.
    #[tokio::test]
    async fn a_lone_subquery_takes_a_lone_value_of_its_type() {
        let ctx = ctx();
        let plan = optimized(&ctx, "SELECT g FROM t WHERE v > (SELECT max(v) FROM t)").await;
        let other = vec![("another text".to_string(), ScalarValue::Int64(Some(10)))];
        let planned = substitute(plan.clone(), &other).unwrap();
        assert!(find(&planned).is_empty());
        let got = ctx.execute_logical_plan(planned).await.unwrap();
        assert_eq!(got.collect().await.unwrap()[0].num_rows(), 1);
        let mistyped = vec![(
            "another text".to_string(),
            ScalarValue::Utf8(Some("x".into())),
        )];
        assert_eq!(find(&substitute(plan, &mistyped).unwrap()).len(), 1);
    }

    #[test]
    fn no_row_is_null_and_two_rows_are_an_error() {
        let schema = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
        let batch = |v: Vec<i64>| {
            RecordBatch::try_new(
                Arc::new(schema.clone()),
                vec![Arc::new(Int64Array::from(v))],
            )
            .unwrap()
        };
        assert_eq!(value_of(&schema, &[]).unwrap(), ScalarValue::Int64(None));
        assert_eq!(
            value_of(&schema, &[batch(vec![]), batch(vec![7])]).unwrap(),
            ScalarValue::Int64(Some(7))
        );
        for two in [
            vec![batch(vec![1, 2])],
            vec![batch(vec![1]), batch(vec![2])],
        ] {
            let e = value_of(&schema, &two).unwrap_err().to_string();
            assert!(e.contains("more than one row"), "{e}");
        }
    }
}
