//! A relation joined with its own extreme, computed once (the simplest case of WinMagic,
//! Zuzarte et al., "WinMagic: Subquery Elimination Using Window Aggregation", SIGMOD 2003).
//!
//! Queries asking for the rows of a relation whose value is the largest (or smallest) of all,
//! written with a scalar subquery over the same relation, compute the relation twice:
//!
//! ```sql
//! WITH revenue AS (SELECT l_suppkey AS supplier_no, sum(…) AS total_revenue
//!                  FROM lineitem WHERE … GROUP BY l_suppkey)
//! SELECT … FROM supplier, revenue
//! WHERE s_suppkey = supplier_no AND total_revenue = (SELECT max(total_revenue) FROM revenue)
//! ```
//!
//! (TPC-H Q15: every disk scans `lineitem` twice.) DataFusion keeps such an uncorrelated
//! subquery as an expression it evaluates once at run time: a filter `key = (SELECT max(c)
//! FROM R)`, where `max(c)` is taken over a relation `R` (through aliases and column
//! projections) and the filter's input holds the same `R`, `key` a column of it reached
//! through inner joins, filters, sorts without a limit, aliases and column projections. (With that option
//! off, it decorrelates it into an inner join `key = sq.max(c)`, rewritten alike.) The rule
//! computes `R` once:
//!
//! ```text
//! Filter(key = (SELECT max(c) FROM R))          … Projection(R's columns)
//! └── … R …                              ==>      └── Filter(c = m)
//!                                                     └── Window(max(c) OVER () AS m) ← R
//! ```
//!
//! It is exact: the filter keeps the rows whose key equals the extreme, a row-wise predicate
//! on a value of `R` that commutes with the inner joins, filters and sorts between `R` and
//! it; an empty `R` or NULL values give no rows either way (`max` skips NULLs; `NULL = m` is
//! not true). Only `max` and `min` without DISTINCT, FILTER or ORDER BY, and operators on the
//! path that commute with a filter are rewritten (a join form only with that one equality and
//! no other condition); anything else stays as written. `ADISK_WINMAGIC=off` in the planning
//! process's environment turns the rule off (for measuring it).
//!
//! The rule holds two more cases, each in its own module: groups filtered by their own grand
//! total (`grandtotal.rs`, TPC-H Q11) and a correlated subquery's aggregate per key taken over
//! the query's own rows (`perkey.rs`, TPC-H Q17).
use super::relation::unalias;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result};
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    AggregateUDF, Expr, Filter, Join, JoinType, LogicalPlan, LogicalPlanBuilder, Operator,
    WindowFunctionDefinition,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use std::sync::Arc;

/// The name of the extreme the window adds (dropped again right above its filter).
const EXTREME: &str = "__adisk_winmagic_extreme";

/// The rule (see the module).
#[derive(Debug, Default)]
pub struct WinMagic;

/// Whether the rule is on (`ADISK_WINMAGIC` is not `off`).
pub fn enabled() -> bool {
    std::env::var("ADISK_WINMAGIC").map_or(true, |v| v != "off")
}

impl OptimizerRule for WinMagic {
    fn name(&self) -> &str {
        "adisk_winmagic"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        plan.transform_up_with_subqueries(|node| {
            let new = match &node {
                LogicalPlan::Join(join) => match rewrite_join(join)? {
                    Some(new) => Some(new),
                    None => super::perkey::rewrite_join(join)?,
                },
                LogicalPlan::Filter(filter) => match rewrite_filter(filter)? {
                    Some(new) => Some(new),
                    None => super::grandtotal::rewrite_filter(filter)?,
                },
                _ => None,
            };
            Ok(match new {
                Some(new) => Transformed::yes(new),
                None => Transformed::no(node),
            })
        })
    }
}

/// The relation an extreme is taken over: `core`'s column `column`, by `func`.
struct Extreme<'a> {
    core: &'a LogicalPlan,
    column: usize,
    func: Arc<AggregateUDF>,
}

