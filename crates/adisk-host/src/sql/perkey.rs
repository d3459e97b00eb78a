//! A correlated subquery's aggregate per key, taken with a window over the query's own rows
//! (WinMagic's main case: Zuzarte et al., SIGMOD 2003; `winmagic.rs` and `grandtotal.rs`
//! have the uncorrelated ones).
//!
//! TPC-H Q17 keeps the lineitems of some parts whose quantity is below a fifth of their
//! part's average quantity:
//!
//! ```sql
//! SELECT sum(l_extendedprice) / 7.0 FROM lineitem, part
//! WHERE p_partkey = l_partkey AND p_brand = 'Brand#23' AND p_container = 'MED BOX'
//!   AND l_quantity < (SELECT 0.2 * avg(l_quantity) FROM lineitem WHERE l_partkey = p_partkey)
//! ```
//!
//! DataFusion decorrelates the subquery into a semi join with `lineitem` grouped by part, so
//! `lineitem` is scanned twice. The query's own rows already hold every lineitem of each part
//! they hold, so the rule takes the average over them, partitioned by the key:
//!
//! ```text
//! LeftSemi Join(o = sq.k, x = sq.m; filter)          Projection(O's columns)
//! ├── O (… S …)                              ==>     └── Filter(o IS NOT NULL AND x = m' AND filter')
//! └── sq: Projection(…) ← Aggregate(k; f(c)) ← S         └── Window(f(c) OVER (PARTITION BY o) AS w) ← O
//! ```
//!
//! It is exact under these conditions, checked on the plan:
//! - `S` is found in `O` (the same relation, whatever columns each copy passes on:
//!   `grandtotal::same_rows`), reached from `O` through projections, filters and inner joins
//!   only;
//! - on that path no filter or join condition refers to a column of `S` other than the key,
//!   and the joins onto `S`'s branch are equi-joins. So each key's rows of `S` are in `O` all
//!   or none, each as often as any other (`S_v × W_v`);
//! - the join column `o` is the key, or equal to it through those joins;
//! - every aggregate gives the same value when each row of a key comes equally often: `min`
//!   and `max` over any type, `avg` over decimals (integer arithmetic: `d·sum / d·count` is
//!   the same fraction, rounded alike); without DISTINCT, FILTER or ORDER BY; its arguments
//!   are columns `O` passes on;
//! - the subquery groups by that one key, and the semi join matches on it with NULLs equal to
//!   nothing (a NULL key matches no group: `o IS NOT NULL` keeps that).
//!
//! Each subquery column is replaced by its expression over the window's values (cast to the
//! aggregate's type). Anything else stays as written. Part of `WinMagic`
//! (`ADISK_WINMAGIC=off` turns it off with the rest).
use super::relation::{Joins, flatten, plain_aggregate, same_rows, unalias};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, NullEquality, Result, TableReference};
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::expr::{AggregateFunction, Cast, WindowFunction};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    Aggregate, Expr, Join, JoinType, LogicalPlan, LogicalPlanBuilder, WindowFunctionDefinition,
};
use std::collections::HashMap;

/// The prefix of the names the window adds (dropped again right above its filter).
pub const PER_KEY: &str = "__adisk_per_key";

/// The subquery side of the semi join: its columns (by output position, over the aggregate's
/// output), the aggregate, and the key column's output.
struct PerKey<'a> {
    alias_exprs: Vec<(Column, Expr)>,
    aggregate: &'a Aggregate,
}

/// `join` (a semi join with a subquery's aggregate per key) with the aggregate taken from its
/// left side's own rows, if it has that shape.
pub fn rewrite_join(join: &Join) -> Result<Option<LogicalPlan>> {
    if join.join_type != JoinType::LeftSemi
        || join.null_aware
        || join.null_equality != NullEquality::NullEqualsNothing
    {
        return Ok(None);
    }
    let Some(sub) = per_key(&join.right) else {
        return Ok(None);
    };
    let agg = sub.aggregate;
    let group_out = Column::from(agg.schema.qualified_field(0));
    let key_out = sub
        .alias_exprs
        .iter()
        .find(|(_, e)| matches!(e, Expr::Column(c) if *c == group_out))
        .map(|(c, _)| c.clone());
    let Some(key_out) = key_out else {
        return Ok(None);
    };
    let Some(at) = join
        .on
        .iter()
        .position(|(_, r)| matches!(r, Expr::Column(c) if *c == key_out))
    else {
        return Ok(None);
    };
    let Expr::Column(outer_key) = &join.on[at].0 else {
        return Ok(None);
    };
    let Expr::Column(key) = &agg.group_expr[0] else {
        return Ok(None);
    };
    let Some(found) =
        find(&join.left, &agg.input, key).or_else(|| find_in_joins(&join.left, &agg.input, key))
    else {
        return Ok(None);
    };
    if !found.equal.contains(outer_key) || !arguments_in(agg, &join.left) {
        return Ok(None);
    }
    rewritten(join, &sub, outer_key, at).map(Some)
}

