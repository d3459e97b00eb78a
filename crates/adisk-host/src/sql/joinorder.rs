//! Cost-based order of inner equi-joins.
//!
//! DataFusion joins tables in the order a query names them (its physical optimizer only picks
//! each join's build side). This logical rule takes every tree of inner equi-joins whose
//! leaves it can estimate — table scans under filters, aliases and column projections —
//! and reorders it by dynamic programming over the subsets of its leaves (no cross products;
//! bushy: a join's two sides may both be joins), minimizing the rows of all intermediate
//! results (C_out). The joins' other conditions (a filter over tables on both sides) go into
//! the first join that has their columns. A leaf's rows are the
//! table's rows times its filters' selectivity. Key columns the joins make equal form classes
//! (`c = s AND s = n`: customer may join nation directly); a join keeps, per class, the
//! product of its inputs' rows divided by all but the smallest of the distinct counts of the
//! class's columns among them — the counts the disks measured at load time
//! (`DiskTable::statistics`), capped at the filtered rows.
//!
//! Join trees inside subqueries (a scalar subquery in `HAVING`, `IN`, `EXISTS`) are reordered
//! as well, before DataFusion decorrelates them into the plan.
//!
//! The written order stays unless the best order is estimated at most [`MIN_GAIN`] of its
//! cost, so plans change only where the estimate sees a clear win. `ADISK_JOIN_ORDER=written`
//! in the planning process's environment turns the rule off (for measuring it).
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, NullEquality, Result};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{
    BinaryExpr, Expr, JoinType, LogicalPlan, LogicalPlanBuilder, Operator,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use std::collections::HashMap;

/// Largest join tree reordered (the search is over 2^n subsets).
const MAX_LEAVES: usize = 12;
/// A new order replaces the written one only below this fraction of its estimated cost.
pub const MIN_GAIN: f64 = 0.7;
/// Distinct values assumed for a column without a measured count.
const DEFAULT_NDV: f64 = 10.0;

/// The rule (see the module).
#[derive(Debug, Default)]
pub struct JoinOrder;

/// Whether the rule is on (`ADISK_JOIN_ORDER` is not `written`).
pub fn enabled() -> bool {
    std::env::var("ADISK_JOIN_ORDER").map_or(true, |v| v != "written")
}

impl OptimizerRule for JoinOrder {
    fn name(&self) -> &str {
        "adisk_join_order"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        plan.transform_down_with_subqueries(reorder)
    }
}

/// A leaf's estimated rows and its columns' distinct counts (by column name).
struct Estimate {
    rows: f64,
    ndv: HashMap<String, f64>,
}

impl Estimate {
    /// Distinct values of `column`, at most the rows.
    fn ndv(&self, column: &str) -> f64 {
        self.ndv
            .get(column)
            .copied()
            .unwrap_or(self.rows)
            .min(self.rows)
            .max(1.0)
    }
}

/// An inner equi-join tree flattened: its leaves, and its key columns as classes of columns
/// the joins make equal (`a = b AND b = c`: one class `{a, b, c}`, so `a = c` may join too).
struct JoinGraph {
    leaves: Vec<LogicalPlan>,
    classes: Vec<Vec<(usize, Column)>>,
    /// The joins' other conditions (a filter over several tables, as TPC-H Q7's pair of
    /// nations): put above the rebuilt tree, where DataFusion's filter pushdown moves each to
    /// the lowest join that has its columns.
    filters: Vec<Expr>,
}

/// An inner join on at least one equality of columns, with or without another condition.
fn is_plain_inner(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Join(j) if j.join_type == JoinType::Inner
        && !j.on.is_empty()
        && j.null_equality == NullEquality::NullEqualsNothing
        && !j.null_aware)
}

