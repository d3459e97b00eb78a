//! Operation bundling (memik et al. §4.2.1, Algorithm 1): which consecutive operations of a
//! query plan a smart disk runs as one bundle, given a *relation of bindable operations*.
//!
//! The plan tree is DataFusion's physical plan, read as memik's individual operations: table
//! scans (with their selections and projections), hash, merge and nested-loop joins, sorts,
//! group-bys and aggregations. Operators that only move or trim rows between those — filters
//! and projections above a scan, repartitioning, coalescing, merges of sorted streams, limits —
//! belong to the operation below them. A two-phase aggregation (partial, then final) is one
//! group-by (when it has keys) under one aggregation.
//!
//! `FIND_BUNDLES` walks the tree from the root: a child joins its parent's bundle when
//! `(child, parent)` is in the relation, otherwise it starts a new bundle. As in the paper's
//! full algorithm (its footnote 3), the root's own bundle is counted too.
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec, SymmetricHashJoinExec,
};
use datafusion::physical_plan::sorts::sort::SortExec;
use std::collections::BTreeSet;
use std::sync::Arc;

/// One of memik's individual database operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// A sequential table scan (with its selection and projection).
    Scan,
    /// A hash join.
    HashJoin,
    /// A sort-merge join.
    MergeJoin,
    /// A nested-loop (or cross) join.
    NestedLoop,
    /// A sort.
    Sort,
    /// Forming groups.
    GroupBy,
    /// Computing aggregates (per group, or over all rows).
    Aggregate,
    /// Anything else (unions, windows, …): bound to nothing.
    Other,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Scan => "scan",
            Op::HashJoin => "hash join",
            Op::MergeJoin => "merge join",
            Op::NestedLoop => "nested loop",
            Op::Sort => "sort",
            Op::GroupBy => "group-by",
            Op::Aggregate => "aggregate",
            Op::Other => "other",
        }
    }
}

/// A relation of bindable operations (memik §4.2.1 and §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bundling {
    /// The empty relation: every operation is its own bundle.
    None,
    /// The paper's relation: scans into the joins and group-bys that read them, group-bys into
    /// their aggregations.
    Paper,
    /// The paper's relation plus its "excessive" tuples: scans into sorts, sorts into
    /// group-bys and aggregations, aggregations into sorts and group-bys.
    Excessive,
}

impl std::str::FromStr for Bundling {
    type Err = crate::HostError;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "none" => Ok(Bundling::None),
            "paper" => Ok(Bundling::Paper),
            "excessive" => Ok(Bundling::Excessive),
            other => Err(crate::HostError::Invalid(format!(
                "unknown bundling `{other}` (none, paper, excessive)"
            ))),
        }
    }
}

impl Bundling {
    /// Whether `child` joins `parent`'s bundle.
    pub fn binds(self, child: Op, parent: Op) -> bool {
        use Op::*;
        let paper = matches!(
            (child, parent),
            (Scan, NestedLoop | MergeJoin | HashJoin | GroupBy) | (GroupBy, Aggregate)
        );
        let excessive = matches!(
            (child, parent),
            (Scan, Sort) | (Sort, GroupBy | Aggregate) | (Aggregate, Sort | GroupBy)
        );
        match self {
            Bundling::None => false,
            Bundling::Paper => paper,
            Bundling::Excessive => paper || excessive,
        }
    }
}

/// The plan as a tree of individual operations.
#[derive(Debug, Clone)]
pub struct OpTree {
    /// The operation.
    pub op: Op,
    /// Its inputs.
    pub children: Vec<OpTree>,
}

/// Reads a physical plan as memik's operations.
pub fn op_tree(plan: &Arc<dyn ExecutionPlan>) -> OpTree {
    let node: &dyn ExecutionPlan = plan.as_ref();
    let children = || plan.children().into_iter().map(op_tree).collect::<Vec<_>>();
    let op = if plan.children().is_empty() {
        Op::Scan
    } else if let Some(op) = join_or_sort(node) {
        op
    } else if let Some(a) = node.downcast_ref::<AggregateExec>() {
        let below = || {
            let mut kids = children();
            // The partial phase of a two-phase aggregation is the same operation.
            if let [only] = kids.as_mut_slice()
                && only.op == Op::Aggregate
                && *a.mode() != AggregateMode::Partial
            {
                let mut inner = std::mem::take(&mut only.children);
                if let [g] = inner.as_mut_slice()
                    && g.op == Op::GroupBy
                {
                    return std::mem::take(&mut g.children);
                }
                return inner;
            }
            kids
        };
        let inputs = below();
        if a.group_expr().expr().is_empty() {
            return OpTree {
                op: Op::Aggregate,
                children: inputs,
            };
        }
        return OpTree {
            op: Op::Aggregate,
            children: vec![OpTree {
                op: Op::GroupBy,
                children: inputs,
            }],
        };
    } else if node.name().contains("Union") || node.name().contains("Window") {
        Op::Other
    } else {
        // Filters, projections, repartitions, merges, limits: part of the operation below.
        let mut kids = children();
        if kids.len() == 1 {
            return kids.remove(0);
        }
        Op::Other
    };
    OpTree {
        op,
        children: children(),
    }
}

