//! `LIKE` patterns of several `%`-separated pieces matched piece by piece (issue 36: per-row
//! cost).
//!
//! arrow's `like` kernel matches a pattern with at most a leading and a trailing `%` by
//! `starts_with`, `ends_with` or a substring search, and every other pattern with a regular
//! expression: `o_comment NOT LIKE '%special%requests%'` (TPC-H Q13) ran arrow's regex once
//! per order, 228 ms of the four disks' CPU at SF 1 for 1.5 M comments. Without `_` or an
//! escape, such a pattern is a prefix, pieces in order and a suffix, and the leftmost match
//! of each piece after the one before is the match if any exists, so [`PiecesLike`] searches
//! them one after another with `memchr`'s substring finder.
//!
//! [`rewrite`] puts it in place of DataFusion's `LikeExpr` where the pattern is such a literal
//! and the input a string column; everything else keeps DataFusion's expression, and so does
//! any input it is not planned for (it evaluates the original then).
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{DataType, FieldRef, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{LikeExpr, Literal};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use memchr::memmem::Finder;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Whether such patterns are matched piece by piece (`ADISK_LIKE_PIECES=off`: no, for
/// measuring what it gains).
pub fn enabled() -> bool {
    std::env::var("ADISK_LIKE_PIECES").map_or(true, |v| v != "off")
}

/// A pattern split at its `%`s: what the value starts with, the pieces it contains in order,
/// what it ends with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pieces {
    prefix: String,
    middle: Vec<String>,
    suffix: String,
}

impl Pieces {
    /// The pieces of `pattern`, or None if it has `_` or `\` (they need more than substring
    /// search) or at most one piece between `%`s, which arrow matches without a regex.
    fn of(pattern: &str) -> Option<Pieces> {
        if pattern.contains(['_', '\\']) {
            return None;
        }
        let parts: Vec<&str> = pattern.split('%').collect();
        let [prefix, middle @ .., suffix] = parts.as_slice() else {
            return None;
        };
        let middle: Vec<String> = middle
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| p.to_string())
            .collect();
        let pieces =
            middle.len() + usize::from(!prefix.is_empty()) + usize::from(!suffix.is_empty());
        (pieces >= 2).then(|| Pieces {
            prefix: prefix.to_string(),
            middle,
            suffix: suffix.to_string(),
        })
    }
}

/// Matches values against one [`Pieces`] pattern (its finders built once, with the
/// expression).
#[derive(Debug)]
struct Matcher {
    pieces: Pieces,
    finders: Vec<Finder<'static>>,
}

impl Matcher {
    fn new(pieces: Pieces) -> Self {
        let finders = pieces
            .middle
            .iter()
            .map(|p| Finder::new(p.as_bytes()).into_owned())
            .collect();
        Matcher { pieces, finders }
    }

    /// Whether `value` matches: the prefix at its start, each piece after the one before
    /// (leftmost), and the suffix at its end after them all.
    fn matches(&self, value: &str) -> bool {
        let bytes = value.as_bytes();
        let (prefix, suffix) = (self.pieces.prefix.as_bytes(), self.pieces.suffix.as_bytes());
        if bytes.len() < prefix.len() + suffix.len()
            || !bytes.starts_with(prefix)
            || !bytes.ends_with(suffix)
        {
            return false;
        }
        let end = bytes.len() - suffix.len();
        let mut at = prefix.len();
        for finder in &self.finders {
            match finder.find(&bytes[at..end]) {
                Some(found) => at += found + finder.needle().len(),
                None => return false,
            }
        }
        true
    }
}

/// `expr [NOT] LIKE pattern` for a pattern of [`Pieces`] (case-sensitive).
#[derive(Debug)]
pub struct PiecesLike {
    expr: Arc<dyn PhysicalExpr>,
    matcher: Matcher,
    negated: bool,
    /// DataFusion's expression, evaluated for inputs other than string arrays.
    original: Arc<dyn PhysicalExpr>,
}

impl PartialEq for PiecesLike {
    fn eq(&self, other: &Self) -> bool {
        self.original.as_ref() == other.original.as_ref()
    }
}

impl Eq for PiecesLike {}

impl Hash for PiecesLike {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.original.hash(state);
    }
}

impl std::fmt::Display for PiecesLike {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.original, f)
    }
}

impl PiecesLike {
    /// `like` as a [`PiecesLike`] if its pattern is a string literal of pieces and it is
    /// case-sensitive.
    fn of(like: &LikeExpr, original: &Arc<dyn PhysicalExpr>) -> Option<PiecesLike> {
        if like.case_insensitive() {
            return None;
        }
        let literal = like.pattern().downcast_ref::<Literal>()?;
        let pattern = match literal.value() {
            ScalarValue::Utf8(Some(p))
            | ScalarValue::Utf8View(Some(p))
            | ScalarValue::LargeUtf8(Some(p)) => p,
            _ => return None,
        };
        Some(PiecesLike {
            expr: like.expr().clone(),
            matcher: Matcher::new(Pieces::of(pattern.as_str())?),
            negated: like.negated(),
            original: original.clone(),
        })
    }

    /// The match of every value of a string array, or None for another type.
    fn over(&self, values: &ArrayRef) -> Option<BooleanArray> {
        let test = |v: &str| self.matcher.matches(v) != self.negated;
        let result: BooleanArray = match values.data_type() {
            DataType::Utf8View => values
                .as_string_view()
                .iter()
                .map(|v| v.map(test))
                .collect(),
            DataType::Utf8 => values
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(test))
                .collect(),
            DataType::LargeUtf8 => values
                .as_string::<i64>()
                .iter()
                .map(|v| v.map(test))
                .collect(),
            _ => return None,
        };
        Some(result)
    }
}