fn reorder(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    if !is_plain_inner(&plan) {
        return Ok(Transformed::no(plan));
    }
    let Some(graph) = flatten(&plan) else {
        return Ok(Transformed::no(plan));
    };
    let n = graph.leaves.len();
    if !(3..=MAX_LEAVES).contains(&n) {
        return Ok(Transformed::no(plan));
    }
    let Some(estimates) = graph
        .leaves
        .iter()
        .map(estimate)
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(Transformed::no(plan));
    };
    let cards = Cards::new(&graph, &estimates);
    let Some(best) = best_tree(&cards) else {
        return Ok(Transformed::no(plan));
    };
    let full = (1usize << n) - 1;
    let best_cost = best[full].map_or(f64::INFINITY, |(c, _)| c);
    let written = written_cost(&plan, &mut 0, &cards).map(|(_, c)| c);
    tracing::debug!(
        leaves = ?graph.leaves.iter().map(leaf_name).collect::<Vec<_>>(),
        rows = ?cards.rows,
        best_cost,
        ?written,
        "join order"
    );
    if written.is_none_or(|w| best_cost >= MIN_GAIN * w) {
        return Ok(Transformed::no(plan));
    }
    let mut filters = graph.filters.clone();
    let mut builder = LogicalPlanBuilder::from(build(&graph, &best, full, &mut filters)?);
    if let Some(filter) = datafusion::logical_expr::utils::conjunction(filters) {
        builder = builder.filter(filter)?;
    }
    let columns = plan.schema().columns().into_iter().map(Expr::Column);
    Ok(Transformed::yes(builder.project(columns)?.build()?))
}