/// A bundle: its operations, root first (depth first).
pub type Bundle = Vec<Op>;

/// memik's `FIND_BUNDLES` over `tree`, the root's bundle first.
pub fn find_bundles(tree: &OpTree, relation: Bundling) -> Vec<Bundle> {
    fn walk(t: &OpTree, relation: Bundling, current: &mut Bundle, done: &mut Vec<Bundle>) {
        for child in &t.children {
            if relation.binds(child.op, t.op) {
                current.push(child.op);
                walk(child, relation, current, done);
            } else {
                let mut new = vec![child.op];
                walk(child, relation, &mut new, done);
                done.push(new);
            }
        }
    }
    let mut root = vec![tree.op];
    let mut done = Vec::new();
    walk(tree, relation, &mut root, &mut done);
    done.insert(0, root);
    done
}

/// What `adisk explain --bundling` reports for one query.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleReport {
    /// The bundles.
    pub bundles: Vec<Bundle>,
}

impl BundleReport {
    /// Bundles (one disk invocation each).
    pub fn count(&self) -> usize {
        self.bundles.len()
    }
    /// Operations per bundle, on average.
    pub fn average_ops(&self) -> f64 {
        self.bundles.iter().map(Vec::len).sum::<usize>() as f64 / self.count().max(1) as f64
    }
    /// Distinct bundles (as sequences of operations).
    pub fn distinct(&self) -> BTreeSet<Vec<Op>> {
        self.bundles.iter().cloned().collect()
    }
    /// One line per bundle.
    pub fn lines(&self) -> Vec<String> {
        self.bundles
            .iter()
            .enumerate()
            .map(|(i, b)| {
                format!(
                    "bundle {i}: {}",
                    b.iter().map(|o| o.name()).collect::<Vec<_>>().join(" ← ")
                )
            })
            .collect()
    }
}

/// The bundles of `plan` under `relation`.
pub fn report(plan: &Arc<dyn ExecutionPlan>, relation: Bundling) -> BundleReport {
    BundleReport {
        bundles: find_bundles(&op_tree(plan), relation),
    }
}

/// One bundle of a stage's fragment, run as a DiskOS stage of its own.
#[derive(Debug, Clone)]
pub struct Piece {
    /// Its plan: the stage's inputs and other pieces' outputs are `EmptyExec` leaves.
    pub plan: Arc<dyn ExecutionPlan>,
    /// What each leaf reads, depth first.
    pub inputs: Vec<PieceInput>,
}

/// What a leaf of a [`Piece`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceInput {
    /// Input `i` of the stage (its `i`-th `EmptyExec` leaf, depth first).
    Stage(usize),
    /// The output of piece `j` (an earlier one).
    Piece(usize),
}

/// Splits a stage's fragment — its inputs are `EmptyExec` leaves, depth first — into memik's
/// bundles under `relation`: where an operation reads another that it does not bind (join,
/// sort, group-by, aggregation; the filters and projections above an operation go with it),
/// the operation below becomes a piece of its own, streamed to the one above. Pieces come
/// inputs first; the stage's output is the last one's. Inputs of the stage (scans, pipes)
/// already run as stages of their own and are never cut.
///
/// # Errors
/// A node could not be rebuilt with its new children.
pub fn split(
    plan: &Arc<dyn ExecutionPlan>,
    relation: Bundling,
) -> datafusion::error::Result<Vec<Piece>> {
    let mut pieces = Vec::new();
    let mut leaves = 0;
    let (root, inputs) = cut_pieces(plan, relation, &mut pieces, &mut leaves)?;
    pieces.push(Piece { plan: root, inputs });
    Ok(pieces)
}