/// `join` with its extreme side computed from the other side's copy of the relation, if it
/// has that shape.
fn rewrite_join(join: &Join) -> Result<Option<LogicalPlan>> {
    if join.join_type != JoinType::Inner
        || join.filter.is_some()
        || join.null_aware
        || join.on.len() != 1
    {
        return Ok(None);
    }
    let (l, r) = &join.on[0];
    for extreme_right in [true, false] {
        let (other, side, other_key, side_key) = if extreme_right {
            (&join.left, &join.right, l, r)
        } else {
            (&join.right, &join.left, r, l)
        };
        let Expr::Column(side_key) = side_key else {
            continue;
        };
        if side.schema().index_of_column(side_key).ok() != Some(0) {
            continue;
        }
        let Some(extreme) = extreme_of(side) else {
            continue;
        };
        let Expr::Column(key) = other_key else {
            continue;
        };
        let Ok(at) = other.schema().index_of_column(key) else {
            continue;
        };
        if other.schema().field(at).data_type() != side.schema().field(0).data_type() {
            continue;
        }
        let Some(new_other) = replace(other, at, &extreme)? else {
            continue;
        };
        return like_join(new_other, side, key, extreme_right).map(Some);
    }
    Ok(None)
}

/// `filter` with a conjunct `key = (SELECT max(c) FROM R)` (an uncorrelated scalar subquery,
/// which DataFusion evaluates once at run time) answered from its input's own copy of `R`, if
/// it has one.
fn rewrite_filter(filter: &Filter) -> Result<Option<LogicalPlan>> {
    let conjuncts = split_conjunction(&filter.predicate);
    for (i, conjunct) in conjuncts.iter().enumerate() {
        let Expr::BinaryExpr(b) = conjunct else {
            continue;
        };
        if b.op != Operator::Eq {
            continue;
        }
        for (key, sq) in [(&b.left, &b.right), (&b.right, &b.left)] {
            let (Expr::Column(key), Expr::ScalarSubquery(sq)) = (key.as_ref(), sq.as_ref()) else {
                continue;
            };
            if !sq.outer_ref_columns.is_empty() {
                continue;
            }
            let Some(extreme) = extreme_of(&sq.subquery) else {
                continue;
            };
            let input = &filter.input;
            let Ok(at) = input.schema().index_of_column(key) else {
                continue;
            };
            if input.schema().field(at).data_type() != sq.subquery.schema().field(0).data_type() {
                continue;
            }
            let Some(new_input) = replace(input, at, &extreme)? else {
                continue;
            };
            let rest = conjuncts
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, e)| (*e).clone());
            return Ok(Some(match conjunction(rest) {
                Some(predicate) => LogicalPlanBuilder::from(new_input)
                    .filter(predicate)?
                    .build()?,
                None => new_input,
            }));
        }
    }
    Ok(None)
}

/// The extreme `side` is, if it is one: one row of one column made by `max` or `min` of a
/// column of a relation without grouping (through aliases and column projections).
fn extreme_of(side: &LogicalPlan) -> Option<Extreme<'_>> {
    if side.schema().fields().len() != 1 {
        return None;
    }
    let (aggregate, at) = through_columns(side, 0)?;
    let LogicalPlan::Aggregate(agg) = aggregate else {
        return None;
    };
    if !agg.group_expr.is_empty() || agg.aggr_expr.len() != 1 || at != 0 {
        return None;
    }
    let Expr::AggregateFunction(f) = unalias(&agg.aggr_expr[0]) else {
        return None;
    };
    let p = &f.params;
    if !matches!(f.func.name(), "max" | "min")
        || p.distinct
        || p.filter.is_some()
        || !p.order_by.is_empty()
        || p.args.len() != 1
    {
        return None;
    }
    let Expr::Column(c) = &p.args[0] else {
        return None;
    };
    let (core, column) = through_columns(&agg.input, agg.input.schema().index_of_column(c).ok()?)?;
    Some(Extreme {
        core,
        column,
        func: f.func.clone(),
    })
}

