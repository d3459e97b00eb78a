//! Bounds on the shape of what a process accepts from a user or a peer before any recursive
//! code runs over it: expressions and plan fragments a disk decodes, SQL text the host plans.
//!
//! DataFusion and sqlparser walk expression trees recursively (planning, printing, evaluating,
//! dropping), one stack frame or more per level. A tree deeper than the thread's stack allows
//! ends the process with a stack overflow — no error, no cleanup, every other job on the disk
//! lost. Each tree is therefore measured without recursion as soon as it exists and refused
//! with [`LimitExceeded`], which names the limit, when it is too deep or too wide.
//!
//! Where the trees come from and why they can be deep:
//! * a disk decodes `datafusion-proto` bytes; Protocol Buffers nesting is bounded by prost's
//!   recursion limit (100 messages), but a binary expression's operands travel as one flat
//!   list (`a + b + c + …`) that decoding folds into a left-deep tree as deep as the list is
//!   long;
//! * the host parses SQL; sqlparser bounds its recursive descent (50 levels), but parses
//!   chains of infix operators in a loop, again into a left-deep tree as deep as the chain.
//!
//! The values below were measured against a debug build (the slowest frames) on a 2 MiB
//! thread stack, the size of a tokio worker and a `spawn_blocking` thread, where a disk plans
//! and evaluates expressions; see `expression_depth_fits_a_worker_stack` in
//! `adisk-diskos/src/expr.rs`, which checks the margin.

/// Deepest expression tree a disk accepts (a leaf has depth 1).
///
/// Planning, printing and evaluating a left-deep `+` chain in a debug build overflows a 2 MiB
/// stack between depth 2 000 and 4 000 (measured); 512 keeps a factor of 4 below that
/// and is ten times what SQL at the host can produce ([`MAX_SQL_EXPR_DEPTH`] plus the casts
/// type coercion adds). TPC-H's deepest expression has depth 7; DuckDB's default
/// `max_expression_depth` is 1 000.
pub const MAX_EXPR_DEPTH: usize = 512;

/// Most nodes in one expression tree a disk accepts: a width bound (an `IN` list of this many
/// literals, a `CASE` with this many branches). Planning and evaluation cost grows with it;
/// the bytes are already capped by the Flight message size (64 MiB).
pub const MAX_EXPR_NODES: usize = 65_536;

/// Deepest plan fragment (operators on a path from root to leaf) a disk accepts. At the
/// `disks` level a stage is a whole piece of the query (joins over joins, aggregations,
/// sorts); TPC-H's deepest stage is far below this.
pub const MAX_PLAN_DEPTH: usize = 128;

/// Most operators in one plan fragment a disk accepts.
pub const MAX_PLAN_NODES: usize = 1024;

/// Deepest expression in SQL text the host plans (sqlparser's AST, a leaf has depth 1).
///
/// DataFusion plans on the caller's thread and guards only part of its recursion; measured,
/// the host's planning of a `+` chain overflows the 8 MiB main thread of a debug build near
/// depth 2 000. 256 is well below and far above hand-written SQL: TPC-H's deepest
/// expression has depth 9, a 100-way `OR` of comparisons depth 101.
pub const MAX_SQL_EXPR_DEPTH: usize = 256;

/// Longest SQL text the host plans, in bytes: bounds the work and memory of tokenizing and
/// parsing before any depth is known.
pub const MAX_SQL_BYTES: usize = 1 << 20;

/// A tree or text over one of the limits above.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} exceeds the limit {limit} = {max} (found {found}{more}); see adisk_core::limits", more = if *.at_least { " or more" } else { "" })]
pub struct LimitExceeded {
    /// The limit's name, e.g. `MAX_EXPR_DEPTH`.
    pub limit: &'static str,
    /// What was measured, e.g. `depth of a shipped expression`.
    pub what: String,
    /// The limit's value.
    pub max: usize,
    /// What was found (counting stops at the first value past the limit when
    /// `at_least`).
    pub found: usize,
    /// Counting stopped early: the real value is at least `found`.
    pub at_least: bool,
}

