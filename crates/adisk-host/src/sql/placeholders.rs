//! Statement parameters: `?` (JDBC's and most drivers' placeholder) and `$1`, `$2`, …
//! (DataFusion's), one way in for every SQL text the engine plans.
//!
//! ```text
//! SQL text ─► parse (the session's dialect) ─► number: each `?` becomes `$k`, k its rank in
//!             the text (the AST is rewritten; text is never spliced, so a `?` in a string
//!             literal or a quoted identifier stays as it is)
//!          ─► check: one style per statement; as many values bound as the statement takes
//!          ─► DataFusion plans the statement
//! ```
//!
//! Parameters are bound by position, so a statement takes as many values as it has `?`, or as
//! the highest `$n` it names (`$2` alone takes two). A `PREPARE` statement takes its values
//! at `EXECUTE` and is not counted.
use crate::{HostError, Result};
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion::sql::parser::{CopyToSource, Statement};
use datafusion::sql::sqlparser::ast::{
    Statement as SqlStatement, Value, ValueWithSpan, VisitMut, VisitorMut,
};
use std::ops::ControlFlow;

/// Why a statement's placeholders cannot be bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    /// `?` and numbered placeholders in one statement.
    #[error(
        "the statement mixes `?` and numbered placeholders (`{numbered}`): use `?` throughout or `$1`, `$2`, … throughout"
    )]
    Mixed {
        /// The first numbered placeholder.
        numbered: String,
    },
    /// A placeholder that is neither `?` nor `$n` with n ≥ 1.
    #[error(
        "unsupported placeholder `{placeholder}`: parameters are bound by position, as `?` or `$1`, `$2`, …"
    )]
    Unsupported {
        /// The placeholder as written.
        placeholder: String,
    },
    /// More or fewer values bound than the statement takes.
    #[error("the statement takes {expected} parameter value(s) ({style}) but {bound} were bound")]
    Count {
        /// Values the statement takes.
        expected: usize,
        /// Values bound.
        bound: usize,
        /// How the statement numbers them, for the message.
        style: &'static str,
    },
}

impl From<PlaceholderError> for HostError {
    fn from(e: PlaceholderError) -> Self {
        HostError::Invalid(e.to_string())
    }
}

/// A statement's parameters, after [`number`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parameters {
    /// Values the statement takes (0 for `PREPARE`, whose values come with `EXECUTE`).
    pub count: usize,
    /// Whether it was written with `?`.
    pub positional: bool,
}

impl Parameters {
    /// Checks that `bound` values fit.
    ///
    /// # Errors
    /// [`PlaceholderError::Count`] when there are more or fewer.
    pub fn check(&self, bound: usize) -> std::result::Result<(), PlaceholderError> {
        if bound == self.count {
            return Ok(());
        }
        Err(PlaceholderError::Count {
            expected: self.count,
            bound,
            style: match (self.count, self.positional) {
                (0, _) => "it has no placeholders",
                (_, true) => "one per `?`",
                (_, false) => "up to its highest `$n`",
            },
        })
    }
}

/// Plans `sql` (already checked against the SQL limits) in `ctx` as [`SessionContext::sql`]
/// does, with its `?` numbered first. With `values`, the count of values to be bound is
/// checked against the statement.
///
/// # Errors
/// Syntax and planning errors; [`PlaceholderError`] as [`HostError::Invalid`].
pub async fn plan(ctx: &SessionContext, sql: &str, values: Option<usize>) -> Result<DataFrame> {
    let state = ctx.state();
    let dialect = state.config().options().sql_parser.dialect;
    let mut statement = state
        .sql_to_statement(sql, &dialect)
        .map_err(super::error::plan_err("planning the query"))?;
    let parameters = number(&mut statement)?;
    if let Some(bound) = values {
        parameters.check(bound)?;
    }
    let plan = state
        .statement_to_plan(statement)
        .await
        .map_err(super::error::plan_err("planning the query"))?;
    ctx.execute_logical_plan(plan)
        .await
        .map_err(super::error::plan_err("planning the query"))
}