/// Follows column `at` of `plan` down through aliases and projections that pass it on as a
/// column: the first other node, and the column's index there.
fn through_columns(plan: &LogicalPlan, at: usize) -> Option<(&LogicalPlan, usize)> {
    match plan {
        LogicalPlan::SubqueryAlias(a) => through_columns(&a.input, at),
        LogicalPlan::Projection(p) => match unalias(p.expr.get(at)?) {
            Expr::Column(c) => through_columns(&p.input, p.input.schema().index_of_column(c).ok()?),
            _ => Some((plan, at)),
        },
        _ => Some((plan, at)),
    }
}

/// `plan` with the node equal to the extreme's relation, reached by following column `at`
/// down through operators a filter on that column commutes with, replaced by its rows whose
/// column is the extreme. None where the path leaves those operators or the column is another.
fn replace(plan: &LogicalPlan, at: usize, extreme: &Extreme) -> Result<Option<LogicalPlan>> {
    if let Some(same_column) = same_relation(plan, at, extreme) {
        return if same_column {
            extreme_rows(plan, at, extreme).map(Some)
        } else {
            Ok(None)
        };
    }
    let (child, child_at) = match plan {
        LogicalPlan::SubqueryAlias(_) | LogicalPlan::Filter(_) => (0, at),
        // A sort with a fetch is a limit: a filter below it would change which rows it keeps.
        LogicalPlan::Sort(s) if s.fetch.is_none() => (0, at),
        LogicalPlan::Projection(p) => match p.expr.get(at).map(unalias) {
            Some(Expr::Column(c)) => match p.input.schema().index_of_column(c) {
                Ok(i) => (0, i),
                Err(_) => return Ok(None),
            },
            _ => return Ok(None),
        },
        LogicalPlan::Join(j) if j.join_type == JoinType::Inner => {
            let left = j.left.schema().fields().len();
            if at < left { (0, at) } else { (1, at - left) }
        }
        _ => return Ok(None),
    };
    let Some(input) = plan.inputs().get(child).copied() else {
        return Ok(None);
    };
    let Some(new_input) = replace(input, child_at, extreme)? else {
        return Ok(None);
    };
    let mut i = 0;
    let new = plan.clone().map_children(|c| {
        let t = if i == child {
            Transformed::yes(new_input.clone())
        } else {
            Transformed::no(c)
        };
        i += 1;
        Ok(t)
    })?;
    Ok(Some(new.data))
}

/// Whether `plan` is the extreme's relation (None: it is not), and if so whether its column
/// `at` is the extreme's column. Scans of one table with the same filters and limit are the
/// same relation whatever columns each reads; the column is then told by name.
fn same_relation(plan: &LogicalPlan, at: usize, extreme: &Extreme) -> Option<bool> {
    if plan == extreme.core {
        return Some(at == extreme.column);
    }
    let (LogicalPlan::TableScan(a), LogicalPlan::TableScan(b)) = (plan, extreme.core) else {
        return None;
    };
    if a.table_name != b.table_name || a.filters != b.filters || a.fetch != b.fetch {
        return None;
    }
    let name = |p: &LogicalPlan, i: usize| p.schema().qualified_field(i).1.name().clone();
    Some(name(plan, at) == name(extreme.core, extreme.column))
}

/// `core`, only its rows whose column `at` is the extreme, with its own schema.
fn extreme_rows(core: &LogicalPlan, at: usize, extreme: &Extreme) -> Result<LogicalPlan> {
    let column = Expr::Column(Column::from(core.schema().qualified_field(at)));
    let window = Expr::WindowFunction(Box::new(WindowFunction::new(
        WindowFunctionDefinition::AggregateUDF(extreme.func.clone()),
        vec![column.clone()],
    )))
    .alias(EXTREME);
    let columns: Vec<Expr> = core
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    LogicalPlanBuilder::from(core.clone())
        .window(vec![window])?
        .filter(column.eq(Expr::Column(Column::from_name(EXTREME))))?
        .project(columns)?
        .build()
}

