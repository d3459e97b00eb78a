//! `select`: qualification (a predicate) and projection (expressions), with an optional limit.
//!
//! The predicate is split into its conjuncts, evaluated one after another: each works only on
//! the rows the ones before it kept. The order adapts to the data: every
//! [`REORDER_EVERY`] buffers the conjuncts are sorted by measured cost per row divided by the
//! fraction of rows they drop, so cheap, selective tests run first (the rank ordering of
//! predicate-migration optimizers, measured instead of estimated).
//!
//! A conjunct's rows are not copied out after each test: the conjuncts are evaluated over the
//! same batch and their results combined into one selection, and the batch is filtered once, at
//! the end. Copying every column of the rows a test keeps costs several tests' evaluation per
//! row, so the batch is filtered before the next test only once at most
//! 1/[`FILTER_AT_FRACTION`] of its rows are left. A test that fails on rows an earlier one
//! dropped (a division by a zero the earlier test excluded) is evaluated again on the rows left
//! only, as if it had run on the filtered rows.
use crate::disklet::{Disklet, Emitter, InputBuffer};
use crate::expr::ExprPlanner;
use crate::expr::evaluate_all;
use crate::{DiskOsError, Result, df_err};
use adisk_core::protocol::{ExprBytes, NamedExpr};
use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// Buffers between two re-orderings of the conjuncts.
pub const REORDER_EVERY: u64 = 16;

/// The batch is filtered before the next conjunct once at most 1/this of its rows are left.
pub const FILTER_AT_FRACTION: usize = 8;

/// One conjunct of the predicate and what it cost so far.
struct Conjunct {
    expr: Arc<dyn PhysicalExpr>,
    /// Rows it was evaluated on (also rows an earlier conjunct had dropped).
    rows_evaluated: u64,
    /// Rows that had passed the conjuncts before it, and of those, rows it passed too.
    rows_in: u64,
    rows_out: u64,
    nanos: u64,
}

impl Conjunct {
    /// Nanoseconds per row spent for each row dropped: lower runs first.
    fn rank(&self) -> f64 {
        let per_row = self.nanos as f64 / self.rows_evaluated.max(1) as f64;
        let dropped = 1.0 - self.rows_out as f64 / self.rows_in.max(1) as f64;
        per_row / dropped.max(1e-3)
    }
}

/// The `select` disklet.
pub struct Select {
    conjuncts: Vec<Conjunct>,
    buffers: u64,
    projection: Option<Vec<Arc<dyn PhysicalExpr>>>,
    schema: SchemaRef,
    limit: Option<u64>,
    emitted: u64,
}

impl Select {
    /// Plans the predicate and projection over `input`.
    pub fn new(
        predicate: Option<&ExprBytes>,
        projection: &[NamedExpr],
        limit: Option<u64>,
        input: &SchemaRef,
        planner: &ExprPlanner,
    ) -> Result<Self> {
        let predicate = predicate.map(|p| planner.physical(p, input)).transpose()?;
        if let Some(p) = &predicate {
            let t = p.data_type(input).map_err(df_err("typing the predicate"))?;
            if t != DataType::Boolean {
                return Err(DiskOsError::InvalidJob(format!(
                    "predicate `{p}` is {t}, not boolean"
                )));
            }
        }
        let conjuncts = match &predicate {
            None => vec![],
            Some(p) => datafusion::physical_expr::split_conjunction(p)
                .into_iter()
                .map(|e| Conjunct {
                    expr: e.clone(),
                    rows_evaluated: 0,
                    rows_in: 0,
                    rows_out: 0,
                    nanos: 0,
                })
                .collect(),
        };
        let (projection, schema) = if projection.is_empty() {
            (None, input.clone())
        } else {
            let mut exprs = Vec::with_capacity(projection.len());
            let mut fields = Vec::with_capacity(projection.len());
            for ne in projection {
                let e = planner.physical(&ne.expr, input)?;
                let t = e
                    .data_type(input)
                    .map_err(df_err(format!("typing `{}`", ne.name)))?;
                let nullable = e.nullable(input).unwrap_or(true);
                fields.push(Field::new(&ne.name, t, nullable));
                exprs.push(e);
            }
            (Some(exprs), Arc::new(Schema::new(fields)))
        };
        Ok(Select {
            conjuncts,
            buffers: 0,
            projection,
            schema,
            limit,
            emitted: 0,
        })
    }
}