/// The plan with the window and the filter in place of the semi join.
fn rewritten(join: &Join, sub: &PerKey, outer_key: &Column, at: usize) -> Result<LogicalPlan> {
    let agg = sub.aggregate;
    let groups = agg.group_expr.len();
    let mut windows = Vec::new();
    // The aggregate's output columns as expressions over the window's values.
    let mut values: HashMap<Column, Expr> = HashMap::new();
    values.insert(
        Column::from(agg.schema.qualified_field(0)),
        Expr::Column(outer_key.clone()),
    );
    for (i, e) in agg.aggr_expr.iter().enumerate() {
        let Some(f) = plain_aggregate(e) else {
            return datafusion::common::internal_err!("per-key window: `{e}` is not an aggregate");
        };
        let name = format!("{PER_KEY}_{i}");
        let mut w = WindowFunction::new(
            WindowFunctionDefinition::AggregateUDF(f.func.clone()),
            f.params.args.clone(),
        );
        w.params.partition_by = vec![Expr::Column(outer_key.clone())];
        windows.push(Expr::WindowFunction(Box::new(w)).alias(&name));
        let out = agg.schema.field(groups + i).data_type().clone();
        values.insert(
            Column::from(agg.schema.qualified_field(groups + i)),
            Expr::Cast(Cast::new(
                Box::new(Expr::Column(Column::from_name(name))),
                out,
            )),
        );
    }
    // Each subquery column as its expression over those.
    let mut columns: HashMap<Column, Expr> = HashMap::new();
    for (c, e) in &sub.alias_exprs {
        columns.insert(c.clone(), replace_columns(e.clone(), &values)?);
    }
    let mut conditions = vec![Expr::Column(outer_key.clone()).is_not_null()];
    for (i, (l, r)) in join.on.iter().enumerate() {
        if i != at {
            conditions.push(l.clone().eq(replace_columns(r.clone(), &columns)?));
        }
    }
    if let Some(filter) = &join.filter {
        conditions.push(replace_columns(filter.clone(), &columns)?);
    }
    let kept: Vec<Expr> = join
        .left
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let Some(predicate) = conjunction(conditions) else {
        return datafusion::common::internal_err!("per-key window: no condition");
    };
    LogicalPlanBuilder::from(join.left.as_ref().clone())
        .window(windows)?
        .filter(predicate)?
        .project(kept)?
        .build()
}

