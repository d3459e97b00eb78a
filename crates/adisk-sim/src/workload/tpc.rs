//! TPC-D/TPC-H queries as plan trees of the operations of memik-… Table 1 (sequential and
//! indexed scan, nested-loop / merge / hash join, sort, group-by, aggregate), operation
//! bundling by memik-… Algorithm 1, and their compilation into phases for each architecture.
//!
//! Plan shapes are reconstructed from memik-… Table 1 (which operations each query uses),
//! §4.2.2 (the Q12 walk-through) and the standard TPC-D plans; sizes come from memik-…
//! Tables 5–7 (chiu-…: TPC-H scale factors). Assumptions are listed in docs/simulator.md.

use super::context::{KeyError, Wctx};
use crate::config::{Bundling, WorkloadConfig};
use crate::engine::{Amount, Dest, Flow, Input, Phase, Plan};

/// Plan operations (memik-… Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Sequential scan with selection/projection.
    SeqScan,
    /// Indexed scan.
    IndexScan,
    /// Nested-loop join (the inner is replicated; index nested loop).
    NestedLoop,
    /// Merge join.
    MergeJoin,
    /// Hash join.
    HashJoin,
    /// Sort.
    Sort,
    /// Group-by.
    Group,
    /// Aggregate.
    Agg,
}

impl Op {
    fn short(self) -> &'static str {
        match self {
            Op::SeqScan => "SS",
            Op::IndexScan => "IS",
            Op::NestedLoop => "NL",
            Op::MergeJoin => "M",
            Op::HashJoin => "H",
            Op::Sort => "Sort",
            Op::Group => "Group",
            Op::Agg => "Agg",
        }
    }
    fn is_join(self) -> bool {
        matches!(self, Op::NestedLoop | Op::MergeJoin | Op::HashJoin)
    }
    fn is_scan(self) -> bool {
        matches!(self, Op::SeqScan | Op::IndexScan)
    }
}

/// A plan-tree node.
#[derive(Clone, Debug)]
pub struct PlanNode {
    /// Operation.
    pub op: Op,
    /// Scanned table (scans only).
    pub table: Option<usize>,
    /// Selectivity of a scan (fraction of the table's tuples kept).
    pub selectivity: f64,
    /// Children (joins: [probe / many side, build / one side]).
    pub children: Vec<usize>,
}

/// A query: tables (name, tuples), tuple size, plan tree, result groups.
#[derive(Clone, Debug)]
pub struct Query {
    /// Name.
    pub name: String,
    /// (table, tuples).
    pub tables: Vec<(String, f64)>,
    /// Bytes per base tuple.
    pub tuple_bytes: f64,
    /// Nodes; `root` is the last.
    pub nodes: Vec<PlanNode>,
    /// Distinct groups of the group-by (if any).
    pub groups: f64,
}

impl Query {
    /// Root node index.
    pub fn root(&self) -> usize {
        self.nodes.len() - 1
    }
}

struct B {
    nodes: Vec<PlanNode>,
}
impl B {
    fn add(&mut self, op: Op, table: Option<usize>, sel: f64, children: Vec<usize>) -> usize {
        self.nodes.push(PlanNode {
            op,
            table,
            selectivity: sel,
            children,
        });
        self.nodes.len() - 1
    }
}

/// memik-… size class scaling of Table 7 (small = 0.3×, large = 3× the medium tuple counts).
fn class_factor(c: &str) -> Option<f64> {
    match c {
        "small" => Some(0.3),
        "medium" => Some(1.0),
        "large" => Some(3.0),
        _ => None,
    }
}

/// Table 6 selectivities (fraction) of the query's main selection.
fn memik_selectivity(q: &str, class: &str) -> Option<f64> {
    let row: [f64; 3] = match q {
        "Q1" => [83.0, 88.0, 93.0],
        "Q3" => [44.0, 54.0, 63.0],
        "Q6" => [2.0, 3.0, 4.0],
        "Q12" => [0.4, 0.8, 1.6],
        "Q13" => [100.0, 100.0, 100.0],
        "Q16" => [12.0, 15.0, 18.0],
        _ => return None,
    };
    let i = match class {
        "small" => 0,
        "medium" => 1,
        "large" => 2,
        _ => return None,
    };
    Some(row[i] / 100.0)
}

/// Table 5 total sizes (medium), bytes.
fn memik_size(q: &str) -> Option<f64> {
    Some(
        match q {
            "Q1" | "Q6" => 8.0,
            "Q3" | "Q12" => 10.0,
            "Q13" => 2.5,
            "Q16" => 2.0,
            _ => return None,
        } * 1e9,
    )
}

/// Build a query plan. `tuples` scales Table 7's medium counts; `total_bytes` sets tuple size;
/// `sel` is the main selectivity.
pub fn build_query(q: &str, scale: f64, total_bytes: f64, sel: f64) -> Option<Query> {
    let mut b = B { nodes: Vec::new() };
    let (tables, groups) =
        memik_plan(&mut b, q, scale, sel).or_else(|| more_tpcd_plan(&mut b, q, scale, sel))?;
    let total_tuples: f64 = tables.iter().map(|t| t.1).sum();
    Some(Query {
        name: q.to_string(),
        tables: tables
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect(),
        tuple_bytes: total_bytes / total_tuples,
        nodes: b.nodes,
        groups,
    })
}

