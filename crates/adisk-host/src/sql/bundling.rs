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
    } else if node.downcast_ref::<HashJoinExec>().is_some()
        || node.downcast_ref::<SymmetricHashJoinExec>().is_some()
    {
        Op::HashJoin
    } else if node.downcast_ref::<SortMergeJoinExec>().is_some() {
        Op::MergeJoin
    } else if node.downcast_ref::<NestedLoopJoinExec>().is_some()
        || node.downcast_ref::<CrossJoinExec>().is_some()
    {
        Op::NestedLoop
    } else if node.downcast_ref::<SortExec>().is_some() {
        Op::Sort
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
}
