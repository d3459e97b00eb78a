//! `join.merge_join`: the merge step of a sort-merge join. Two inputs, each sorted by its key
//! (the `merge` of each relation's runs: uysal's "heap of the heads of the sorted runs for each
//! relation"); the disklet steps through both with a pair of loops, holding only the current
//! buffer of each side plus the right side's rows of the current key (in scratch).
use crate::disklet_util::{Params, invalid, scratch_exceeded};
use adisk_core::stats::batch_bytes;
use adisk_diskos::Result;
use adisk_diskos::apps::AppStage;
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer, NextInput};
use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::collections::VecDeque;
use std::sync::Arc;

/// Builds the join's disklet.
///
/// # Errors
/// Unknown disklet, inputs without a `key` UInt32 column, wrong wiring.
pub fn build(stage: &AppStage<'_>) -> Result<Box<dyn Disklet>> {
    let params = Params::new(stage)?;
    if stage.disklet != "merge_join" {
        return Err(invalid(format!(
            "the join has no disklet `{}`",
            stage.disklet
        )));
    }
    params.shape(2, 1)?;
    let key = |s: &Schema| {
        s.index_of("key")
            .ok()
            .filter(|i| s.field(*i).data_type() == &DataType::UInt32)
            .ok_or_else(|| invalid("join.merge_join: both inputs need a UInt32 `key` column"))
    };
    let keys = [key(&stage.inputs[0])?, key(&stage.inputs[1])?];
    let fields: Vec<Field> = [("r_", &stage.inputs[0]), ("s_", &stage.inputs[1])]
        .iter()
        .flat_map(|(prefix, s)| {
            s.fields().iter().map(move |f| {
                Field::new(
                    format!("{prefix}{}", f.name()),
                    f.data_type().clone(),
                    f.is_nullable(),
                )
            })
        })
        .collect();
    Ok(Box::new(MergeJoin {
        keys,
        sides: [Side::default(), Side::default()],
        group: Vec::new(),
        group_key: None,
        collecting: None,
        group_bytes: 0,
        scratch_granted: stage.scratch_bytes,
        schema: Arc::new(Schema::new(fields)),
        pending: VecDeque::new(),
        pending_bytes: 0,
        cross: None,
        wanted: Some(0),
        paused: false,
    }))
}

/// One input: its buffers not yet consumed, the next row of the first.
#[derive(Default)]
struct Side {
    buffers: VecDeque<RecordBatch>,
    next: usize,
    ended: bool,
}

impl Side {
    fn key(&self, column: usize) -> Option<u32> {
        let b = self.buffers.front()?;
        Some(
            b.column(column)
                .as_any()
                .downcast_ref::<UInt32Array>()?
                .value(self.next),
        )
    }
    fn advance(&mut self) {
        self.next += 1;
        if self
            .buffers
            .front()
            .is_some_and(|b| self.next >= b.num_rows())
        {
            self.buffers.pop_front();
            self.next = 0;
        }
    }
    fn bytes(&self) -> u64 {
        self.buffers.iter().map(batch_bytes).sum()
    }
}

/// The merge join.
struct MergeJoin {
    keys: [usize; 2],
    sides: [Side; 2],
    /// Right rows of `group_key` (the right side's equal-key group), held while left rows of
    /// that key stream past.
    group: Vec<RecordBatch>,
    group_key: Option<u32>,
    /// The key whose right rows are being collected (the group may go on in the next buffer).
    collecting: Option<u32>,
    group_bytes: u64,
    scratch_granted: u64,
    schema: SchemaRef,
    /// Output not yet emitted (the emitter was full), and its bytes.
    pending: VecDeque<RecordBatch>,
    pending_bytes: u64,
    /// The cross product being emitted.
    cross: Option<Cross>,
    /// The input the join waits for (None: either).
    wanted: Option<usize>,
    /// Output stepping paused for want of room.
    paused: bool,
}

/// What the join needs to go on.
enum Want {
    Input(usize),
    Nothing,
    /// Output piled up: emit it before going on.
    Pause,
}

