//! Groups filtered by their own grand total, computed once (WinMagic's second case: Zuzarte et
//! al., SIGMOD 2003; `winmagic.rs` has the first).
//!
//! A grouped aggregation kept where its value passes a fraction of the same aggregation over
//! all of its rows, written with a scalar subquery over the same relation, computes the
//! relation twice (TPC-H Q11: `partsupp ⋈ supplier ⋈ nation` once for the groups and once,
//! run first, for the subquery):
//!
//! ```sql
//! SELECT ps_partkey, sum(ps_supplycost * ps_availqty) AS value
//! FROM partsupp, supplier, nation WHERE … GROUP BY ps_partkey
//! HAVING sum(ps_supplycost * ps_availqty) >
//!        (SELECT sum(ps_supplycost * ps_availqty) * 0.0001 FROM partsupp, supplier, nation WHERE …)
//! ```
//!
//! The total is the same aggregate of the groups' values (a sum of sums, a maximum of maxima),
//! so the rule takes it with a window over the groups:
//!
//! ```text
//! Filter(… sum(x) > (SELECT f(sum(x)) FROM R) …)       Projection(the groups' columns)
//! └── Aggregate(k; …, sum(x), …)                ==>    └── Filter(… sum(x) > f(CAST(t)) …)
//!     └── R                                                └── Window(sum(sum(x)) OVER () AS t)
//!                                                              └── Aggregate(k; …, sum(x), …) ← R
//! ```
//!
//! It is exact where it applies: `sum` over integers and decimals (integer arithmetic: the
//! sum of the groups' sums is the sum of all rows, whatever the order), `min` and `max` over
//! any type; all without DISTINCT, FILTER or ORDER BY. NULLs are skipped alike (a group of only
//! NULLs has a NULL sum, skipped by the window), and an empty relation has no groups either
//! way. The total is cast back to the subquery's aggregate's type, so `f` computes with the
//! same types it did. "The same relation" is told structurally: the same tables with the same
//! filters and limits, joined and filtered alike, whatever columns each copy passes on
//! (column names are qualified, so the aggregate's argument means the same in both). Anything
//! else stays as written. The rule is part of `WinMagic` (`ADISK_WINMAGIC=off` turns both off).
use super::relation::{plain_aggregate, same_rows, unalias};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result};
use datafusion::logical_expr::expr::{AggregateFunction, Cast, WindowFunction};
use datafusion::logical_expr::{
    Aggregate, Expr, Filter, LogicalPlan, LogicalPlanBuilder, Subquery, WindowFunctionDefinition,
};

/// The name of the total the window adds (dropped again right above its filter).
pub const TOTAL: &str = "__adisk_grand_total";

/// `filter` (over a grouped aggregation) with its scalar subqueries that take the same
/// aggregate over the aggregation's own rows answered from the groups, if it has any.
pub fn rewrite_filter(filter: &Filter) -> Result<Option<LogicalPlan>> {
    let LogicalPlan::Aggregate(agg) = filter.input.as_ref() else {
        return Ok(None);
    };
    if agg.group_expr.is_empty() {
        return Ok(None);
    }
    // Each aggregate of the groups whose total a subquery asks for, by its index.
    let mut totals: Vec<usize> = Vec::new();
    let predicate = filter.predicate.clone().transform(|e| {
        let Expr::ScalarSubquery(sq) = &e else {
            return Ok(Transformed::no(e));
        };
        match total_of(sq, agg)? {
            Some((at, value)) => {
                if !totals.contains(&at) {
                    totals.push(at);
                }
                Ok(Transformed::yes(value))
            }
            None => Ok(Transformed::no(e)),
        }
    })?;
    if !predicate.transformed {
        return Ok(None);
    }
    let schema = filter.input.schema();
    let windows: Vec<Expr> = totals
        .iter()
        .filter_map(|&at| Some((at, plain_aggregate(&agg.aggr_expr[at])?)))
        .map(|(at, f)| {
            let column = Expr::Column(Column::from(
                schema.qualified_field(agg.group_expr.len() + at),
            ));
            Expr::WindowFunction(Box::new(WindowFunction::new(
                WindowFunctionDefinition::AggregateUDF(f.func.clone()),
                vec![column],
            )))
            .alias(total_name(at))
        })
        .collect();
    let columns: Vec<Expr> = schema.columns().into_iter().map(Expr::Column).collect();
    LogicalPlanBuilder::from(filter.input.as_ref().clone())
        .window(windows)?
        .filter(predicate.data)?
        .project(columns)?
        .build()
        .map(Some)
}

fn total_name(at: usize) -> String {
    format!("{TOTAL}_{at}")
}