fn replace_columns(e: Expr, by: &HashMap<Column, Expr>) -> Result<Expr> {
    e.transform(|e| match &e {
        Expr::Column(c) => match by.get(c) {
            Some(new) => Ok(Transformed::yes(new.clone())),
            None => Ok(Transformed::no(e)),
        },
        _ => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}

/// The subquery side if it is `SubqueryAlias(Projection(…) ← Aggregate(k; aggregates))` with
/// one grouping column and aggregates a key's repeated rows do not change.
fn per_key(side: &LogicalPlan) -> Option<PerKey<'_>> {
    let LogicalPlan::SubqueryAlias(alias) = side else {
        return None;
    };
    let (exprs, below): (Vec<Expr>, &LogicalPlan) = match alias.input.as_ref() {
        LogicalPlan::Projection(p) => (
            p.expr.iter().map(|e| unalias(e).clone()).collect(),
            &p.input,
        ),
        a @ LogicalPlan::Aggregate(_) => (
            a.schema().columns().into_iter().map(Expr::Column).collect(),
            a,
        ),
        _ => return None,
    };
    let LogicalPlan::Aggregate(grouped) = below else {
        return None;
    };
    if grouped.group_expr.len() != 1
        || !matches!(grouped.group_expr[0], Expr::Column(_))
        || grouped.aggr_expr.is_empty()
        || !grouped
            .aggr_expr
            .iter()
            .all(|e| plain_aggregate(e).is_some_and(|f| repeat_invariant(f, grouped)))
    {
        return None;
    }
    let alias_exprs = side.schema().columns().into_iter().zip(exprs).collect();
    Some(PerKey {
        alias_exprs,
        aggregate: grouped,
    })
}

/// Whether `f` is unchanged when each row comes `d` times: `min`, `max`; `avg` of decimals.
fn repeat_invariant(f: &AggregateFunction, agg: &Aggregate) -> bool {
    match f.func.name() {
        "min" | "max" => true,
        "avg" => f.params.args[0]
            .get_type(agg.input.schema().as_ref())
            .is_ok_and(|t| t.is_decimal()),
        _ => false,
    }
}

/// Whether every column the aggregates read is a column of `outer`.
fn arguments_in(agg: &Aggregate, outer: &LogicalPlan) -> bool {
    agg.aggr_expr
        .iter()
        .all(|e| e.column_refs().iter().all(|c| outer.schema().has_column(c)))
}

/// Where `s` was found in the outer plan: the columns equal to its key on every row, and the
/// tables (qualifiers) of its copy there.
struct Found {
    equal: Vec<Column>,
    tables: Vec<TableReference>,
}

impl Found {
    /// Whether `e` refers to no column of the relation's copy except those equal to its key.
    fn key_only(&self, e: &Expr) -> bool {
        e.column_refs().into_iter().all(|c| {
            self.equal.contains(c)
                || c.relation
                    .as_ref()
                    .is_some_and(|r| !self.tables.contains(r))
        })
    }
}

/// Finds the relation `s`, a tree of inner joins, among `plan`'s inner joins when join
/// ordering mixed its tables with others (TPC-H Q2: `part ⋈ supplier ⋈ partsupp ⋈ nation ⋈
/// region`, the subquery over `partsupp ⋈ supplier ⋈ nation ⋈ region`): each of its leaves is
/// the same relation as one of `plan`'s, each of its conditions one of `plan`'s, and every other
/// condition of `plan` refers to those leaves' columns through the key only.
fn find_in_joins(plan: &LogicalPlan, s: &LogicalPlan, key: &Column) -> Option<Found> {
    let (mut outer, mut inner) = (Joins::default(), Joins::default());
    if !flatten(plan, &mut outer, true) || !flatten(s, &mut inner, true) {
        return None;
    }
    let mut tables: Vec<TableReference> = Vec::new();
    let mut matched: Vec<usize> = Vec::new();
    for leaf in &inner.leaves {
        let at = outer
            .leaves
            .iter()
            .enumerate()
            .position(|(i, o)| !matched.contains(&i) && same_rows(o, leaf))?;
        matched.push(at);
        for (q, _) in outer.leaves[at].schema().iter() {
            let q = q?;
            if !tables.contains(q) {
                tables.push(q.clone());
            }
        }
    }
    let flipped = |e: &Expr| match e {
        Expr::BinaryExpr(b) if b.op == datafusion::logical_expr::Operator::Eq => {
            Some(b.right.as_ref().clone().eq(b.left.as_ref().clone()))
        }
        _ => None,
    };
    let mut own = Vec::new();
    for c in &inner.conditions {
        let at = outer
            .conditions
            .iter()
            .position(|o| o == c || flipped(c).as_ref() == Some(o))?;
        own.push(at);
    }
    let mut found = Found {
        equal: vec![key.clone()],
        tables,
    };
    if !outer.leaves.iter().any(|l| l.schema().has_column(key)) {
        return None;
    }
    // The key's class: columns the other conditions make equal to it.
    loop {
        let before = found.equal.len();
        for c in &outer.conditions {
            if let Expr::BinaryExpr(b) = c
                && b.op == datafusion::logical_expr::Operator::Eq
                && let (Expr::Column(l), Expr::Column(r)) = (b.left.as_ref(), b.right.as_ref())
            {
                if found.equal.contains(l) && !found.equal.contains(r) {
                    found.equal.push(r.clone());
                } else if found.equal.contains(r) && !found.equal.contains(l) {
                    found.equal.push(l.clone());
                }
            }
        }
        if found.equal.len() == before {
            break;
        }
    }
    let others_key_only = outer
        .conditions
        .iter()
        .enumerate()
        .all(|(i, c)| own.contains(&i) || found.key_only(c));
    others_key_only.then_some(found)
}

/// Finds the relation `s` in `plan` through projections, filters and inner joins that keep
/// each key's rows of it all or none, equally often (None where it is not found or the path
/// does not keep that).
fn find(plan: &LogicalPlan, s: &LogicalPlan, key: &Column) -> Option<Found> {
    if same_rows(plan, s) {
        let mut tables: Vec<TableReference> = Vec::new();
        for (q, _) in plan.schema().iter() {
            match q {
                Some(q) if !tables.contains(q) => tables.push(q.clone()),
                Some(_) => {}
                None => return None,
            }
        }
        return plan.schema().has_column(key).then(|| Found {
            equal: vec![key.clone()],
            tables,
        });
    }
    match plan {
        LogicalPlan::Projection(p) => {
            let found = find(&p.input, s, key)?;
            p.expr
                .iter()
                .all(|e| matches!(e, Expr::Column(_)) || found.key_only(e))
                .then_some(found)
        }
        LogicalPlan::Filter(f) => {
            let found = find(&f.input, s, key)?;
            found.key_only(&f.predicate).then_some(found)
        }
        LogicalPlan::Join(j)
            if j.join_type == JoinType::Inner
                && j.null_equality == NullEquality::NullEqualsNothing =>
        {
            let mut found = find(&j.left, s, key).or_else(|| find(&j.right, s, key))?;
            if j.filter.as_ref().is_some_and(|f| !found.key_only(f)) {
                return None;
            }
            for (l, r) in &j.on {
                if !found.key_only(l) || !found.key_only(r) {
                    return None;
                }
                if let (Expr::Column(l), Expr::Column(r)) = (l, r) {
                    if found.equal.contains(l) && !found.equal.contains(r) {
                        found.equal.push(r.clone());
                    } else if found.equal.contains(r) && !found.equal.contains(l) {
                        found.equal.push(l.clone());
                    }
                }
            }
            Some(found)
        }
        _ => None,
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

    type Line = (Option<i64>, Option<i64>, i64);

    /// `l(l_partkey, l_quantity DECIMAL(15,2), l_price, l_q BIGINT)` and `part(p_partkey,
    /// p_brand)`, with or without the rule.
    fn session(rule: bool, lines: &[Line], parts: &[(i64, i64)]) -> SessionContext {
        let mut state = SessionStateBuilder::new().with_default_features();
        if rule {
            state = state.with_optimizer_rule(Arc::new(WinMagic));
        }
        let ctx = SessionContext::new_with_state(state.build());
        let schema = Arc::new(Schema::new(vec![
            Field::new("l_partkey", DataType::Int64, true),
            Field::new("l_quantity", DataType::Decimal128(15, 2), true),
            Field::new("l_price", DataType::Int64, false),
            Field::new("l_q", DataType::Int64, true),
        ]));
        let q = Decimal128Array::from_iter(lines.iter().map(|r| r.1.map(|v| v as i128 * 100)))
            .with_precision_and_scale(15, 2)
            .unwrap();
        let l = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter(lines.iter().map(|r| r.0))),
                Arc::new(q),
                Arc::new(Int64Array::from_iter_values(lines.iter().map(|r| r.2))),
                Arc::new(Int64Array::from_iter(lines.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        ctx.register_batch("l", l).unwrap();
        let p = RecordBatch::try_from_iter(vec![
            (
                "p_partkey",
                Arc::new(Int64Array::from_iter_values(parts.iter().map(|p| p.0))) as _,
            ),
            (
                "p_brand",
                Arc::new(Int64Array::from_iter_values(parts.iter().map(|p| p.1))) as _,
            ),
        ])
        .unwrap();
        ctx.register_batch("part", p).unwrap();
        // Suppliers of the lines (`l_price % 3`), one of them listed twice, one flagged off.
        let sup = RecordBatch::try_from_iter(vec![
            ("sk", Arc::new(Int64Array::from(vec![0, 1, 1, 2])) as _),
            ("flag", Arc::new(Int64Array::from(vec![1, 1, 1, 0])) as _),
        ])
        .unwrap();
        ctx.register_batch("sup", sup).unwrap();
        ctx
    }

    /// The optimized plan with the rule, and the sorted rows with and without it (equal).
    async fn both(lines: &[Line], parts: &[(i64, i64)], sql: &str) -> (String, String) {
        let run = |rule| async move {
            let df = session(rule, lines, parts).sql(sql).await.unwrap();
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

    fn lines() -> Vec<Line> {
        vec![
            (Some(1), Some(1), 10),
            (Some(1), Some(9), 90),
            (Some(1), Some(2), 20),
            (Some(2), Some(5), 50),
            (Some(2), Some(6), 60),
            (Some(2), None, 70),
            (Some(3), Some(1), 5),
            (None, Some(1), 1000),
            (None, Some(7), 2000),
        ]
    }

    const Q17_LIKE: &str = "SELECT sum(l_price) AS total FROM l, part \
        WHERE p_partkey = l_partkey AND p_brand = 23 \
        AND l_quantity < (SELECT 0.5 * avg(l_quantity) FROM l WHERE l_partkey = p_partkey)";

    const Q2_LIKE: &str = "SELECT p_partkey, l_price FROM part, l \
        WHERE p_partkey = l_partkey AND p_brand = 23 \
        AND l_quantity = (SELECT min(l_quantity) FROM l WHERE l_partkey = p_partkey)";

    #[tokio::test]
    async fn the_relation_is_scanned_once_and_the_answer_is_the_same() {
        let parts = [(1, 23), (2, 23), (3, 24)];
        for sql in [Q17_LIKE, Q2_LIKE] {
            let (plan, _) = both(&lines(), &parts, sql).await;
            assert!(plan.contains(PER_KEY), "{sql}\n{plan}");
            assert_eq!(plan.matches("TableScan: l").count(), 1, "{plan}");
        }
        // Brand 23: part 1 (quantities 1, 9, 2: half the average is 2, so 1 passes, price 10)
        // and part 2 (5, 6 and NULL: 2.75, none passes).
        let (_, rows) = both(&lines(), &parts, Q17_LIKE).await;
        assert!(rows.contains("| 10    |"), "{rows}");
        // The cheapest of each: part 1's at 10, part 2's at 50.
        let (_, rows) = both(&lines(), &parts, Q2_LIKE).await;
        assert!(
            rows.contains("| 1         | 10 ") && rows.contains("| 2         | 50 "),
            "{rows}"
        );
    }

    /// The subquery's relation is two tables the query joins in another order, mixed with a
    /// third (TPC-H Q2).
    const MIXED: &str = "SELECT p_partkey, l_price FROM part, sup, l \
        WHERE p_partkey = l_partkey AND sk = l_price % 3 AND flag = 1 AND p_brand = 23 \
        AND l_quantity = (SELECT min(l_quantity) FROM l, sup \
                          WHERE sk = l_price % 3 AND flag = 1 AND l_partkey = p_partkey)";

    #[tokio::test]
    async fn a_relation_of_joins_in_another_order() {
        let parts = [(1, 23), (2, 23), (3, 24)];
        let (plan, rows) = both(&lines(), &parts, MIXED).await;
        assert!(plan.contains(PER_KEY), "{plan}");
        assert_eq!(plan.matches("TableScan: l").count(), 1, "{plan}");
        assert!(rows.contains("| 10 "), "{rows}");
        // Another filter on the suppliers in the subquery: another relation.
        let other = MIXED.replace("flag = 1 AND l_partkey", "flag = 0 AND l_partkey");
        let (plan, _) = both(&lines(), &parts, &other).await;
        assert!(!plan.contains(PER_KEY), "{plan}");
    }

    #[tokio::test]
    async fn repeated_keys_nulls_and_no_rows() {
        // A part listed twice: each of its lineitems comes twice, the average is the same.
        let parts = [(1, 23), (1, 23), (2, 23), (2, 24)];
        for sql in [Q17_LIKE, Q2_LIKE] {
            let (plan, _) = both(&lines(), &parts, sql).await;
            assert!(plan.contains(PER_KEY), "{sql}\n{plan}");
            // Only NULL quantities; no lineitems; no parts.
            let nulls = [(Some(1), None, 1), (Some(2), None, 2)];
            both(&nulls, &parts, sql).await;
            both(&[], &parts, sql).await;
            both(&lines(), &[], sql).await;
        }
    }

    #[tokio::test]
    async fn other_shapes_stay_as_written() {
        let parts = [(1, 23), (2, 23), (3, 24)];
        for sql in [
            // The query's rows are filtered on another column of the relation.
            "SELECT sum(l_price) FROM l, part WHERE p_partkey = l_partkey AND l_price > 10 \
             AND l_quantity < (SELECT 0.5 * avg(l_quantity) FROM l WHERE l_partkey = p_partkey)",
            // The subquery's relation is filtered.
            "SELECT sum(l_price) FROM l, part WHERE p_partkey = l_partkey AND l_quantity < \
             (SELECT 0.5 * avg(l_quantity) FROM l WHERE l_partkey = p_partkey AND l_price > 10)",
            // A float average depends on its order; a sum on how often rows come.
            "SELECT sum(l_price) FROM l, part WHERE p_partkey = l_partkey \
             AND l_q < (SELECT 0.5 * avg(l_q) FROM l WHERE l_partkey = p_partkey)",
            "SELECT sum(l_price) FROM l, part WHERE p_partkey = l_partkey \
             AND l_q < (SELECT sum(l_q) / 2 FROM l WHERE l_partkey = p_partkey)",
            // Joined on another column than the key.
            "SELECT sum(l_price) FROM l, part WHERE p_brand = l_q \
             AND l_quantity <= (SELECT max(l_quantity) FROM l WHERE l_partkey = p_partkey)",
        ] {
            let (plan, _) = both(&lines(), &parts, sql).await;
            assert!(!plan.contains(PER_KEY), "{sql}\n{plan}");
        }
    }
}