/// Rewrites every `?` of `statement` to `$k`, k its rank in the text (1 first), and returns
/// the values the statement takes.
///
/// # Errors
/// [`PlaceholderError::Mixed`] for `?` with `$n` in one statement,
/// [`PlaceholderError::Unsupported`] for any other placeholder.
pub fn number(statement: &mut Statement) -> std::result::Result<Parameters, PlaceholderError> {
    let mut found = Found::default();
    let _ = visit_sql(statement, &mut found);
    if let Some(placeholder) = found.unsupported {
        return Err(PlaceholderError::Unsupported { placeholder });
    }
    let positional = !found.questions.is_empty();
    if let (true, Some(numbered)) = (positional, found.first_numbered) {
        return Err(PlaceholderError::Mixed { numbered });
    }
    // Visiting order follows the AST's fields, which is not always the text's (`OFFSET ?
    // LIMIT ?`): rank by where each `?` starts, visiting order breaking ties.
    let mut order: Vec<usize> = (0..found.questions.len()).collect();
    order.sort_by_key(|&i| (found.questions[i], i));
    let mut ranks = vec![0; order.len()];
    for (rank, &i) in order.iter().enumerate() {
        ranks[i] = rank + 1;
    }
    let _ = visit_sql(statement, &mut Renumber { ranks, next: 0 });
    Ok(Parameters {
        count: match found.prepare {
            true => 0,
            false if positional => found.questions.len(),
            false => found.highest,
        },
        positional,
    })
}

/// Visits the sqlparser nodes inside a DataFusion statement (`EXPLAIN` unwrapped in a loop).
fn visit_sql<V: VisitorMut>(statement: &mut Statement, visitor: &mut V) -> ControlFlow<V::Break> {
    let mut current = statement;
    loop {
        return match current {
            Statement::Statement(s) => s.visit(visitor),
            Statement::Explain(e) => {
                current = e.statement.as_mut();
                continue;
            }
            Statement::CopyTo(c) => match &mut c.source {
                CopyToSource::Query(q) => q.visit(visitor),
                CopyToSource::Relation(_) => ControlFlow::Continue(()),
            },
            Statement::CreateExternalTable(_) | Statement::Reset(_) => ControlFlow::Continue(()),
        };
    }
}

/// What [`number`] finds in one visit.
#[derive(Default)]
struct Found {
    /// Where each `?` starts (line, column), in visiting order.
    questions: Vec<(u64, u64)>,
    /// The first `$n` (or `?n`) met.
    first_numbered: Option<String>,
    /// The highest n of `$n`.
    highest: usize,
    /// The first placeholder of another kind.
    unsupported: Option<String>,
    /// A `PREPARE` statement was met.
    prepare: bool,
}

impl VisitorMut for Found {
    type Break = ();
    fn pre_visit_statement(&mut self, statement: &mut SqlStatement) -> ControlFlow<()> {
        self.prepare |= matches!(statement, SqlStatement::Prepare { .. });
        ControlFlow::Continue(())
    }
    fn pre_visit_value(&mut self, value: &mut ValueWithSpan) -> ControlFlow<()> {
        let Value::Placeholder(p) = &value.value else {
            return ControlFlow::Continue(());
        };
        if p == "?" {
            let start = value.span.start;
            self.questions.push((start.line, start.column));
            return ControlFlow::Continue(());
        }
        match numbered(p) {
            Some(n) => {
                self.highest = self.highest.max(n);
                self.first_numbered.get_or_insert_with(|| p.clone());
            }
            None => {
                self.unsupported.get_or_insert_with(|| p.clone());
            }
        }
        ControlFlow::Continue(())
    }
}

/// n of a numbered placeholder `$n` or `?n` (n ≥ 1).
fn numbered(placeholder: &str) -> Option<usize> {
    let digits = placeholder
        .strip_prefix('$')
        .or_else(|| placeholder.strip_prefix('?'))?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&n| n >= 1)
}

/// Replaces each `?` with `$k`, its rank given in visiting order, and `?n` with `$n`.
struct Renumber {
    ranks: Vec<usize>,
    next: usize,
}

