//! Decimal arithmetic in 64-bit integers where the values fit (issue 36: per-row cost).
//!
//! DataFusion types `l_extendedprice * (1 - l_discount)` as `Decimal128` and arrow computes it
//! with checked 128-bit multiplications, once per row and operator, calling a closure per valid
//! slot: a profile of TPC-H Q1 at the disks put 29 % of their CPU in this arithmetic. The
//! values themselves are small (TPC-H prices are `DECIMAL(15,2)`), so the same exact integer
//! arithmetic fits 64 bits.
//!
//! [`narrow_plan`] replaces each `+`, `-` and `*` over two `Decimal128` operands in a plan
//! fragment's projections and its partial aggregations' arguments by a [`NarrowDecimal`]:
//!
//! ```text
//! operands ─► each value fits i64? ─► a·10^(s−s₁) ± b·10^(s−s₂), or a·b, in i64, overflow seen
//!                  │ no                        │ any overflow (even in a NULL slot)
//!                  ▼                           ▼
//!            the original BinaryExpr evaluated again (arrow's 128-bit kernel: same result
//!            or the same error)
//! ```
//!
//! The result's type, scale and nulls are those arrow's kernel gives (Hive's rules, as in
//! `arrow_arith::numeric`), and its values are the same exact integers, so a query's answer
//! cannot change: only operators whose result type DataFusion planned as arrow computes it
//! are replaced. Nested operators (`a * (1 - b) * (1 + c)`) pass their 64-bit values up
//! without widening. Division and remainder, which round, are left alone.
use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::buffer::{NullBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Decimal128Type, FieldRef, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use std::hash::Hash;
use std::sync::Arc;

/// Whether decimal arithmetic is narrowed (`ADISK_NARROW_DECIMALS=off`: no, for measuring
/// what it gains).
pub fn enabled() -> bool {
    std::env::var("ADISK_NARROW_DECIMALS").map_or(true, |v| v != "off")
}

/// The arithmetic narrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
}

/// One `+`, `-` or `*` of two `Decimal128` operands, computed in i64 where the values fit.
#[derive(Debug, Eq)]
pub struct NarrowDecimal {
    op: Op,
    left: Arc<dyn PhysicalExpr>,
    right: Arc<dyn PhysicalExpr>,
    /// Multipliers that bring each operand to the result's scale (1 for `*`).
    left_mul: i64,
    right_mul: i64,
    /// The result's type: `Decimal128(precision, scale)` as arrow's kernel makes it.
    out: DataType,
    /// The operator as planned, evaluated when the values do not fit 64 bits.
    original: Arc<dyn PhysicalExpr>,
}

impl PartialEq for NarrowDecimal {
    fn eq(&self, other: &Self) -> bool {
        self.original.eq(&other.original)
    }
}

impl Hash for NarrowDecimal {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.original.hash(state);
    }
}

impl std::fmt::Display for NarrowDecimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.original)
    }
}

/// Operand values as i64: a column (with its nulls) or one value for every row.
enum Narrow {
    Column(Vec<i64>, Option<NullBuffer>),
    Value(i64),
}

/// The result type arrow's decimal kernel gives `op` over these operand types, with the
/// multipliers to the result's scale; None where i64 cannot hold the scaled operands.
fn result_of(op: Op, left: &DataType, right: &DataType) -> Option<(DataType, i64, i64)> {
    let (DataType::Decimal128(p1, s1), DataType::Decimal128(p2, s2)) = (left, right) else {
        return None;
    };
    let (p1, s1, p2, s2) = (*p1 as i32, *s1 as i32, *p2 as i32, *s2 as i32);
    let max_precision = 38;
    let (precision, scale, lm, rm) = match op {
        Op::Add | Op::Sub => {
            let scale = s1.max(s2);
            let precision = (scale + (p1 - s1).max(p2 - s2) + 1).min(max_precision);
            (precision, scale, scale - s1, scale - s2)
        }
        Op::Mul => ((p1 + p2 + 1).min(max_precision), s1 + s2, 0, 0),
    };
    let scaling = 0..=18;
    if !(0..=38).contains(&scale)
        || scale > precision
        || !scaling.contains(&lm)
        || !scaling.contains(&rm)
    {
        return None;
    }
    let out = DataType::Decimal128(precision as u8, scale as i8);
    Some((out, 10i64.pow(lm as u32), 10i64.pow(rm as u32)))
}