/// A leaf's first table, for the log.
fn leaf_name(plan: &LogicalPlan) -> String {
    let mut name = String::from("?");
    let _ = plan.apply(|p| {
        if let LogicalPlan::TableScan(s) = p {
            name = s.table_name.to_string();
            return Ok(datafusion::common::tree_node::TreeNodeRecursion::Stop);
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    name
}

/// Leaves and key pairs of the inner-join tree at `plan` (None: a key is not a plain column
/// of exactly one leaf).
fn flatten(plan: &LogicalPlan) -> Option<JoinGraph> {
    let mut leaves = Vec::new();
    let mut pairs = (Vec::new(), Vec::new());
    collect(plan, &mut leaves, &mut pairs)?;
    let find = |c: &Column| {
        let mut hits = leaves
            .iter()
            .enumerate()
            .filter(|(_, l): &(usize, &LogicalPlan)| l.schema().has_column(c));
        match (hits.next(), hits.next()) {
            (Some((i, _)), None) => Some(i),
            _ => None,
        }
    };
    let mut classes: Vec<Vec<(usize, Column)>> = Vec::new();
    for (l, r) in pairs.0 {
        let (l, r) = ((find(&l)?, l), (find(&r)?, r));
        let at = |classes: &Vec<Vec<(usize, Column)>>, x: &(usize, Column)| {
            classes.iter().position(|c| c.contains(x))
        };
        match (at(&classes, &l), at(&classes, &r)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => {
                let merged = classes.remove(a.max(b));
                classes[a.min(b)].extend(merged);
            }
            (Some(a), None) => classes[a].push(r),
            (None, Some(b)) => classes[b].push(l),
            (None, None) => classes.push(vec![l, r]),
        }
    }
    // A table with two columns in one class (`a.x = b.y AND b.y = a.z`) would need its
    // columns made equal by a condition of its own: such trees keep their order.
    let twice =
        |c: &Vec<(usize, Column)>| (1..c.len()).any(|i| c[..i].iter().any(|m| m.0 == c[i].0));
    if classes.iter().any(twice) {
        return None;
    }
    Some(JoinGraph {
        leaves,
        classes,
        filters: pairs.1,
    })
}

/// What a node is to a join tree: an inner equi-join of it, a projection of plain columns
/// over one (looked through), or a leaf.
enum Node<'a> {
    Join(&'a datafusion::logical_expr::Join),
    Through(&'a LogicalPlan),
    Leaf,
}

fn node(plan: &LogicalPlan) -> Node<'_> {
    match plan {
        LogicalPlan::Join(j) if is_plain_inner(plan) => Node::Join(j),
        LogicalPlan::Projection(p)
            if is_plain_inner(&p.input) && p.expr.iter().all(|e| matches!(e, Expr::Column(_))) =>
        {
            Node::Through(&p.input)
        }
        _ => Node::Leaf,
    }
}

/// Key pairs, and the joins' other conditions.
type Conditions = (Vec<(Column, Column)>, Vec<Expr>);

fn collect(
    plan: &LogicalPlan,
    leaves: &mut Vec<LogicalPlan>,
    conditions: &mut Conditions,
) -> Option<()> {
    match node(plan) {
        Node::Join(j) => {
            collect(&j.left, leaves, conditions)?;
            collect(&j.right, leaves, conditions)?;
            for (l, r) in &j.on {
                match (l, r) {
                    (Expr::Column(l), Expr::Column(r)) => conditions.0.push((l.clone(), r.clone())),
                    _ => return None,
                }
            }
            conditions.1.extend(j.filter.iter().cloned());
        }
        Node::Through(input) => collect(input, leaves, conditions)?,
        Node::Leaf => leaves.push(plan.clone()),
    }
    Some(())
}

/// Estimated rows of every subset of the leaves.
struct Cards {
    rows: Vec<f64>,
    /// Per class of equal columns: each member's leaf and distinct values.
    classes: Vec<Vec<(usize, f64)>>,
    /// Per class, the subset of the leaves with a member.
    members: Vec<usize>,
}

impl Cards {
    fn new(graph: &JoinGraph, estimates: &[Estimate]) -> Self {
        let classes = graph
            .classes
            .iter()
            .map(|c| {
                c.iter()
                    .map(|(leaf, col)| (*leaf, estimates[*leaf].ndv(&col.name)))
                    .collect()
            })
            .collect();
        let members = graph
            .classes
            .iter()
            .map(|c| c.iter().fold(0, |m, (leaf, _)| m | (1 << leaf)))
            .collect();
        Cards {
            rows: estimates.iter().map(|e| e.rows.max(1.0)).collect(),
            classes,
            members,
        }
    }

    /// Rows of the join of the leaves in `mask`: the product of their rows, divided, per
    /// class with m members among them, by all but the smallest of their distinct counts.
    ///
    /// Two leaves joined on several classes (partsupp and lineitem on `(partkey, suppkey)`)
    /// have at most their rows of distinct key combinations: not 200 000 · 10 000 but
    /// 800 000 for partsupp. Their classes then divide by the smaller of the two leaves'
    /// bounds on their combinations (each side's counts' product, at most its rows), not by
    /// the product of the larger counts.
    fn of(&self, mask: usize) -> f64 {
        let inside = |leaf: usize| mask & (1 << leaf) != 0;
        let leaves: f64 = (0..self.rows.len())
            .filter(|l| inside(*l))
            .map(|i| self.rows[i])
            .product();
        let mut keys = 1.0;
        for class in &self.classes {
            let mut d: Vec<f64> = class
                .iter()
                .filter(|(leaf, _)| inside(*leaf))
                .map(|(_, ndv)| *ndv)
                .collect();
            d.sort_by(f64::total_cmp);
            keys /= d.iter().skip(1).product::<f64>();
        }
        leaves * keys * self.compound_correction(mask)
    }

    /// The factor by which independent classes overestimate the selectivity of pairs of leaves
    /// in `mask` joined on more than one class.
    fn compound_correction(&self, mask: usize) -> f64 {
        let n = self.rows.len();
        let mut factor = 1.0;
        for i in (0..n).filter(|i| mask & (1 << i) != 0) {
            for j in (i + 1..n).filter(|j| mask & (1 << j) != 0) {
                let shared: Vec<(f64, f64)> = self
                    .classes
                    .iter()
                    .filter_map(|c| {
                        let di = c.iter().find(|(l, _)| *l == i)?.1;
                        let dj = c.iter().find(|(l, _)| *l == j)?.1;
                        Some((di, dj))
                    })
                    .collect();
                if shared.len() < 2 {
                    continue;
                }
                let independent: f64 = shared.iter().map(|(a, b)| a.max(*b)).product();
                let combos = |side: fn(&(f64, f64)) -> f64, rows: f64| {
                    shared.iter().map(side).product::<f64>().min(rows)
                };
                // Both bounds are upper bounds; the key side's is the tighter (a foreign key
                // takes its combinations from it).
                let compound = combos(|p| p.0, self.rows[i]).min(combos(|p| p.1, self.rows[j]));
                factor *= (independent / compound.max(1.0)).max(1.0);
            }
        }
        factor
    }

    /// Whether a class of equal columns has members in both `a` and `b`.
    fn joined(&self, a: usize, b: usize) -> bool {
        self.members.iter().any(|&m| m & a != 0 && m & b != 0)
    }
}

/// Per subset of the leaves, the cheapest join tree without cross products (bushy: either
/// side may be a join), as its cost (C_out) and its left side's subset (0 for a leaf); None
/// where the subset is not connected. None when the whole set is not.
///
/// Bushy trees matter where two small results meet a large one: TPC-H Q7 joins customer with
/// its two nations before the orders (12 000 customers, not 150 000).
///
/// Each join's left side (DataFusion's build side unless its statistics say otherwise) is the
/// one estimated smaller, as a left-deep order's joins so far were.
fn best_tree(cards: &Cards) -> Option<Vec<Option<(f64, usize)>>> {
    let n = cards.rows.len();
    let full = (1usize << n) - 1;
    let rows: Vec<f64> = (0..=full).map(|m| cards.of(m)).collect();
    let mut best: Vec<Option<(f64, usize)>> = vec![None; full + 1];
    for i in 0..n {
        best[1 << i] = Some((0.0, 0));
    }
    for mask in 1..=full {
        if mask.count_ones() < 2 {
            continue;
        }
        let low = mask & mask.wrapping_neg();
        let rest = mask ^ low;
        let mut found: Option<(f64, usize)> = None;
        // Every split into a side holding the lowest leaf and a non-empty other side.
        let mut sub = rest;
        loop {
            let left = low | sub;
            let right = mask ^ left;
            if right != 0
                && let (Some((l, _)), Some((r, _))) = (best[left], best[right])
                && cards.joined(left, right)
                && found.is_none_or(|(c, _)| l + r < c)
            {
                found = Some((l + r, left));
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & rest;
        }
        best[mask] = found.map(|(c, left)| {
            let smaller = if rows[mask ^ left] < rows[left] {
                mask ^ left
            } else {
                left
            };
            (c + rows[mask], smaller)
        });
    }
    best[full].is_some().then_some(best)
}

/// The written tree's leaves (numbered as [`collect`] numbers them) and its C_out.
fn written_cost(plan: &LogicalPlan, next: &mut usize, cards: &Cards) -> Option<(usize, f64)> {
    match node(plan) {
        Node::Join(j) => {
            let (l, cl) = written_cost(&j.left, next, cards)?;
            let (r, cr) = written_cost(&j.right, next, cards)?;
            Some((l | r, cl + cr + cards.of(l | r)))
        }
        Node::Through(input) => written_cost(input, next, cards),
        Node::Leaf => {
            let leaf = *next;
            *next += 1;
            Some((1 << leaf, 0.0))
        }
    }
}

/// The tree [`best_tree`] found for the leaves in `mask`, each join on one pair of columns
/// per class with members on both sides (the members within a side are equal already), with
/// the `filters` whose columns it is the first join to have.
///
/// The filters go into the joins here, not above the tree: DataFusion's `eliminate_cross_join`
/// would flatten a filter's inner joins into a left-deep order of its own.
fn build(
    graph: &JoinGraph,
    best: &[Option<(f64, usize)>],
    mask: usize,
    filters: &mut Vec<Expr>,
) -> Result<LogicalPlan> {
    let split = best[mask].map_or(0, |(_, left)| left);
    if split == 0 {
        let leaf = mask.trailing_zeros() as usize;
        return Ok(graph.leaves[leaf].clone());
    }
    let right = mask ^ split;
    let (mut on_left, mut on_right) = (Vec::new(), Vec::new());
    for class in &graph.classes {
        let first_in = |side: usize| class.iter().find(|(l, _)| side & (1 << l) != 0);
        if let (Some((_, a)), Some((_, b))) = (first_in(split), first_in(right)) {
            on_left.push(a.clone());
            on_right.push(b.clone());
        }
    }
    let left_plan = build(graph, best, split, filters)?;
    let right_plan = build(graph, best, right, filters)?;
    let has = |e: &Expr| {
        e.column_refs()
            .iter()
            .all(|c| left_plan.schema().has_column(c) || right_plan.schema().has_column(c))
    };
    let (here, later): (Vec<Expr>, Vec<Expr>) = filters.drain(..).partition(has);
    *filters = later;
    LogicalPlanBuilder::from(left_plan)
        .join(
            right_plan,
            JoinType::Inner,
            (on_left, on_right),
            datafusion::logical_expr::utils::conjunction(here),
        )?
        .build()
}

/// Rows and distinct counts of a leaf: a table scan, under filters, aliases and projections.
fn estimate(plan: &LogicalPlan) -> Option<Estimate> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let provider = source_as_provider(&scan.source).ok()?;
            let stats = provider.statistics()?;
            let rows = *stats.num_rows.get_value()? as f64;
            let ndv = provider
                .schema()
                .fields()
                .iter()
                .zip(&stats.column_statistics)
                .filter_map(|(f, c)| {
                    Some((f.name().clone(), *c.distinct_count.get_value()? as f64))
                })
                .collect();
            let mut e = Estimate { rows, ndv };
            // A table on the disks prices its pushed filters as its scan will (distinct
            // values, its sampled rows); another provider by the textbook rules below.
            match provider.downcast_ref::<super::scan::DiskTable>() {
                Some(table) if !scan.filters.is_empty() => {
                    e.rows *= table.selectivity(&scan.filters)
                }
                _ => {
                    for f in &scan.filters {
                        e.rows *= selectivity(f, &e);
                    }
                }
            }
            if let Some(fetch) = scan.fetch {
                e.rows = e.rows.min(fetch as f64);
            }
            Some(e)
        }
        LogicalPlan::Filter(f) => {
            let mut e = estimate(&f.input)?;
            e.rows *= selectivity(&f.predicate, &e);
            Some(e)
        }
        LogicalPlan::SubqueryAlias(a) => estimate(&a.input),
        LogicalPlan::Projection(p) => estimate(&p.input),
        _ => None,
    }
}

/// Textbook selectivities: `col = literal` 1/ndv, a range 1/3, LIKE 1/10, IN k/ndv.
fn selectivity(predicate: &Expr, e: &Estimate) -> f64 {
    let ndv = |x: &Expr| match x {
        Expr::Column(c) => e.ndv(&c.name),
        _ => DEFAULT_NDV,
    };
    let s = match predicate {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => selectivity(left, e) * selectivity(right, e),
            Operator::Or => selectivity(left, e) + selectivity(right, e),
            Operator::Eq => match (left.as_ref(), right.as_ref()) {
                (Expr::Column(_), Expr::Column(_)) => 1.0 / DEFAULT_NDV,
                (c @ Expr::Column(_), _) | (_, c @ Expr::Column(_)) => 1.0 / ndv(c),
                _ => 0.5,
            },
            Operator::NotEq => 1.0 - 1.0 / ndv(left).max(ndv(right)),
            Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => 1.0 / 3.0,
            _ => 0.5,
        },
        Expr::Between(b) => negate(b.negated, 0.25),
        Expr::Like(l) | Expr::SimilarTo(l) => negate(l.negated, 0.1),
        Expr::InList(l) => negate(l.negated, l.list.len() as f64 / ndv(&l.expr)),
        Expr::Not(x) => 1.0 - selectivity(x, e),
        Expr::IsNull(_) => 0.1,
        Expr::IsNotNull(_) => 0.9,
        _ => 0.5,
    };
    s.clamp(0.0, 1.0)
}