/// A query's tables (name, tuples) and the distinct groups of its group-by.
type Shape = (Vec<(&'static str, f64)>, f64);

/// The plan of one of memik-… Table 1's six queries (Q1, Q3, Q6, Q12, Q13, Q16) added to `b`,
/// or `None` (nothing added) for another query.
fn memik_plan(b: &mut B, q: &str, scale: f64, sel: f64) -> Option<Shape> {
    let m = 1e6 * scale;
    Some(match q {
        // Q1: SS lineitem → group (returnflag, linestatus) → aggregate → sort.
        "Q1" => {
            let s = b.add(Op::SeqScan, Some(0), sel, vec![]);
            let g = b.add(Op::Group, None, 1.0, vec![s]);
            let a = b.add(Op::Agg, None, 1.0, vec![g]);
            b.add(Op::Sort, None, 1.0, vec![a]);
            (vec![("lineitem", 60.0 * m)], 4.0)
        }
        // Q3: IS customer (segment, 1/5) ⋈NL IS orders (date, 1/2) ⋈NL IS lineitem (date) → group → agg → sort.
        "Q3" => {
            let c = b.add(Op::IndexScan, Some(2), 0.2, vec![]);
            let o = b.add(Op::IndexScan, Some(1), 0.5, vec![]);
            let j1 = b.add(Op::NestedLoop, None, 1.0, vec![o, c]);
            let l = b.add(Op::IndexScan, Some(0), sel, vec![]);
            let j2 = b.add(Op::NestedLoop, None, 1.0, vec![l, j1]);
            let g = b.add(Op::Group, None, 1.0, vec![j2]);
            let a = b.add(Op::Agg, None, 1.0, vec![g]);
            b.add(Op::Sort, None, 1.0, vec![a]);
            (
                vec![
                    ("lineitem", 60.0 * m),
                    ("orders", 15.0 * m),
                    ("customer", 1.5 * m),
                ],
                0.1 * 15.0 * m * 0.5 * 0.2,
            )
        }
        // Q6: SS lineitem → aggregate.
        "Q6" => {
            let s = b.add(Op::SeqScan, Some(0), sel, vec![]);
            b.add(Op::Agg, None, 1.0, vec![s]);
            (vec![("lineitem", 60.0 * m)], 1.0)
        }
        // Q12 (memik-… Fig. 3): SS lineitem → sort; ⋈M IS orders → sort → group → agg → sort.
        "Q12" => {
            let s = b.add(Op::SeqScan, Some(0), sel, vec![]);
            let s1 = b.add(Op::Sort, None, 1.0, vec![s]);
            let o = b.add(Op::IndexScan, Some(1), 1.0, vec![]);
            let j = b.add(Op::MergeJoin, None, 1.0, vec![o, s1]);
            let s2 = b.add(Op::Sort, None, 1.0, vec![j]);
            let g = b.add(Op::Group, None, 1.0, vec![s2]);
            let a = b.add(Op::Agg, None, 1.0, vec![g]);
            b.add(Op::Sort, None, 1.0, vec![a]);
            (vec![("lineitem", 60.0 * m), ("orders", 15.0 * m)], 2.0)
        }
        // Q13: SS orders (all) ⋈NL IS customer → group → agg → sort.
        "Q13" => {
            let o = b.add(Op::SeqScan, Some(0), sel, vec![]);
            let c = b.add(Op::IndexScan, Some(1), 1.0, vec![]);
            let j = b.add(Op::NestedLoop, None, 1.0, vec![o, c]);
            let g = b.add(Op::Group, None, 1.0, vec![j]);
            let a = b.add(Op::Agg, None, 1.0, vec![g]);
            b.add(Op::Sort, None, 1.0, vec![a]);
            (vec![("orders", 15.0 * m), ("customer", 1.5 * m)], 1.5 * m)
        }
        // Q16: IS partsupp ⋈H IS part (brand/type/size) ⋈H IS supplier (complaints, 1/2000) → group → agg → sort.
        "Q16" => {
            let ps = b.add(Op::IndexScan, Some(0), 1.0, vec![]);
            let p = b.add(Op::IndexScan, Some(1), sel, vec![]);
            let j1 = b.add(Op::HashJoin, None, 1.0, vec![ps, p]);
            let s = b.add(Op::IndexScan, Some(2), 0.0005, vec![]);
            let j2 = b.add(Op::HashJoin, None, 1.0, vec![j1, s]);
            let g = b.add(Op::Group, None, 1.0, vec![j2]);
            let a = b.add(Op::Agg, None, 1.0, vec![g]);
            b.add(Op::Sort, None, 1.0, vec![a]);
            (
                vec![
                    ("partsupp", 8.0 * m),
                    ("part", 2.0 * m),
                    ("supplier", 0.1 * m),
                ],
                18_000.0 * scale.min(1.0),
            )
        }
        _ => return None,
    })
}

/// The plan of a TPC-D query beyond memik-…'s six (Q5, Q9, Q10, Q17) added to `b`, or `None`
/// (nothing added) for another query.
fn more_tpcd_plan(b: &mut B, q: &str, scale: f64, sel: f64) -> Option<Shape> {
    let m = 1e6 * scale;
    Some(match q {
        // Beyond memik-…'s six (standard TPC-D plans, assumption; counts at memik's medium
        // size ≈ TPC-D SF 10): hash joins of scans, then group → aggregate → sort.
        // Q5: lineitem ⋈ (orders, one year ≈ 1/7 ⋈ customer) ⋈ supplier (one region ≈ 1/5).
        "Q5" => {
            let l = b.add(Op::SeqScan, Some(0), sel, vec![]);
            let o = b.add(Op::SeqScan, Some(1), 1.0 / 7.0, vec![]);
            let c = b.add(Op::SeqScan, Some(2), 1.0, vec![]);
            let oc = b.add(Op::HashJoin, None, 1.0, vec![o, c]);
            let j1 = b.add(Op::HashJoin, None, 1.0, vec![l, oc]);
            let su = b.add(Op::SeqScan, Some(3), 0.2, vec![]);
            let j2 = b.add(Op::HashJoin, None, 1.0, vec![j1, su]);
            let g = b.add(Op::Group, None, 1.0, vec![j2]);
            let a = b.add(Op::Agg, None, 1.0, vec![g]);
            b.add(Op::Sort, None, 1.0, vec![a]);
            (
                vec![
                    ("lineitem", 60.0 * m),
                    ("orders", 15.0 * m),
                    ("customer", 1.5 * m),
                    ("supplier", 0.1 * m),
                ],
                5.0,
            )
        }
        // Q9: lineitem ⋈ part ('%green%' ≈ 5.5%) ⋈ partsupp ⋈ supplier ⋈ orders; 25 nations × 7 years.
        "Q9" => {
            let l = b.add(Op::SeqScan, Some(0), sel, vec![]);
            let p = b.add(Op::SeqScan, Some(1), 0.055, vec![]);
            let j1 = b.add(Op::HashJoin, None, 1.0, vec![l, p]);
            let ps = b.add(Op::SeqScan, Some(2), 1.0, vec![]);
            let j2 = b.add(Op::HashJoin, None, 1.0, vec![j1, ps]);
            let su = b.add(Op::SeqScan, Some(3), 1.0, vec![]);
            let j3 = b.add(Op::HashJoin, None, 1.0, vec![j2, su]);
            let o = b.add(Op::SeqScan, Some(4), 1.0, vec![]);
            let j4 = b.add(Op::HashJoin, None, 1.0, vec![j3, o]);
            let g = b.add(Op::Group, None, 1.0, vec![j4]);
            let a = b.add(Op::Agg, None, 1.0, vec![g]);
            b.add(Op::Sort, None, 1.0, vec![a]);
            (
                vec![
                    ("lineitem", 60.0 * m),
                    ("part", 2.0 * m),
                    ("partsupp", 8.0 * m),
                    ("supplier", 0.1 * m),
                    ("orders", 15.0 * m),
                ],
                175.0,
            )
        }
        // Q10: lineitem (returned ≈ 1/4) ⋈ orders (one quarter ≈ 1/28) ⋈ customer; one group per customer.
        "Q10" => {
            let l = b.add(Op::SeqScan, Some(0), sel, vec![]);
            let o = b.add(Op::SeqScan, Some(1), 1.0 / 28.0, vec![]);
            let j1 = b.add(Op::HashJoin, None, 1.0, vec![l, o]);
            let c = b.add(Op::SeqScan, Some(2), 1.0, vec![]);
            let j2 = b.add(Op::HashJoin, None, 1.0, vec![j1, c]);
            let g = b.add(Op::Group, None, 1.0, vec![j2]);
            let a = b.add(Op::Agg, None, 1.0, vec![g]);
            b.add(Op::Sort, None, 1.0, vec![a]);
            (
                vec![
                    ("lineitem", 60.0 * m),
                    ("orders", 15.0 * m),
                    ("customer", 1.5 * m),
                ],
                0.4 * m,
            )
        }
        // Q17: lineitem ⋈ part (one brand and container ≈ 1/1000); per-part average → aggregate.
        "Q17" => {
            let l = b.add(Op::SeqScan, Some(0), sel, vec![]);
            let p = b.add(Op::SeqScan, Some(1), 0.001, vec![]);
            let j = b.add(Op::HashJoin, None, 1.0, vec![l, p]);
            let g = b.add(Op::Group, None, 1.0, vec![j]);
            b.add(Op::Agg, None, 1.0, vec![g]);
            (
                vec![("lineitem", 60.0 * m), ("part", 2.0 * m)],
                2000.0 * scale,
            )
        }
        _ => return None,
    })
}

/// The relation of bindable operations (child, parent).
pub fn relation(b: Bundling) -> Vec<(Op, Op)> {
    use Op::*;
    let paper = vec![
        (IndexScan, NestedLoop),
        (SeqScan, NestedLoop),
        (IndexScan, MergeJoin),
        (SeqScan, MergeJoin),
        (IndexScan, HashJoin),
        (SeqScan, HashJoin),
        (IndexScan, Group),
        (SeqScan, Group),
        (Group, Agg),
    ];
    match b {
        Bundling::None => Vec::new(),
        Bundling::Paper => paper,
        Bundling::Excessive => {
            let mut r = paper;
            r.extend([
                (IndexScan, Sort),
                (SeqScan, Sort),
                (Sort, Group),
                (Sort, Agg),
                (Agg, Sort),
                (Agg, Group),
            ]);
            r
        }
    }
}

/// memik-… Algorithm 1 (with the root's bundle included, as in the original algorithm).
/// Returns bundles in execution order (every bundle after the bundles it depends on).
pub fn find_bundles(q: &Query, rel: &[(Op, Op)]) -> Vec<Vec<usize>> {
    fn rec(
        q: &Query,
        rel: &[(Op, Op)],
        node: usize,
        current: &mut Vec<usize>,
        list: &mut Vec<Vec<usize>>,
    ) {
        for &child in &q.nodes[node].children {
            if rel.contains(&(q.nodes[child].op, q.nodes[node].op)) {
                current.push(child);
                rec(q, rel, child, current, list);
            } else {
                let mut nb = vec![child];
                rec(q, rel, child, &mut nb, list);
                list.push(nb);
            }
        }
    }
    let root = q.root();
    let mut list = Vec::new();
    let mut rb = vec![root];
    rec(q, rel, root, &mut rb, &mut list);
    list.push(rb);
    list
}

/// Bundle statistics over a set of queries: (distinct bundles, average operations per bundle, bundles per query).
pub fn bundle_stats(queries: &[Query], rel: &[(Op, Op)]) -> (usize, f64, f64) {
    let mut distinct: Vec<String> = Vec::new();
    let (mut ops, mut bundles) = (0usize, 0usize);
    for q in queries {
        for b in find_bundles(q, rel) {
            let key: Vec<&str> = b.iter().map(|i| q.nodes[*i].op.short()).collect();
            let key = key.join("+");
            if !distinct.contains(&key) {
                distinct.push(key);
            }
            ops += b.len();
            bundles += 1;
        }
    }
    (
        distinct.len(),
        ops as f64 / bundles.max(1) as f64,
        bundles as f64 / queries.len().max(1) as f64,
    )
}

/// Per-node output estimates.
#[derive(Clone, Debug, Default)]
struct Est {
    tuples: f64,
    bytes_per: f64,
    key_tuples: f64,
}

fn estimate(q: &Query) -> Vec<Est> {
    let mut e = vec![Est::default(); q.nodes.len()];
    for i in 0..q.nodes.len() {
        let n = &q.nodes[i];
        e[i] = match n.op {
            Op::SeqScan | Op::IndexScan => {
                let t = q.tables[n.table.unwrap_or(0)].1;
                // Selection + projection keep half of each tuple's bytes (assumption).
                Est {
                    tuples: t * n.selectivity,
                    bytes_per: q.tuple_bytes * 0.5,
                    key_tuples: t,
                }
            }
            Op::NestedLoop | Op::MergeJoin | Op::HashJoin => {
                let (p, b) = (&e[n.children[0]], &e[n.children[1]]);
                let matched = if b.key_tuples > 0.0 {
                    (b.tuples / b.key_tuples).min(1.0)
                } else {
                    1.0
                };
                Est {
                    tuples: p.tuples * matched,
                    bytes_per: p.bytes_per + b.bytes_per * 0.5,
                    key_tuples: p.key_tuples,
                }
            }
            Op::Sort => e[n.children[0]].clone(),
            Op::Group => {
                let c = &e[n.children[0]];
                Est {
                    tuples: q.groups.min(c.tuples),
                    bytes_per: 32.0,
                    key_tuples: q.groups,
                }
            }
            Op::Agg => {
                let c = &e[n.children[0]];
                let t = if q.nodes[n.children[0]].op == Op::Group {
                    c.tuples
                } else {
                    1.0
                };
                Est {
                    tuples: t,
                    bytes_per: 32.0,
                    key_tuples: t,
                }
            }
        };
    }
    e
}

/// How a query is executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// memik-…: the central unit / front-end coordinates; smart disks use bundles with a
    /// synchronisation per bundle; joins replicate one input.
    Memik,
    /// chiu-…: the whole plan is shipped once; sort/join/group redistribute among the disks.
    Chiu,
}

/// Compile a query for an architecture.
pub fn compile_query(q: &Query, bundles: &[Vec<usize>], ctx: &Wctx, mode: Mode) -> Plan {
    let est = estimate(q);
    // A join's build side that is a sub-plan (not a scan) inside the same bundle is computed
    // first, as its own bundle, so that it can be replicated or hashed.
    let bundles = &split_build_subplans(q, &est, bundles);
    let mut plan = Plan::default();
    let files: Vec<u32> = q.tables.iter().map(|(name, _)| plan.file(name)).collect();
    for (i, (_, t)) in q.tables.iter().enumerate() {
        plan.base_files.push((files[i], t * q.tuple_bytes));
    }
    let mut qc = QueryCompiler {
        q,
        est,
        ctx,
        mode,
        files,
        n: ctx.n as f64,
        copy: ctx.c("copy_cycles_per_byte"),
        loc: vec![None; q.nodes.len()],
    };
    let nb = bundles.len();
    for (bi, bundle) in bundles.iter().enumerate() {
        let at = BundleAt::new(bi, bundle, bi + 1 == nb);
        if qc.feeds_from_coord(&at) {
            plan.phases.push(qc.coordinator_phase(&at));
            qc.loc[at.top] = Some(LocView::Coord);
            continue;
        }
        let phases = qc.worker_phases(&mut plan, &at);
        plan.phases.extend(phases);
    }
    if mode == Mode::Chiu && !ctx.single_node {
        if let Some(p) = plan.phases.first_mut() {
            p.command = true;
        }
        if let Some(p) = plan.phases.last_mut() {
            p.sync = true;
        }
    }
    plan.note("bundles", nb);
    plan.note("ops", q.nodes.len());
    plan.note(
        "bundle_list",
        bundles
            .iter()
            .map(|b| names(q, b))
            .collect::<Vec<_>>()
            .join(" | "),
    );
    plan
}

/// `log2` of at least 2 (the depth of a sort or a merge of `x`).
fn log2(x: f64) -> f64 {
    x.max(2.0).log2()
}

/// What compiling a query's bundles shares: the query, its estimates, the system, the mode,
/// the tables' files and where each node's output lives after its bundle.
struct QueryCompiler<'a> {
    q: &'a Query,
    est: Vec<Est>,
    ctx: &'a Wctx<'a>,
    mode: Mode,
    /// The file of each table.
    files: Vec<u32>,
    /// Workers.
    n: f64,
    /// Cycles per byte copied.
    copy: f64,
    /// Where each node's output lives after its bundle: in memory, on disk (file), or at the
    /// coordinator.
    loc: Vec<Option<LocView>>,
}

