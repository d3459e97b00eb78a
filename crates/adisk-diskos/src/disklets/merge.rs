//! `merge`: k-way merge of sorted input streams into one sorted stream (the merge phase of an
//! external sort, NOW-sort's second pass, a sort-merge join's inputs).
//!
//! The disklet holds at most one buffer of each input (its "head"). It asks DiskOS for the
//! input whose head is used up ([`NextInput::Input`]), and emits rows while every input that
//! has not ended has rows left: only then is the smallest head row known to be the smallest
//! row still to come. Keys are compared in Arrow's row format (byte-comparable, any key types,
//! with each key's order and NULL placement).
use crate::disklet::{Disklet, Emitter, InputBuffer, NextInput};
use crate::expr::ExprPlanner;
use crate::expr::evaluate_all;
use crate::{DiskOsError, Result};
use adisk_core::protocol::SortKey;
use adisk_core::stats::batch_bytes;
use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// Rows per emitted batch (at most).
pub const OUT_ROWS: usize = 8192;

/// One input's current buffer and the next row to take from it.
struct Head {
    batch: RecordBatch,
    keys: Rows,
    next: usize,
}

/// The `merge` disklet.
pub struct Merge {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    converter: RowConverter,
    schema: SchemaRef,
    heads: Vec<Option<Head>>,
    ended: Vec<bool>,
    scratch_granted: u64,
}

