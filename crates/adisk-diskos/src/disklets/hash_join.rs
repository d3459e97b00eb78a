//! `hash_join`: an inner equi-join of two input streams at a disk.
//!
//! Input 0 (build) is read whole into scratch — its batches and a hash table from each key
//! (in Arrow's row format, so any key types compare exactly) to its rows — then input 1
//! (probe) streams past it; each probe buffer emits its matches. DiskOS is asked for the
//! build input until it ends ([`NextInput::Input`]). Rows with a NULL key never match (SQL's
//! `=`). Output: the build columns, then the probe columns; names must not repeat.
use crate::disklet::{Disklet, Emitter, InputBuffer, NextInput};
use crate::expr::ExprPlanner;
use crate::expr::evaluate_all;
use crate::{DiskOsError, Result};
use adisk_core::protocol::ExprBytes;
use adisk_core::stats::batch_bytes;
use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use std::collections::HashMap;
use std::sync::Arc;

/// Bytes a hash-table entry costs beyond its key (map slot, row-index vector).
const ENTRY_OVERHEAD_BYTES: u64 = 48;

/// Joined rows per emitted batch at most.
pub const OUTPUT_ROWS: usize = 8192;

/// The `hash_join` disklet.
pub struct HashJoin {
    build_keys: Vec<Arc<dyn PhysicalExpr>>,
    probe_keys: Vec<Arc<dyn PhysicalExpr>>,
    converter: RowConverter,
    build_schema: SchemaRef,
    schema: SchemaRef,
    build_batches: Vec<RecordBatch>,
    build_rows: u64,
    /// Filled when the build input ends.
    build: Option<RecordBatch>,
    table: HashMap<Box<[u8]>, Vec<u32>>,
    used_bytes: u64,
    scratch_granted: u64,
}

fn arrow_err(context: &str) -> impl FnOnce(arrow::error::ArrowError) -> DiskOsError + '_ {
    move |e| DiskOsError::Decode {
        context: context.to_string(),
        message: e.to_string(),
    }
}

impl HashJoin {
    /// Plans the keys over the two inputs.
    ///
    /// # Errors
    /// Not two inputs, key counts or types that differ, output names that repeat.
    pub fn new(
        build_keys: &[ExprBytes],
        probe_keys: &[ExprBytes],
        inputs: &[SchemaRef],
        scratch_bytes: u64,
        planner: &ExprPlanner,
    ) -> Result<Self> {
        let [build, probe] = inputs else {
            return Err(DiskOsError::InvalidJob(format!(
                "hash_join takes 2 inputs (build, probe), got {}",
                inputs.len()
            )));
        };
        if build_keys.is_empty() || build_keys.len() != probe_keys.len() {
            return Err(DiskOsError::InvalidJob(format!(
                "hash_join needs as many build keys as probe keys, at least one ({} and {})",
                build_keys.len(),
                probe_keys.len()
            )));
        }
        let plan = |keys: &[ExprBytes], schema: &SchemaRef| {
            keys.iter()
                .map(|k| planner.physical(k, schema))
                .collect::<Result<Vec<_>>>()
        };
        let (build_exprs, probe_exprs) = (plan(build_keys, build)?, plan(probe_keys, probe)?);
        let mut fields = Vec::with_capacity(build_exprs.len());
        for (b, p) in build_exprs.iter().zip(&probe_exprs) {
            let bt = b
                .data_type(build)
                .map_err(crate::df_err(format!("typing join key `{b}`")))?;
            let pt = p
                .data_type(probe)
                .map_err(crate::df_err(format!("typing join key `{p}`")))?;
            if bt != pt {
                return Err(DiskOsError::InvalidJob(format!(
                    "join keys `{b}` ({bt}) and `{p}` ({pt}) have different types; cast one of them"
                )));
            }
            fields.push(SortField::new(bt));
        }
        let converter = RowConverter::new(fields)
            .map_err(|e| DiskOsError::InvalidJob(format!("join keys: {e}")))?;
        let schema = joined_schema(build, probe)?;
        Ok(HashJoin {
            build_keys: build_exprs,
            probe_keys: probe_exprs,
            converter,
            build_schema: build.clone(),
            schema,
            build_batches: Vec::new(),
            build_rows: 0,
            build: None,
            table: HashMap::new(),
            used_bytes: 0,
            scratch_granted: scratch_bytes,
        })
    }