/// One bundle being compiled: its index, its operations in plan order (children first), its
/// top (the operation whose parent is outside) and whether it is the last.
struct BundleAt<'b> {
    bi: usize,
    bundle: &'b [usize],
    ops: Vec<usize>,
    top: usize,
    last: bool,
}

impl<'b> BundleAt<'b> {
    /// Bundle `bi`.
    fn new(bi: usize, bundle: &'b [usize], last: bool) -> BundleAt<'b> {
        let mut ops: Vec<usize> = bundle.to_vec();
        ops.sort_unstable();
        let top = *ops.iter().max().unwrap_or(&0);
        BundleAt {
            bi,
            bundle,
            ops,
            top,
            last,
        }
    }

    /// `Q12 bundle 2 [Sort+M]`: how its phases are named.
    fn label(&self, q: &Query) -> String {
        format!(
            "{} bundle {} [{}]",
            q.name,
            self.bi + 1,
            names(q, &self.ops)
        )
    }
}

/// A bundle's probe path, walked from its top along the larger input of each join: the phases
/// that first build the joins' other inputs, and what the path reads.
struct Probe {
    /// Nodes from the top down.
    path: Vec<usize>,
    /// Phases computing the build sides, before the bundle's own phase.
    pre_phases: Vec<Phase>,
    /// Bytes the coordinator broadcasts to the workers (gathered build sides).
    broadcast: f64,
    /// Cycles building the joins' hash tables.
    build_cycles: f64,
    /// The path's input.
    input: Input,
    /// Its bytes per worker.
    bytes_per_worker: f64,
}

impl QueryCompiler<'_> {
    /// The bundle's data already sits at the coordinator (after a group/agg): it runs there.
    fn feeds_from_coord(&self, at: &BundleAt) -> bool {
        let q = self.q;
        at.ops.iter().all(|&i| {
            q.nodes[i]
                .children
                .iter()
                .all(|ch| at.bundle.contains(ch) || self.loc[*ch] == Some(LocView::Coord))
                && !q.nodes[i].op.is_scan()
        }) && at.ops.iter().any(|&i| {
            q.nodes[i]
                .children
                .iter()
                .any(|ch| self.loc[*ch] == Some(LocView::Coord))
        })
    }