impl NarrowDecimal {
    /// `expr` narrowed when it is such an operator over `schema` (its children narrowed
    /// already), else None.
    fn of(
        expr: &Arc<dyn PhysicalExpr>,
        left: Arc<dyn PhysicalExpr>,
        right: Arc<dyn PhysicalExpr>,
        schema: &Schema,
    ) -> Option<NarrowDecimal> {
        let binary = expr.downcast_ref::<BinaryExpr>()?;
        let op = match binary.op() {
            Operator::Plus => Op::Add,
            Operator::Minus => Op::Sub,
            Operator::Multiply => Op::Mul,
            _ => return None,
        };
        let (lt, rt) = (
            binary.left().data_type(schema).ok()?,
            binary.right().data_type(schema).ok()?,
        );
        let (out, left_mul, right_mul) = result_of(op, &lt, &rt)?;
        // Only where DataFusion planned the type arrow's kernel makes.
        if expr.data_type(schema).ok()? != out {
            return None;
        }
        Some(NarrowDecimal {
            op,
            left,
            right,
            left_mul,
            right_mul,
            out,
            original: expr.clone(),
        })
    }

    /// The result as i64 values at the result's scale; None when an operand or the result
    /// does not fit 64 bits (or both operands are single values: nothing to gain).
    fn narrow(&self, batch: &RecordBatch) -> Result<Option<Narrow>> {
        let Some(l) = operand(&self.left, batch)? else {
            return Ok(None);
        };
        let Some(r) = operand(&self.right, batch)? else {
            return Ok(None);
        };
        let (lm, rm) = (self.left_mul, self.right_mul);
        // One loop per case, each with its own closure, so that none tests the case per row.
        let scaled = move |a: i64, b: i64, f: fn(i64, i64) -> (i64, bool)| {
            let (x, o1) = a.overflowing_mul(lm);
            let (y, o2) = b.overflowing_mul(rm);
            let (z, o3) = f(x, y);
            (z, o1 | o2 | o3)
        };
        Ok(match (self.op, lm == 1 && rm == 1) {
            (Op::Mul, _) => combine(l, r, i64::overflowing_mul),
            (Op::Add, true) => combine(l, r, i64::overflowing_add),
            (Op::Sub, true) => combine(l, r, i64::overflowing_sub),
            (Op::Add, false) => combine(l, r, move |a, b| scaled(a, b, i64::overflowing_add)),
            (Op::Sub, false) => combine(l, r, move |a, b| scaled(a, b, i64::overflowing_sub)),
        })
    }
}

/// `f` over two operands (a column with a column or a value); None if any row overflowed, or
/// both are single values.
fn combine(l: Narrow, r: Narrow, f: impl Fn(i64, i64) -> (i64, bool) + Copy) -> Option<Narrow> {
    let (values, nulls) = match (l, r) {
        (Narrow::Column(a, an), Narrow::Column(b, bn)) => {
            (map2(&a, &b, f), NullBuffer::union(an.as_ref(), bn.as_ref()))
        }
        (Narrow::Column(a, an), Narrow::Value(b)) => (map1(&a, |x| f(x, b)), an),
        (Narrow::Value(a), Narrow::Column(b, bn)) => (map1(&b, |y| f(a, y)), bn),
        (Narrow::Value(_), Narrow::Value(_)) => return None,
    };
    values.map(|v| Narrow::Column(v, nulls))
}

/// Applies `f` to every pair; None if any overflowed.
fn map2(a: &[i64], b: &[i64], f: impl Fn(i64, i64) -> (i64, bool)) -> Option<Vec<i64>> {
    let mut overflow = false;
    let out = a
        .iter()
        .zip(b)
        .map(|(x, y)| {
            let (v, o) = f(*x, *y);
            overflow |= o;
            v
        })
        .collect();
    (!overflow).then_some(out)
}

/// Applies `f` to every value; None if any overflowed.
fn map1(a: &[i64], f: impl Fn(i64) -> (i64, bool)) -> Option<Vec<i64>> {
    let mut overflow = false;
    let out = a
        .iter()
        .map(|x| {
            let (v, o) = f(*x);
            overflow |= o;
            v
        })
        .collect();
    (!overflow).then_some(out)
}

