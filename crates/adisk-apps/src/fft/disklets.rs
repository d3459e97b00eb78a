//! The 2-D FFT's disklets (application `fft`):
//!
//! * `rows` — pass 1 sender: assembles the matrix rows from its element stream, FFTs each row
//!   and cuts it into one piece per disk (the disk's column block), column `target` naming it.
//! * `runs` — pass 1 receiver: buffers the pieces it receives up to `cap_bytes` and hands each
//!   buffer-full out as a run of column segments, numbered in column `run` (a split result
//!   writes every run to its own partition, on this disk).
//! * `columns` — pass 2: k-way merges the runs (one input each) into whole columns, FFTs each
//!   column and emits its elements `X[k][l]` (`part` = 0, for the split result).
//!
//! Each keeps its state within its scratch grant (checked at `init` and as it runs) and hands
//! out output larger than one call's allowance over `more_output` calls.
use super::kernel::{ColumnMerger, FftError, PieceBuffer, RowFft, RunCursor, Step, TransposePlan};
use super::layout::{self, ElementRows, ListRows};
use crate::disklet_util::{Params, invalid, scratch_exceeded};
use adisk_core::stats::batch_bytes;
use adisk_diskos::Result;
use adisk_diskos::apps::AppStage;
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer, NextInput};
use arrow::array::{Float64Array, RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;
use rustfft::num_complex::Complex64;
use std::collections::VecDeque;
use std::ops::Range;

/// Builds the fft's disklet `name`.
///
/// # Errors
/// Unknown disklet, bad parameters, inputs of another layout, a scratch grant too small.
pub fn build(stage: &AppStage<'_>) -> Result<Box<dyn Disklet>> {
    let params = Params::new(stage)?;
    match stage.disklet {
        "rows" => Rows::build(stage, &params),
        "runs" => RunsDisklet::build(stage, &params),
        "columns" => Columns::build(stage, &params),
        other => Err(invalid(format!("the fft has no disklet `{other}`"))),
    }
}

fn fft_err(e: FftError) -> adisk_diskos::DiskOsError {
    invalid(format!("fft: {e}"))
}

/// The matrix shape and the disk's place, common to every disklet's parameters.
struct Shape {
    rows: u64,
    cols: u64,
    disks: usize,
}

impl Shape {
    fn read(params: &Params<'_>) -> Result<Self> {
        let matrix = super::kernel::GenParams {
            rows: params.u64("rows")?,
            cols: params.u64("cols")?,
            seed: 0,
        };
        matrix.validate().map_err(fft_err)?;
        let disks = usize::try_from(params.u64("disks")?)
            .ok()
            .filter(|d| (1..=1024).contains(d))
            .ok_or_else(|| invalid("fft: `disks` must be 1 to 1024"))?;
        Ok(Shape {
            rows: matrix.rows,
            cols: matrix.cols,
            disks,
        })
    }

    /// The columns disk `disk` owns.
    fn cols_of(&self, disk: usize) -> Result<Range<u64>> {
        super::kernel::block_range(self.cols, self.disks, disk).map_err(fft_err)
    }
}

fn positive(params: &Params<'_>, key: &str) -> Result<usize> {
    usize::try_from(params.u64(key)?)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| invalid(format!("fft: `{key}` must be at least 1")))
}

/// Output held until the emitter takes it: whole batches, or slices as room allows.
///
/// What one call emits is charged to the job on top of the scratch charged after the call
/// before, and the grant counts two buffers per port for it: every call emits at most one
/// buffer ([`emit_budget`]), the rest in `more_output` calls.
#[derive(Default)]
struct Outbox {
    pending: VecDeque<RecordBatch>,
    bytes: u64,
}

impl Outbox {
    fn push(&mut self, batch: RecordBatch) {
        if batch.num_rows() > 0 {
            self.bytes += batch_bytes(&batch);
            self.pending.push_back(batch);
        }
    }

    fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Emits whole batches while they fit in `budget` (taken from it) and the emitter's room.
    /// Producers make every batch at most one batch size, so a fresh call always emits one.
    /// (Batches are never sliced: a slice of a list column is charged as its whole values.)
    fn drain(&mut self, out: &mut Emitter, budget: &mut u64) {
        while let Some(front) = self.pending.front() {
            let bytes = batch_bytes(front);
            if bytes > out.room().min(*budget) {
                return;
            }
            let front = self.pending.pop_front().expect("front exists");
            self.bytes -= bytes;
            *budget -= bytes;
            out.emit(0, front);
        }
    }
}

/// Bytes one call may emit: one stream buffer (two batches).
fn emit_budget(batch_bytes: u64) -> u64 {
    2 * batch_bytes
}

fn check_scratch(disklet: &'static str, needed: u64, granted: u64, what: &str) -> Result<()> {
    if needed > granted {
        return Err(scratch_exceeded(
            disklet,
            granted,
            format!("{what} needs {needed} bytes"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// rows
// ---------------------------------------------------------------------------------------------

/// Pass 1 sender: elements → whole rows → row FFT → one piece per target disk.
struct Rows {
    shape: Shape,
    /// The row being assembled (`cols` values) and its index; `filled` values so far.
    current: Option<u64>,
    row: Vec<Complex64>,
    filled: u64,
    fft: RowFft,
    built: ListRows,
    batch_bytes: u64,
    outbox: Outbox,
    granted: u64,
    rows_done: u64,
    schema: SchemaRef,
}

impl Rows {
    fn build(stage: &AppStage<'_>, params: &Params<'_>) -> Result<Box<dyn Disklet>> {
        params.shape(1, 1)?;
        layout::check_columns(&stage.inputs[0], "matrix", &layout::element_columns())?;
        let shape = Shape::read(params)?;
        let batch_bytes = params.u64("batch_bytes")?.max(1);
        let row_bytes = shape.cols * 16;
        // The row, the FFT's scratch and plan, a batch being built (≤ a batch and a row) and
        // the pieces of one input buffer (≤ two batches) waiting to be emitted.
        let needed = row_bytes * 5 + 4 * batch_bytes;
        check_scratch("fft_rows", needed, stage.scratch_bytes, "one row")?;
        Ok(Box::new(Rows {
            row: vec![Complex64::default(); shape.cols as usize],
            shape,
            current: None,
            filled: 0,
            fft: RowFft::new(),
            built: ListRows::new(3),
            batch_bytes,
            outbox: Outbox::default(),
            granted: stage.scratch_bytes,
            rows_done: 0,
            schema: layout::pieces_schema(),
        }))
    }

    /// Places element `(r, c)`; completes the row when it is the last one.
    fn place(&mut self, r: u64, c: u64, v: Complex64) -> Result<()> {
        if r >= self.shape.rows || c >= self.shape.cols {
            return Err(invalid(format!(
                "fft.rows: element ({r}, {c}) outside the {} x {} matrix",
                self.shape.rows, self.shape.cols
            )));
        }
        match self.current {
            Some(cur) if cur == r => {}
            Some(cur) => {
                return Err(invalid(format!(
                    "fft.rows: row {cur} ended after {} of {} columns",
                    self.filled, self.shape.cols
                )));
            }
            None => self.current = Some(r),
        }
        if c != self.filled {
            return Err(invalid(format!(
                "fft.rows: row {r}: column {c} arrived where {} was expected (rows must be stored whole, columns ascending)",
                self.filled
            )));
        }
        self.row[c as usize] = v;
        self.filled += 1;
        if self.filled == self.shape.cols {
            self.complete(r)?;
        }
        Ok(())
    }

    /// FFTs the finished row and adds its pieces.
    fn complete(&mut self, r: u64) -> Result<()> {
        self.fft.process(&mut self.row);
        let pieces = super::kernel::split_row(r, &self.row, self.shape.disks).map_err(fft_err)?;
        for (target, p) in pieces {
            let bytes = (p.values.len() * 16 + 20) as u64;
            if !self.built.is_empty() && self.built.bytes() + bytes > self.batch_bytes {
                let batch = self.built.take(&self.schema)?;
                self.outbox.push(batch);
            }
            self.built
                .push(&[target as u32, r as u32, p.col_start as u32], &p.values);
        }
        self.current = None;
        self.filled = 0;
        self.rows_done += 1;
        Ok(())
    }
}

impl Disklet for Rows {
    fn name(&self) -> &'static str {
        "fft_rows"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let b = input.batch;
        let row = layout::column::<UInt32Array>(b, "row")?;
        let col = layout::column::<UInt32Array>(b, "col")?;
        let re = layout::column::<Float64Array>(b, "re")?;
        let im = layout::column::<Float64Array>(b, "im")?;
        for i in 0..b.num_rows() {
            let v = Complex64::new(re.value(i), im.value(i));
            self.place(u64::from(row.value(i)), u64::from(col.value(i)), v)?;
        }
        check_scratch(
            "fft_rows",
            self.scratch_bytes(),
            self.granted,
            "held pieces",
        )?;
        self.outbox.drain(out, &mut emit_budget(self.batch_bytes));
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        if let Some(r) = self.current {
            return Err(invalid(format!(
                "fft.rows: row {r} ended after {} of {} columns",
                self.filled, self.shape.cols
            )));
        }
        if !self.built.is_empty() {
            let batch = self.built.take(&self.schema)?;
            self.outbox.push(batch);
        }
        self.outbox.drain(out, &mut emit_budget(self.batch_bytes));
        Ok(())
    }
    fn has_more_output(&self) -> bool {
        !self.outbox.is_empty()
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.outbox.drain(out, &mut emit_budget(self.batch_bytes));
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.shape.cols * 16
            + self.fft.state_bytes() as u64
            + self.built.bytes()
            + self.outbox.bytes
    }
    fn flushes(&self) -> u64 {
        self.rows_done
    }
}

// ---------------------------------------------------------------------------------------------
// runs
// ---------------------------------------------------------------------------------------------

/// Pass 1 receiver: pieces → bounded runs of column segments (numbered in `run`).
struct RunsDisklet {
    disk: u32,
    cols: Range<u64>,
    rows: u64,
    buffer: PieceBuffer,
    handing: Option<(RunCursor, u32)>,
    waiting: VecDeque<super::kernel::Piece>,
    waiting_bytes: u64,
    finishing: bool,
    finished: bool,
    runs: u32,
    batch_bytes: u64,
    /// Bytes of the largest segment as elements (one more may join a batch at its limit).
    segment_bytes: u64,
    granted: u64,
}

impl RunsDisklet {
    fn build(stage: &AppStage<'_>, params: &Params<'_>) -> Result<Box<dyn Disklet>> {
        params.shape(1, 1)?;
        let columns = layout::list_columns(&["target", "row", "col_start"]);
        layout::check_columns(&stage.inputs[0], "pieces", &columns)?;
        let shape = Shape::read(params)?;
        let disk = params.u64("disk")?;
        let cols = shape.cols_of(usize::try_from(disk).unwrap_or(usize::MAX))?;
        let cap = positive(params, "cap_bytes")?;
        let segment = positive(params, "segment_values")?;
        let batch_bytes = params.u64("batch_bytes")?.max(1);
        let plan = TransposePlan::new(shape.rows, cols.clone(), cap, segment).map_err(fft_err)?;
        // The buffer, the arriving piece, an input buffer's pieces waiting, and a batch of
        // segments being emitted.
        let needed = (cap + plan.piece_bytes()) as u64 + batch_bytes * 4;
        check_scratch("fft_runs", needed, stage.scratch_bytes, "the run buffer")?;
        Ok(Box::new(RunsDisklet {
            disk: disk as u32,
            cols,
            rows: shape.rows,
            buffer: plan.piece_buffer(),
            handing: None,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            finishing: false,
            finished: false,
            runs: 0,
            batch_bytes,
            segment_bytes: (segment * 28) as u64,
            granted: stage.scratch_bytes,
        }))
    }

    fn check_piece(&self, target: u32, p: &super::kernel::Piece) -> Result<()> {
        if target != self.disk || p.cols() != self.cols || p.row >= self.rows {
            return Err(invalid(format!(
                "fft.runs: disk {} (columns {:?}) received a piece for disk {target}, row {}, columns {:?}",
                self.disk,
                self.cols,
                p.row,
                p.cols()
            )));
        }
        Ok(())
    }

    /// Emits segments of the run being handed out while the emitter has room.
    fn hand_out(&mut self, out: &mut Emitter, budget: &mut u64) -> Result<()> {
        let Some((cursor, run)) = &mut self.handing else {
            return Ok(());
        };
        let run = *run;
        loop {
            let limit = self
                .batch_bytes
                .min(out.room().min(*budget).saturating_sub(self.segment_bytes));
            if limit == 0 {
                return Ok(());
            }
            let mut built = ElementRows::new(Some(("run", run)));
            let mut exhausted = false;
            while built.bytes() < limit {
                match cursor.next() {
                    Some(s) => {
                        for (i, v) in s.values.iter().enumerate() {
                            built.push((s.row_start + i as u64) as u32, s.col as u32, *v);
                        }
                    }
                    None => {
                        exhausted = true;
                        break;
                    }
                }
            }
            if !built.is_empty() {
                *budget = budget.saturating_sub(built.bytes());
                out.emit(0, built.take()?);
            }
            if exhausted {
                self.handing = None;
                return Ok(());
            }
        }
    }

    /// Hands out the current run, then buffers the waiting pieces (starting a run whenever
    /// the buffer is full), until the emitter is full or nothing is left; at the end, the last
    /// run.
    fn advance(&mut self, out: &mut Emitter) -> Result<()> {
        let mut budget = emit_budget(self.batch_bytes);
        loop {
            self.hand_out(out, &mut budget)?;
            if self.handing.is_some() {
                return Ok(());
            }
            if let Some(piece) = self.waiting.pop_front() {
                self.waiting_bytes -= piece.byte_size() as u64;
                if let Some(run) = self.buffer.push(piece).map_err(fft_err)? {
                    self.start(run);
                }
                check_scratch(
                    "fft_runs",
                    self.scratch_bytes(),
                    self.granted,
                    "the run buffer",
                )?;
            } else if self.finishing && !self.finished {
                self.finished = true;
                if let Some(run) = self.buffer.finish() {
                    self.start(run);
                }
            } else {
                return Ok(());
            }
        }
    }

    fn start(&mut self, run: super::kernel::Run) {
        self.handing = Some((run.into_cursor(), self.runs));
        self.runs += 1;
    }
}

impl Disklet for RunsDisklet {
    fn name(&self) -> &'static str {
        "fft_runs"
    }
    fn output_schema(&self) -> SchemaRef {
        layout::led_elements_schema("run")
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        for (target, piece) in layout::pieces(input.batch)? {
            self.check_piece(target, &piece)?;
            self.waiting_bytes += piece.byte_size() as u64;
            self.waiting.push_back(piece);
        }
        self.advance(out)
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.finishing = true;
        self.advance(out)
    }
    fn has_more_output(&self) -> bool {
        self.handing.is_some() || !self.waiting.is_empty() || (self.finishing && !self.finished)
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.advance(out)
    }
    fn scratch_bytes(&self) -> u64 {
        let handing = self.handing.as_ref().map_or(0, |(c, _)| c.byte_size());
        (self.buffer.bytes() + handing) as u64 + self.waiting_bytes
    }
    fn flushes(&self) -> u64 {
        u64::from(self.runs)
    }
}

// ---------------------------------------------------------------------------------------------
// columns
// ---------------------------------------------------------------------------------------------

/// Pass 2: k runs → whole columns (ascending) → column FFT → elements `X[k][l]`.
struct Columns {
    merger: ColumnMerger,
    queues: Vec<VecDeque<super::kernel::Segment>>,
    queued_bytes: u64,
    ended: Vec<bool>,
    want: Option<usize>,
    done: bool,
    fft: RowFft,
    built: ElementRows,
    outbox: Outbox,
    batch_bytes: u64,
    segment_values: usize,
    granted: u64,
    columns: u64,
}

impl Columns {
    fn build(stage: &AppStage<'_>, params: &Params<'_>) -> Result<Box<dyn Disklet>> {
        let runs = stage.inputs.len();
        params.shape(runs, 1)?;
        for input in stage.inputs {
            layout::check_columns(input, "run", &layout::element_columns())?;
        }
        let shape = Shape::read(params)?;
        let disk = usize::try_from(params.u64("disk")?).unwrap_or(usize::MAX);
        let cols = shape.cols_of(disk)?;
        let cap = positive(params, "cap_bytes")?;
        let segment = positive(params, "segment_values")?;
        let batch_bytes = params.u64("batch_bytes")?.max(1);
        let plan = TransposePlan::new(shape.rows, cols, cap, segment).map_err(fft_err)?;
        let merger = plan.column_merger(runs).map_err(fft_err)?;
        // Heads + column (cap), an input buffer's segments (two batches) queued per run, the
        // column's FFT (scratch and plan), its elements being built and waiting.
        let column = shape.rows * 16;
        let needed = cap as u64 + runs as u64 * 2 * batch_bytes + 4 * column + 4 * batch_bytes;
        check_scratch("fft_columns", needed, stage.scratch_bytes, "the merge")?;
        let mut c = Columns {
            merger,
            queues: (0..runs).map(|_| VecDeque::new()).collect(),
            queued_bytes: 0,
            ended: vec![false; runs],
            want: None,
            done: false,
            fft: RowFft::new(),
            built: ElementRows::new(Some(("part", 0))),
            outbox: Outbox::default(),
            batch_bytes,
            segment_values: segment,
            granted: stage.scratch_bytes,
            columns: 0,
        };
        c.pump(&mut Emitter::new(1))?;
        Ok(Box::new(c))
    }

    /// Merges as far as the queued segments and the emitter's room allow.
    fn pump(&mut self, out: &mut Emitter) -> Result<()> {
        self.want = None;
        let mut budget = emit_budget(self.batch_bytes);
        loop {
            self.outbox.drain(out, &mut budget);
            if !self.outbox.is_empty() || self.done {
                return Ok(());
            }
            match self.merger.step().map_err(fft_err)? {
                Step::Need(r) => {
                    if let Some(seg) = self.queues[r].pop_front() {
                        self.queued_bytes -= seg.byte_size() as u64;
                        self.merger.feed(r, Some(seg)).map_err(fft_err)?;
                    } else if self.ended[r] {
                        self.merger.feed(r, None).map_err(fft_err)?;
                    } else {
                        self.want = Some(r);
                        return Ok(());
                    }
                }
                Step::Item((l, mut values)) => self.column(l, &mut values)?,
                Step::Done => {
                    self.done = true;
                    if !self.built.is_empty() {
                        let batch = self.built.take()?;
                        self.outbox.push(batch);
                    }
                }
            }
        }
    }

    /// FFTs column `l` and adds its elements.
    fn column(&mut self, l: u64, values: &mut [Complex64]) -> Result<()> {
        self.fft.process(values);
        for (k, v) in values.iter().enumerate() {
            if self.built.bytes() + 28 > self.batch_bytes {
                let batch = self.built.take()?;
                self.outbox.push(batch);
            }
            self.built.push(k as u32, l as u32, *v);
        }
        self.columns += 1;
        check_scratch(
            "fft_columns",
            self.scratch_bytes(),
            self.granted,
            "the merge",
        )
    }
}

impl Disklet for Columns {
    fn name(&self) -> &'static str {
        "fft_columns"
    }
    fn output_schema(&self) -> SchemaRef {
        layout::led_elements_schema("part")
    }
    fn next_input(&self) -> NextInput {
        self.want.map_or(NextInput::Any, NextInput::Input)
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let segs = layout::segments(input.batch, self.segment_values)?;
        let queue = self
            .queues
            .get_mut(input.input)
            .ok_or_else(|| invalid("fft.columns: input out of range"))?;
        for s in segs {
            self.queued_bytes += s.byte_size() as u64;
            queue.push_back(s);
        }
        check_scratch(
            "fft_columns",
            self.scratch_bytes(),
            self.granted,
            "the merge",
        )?;
        self.pump(out)
    }
    fn input_ended(&mut self, input: usize, out: &mut Emitter) -> Result<()> {
        if let Some(e) = self.ended.get_mut(input) {
            *e = true;
        }
        if self.want == Some(input) {
            self.pump(out)?;
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.pump(out)?;
        if !self.done && self.outbox.is_empty() {
            return Err(invalid("fft.columns: the runs ended before every column"));
        }
        Ok(())
    }
    fn has_more_output(&self) -> bool {
        !self.outbox.is_empty() || (!self.done && self.want.is_none())
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.pump(out)
    }
    fn scratch_bytes(&self) -> u64 {
        self.merger.state_bytes() as u64
            + self.queued_bytes
            + self.fft.state_bytes() as u64
            + self.built.bytes()
            + self.outbox.bytes
    }
    fn flushes(&self) -> u64 {
        self.columns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fft::kernel::{GenParams, Generator, fft2_plain, relative_error};
    use crate::fft::layout::{elements_schema, pieces_schema};

    const SCRATCH: u64 = 1 << 20;

    fn stage<'a>(
        name: &'a str,
        params: &'a serde_json::Value,
        inputs: &'a [SchemaRef],
    ) -> AppStage<'a> {
        AppStage {
            app: "fft",
            disklet: name,
            params,
            inputs,
            ports: 1,
            scratch_bytes: SCRATCH,
        }
    }

    /// Feeds `batches` (input, batch) to `d` and collects everything it emits, draining
    /// `more_output` after every call as DiskOS does.
    fn drive(d: &mut dyn Disklet, batches: Vec<(usize, RecordBatch)>) -> Vec<RecordBatch> {
        let mut got = Vec::new();
        let mut collect = |d: &mut dyn Disklet, mut out: Emitter| {
            got.extend(out.take_outputs().remove(0));
            while d.has_more_output() {
                let mut out = Emitter::new(1);
                d.more_output(&mut out).unwrap();
                got.extend(out.take_outputs().remove(0));
            }
        };
        let inputs = batches.iter().map(|(i, _)| *i).max().map_or(0, |m| m + 1);
        for (input, batch) in &batches {
            let mut out = Emitter::new(1);
            let buffer = InputBuffer {
                batch,
                position: 0,
                input: *input,
            };
            d.process(&buffer, &mut out).unwrap();
            assert!(d.scratch_bytes() <= SCRATCH);
            collect(d, out);
        }
        for i in 0..inputs {
            let mut out = Emitter::new(1);
            d.input_ended(i, &mut out).unwrap();
            collect(d, out);
        }
        let mut out = Emitter::new(1);
        d.finish(&mut out).unwrap();
        collect(d, out);
        got
    }

    fn column<'a>(b: &'a RecordBatch, name: &str) -> &'a UInt32Array {
        layout::column::<UInt32Array>(b, name).unwrap()
    }

    #[test]
    fn rows_runs_columns_compute_fft2_across_three_disks() {
        let (rows, cols, disks) = (20u64, 14u64, 3usize);
        let generator = Generator::new(GenParams {
            rows,
            cols,
            seed: 5,
        })
        .unwrap();
        let mut elements = ElementRows::new(None);
        for r in 0..rows {
            for (c, v) in generator.row(r).unwrap().into_iter().enumerate() {
                elements.push(r as u32, c as u32, v);
            }
        }
        let input = elements.take().unwrap();
        let mut got = vec![vec![Complex64::default(); cols as usize]; rows as usize];
        let params = |disk: usize| {
            serde_json::json!({"rows": rows, "cols": cols, "disks": disks, "disk": disk,
                "cap_bytes": 2048, "segment_values": 4, "batch_bytes": 1024})
        };
        // Pass 1 sender: every disk sends all rows here (one sender is enough to test).
        let schemas = [elements_schema()];
        let mut sender = build(&stage("rows", &params(0), &schemas)).unwrap();
        let pieces = drive(sender.as_mut(), vec![(0, input)]);
        for disk in 0..disks {
            let mine: Vec<_> = pieces
                .iter()
                .map(|b| {
                    let keep = arrow::compute::kernels::cmp::eq(
                        column(b, "target"),
                        &UInt32Array::new_scalar(disk as u32),
                    )
                    .unwrap();
                    (0, arrow::compute::filter_record_batch(b, &keep).unwrap())
                })
                .collect();
            let p = params(disk);
            let schemas = [pieces_schema()];
            let mut runs = build(&stage("runs", &p, &schemas)).unwrap();
            let runs_out = drive(runs.as_mut(), mine);
            assert!(runs.flushes() >= 2, "several runs");
            // The split result: one input per run, `run` dropped.
            let all = arrow::compute::concat_batches(&runs_out[0].schema(), &runs_out).unwrap();
            let run_ids = column(&all, "run");
            let inputs: Vec<(usize, RecordBatch)> = (0..runs.flushes() as u32)
                .map(|r| {
                    let keep =
                        arrow::compute::kernels::cmp::eq(run_ids, &UInt32Array::new_scalar(r))
                            .unwrap();
                    let b = arrow::compute::filter_record_batch(&all, &keep).unwrap();
                    (r as usize, b.project(&[1, 2, 3, 4]).unwrap())
                })
                .collect();
            let schemas: Vec<SchemaRef> = (0..inputs.len()).map(|_| elements_schema()).collect();
            let mut p = params(disk);
            p["cap_bytes"] = 4096.into();
            let merge = AppStage {
                app: "fft",
                disklet: "columns",
                params: &p,
                inputs: &schemas,
                ports: 1,
                scratch_bytes: SCRATCH,
            };
            let mut columns = build(&merge).unwrap();
            for b in drive(columns.as_mut(), inputs.into_iter().rev().collect()) {
                let (k, l) = (column(&b, "row"), column(&b, "col"));
                let re = layout::column::<Float64Array>(&b, "re").unwrap();
                let im = layout::column::<Float64Array>(&b, "im").unwrap();
                for i in 0..b.num_rows() {
                    let cell = &mut got[k.value(i) as usize][l.value(i) as usize];
                    *cell = Complex64::new(re.value(i), im.value(i));
                }
            }
        }
        let want = fft2_plain(&generator.matrix().unwrap()).unwrap();
        assert!(relative_error(&got, &want).unwrap() < 1e-12);
    }

    #[test]
    fn bad_parameters_and_inputs_are_refused() {
        let schemas = [elements_schema()];
        let ok = serde_json::json!({"rows": 4, "cols": 4, "disks": 2, "disk": 0,
            "cap_bytes": 4096, "segment_values": 4, "batch_bytes": 1024});
        assert!(build(&stage("rows", &ok, &schemas)).is_ok());
        for (key, value) in [("rows", 0), ("cols", 0), ("disks", 0), ("cap_bytes", 8)] {
            let mut bad = ok.clone();
            bad[key] = value.into();
            let name = if key == "cap_bytes" { "runs" } else { "rows" };
            let inputs = if name == "runs" {
                [pieces_schema()]
            } else {
                [elements_schema()]
            };
            assert!(build(&stage(name, &bad, &inputs)).is_err(), "{key}");
        }
        assert!(build(&stage("nope", &ok, &schemas)).is_err());
        assert!(
            build(&stage("runs", &ok, &schemas)).is_err(),
            "elements are not pieces"
        );
        // Rows must arrive whole, columns ascending.
        let mut rows = build(&stage("rows", &ok, &schemas)).unwrap();
        let mut e = ElementRows::new(None);
        e.push(0, 1, Complex64::default());
        let b = e.take().unwrap();
        let buffer = InputBuffer {
            batch: &b,
            position: 0,
            input: 0,
        };
        assert!(rows.process(&buffer, &mut Emitter::new(1)).is_err());
    }
}