    /// The phase of a bundle run at the coordinator.
    fn coordinator_phase(&self, at: &BundleAt) -> Phase {
        let q = self.q;
        let c = |k: &str| self.ctx.c(k);
        let mut ph = Phase::new(format!("{} at coordinator", at.label(q)));
        let t = self.est[at.top].tuples;
        ph.coord_end_cycles = at
            .ops
            .iter()
            .map(|&i| match q.nodes[i].op {
                Op::Sort => t * log2(t) * c("sort_compare_cycles"),
                Op::Group => t * c("hash_group_cycles_per_tuple"),
                _ => t * c("agg_cycles_per_tuple"),
            })
            .sum();
        if self.mode == Mode::Memik && !self.ctx.single_node {
            ph.command = at.bi == 0;
        }
        ph
    }

    /// The phases of a bundle run at the workers: its build sides, then the bundle itself.
    fn worker_phases(&mut self, plan: &mut Plan, at: &BundleAt) -> Vec<Phase> {
        let probe = self.probe(at);
        let (cycles, extra_io) = self.path_cycles(at, &probe);
        let Probe {
            pre_phases,
            broadcast,
            build_cycles,
            input,
            bytes_per_worker,
            ..
        } = probe;
        let mut ph = Phase::new(at.label(self.q));
        ph.input = input;
        ph.cycles_per_byte = if bytes_per_worker > 0.0 {
            cycles / bytes_per_worker
        } else {
            0.0
        };
        if bytes_per_worker <= 0.0 {
            ph.end_cycles = cycles;
        }
        // Replicated build sides are built in full at every worker; redistributed ones in part.
        ph.end_cycles += if self.mode == Mode::Chiu && !self.ctx.single_node {
            build_cycles / self.n
        } else {
            build_cycles
        };
        ph.broadcast_bytes = broadcast;
        if extra_io > 0.0 {
            self.spill(plan, at, &mut ph, extra_io);
        }
        self.route_output(plan, at, &mut ph);
        self.chiu_redistribution(at, &mut ph);
        // Protocol.
        let mut all: Vec<Phase> = pre_phases;
        all.push(ph);
        if !self.ctx.single_node && self.mode == Mode::Memik {
            for p in all.iter_mut() {
                p.command = true;
                p.sync = true;
            }
        }
        all
    }