impl PhysicalExpr for PiecesLike {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.original.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.original.nullable(input_schema)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.original.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        match self.expr.evaluate(batch)? {
            ColumnarValue::Array(values) => match self.over(&values) {
                Some(result) => Ok(ColumnarValue::Array(Arc::new(result))),
                None => self.original.evaluate(batch),
            },
            ColumnarValue::Scalar(_) => self.original.evaluate(batch),
        }
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.original.children()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        // Rewriters see DataFusion's expression again.
        self.original.clone().with_new_children(children)
    }

    fn fmt_sql(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.original.fmt_sql(f)
    }
}

/// `expr` with every `LIKE` of a [`Pieces`] pattern matched piece by piece.
pub fn rewrite(expr: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
    if !enabled() {
        return expr;
    }
    let rewritten = expr.clone().transform_up(|e| {
        let Some(like) = e.downcast_ref::<LikeExpr>() else {
            return Ok(Transformed::no(e));
        };
        Ok(match PiecesLike::of(like, &e) {
            Some(p) => Transformed::yes(Arc::new(p) as Arc<dyn PhysicalExpr>),
            None => Transformed::no(e),
        })
    });
    rewritten.map_or(expr, |t| t.data)
}

/// `plan` with its filters' `LIKE`s of [`Pieces`] patterns matched piece by piece.
pub fn like_plan(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if !enabled() {
        return Ok(plan);
    }
    plan.transform_up(|node| {
        let Some(f) = node.downcast_ref::<FilterExec>() else {
            return Ok(Transformed::no(node));
        };
        let predicate = rewrite(f.predicate().clone());
        if Arc::ptr_eq(&predicate, f.predicate()) {
            return Ok(Transformed::no(node));
        }
        let rebuilt = FilterExecBuilder::from(f)
            .with_predicate(predicate)
            .build()?;
        Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{StringArray, StringViewArray};
    use arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{col, lit};

    /// The pieces' match against arrow's own `like` kernel on every value and pattern.
    #[test]
    fn pieces_match_as_arrows_like_does() {
        let values = [
            "",
            "special",
            "specialrequests",
            "special requests",
            "requests special",
            "a special b requests c",
            "special requestsrequests",
            "specialspecial",
            "ab",
            "abc",
            "aXbXc",
            "acb",
            "ééspecialérequestsé",
            "aXXa",
            "aa",
            "a",
        ];
        let patterns = [
            "%special%requests%",
            "special%requests",
            "%special%requests",
            "special%requests%",
            "a%b%c",
            "a%c",
            "a%a",
            "%a%%b%",
            "%é%é%",
            "ab%%c",
        ];
        let strings = StringArray::from(values.iter().map(|v| Some(*v)).collect::<Vec<_>>());
        for pattern in patterns {
            let pieces = Pieces::of(pattern).unwrap_or_else(|| panic!("{pattern}"));
            let matcher = Matcher::new(pieces);
            let expected = arrow::compute::kernels::comparison::like(
                &strings,
                &StringArray::new_scalar(pattern),
            )
            .unwrap();
            for (i, v) in values.iter().enumerate() {
                assert_eq!(
                    matcher.matches(v),
                    expected.value(i),
                    "{v:?} LIKE {pattern:?}"
                );
            }
        }
    }

    #[test]
    fn only_patterns_arrow_sends_to_a_regex_are_taken() {
        for pattern in [
            "abc", "abc%", "%abc", "%abc%", "a_c%d", "a\\%b%c", "%", "%%", "",
        ] {
            assert!(Pieces::of(pattern).is_none(), "{pattern:?}");
        }
        assert!(Pieces::of("%a%b%").is_some());
        assert!(Pieces::of("a%b").is_some());
    }

    /// The rewritten expression gives DataFusion's answers, NULLs and NOT included, over
    /// string views and plain strings.
    #[test]
    fn rewritten_expressions_equal_datafusions() {
        let rows = vec![
            Some("x special y requests z"),
            None,
            Some("requests then special"),
            Some(""),
        ];
        for array in [
            Arc::new(StringViewArray::from(rows.clone())) as ArrayRef,
            Arc::new(StringArray::from(rows.clone())) as ArrayRef,
        ] {
            let schema = Arc::new(Schema::new(vec![Field::new(
                "c",
                array.data_type().clone(),
                true,
            )]));
            let view = array.data_type() == &DataType::Utf8View;
            let pattern = |p: &str| match view {
                true => lit(ScalarValue::Utf8View(Some(p.into()))),
                false => lit(p),
            };
            let batch = RecordBatch::try_new(schema.clone(), vec![array]).unwrap();
            for negated in [false, true] {
                let original: Arc<dyn PhysicalExpr> = Arc::new(LikeExpr::new(
                    negated,
                    false,
                    col("c", &schema).unwrap(),
                    pattern("%special%requests%"),
                ));
                let rewritten = rewrite(original.clone());
                assert!(rewritten.downcast_ref::<PiecesLike>().is_some());
                let a = original.evaluate(&batch).unwrap().into_array(4).unwrap();
                let b = rewritten.evaluate(&batch).unwrap().into_array(4).unwrap();
                assert_eq!(a.as_ref(), b.as_ref(), "negated {negated}");
            }
            // Case-insensitive and `_` patterns stay DataFusion's.
            let ilike: Arc<dyn PhysicalExpr> = Arc::new(LikeExpr::new(
                false,
                true,
                col("c", &schema).unwrap(),
                pattern("%a%b%"),
            ));
            assert!(rewrite(ilike).downcast_ref::<LikeExpr>().is_some());
        }
    }
}