impl Merge {
    /// Plans the keys over the inputs, which must all have the same schema.
    ///
    /// # Errors
    /// No key, inputs of different schemas, a key that does not plan.
    pub fn new(
        keys: &[SortKey],
        inputs: &[SchemaRef],
        scratch_bytes: u64,
        planner: &ExprPlanner,
    ) -> Result<Self> {
        let first = inputs
            .first()
            .ok_or_else(|| DiskOsError::InvalidJob("merge needs at least one input".into()))?;
        if keys.is_empty() {
            return Err(DiskOsError::InvalidJob(
                "merge needs at least one key".into(),
            ));
        }
        if let Some((i, _)) = inputs
            .iter()
            .enumerate()
            .find(|(_, s)| s.fields() != first.fields())
        {
            return Err(DiskOsError::InvalidJob(format!(
                "merge input {i} has another schema than input 0"
            )));
        }
        let exprs: Vec<Arc<dyn PhysicalExpr>> = keys
            .iter()
            .map(|k| planner.physical(&k.expr, first))
            .collect::<Result<_>>()?;
        let fields = exprs
            .iter()
            .zip(keys)
            .map(|(e, k)| {
                let data_type = e
                    .data_type(first)
                    .map_err(crate::df_err(format!("typing merge key `{e}`")))?;
                Ok(SortField::new_with_options(
                    data_type,
                    SortOptions {
                        descending: k.descending,
                        nulls_first: k.nulls_first,
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let converter = RowConverter::new(fields)
            .map_err(|e| DiskOsError::InvalidJob(format!("merge keys: {e}")))?;
        let n = inputs.len();
        Ok(Merge {
            keys: exprs,
            converter,
            schema: first.clone(),
            heads: (0..n).map(|_| None).collect(),
            ended: vec![false; n],
            scratch_granted: scratch_bytes,
        })
    }

    /// The input holding the smallest next row, if every input that has not ended has rows
    /// left (otherwise `None`: more input is needed first, or everything was emitted).
    fn smallest(&self) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, head) in self.heads.iter().enumerate() {
            match head {
                None if !self.ended[i] => return None,
                None => {}
                Some(h) => {
                    let better = best.is_none_or(|b| {
                        let other = self.heads[b].as_ref().expect("best has a head");
                        h.keys.row(h.next) < other.keys.row(other.next)
                    });
                    if better {
                        best = Some(i);
                    }
                }
            }
        }
        best
    }

    /// Emits rows while the smallest one is known; heads used up are dropped after the
    /// output that refers to them is built.
    fn drain(&mut self, out: &mut Emitter) -> Result<()> {
        let mut picks: Vec<(usize, usize)> = Vec::new();
        let mut used_up: Vec<RecordBatch> = Vec::new();
        while let Some(i) = self.smallest() {
            let head = self.heads[i].as_mut().expect("smallest has a head");
            picks.push((i, head.next));
            head.next += 1;
            if head.next == head.batch.num_rows() {
                used_up.push(self.heads[i].take().expect("head").batch);
                // Refer to the batch by its place in `used_up` from now on.
                let slot = self.heads.len() + used_up.len() - 1;
                for p in picks.iter_mut().filter(|p| p.0 == i) {
                    p.0 = slot;
                }
            }
            if picks.len() == OUT_ROWS {
                self.emit(&mut picks, &used_up, out)?;
            }
        }
        self.emit(&mut picks, &used_up, out)
    }

    fn emit(
        &self,
        picks: &mut Vec<(usize, usize)>,
        used_up: &[RecordBatch],
        out: &mut Emitter,
    ) -> Result<()> {
        if picks.is_empty() {
            return Ok(());
        }
        let empty = RecordBatch::new_empty(self.schema.clone());
        let live: Vec<&RecordBatch> = self
            .heads
            .iter()
            .map(|h| h.as_ref().map_or(&empty, |h| &h.batch))
            .chain(used_up.iter())
            .collect();
        let merged = arrow::compute::kernels::interleave::interleave_record_batch(&live, picks)
            .map_err(|e| DiskOsError::Decode {
                context: "merging".into(),
                message: e.to_string(),
            })?;
        picks.clear();
        out.emit(0, merged);
        Ok(())
    }
}

impl Disklet for Merge {
    fn name(&self) -> &'static str {
        "merge"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn next_input(&self) -> NextInput {
        match (0..self.heads.len()).find(|i| self.heads[*i].is_none() && !self.ended[*i]) {
            Some(i) => NextInput::Input(i),
            None => NextInput::Any,
        }
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let i = input.input;
        if input.batch.num_rows() == 0 {
            return Ok(());
        }
        if self.heads[i].is_some() {
            return Err(DiskOsError::InvalidJob(format!(
                "merge got a buffer of input {i} before it used up the last one"
            )));
        }
        let arrays = evaluate_all(&self.keys, input.batch)?;
        let keys = self
            .converter
            .convert_columns(&arrays)
            .map_err(|e| DiskOsError::Decode {
                context: "merge keys".into(),
                message: e.to_string(),
            })?;
        self.heads[i] = Some(Head {
            batch: input.batch.clone(),
            keys,
            next: 0,
        });
        if self.scratch_bytes() > self.scratch_granted {
            return Err(DiskOsError::ScratchExceeded {
                disklet: "merge",
                granted_bytes: self.scratch_granted,
                detail: format!(
                    "{} inputs' current buffers take {} bytes",
                    self.heads.len(),
                    self.scratch_bytes()
                ),
            });
        }
        self.drain(out)
    }
    fn input_ended(&mut self, input: usize, out: &mut Emitter) -> Result<()> {
        self.ended[input] = true;
        self.drain(out)
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.ended.iter_mut().for_each(|e| *e = true);
        self.drain(out)
    }
    fn scratch_bytes(&self) -> u64 {
        self.heads
            .iter()
            .flatten()
            .map(|h| batch_bytes(&h.batch) + h.keys.size() as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::prelude::col;
    use datafusion_proto::bytes::Serializeable;

    fn batch(schema: &SchemaRef, values: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(values.to_vec()))],
        )
        .unwrap()
    }

    fn values(out: &mut Emitter) -> Vec<i64> {
        out.take_outputs()
            .remove(0)
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    /// Feeds buffers in the order the disklet asks for them, as DiskOS does.
    fn run(inputs: Vec<Vec<Vec<i64>>>) -> Vec<i64> {
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let key = SortKey {
            expr: adisk_core::protocol::ExprBytes(col("x").to_bytes().unwrap().to_vec()),
            descending: false,
            nulls_first: false,
        };
        let schemas = vec![schema.clone(); inputs.len()];
        let mut m = Merge::new(&[key], &schemas, 1 << 20, &ExprPlanner::default()).unwrap();
        let mut queues: Vec<std::collections::VecDeque<Vec<i64>>> =
            inputs.into_iter().map(Into::into).collect();
        let mut out = Emitter::new(1);
        let mut merged = Vec::new();
        loop {
            let i = match m.next_input() {
                NextInput::Input(i) => i,
                NextInput::Any => match (0..queues.len()).find(|i| !m.ended[*i]) {
                    Some(i) => i,
                    None => break,
                },
            };
            match queues[i].pop_front() {
                Some(v) => m
                    .process(
                        &InputBuffer {
                            batch: &batch(&schema, &v),
                            position: 0,
                            input: i,
                        },
                        &mut out,
                    )
                    .unwrap(),
                None => m.input_ended(i, &mut out).unwrap(),
            }
            merged.extend(values(&mut out));
        }
        m.finish(&mut out).unwrap();
        merged.extend(values(&mut out));
        merged
    }

    #[test]
    fn merges_sorted_inputs_against_a_plain_sort() {
        let inputs = vec![
            vec![vec![1, 4, 9], vec![10, 12]],
            vec![vec![2, 3], vec![3, 11, 20]],
            vec![],
            vec![vec![0], vec![5, 6, 7, 8]],
        ];
        let mut expected: Vec<i64> = inputs.iter().flatten().flatten().copied().collect();
        expected.sort();
        assert_eq!(run(inputs), expected);
    }

    #[test]
    fn one_input_and_long_runs() {
        let long: Vec<i64> = (0..20_000).map(|i| i * 2).collect();
        let other: Vec<i64> = (0..20_000).map(|i| i * 2 + 1).collect();
        let merged = run(vec![
            vec![long[..10_000].to_vec(), long[10_000..].to_vec()],
            vec![other.clone()],
        ]);
        assert_eq!(merged, (0..40_000).collect::<Vec<i64>>());
        assert_eq!(run(vec![vec![vec![3, 5]]]), vec![3, 5]);
    }
}