    /// Walk the probe path from the bundle's top, following the larger child of each join;
    /// each join's other (build) side gets its phase.
    fn probe(&self, at: &BundleAt) -> Probe {
        let (q, est, n) = (self.q, &self.est, self.n);
        let mut pre_phases: Vec<Phase> = Vec::new();
        let mut broadcast = 0.0;
        let mut build_cycles = 0.0;
        let mut path: Vec<usize> = Vec::new();
        let mut cur = at.top;
        let input: Input;
        let bytes_per_worker: f64;
        loop {
            path.push(cur);
            let node = &q.nodes[cur];
            if node.op.is_scan() {
                let tb = q.tables[node.table.unwrap_or(0)].1 * q.tuple_bytes;
                let frac = if node.op == Op::IndexScan {
                    node.selectivity.clamp(1e-6, 1.0)
                } else {
                    1.0
                };
                input = Input::FilePart(self.files[node.table.unwrap_or(0)], frac);
                bytes_per_worker = tb * frac / n;
                break;
            }
            let kids = &node.children;
            let (probe, build) = if node.op.is_join() {
                let (a, b) = (kids[0], kids[1]);
                let (sa, sb) = (
                    est[a].tuples * est[a].bytes_per,
                    est[b].tuples * est[b].bytes_per,
                );
                if sa >= sb { (a, Some(b)) } else { (b, Some(a)) }
            } else {
                (kids[0], None)
            };
            if let Some(bd) = build {
                let (ph, gathered) = self.build_phase(at, cur, bd);
                if let Some(bytes) = gathered {
                    broadcast += bytes;
                }
                build_cycles += est[bd].tuples * self.ctx.c("hash_build_cycles_per_tuple");
                pre_phases.push(ph);
            }
            if !at.bundle.contains(&probe) {
                (input, bytes_per_worker) =
                    input_of(q, est, probe, &self.loc, &self.files, n, at.bundle);
                break;
            }
            cur = probe;
        }
        Probe {
            path,
            pre_phases,
            broadcast,
            build_cycles,
            input,
            bytes_per_worker,
        }
    }

    /// The phase computing build side `bd` of `join` (the smaller input is replicated or
    /// hashed), with the bytes the coordinator gathers to broadcast, if it does.
    fn build_phase(&self, at: &BundleAt, join: usize, bd: usize) -> (Phase, Option<f64>) {
        let (q, est, n, ctx, copy) = (self.q, &self.est, self.n, self.ctx, self.copy);
        let c = |k: &str| ctx.c(k);
        let bytes = est[bd].tuples * est[bd].bytes_per;
        let mut ph = Phase::new(format!(
            "{}: build/replicate {}",
            at.label(q),
            q.nodes[bd].op.short()
        ));
        let (inp, per) = input_of(q, est, bd, &self.loc, &self.files, n, at.bundle);
        ph.input = inp;
        ph.cycles_per_byte = scan_cycles(q, bd, ctx) + if per > 0.0 { copy } else { 0.0 };
        let out_ratio = if per > 0.0 { bytes / n / per } else { 0.0 };
        let replicate =
            !ctx.single_node && (self.mode == Mode::Memik || q.nodes[join].op != Op::NestedLoop);
        if !replicate {
            return (ph, None);
        }
        let flow = |dest: Dest, recv: f64| flow_of(dest, out_ratio, per, bytes / n, recv);
        match (self.mode, q.nodes[join].op) {
            (Mode::Chiu, _) => {
                // Hash-redistribute the build side (and later the probe side).
                ph.flows.push(flow(
                    Dest::Shuffle,
                    c("hash_build_cycles_per_tuple") / est[bd].bytes_per,
                ));
            }
            (Mode::Memik, Op::HashJoin) => {
                ph.flows.push(flow(
                    Dest::AllPeers,
                    c("hash_build_cycles_per_tuple") / est[bd].bytes_per,
                ));
            }
            (Mode::Memik, Op::MergeJoin) => {
                // memik-… §3: "The merge (M) join starts by sorting one of the
                // tables globally and replicating this sorted table in all the
                // processing elements"; §4.2.2: "smart disks first replicate the
                // filtered `lineitem` table by communicating each other". Each
                // worker sends its sorted part to every other worker, which merges
                // the n sorted parts; the central unit is not involved.
                ph.flows.push(flow(
                    Dest::AllPeers,
                    log2(n) * c("sort_compare_cycles") / est[bd].bytes_per,
                ));
            }
            (Mode::Memik, _) => {
                if ctx.worker_disks {
                    // memik-… §3, nested loop: "The selection for this table is
                    // done by the central unit in smart disk system": the central
                    // unit gathers the inner, then broadcasts it.
                    ph.flows.push(flow(Dest::Coordinator, copy));
                    return (ph, Some(bytes));
                }
                ph.flows.push(flow(Dest::AllPeers, copy));
            }
        }
        (ph, None)
    }

