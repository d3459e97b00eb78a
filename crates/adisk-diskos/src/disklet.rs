//! The disklet interface: all code that runs at a disk implements [`Disklet`].
//!
//! A disklet is created ("init") from its parameters and a scratch grant, is handed its input
//! streams one buffer at a time (`process`; a disklet with several inputs says which one it
//! wants next, [`Disklet::next_input`]), is told when each input ends (`input_ended`) and when
//! all have (`finish`). It
//! emits output buffers through an [`Emitter`] onto output ports the host wired; it cannot
//! allocate beyond its scratch (it reports its use, and the built-ins flush or fail when the
//! grant is reached), open files or sockets, or choose its streams.
use crate::Result;
use crate::memory::Account;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::ops::Range;
use std::sync::Arc;

/// One input buffer handed to [`Disklet::process`].
pub struct InputBuffer<'a> {
    /// The rows.
    pub batch: &'a RecordBatch,
    /// Position of the first row in the input stream (rows for tables, bytes for files).
    pub position: u64,
    /// Which of the disklet's inputs it comes from (0 for a disklet with one input).
    pub input: usize,
}

/// Which input a disklet wants its next buffer from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextInput {
    /// Whichever input has a buffer first.
    Any,
    /// This input (if it has ended, whichever has a buffer).
    Input(usize),
}

/// Collects what a disklet emits during one call.
///
/// Under DiskOS the emitter is capped: what one call emits is held (and charged to the job)
/// until the call returns and it is forwarded, so it may not exceed the stage's output
/// allowance; an emit past it is dropped and fails the call ([`Emitter::overflow`]).
pub struct Emitter {
    outputs: Vec<Vec<(RecordBatch, u64)>>,
    skips: Vec<(usize, Range<u64>)>,
    done: bool,
    cap_bytes: u64,
    held_bytes: u64,
    overflow: Option<u64>,
    account: Option<Arc<Account>>,
}

impl Emitter {
    /// An uncapped emitter with `ports` output ports (tests, host-side use).
    pub fn new(ports: usize) -> Self {
        Emitter {
            outputs: (0..ports).map(|_| Vec::new()).collect(),
            skips: Vec::new(),
            done: false,
            cap_bytes: u64::MAX,
            held_bytes: 0,
            overflow: None,
            account: None,
        }
    }

    /// An emitter that holds at most `cap_bytes` of output per call, charged to `account`.
    pub fn capped(ports: usize, cap_bytes: u64, account: &Arc<Account>) -> Self {
        let mut e = Emitter::new(ports);
        e.cap_bytes = cap_bytes;
        e.account = Some(account.clone());
        e
    }

    /// The first emit refused for want of room during this call, with the bytes it would
    /// have brought the call's output to: the call fails with
    /// [`crate::DiskOsError::BufferExceeded`].
    pub fn overflow(&self) -> Option<crate::DiskOsError> {
        self.overflow
            .map(|bytes| crate::DiskOsError::BufferExceeded {
                what: "one call's output".into(),
                bytes,
                cap_bytes: self.cap_bytes,
            })
    }

    /// Number of output ports.
    pub fn ports(&self) -> usize {
        self.outputs.len()
    }

    /// Whether anything was emitted since the outputs were last taken.
    pub fn has_output(&self) -> bool {
        self.outputs.iter().any(|port| !port.is_empty())
    }

    /// Bytes this call may still emit before the cap.
    pub fn room(&self) -> u64 {
        self.cap_bytes.saturating_sub(self.held_bytes)
    }

    /// Emits a batch on output `port`. Empty batches are dropped.
    ///
    /// # Panics
    /// If `port` is not one of the disklet's output ports (a bug in the disklet).
    pub fn emit(&mut self, port: usize, batch: RecordBatch) {
        assert!(
            port < self.outputs.len(),
            "disklet emitted on port {port} of {}",
            self.outputs.len()
        );
        if batch.num_rows() == 0 || self.overflow.is_some() {
            return;
        }
        // A slice of a larger result would keep all of it alive while counted as its rows.
        let batch = crate::compact::compact(batch);
        let bytes = adisk_core::stats::batch_bytes(&batch);
        let total = self.held_bytes.saturating_add(bytes);
        if total > self.cap_bytes {
            self.overflow = Some(total);
            return;
        }
        self.held_bytes = total;
        if let Some(a) = &self.account {
            a.charge(bytes);
        }
        self.outputs[port].push((batch, bytes));
    }

    /// Asks the (first) input stream to skip `range` (positions as in
    /// [`InputBuffer::position`]). Advisory: buffers already read are still delivered.
    pub fn skip(&mut self, range: Range<u64>) {
        self.skip_input(0, range);
    }

    /// Asks input `input` to skip `range`; only disk-resident inputs (tables, files) skip.
    pub fn skip_input(&mut self, input: usize, range: Range<u64>) {
        if range.start < range.end {
            self.skips.push((input, range));
        }
    }