/// An operand as i64 values: a narrowed operator's own, or a `Decimal128` column or value
/// whose every value fits; None otherwise (a NULL value, a value too wide).
fn operand(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<Option<Narrow>> {
    if let Some(n) = expr.downcast_ref::<NarrowDecimal>() {
        return n.narrow(batch);
    }
    Ok(match expr.evaluate(batch)? {
        ColumnarValue::Scalar(ScalarValue::Decimal128(Some(v), _, _)) => {
            i64::try_from(v).ok().map(Narrow::Value)
        }
        ColumnarValue::Scalar(_) => None,
        ColumnarValue::Array(a) => match a.data_type() {
            DataType::Decimal128(_, _) => {
                let a = a.as_primitive::<Decimal128Type>();
                // Two plain loops (they vectorize): a value fits when truncating and widening
                // it again gives it back.
                let wide = a.values();
                let values: Vec<i64> = wide.iter().map(|v| *v as i64).collect();
                let lost = wide
                    .iter()
                    .zip(&values)
                    .fold(0i128, |acc, (w, n)| acc | (w ^ i128::from(*n)));
                (lost == 0).then(|| Narrow::Column(values, a.nulls().cloned()))
            }
            _ => None,
        },
    })
}

impl PhysicalExpr for NarrowDecimal {
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
        match self.narrow(batch)? {
            Some(Narrow::Column(values, nulls)) => {
                let wide: ScalarBuffer<i128> = values.into_iter().map(i128::from).collect();
                let array = PrimitiveArray::<Decimal128Type>::new(wide, nulls)
                    .with_data_type(self.out.clone());
                Ok(ColumnarValue::Array(Arc::new(array) as ArrayRef))
            }
            _ => self.original.evaluate(batch),
        }
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.left, &self.right]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        // Rewriters (DataFusion's projection pushdown, say) see the planned operator again.
        let original = self.original.clone();
        let [left, right] = <[_; 2]>::try_from(children).map_err(|_| {
            datafusion::error::DataFusionError::Internal(
                "a binary operator has two children".into(),
            )
        })?;
        original.with_new_children(vec![left, right])
    }

    fn fmt_sql(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.original.fmt_sql(f)
    }
}

/// `expr` with its decimal `+`, `-` and `*` narrowed (bottom up), over `schema`.
pub fn narrow_expr(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Arc<dyn PhysicalExpr> {
    let children: Vec<Arc<dyn PhysicalExpr>> = expr
        .children()
        .into_iter()
        .map(|c| narrow_expr(c, schema))
        .collect();
    if let [left, right] = children.as_slice()
        && let Some(n) = NarrowDecimal::of(expr, left.clone(), right.clone(), schema)
    {
        return Arc::new(n);
    }
    // Another operator over a narrowed one (a CASE, a cast, a comparison) takes it as its
    // child: it evaluates to the same array, of the same type.
    let moved = children
        .iter()
        .zip(expr.children())
        .any(|(n, c)| changed(c, n));
    if !moved {
        return expr.clone();
    }
    expr.clone()
        .with_new_children(children)
        .unwrap_or_else(|_| expr.clone())
}

/// Whether `expr` changed under [`narrow_expr`].
fn changed(before: &Arc<dyn PhysicalExpr>, after: &Arc<dyn PhysicalExpr>) -> bool {
    !Arc::ptr_eq(before, after)
}

/// The plan with its projections' and partial aggregations' decimal arithmetic narrowed.
///
/// # Errors
/// Rebuilding an operator failed (it should not: types and names are kept).
pub fn narrow_plan(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if !enabled() {
        return Ok(plan);
    }
    plan.transform_up(|node| {
        if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            let schema = p.input().schema();
            let exprs: Vec<ProjectionExpr> = p
                .expr()
                .iter()
                .map(|e| ProjectionExpr {
                    expr: narrow_expr(&e.expr, &schema),
                    alias: e.alias.clone(),
                })
                .collect();
            if !exprs
                .iter()
                .zip(p.expr())
                .any(|(a, b)| changed(&b.expr, &a.expr))
            {
                return Ok(Transformed::no(node));
            }
            let rebuilt = ProjectionExec::try_new(exprs, p.input().clone())?;
            return Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>));
        }
        if let Some(a) = node.downcast_ref::<AggregateExec>() {
            return Ok(narrow_aggregate(a)?.map_or(Transformed::no(node), Transformed::yes));
        }
        Ok(Transformed::no(node))
    })
    .map(|t| t.data)
}