/// The join's schema over `other`, rewritten: its columns and, in the extreme's place, the
/// key (equal to the extreme on every row left).
fn like_join(
    other: LogicalPlan,
    side: &LogicalPlan,
    key: &Column,
    extreme_right: bool,
) -> Result<LogicalPlan> {
    let (q, f) = side.schema().qualified_field(0);
    let extreme = Expr::Column(key.clone()).alias_qualified(q.cloned(), f.name());
    let mut exprs: Vec<Expr> = other
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    if extreme_right {
        exprs.push(extreme);
    } else {
        exprs.insert(0, extreme);
    }
    LogicalPlanBuilder::from(other).project(exprs)?.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;

    /// A session with tables `t(g, v)` and `s(k)`, with or without the rule; `joins`: scalar
    /// subqueries decorrelated into joins (else evaluated once at run time, the default).
    fn session(rule: bool, joins: bool, t: &[(i64, Option<i64>)]) -> SessionContext {
        let config = datafusion::prelude::SessionConfig::new().set_bool(
            "datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery",
            !joins,
        );
        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features();
        if rule {
            state = state.with_optimizer_rule(Arc::new(WinMagic));
        }
        let ctx = SessionContext::new_with_state(state.build());
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int64, false),
            Field::new("v", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(t.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter(t.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        ctx.register_batch("t", batch).unwrap();
        let s = RecordBatch::try_from_iter(vec![(
            "k",
            Arc::new(Int64Array::from_iter_values(0..10)) as _,
        )])
        .unwrap();
        ctx.register_batch("s", s).unwrap();
        ctx
    }

    async fn run(ctx: &SessionContext, sql: &str) -> (String, String) {
        let df = ctx.sql(sql).await.unwrap();
        let plan = df.clone().into_optimized_plan().unwrap();
        let rows = df.collect().await.unwrap();
        (
            plan.display_indent().to_string(),
            arrow::util::pretty::pretty_format_batches(&rows)
                .unwrap()
                .to_string(),
        )
    }

    /// The answer with and without the rule, in both forms of scalar subqueries; the plan of
    /// the default form with the rule.
    async fn both(t: &[(i64, Option<i64>)], sql: &str) -> (String, String) {
        let (plan, with) = run(&session(true, false, t), sql).await;
        let (_, without) = run(&session(false, false, t), sql).await;
        assert_eq!(with, without, "{sql}\n{plan}");
        let (join_plan, joins) = run(&session(true, true, t), sql).await;
        assert_eq!(joins, without, "{sql}\n{join_plan}");
        (plan, with)
    }

    #[tokio::test]
    async fn the_join_form_is_rewritten_too() {
        let t = [(1, Some(5)), (2, Some(10)), (3, Some(7))];
        let (plan, rows) = run(&session(true, true, &t), Q15_LIKE).await;
        assert!(plan.contains(EXTREME), "{plan}");
        assert_eq!(plan.matches("TableScan: t").count(), 1, "{plan}");
        assert!(rows.contains("| 2 | 10    |"), "{rows}");
    }

    const Q15_LIKE: &str = "WITH r AS (SELECT g, sum(v) AS total FROM t WHERE g >= 0 GROUP BY g) \
        SELECT k, total FROM s, r WHERE k = g AND total = (SELECT max(total) FROM r) ORDER BY k";

    #[tokio::test]
    async fn the_relation_is_computed_once_and_the_answer_is_the_same() {
        let t = [
            (1, Some(5)),
            (1, Some(5)),
            (2, Some(10)),
            (3, Some(7)),
            (4, None),
        ];
        let (plan, rows) = both(&t, Q15_LIKE).await;
        assert_eq!(plan.matches("TableScan: t").count(), 1, "{plan}");
        assert!(plan.contains(EXTREME), "{plan}");
        assert!(
            rows.contains("| 1 | 10    |") && rows.contains("| 2 | 10    |"),
            "{rows}"
        );
    }

    #[tokio::test]
    async fn ties_nulls_empty_and_min() {
        // Ties: every group at the extreme is kept.
        let t = [(1, Some(3)), (2, Some(3)), (3, Some(1))];
        let (_, rows) = both(&t, Q15_LIKE).await;
        assert!(
            rows.contains("| 1 | 3 ") && rows.contains("| 2 | 3 "),
            "{rows}"
        );
        // Only NULL values: the extreme is NULL, no row.
        let t = [(1, None), (2, None)];
        let (plan, rows) = both(&t, Q15_LIKE).await;
        assert!(plan.contains(EXTREME), "{plan}");
        assert_eq!(rows.lines().count(), 2, "{rows}");
        // An empty relation.
        let (_, rows) = both(&[], Q15_LIKE).await;
        assert_eq!(rows.lines().count(), 2, "{rows}");
        // min, the subquery written on the left.
        let sql = "WITH r AS (SELECT g, sum(v) AS total FROM t GROUP BY g) \
            SELECT g, total FROM r WHERE (SELECT min(total) FROM r) = total";
        let (plan, rows) = both(&[(1, Some(4)), (2, Some(2)), (3, Some(9))], sql).await;
        assert!(plan.contains(EXTREME), "{plan}");
        assert!(rows.contains("| 2 | 2 "), "{rows}");
    }

    #[tokio::test]
    async fn other_shapes_stay_as_written() {
        // The extreme is the last group's: a limit to the first two keeps none of it.
        let t = [(1, Some(5)), (2, Some(7)), (3, Some(10))];
        for sql in [
            // Another relation in the subquery (filtered differently).
            "WITH r AS (SELECT g, sum(v) AS total FROM t GROUP BY g) \
             SELECT g FROM r WHERE total = (SELECT max(total) FROM r WHERE g > 1)",
            // Not an extreme.
            "WITH r AS (SELECT g, sum(v) AS total FROM t GROUP BY g) \
             SELECT g FROM r WHERE total = (SELECT sum(total) FROM r)",
            // DISTINCT on a count is not an extreme either.
            "SELECT g FROM t WHERE v = (SELECT count(DISTINCT v) FROM t)",
            // Another column of the relation than the extreme's.
            "WITH r AS (SELECT g, sum(v) AS total FROM t GROUP BY g) \
             SELECT g FROM r WHERE g = (SELECT max(total) FROM r)",
            // A limit on the path does not commute with the filter.
            "WITH r AS (SELECT g, sum(v) AS total FROM t GROUP BY g) \
             SELECT g FROM (SELECT * FROM r ORDER BY g LIMIT 2) x \
             WHERE total = (SELECT max(total) FROM r)",
        ] {
            let (plan, _) = both(&t, sql).await;
            assert!(!plan.contains(EXTREME), "{sql}\n{plan}");
        }
    }

    #[tokio::test]
    async fn scans_of_one_table_reading_other_columns_are_one_relation() {
        let t = [(1, Some(5)), (2, Some(10)), (3, Some(10)), (4, None)];
        let sql = "SELECT g, v FROM t WHERE v = (SELECT max(v) FROM t) ORDER BY g";
        let (plan, rows) = both(&t, sql).await;
        assert!(plan.contains(EXTREME), "{plan}");
        assert_eq!(plan.matches("TableScan: t").count(), 1, "{plan}");
        assert!(
            rows.contains("| 2 | 10 |") && rows.contains("| 3 | 10 |"),
            "{rows}"
        );
        // A filter above one of them: the extreme is still the whole table's.
        let sql = "SELECT g FROM t WHERE g > 2 AND v = (SELECT max(v) FROM t) ORDER BY g";
        let (_, rows) = both(&t, sql).await;
        assert!(rows.contains("| 3 |") && !rows.contains("| 2 |"), "{rows}");
    }

    #[tokio::test]
    async fn plain_tables_and_an_aggregate_above_keep_the_answer() {
        // The relation is a table scan itself; the join's result is aggregated above.
        let t = [(1, Some(5)), (2, Some(10)), (3, Some(10)), (4, Some(1))];
        let sql = "SELECT count(*) AS n, max(v) AS m FROM t WHERE v = (SELECT max(v) FROM t)";
        let (plan, rows) = both(&t, sql).await;
        assert!(plan.contains(EXTREME), "{plan}");
        assert!(rows.contains("| 2 | 10 |"), "{rows}");
    }
}