impl Select {
    /// The rows of `batch` that pass every conjunct, in the conjuncts' current order.
    fn qualify(&mut self, mut batch: RecordBatch) -> Result<RecordBatch> {
        // The rows still passing, over `batch`'s rows (None: all of them).
        let mut passing: Option<BooleanBuffer> = None;
        let mut left = batch.num_rows();
        let count = self.conjuncts.len();
        for (i, c) in self.conjuncts.iter_mut().enumerate() {
            if left == 0 {
                break;
            }
            let t0 = std::time::Instant::now();
            let mask = match test(&c.expr, &batch) {
                Ok(mask) => mask,
                Err(_) if passing.is_some() => {
                    batch = filter(&batch, passing.take())?;
                    test(&c.expr, &batch)?
                }
                Err(e) => return Err(e),
            };
            let mask = match passing.take() {
                Some(before) => &before & &mask,
                None => mask,
            };
            let kept = mask.count_set_bits();
            c.rows_evaluated += batch.num_rows() as u64;
            c.rows_in += left as u64;
            c.rows_out += kept as u64;
            left = kept;
            passing = Some(mask);
            if i + 1 < count && left > 0 && left * FILTER_AT_FRACTION <= batch.num_rows() {
                batch = filter(&batch, passing.take())?;
            }
            c.nanos += t0.elapsed().as_nanos() as u64;
        }
        if left == 0 {
            return Ok(batch.slice(0, 0));
        }
        if left < batch.num_rows() {
            batch = filter(&batch, passing)?;
        }
        Ok(batch)
    }
}

