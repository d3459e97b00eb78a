//! Eager aggregation: a grouped aggregation partly computed below the joins that bring in its
//! grouping columns (Yan and Larson, "Eager Aggregation and Lazy Aggregation", VLDB 1995).
//!
//! TPC-H Q10 sums each customer's lost revenue: `lineitem ⋈ orders` (the lines of a quarter's
//! orders) joined with `customer` and `nation`, grouped by seven columns of the customer. As
//! written, every matching line is joined with its customer's row (all of `customer`'s
//! columns, 20 MiB at SF 1) before the sum. The sum per customer key can be taken first:
//!
//! ```text
//! Aggregate(G; sum(e))                       Projection(as before: names, types)
//! └── ⋈ (A-leaves, B-leaves)          ==>    └── Aggregate(G; sum(s))
//!                                                └── ⋈ (A-leaves, Aggregate(K, G_B; sum(e) AS s) ← ⋈ B-leaves)
//! ```
//!
//! The inner joins under the aggregation are taken as a set of leaves and conditions. `B` is
//! the part the aggregates read: the leaves their arguments read, and those reached from them
//! through leaves no grouping expression reads. The pre-aggregation groups `B`'s rows by `K`,
//! every column of `B` the rest of the plan reads (the conditions joining `B` to the other
//! leaves, grouping expressions that read other leaves too), and by the grouping expressions
//! that read only `B`. Every pair of joined rows then depends on a `B` row through its group
//! only, so the sums of each group add up to the same totals, whatever joins above repeat or
//! drop them.
//!
//! Exact where it applies: `sum` over integers and decimals (integer arithmetic, in any
//! order), `count` (a sum of counts), `min`, `max`; no DISTINCT, FILTER or ORDER BY; at least
//! one grouping expression (an empty input then has no group either way); the final values are
//! cast back to the types the query had. Only trees of inner equi-joins are taken, and only
//! where `B` holds at least two leaves (an aggregation over a single table's rows before one
//! join rarely pays) and is joined to the rest. `ADISK_EAGER_AGGREGATION=off` in the planning
//! process's environment turns it off (for measuring it).
use super::relation::{Joins, flatten, is_join, plain_aggregate, unalias};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    Aggregate, Expr, ExprSchemable, JoinType, LogicalPlan, LogicalPlanBuilder,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use std::collections::{BTreeSet, HashMap};

/// The prefix of the pre-aggregation's output names.
pub const EAGER: &str = "__adisk_eager";

/// The rule (see the module).
#[derive(Debug, Default)]
pub struct EagerAggregation;

/// Whether the rule is on (`ADISK_EAGER_AGGREGATION` is not `off`).
pub fn enabled() -> bool {
    std::env::var("ADISK_EAGER_AGGREGATION").map_or(true, |v| v != "off")
}

impl OptimizerRule for EagerAggregation {
    fn name(&self) -> &str {
        "adisk_eager_aggregation"
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
                LogicalPlan::Aggregate(a) => rewrite(a)?,
                _ => None,
            };
            Ok(match new {
                Some(new) => Transformed::yes(new),
                None => Transformed::no(node),
            })
        })
    }
}

/// The aggregate call `e` is (through aliases), if the sum of its values per group is exact.
fn decomposable<'a>(e: &'a Expr, input: &LogicalPlan) -> Option<&'a AggregateFunction> {
    let f = plain_aggregate(e)?;
    let p = &f.params;
    match f.func.name() {
        "min" | "max" | "count" => Some(f),
        "sum" => {
            let t = p.args[0].get_type(input.schema().as_ref()).ok()?;
            (t.is_integer() || t.is_decimal()).then_some(f)
        }
        _ => None,
    }
}