/// A partial (or single) aggregation with its arguments narrowed; None if none changed.
fn narrow_aggregate(a: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if matches!(
        a.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) {
        return Ok(None);
    }
    let schema = a.input_schema();
    let mut any = false;
    let mut aggregates = Vec::with_capacity(a.aggr_expr().len());
    for f in a.aggr_expr() {
        let args: Vec<Arc<dyn PhysicalExpr>> = f
            .expressions()
            .iter()
            .map(|e| {
                let n = narrow_expr(e, &schema);
                any |= changed(e, &n);
                n
            })
            .collect();
        let order_by = f.order_bys().iter().map(|s| s.expr.clone()).collect();
        match f.with_new_expressions(args, order_by) {
            Some(g) => aggregates.push(Arc::new(g)),
            None => return Ok(None),
        }
    }
    Ok(any.then(|| Arc::new(a.with_new_aggr_exprs(aggregates)) as Arc<dyn ExecutionPlan>))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Decimal128Array;
    use arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{Column, Literal};

    fn column(values: Vec<Option<i128>>, p: u8, s: i8) -> ArrayRef {
        Arc::new(
            Decimal128Array::from(values)
                .with_precision_and_scale(p, s)
                .unwrap(),
        )
    }

    /// `a op b` planned as DataFusion does (a BinaryExpr) and narrowed.
    fn both(
        op: Operator,
        left: Arc<dyn PhysicalExpr>,
        right: Arc<dyn PhysicalExpr>,
        schema: &Schema,
    ) -> (Arc<dyn PhysicalExpr>, Arc<dyn PhysicalExpr>) {
        let planned: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(left, op, right));
        let narrowed = narrow_expr(&planned, schema);
        (planned, narrowed)
    }

    fn batch(a: ArrayRef, b: ArrayRef) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("a", a.data_type().clone(), true),
            Field::new("b", b.data_type().clone(), true),
        ]);
        RecordBatch::try_new(Arc::new(schema), vec![a, b]).unwrap()
    }

    fn result(e: &Arc<dyn PhysicalExpr>, b: &RecordBatch) -> Result<ArrayRef> {
        e.evaluate(b)?.into_array(b.num_rows())
    }

    /// `a op b` over two columns, planned and narrowed: asserts both give the same values,
    /// or the same error; returns whether it was narrowed.
    fn agree(op: Operator, a: ArrayRef, b: ArrayRef) -> bool {
        let rb = batch(a, b);
        let (planned, narrowed) = both(
            op,
            Arc::new(Column::new("a", 0)),
            Arc::new(Column::new("b", 1)),
            rb.schema_ref(),
        );
        match (result(&planned, &rb), result(&narrowed, &rb)) {
            (Ok(x), Ok(y)) => {
                assert_eq!(x.as_ref(), y.as_ref(), "{op}");
                assert_eq!(x.data_type(), y.data_type(), "{op}");
            }
            (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string(), "{op}"),
            (x, y) => panic!("{op}: {x:?} against {y:?}"),
        }
        narrowed.is::<NarrowDecimal>()
    }

    #[test]
    fn equals_the_kernel_on_every_operator_scale_and_null() {
        let a = column(
            vec![Some(12345), None, Some(-7), Some(0), Some(99_999_999)],
            15,
            2,
        );
        let b = column(vec![Some(6), Some(3), None, Some(-100), Some(5)], 12, 4);
        for op in [Operator::Plus, Operator::Minus, Operator::Multiply] {
            assert!(agree(op, a.clone(), b.clone()), "{op} narrowed");
        }
    }

    #[test]
    fn nested_operators_and_literals_as_tpch_writes_them() {
        // l_extendedprice * (1 - l_discount) * (1 + l_tax)
        let price = column(
            vec![Some(9_000_000), Some(1), None, Some(104_949_50)],
            15,
            2,
        );
        let discount = column(vec![Some(5), Some(10), Some(0), Some(7)], 15, 2);
        let rb = batch(price, discount);
        let one = || -> Arc<dyn PhysicalExpr> {
            Arc::new(Literal::new(ScalarValue::Decimal128(Some(100), 20, 2)))
        };
        let schema = rb.schema();
        let inner: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            one(),
            Operator::Minus,
            Arc::new(Column::new("b", 1)),
        ));
        let mid: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            Arc::new(Column::new("a", 0)),
            Operator::Multiply,
            inner,
        ));
        let (planned, narrowed) = both(
            Operator::Multiply,
            mid,
            Arc::new(BinaryExpr::new(
                one(),
                Operator::Plus,
                Arc::new(Column::new("b", 1)),
            )),
            &schema,
        );
        assert!(narrowed.is::<NarrowDecimal>());
        assert_eq!(
            result(&planned, &rb).unwrap().as_ref(),
            result(&narrowed, &rb).unwrap().as_ref()
        );
    }

    #[test]
    fn values_beyond_64_bits_fall_back_to_the_kernel_result_or_its_error() {
        let big = i128::from(i64::MAX) * 1000;
        let (a, b) = (
            column(vec![Some(big), Some(1)], 38, 0),
            column(vec![Some(2), Some(3)], 10, 0),
        );
        assert!(agree(Operator::Plus, a, b));
        // Fits i64 operand-wise, overflows i64 in the product, fits i128: the kernel's value.
        let a = column(vec![Some(i128::from(i64::MAX / 2)), Some(-5)], 19, 0);
        let b = column(vec![Some(1_000_000), Some(3)], 7, 0);
        assert!(agree(Operator::Multiply, a, b));
        // Overflowing i128 itself: the kernel's error.
        let huge = column(vec![Some(10i128.pow(37))], 38, 0);
        assert!(agree(Operator::Multiply, huge.clone(), huge));
    }

    #[test]
    fn empty_one_row_and_the_edges_of_64_bits() {
        for op in [Operator::Plus, Operator::Minus, Operator::Multiply] {
            assert!(agree(op, column(vec![], 15, 2), column(vec![], 15, 2)));
            assert!(agree(
                op,
                column(vec![Some(-3)], 15, 2),
                column(vec![None], 15, 2)
            ));
            let edge = |v: i64| column(vec![Some(i128::from(v)), Some(1)], 19, 0);
            for (a, b) in [
                (i64::MAX, 1),
                (i64::MIN, 1),
                (i64::MIN, -1),
                (i64::MAX, i64::MIN),
            ] {
                assert!(agree(op, edge(a), edge(b)), "{op} {a} {b}");
            }
        }
    }

    #[test]
    fn random_values_scales_and_nulls_agree_with_the_kernel() {
        // A fixed generator (xorshift): values from a few digits to past 2^63, so both the
        // narrow path and the fall-back run, with nulls and every operator.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..200 {
            let digits = [2u32, 6, 12, 17, 19, 24][round % 6];
            let limit = 10i128.pow(digits);
            let mut draw = |n: usize| -> Vec<Option<i128>> {
                (0..n)
                    .map(|_| {
                        let v = (i128::from(next()) << 32 | i128::from(next())) % limit;
                        (next() % 7 != 0).then_some(if next() % 2 == 0 { v } else { -v })
                    })
                    .collect()
            };
            let (s1, s2) = ((round % 4) as i8, (round % 3) as i8 * 2);
            let (a, b) = (column(draw(64), 38, s1), column(draw(64), 38, s2));
            for op in [Operator::Plus, Operator::Minus, Operator::Multiply] {
                assert!(agree(op, a.clone(), b.clone()), "{op} round {round}");
            }
        }
    }

    #[test]
    fn a_fragment_plan_narrows_projections_and_partial_aggregations() {
        use datafusion::physical_plan::empty::EmptyExec;
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Decimal128(15, 2), true),
            Field::new("b", DataType::Decimal128(15, 2), true),
        ]));
        let input: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema.clone()));
        let product: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            Arc::new(Column::new("a", 0)),
            Operator::Multiply,
            Arc::new(Column::new("b", 1)),
        ));
        let plan: Arc<dyn ExecutionPlan> = Arc::new(
            ProjectionExec::try_new(
                vec![ProjectionExpr {
                    expr: product,
                    alias: "p".into(),
                }],
                input,
            )
            .unwrap(),
        );
        let before = plan.schema();
        let narrowed = narrow_plan(plan).unwrap();
        let p = narrowed.downcast_ref::<ProjectionExec>().unwrap();
        assert!(p.expr()[0].expr.is::<NarrowDecimal>());
        assert_eq!(narrowed.schema(), before, "the schema is kept");
    }

    #[test]
    fn other_types_and_operators_are_left_alone() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Decimal128(15, 2), true),
        ]);
        let (_, n) = both(
            Operator::Plus,
            Arc::new(Column::new("a", 0)),
            Arc::new(Column::new("a", 0)),
            &schema,
        );
        assert!(!n.is::<NarrowDecimal>());
        let (_, n) = both(
            Operator::Divide,
            Arc::new(Column::new("b", 1)),
            Arc::new(Column::new("b", 1)),
            &schema,
        );
        assert!(!n.is::<NarrowDecimal>());
    }

    #[test]
    fn a_null_value_operand_gives_the_kernels_nulls() {
        let a = column(vec![Some(1), Some(2)], 15, 2);
        let rb = batch(a.clone(), a);
        let (planned, narrowed) = both(
            Operator::Multiply,
            Arc::new(Column::new("a", 0)),
            Arc::new(Literal::new(ScalarValue::Decimal128(None, 15, 2))),
            rb.schema_ref(),
        );
        assert_eq!(
            result(&planned, &rb).unwrap().as_ref(),
            result(&narrowed, &rb).unwrap().as_ref()
        );
    }
}
