//! How many rows a scan's filters keep: from the disks' distinct-value sketches and the
//! sample of rows every partition carries ([`adisk_core::sample`]), else a guess.
//!
//! The estimate sets a scan's `est_rows`, which `auto`'s cost model, the Bloom-filter
//! decisions and the joins' build sides are planned with. TPC-H Q20's `p_name LIKE 'forest%'`
//! keeps about 1 % of the parts; guessed at 25 %, its build side looked too large for a Bloom
//! filter to pay off.
use crate::client::cluster::TableEntry;
use arrow::array::{Array, BooleanArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::conjunction;
use datafusion::optimizer::analyzer::type_coercion::TypeCoercionRewriter;
use datafusion::physical_expr::create_physical_expr;

/// Selectivity assumed per top-level conjunct that is not an equality-type test on a column
/// with known distinct values (ranges, LIKE, expressions), and the floor of their product:
/// those conjuncts together pass `max(FLOOR, PER_CONJUNCT^k)` of the rows.
pub const PER_CONJUNCT_SELECTIVITY: f64 = 0.25;
/// See [`PER_CONJUNCT_SELECTIVITY`].
pub const SELECTIVITY_FLOOR: f64 = 0.01;

/// The column `e` reads, through casts.
fn column_of(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) => Some(c.name.as_str()),
        Expr::Cast(c) => column_of(&c.expr),
        Expr::TryCast(c) => column_of(&c.expr),
        _ => None,
    }
}

fn is_literal(e: &Expr) -> bool {
    match e {
        Expr::Literal(..) => true,
        Expr::Cast(c) => is_literal(&c.expr),
        Expr::TryCast(c) => is_literal(&c.expr),
        _ => false,
    }
}

/// Selectivity of one conjunct from distinct-value counts (System R's `1/NDV` for an
/// equality with a constant, `n/NDV` for an IN list of `n`), or `None` if it is not of that
/// kind or the column's distinct values are unknown.
fn equality_selectivity(e: &Expr, ndv: &dyn Fn(&str) -> Option<u64>) -> Option<f64> {
    use datafusion::logical_expr::{BinaryExpr, Operator};
    let per_value = |col: &Expr| column_of(col).and_then(ndv).map(|n| 1.0 / n.max(1) as f64);
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: op @ (Operator::Eq | Operator::NotEq),
            right,
        }) => {
            let p = if is_literal(right) {
                per_value(left)?
            } else if is_literal(left) {
                per_value(right)?
            } else {
                return None;
            };
            Some(if *op == Operator::Eq { p } else { 1.0 - p })
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => Some((equality_selectivity(left, ndv)? + equality_selectivity(right, ndv)?).min(1.0)),
        Expr::InList(l) if l.list.iter().all(is_literal) => {
            let p = (per_value(&l.expr)? * l.list.len() as f64).min(1.0);
            Some(if l.negated { 1.0 - p } else { p })
        }
        _ => None,
    }
}

/// The guess for a conjunct neither distinct values nor a sample can price: a negated pattern
/// or range keeps what the pattern would not, the complement of another conjunct's share
/// (TPC-H Q13's `o_comment NOT LIKE '%special%requests%'` keeps 99 % of the orders, Q16's
/// `p_type NOT LIKE 'MEDIUM POLISHED%'` 96 %); anything else is one of the `others`.
fn guessed(e: &Expr) -> Option<f64> {
    match e {
        Expr::Like(l) | Expr::SimilarTo(l) if l.negated => Some(1.0 - PER_CONJUNCT_SELECTIVITY),
        Expr::Between(b) if b.negated => Some(1.0 - PER_CONJUNCT_SELECTIVITY),
        _ => None,
    }
}