/// Depth and node count of a tree, measured by [`measure_tree`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeShape {
    /// Nodes on the longest root-to-leaf path (a single leaf: 1).
    pub depth: usize,
    /// Nodes in all.
    pub nodes: usize,
}

/// Measures a tree without recursion: `children(node, push)` must call `push` once per
/// direct child of `node` and must not itself descend. Stops as soon as the depth passes
/// `max_depth` or the node count passes `max_nodes` (the returned shape is then a lower
/// bound, just past the limit), so the work is bounded by the limits, not by the tree.
pub fn measure_tree<'a, T: ?Sized>(
    root: &'a T,
    max_depth: usize,
    max_nodes: usize,
    mut children: impl FnMut(&'a T, &mut dyn FnMut(&'a T)),
) -> TreeShape {
    let mut shape = TreeShape::default();
    let mut stack: Vec<(&'a T, usize)> = vec![(root, 1)];
    while let Some((node, depth)) = stack.pop() {
        shape.nodes += 1;
        shape.depth = shape.depth.max(depth);
        if shape.depth > max_depth || shape.nodes > max_nodes {
            break;
        }
        children(node, &mut |child| stack.push((child, depth + 1)));
    }
    shape
}

/// Checks a measured shape against a depth and a node limit, naming `what` and the limit.
///
/// # Errors
/// [`LimitExceeded`] for the first limit passed (depth before width).
pub fn check_shape(
    what: &str,
    shape: TreeShape,
    depth: (&'static str, usize),
    nodes: (&'static str, usize),
) -> Result<(), LimitExceeded> {
    if shape.depth > depth.1 {
        return Err(LimitExceeded {
            limit: depth.0,
            what: format!("depth of {what}"),
            max: depth.1,
            found: shape.depth,
            at_least: true,
        });
    }
    if shape.nodes > nodes.1 {
        return Err(LimitExceeded {
            limit: nodes.0,
            what: format!("node count of {what}"),
            max: nodes.1,
            found: shape.nodes,
            at_least: true,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree as child lists: node i's children.
    fn shape(children: &[Vec<usize>], max_depth: usize, max_nodes: usize) -> TreeShape {
        let nodes: Vec<usize> = (0..children.len()).collect();
        measure_tree(&nodes[0], max_depth, max_nodes, |n, push| {
            children[*n].iter().for_each(|c| push(&nodes[*c]))
        })
    }

    #[test]
    fn measures_depth_and_nodes_and_stops_past_a_limit() {
        // 0 -> 1 -> 2, 0 -> 3
        let tree = vec![vec![1, 3], vec![2], vec![], vec![]];
        assert_eq!(shape(&tree, 10, 10), TreeShape { depth: 3, nodes: 4 });
        // A chain of a million nodes is measured only up to the limit.
        let chain: Vec<Vec<usize>> = (0..1_000_000)
            .map(|i| {
                if i + 1 < 1_000_000 {
                    vec![i + 1]
                } else {
                    vec![]
                }
            })
            .collect();
        let s = shape(&chain, 100, usize::MAX);
        assert_eq!(s.depth, 101);
        let e = check_shape(
            "a chain",
            s,
            ("MAX_EXPR_DEPTH", 100),
            ("MAX_EXPR_NODES", 1000),
        )
        .unwrap_err();
        assert_eq!(e.limit, "MAX_EXPR_DEPTH");
        assert!(e.to_string().contains("MAX_EXPR_DEPTH = 100"), "{e}");
        let wide = vec![(1..5000).collect::<Vec<_>>()]
            .into_iter()
            .chain((1..5000).map(|_| vec![]))
            .collect::<Vec<_>>();
        let e =
            check_shape("a list", shape(&wide, 100, 1000), ("D", 100), ("N", 1000)).unwrap_err();
        assert_eq!(e.limit, "N");
    }
}