impl MergeJoin {
    /// Steps through both sides as far as the buffers held allow.
    fn step(&mut self) -> Result<Want> {
        loop {
            if let Some(k) = self.collecting
                && !self.collect_group(k)?
            {
                return Ok(Want::Input(1));
            }
            if self.cross.is_some() {
                if !self.cross_pieces()? {
                    return Ok(Want::Pause);
                }
                continue;
            }
            if let Some(g) = self.group_key {
                match self.sides[0].key(self.keys[0]) {
                    Some(k) if k == g => {
                        self.start_cross(g);
                        continue;
                    }
                    None if !self.sides[0].ended => return Ok(Want::Input(0)),
                    _ => {
                        self.group.clear();
                        self.group_key = None;
                        self.group_bytes = 0;
                    }
                }
            }
            let (l, r) = (
                self.sides[0].key(self.keys[0]),
                self.sides[1].key(self.keys[1]),
            );
            match (l, r) {
                (None, _) if !self.sides[0].ended => return Ok(Want::Input(0)),
                (_, None) if !self.sides[1].ended => return Ok(Want::Input(1)),
                (None, _) | (_, None) => return Ok(Want::Nothing),
                (Some(l), Some(r)) if l < r => self.sides[0].advance(),
                (Some(l), Some(r)) if l > r => self.sides[1].advance(),
                (Some(k), Some(_)) => {
                    if !self.collect_group(k)? {
                        return Ok(Want::Input(1));
                    }
                }
            }
        }
    }

    /// Moves the right side's rows of key `k` into the group; false if the group may go on
    /// in a buffer not yet received.
    fn collect_group(&mut self, k: u32) -> Result<bool> {
        let key = self.keys[1];
        loop {
            let side = &mut self.sides[1];
            let Some(b) = side.buffers.front() else {
                if side.ended {
                    break;
                }
                self.collecting = Some(k);
                return Ok(false);
            };
            let keys = b
                .column(key)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .expect("checked");
            let end = (side.next..b.num_rows())
                .find(|i| keys.value(*i) != k)
                .unwrap_or(b.num_rows());
            let rows = b.slice(side.next, end - side.next);
            self.group_bytes += batch_bytes(&rows);
            self.group.push(rows);
            if self.group_bytes + side.bytes() > self.scratch_granted {
                return Err(scratch_exceeded(
                    "join_merge",
                    self.scratch_granted,
                    format!(
                        "the rows of key {k} and the buffers held take {} bytes",
                        self.group_bytes + side.bytes()
                    ),
                ));
            }
            if end < b.num_rows() {
                side.next = end;
                break;
            }
            side.buffers.pop_front();
            side.next = 0;
        }
        self.collecting = None;
        self.group_key = Some(k);
        Ok(true)
    }

    /// Takes the left side's rows of key `g` in its current buffer as the next cross product
    /// with the group (emitted piece by piece by [`MergeJoin::cross_pieces`]).
    fn start_cross(&mut self, g: u32) {
        let side = &mut self.sides[0];
        let b = side.buffers.front().expect("a key was read").clone();
        let keys = b
            .column(self.keys[0])
            .as_any()
            .downcast_ref::<UInt32Array>()
            .expect("checked");
        let end = (side.next..b.num_rows())
            .find(|i| keys.value(*i) != g)
            .unwrap_or(b.num_rows());
        let left = b.slice(side.next, end - side.next);
        for _ in side.next..end {
            side.advance();
        }
        self.cross = Some(Cross { left, next: 0 });
    }

    /// Emits pieces of the current cross product (left rows × the group, in left-row order)
    /// until it is done or the output held reaches [`PAUSE_BYTES`]; true when it is done.
    /// Each piece covers at most [`PIECE_BYTES`] of output, whatever the key's skew.
    fn cross_pieces(&mut self) -> Result<bool> {
        let group = self.group_batch()?;
        let m = group.num_rows() as u64;
        let Some(cross) = self.cross.as_mut() else {
            return Ok(true);
        };
        let total = cross.left.num_rows() as u64 * m;
        let row_bytes = (batch_bytes(&cross.left) / cross.left.num_rows().max(1) as u64)
            + self.group_bytes / m.max(1);
        let per_piece = (PIECE_BYTES / row_bytes.max(1)).max(1);
        while cross.next < total {
            if self.pending_bytes > PAUSE_BYTES {
                return Ok(false);
            }
            let end = (cross.next + per_piece).min(total);
            let out = cross_piece(&self.schema, &cross.left, &group, cross.next..end)?;
            cross.next = end;
            self.pending_bytes += batch_bytes(&out);
            self.pending.push_back(out);
        }
        self.cross = None;
        Ok(true)
    }

    /// The group's rows as one batch (collected from several buffers at most once per key).
    fn group_batch(&mut self) -> Result<RecordBatch> {
        if self.group.len() != 1 {
            let schema = match self.group.first() {
                Some(b) => b.schema(),
                None => return Err(invalid("join.merge_join: an empty key group")),
            };
            let one = arrow::compute::concat_batches(&schema, &self.group)
                .map_err(|e| invalid(e.to_string()))?;
            self.group = vec![one];
        }
        Ok(self.group[0].clone())
    }