/// `agg` with its aggregates partly computed below the joins that bring in its grouping
/// columns, if it has that shape.
fn rewrite(agg: &Aggregate) -> Result<Option<LogicalPlan>> {
    if agg.group_expr.is_empty() {
        return Ok(None);
    }
    let mut joins = Joins::default();
    let view = if flatten(&agg.input, &mut joins, true) {
        agg.clone()
    } else {
        let Some(view) = see_through(agg)? else {
            return Ok(None);
        };
        if !flatten(&view.input, &mut joins, true) {
            return Ok(None);
        }
        view
    };
    if joins.leaves.len() < 3
        || view
            .aggr_expr
            .iter()
            .any(|e| decomposable(e, &view.input).is_none())
    {
        return Ok(None);
    }
    let Some(b) = side_b(&view, &joins) else {
        return Ok(None);
    };
    build(&view, &joins, &b, agg)
}

/// `agg` over a derived table (`FROM (SELECT … FROM a, b WHERE …) AS t`: an alias over a
/// projection computing its columns over joins) as the same aggregation over those joins,
/// its expressions written over the joins' columns.
fn see_through(agg: &Aggregate) -> Result<Option<Aggregate>> {
    let projection = match agg.input.as_ref() {
        LogicalPlan::SubqueryAlias(a) => match a.input.as_ref() {
            LogicalPlan::Projection(p) => p,
            _ => return Ok(None),
        },
        LogicalPlan::Projection(p) => p,
        _ => return Ok(None),
    };
    if !is_join(&projection.input) || projection.expr.iter().any(|e| e.is_volatile()) {
        return Ok(None);
    }
    let mut by: HashMap<Expr, Expr> = HashMap::new();
    for (i, e) in projection.expr.iter().enumerate() {
        let out = Column::from(agg.input.schema().qualified_field(i));
        by.insert(Expr::Column(out), unalias(e).clone());
    }
    let groups = agg
        .group_expr
        .iter()
        .map(|g| replace(unalias(g).clone(), &by))
        .collect::<Result<Vec<_>>>()?;
    let aggregates = agg
        .aggr_expr
        .iter()
        .map(|e| replace(unalias(e).clone(), &by))
        .collect::<Result<Vec<_>>>()?;
    Aggregate::try_new(projection.input.clone(), groups, aggregates).map(Some)
}

/// The leaves the aggregates read and those reached from them through leaves no grouping
/// expression reads; None unless at least two and not all.
fn side_b(agg: &Aggregate, joins: &Joins) -> Option<BTreeSet<usize>> {
    let mut args = BTreeSet::new();
    for e in &agg.aggr_expr {
        args.extend(joins.leaves_of(e)?);
    }
    let mut grouped = BTreeSet::new();
    for e in &agg.group_expr {
        grouped.extend(joins.leaves_of(e)?);
    }
    let edges: Vec<BTreeSet<usize>> = joins
        .conditions
        .iter()
        .map(|c| joins.leaves_of(c))
        .collect::<Option<_>>()?;
    let mut b = args.clone();
    loop {
        let before = b.len();
        for e in &edges {
            if e.iter().any(|l| b.contains(l)) {
                for l in e {
                    if !grouped.contains(l) || args.contains(l) {
                        b.insert(*l);
                    }
                }
            }
        }
        if b.len() == before {
            break;
        }
    }
    (b.len() >= 2 && b.len() < joins.leaves.len()).then_some(b)
}

/// Whether the joins above the pre-aggregation drop no rows but by their keys: the other
/// leaves are tables read whole (no filter of their own), and the conditions among them are
/// equalities of columns. (Where they filter, aggregating first would sum rows the filters
/// would have dropped before the joins: TPC-H Q5's region, Q7's two nations, Q8's dates.)
fn unfiltered(joins: &Joins, b: &BTreeSet<usize>, rest: &[Expr]) -> bool {
    let whole = |plan: &LogicalPlan| match plan {
        LogicalPlan::TableScan(t) => t.filters.is_empty() && t.fetch.is_none(),
        _ => false,
    };
    let leaves_whole = joins
        .leaves
        .iter()
        .enumerate()
        .all(|(i, l)| b.contains(&i) || whole(l));
    let equalities = rest.iter().all(|c| {
        let touches_b = joins
            .leaves_of(c)
            .is_some_and(|ls| ls.iter().any(|l| b.contains(l)));
        touches_b
            || matches!(c, Expr::BinaryExpr(e) if e.op == datafusion::logical_expr::Operator::Eq
                && matches!(*e.left, Expr::Column(_)) && matches!(*e.right, Expr::Column(_)))
    });
    leaves_whole && equalities
}