    /// CPU cycles per worker along the probe path, and the bytes per worker its sorts spill
    /// (written and read back) when they outgrow memory.
    fn path_cycles(&self, at: &BundleAt, probe: &Probe) -> (f64, f64) {
        let (q, est, n, ctx) = (self.q, &self.est, self.n, self.ctx);
        let c = |k: &str| ctx.c(k);
        let leaf = *probe.path.last().unwrap_or(&at.top);
        let in_tuples_total = if q.nodes[leaf].op.is_scan() && at.bundle.contains(&leaf) {
            q.tables[q.nodes[leaf].table.unwrap_or(0)].1
                * if q.nodes[leaf].op == Op::IndexScan {
                    q.nodes[leaf].selectivity
                } else {
                    1.0
                }
        } else {
            est[q.nodes[leaf].children.first().copied().unwrap_or(leaf)]
                .tuples
                .max(est[leaf].tuples)
        };
        let in_bytes_total = probe.bytes_per_worker * n;
        let mut cycles = 0.0;
        let mut extra_io = 0.0; // bytes per worker written and read back (spills)
        for &i in probe.path.iter().rev() {
            let node = &q.nodes[i];
            let tin = node
                .children
                .first()
                .map(|ch| est[*ch].tuples)
                .unwrap_or(in_tuples_total)
                / n;
            let tout = est[i].tuples / n;
            cycles += match node.op {
                Op::SeqScan => in_bytes_total / n * c("select_cycles_per_byte"),
                Op::IndexScan => {
                    in_bytes_total / n * c("select_cycles_per_byte")
                        + tout * c("index_probe_cycles")
                }
                Op::NestedLoop => tin.max(tout) * c("hash_probe_cycles_per_tuple"),
                Op::HashJoin => tin.max(tout) * c("hash_probe_cycles_per_tuple"),
                Op::MergeJoin => (tin + tout) * c("join_merge_cycles_per_tuple"),
                Op::Sort => {
                    let bytes = tin * est[i].bytes_per;
                    if bytes > ctx.mem_per_worker {
                        extra_io += bytes;
                    }
                    tin * log2(tin) * c("sort_compare_cycles")
                }
                Op::Group => tin * c("hash_group_cycles_per_tuple"),
                Op::Agg => tin * c("agg_cycles_per_tuple"),
            };
        }
        (cycles, extra_io)
    }

    /// External sort spill: runs of `extra_io` bytes per worker written and read back once.
    fn spill(&self, plan: &mut Plan, at: &BundleAt, ph: &mut Phase, extra_io: f64) {
        let f = plan.file(&format!("{}_spill{}", self.q.name, at.bi));
        ph.flows.push(Flow {
            dest: Dest::Local,
            amount: Amount::Bytes(extra_io),
            recv_cycles_per_byte: 0.0,
            write: Some(f),
        });
        ph.write_estimates.push((f, extra_io * self.n));
        plan.note(
            format!("bundle{}_sort_spill_bytes_per_worker", at.bi + 1),
            format!("{extra_io:.0}"),
        );
    }

    /// The bundle's output bytes per worker.
    fn out_bytes_per_worker(&self, at: &BundleAt) -> f64 {
        self.est[at.top].tuples * self.est[at.top].bytes_per / self.n
    }

    /// Where the bundle's output goes: to the coordinator (the last bundle, or one that
    /// groups), to a file when it outgrows a worker's memory, else it stays in memory.
    fn route_output(&mut self, plan: &mut Plan, at: &BundleAt, ph: &mut Phase) {
        let (q, n, ctx) = (self.q, self.n, self.ctx);
        let c = |k: &str| ctx.c(k);
        let out_bytes_per_worker = self.out_bytes_per_worker(at);
        let has_group = at
            .ops
            .iter()
            .any(|&i| matches!(q.nodes[i].op, Op::Group | Op::Agg));
        let to_coord = at.last || has_group;
        if to_coord && !ctx.single_node {
            let dest = if self.mode == Mode::Chiu && has_group && !at.last {
                Dest::Shuffle
            } else {
                Dest::Coordinator
            };
            let recv = if has_group {
                c("merge_partial_cycles_per_entry") / 32.0
            } else {
                self.copy
            };
            ph.flows.push(Flow {
                dest,
                amount: Amount::Bytes(out_bytes_per_worker),
                recv_cycles_per_byte: recv,
                write: None,
            });
            if q.nodes[at.top].op == Op::Sort {
                let t = self.est[at.top].tuples;
                ph.coord_end_cycles += t * log2(n) * c("sort_compare_cycles");
            }
            self.loc[at.top] = Some(LocView::Coord);
        } else if out_bytes_per_worker > ctx.mem_per_worker && !at.last {
            let f = plan.file(&format!("{}_b{}", q.name, at.bi));
            ph.flows.push(Flow {
                dest: Dest::Local,
                amount: Amount::Bytes(out_bytes_per_worker),
                recv_cycles_per_byte: 0.0,
                write: Some(f),
            });
            ph.write_estimates.push((f, out_bytes_per_worker * n));
            self.loc[at.top] = Some(LocView::Disk(f));
        } else {
            self.loc[at.top] = Some(LocView::Memory);
        }
    }

    /// chiu-…'s redistributions among the disks: a sort's output by key range (parallel
    /// bucket sort), a join's probe side by the join key.
    fn chiu_redistribution(&self, at: &BundleAt, ph: &mut Phase) {
        let q = self.q;
        if self.mode != Mode::Chiu || self.ctx.single_node {
            return;
        }
        if q.nodes[at.top].op == Op::Sort && !at.last {
            // Parallel bucket sort: redistribute by key range.
            ph.flows.push(Flow {
                dest: Dest::Shuffle,
                amount: Amount::Bytes(self.out_bytes_per_worker(at)),
                recv_cycles_per_byte: self.copy,
                write: None,
            });
        }
        if at.ops.iter().any(|&i| q.nodes[i].op.is_join()) {
            // Redistribute the probe side by the join key.
            ph.flows.push(Flow {
                dest: Dest::Shuffle,
                amount: Amount::Ratio(1.0),
                recv_cycles_per_byte: self.copy,
                write: None,
            });
        }
    }
}