/// If `sq` is an uncorrelated `SELECT f(agg(x)) FROM R` (no grouping) whose `agg(x)` is
/// aggregate `at` of `groups` over the same relation `R`, with a total the groups give
/// exactly: `at` and `f` over the window's total (cast to `agg(x)`'s type).
fn total_of(sq: &Subquery, groups: &Aggregate) -> Result<Option<(usize, Expr)>> {
    if !sq.outer_ref_columns.is_empty() || sq.subquery.schema().fields().len() != 1 {
        return Ok(None);
    }
    let (value, below) = match sq.subquery.as_ref() {
        LogicalPlan::Projection(p) => (unalias(&p.expr[0]).clone(), p.input.as_ref()),
        LogicalPlan::Aggregate(_) => {
            let column = Column::from(sq.subquery.schema().qualified_field(0));
            (Expr::Column(column), sq.subquery.as_ref())
        }
        _ => return Ok(None),
    };
    let LogicalPlan::Aggregate(all) = below else {
        return Ok(None);
    };
    if !all.group_expr.is_empty() || all.aggr_expr.len() != 1 {
        return Ok(None);
    }
    let Some(f) = plain_aggregate(&all.aggr_expr[0]).filter(|f| exact_total(f, all)) else {
        return Ok(None);
    };
    let Some(at) = groups
        .aggr_expr
        .iter()
        .position(|e| plain_aggregate(e) == Some(f))
    else {
        return Ok(None);
    };
    if !same_rows(&groups.input, &all.input) {
        return Ok(None);
    }
    let of_all = Column::from(all.schema.qualified_field(0));
    let total = Expr::Cast(Cast::new(
        Box::new(Expr::Column(Column::from_name(total_name(at)))),
        all.schema.field(0).data_type().clone(),
    ));
    let mut only_total = true;
    let value = value.transform(|e| match &e {
        Expr::Column(c) if *c == of_all => Ok(Transformed::yes(total.clone())),
        Expr::Column(_) | Expr::ScalarSubquery(_) | Expr::OuterReferenceColumn(..) => {
            only_total = false;
            Ok(Transformed::no(e))
        }
        _ => Ok(Transformed::no(e)),
    })?;
    Ok(only_total.then_some((at, value.data)))
}