fn negate(negated: bool, s: f64) -> f64 {
    let s = s.clamp(0.0, 1.0);
    if negated { 1.0 - s } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::DFSchema;
    use datafusion::logical_expr::EmptyRelation;
    use std::sync::Arc;

    fn graph(leaves: usize, classes: &[&[(usize, &str)]]) -> JoinGraph {
        let empty = LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: Arc::new(DFSchema::empty()),
        });
        JoinGraph {
            leaves: vec![empty; leaves],
            classes: classes
                .iter()
                .map(|c| c.iter().map(|(l, n)| (*l, Column::from_name(*n))).collect())
                .collect(),
            filters: vec![],
        }
    }

    fn est(rows: f64, ndv: &[(&str, f64)]) -> Estimate {
        Estimate {
            rows,
            ndv: ndv.iter().map(|(n, d)| (n.to_string(), *d)).collect(),
        }
    }

    /// TPC-H Q5's six tables at SF 1 as written (customer, orders, lineitem, supplier,
    /// nation, region), its filters already in the leaves' rows.
    fn q5() -> (JoinGraph, Vec<Estimate>) {
        let g = graph(
            6,
            &[
                &[(0, "c_custkey"), (1, "o_custkey")],
                &[(1, "o_orderkey"), (2, "l_orderkey")],
                &[(2, "l_suppkey"), (3, "s_suppkey")],
                &[(0, "c_nationkey"), (3, "s_nationkey"), (4, "n_nationkey")],
                &[(4, "n_regionkey"), (5, "r_regionkey")],
            ],
        );
        let e = vec![
            est(
                150_000.0,
                &[("c_custkey", 150_000.0), ("c_nationkey", 25.0)],
            ),
            est(
                1_500_000.0 / 9.0,
                &[("o_custkey", 100_000.0), ("o_orderkey", 1_500_000.0)],
            ),
            est(
                6_000_000.0,
                &[("l_orderkey", 1_500_000.0), ("l_suppkey", 10_000.0)],
            ),
            est(10_000.0, &[("s_suppkey", 10_000.0), ("s_nationkey", 25.0)]),
            est(25.0, &[("n_nationkey", 25.0), ("n_regionkey", 5.0)]),
            est(1.0, &[("r_regionkey", 5.0)]),
        ];
        (g, e)
    }

    #[test]
    fn a_class_of_equal_columns_divides_by_all_but_its_smallest_count() {
        let (g, e) = q5();
        let cards = Cards::new(&g, &e);
        // customer ⋈ supplier ⋈ nation on one nation key: 150 000 · 10 000 · 25 / (25 · 25).
        let m = 0b11001;
        assert!((cards.of(m) - 150_000.0 * 10_000.0 * 25.0 / 625.0).abs() < 1e-3);
        // Customer reaches nation through the class although the query never wrote c = n.
        assert!(cards.joined(1 << 0, 1 << 4));
        assert!(!cards.joined(1 << 2, 1 << 5));
    }

    /// The subsets every join of the best tree over all leaves joins (its internal nodes).
    fn joins(best: &[Option<(f64, usize)>], mask: usize, out: &mut Vec<usize>) {
        let Some((_, left)) = best[mask] else { return };
        if left != 0 {
            out.push(mask);
            joins(best, left, out);
            joins(best, mask ^ left, out);
        }
    }

    #[test]
    fn q5_joins_the_region_first_and_lineitem_after_its_orders() {
        let (g, e) = q5();
        let cards = Cards::new(&g, &e);
        let best = best_tree(&cards).unwrap();
        let mut tree = vec![];
        joins(&best, 0b111111, &mut tree);
        // Nation meets region before anything else, and lineitem meets the orders of the
        // region's customers (customer, orders, nation, region on one side), not all orders.
        assert!(tree.contains(&0b110000), "{tree:?}");
        assert!(tree.contains(&0b110011), "{tree:?}");
        // The written order (((((c ⋈ o) ⋈ l) ⋈ s) ⋈ n) ⋈ r) costs far more.
        let written: f64 = [0b11, 0b111, 0b1111, 0b11111, 0b111111]
            .iter()
            .map(|m| cards.of(*m))
            .sum();
        let cost = best[0b111111].unwrap().0;
        assert!(cost < MIN_GAIN * written, "{cost} vs {written}");
    }

    /// TPC-H Q7 at SF 1 (supplier, lineitem of two years, orders, customer, and each of the
    /// two nations filtered to two rows): customer meets its nation before the orders, on a
    /// side of its own, and supplier meets the other nation before lineitem.
    #[test]
    fn q7_joins_customer_with_its_nation_on_a_side_of_its_own() {
        let g = graph(
            6,
            &[
                &[(0, "s_suppkey"), (1, "l_suppkey")],
                &[(2, "o_orderkey"), (1, "l_orderkey")],
                &[(3, "c_custkey"), (2, "o_custkey")],
                &[(0, "s_nationkey"), (4, "n1_nationkey")],
                &[(3, "c_nationkey"), (5, "n2_nationkey")],
            ],
        );
        let e = vec![
            est(10_000.0, &[("s_suppkey", 10_000.0), ("s_nationkey", 25.0)]),
            est(
                1_800_000.0,
                &[("l_orderkey", 1_500_000.0), ("l_suppkey", 10_000.0)],
            ),
            est(
                1_500_000.0,
                &[("o_orderkey", 1_500_000.0), ("o_custkey", 100_000.0)],
            ),
            est(
                150_000.0,
                &[("c_custkey", 150_000.0), ("c_nationkey", 25.0)],
            ),
            est(2.0, &[("n1_nationkey", 2.0)]),
            est(2.0, &[("n2_nationkey", 2.0)]),
        ];
        let best = best_tree(&Cards::new(&g, &e)).unwrap();
        let mut tree = vec![];
        joins(&best, 0b111111, &mut tree);
        assert!(tree.contains(&0b101000), "customer ⋈ nation: {tree:?}");
        assert!(tree.contains(&0b010001), "supplier ⋈ nation: {tree:?}");
    }

    #[test]
    fn a_compound_key_has_at_most_its_rows_of_combinations() {
        // partsupp ⋈ lineitem on (partkey, suppkey) at SF 1: one partsupp row per lineitem,
        // not 800 000 · 6 000 000 / (200 000 · 10 000) = 2 400 rows.
        let g = graph(
            2,
            &[
                &[(0, "ps_partkey"), (1, "l_partkey")],
                &[(0, "ps_suppkey"), (1, "l_suppkey")],
            ],
        );
        let e = vec![
            est(
                800_000.0,
                &[("ps_partkey", 200_000.0), ("ps_suppkey", 10_000.0)],
            ),
            est(
                6_000_000.0,
                &[("l_partkey", 200_000.0), ("l_suppkey", 10_000.0)],
            ),
        ];
        let rows = Cards::new(&g, &e).of(0b11);
        assert!((rows - 6_000_000.0).abs() < 1.0, "{rows}");
    }

    #[test]
    fn no_order_without_a_cross_product_means_no_order() {
        let g = graph(3, &[&[(0, "a"), (1, "b")]]);
        let e = vec![est(10.0, &[]), est(10.0, &[]), est(10.0, &[])];
        assert!(best_tree(&Cards::new(&g, &e)).is_none());
    }

    #[test]
    fn selectivities_stay_within_zero_and_one() {
        use datafusion::logical_expr::{col, lit};
        let e = est(1000.0, &[("a", 4.0)]);
        assert_eq!(selectivity(&col("a").eq(lit(1)), &e), 0.25);
        assert_eq!(selectivity(&col("b").eq(lit(1)), &e), 1.0 / 1000.0);
        let wide = col("a").in_list((0..100).map(lit).collect(), false);
        assert_eq!(selectivity(&wide, &e), 1.0);
        let either = col("a").eq(lit(1)).or(col("a").gt(lit(1)));
        assert!(selectivity(&either, &e) <= 1.0);
        assert!((selectivity(&col("a").not_like(lit("x%")), &e) - 0.9).abs() < 1e-9);
    }

    /// A table of `rows` rows whose columns have the given distinct counts, for planning
    /// only (it cannot be scanned).
    #[derive(Debug)]
    struct Counted {
        schema: datafusion::arrow::datatypes::SchemaRef,
        rows: usize,
        ndv: Vec<usize>,
    }

    #[async_trait::async_trait]
    impl datafusion::catalog::TableProvider for Counted {
        fn schema(&self) -> datafusion::arrow::datatypes::SchemaRef {
            self.schema.clone()
        }
        fn table_type(&self) -> datafusion::logical_expr::TableType {
            datafusion::logical_expr::TableType::Base
        }
        fn statistics(&self) -> Option<datafusion::common::Statistics> {
            use datafusion::common::stats::Precision;
            let mut s = datafusion::common::Statistics::new_unknown(&self.schema);
            s.num_rows = Precision::Exact(self.rows);
            for (c, n) in s.column_statistics.iter_mut().zip(&self.ndv) {
                c.distinct_count = Precision::Exact(*n);
            }
            Some(s)
        }
        async fn scan(
            &self,
            _state: &dyn datafusion::catalog::Session,
            _projection: Option<&Vec<usize>>,
            _filters: &[Expr],
            _limit: Option<usize>,
        ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            datafusion::common::not_impl_err!("planning only")
        }
    }

    /// TPC-H Q11's shape: the same three-table join in the query and in its `HAVING`
    /// subquery, written largest table first. Both trees start from the one filtered row.
    #[tokio::test]
    async fn join_trees_inside_subqueries_are_reordered_too() {
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::execution::SessionStateBuilder;
        let table = |cols: &[&str], rows: usize, ndv: &[usize]| {
            let fields: Vec<Field> = cols
                .iter()
                .map(|c| Field::new(*c, DataType::Int64, false))
                .collect();
            Arc::new(Counted {
                schema: Arc::new(Schema::new(fields)),
                rows,
                ndv: ndv.to_vec(),
            })
        };
        let state = SessionStateBuilder::new()
            .with_default_features()
            .with_optimizer_rule(Arc::new(JoinOrder))
            .build();
        let ctx = datafusion::prelude::SessionContext::new_with_state(state);
        ctx.register_table("big", table(&["b_m", "b_v"], 800_000, &[10_000, 1000]))
            .unwrap();
        ctx.register_table("mid", table(&["m_m", "m_s"], 10_000, &[10_000, 25]))
            .unwrap();
        ctx.register_table("small", table(&["s_s", "s_name"], 25, &[25, 25]))
            .unwrap();
        let join = "FROM big, mid, small WHERE b_m = m_m AND m_s = s_s AND s_name = 7";
        let sql = format!(
            "SELECT b_m, sum(b_v) {join} GROUP BY b_m HAVING sum(b_v) > (SELECT sum(b_v) {join})"
        );
        let plan = ctx.sql(&sql).await.unwrap().into_optimized_plan().unwrap();
        let mut scans = vec![];
        plan.apply_with_subqueries(|p| {
            if let LogicalPlan::TableScan(t) = p {
                scans.push(t.table_name.to_string());
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })
        .unwrap();
        assert_eq!(scans.len(), 6, "{plan}");
        for tree in scans.chunks(3) {
            assert_eq!(tree.last().unwrap(), "big", "big joined last: {plan}");
        }
    }
}