    /// Emits what is pending as far as the emitter has room, cutting a batch larger than
    /// the room left (so a call's allowance smaller than a piece still makes progress).
    fn flush(&mut self, out: &mut Emitter) {
        while let Some(b) = self.pending.front() {
            let bytes = batch_bytes(b);
            if bytes > out.room() {
                let rows = (b.num_rows() as u64 * out.room() / bytes.max(1)) as usize;
                if rows == 0 {
                    return;
                }
                let head = b.slice(0, rows);
                let rest = b.slice(rows, b.num_rows() - rows);
                let head_bytes = bytes - batch_bytes(&rest);
                self.pending_bytes -= head_bytes;
                self.pending[0] = rest;
                out.emit(0, head);
                return;
            }
            let b = self.pending.pop_front().expect("front exists");
            self.pending_bytes -= bytes;
            out.emit(0, b);
        }
    }

    /// Emits what is pending, then steps on until input is needed, the inputs ended, or
    /// output piles up again.
    fn run(&mut self, out: &mut Emitter) -> Result<()> {
        loop {
            self.flush(out);
            if !self.pending.is_empty() {
                self.paused = true;
                return Ok(());
            }
            match self.step()? {
                Want::Input(i) => self.wanted = Some(i),
                Want::Nothing => self.wanted = None,
                Want::Pause => continue,
            }
            self.paused = false;
            self.flush(out);
            self.paused = !self.pending.is_empty();
            return Ok(());
        }
    }
}

/// Output held before the join stops to hand it out.
const PAUSE_BYTES: u64 = 1 << 20;
/// Output of one piece of a key's cross product.
const PIECE_BYTES: u64 = 64 << 10;

/// A cross product under way: `left` (rows of one key) × the group; pair `next` is left row
/// `next / m` with group row `next % m` (m: the group's rows).
struct Cross {
    left: RecordBatch,
    next: u64,
}

/// Output rows for pairs `pairs` of `left` × `group` (see [`Cross`]).
fn cross_piece(
    schema: &SchemaRef,
    left: &RecordBatch,
    group: &RecordBatch,
    pairs: std::ops::Range<u64>,
) -> Result<RecordBatch> {
    let m = group.num_rows() as u64;
    let l_idx = UInt64Array::from_iter_values(pairs.clone().map(|p| p / m));
    let r_idx = UInt64Array::from_iter_values(pairs.map(|p| p % m));
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (batch, idx) in [(left, &l_idx), (group, &r_idx)] {
        for c in batch.columns() {
            columns.push(
                arrow::compute::take(c.as_ref(), idx, None).map_err(|e| invalid(e.to_string()))?,
            );
        }
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| invalid(e.to_string()))
}