    fn charge(&mut self, bytes: u64, what: &str) -> Result<()> {
        self.used_bytes += bytes;
        if self.used_bytes > self.scratch_granted {
            return Err(DiskOsError::ScratchExceeded {
                disklet: "hash_join",
                granted_bytes: self.scratch_granted,
                detail: format!("the build side needs more ({what})"),
            });
        }
        Ok(())
    }

    fn add_build(&mut self, batch: &RecordBatch) -> Result<()> {
        let arrays = evaluate_all(&self.build_keys, batch)?;
        let rows = self
            .converter
            .convert_columns(&arrays)
            .map_err(arrow_err("join keys"))?;
        self.charge(batch_bytes(batch), "rows")?;
        for r in 0..batch.num_rows() {
            if arrays.iter().any(|a| a.is_null(r)) {
                continue;
            }
            let index = u32::try_from(self.build_rows + r as u64).map_err(|_| {
                DiskOsError::InvalidJob("hash_join build side over 4 billion rows".into())
            })?;
            let row = rows.row(r);
            let key = row.as_ref();
            let cost = key.len() as u64 + ENTRY_OVERHEAD_BYTES;
            match self.table.get_mut(key) {
                Some(v) => v.push(index),
                None => {
                    self.table.insert(key.into(), vec![index]);
                }
            }
            self.charge(cost, "hash table")?;
        }
        self.build_rows += batch.num_rows() as u64;
        self.build_batches.push(batch.clone());
        Ok(())
    }

    fn seal_build(&mut self) -> Result<()> {
        if self.build.is_none() {
            let all = concat_batches(&self.build_schema, &self.build_batches)
                .map_err(arrow_err("build side"))?;
            self.build_batches.clear();
            self.build = Some(all);
        }
        Ok(())
    }

    /// Emits the matches of `batch`, [`OUTPUT_ROWS`] pairs at a time (a key matching many
    /// build rows never makes one huge batch); stops once the emitter is full.
    fn probe(&mut self, batch: &RecordBatch, out: &mut Emitter) -> Result<()> {
        self.seal_build()?;
        let arrays = evaluate_all(&self.probe_keys, batch)?;
        let rows = self
            .converter
            .convert_columns(&arrays)
            .map_err(arrow_err("join keys"))?;
        let (mut build_idx, mut probe_idx) = (Vec::new(), Vec::new());
        for r in 0..batch.num_rows() {
            if arrays.iter().any(|a| a.is_null(r)) {
                continue;
            }
            let Some(matches) = self.table.get(rows.row(r).as_ref()) else {
                continue;
            };
            let mut rest: &[u32] = matches;
            while !rest.is_empty() {
                let (now, later) = rest.split_at((OUTPUT_ROWS - build_idx.len()).min(rest.len()));
                build_idx.extend_from_slice(now);
                probe_idx.extend(std::iter::repeat_n(r as u64, now.len()));
                rest = later;
                if build_idx.len() == OUTPUT_ROWS {
                    self.emit_pairs(batch, &mut build_idx, &mut probe_idx, out)?;
                    if out.overflow().is_some() {
                        return Ok(()); // the call fails with the overflow
                    }
                }
            }
        }
        self.emit_pairs(batch, &mut build_idx, &mut probe_idx, out)
    }

    /// Emits the joined rows of the pairs (build row, probe row) collected so far.
    fn emit_pairs(
        &self,
        batch: &RecordBatch,
        build_idx: &mut Vec<u32>,
        probe_idx: &mut Vec<u64>,
        out: &mut Emitter,
    ) -> Result<()> {
        if build_idx.is_empty() {
            return Ok(());
        }
        let build = self.build.as_ref().expect("sealed before probing");
        let (b, p) = (
            UInt32Array::from(std::mem::take(build_idx)),
            UInt64Array::from(std::mem::take(probe_idx)),
        );
        let mut columns: Vec<ArrayRef> = build
            .columns()
            .iter()
            .map(|c| take(c, &b, None))
            .collect::<std::result::Result<_, _>>()
            .map_err(arrow_err("join output"))?;
        for c in batch.columns() {
            columns.push(take(c, &p, None).map_err(arrow_err("join output"))?);
        }
        out.emit(
            0,
            RecordBatch::try_new(self.schema.clone(), columns).map_err(arrow_err("join output"))?,
        );
        Ok(())
    }
}

