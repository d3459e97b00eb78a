//! The host's bounds on SQL text, checked before DataFusion plans it ([`adisk_core::limits`]).
//!
//! sqlparser bounds its recursive descent, but parses a chain of infix operators (`a + b + …`,
//! `x OR y OR …`, `e::int::int…`) in a loop into a left-deep tree as deep as the chain is
//! long; DataFusion then clones, rewrites and prints that tree recursively on the caller's
//! thread, and 2 000 terms overflowed the stack (the process aborted with no message). Here
//! the text is parsed once, its expression depth measured by a visitor that stops at the
//! limit, and a tree past the limit is taken apart in bounded slices before it is dropped.
use adisk_core::limits::{LimitExceeded, MAX_SQL_BYTES, MAX_SQL_EXPR_DEPTH};
use datafusion::sql::parser::{CopyToSource, DFParser, Statement};
use datafusion::sql::sqlparser::ast::{Expr, Value, Visit, VisitMut, Visitor, VisitorMut};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use std::ops::ControlFlow;

/// Checks `sql` against [`MAX_SQL_BYTES`] and [`MAX_SQL_EXPR_DEPTH`]. Text that does not parse
/// passes: DataFusion reports the syntax error when it parses the same text (parsing alone is
/// bounded).
///
/// # Errors
/// [`LimitExceeded`] naming the limit.
pub fn check(sql: &str) -> Result<(), LimitExceeded> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(LimitExceeded {
            limit: "MAX_SQL_BYTES",
            what: "the SQL text's length in bytes".into(),
            max: MAX_SQL_BYTES,
            found: sql.len(),
            at_least: false,
        });
    }
    let Ok(statements) = DFParser::parse_sql_with_dialect(sql, &GenericDialect {}) else {
        return Ok(());
    };
    for statement in statements {
        let mut roots = Vec::new();
        collect_roots(statement, &mut roots);
        // Every root is measured (and a deep one taken apart) even after the first refusal.
        let results: Vec<_> = roots
            .into_iter()
            .map(|root| match root {
                Root::Statement(mut s) => check_node(s.as_mut(), "an expression in the SQL text"),
                Root::Query(mut q) => check_node(q.as_mut(), "an expression in the SQL text"),
            })
            .collect();
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
    }
    Ok(())
}

/// Checks one parsed SQL node (a statement, a query, an expression) against
/// [`MAX_SQL_EXPR_DEPTH`]; a node past the limit is taken apart in bounded slices so dropping
/// it does not recurse past the limit either.
///
/// # Errors
/// [`LimitExceeded`] naming the limit and `what`.
pub fn check_node<T: Visit + VisitMut>(node: &mut T, what: &str) -> Result<(), LimitExceeded> {
    let mut depth = Depth::default();
    if Visit::visit(&*node, &mut depth).is_continue() {
        return Ok(());
    }
    dismantle(node);
    Err(LimitExceeded {
        limit: "MAX_SQL_EXPR_DEPTH",
        what: format!("the depth of {what}"),
        max: MAX_SQL_EXPR_DEPTH,
        found: depth.deepest,
        at_least: true,
    })
}

/// The sqlparser statements inside a DataFusion statement (`EXPLAIN` unwrapped in a loop).
fn collect_roots(mut statement: Statement, roots: &mut Vec<Root>) {
    loop {
        match statement {
            Statement::Statement(s) => roots.push(Root::Statement(s)),
            Statement::Explain(e) => {
                statement = *e.statement;
                continue;
            }
            Statement::CopyTo(c) => {
                if let CopyToSource::Query(q) = c.source {
                    roots.push(Root::Query(q));
                }
            }
            Statement::CreateExternalTable(_) | Statement::Reset(_) => {}
        }
        return;
    }
}

/// Something the visitors walk.
enum Root {
    Statement(Box<datafusion::sql::sqlparser::ast::Statement>),
    Query(Box<datafusion::sql::sqlparser::ast::Query>),
}

/// Expression nesting, stopping past [`MAX_SQL_EXPR_DEPTH`] (so the visit itself recurses at
/// most that deep).
#[derive(Default)]
struct Depth {
    current: usize,
    deepest: usize,
}

impl Visitor for Depth {
    type Break = ();
    fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.current += 1;
        self.deepest = self.deepest.max(self.current);
        if self.current > MAX_SQL_EXPR_DEPTH {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.current -= 1;
        ControlFlow::Continue(())
    }
}

/// Expressions nested deeper than this are cut off as a tree is taken apart.
const SLICE_DEPTH: usize = 64;

/// Cuts every expression at depth [`SLICE_DEPTH`] out of the tree (leaving `NULL`), keeping
/// the pieces to take apart next.
#[derive(Default)]
struct Slicer {
    current: usize,
    pieces: Vec<Expr>,
}

impl VisitorMut for Slicer {
    type Break = ();
    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        self.current += 1;
        if self.current >= SLICE_DEPTH {
            self.pieces
                .push(std::mem::replace(expr, Expr::Value(Value::Null.into())));
        }
        ControlFlow::Continue(())
    }
    fn post_visit_expr(&mut self, _: &mut Expr) -> ControlFlow<()> {
        self.current -= 1;
        ControlFlow::Continue(())
    }
}

/// Takes a tree of any depth apart so that no drop recurses more than [`SLICE_DEPTH`]
/// expressions deep.
fn dismantle<T: VisitMut>(root: &mut T) {
    let mut slicer = Slicer::default();
    let _ = VisitMut::visit(root, &mut slicer);
    while let Some(mut piece) = slicer.pieces.pop() {
        slicer.current = 0;
        let _ = VisitMut::visit(&mut piece, &mut slicer);
        drop(piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_sql_depth_without_overflowing() {
        let chain = |n: usize| vec!["x"; n].join(" + ");
        assert!(check(&format!("select {} from t", chain(100))).is_ok());
        assert!(
            check(&format!(
                "explain select * from t where {} > 0",
                chain(MAX_SQL_EXPR_DEPTH - 1)
            ))
            .is_ok()
        );
        // 200 000 terms: measured only up to the limit, then taken apart in slices.
        let e = check(&format!("select * from t where {} > 0", chain(200_000))).unwrap_err();
        assert_eq!(e.limit, "MAX_SQL_EXPR_DEPTH");
        let e = check(&format!(
            "explain select * from t where {} > 0",
            chain(MAX_SQL_EXPR_DEPTH + 1)
        ))
        .unwrap_err();
        assert_eq!(e.limit, "MAX_SQL_EXPR_DEPTH");
        // Deep nesting inside a subquery counts as well.
        assert!(check(&format!("select (select {} from u) from t", chain(300))).is_err());
        // Syntax errors are left to DataFusion.
        assert!(check("selec 1").is_ok());
    }
}