impl Disklet for MergeJoin {
    fn name(&self) -> &'static str {
        "join_merge"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn next_input(&self) -> NextInput {
        self.wanted.map_or(NextInput::Any, NextInput::Input)
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        if input.batch.num_rows() > 0 {
            self.sides[input.input]
                .buffers
                .push_back(adisk_diskos::disklets::compact_views(input.batch.clone()));
        }
        self.run(out)
    }
    fn input_ended(&mut self, input: usize, out: &mut Emitter) -> Result<()> {
        self.sides[input].ended = true;
        self.run(out)
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.run(out)
    }
    fn has_more_output(&self) -> bool {
        self.paused
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.run(out)
    }
    fn scratch_bytes(&self) -> u64 {
        let cross = self.cross.as_ref().map_or(0, |c| batch_bytes(&c.left));
        self.sides[0].bytes()
            + self.sides[1].bytes()
            + self.group_bytes
            + self.pending_bytes
            + cross
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(keys: &[u32], tag: u32) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("key", DataType::UInt32, false),
            Field::new("v", DataType::UInt32, false),
        ]));
        let v: Vec<u32> = (0..keys.len() as u32).map(|i| tag * 1000 + i).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from(keys.to_vec())),
                Arc::new(UInt32Array::from(v)),
            ],
        )
        .unwrap()
    }

    /// Feeds both sides in buffers of `chunk` rows as the disklet asks, each call's output
    /// capped at `cap` bytes as under DiskOS; returns (l.v, r.v) pairs.
    fn join_capped(l: &RecordBatch, r: &RecordBatch, chunk: usize, cap: u64) -> Vec<(u32, u32)> {
        let inputs = [l.schema(), r.schema()];
        let params = serde_json::Value::Null;
        let stage = AppStage {
            app: "join",
            disklet: "merge_join",
            params: &params,
            inputs: &inputs,
            ports: 1,
            scratch_bytes: 1 << 20,
        };
        let mut d = build(&stage).unwrap();
        let account = std::sync::Arc::new(adisk_diskos::memory::Account::default());
        let emitter = || Emitter::capped(1, cap, &account);
        let sides = [l, r];
        let mut next = [0usize, 0usize];
        let mut ended = [false, false];
        let mut got = Vec::new();
        let collect = |out: &mut Emitter, got: &mut Vec<RecordBatch>| {
            got.extend(out.take_outputs().remove(0))
        };
        let mut batches = Vec::new();
        loop {
            let i = match d.next_input() {
                NextInput::Input(i) if !ended[i] => i,
                _ => (0..2).find(|i| !ended[*i]).unwrap_or(2),
            };
            if i == 2 {
                break;
            }
            let mut out = emitter();
            if next[i] >= sides[i].num_rows() {
                ended[i] = true;
                d.input_ended(i, &mut out).unwrap();
            } else {
                let n = chunk.min(sides[i].num_rows() - next[i]);
                let b = sides[i].slice(next[i], n);
                d.process(
                    &InputBuffer {
                        batch: &b,
                        position: next[i] as u64,
                        input: i,
                    },
                    &mut out,
                )
                .unwrap();
                next[i] += n;
            }
            assert!(out.overflow().is_none());
            collect(&mut out, &mut batches);
            let mut calls = 0;
            while d.has_more_output() {
                let mut out = emitter();
                d.more_output(&mut out).unwrap();
                assert!(out.overflow().is_none());
                let before = batches.len();
                collect(&mut out, &mut batches);
                assert!(
                    batches.len() > before,
                    "a call for more output emitted nothing"
                );
                calls += 1;
                assert!(calls < 1_000_000);
            }
        }
        let mut out = emitter();
        d.finish(&mut out).unwrap();
        collect(&mut out, &mut batches);
        assert!(!d.has_more_output());
        for b in &batches {
            let lv = b.column(1).as_any().downcast_ref::<UInt32Array>().unwrap();
            let rv = b.column(3).as_any().downcast_ref::<UInt32Array>().unwrap();
            got.extend((0..b.num_rows()).map(|i| (lv.value(i), rv.value(i))));
        }
        got.sort_unstable();
        got
    }

    fn join(l: &RecordBatch, r: &RecordBatch, chunk: usize) -> Vec<(u32, u32)> {
        join_capped(l, r, chunk, 1 << 20)
    }

    fn nested_loop(lk: &[u32], rk: &[u32]) -> Vec<(u32, u32)> {
        let mut expected = Vec::new();
        for (i, a) in lk.iter().enumerate() {
            for (j, b) in rk.iter().enumerate() {
                if a == b {
                    expected.push((1000 + i as u32, 2000 + j as u32));
                }
            }
        }
        expected.sort_unstable();
        expected
    }

    /// One key for every row: each left buffer's cross product with the group is far larger
    /// than a call's output allowance (it used to be one batch that never fit, forever).
    #[test]
    fn a_single_key_cross_product_streams_in_pieces() {
        let lk = vec![7u32; 450];
        let rk = vec![7u32; 450];
        let (l, r) = (side(&lk, 1), side(&rk, 2));
        let got = join_capped(&l, &r, 200, 48 << 10);
        assert_eq!(got.len(), 450 * 450);
        assert_eq!(got, nested_loop(&lk, &rk));
        // An allowance smaller than one piece still makes progress (pieces are cut).
        let small = join_capped(&side(&lk[..60], 1), &side(&rk[..60], 2), 7, 1000);
        assert_eq!(small, nested_loop(&lk[..60], &rk[..60]));
    }

    #[test]
    fn merge_join_equals_a_nested_loop_join() {
        let lk = [1, 1, 2, 3, 3, 3, 5, 7, 7, 9, 9, 9, 9];
        let rk = [0, 1, 3, 3, 4, 7, 7, 7, 9, 10];
        let (l, r) = (side(&lk, 1), side(&rk, 2));
        let expected = nested_loop(&lk, &rk);
        for chunk in [1, 2, 3, 5, 100] {
            assert_eq!(join(&l, &r, chunk), expected, "buffers of {chunk} rows");
        }
        assert!(join(&side(&[], 1), &r, 2).is_empty());
    }
}