fn cut_pieces(
    node: &Arc<dyn ExecutionPlan>,
    relation: Bundling,
    pieces: &mut Vec<Piece>,
    leaves: &mut usize,
) -> datafusion::error::Result<(Arc<dyn ExecutionPlan>, Vec<PieceInput>)> {
    let children = node.children();
    if children.is_empty() {
        let input = node
            .downcast_ref::<datafusion::physical_plan::empty::EmptyExec>()
            .map(|_| {
                *leaves += 1;
                PieceInput::Stage(*leaves - 1)
            });
        return Ok((node.clone(), input.into_iter().collect()));
    }
    let reader = operation(node).map(|(below, _)| below);
    let (mut kids, mut inputs) = (Vec::new(), Vec::new());
    for child in children {
        let (cut, child_inputs) = cut_pieces(child, relation, pieces, leaves)?;
        let apart = reader
            .zip(first_operation(child))
            .is_some_and(|(r, c)| !relation.binds(c, r));
        if apart {
            pieces.push(Piece {
                plan: cut,
                inputs: child_inputs,
            });
            kids.push(Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
                child.schema(),
            )) as Arc<dyn ExecutionPlan>);
            inputs.push(PieceInput::Piece(pieces.len() - 1));
        } else {
            kids.push(cut);
            inputs.extend(child_inputs);
        }
    }
    Ok((super::tree::rewire(node.clone(), kids)?, inputs))
}

/// The operation a physical node is, as its inputs see it and as its reader sees it (a grouped
/// aggregation forms groups below and computes aggregates above); None for filters,
/// projections and other nodes that belong to the operation below them.
fn operation(node: &Arc<dyn ExecutionPlan>) -> Option<(Op, Op)> {
    let n: &dyn ExecutionPlan = node.as_ref();
    if let Some(op) = join_or_sort(n) {
        return Some((op, op));
    }
    let a = n.downcast_ref::<AggregateExec>()?;
    let below = if a.group_expr().expr().is_empty() {
        Op::Aggregate
    } else {
        Op::GroupBy
    };
    Some((below, Op::Aggregate))
}

/// The join or sort a physical node is, if it is one.
fn join_or_sort(n: &dyn ExecutionPlan) -> Option<Op> {
    if n.downcast_ref::<HashJoinExec>().is_some()
        || n.downcast_ref::<SymmetricHashJoinExec>().is_some()
    {
        Some(Op::HashJoin)
    } else if n.downcast_ref::<SortMergeJoinExec>().is_some() {
        Some(Op::MergeJoin)
    } else if n.downcast_ref::<NestedLoopJoinExec>().is_some()
        || n.downcast_ref::<CrossJoinExec>().is_some()
    {
        Some(Op::NestedLoop)
    } else if n.downcast_ref::<SortExec>().is_some() {
        Some(Op::Sort)
    } else {
        None
    }
}