/// Joins `leaves` left-deep in their order, each next one a leaf some condition joins to
/// those before it, with every condition as soon as it can apply. None if a leaf joins to
/// none, or a condition is left.
fn join_all(mut leaves: Vec<LogicalPlan>, conditions: &[Expr]) -> Result<Option<LogicalPlan>> {
    let mut pending: Vec<Expr> = conditions.to_vec();
    let mut plan = LogicalPlanBuilder::from(leaves.remove(0)).build()?;
    while !leaves.is_empty() {
        let reads =
            |e: &Expr, p: &LogicalPlan| e.column_refs().iter().all(|c| p.schema().has_column(c));
        let next = leaves.iter().position(|l| {
            pending.iter().any(|c| {
                !reads(c, &plan)
                    && c.column_refs()
                        .iter()
                        .all(|col| plan.schema().has_column(col) || l.schema().has_column(col))
            })
        });
        let Some(next) = next else {
            return Ok(None);
        };
        let leaf = leaves.remove(next);
        let (now, later): (Vec<Expr>, Vec<Expr>) = pending.into_iter().partition(|c| {
            c.column_refs()
                .iter()
                .all(|col| plan.schema().has_column(col) || leaf.schema().has_column(col))
        });
        pending = later;
        plan = LogicalPlanBuilder::from(plan)
            .join_on(leaf, JoinType::Inner, now)?
            .build()?;
    }
    if let Some(rest) = conjunction(pending) {
        plan = LogicalPlanBuilder::from(plan).filter(rest)?.build()?;
    }
    Ok(Some(plan))
}

/// The rewritten plan: `B`'s leaves joined and pre-aggregated, joined with the other leaves,
/// aggregated again, and projected to the aggregation's own output.
fn build(
    agg: &Aggregate,
    joins: &Joins,
    b: &BTreeSet<usize>,
    output: &Aggregate,
) -> Result<Option<LogicalPlan>> {
    let in_b = |e: &Expr| joins.leaves_of(e).is_some_and(|ls| ls.is_subset(b));
    let (b_conditions, rest): (Vec<Expr>, Vec<Expr>) =
        joins.conditions.iter().cloned().partition(|c| in_b(c));
    if !unfiltered(joins, b, &rest) {
        return Ok(None);
    }
    let b_leaves: Vec<LogicalPlan> = b.iter().map(|&i| joins.leaves[i].clone()).collect();
    let Some(b_plan) = join_all(b_leaves, &b_conditions)? else {
        return Ok(None);
    };
    // Grouping of the pre-aggregation: B's columns read by anything outside B, and the
    // grouping expressions that read only B.
    let mut keys: Vec<Expr> = Vec::new();
    let push = |e: Expr, keys: &mut Vec<Expr>| {
        if !keys.contains(&e) {
            keys.push(e);
        }
    };
    for c in &rest {
        for col in c.column_refs() {
            if b_plan.schema().has_column(col) {
                push(Expr::Column(col.clone()), &mut keys);
            }
        }
    }
    for g in &agg.group_expr {
        if in_b(g) {
            push(g.clone(), &mut keys);
        } else {
            for col in g.column_refs() {
                if b_plan.schema().has_column(col) {
                    push(Expr::Column(col.clone()), &mut keys);
                }
            }
        }
    }
    // The columns joining B to the rest (and read by mixed grouping expressions): one, so the
    // pre-aggregation has at most as many groups as that column has values.
    let joining = keys.iter().filter(|k| matches!(k, Expr::Column(_))).count()
        - agg
            .group_expr
            .iter()
            .filter(|g| in_b(g) && matches!(g, Expr::Column(_)))
            .count();
    if joining != 1 {
        return Ok(None);
    }
    let partials: Vec<Expr> = agg
        .aggr_expr
        .iter()
        .enumerate()
        .map(|(i, e)| unalias(e).clone().alias(format!("{EAGER}_{i}")))
        .collect();
    let pre = LogicalPlanBuilder::from(b_plan)
        .aggregate(keys.clone(), partials)?
        .build()?;
    // Each key expression by the pre-aggregation's output column.
    let mut by: HashMap<Expr, Expr> = HashMap::new();
    for (i, k) in keys.iter().enumerate() {
        by.insert(
            k.clone(),
            Expr::Column(Column::from(pre.schema().qualified_field(i))),
        );
    }
    let mut leaves: Vec<LogicalPlan> = joins
        .leaves
        .iter()
        .enumerate()
        .filter(|(i, _)| !b.contains(i))
        .map(|(_, l)| l.clone())
        .collect();
    leaves.push(pre.clone());
    let rest = rest
        .into_iter()
        .map(|c| replace(c, &by))
        .collect::<Result<Vec<_>>>()?;
    let Some(joined) = join_all(leaves, &rest)? else {
        return Ok(None);
    };
    finish((agg, output), joined, &pre, keys.len(), &by).map(Some)
}