/// Estimated fraction of rows passing `filters` (a list of conjuncts). `ndv` gives the
/// distinct values of a column by name, where known; `sample` the table's sampled rows.
///
/// Equality tests with constants (and IN lists, and ORs of them) on columns with known
/// distinct values are priced by System R's `1/NDV`. The other conjuncts the sample can
/// evaluate are evaluated on it together (so correlated ones are not multiplied as if
/// independent). What is left is guessed: [`PER_CONJUNCT_SELECTIVITY`] each, floored.
pub fn estimate_selectivity(
    filters: &[Expr],
    ndv: &dyn Fn(&str) -> Option<u64>,
    sample: Option<&TableSample>,
) -> f64 {
    let (mut exact, mut others, mut sampled) = (1.0, 0, Vec::new());
    for c in filters
        .iter()
        .flat_map(|f| datafusion::logical_expr::utils::split_conjunction(f))
    {
        if let Some(p) = equality_selectivity(c, ndv) {
            exact *= p;
        } else if sample.is_some_and(|s| s.covers(c)) {
            sampled.push(c.clone());
        } else if let Some(p) = guessed(c) {
            exact *= p;
        } else {
            others += 1;
        }
    }
    if let Some(s) = sample.filter(|_| !sampled.is_empty()) {
        match s.fraction(&sampled) {
            Some(p) => exact *= p,
            None => others += sampled.len() as i32,
        }
    }
    let rest = if others == 0 {
        1.0
    } else {
        PER_CONJUNCT_SELECTIVITY.powi(others).max(SELECTIVITY_FLOOR)
    };
    exact * rest
}

/// A table's sampled rows ([`adisk_core::sample`]), each partition's weighted by the rows
/// each of its sampled rows stands for.
#[derive(Debug)]
pub struct TableSample {
    parts: Vec<(RecordBatch, f64)>,
    schema: SchemaRef,
    /// Rows of the table.
    rows: f64,
    /// Rows sampled.
    sampled: usize,
}

impl TableSample {
    /// The sample of `entry`: `None` if a partition with rows has none (written before
    /// samples existed, or too wide), or one does not decode to the table's columns.
    pub fn of(entry: &TableEntry) -> Option<TableSample> {
        let mut parts = Vec::new();
        for (_, p) in entry.placements.iter().filter(|(_, p)| p.rows > 0) {
            let batch = adisk_core::sample::decode(p.sample.as_deref()?).ok()?;
            if batch.schema().fields() != entry.schema.fields() || batch.num_rows() == 0 {
                return None;
            }
            let weight = p.rows as f64 / batch.num_rows() as f64;
            parts.push((batch, weight));
        }
        let sampled = parts.iter().map(|(b, _)| b.num_rows()).sum();
        (sampled > 0).then(|| TableSample {
            parts,
            schema: entry.schema.clone(),
            rows: entry.rows() as f64,
            sampled,
        })
    }

    /// True if every column `e` reads is in the sample and `e` has no subquery or
    /// placeholder.
    pub fn covers(&self, e: &Expr) -> bool {
        let mut plain = true;
        let _ = e.apply(|n| {
            plain &= !matches!(
                n,
                Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::OuterReferenceColumn(..)
                    | Expr::Placeholder(_)
            );
            Ok(TreeNodeRecursion::Continue)
        });
        plain
            && e.column_refs()
                .iter()
                .all(|c| self.schema.index_of(&c.name).is_ok())
    }

    /// The estimated fraction of the table's rows that pass all of `conjuncts`: the weighted
    /// share of sampled rows that pass them together. When none does, each conjunct's own
    /// share (at least half a sampled row's) multiplied, and at most half a sampled row's.
    /// `None` if one cannot be evaluated on the sample.
    pub fn fraction(&self, conjuncts: &[Expr]) -> Option<f64> {
        let floor = 0.5 / self.sampled as f64;
        let all = conjunction(conjuncts.iter().cloned())?;
        let joint = self.share(&all)?;
        if joint > 0.0 {
            return Some(joint.min(1.0));
        }
        let mut product = 1.0;
        for c in conjuncts {
            product *= self.share(c)?.max(floor);
        }
        Some(product.min(floor))
    }