/// The input a join builds from: the smaller of its two children by estimated bytes.
fn build_child(q: &Query, est: &[Est], j: usize) -> (usize, usize) {
    let (a, b) = (q.nodes[j].children[0], q.nodes[j].children[1]);
    let (sa, sb) = (
        est[a].tuples * est[a].bytes_per,
        est[b].tuples * est[b].bytes_per,
    );
    if sa >= sb { (a, b) } else { (b, a) }
}

fn split_build_subplans(q: &Query, est: &[Est], bundles: &[Vec<usize>]) -> Vec<Vec<usize>> {
    fn process(q: &Query, est: &[Est], mut b: Vec<usize>, out: &mut Vec<Vec<usize>>) {
        loop {
            let found = b.iter().copied().find_map(|j| {
                if !q.nodes[j].op.is_join() {
                    return None;
                }
                let (_, c) = build_child(q, est, j);
                (b.contains(&c) && !q.nodes[c].op.is_scan()).then_some(c)
            });
            let Some(c) = found else { break };
            let mut sub = Vec::new();
            let mut stack = vec![c];
            while let Some(x) = stack.pop() {
                if b.contains(&x) && !sub.contains(&x) {
                    sub.push(x);
                    stack.extend(q.nodes[x].children.iter().copied());
                }
            }
            b.retain(|x| !sub.contains(x));
            process(q, est, sub, out);
        }
        out.push(b);
    }
    let mut out = Vec::new();
    for b in bundles {
        process(q, est, b.clone(), &mut out);
    }
    out
}

fn flow_of(dest: Dest, ratio: f64, per: f64, bytes: f64, recv: f64) -> Flow {
    let amount = if per > 0.0 {
        Amount::Ratio(ratio)
    } else {
        Amount::Bytes(bytes)
    };
    Flow {
        dest,
        amount,
        recv_cycles_per_byte: recv,
        write: None,
    }
}

fn names(q: &Query, ops: &[usize]) -> String {
    let mut v: Vec<usize> = ops.to_vec();
    v.sort_unstable();
    v.iter()
        .rev()
        .map(|i| q.nodes[*i].op.short())
        .collect::<Vec<_>>()
        .join("+")
}

fn scan_cycles(q: &Query, i: usize, ctx: &Wctx) -> f64 {
    match q.nodes[i].op {
        Op::SeqScan | Op::IndexScan => ctx.c("select_cycles_per_byte"),
        _ => 0.0,
    }
}

/// Input of a sub-tree rooted at `i`: a scan inside the bundle reads its table; otherwise the
/// stored result of an earlier bundle. Returns (input, bytes per worker).
#[allow(clippy::too_many_arguments)]
fn input_of(
    q: &Query,
    est: &[Est],
    i: usize,
    loc: &[Option<LocView>],
    files: &[u32],
    n: f64,
    bundle: &[usize],
) -> (Input, f64) {
    let node = &q.nodes[i];
    if node.op.is_scan() && bundle.contains(&i) {
        let t = node.table.unwrap_or(0);
        let frac = if node.op == Op::IndexScan {
            node.selectivity.clamp(1e-6, 1.0)
        } else {
            1.0
        };
        return (
            Input::FilePart(files[t], frac),
            q.tables[t].1 * q.tuple_bytes * frac / n,
        );
    }
    let bytes = est[i].tuples * est[i].bytes_per / n;
    match loc[i] {
        Some(LocView::Disk(f)) => (Input::File(f), bytes),
        Some(LocView::Coord) => (Input::None, 0.0),
        _ => (Input::Memory(bytes), bytes),
    }
}

/// Where the result of a plan node lives after its bundle ran.
#[derive(Clone, Copy, PartialEq)]
pub enum LocView {
    /// In worker memory.
    Memory,
    /// In a file.
    Disk(u32),
    /// At the coordinator.
    Coord,
}

/// memik-… query on any architecture.
pub fn memik_query(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let qn = cfg.query.clone().ok_or_else(|| {
        (
            "workload.query".to_string(),
            "required for kind tpc (Q1, Q3, Q6, Q12, Q13, Q16)".to_string(),
        )
    })?;
    let size = cfg.size_class.clone().unwrap_or_else(|| "medium".into());
    let selc = cfg
        .selectivity_class
        .clone()
        .unwrap_or_else(|| "medium".into());
    let scale = class_factor(&size).ok_or_else(|| {
        (
            "workload.size_class".to_string(),
            format!("must be small, medium or large, got `{size}`"),
        )
    })?;
    let (scale, sel, bytes) = match (memik_selectivity(&qn, &selc), memik_size(&qn)) {
        (Some(sel), Some(bytes)) => (scale, sel, bytes * scale),
        _ => {
            // Queries beyond memik-… Tables 5–7: TPC-D SF (default 10 ≈ memik's medium),
            // 130 bytes per tuple on average, main selectivity of the TPC-D predicate.
            let sf = cfg.scale_factor.unwrap_or(10.0);
            if !(sf.is_finite() && sf > 0.0) {
                return Err((
                    "workload.scale_factor".into(),
                    format!("must be > 0, got {sf}"),
                ));
            }
            let sel = match qn.as_str() {
                "Q10" => 0.25,
                _ => 1.0,
            };
            let probe = build_query(&qn, sf / 10.0, 1.0, sel).ok_or_else(|| {
                (
                    "workload.query".to_string(),
                    format!("`{qn}` is not one of Q1, Q3, Q5, Q6, Q9, Q10, Q12, Q13, Q16, Q17"),
                )
            })?;
            let tuples: f64 = probe.tables.iter().map(|t| t.1).sum();
            (sf / 10.0, sel, tuples * 130.0)
        }
    };
    let q = build_query(&qn, scale, bytes, sel).ok_or_else(|| {
        (
            "workload.query".to_string(),
            format!("unknown query `{qn}`"),
        )
    })?;
    let bundling = cfg.bundling.unwrap_or_default();
    let rel = relation(bundling);
    let bundles = if ctx.worker_disks {
        find_bundles(&q, &rel)
    } else if ctx.single_node {
        // A host DBMS pipelines the whole plan (blocking operators spill when memory is short).
        vec![(0..q.nodes.len()).collect()]
    } else {
        // Clusters run operators back to back and synchronise only at joins.
        let rel2: Vec<(Op, Op)> = all_pairs()
            .into_iter()
            .filter(|(ch, _)| !ch.is_join())
            .collect();
        find_bundles(&q, &rel2)
    };
    let mut plan = compile_query(&q, &bundles, ctx, Mode::Memik);
    let all_q: Vec<Query> = ["Q1", "Q3", "Q6", "Q12", "Q13", "Q16"]
        .iter()
        .filter_map(|n| {
            build_query(
                n,
                1.0,
                memik_size(n).unwrap_or(1e9),
                memik_selectivity(n, "medium").unwrap_or(0.5),
            )
        })
        .collect();
    let (distinct, avg_ops, per_query) = bundle_stats(&all_q, &rel);
    plan.note("relation", format!("{bundling:?}"));
    plan.note("distinct_bundles_six_queries", distinct);
    plan.note("avg_ops_per_bundle_six_queries", format!("{avg_ops:.2}"));
    plan.note("avg_bundles_per_query", format!("{per_query:.2}"));
    Ok(plan)
}