/// The top aggregation over the joined pre-aggregates and the projection back to `output`'s
/// schema (names, qualifiers and types; `agg` is `output` seen through a derived table).
fn finish(
    (agg, output): (&Aggregate, &Aggregate),
    joined: LogicalPlan,
    pre: &LogicalPlan,
    keys: usize,
    by: &HashMap<Expr, Expr>,
) -> Result<LogicalPlan> {
    let groups = agg
        .group_expr
        .iter()
        .map(|g| replace(g.clone(), by))
        .collect::<Result<Vec<_>>>()?;
    let mut finals = Vec::new();
    for (i, e) in agg.aggr_expr.iter().enumerate() {
        let Some(f) = decomposable(e, &agg.input) else {
            return datafusion::common::internal_err!(
                "eager aggregation: `{e}` is not decomposable"
            );
        };
        let partial = Expr::Column(Column::from(pre.schema().qualified_field(keys + i)));
        let func = match f.func.name() {
            "count" | "sum" => datafusion::functions_aggregate::sum::sum_udaf(),
            _ => f.func.clone(),
        };
        finals.push(Expr::AggregateFunction(AggregateFunction::new_udf(
            func,
            vec![partial],
            false,
            None,
            vec![],
            None,
        )));
    }
    let top = LogicalPlanBuilder::from(joined)
        .aggregate(groups, finals)?
        .build()?;
    let out: Vec<Expr> = output
        .schema
        .iter()
        .zip(top.schema().columns())
        .map(|((q, field), c)| {
            Expr::Column(c)
                .cast_to(field.data_type(), top.schema().as_ref())
                .map(|e| e.alias_qualified(q.cloned(), field.name()))
        })
        .collect::<Result<_>>()?;
    LogicalPlanBuilder::from(top).project(out)?.build()
}