    /// Says the disklet needs no more input: the rest of every input is skipped.
    pub fn done(&mut self) {
        self.done = true;
        self.skips.push((0, 0..u64::MAX));
    }

    /// True once [`Emitter::done`] was called.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Takes the emitted batches, per port (their charge ends here: the taker charges them).
    pub fn take_outputs(&mut self) -> Vec<Vec<RecordBatch>> {
        self.take_sized_outputs()
            .0
            .into_iter()
            .map(|port| port.into_iter().map(|(b, _)| b).collect())
            .collect()
    }

    /// Takes the emitted batches with their bytes, per port, and the bytes in all (their
    /// charge ends here: the taker charges them).
    pub fn take_sized_outputs(&mut self) -> (Vec<Vec<(RecordBatch, u64)>>, u64) {
        if let Some(a) = &self.account {
            a.release(self.held_bytes);
        }
        let held = std::mem::take(&mut self.held_bytes);
        let ports = self.outputs.len();
        (
            std::mem::replace(&mut self.outputs, (0..ports).map(|_| Vec::new()).collect()),
            held,
        )
    }

    /// Takes the skip requests, by input.
    pub fn take_skips(&mut self) -> Vec<(usize, Range<u64>)> {
        std::mem::take(&mut self.skips)
    }
}

impl Drop for Emitter {
    fn drop(&mut self) {
        if let Some(a) = &self.account {
            a.release(self.held_bytes);
        }
    }
}

/// A stream operator that runs at a disk.
///
/// # Cancellation
/// A disklet is dropped without `finish` when its job fails or the host goes away.
pub trait Disklet: Send {
    /// Name, for statistics.
    fn name(&self) -> &'static str;
    /// Schema of every output port.
    fn output_schema(&self) -> SchemaRef;
    /// Number of output ports (1 except for `partition` and user disklets that declare more).
    fn output_ports(&self) -> usize {
        1
    }
    /// Schema of output port `port` (the same for every port unless the disklet says otherwise).
    fn port_schema(&self, _port: usize) -> SchemaRef {
        self.output_schema()
    }
    /// Columns of output port `port` whose values never decrease along the stream
    /// ([`crate::order`]); none unless the disklet knows.
    fn sorted_output(&self, _port: usize) -> Vec<String> {
        Vec::new()
    }
    /// Sorts of its plan the disklet left out because their input arrives in their order.
    fn sorts_dropped(&self) -> u64 {
        0
    }
    /// Which input the next buffer should come from (asked before every buffer).
    fn next_input(&self) -> NextInput {
        NextInput::Any
    }
    /// Processes one input buffer.
    ///
    /// # Errors
    /// Evaluation errors, or [`crate::DiskOsError::ScratchExceeded`]; the job then fails.
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()>;
    /// Called once when input `input` has delivered its last buffer (before `finish`).
    ///
    /// # Errors
    /// As for `process`.
    fn input_ended(&mut self, _input: usize, _out: &mut Emitter) -> Result<()> {
        Ok(())
    }
    /// Called once after every input ended.
    fn finish(&mut self, out: &mut Emitter) -> Result<()>;
    /// Scratch bytes in use now.
    fn scratch_bytes(&self) -> u64 {
        0
    }
    /// Times partial state was flushed for lack of scratch (or runs produced).
    fn flushes(&self) -> u64 {
        0
    }
    /// Whether the disklet holds output it could not emit in its last call (its emitter was
    /// full): DiskOS forwards what was emitted, then calls [`Disklet::more_output`] until this
    /// is false, before any further input. Operators whose output is much larger than one
    /// call's allowance (a sort handing back its whole input) use it.
    fn has_more_output(&self) -> bool {
        false
    }
    /// Emits more of the output held back (see [`Disklet::has_more_output`]).
    ///
    /// # Errors
    /// As for `process`.
    fn more_output(&mut self, _out: &mut Emitter) -> Result<()> {
        Ok(())
    }
    /// Bytes spilled to the job's temporary area so far.
    fn spilled_bytes(&self) -> u64 {
        0
    }
    /// Time spent before the first buffer: compiling (0 when cached) and instantiating +
    /// init, ns. Zero for the built-ins.
    fn setup_ns(&self) -> (u64, u64) {
        (0, 0)
    }
    /// Filters that rows of input `input` must pass to matter to this disklet (a join's
    /// dynamic filter on its probe input): a table scan feeding the input applies them while
    /// it decodes, and decodes its other columns only for the rows that pass (late
    /// materialization). Advisory: the disklet still applies them itself.
    fn scan_filters(&self, _input: usize) -> Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
        Vec::new()
    }
    /// The output columns that are input columns unchanged, if the output is a subset of the
    /// input's rows in their order, with nothing that counts rows (a qualification, a Bloom
    /// probe): scan filters of the stage reading this one then pass through to its input on
    /// these columns. None otherwise.
    fn row_subset_of_input(&self) -> Option<Vec<String>> {
        None
    }
}