/// Whether the same aggregate over the groups' values gives `f` over all rows exactly.
fn exact_total(f: &AggregateFunction, all: &Aggregate) -> bool {
    match f.func.name() {
        "min" | "max" => true,
        "sum" => {
            let t = all.schema.field(0).data_type();
            t.is_integer() || t.is_decimal()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::winmagic::WinMagic;
    use arrow::array::{Decimal128Array, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;
    use std::sync::Arc;

    /// Tables `t(g, s, v, d)` (`d`: `v` as DECIMAL(15,2)) and `s(k, n)`, with or without the
    /// rule.
    fn session(rule: bool, t: &[(i64, i64, Option<i64>)]) -> SessionContext {
        let mut state = SessionStateBuilder::new().with_default_features();
        if rule {
            state = state.with_optimizer_rule(Arc::new(WinMagic));
        }
        let ctx = SessionContext::new_with_state(state.build());
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int64, false),
            Field::new("s", DataType::Int64, false),
            Field::new("v", DataType::Int64, true),
            Field::new("d", DataType::Decimal128(15, 2), true),
        ]));
        let decimals = Decimal128Array::from_iter(t.iter().map(|r| r.2.map(|v| v as i128 * 101)))
            .with_precision_and_scale(15, 2)
            .unwrap();
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(t.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(t.iter().map(|r| r.1))),
                Arc::new(Int64Array::from_iter(t.iter().map(|r| r.2))),
                Arc::new(decimals),
            ],
        )
        .unwrap();
        ctx.register_batch("t", batch).unwrap();
        let s = RecordBatch::try_from_iter(vec![
            ("k", Arc::new(Int64Array::from_iter_values(0..4)) as _),
            (
                "n",
                Arc::new(Int64Array::from_iter_values((0..4).map(|k| k % 2))) as _,
            ),
        ])
        .unwrap();
        ctx.register_batch("s", s).unwrap();
        ctx
    }

    /// The optimized plan with the rule, and the sorted rows with and without it (equal).
    async fn both(t: &[(i64, i64, Option<i64>)], sql: &str) -> (String, String) {
        let run = |rule| async move {
            let df = session(rule, t).sql(sql).await.unwrap();
            let plan = df.clone().into_optimized_plan().unwrap();
            let rows = df.collect().await.unwrap();
            let text = arrow::util::pretty::pretty_format_batches(&rows).unwrap();
            let mut lines: Vec<String> = text.to_string().lines().map(str::to_string).collect();
            lines.sort();
            (plan.display_indent().to_string(), lines.join("\n"))
        };
        let (plan, with) = run(true).await;
        let (_, without) = run(false).await;
        assert_eq!(with, without, "{sql}\n{plan}");
        (plan, with)
    }

    const Q11_LIKE: &str = "SELECT g, sum(d * v) AS value FROM t, s \
        WHERE s = k AND n = 1 GROUP BY g \
        HAVING sum(d * v) > (SELECT sum(d * v) * 0.25 FROM t, s WHERE s = k AND n = 1) \
        ORDER BY value DESC";

    fn rows() -> Vec<(i64, i64, Option<i64>)> {
        vec![
            (1, 1, Some(5)),
            (1, 3, Some(2)),
            (2, 1, Some(10)),
            (2, 0, Some(50)),
            (3, 3, Some(1)),
            (4, 1, None),
            (5, 3, Some(-3)),
            (6, 1, Some(7)),
        ]
    }

    #[tokio::test]
    async fn the_relation_is_computed_once_and_the_answer_is_the_same() {
        let (plan, rows) = both(&rows(), Q11_LIKE).await;
        assert!(plan.contains(TOTAL), "{plan}");
        assert_eq!(plan.matches("TableScan: t").count(), 1, "{plan}");
        assert!(!plan.contains("Subquery"), "{plan}");
        // Groups 1 (25 + 4 = 29 · 1.01), 2 (100 · 1.01) and 6 (49 · 1.01) of a total of 176.76:
        // 2 and 6 pass a quarter (44.19).
        assert!(
            rows.contains("| 2 | 101.00") && rows.contains("| 6 | 49.49"),
            "{rows}"
        );
        assert_eq!(
            rows.lines().filter(|l| l.starts_with("| ")).count(),
            3,
            "{rows}"
        );
    }

    #[tokio::test]
    async fn integers_min_max_nulls_and_empty() {
        for sql in [
            "SELECT g FROM t GROUP BY g HAVING sum(v) >= (SELECT sum(v) / 4 FROM t)",
            "SELECT g, max(v) FROM t GROUP BY g HAVING max(v) = (SELECT max(v) FROM t)",
            "SELECT g FROM t GROUP BY g HAVING min(v) < (SELECT min(v) + 2 FROM t) AND count(*) > 0",
        ] {
            let (plan, _) = both(&rows(), sql).await;
            assert!(plan.contains(TOTAL), "{sql}\n{plan}");
            // Only NULLs, and no rows at all.
            let (plan, rows) = both(&[(1, 1, None), (2, 1, None)], sql).await;
            assert!(plan.contains(TOTAL), "{sql}\n{plan}");
            assert!(!rows.contains("| 1"), "{rows}");
            let (_, rows) = both(&[], sql).await;
            assert!(!rows.contains("| 1") && !rows.contains("| 2"), "{rows}");
        }
    }

    #[tokio::test]
    async fn other_shapes_stay_as_written() {
        for sql in [
            // Another relation (filtered differently).
            "SELECT g FROM t GROUP BY g HAVING sum(v) > (SELECT sum(v) * 0.25 FROM t WHERE g > 1)",
            // Another join.
            "SELECT g FROM t, s WHERE s = k GROUP BY g \
             HAVING sum(v) > (SELECT sum(v) * 0.25 FROM t, s WHERE g = k)",
            // Another aggregate than the groups'.
            "SELECT g FROM t GROUP BY g HAVING sum(v) > (SELECT avg(v) FROM t)",
            "SELECT g FROM t GROUP BY g HAVING count(v) > (SELECT count(v) / 4 FROM t)",
            // DISTINCT.
            "SELECT g FROM t GROUP BY g HAVING sum(DISTINCT v) > (SELECT sum(DISTINCT v) / 4 FROM t)",
            // A float sum depends on its order.
            "SELECT g FROM t GROUP BY g HAVING sum(CAST(v AS DOUBLE)) > \
             (SELECT sum(CAST(v AS DOUBLE)) / 4 FROM t)",
            // A filter on the group key is pushed below the groups: another relation.
            "SELECT g FROM t GROUP BY g HAVING min(v) < (SELECT min(v) + 2 FROM t) AND g > 0",
            // Not the grouped aggregation's own filter.
            "SELECT g FROM t WHERE v > (SELECT sum(v) / 4 FROM t)",
        ] {
            let (plan, _) = both(&rows(), sql).await;
            assert!(!plan.contains(TOTAL), "{sql}\n{plan}");
        }
    }
}
