//! What the plan-shape rules share (`winmagic.rs`, `grandtotal.rs`, `perkey.rs`, `eager.rs`):
//! expressions without aliases, plain aggregate calls, a test of two plans giving the same
//! rows, and a tree of inner joins taken apart into its leaves and conditions.
use datafusion::common::{Column, NullEquality};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan};
use std::collections::BTreeSet;

/// `e` without its aliases.
pub fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        e => e,
    }
}

/// The aggregate call `e` is (through aliases), if it is a plain one: one argument, without
/// DISTINCT, FILTER or ORDER BY.
pub fn plain_aggregate(e: &Expr) -> Option<&AggregateFunction> {
    let Expr::AggregateFunction(f) = unalias(e) else {
        return None;
    };
    let p = &f.params;
    let plain = !p.distinct && p.filter.is_none() && p.order_by.is_empty() && p.args.len() == 1;
    plain.then_some(f)
}

/// `plan` below projections that only pass columns on (they keep every row).
fn below_columns(plan: &LogicalPlan) -> &LogicalPlan {
    match plan {
        LogicalPlan::Projection(p) if p.expr.iter().all(|e| matches!(e, Expr::Column(_))) => {
            below_columns(&p.input)
        }
        p => p,
    }
}

/// Whether `a` and `b` give the same rows whatever columns each passes on: equal plans, or
/// scans of one table with the same filters and limit, filtered and joined alike.
pub fn same_rows(a: &LogicalPlan, b: &LogicalPlan) -> bool {
    let (a, b) = (below_columns(a), below_columns(b));
    if a == b {
        return true;
    }
    match (a, b) {
        (LogicalPlan::TableScan(x), LogicalPlan::TableScan(y)) => {
            x.table_name == y.table_name && x.filters == y.filters && x.fetch == y.fetch
        }
        (LogicalPlan::Filter(x), LogicalPlan::Filter(y)) => {
            x.predicate == y.predicate && same_rows(&x.input, &y.input)
        }
        (LogicalPlan::SubqueryAlias(x), LogicalPlan::SubqueryAlias(y)) => {
            x.alias == y.alias && same_rows(&x.input, &y.input)
        }
        (LogicalPlan::Join(x), LogicalPlan::Join(y)) => {
            x.join_type == y.join_type
                && x.join_constraint == y.join_constraint
                && x.on == y.on
                && x.filter == y.filter
                && x.null_equality == y.null_equality
                && x.null_aware == y.null_aware
                && same_rows(&x.left, &y.left)
                && same_rows(&x.right, &y.right)
        }
        _ => false,
    }
}

/// A tree of inner joins as its leaves and conditions.
#[derive(Default)]
pub struct Joins {
    pub leaves: Vec<LogicalPlan>,
    pub conditions: Vec<Expr>,
}

impl Joins {
    /// The leaf holding column `c`.
    pub fn leaf_of(&self, c: &Column) -> Option<usize> {
        self.leaves.iter().position(|l| l.schema().has_column(c))
    }

    /// The leaves expression `e` reads (None if a column is in none of them).
    pub fn leaves_of(&self, e: &Expr) -> Option<BTreeSet<usize>> {
        e.column_refs()
            .into_iter()
            .map(|c| self.leaf_of(c))
            .collect()
    }
}

/// Collects `plan`'s inner equi-joins (through filters over them and projections passing
/// columns on) into `joins`; false if there is no join at all.
pub fn flatten(plan: &LogicalPlan, joins: &mut Joins, top: bool) -> bool {
    match plan {
        LogicalPlan::Join(j)
            if j.join_type == JoinType::Inner
                && j.null_equality == NullEquality::NullEqualsNothing
                && !j.null_aware =>
        {
            flatten(&j.left, joins, false);
            flatten(&j.right, joins, false);
            for (l, r) in &j.on {
                joins.conditions.push(l.clone().eq(r.clone()));
            }
            if let Some(f) = &j.filter {
                joins
                    .conditions
                    .extend(split_conjunction(f).into_iter().cloned());
            }
            true
        }
        LogicalPlan::Filter(f) if is_join(&f.input) => {
            joins
                .conditions
                .extend(split_conjunction(&f.predicate).into_iter().cloned());
            flatten(&f.input, joins, top)
        }
        LogicalPlan::Projection(p)
            if is_join(&p.input) && p.expr.iter().all(|e| matches!(e, Expr::Column(_))) =>
        {
            flatten(&p.input, joins, top)
        }
        leaf => {
            if top {
                return false;
            }
            joins.leaves.push(leaf.clone());
            true
        }
    }
}

/// Whether `plan` is an inner join, under filters and column projections.
pub fn is_join(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Join(j) => j.join_type == JoinType::Inner,
        LogicalPlan::Filter(f) => is_join(&f.input),
        LogicalPlan::Projection(p) if p.expr.iter().all(|e| matches!(e, Expr::Column(_))) => {
            is_join(&p.input)
        }
        _ => false,
    }
}