/// `e` with each of `by`'s keys (whole expressions) replaced by its value.
fn replace(e: Expr, by: &HashMap<Expr, Expr>) -> Result<Expr> {
    e.transform_down(|e| match by.get(&e) {
        Some(new) => Ok(Transformed::new(
            new.clone(),
            true,
            datafusion::common::tree_node::TreeNodeRecursion::Jump,
        )),
        None => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Decimal128Array, Int64Array, RecordBatch, StringArray};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;
    use std::sync::Arc;

    fn ints(v: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(v.to_vec()))
    }

    /// Lines `l(ok, v DECIMAL(15,2), q)`, orders `o(ok, ck, yr)`, customers `c(ck, name, nk)`
    /// (`dup`: customer 2 listed twice) and nations `n(nk, nname)`, with or without the rule.
    fn session(rule: bool, dup: bool, empty: bool) -> SessionContext {
        let mut state = SessionStateBuilder::new().with_default_features();
        if rule {
            state = state.with_optimizer_rule(Arc::new(EagerAggregation));
        }
        let ctx = SessionContext::new_with_state(state.build());
        let n = if empty { 0 } else { 9 };
        let v = Decimal128Array::from_iter(
            [
                Some(150),
                Some(275),
                None,
                Some(1000),
                Some(5),
                Some(7),
                Some(3),
                Some(99),
                Some(1),
            ]
            .into_iter()
            .take(n),
        )
        .with_precision_and_scale(15, 2)
        .unwrap();
        let l = RecordBatch::try_from_iter(vec![
            (
                "ok",
                ints(
                    &[
                        Some(1),
                        Some(1),
                        Some(2),
                        Some(3),
                        Some(3),
                        Some(4),
                        None,
                        Some(5),
                        Some(9),
                    ][..n],
                ),
            ),
            ("v", Arc::new(v) as ArrayRef),
            (
                "q",
                ints(
                    &[
                        Some(1),
                        Some(2),
                        Some(3),
                        None,
                        Some(5),
                        Some(6),
                        Some(7),
                        Some(8),
                        Some(9),
                    ][..n],
                ),
            ),
        ])
        .unwrap();
        ctx.register_batch("l", l).unwrap();
        let o = RecordBatch::try_from_iter(vec![
            ("ok", ints(&[Some(1), Some(2), Some(3), Some(4), Some(5)])),
            ("ck", ints(&[Some(1), Some(1), Some(2), Some(3), None])),
            (
                "yr",
                ints(&[Some(1994), Some(1995), Some(1994), Some(1995), Some(1994)]),
            ),
        ])
        .unwrap();
        ctx.register_batch("o", o).unwrap();
        let mut cks = vec![Some(1), Some(2), Some(3)];
        let mut names = vec!["a", "b", "c"];
        let mut nks = vec![Some(10), Some(20), Some(10)];
        if dup {
            cks.push(Some(2));
            names.push("b2");
            nks.push(Some(10));
        }
        let c = RecordBatch::try_from_iter(vec![
            ("ck", ints(&cks)),
            ("name", Arc::new(StringArray::from(names)) as ArrayRef),
            ("nk", ints(&nks)),
        ])
        .unwrap();
        ctx.register_batch("c", c).unwrap();
        let nations = RecordBatch::try_from_iter(vec![
            ("nk", ints(&[Some(10), Some(20)])),
            (
                "nname",
                Arc::new(StringArray::from(vec!["X", "Y"])) as ArrayRef,
            ),
        ])
        .unwrap();
        ctx.register_batch("n", nations).unwrap();
        ctx
    }

    /// The optimized plan with the rule, and the sorted rows with and without it (equal, with
    /// the same schema).
    async fn both(sql: &str, dup: bool, empty: bool) -> (String, String) {
        let run = |rule| async move {
            let df = session(rule, dup, empty).sql(sql).await.unwrap();
            let plan = df.clone().into_optimized_plan().unwrap();
            let schema = df.schema().as_arrow().clone();
            let rows = df.collect().await.unwrap();
            let text = arrow::util::pretty::pretty_format_batches(&rows).unwrap();
            let mut lines: Vec<String> = text.to_string().lines().map(str::to_string).collect();
            lines.sort();
            (
                plan.display_indent().to_string(),
                format!("{schema:?}\n{}", lines.join("\n")),
            )
        };
        let (plan, with) = run(true).await;
        let (_, without) = run(false).await;
        assert_eq!(with, without, "{sql}\n{plan}");
        (plan, with)
    }

    const Q10_LIKE: &str = "SELECT c.ck, c.name, n.nname, sum(l.v) AS revenue, count(*) AS lines, \
        min(l.q) AS least, max(l.v) AS most \
        FROM l, o, c, n WHERE l.ok = o.ok AND o.ck = c.ck AND c.nk = n.nk \
        GROUP BY c.ck, c.name, n.nname ORDER BY revenue DESC, c.ck";

    // The grouping expression over the lines is computed below the joins.
    const Q5_LIKE: &str = "SELECT n.nname, l.q % 2 AS odd, sum(l.v * l.q) AS revenue \
        FROM c, o, l, n WHERE c.ck = o.ck AND l.ok = o.ok AND c.nk = n.nk \
        GROUP BY n.nname, l.q % 2 ORDER BY 1, 2";

    // A derived table computing its columns (TPC-H Q7, Q8, Q9).
    const Q7_LIKE: &str = "SELECT nname, par, sum(vol) AS revenue, max(vol) AS most FROM \
        (SELECT n.nname AS nname, l.q % 2 AS par, l.v * (1 - l.q) AS vol \
         FROM l, o, c, n WHERE l.ok = o.ok AND o.ck = c.ck AND c.nk = n.nk) \
        AS shipping GROUP BY nname, par ORDER BY nname, par";

    #[tokio::test]
    async fn sums_before_the_joins_that_bring_the_groups_in() {
        for sql in [Q10_LIKE, Q5_LIKE, Q7_LIKE] {
            for (dup, empty) in [(false, false), (true, false), (false, true)] {
                let (plan, rows) = both(sql, dup, empty).await;
                assert!(plan.contains(EAGER), "{sql}\n{plan}");
                if !empty {
                    assert!(rows.lines().count() > 4, "{rows}");
                }
            }
        }
    }

    #[tokio::test]
    async fn other_shapes_stay_as_written() {
        for sql in [
            // No grouping: an empty input gives a row of NULLs and a count of 0.
            "SELECT sum(l.v), count(*) FROM l, o, c WHERE l.ok = o.ok AND o.ck = c.ck",
            // An average; a float sum; DISTINCT.
            "SELECT c.name, avg(l.v) FROM l, o, c WHERE l.ok = o.ok AND o.ck = c.ck GROUP BY c.name",
            "SELECT c.name, sum(CAST(l.q AS DOUBLE)) FROM l, o, c WHERE l.ok = o.ok AND o.ck = c.ck GROUP BY c.name",
            "SELECT c.name, count(DISTINCT l.q) FROM l, o, c WHERE l.ok = o.ok AND o.ck = c.ck GROUP BY c.name",
            // The aggregate reads one table only below the last join: nothing to gain.
            "SELECT o.ck, sum(l.v) FROM l, o WHERE l.ok = o.ok GROUP BY o.ck",
            "SELECT n.nname, o.yr, sum(l.v) FROM c, o, l, n \
             WHERE c.ck = o.ck AND l.ok = o.ok AND c.nk = n.nk GROUP BY n.nname, o.yr",
            // The joins above would filter: a nation's own filter, a filter over two of them.
            "SELECT n.nname, sum(l.v) FROM l, o, c, n WHERE l.ok = o.ok AND o.ck = c.ck \
             AND c.nk = n.nk AND n.nname <> 'Y' GROUP BY n.nname",
            "SELECT n.nname, sum(l.v) FROM l, o, c, n WHERE l.ok = o.ok AND o.ck = c.ck \
             AND c.nk = n.nk AND (n.nname = 'X' OR c.name = 'b') GROUP BY n.nname",
            // Two columns join the summed rows to the rest (a product of their values).
            "SELECT c.name, n.nname, sum(l.v) FROM l, o, c, n WHERE l.ok = o.ok AND o.ck = c.ck \
             AND l.q = n.nk GROUP BY c.name, n.nname",
            // A left join.
            "SELECT c.name, sum(l.v) FROM c LEFT JOIN o ON o.ck = c.ck LEFT JOIN l ON l.ok = o.ok GROUP BY c.name",
        ] {
            let (plan, _) = both(sql, false, false).await;
            assert!(!plan.contains(EAGER), "{sql}\n{plan}");
        }
    }
}