/// The operation `node` ends in, seen from above: itself, or the one below the filters and
/// projections on top of it (None at a leaf or a node with several inputs that is none).
fn first_operation(node: &Arc<dyn ExecutionPlan>) -> Option<Op> {
    if let Some((_, above)) = operation(node) {
        return Some(above);
    }
    match node.children().as_slice() {
        [only] => first_operation(only),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::catalog::memory::MemTable;
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// memik's six queries (their TPC-H forms), planned by DataFusion over empty TPC-H tables.
    async fn plans() -> Vec<(u32, Arc<dyn ExecutionPlan>)> {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
        for t in adisk_storage::tpch::TABLES {
            let schema = adisk_storage::tpch::schema(t).unwrap();
            ctx.register_table(
                t,
                Arc::new(MemTable::try_new(schema, vec![vec![]]).unwrap()),
            )
            .unwrap();
        }
        let mut out = Vec::new();
        for q in [1, 3, 6, 12, 13, 16] {
            let sql = crate::sql::tpch::query(q).unwrap();
            let plan = ctx
                .sql(sql)
                .await
                .unwrap()
                .create_physical_plan()
                .await
                .unwrap();
            out.push((q, plan));
        }
        out
    }

    #[test]
    fn the_relations_bind_what_the_paper_lists() {
        assert!(
            Bundling::Paper.binds(Op::Scan, Op::HashJoin)
                && Bundling::Paper.binds(Op::GroupBy, Op::Aggregate)
        );
        assert!(
            !Bundling::Paper.binds(Op::Aggregate, Op::Sort)
                && Bundling::Excessive.binds(Op::Aggregate, Op::Sort)
        );
        assert!(!Bundling::None.binds(Op::Scan, Op::HashJoin));
        assert!(!Bundling::Excessive.binds(Op::HashJoin, Op::Sort));
    }

    #[tokio::test]
    async fn memiks_six_queries_bundle_as_algorithm_1_says() {
        for (q, plan) in plans().await {
            let tree = op_tree(&plan);
            let [none, paper, excessive] =
                [Bundling::None, Bundling::Paper, Bundling::Excessive].map(|b| report(&plan, b));
            let ops = none.bundles.iter().map(Vec::len).sum::<usize>();
            assert_eq!(
                none.count(),
                ops,
                "Q{q}: without bundling every operation is a bundle: {:?}",
                none.lines()
            );
            let fewer = if q == 6 {
                paper.count() <= none.count()
            } else {
                paper.count() < none.count()
            };
            assert!(
                fewer && excessive.count() <= paper.count(),
                "Q{q}: {} / {} / {}",
                none.count(),
                paper.count(),
                excessive.count()
            );
            for r in [&paper, &excessive] {
                assert_eq!(
                    r.bundles.iter().map(Vec::len).sum::<usize>(),
                    ops,
                    "Q{q}: every operation in exactly one bundle"
                );
            }
            match q {
                // sort ← aggregate ← group-by ← scan: the paper binds group-by into the
                // aggregation and the scan into the group-by; excessive also the aggregation
                // into the sort.
                1 => {
                    assert_eq!(none.count(), 4, "{tree:?}");
                    assert_eq!(
                        paper.lines(),
                        vec!["bundle 0: sort", "bundle 1: aggregate ← group-by ← scan"]
                    );
                    assert_eq!(excessive.count(), 1);
                }
                // aggregate ← scan: nothing binds a scan to an aggregation without groups.
                6 => {
                    assert_eq!(none.count(), 2);
                    assert_eq!(paper.count(), 2);
                    assert_eq!(excessive.count(), 2);
                }
                _ => {}
            }
        }
    }

    /// memik's six queries with their tables as `EmptyExec` inputs (as a stage's fragment has
    /// them), cut into pieces: every input is read once, in order; pieces only read earlier
    /// ones; no piece holds an operation reading another it does not bind; fewer pieces as
    /// the relation grows.
    #[tokio::test]
    async fn pieces_cut_a_fragment_where_operations_do_not_bind() {
        use datafusion::common::tree_node::{Transformed, TreeNode};
        use datafusion::physical_plan::empty::EmptyExec;
        for (q, plan) in plans().await {
            let plan = plan
                .transform_up(|n| {
                    Ok(if n.children().is_empty() {
                        Transformed::yes(Arc::new(EmptyExec::new(n.schema())) as _)
                    } else {
                        Transformed::no(n)
                    })
                })
                .unwrap()
                .data;
            let leaves = plan
                .collect_leaves_for_test()
                .into_iter()
                .filter(|l| l.downcast_ref::<EmptyExec>().is_some())
                .count();
            let mut counts = Vec::new();
            for relation in [Bundling::None, Bundling::Paper, Bundling::Excessive] {
                let pieces = split(&plan, relation).unwrap();
                let mut read = Vec::new();
                for (i, p) in pieces.iter().enumerate() {
                    for input in &p.inputs {
                        match *input {
                            PieceInput::Stage(k) => read.push(k),
                            PieceInput::Piece(j) => assert!(j < i, "Q{q}: piece {i} reads {j}"),
                        }
                    }
                    assert!(
                        unbound_inside(&p.plan, relation).is_none(),
                        "Q{q} {relation:?}"
                    );
                }
                read.sort();
                assert_eq!(read, (0..leaves).collect::<Vec<_>>(), "Q{q} {relation:?}");
                counts.push(pieces.len());
            }
            assert!(
                counts[0] >= counts[1] && counts[1] >= counts[2],
                "Q{q}: {counts:?}"
            );
            if q == 3 {
                assert!(
                    counts[0] > counts[2],
                    "Q3 has joins and a sort to cut: {counts:?}"
                );
            }
        }
    }

    /// An operation in `plan` reading another it does not bind (through filters and
    /// projections), if any.
    fn unbound_inside(plan: &Arc<dyn ExecutionPlan>, relation: Bundling) -> Option<(Op, Op)> {
        if let Some((below, _)) = operation(plan) {
            for c in plan.children() {
                if let Some(child) = first_operation(c)
                    && !relation.binds(child, below)
                {
                    return Some((child, below));
                }
            }
        }
        plan.children()
            .into_iter()
            .find_map(|c| unbound_inside(c, relation))
    }

    trait Leaves {
        fn collect_leaves_for_test(&self) -> Vec<Arc<dyn ExecutionPlan>>;
    }
    impl Leaves for Arc<dyn ExecutionPlan> {
        fn collect_leaves_for_test(&self) -> Vec<Arc<dyn ExecutionPlan>> {
            if self.children().is_empty() {
                return vec![self.clone()];
            }
            self.children()
                .into_iter()
                .flat_map(|c| c.collect_leaves_for_test())
                .collect()
        }
    }
}