    /// The bytes a value of column `name` takes in an Arrow stream, on average over the
    /// sample: the values' own bytes and their offset (4 bytes) or, for views, the 16-byte
    /// view plus the bytes of values longer than 12 (shorter ones sit in the view). None for
    /// a column of fixed width or one the sample does not have.
    pub fn width_of(&self, name: &str) -> Option<f64> {
        use arrow::array::{AsArray, BinaryViewArray, StringViewArray};
        let i = self.schema.index_of(name).ok()?;
        let (mut bytes, mut values) = (0.0, 0usize);
        for (batch, _) in &self.parts {
            let col = batch.column(i);
            values += col.len();
            let view = |len: usize| 16.0 + if len > 12 { len as f64 } else { 0.0 };
            bytes += if let Some(a) = col.as_any().downcast_ref::<StringViewArray>() {
                a.iter().map(|v| view(v.map_or(0, str::len))).sum::<f64>()
            } else if let Some(a) = col.as_any().downcast_ref::<BinaryViewArray>() {
                a.iter()
                    .map(|v| view(v.map_or(0, <[u8]>::len)))
                    .sum::<f64>()
            } else if let Some(a) = col.as_string_opt::<i32>() {
                a.iter()
                    .map(|v| 4.0 + v.map_or(0, str::len) as f64)
                    .sum::<f64>()
            } else if let Some(a) = col.as_string_opt::<i64>() {
                a.iter()
                    .map(|v| 8.0 + v.map_or(0, str::len) as f64)
                    .sum::<f64>()
            } else {
                return None;
            };
        }
        (values > 0).then(|| bytes / values as f64)
    }