/// Build columns then probe columns; a name on both sides is refused.
fn joined_schema(build: &SchemaRef, probe: &SchemaRef) -> Result<SchemaRef> {
    let mut fields: Vec<Field> = build.fields().iter().map(|f| f.as_ref().clone()).collect();
    for f in probe.fields() {
        if build.field_with_name(f.name()).is_ok() {
            return Err(DiskOsError::InvalidJob(format!(
                "column `{}` is on both sides of the join; rename one with a select stage",
                f.name()
            )));
        }
        fields.push(f.as_ref().clone());
    }
    Ok(Arc::new(Schema::new(fields)))
}

impl Disklet for HashJoin {
    fn name(&self) -> &'static str {
        "hash_join"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn next_input(&self) -> NextInput {
        if self.build.is_none() {
            NextInput::Input(0)
        } else {
            NextInput::Input(1)
        }
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        match input.input {
            0 if self.build.is_none() => self.add_build(input.batch),
            0 => Err(DiskOsError::InvalidJob(
                "hash_join got build rows after the build input ended".into(),
            )),
            _ => self.probe(input.batch, out),
        }
    }
    fn input_ended(&mut self, input: usize, _out: &mut Emitter) -> Result<()> {
        if input == 0 {
            self.seal_build()?;
        }
        Ok(())
    }
    fn finish(&mut self, _out: &mut Emitter) -> Result<()> {
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.used_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Int64Type};
    use datafusion::prelude::col;
    use datafusion_proto::bytes::Serializeable;

    fn key(name: &str) -> ExprBytes {
        ExprBytes(col(name).to_bytes().unwrap().to_vec())
    }

    fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
        Arc::new(Schema::new(
            fields
                .iter()
                .map(|(n, t)| Field::new(*n, t.clone(), true))
                .collect::<Vec<_>>(),
        ))
    }

    #[test]
    fn joins_like_a_nested_loop() {
        let b = schema(&[("k", DataType::Int64), ("name", DataType::Utf8)]);
        let p = schema(&[("pk", DataType::Int64), ("v", DataType::Int64)]);
        let mut j = HashJoin::new(
            &[key("k")],
            &[key("pk")],
            &[b.clone(), p.clone()],
            1 << 20,
            &ExprPlanner::default(),
        )
        .unwrap();
        let build_k = vec![Some(1), Some(2), Some(2), None, Some(5)];
        let build = RecordBatch::try_new(
            b.clone(),
            vec![
                Arc::new(Int64Array::from(build_k.clone())),
                Arc::new(StringArray::from(vec!["a", "b", "c", "d", "e"])),
            ],
        )
        .unwrap();
        let probe_k = vec![Some(2), Some(3), None, Some(1), Some(2)];
        let probe = RecordBatch::try_new(
            p.clone(),
            vec![
                Arc::new(Int64Array::from(probe_k.clone())),
                Arc::new(Int64Array::from(vec![10, 20, 30, 40, 50])),
            ],
        )
        .unwrap();
        let mut out = Emitter::new(1);
        assert_eq!(j.next_input(), NextInput::Input(0));
        j.process(
            &InputBuffer {
                batch: &build,
                position: 0,
                input: 0,
            },
            &mut out,
        )
        .unwrap();
        j.input_ended(0, &mut out).unwrap();
        assert_eq!(j.next_input(), NextInput::Input(1));
        j.process(
            &InputBuffer {
                batch: &probe,
                position: 0,
                input: 1,
            },
            &mut out,
        )
        .unwrap();
        j.finish(&mut out).unwrap();
        let mut got: Vec<(i64, i64)> = Vec::new();
        for batch in out.take_outputs().remove(0) {
            let (k, v) = (
                batch.column(0).as_primitive::<Int64Type>(),
                batch.column(3).as_primitive::<Int64Type>(),
            );
            got.extend((0..batch.num_rows()).map(|r| (k.value(r), v.value(r))));
        }
        got.sort();
        // The reference: a nested loop over the same rows, NULL keys never equal.
        let mut expected = Vec::new();
        for bk in build_k.iter().flatten() {
            for (pk, v) in probe_k.iter().zip([10, 20, 30, 40, 50]) {
                if *pk == Some(*bk) {
                    expected.push((*bk, v));
                }
            }
        }
        expected.sort();
        assert_eq!(got, expected);
    }

    /// One key matching 10 000 build rows, probed 100 times: a million joined rows. They come
    /// in batches of at most OUTPUT_ROWS; a capped emitter stops the flood at its cap, charged
    /// to the job, and the call fails typed.
    #[test]
    fn a_fan_out_flood_is_emitted_in_pieces_and_stopped_at_the_cap() {
        let b = schema(&[("k", DataType::Int64)]);
        let p = schema(&[("pk", DataType::Int64)]);
        let build = RecordBatch::try_new(
            b.clone(),
            vec![Arc::new(Int64Array::from(vec![7i64; 10_000]))],
        )
        .unwrap();
        let probe =
            RecordBatch::try_new(p.clone(), vec![Arc::new(Int64Array::from(vec![7i64; 100]))])
                .unwrap();
        let run = |out: &mut Emitter| {
            let mut j = HashJoin::new(
                &[key("k")],
                &[key("pk")],
                &[b.clone(), p.clone()],
                1 << 20,
                &ExprPlanner::default(),
            )
            .unwrap();
            j.process(
                &InputBuffer {
                    batch: &build,
                    position: 0,
                    input: 0,
                },
                out,
            )
            .unwrap();
            j.input_ended(0, out).unwrap();
            j.process(
                &InputBuffer {
                    batch: &probe,
                    position: 0,
                    input: 1,
                },
                out,
            )
            .unwrap();
        };
        let mut free = Emitter::new(1);
        run(&mut free);
        let batches = free.take_outputs().remove(0);
        assert!(batches.iter().all(|b| b.num_rows() <= OUTPUT_ROWS));
        assert_eq!(
            batches.iter().map(|b| b.num_rows()).sum::<usize>(),
            1_000_000
        );
        let account = Arc::new(crate::memory::Account::default());
        let cap = 1 << 20;
        let mut capped = Emitter::capped(1, cap, &account);
        run(&mut capped);
        let err = capped.overflow().expect("the flood overflowed");
        assert!(
            matches!(err, DiskOsError::BufferExceeded { cap_bytes, .. } if cap_bytes == cap),
            "{err}"
        );
        assert!(
            account.peak() <= cap,
            "peak {} over the cap {cap}",
            account.peak()
        );
        drop(capped);
        assert_eq!(account.in_use(), 0, "a dropped emitter returns its charge");
    }

    #[test]
    fn refusals_are_typed() {
        let b = schema(&[("k", DataType::Int64)]);
        let p = schema(&[("k", DataType::Int64)]);
        let planner = ExprPlanner::default();
        let e = HashJoin::new(
            &[key("k")],
            &[key("k")],
            &[b.clone(), p.clone()],
            1 << 20,
            &planner,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("both sides"), "{e}");
        let s = schema(&[("s", DataType::Utf8)]);
        let e = HashJoin::new(&[key("k")], &[key("s")], &[b.clone(), s], 1 << 20, &planner)
            .err()
            .unwrap();
        assert!(e.to_string().contains("different types"), "{e}");
        // A build side larger than scratch fails, typed.
        let q = schema(&[("q", DataType::Int64)]);
        let mut j =
            HashJoin::new(&[key("k")], &[key("q")], &[b.clone(), q], 4096, &planner).unwrap();
        let big = RecordBatch::try_new(b, vec![Arc::new(Int64Array::from_iter_values(0..10_000))])
            .unwrap();
        let e = j
            .process(
                &InputBuffer {
                    batch: &big,
                    position: 0,
                    input: 0,
                },
                &mut Emitter::new(1),
            )
            .err()
            .unwrap();
        assert!(
            matches!(
                e,
                DiskOsError::ScratchExceeded {
                    disklet: "hash_join",
                    ..
                }
            ),
            "{e}"
        );
    }
}