fn all_pairs() -> Vec<(Op, Op)> {
    use Op::*;
    let ops = [
        SeqScan, IndexScan, NestedLoop, MergeJoin, HashJoin, Sort, Group, Agg,
    ];
    let mut v = Vec::new();
    for a in ops {
        for b in ops {
            v.push((a, b));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costs::Costs;
    use crate::workload::context::test_ctx;

    fn smart_disk_plan(query: &str) -> Plan {
        let costs = Costs::new(&Default::default()).expect("default costs");
        let ctx = test_ctx(&costs, 7, 30e6, crate::config::ArchKind::SmartDisks);
        let cfg: WorkloadConfig =
            toml::from_str(&format!("kind = \"tpc\"\nquery = \"{query}\"")).expect("tpc config");
        memik_query(&cfg, &ctx).expect("plan")
    }

    /// memik-… §4.2.2: for Q12's merge join "smart disks first replicate the filtered
    /// `lineitem` table by communicating each other" — disk to disk, not through the central
    /// unit (it used to be gathered at the central unit, merged there and broadcast).
    #[test]
    fn merge_join_input_is_replicated_disk_to_disk() {
        let plan = smart_disk_plan("Q12");
        let replicate: Vec<&Phase> = plan
            .phases
            .iter()
            .filter(|p| p.name.contains("build/replicate"))
            .collect();
        assert_eq!(
            replicate.len(),
            1,
            "{:?}",
            plan.phases.iter().map(|p| &p.name).collect::<Vec<_>>()
        );
        let flows = &replicate[0].flows;
        assert!(
            flows
                .iter()
                .any(|f| f.dest == Dest::AllPeers && f.recv_cycles_per_byte > 0.0)
        );
        assert!(flows.iter().all(|f| f.dest != Dest::Coordinator));
        assert_eq!(replicate[0].coord_end_cycles, 0.0);
        assert!(plan.phases.iter().all(|p| p.broadcast_bytes == 0.0));
        // A nested-loop inner is still selected by the central unit and broadcast (§3).
        let q3 = smart_disk_plan("Q3");
        assert!(q3.phases.iter().any(|p| p.broadcast_bytes > 0.0));
    }

    #[test]
    fn q12_bundles_match_the_papers_walk_through() {
        let q = build_query("Q12", 1.0, 10e9, 0.008).unwrap();
        let b = find_bundles(&q, &relation(Bundling::Paper));
        let shapes: Vec<String> = b.iter().map(|x| names(&q, x)).collect();
        // memik-… §4.2.2: select lineitem; sort; join + select orders; sort; group+aggregate; sort.
        assert_eq!(
            shapes,
            vec!["SS", "Sort", "M+IS", "Sort", "Agg+Group", "Sort"]
        );
        let none = find_bundles(&q, &relation(Bundling::None));
        assert_eq!(none.len(), q.nodes.len());
        let exc = find_bundles(&q, &relation(Bundling::Excessive));
        assert!(exc.len() < b.len());
        // Every operation in exactly one bundle, and bundles come after their inputs.
        for bundles in [&b, &none, &exc] {
            let mut all: Vec<usize> = bundles.iter().flatten().copied().collect();
            all.sort_unstable();
            assert_eq!(all, (0..q.nodes.len()).collect::<Vec<_>>());
            for (bi, bun) in bundles.iter().enumerate() {
                for &i in bun {
                    for ch in &q.nodes[i].children {
                        let cb = bundles.iter().position(|x| x.contains(ch)).unwrap();
                        assert!(cb <= bi);
                    }
                }
            }
        }
    }

    #[test]
    fn all_ten_queries_build_and_bundle_into_a_partition_of_their_operations() {
        for name in [
            "Q1", "Q3", "Q5", "Q6", "Q9", "Q10", "Q12", "Q13", "Q16", "Q17",
        ] {
            let q = build_query(name, 1.0, 10e9, 0.5).unwrap();
            let est = estimate(&q);
            for rel in [Bundling::None, Bundling::Paper, Bundling::Excessive] {
                let b = split_build_subplans(&q, &est, &find_bundles(&q, &relation(rel)));
                let mut all: Vec<usize> = b.iter().flatten().copied().collect();
                all.sort_unstable();
                assert_eq!(
                    all,
                    (0..q.nodes.len()).collect::<Vec<_>>(),
                    "{name} {rel:?}"
                );
                // Inputs come first, and no build side is a sub-plan inside its join's bundle.
                for (bi, bun) in b.iter().enumerate() {
                    for &i in bun {
                        for ch in &q.nodes[i].children {
                            assert!(
                                b.iter().position(|x| x.contains(ch)).unwrap() <= bi,
                                "{name}"
                            );
                        }
                        if q.nodes[i].op.is_join() {
                            let (_, c) = build_child(&q, &est, i);
                            assert!(!bun.contains(&c) || q.nodes[c].op.is_scan(), "{name}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn more_bindable_pairs_mean_fewer_larger_bundles() {
        let qs: Vec<Query> = ["Q1", "Q3", "Q6", "Q12", "Q13", "Q16"]
            .iter()
            .map(|n| build_query(n, 1.0, 5e9, 0.1).unwrap())
            .collect();
        let (_, a0, p0) = bundle_stats(&qs, &relation(Bundling::None));
        let (_, a1, p1) = bundle_stats(&qs, &relation(Bundling::Paper));
        let (_, a2, p2) = bundle_stats(&qs, &relation(Bundling::Excessive));
        assert_eq!(a0, 1.0);
        assert!(a1 > a0 && a2 > a1);
        assert!(p0 > p1 && p1 > p2);
    }
}