    /// The weighted share of sampled rows for which `e` is true.
    fn share(&self, e: &Expr) -> Option<f64> {
        let unqualified = e
            .clone()
            .transform(|n| match n {
                Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(
                    Column::new_unqualified(c.name),
                ))),
                other => Ok(Transformed::no(other)),
            })
            .ok()?
            .data;
        let df_schema = DFSchema::try_from(self.schema.as_ref().clone()).ok()?;
        // Filters come coerced from the optimizer; a hand-made one may compare a view column
        // with a plain string.
        let coerced = unqualified
            .rewrite(&mut TypeCoercionRewriter::new(&df_schema))
            .ok()?
            .data;
        let physical = create_physical_expr(
            &coerced,
            &df_schema,
            &ExecutionProps::new(),
            &PhysicalPlanningContext::default(),
        )
        .ok()?;
        let mut kept = 0.0;
        for (batch, weight) in &self.parts {
            let values = physical
                .evaluate(batch)
                .ok()?
                .into_array(batch.num_rows())
                .ok()?;
            let passed = values.as_any().downcast_ref::<BooleanArray>()?.true_count();
            kept += passed as f64 * weight;
        }
        Some(kept / self.rows.max(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};
    use std::sync::Arc;

    #[test]
    fn selectivity_from_distinct_values() {
        let ndv = |c: &str| match c {
            "brand" => Some(25),
            "mode" => Some(7),
            _ => None,
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Equality with a constant: 1/NDV; IN lists: n/NDV; NOT: the complement.
        assert!(close(
            estimate_selectivity(&[col("brand").eq(lit("Brand#23"))], &ndv, None),
            1.0 / 25.0
        ));
        assert!(close(
            estimate_selectivity(
                &[col("mode").in_list(vec![lit("AIR"), lit("MAIL")], false)],
                &ndv,
                None
            ),
            2.0 / 7.0
        ));
        assert!(close(
            estimate_selectivity(&[col("mode").not_eq(lit("AIR"))], &ndv, None),
            6.0 / 7.0
        ));
        assert!(close(
            estimate_selectivity(
                &[col("mode").eq(lit("AIR")).or(col("mode").eq(lit("MAIL")))],
                &ndv,
                None
            ),
            2.0 / 7.0
        ));
        // Conjuncts multiply; unknown columns and ranges fall back to 0.25 each, floored at 0.01.
        let both = col("brand")
            .eq(lit("Brand#23"))
            .and(col("mode").eq(lit("AIR")));
        assert!(close(
            estimate_selectivity(&[both], &ndv, None),
            1.0 / 175.0
        ));
        assert!(close(
            estimate_selectivity(&[col("x").gt(lit(3))], &ndv, None),
            0.25
        ));
        let ranges: Vec<Expr> = (0..5).map(|i| col("x").gt(lit(i))).collect();
        assert!(close(estimate_selectivity(&ranges, &ndv, None), 0.01));
        assert!(close(estimate_selectivity(&[], &ndv, None), 1.0));
        // A pattern keeps a quarter; its negation the other three quarters.
        assert!(close(
            estimate_selectivity(&[col("c").like(lit("%special%"))], &ndv, None),
            0.25
        ));
        assert!(close(
            estimate_selectivity(&[col("c").not_like(lit("%special%"))], &ndv, None),
            0.75
        ));
        assert!(close(
            estimate_selectivity(&[col("x").not_between(lit(1), lit(5))], &ndv, None),
            0.75
        ));
    }

    /// A table of two partitions (10 000 and 30 000 rows): `k` counts rows, `s` starts with
    /// "forest" in about 1 % of them, `b` is `k` shifted by a pseudo-random amount.
    fn table(with_samples: bool) -> TableEntry {
        use adisk_core::protocol::PartitionInfo;
        use arrow::array::{Int64Array, StringViewArray};
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8View, false),
            Field::new("b", DataType::Int64, false),
        ]));
        let mix = |i: i64| (i.wrapping_mul(2_654_435_761) >> 7).rem_euclid(1000);
        let mut placements = Vec::new();
        for (disk, (from, n)) in [(0i64, 10_000i64), (10_000, 30_000)]
            .into_iter()
            .enumerate()
        {
            let mut sampler = adisk_core::sample::RowSampler::new(schema.clone());
            for start in (from..from + n).step_by(4096) {
                let end = (start + 4096).min(from + n);
                let k = Int64Array::from_iter_values(start..end);
                let s = StringViewArray::from_iter_values((start..end).map(|i| {
                    if mix(i) < 10 {
                        "forest green"
                    } else {
                        "misty rose"
                    }
                }));
                let b = Int64Array::from_iter_values((start..end).map(|i| i + mix(i) - 500));
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(k), Arc::new(s), Arc::new(b)],
                )
                .unwrap();
                sampler.update(&batch);
            }
            let mut p: PartitionInfo = serde_json::from_value(serde_json::json!({
                "partition": disk, "file": "f", "rows": n, "bytes": 1, "crc32": 0, "row_groups": 1
            }))
            .unwrap();
            p.sample = sampler.finish().filter(|_| with_samples || disk == 0);
            placements.push((disk as u32, p));
        }
        TableEntry {
            name: "t".into(),
            schema,
            placements,
            copies: Default::default(),
            missing: Default::default(),
            stale: vec![],
        }
    }

    #[test]
    fn filters_the_sample_can_evaluate_are_priced_by_it() {
        let t = table(true);
        let sample = TableSample::of(&t).unwrap();
        let none = |_: &str| None;
        let est = |f: Vec<Expr>| estimate_selectivity(&f, &none, Some(&sample));
        // A prefix pattern on about 1 % of the rows (was guessed at 25 %), qualified or not.
        let forest = est(vec![col("s").like(lit("forest%"))]);
        assert!((0.004..0.025).contains(&forest), "{forest}");
        let qualified = Expr::Column(Column::new(Some("t"), "s")).like(lit("forest%"));
        assert_eq!(est(vec![qualified]), forest);
        assert!((0.97..=1.0).contains(&est(vec![col("s").not_like(lit("forest%"))])));
        // A range over the second partition's rows: 3/4 of the table; correlated ranges are
        // evaluated together, not multiplied.
        let upper = est(vec![col("k").gt_eq(lit(10_000i64))]);
        assert!((upper - 0.75).abs() < 0.02, "{upper}");
        let both = est(vec![
            col("k").gt_eq(lit(10_000i64)),
            col("k").gt_eq(lit(5_000i64)),
        ]);
        assert!((both - upper).abs() < 1e-9, "{both}");
        // A test between two columns: about half.
        let half = est(vec![col("b").lt(col("k"))]);
        assert!((0.4..0.6).contains(&half), "{half}");
        // Nothing sampled passes: at most half a sampled row's share.
        let rare = est(vec![col("s").like(lit("zebra%"))]);
        assert!(rare > 0.0 && rare <= 0.5 / sample.sampled as f64, "{rare}");
        // A column the sample does not have is guessed; distinct values still price equality.
        assert_eq!(
            est(vec![col("x").like(lit("a%"))]),
            PER_CONJUNCT_SELECTIVITY
        );
        let ndv = |c: &str| (c == "s").then_some(2);
        let eq = estimate_selectivity(&[col("s").eq(lit("misty rose"))], &ndv, Some(&sample));
        assert_eq!(eq, 0.5);
        // A partition without a sample: no table sample (it would be biased).
        assert!(TableSample::of(&table(false)).is_none());
    }
}