impl VisitorMut for Renumber {
    type Break = ();
    fn pre_visit_value(&mut self, value: &mut ValueWithSpan) -> ControlFlow<()> {
        let Value::Placeholder(p) = &mut value.value else {
            return ControlFlow::Continue(());
        };
        if p == "?" {
            let rank = self.ranks.get(self.next).copied().unwrap_or(self.next + 1);
            self.next += 1;
            *p = format!("${rank}");
        } else if let Some(digits) = p.strip_prefix('?') {
            *p = format!("${digits}");
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;
    use datafusion::sql::sqlparser::dialect::GenericDialect;

    /// `sql` numbered: the statement printed back, and what it takes.
    fn numbered_sql(sql: &str) -> std::result::Result<(String, Parameters), PlaceholderError> {
        let mut statements = DFParser::parse_sql_with_dialect(sql, &GenericDialect {}).unwrap();
        let mut statement = statements.pop_front().unwrap();
        let parameters = number(&mut statement)?;
        Ok((statement.to_string(), parameters))
    }

    fn takes(count: usize, positional: bool) -> Parameters {
        Parameters { count, positional }
    }

    #[test]
    fn question_marks_become_numbered_parameters_in_text_order() {
        let (text, p) =
            numbered_sql("SELECT count(*) FROM orders WHERE o_custkey = ? AND o_orderstatus = ?")
                .unwrap();
        assert_eq!(
            text,
            "SELECT count(*) FROM orders WHERE o_custkey = $1 AND o_orderstatus = $2"
        );
        assert_eq!(p, takes(2, true));
        // In a subquery, a CASE and a join condition, still in the order written.
        let (text, p) = numbered_sql(
            "SELECT CASE WHEN a > ? THEN ? ELSE b END FROM t JOIN u ON t.k = u.k + ? \
             WHERE a IN (SELECT x FROM v WHERE y < ?)",
        )
        .unwrap();
        assert_eq!(
            text,
            "SELECT CASE WHEN a > $1 THEN $2 ELSE b END FROM t JOIN u ON t.k = u.k + $3 \
             WHERE a IN (SELECT x FROM v WHERE y < $4)"
        );
        assert_eq!(p.count, 4);
        // The AST keeps LIMIT before OFFSET; the text's order decides.
        let (text, _) = numbered_sql("SELECT a FROM t OFFSET ? LIMIT ?").unwrap();
        assert!(
            text.contains("LIMIT $2") && text.contains("OFFSET $1"),
            "{text}"
        );
        // Under EXPLAIN too.
        let (text, p) = numbered_sql("EXPLAIN SELECT a FROM t WHERE a = ?").unwrap();
        assert!(text.ends_with("WHERE a = $1"), "{text}");
        assert_eq!(p, takes(1, true));
    }

    #[test]
    fn question_marks_in_literals_and_quoted_identifiers_stay() {
        let (text, p) =
            numbered_sql(r#"SELECT '?', "what?" FROM t WHERE c = ? AND d = 'a ? b' AND e = ?"#)
                .unwrap();
        assert_eq!(
            text,
            r#"SELECT '?', "what?" FROM t WHERE c = $1 AND d = 'a ? b' AND e = $2"#
        );
        assert_eq!(p, takes(2, true));
        let (text, p) = numbered_sql("SELECT 'is it?' AS \"q?\" FROM t").unwrap();
        assert_eq!(text, "SELECT 'is it?' AS \"q?\" FROM t");
        assert_eq!(p, takes(0, false));
    }

    #[test]
    fn numbered_parameters_are_counted_by_the_highest() {
        let (text, p) = numbered_sql("SELECT a FROM t WHERE a = $2 OR b = $1 OR c = $2").unwrap();
        assert_eq!(text, "SELECT a FROM t WHERE a = $2 OR b = $1 OR c = $2");
        assert_eq!(p, takes(2, false));
        assert_eq!(numbered_sql("SELECT $3").unwrap().1, takes(3, false));
        // `?n` is numbered like `$n`.
        let (text, p) = numbered_sql("SELECT a FROM t WHERE a = ?2 OR b = ?1").unwrap();
        assert_eq!(text, "SELECT a FROM t WHERE a = $2 OR b = $1");
        assert_eq!(p, takes(2, false));
        // A PREPARE statement's values come with EXECUTE.
        let (text, p) = numbered_sql("PREPARE s AS SELECT a FROM t WHERE a = ?").unwrap();
        assert!(text.ends_with("WHERE a = $1"), "{text}");
        assert_eq!(p.count, 0);
    }

    #[test]
    fn a_mix_and_other_placeholders_are_refused() {
        let mixed = numbered_sql("SELECT a FROM t WHERE a = ? AND b = $2").unwrap_err();
        assert_eq!(
            mixed,
            PlaceholderError::Mixed {
                numbered: "$2".into()
            }
        );
        assert!(
            mixed.to_string().contains("mixes `?` and numbered"),
            "{mixed}"
        );
        for bad in ["$0", "$name"] {
            let e = numbered_sql(&format!("SELECT a FROM t WHERE a = {bad}")).unwrap_err();
            assert_eq!(
                e,
                PlaceholderError::Unsupported {
                    placeholder: bad.into()
                }
            );
        }
    }

    #[test]
    fn bound_values_must_match_the_count() {
        assert!(takes(2, true).check(2).is_ok());
        assert!(takes(0, false).check(0).is_ok());
        let few = takes(2, true).check(1).unwrap_err();
        assert_eq!(
            few.to_string(),
            "the statement takes 2 parameter value(s) (one per `?`) but 1 were bound"
        );
        let many = takes(1, false).check(3).unwrap_err();
        assert!(matches!(
            many,
            PlaceholderError::Count {
                expected: 1,
                bound: 3,
                ..
            }
        ));
        let none = takes(0, false).check(1).unwrap_err();
        assert!(none.to_string().contains("no placeholders"), "{none}");
        assert!(matches!(HostError::from(few), HostError::Invalid(_)));
    }
}