/// The rows of `batch` for which `expr` is true (false and NULL drop a row).
fn test(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<BooleanBuffer> {
    let mask = expr
        .evaluate(batch)
        .and_then(|v| v.into_array(batch.num_rows()))
        .map_err(df_err(format!("evaluating `{expr}`")))?;
    let mask = mask.as_boolean();
    Ok(match mask.nulls() {
        Some(valid) => mask.values() & valid.inner(),
        None => mask.values().clone(),
    })
}

/// `batch`'s rows whose bit in `passing` is set (all of them if None).
fn filter(batch: &RecordBatch, passing: Option<BooleanBuffer>) -> Result<RecordBatch> {
    let Some(passing) = passing else {
        return Ok(batch.clone());
    };
    filter_record_batch(batch, &BooleanArray::new(passing, None)).map_err(|e| DiskOsError::Decode {
        context: "filtering".into(),
        message: e.to_string(),
    })
}

impl Disklet for Select {
    fn name(&self) -> &'static str {
        "select"
    }
    fn row_subset_of_input(&self) -> Option<Vec<String>> {
        if self.limit.is_some() {
            return None; // a filter below would change which rows the limit keeps
        }
        let names = self.schema.fields().iter().map(|f| f.name().clone());
        Some(match &self.projection {
            None => names.collect(),
            Some(exprs) => names
                .zip(exprs)
                .filter(|(name, e)| {
                    e.downcast_ref::<datafusion::physical_expr::expressions::Column>()
                        .is_some_and(|c| c.name() == name)
                })
                .map(|(name, _)| name)
                .collect(),
        })
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let filtered = self.qualify(input.batch.clone())?;
        self.buffers += 1;
        if self.buffers % REORDER_EVERY == 0 && self.conjuncts.len() > 1 {
            self.conjuncts.sort_by(|a, b| a.rank().total_cmp(&b.rank()));
        }
        let mut result = match &self.projection {
            None => filtered,
            Some(exprs) => {
                let cols = evaluate_all(exprs, &filtered)?;
                RecordBatch::try_new(self.schema.clone(), cols).map_err(|e| {
                    DiskOsError::Decode {
                        context: "projecting".into(),
                        message: e.to_string(),
                    }
                })?
            }
        };
        if let Some(limit) = self.limit {
            let room = limit.saturating_sub(self.emitted) as usize;
            if result.num_rows() >= room {
                result = result.slice(0, room);
                out.done();
            }
        }
        self.emitted += result.num_rows() as u64;
        out.emit(0, result);
        Ok(())
    }
    fn finish(&mut self, _out: &mut Emitter) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use datafusion::prelude::{col, lit};
    use datafusion_proto::bytes::Serializeable;

    /// Conjuncts are re-ordered as costs come in; the rows kept are those of the whole
    /// predicate whatever the order.
    #[test]
    fn adaptive_conjunct_order_keeps_the_same_rows() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, false),
        ]));
        // `a` is NULL on every 7th row: NULL fails the predicate like false.
        let predicate = col("a")
            .gt(lit(10i64))
            .and(col("b").lt_eq(lit(3i64)))
            .and(col("a").not_eq(lit(500i64)));
        let bytes = ExprBytes(predicate.to_bytes().unwrap().to_vec());
        let mut select =
            Select::new(Some(&bytes), &[], None, &schema, &ExprPlanner::default()).unwrap();
        let first: Vec<String> = select
            .conjuncts
            .iter()
            .map(|c| c.expr.to_string())
            .collect();
        let (mut kept, mut expected) = (0usize, 0usize);
        for buffer in 0..(3 * REORDER_EVERY as i64) {
            let a: Int64Array = (0..1000)
                .map(|i| {
                    if i % 7 == 0 {
                        None
                    } else {
                        Some(buffer * 1000 + i)
                    }
                })
                .collect();
            let b: Int64Array = (0..1000).map(|i| (i * 31 + buffer) % 100).collect();
            expected += a
                .iter()
                .zip(b.iter())
                .filter(|(a, b)| matches!(a, Some(a) if *a > 10 && *a != 500) && b.unwrap() <= 3)
                .count();
            let batch =
                RecordBatch::try_new(schema.clone(), vec![Arc::new(a), Arc::new(b)]).unwrap();
            let mut out = Emitter::new(1);
            select
                .process(
                    &InputBuffer {
                        batch: &batch,
                        position: 0,
                        input: 0,
                    },
                    &mut out,
                )
                .unwrap();
            kept += out.take_outputs()[0]
                .iter()
                .map(|b| b.num_rows())
                .sum::<usize>();
        }
        assert_eq!(kept, expected);
        // `b <= 3` drops 96 % of the rows and now runs first.
        let now: Vec<String> = select
            .conjuncts
            .iter()
            .map(|c| c.expr.to_string())
            .collect();
        assert_ne!(now, first);
        assert!(now[0].contains("b@1"), "{now:?}");
    }

    fn run(select: &mut Select, batch: &RecordBatch) -> Result<Vec<RecordBatch>> {
        let mut out = Emitter::new(1);
        select.process(
            &InputBuffer {
                batch,
                position: 0,
                input: 0,
            },
            &mut out,
        )?;
        Ok(out.take_outputs().swap_remove(0))
    }

    /// A conjunct that fails on rows an earlier one drops (`100 / a` where `a <> 0` kept the
    /// rest) is evaluated on the rows left: the answer is the filtered one, not an error; a
    /// batch left with few rows is filtered between conjuncts and gives the same rows.
    #[test]
    fn a_conjunct_failing_on_dropped_rows_is_evaluated_on_the_rows_left() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int64, false),
        ]));
        let predicate = col("a")
            .not_eq(lit(0i64))
            .and((lit(100i64) / col("a")).gt(lit(1i64)))
            .and(col("b").lt(lit(90i64)));
        let bytes = ExprBytes(predicate.to_bytes().unwrap().to_vec());
        let mut select =
            Select::new(Some(&bytes), &[], None, &schema, &ExprPlanner::default()).unwrap();
        let a: Int64Array = (0..1000).map(|i| i % 10).collect();
        let b: Int64Array = (0..1000).collect();
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(a), Arc::new(b)]).unwrap();
        let out = run(&mut select, &batch).unwrap();
        // a in 1..=9 (100 / a > 1 for every one), b < 90.
        assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 81);
        // Selective first: b < 5 leaves 5 of 1000 rows (below 1/8), filtered before the rest.
        let predicate = col("b")
            .lt(lit(5i64))
            .and(col("a").not_eq(lit(0i64)))
            .and((lit(100i64) / col("a")).gt(lit(1i64)));
        let bytes = ExprBytes(predicate.to_bytes().unwrap().to_vec());
        let mut select =
            Select::new(Some(&bytes), &[], None, &schema, &ExprPlanner::default()).unwrap();
        let out = run(&mut select, &batch).unwrap();
        let rows: Vec<i64> = out
            .iter()
            .flat_map(|b| {
                b.column(1)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(rows, vec![1, 2, 3, 4]);
        // Nothing passes: an empty batch of the same schema.
        let predicate = col("b").gt(lit(5000i64)).and(col("a").eq(lit(1i64)));
        let bytes = ExprBytes(predicate.to_bytes().unwrap().to_vec());
        let mut select =
            Select::new(Some(&bytes), &[], None, &schema, &ExprPlanner::default()).unwrap();
        let out = run(&mut select, &batch).unwrap();
        assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    }
}
