//! Running one stage of a job: each call of its disklet under a compute slot, its output
//! forwarded (to streams or to fused stages), and fused chains.
//!
//! **Fused chains**: a stage whose only input is the only output port of the stage before it runs
//! on that stage's thread, called with each buffer as it is forwarded.
//!
//! Between two stages of a chain (select → aggregate, probe → fragment) a stream costs a
//! hand-over per buffer: one thread parks, the other is woken. With fixed-size buffers that is
//! thousands of wake-ups per second of scanning, on cores the stages compete for anyway. A
//! fused stage keeps everything else: its own disklet, scratch, emitter cap, counters, compute
//! slot per step (so fair sharing is unchanged), and each buffer it receives is charged to the
//! job while it is processed, as in a stream. What it gives up is the stream's two buffers of
//! slack between the stages and running them at once — the source before the chain still runs
//! on its own thread.
//!
//! A fused stage that turns out heavy — by default at least [`APART_CPU_NS`] of CPU per buffer over its
//! first [`APART_AFTER`] buffers, so a hand-over would cost little beside it — is moved to a
//! thread of its own behind a stream, as it would have run unfused, and the two overlap again.
//!
//! [`inline_parents`] decides from the job spec alone; [`InlineStage`] runs one fused stage.
use crate::disklet::{Disklet, Emitter, InputBuffer, NextInput};
use crate::job::state::JobState;
use crate::memory::Account;
use crate::sched::JobCompute;
use crate::stream::{Buffer, SkipList, StreamHold, StreamRx, StreamTx};
use crate::{DiskOsError, Result};
use adisk_core::protocol::Port;
use adisk_core::protocol::Stage;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Buffers a fused stage processes before it is judged.
pub const APART_AFTER: u64 = 16;

/// CPU per buffer (ns) from which a fused stage runs on its own thread, by default: several
/// times what a hand-over between threads costs (a park and a wake-up, roughly 10 µs here).
pub const APART_CPU_NS: u64 = 40_000;

/// When a fused stage moves to a thread of its own.
#[derive(Clone, Copy, Debug)]
pub struct ApartRule {
    /// Buffers per stream of the stream it is then fed by.
    pub buffers: u32,
    /// CPU per buffer (ns) over its first [`APART_AFTER`] buffers from which it moves.
    pub cpu_ns: u64,
}

/// For each stage, the stage it runs inline in (`Some(i)`): its only input is port 0 of stage
/// `i`, and that is stage `i`'s only output port. `ports[i]`: output ports of stage `i`.
pub fn inline_parents(stages: &[Stage], ports: &[usize]) -> Vec<Option<usize>> {
    stages
        .iter()
        .enumerate()
        .map(|(j, stage)| match stage.inputs.as_slice() {
            [Port::Stage { stage: i, port: 0 }]
                if (*i as usize) < j && ports.get(*i as usize) == Some(&1) =>
            {
                Some(*i as usize)
            }
            _ => None,
        })
        .collect()
}

/// Where a stage's output port goes: a stream to another thread, or a stage run inline.
pub enum Out {
    /// A stream (another stage's thread, a sink, an exchange).
    Stream(StreamTx),
    /// A fused stage, called on this thread.
    Inline(Box<InlineStage>),
    /// A fused stage moved to its own thread: the stream to it, and the thread to wait for.
    Apart(StreamTx, tokio::task::JoinHandle<Result<()>>),
    /// Its reader needs no more rows (it ended, or went away): what it is sent is dropped.
    Closed,
}

impl Out {
    /// True when no output needs more rows.
    pub fn all_done(outputs: &[Out]) -> bool {
        !outputs.is_empty()
            && outputs.iter().all(|o| match o {
                Out::Inline(s) => s.finished,
                Out::Closed => true,
                Out::Stream(_) | Out::Apart(..) => false,
            })
    }

    /// Its reader went away: from now on it is [`Out::Closed`]. A stage moved apart is waited
    /// for, and its error returned.
    pub fn close(&mut self) -> Result<()> {
        match std::mem::replace(self, Out::Closed) {
            Out::Apart(tx, thread) => join(tx, thread),
            Out::Inline(_) | Out::Stream(_) | Out::Closed => Ok(()),
        }
    }

    /// Finishes the fused stages among `outputs` (their input ended), and waits for those
    /// moved to threads of their own.
    pub fn finish_all(outputs: &mut Vec<Out>) -> Result<()> {
        let mut first_error = None;
        for out in outputs.drain(..) {
            let r = match out {
                Out::Inline(mut s) => s.finish(),
                Out::Apart(tx, thread) => join(tx, thread),
                Out::Stream(_) | Out::Closed => Ok(()),
            };
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Moves the fused stage at `self` to a thread of its own once it proves heavy.
    pub fn maybe_apart(&mut self) {
        if !matches!(self, Out::Inline(s) if s.is_heavy()) {
            return;
        }
        let (placeholder, _) = crate::stream::stream(1);
        if let Out::Inline(stage) = std::mem::replace(self, Out::Stream(placeholder)) {
            *self = apart(stage);
        }
    }
}

/// Ends the input of a stage moved apart and waits for it.
fn join(tx: StreamTx, thread: tokio::task::JoinHandle<Result<()>>) -> Result<()> {
    drop(tx);
    futures::executor::block_on(thread)
        .unwrap_or_else(|e| Err(DiskOsError::InvalidJob(format!("a stage panicked: {e}"))))
}

/// `stage` on a thread of its own, fed by a stream.
fn apart(mut stage: Box<InlineStage>) -> Out {
    let (tx, mut rx) = crate::stream::stream(stage.apart.buffers);
    let thread = tokio::task::spawn_blocking(move || {
        let (state, holds) = (stage.ctx.state.clone(), holds_of(stage.outputs()));
        let mut run = || {
            while let Some(buffer) = rx.blocking_recv() {
                stage.push_buffer(buffer)?;
            }
            stage.finish()
        };
        let r = run();
        state.settle(r, holds)
    });
    Out::Apart(tx, thread)
}

/// A stage run on its producer's thread.
pub struct InlineStage {
    disklet: Box<dyn Disklet>,
    emitter: Emitter,
    ctx: StageContext,
    outputs: Vec<Out>,
    scratch_charged: u64,
    finished: bool,
    pushed: u64,
    apart: ApartRule,
}

impl InlineStage {
    /// Where the stage's ports go.
    pub(crate) fn outputs(&self) -> &[Out] {
        &self.outputs
    }

    /// Stage `ctx.index` with its disklet and where its ports go.
    pub(crate) fn new(
        disklet: Box<dyn Disklet>,
        ctx: StageContext,
        outputs: Vec<Out>,
        apart: ApartRule,
    ) -> Self {
        let emitter = Emitter::capped(outputs.len(), ctx.emit_cap, &ctx.account);
        InlineStage {
            disklet,
            emitter,
            ctx,
            outputs,
            scratch_charged: 0,
            finished: false,
            pushed: 0,
            apart,
        }
    }

    /// Processes one buffer of its input (`bytes`: its charge). Once the disklet needs no more
    /// input, it finishes and later buffers are dropped.
    pub fn push(&mut self, batch: arrow::array::RecordBatch, bytes: u64) -> Result<()> {
        self.push_buffer(Buffer::charged(batch, bytes, 0, &self.ctx.account))
    }

    fn push_buffer(&mut self, buffer: Buffer) -> Result<()> {
        if self.finished || self.ctx.state.failed() {
            return Ok(());
        }
        self.pushed += 1;
        self.call(Call::Process(0, buffer))?;
        if self.emitter.is_done() || Out::all_done(&self.outputs) {
            self.finish()?;
        }
        Ok(())
    }

    /// Judged after [`APART_AFTER`] buffers: heavy enough to run beside its producer.
    fn is_heavy(&self) -> bool {
        !self.finished
            && self.pushed == APART_AFTER
            && stage_cpu_ns(&self.ctx.state, self.ctx.index) >= self.apart.cpu_ns * APART_AFTER
    }

    /// Its input ended: the disklet finishes, and so do the fused stages after it.
    pub fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        if !self.ctx.state.failed() {
            self.call(Call::InputEnded(0))?;
            self.call(Call::Finish)?;
        }
        Out::finish_all(&mut self.outputs)
    }

    fn call(&mut self, call: Call) -> Result<()> {
        step(self.disklet.as_mut(), &mut self.emitter, call, &self.ctx)?;
        let scratch = self.disklet.scratch_bytes();
        self.ctx.account.adjust(self.scratch_charged, scratch);
        self.scratch_charged = scratch;
        drop(self.emitter.take_skips()); // its input is a stage's port: nothing to skip
        forward(&mut self.emitter, &mut self.outputs, &self.ctx)?;
        drain_more(
            self.disklet.as_mut(),
            &mut self.emitter,
            &mut self.outputs,
            &self.ctx,
        )
    }
}

impl Drop for InlineStage {
    fn drop(&mut self) {
        self.ctx.account.adjust(self.scratch_charged, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use adisk_core::protocol::DiskletSpec;

    fn stage(inputs: Vec<Port>) -> Stage {
        Stage {
            disklet: DiskletSpec::Select {
                predicate: None,
                projection: vec![],
                limit: None,
            },
            inputs,
        }
    }

    fn port(stage: u32, port: u32) -> Port {
        Port::Stage { stage, port }
    }

    #[test]
    fn only_single_port_chains_fuse() {
        let stages = vec![
            stage(vec![Port::Input(0)]),         // 0: reads the source
            stage(vec![port(0, 0)]),             // 1: chain after 0
            stage(vec![port(1, 0)]),             // 2: after 1, but 1 has two ports
            stage(vec![port(1, 1)]),             // 3: port 1 of 1
            stage(vec![port(2, 0), port(3, 0)]), // 4: two inputs
            stage(vec![port(4, 0)]),             // 5: chain after 4
        ];
        let ports = [1, 2, 1, 1, 1, 1];
        assert_eq!(
            inline_parents(&stages, &ports),
            vec![None, Some(0), None, None, None, Some(4)]
        );
    }
}

/// Holds on every stream among `outputs` (also those of the fused stages in them).
pub(crate) fn holds_of(outputs: &[Out]) -> Vec<StreamHold> {
    let mut holds = Vec::new();
    for out in outputs {
        match out {
            Out::Stream(tx) | Out::Apart(tx, _) => holds.push(tx.hold()),
            Out::Inline(stage) => holds.extend(holds_of(stage.outputs())),
            Out::Closed => {}
        }
    }
    holds
}

pub(crate) struct StageContext {
    pub(crate) index: usize,
    pub(crate) buffer_bytes: u64,
    /// Most bytes one call of the disklet may emit (its scratch plus its output allowance).
    pub(crate) emit_cap: u64,
    pub(crate) state: Arc<JobState>,
    pub(crate) compute: JobCompute,
    pub(crate) account: Arc<Account>,
    /// Skip lists of the stage's inputs that are disk-resident sources.
    pub(crate) skips: Vec<Option<Arc<SkipList>>>,
}

/// What a stage asks of its disklet next.
pub(crate) enum Call {
    /// A buffer of input `.0`.
    Process(usize, Buffer),
    /// Input `.0` ended.
    InputEnded(usize),
    /// Every input ended.
    Finish,
    /// The disklet holds output back ([`Disklet::has_more_output`]).
    More,
}

/// Runs one call of the disklet under a compute slot, on the stage's own thread. Slots are
/// shared fairly between programs ([`crate::sched`]).
pub(crate) fn step(
    disklet: &mut dyn Disklet,
    emitter: &mut Emitter,
    call: Call,
    ctx: &StageContext,
) -> Result<()> {
    let slot = ctx.compute.acquire()?;
    let counters = &ctx.state.stages[ctx.index];
    let since_start = || ctx.state.started.elapsed().as_nanos() as u64;
    let _ = counters.first_step_ns.compare_exchange(
        0,
        since_start() + 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    if let Call::Process(_, b) = &call {
        counters
            .rows_in
            .fetch_add(b.batch.num_rows() as u64, Ordering::Relaxed);
        counters.bytes_in.fetch_add(b.bytes(), Ordering::Relaxed);
    }
    let result = match &call {
        Call::Process(input, b) => disklet.process(
            &InputBuffer {
                batch: &b.batch,
                position: b.position,
                input: *input,
            },
            emitter,
        ),
        Call::InputEnded(input) => disklet.input_ended(*input, emitter),
        Call::Finish => disklet.finish(emitter),
        Call::More => disklet.more_output(emitter),
    };
    let cpu = slot.release();
    drop(call);
    counters.cpu_ns.fetch_add(cpu, Ordering::Relaxed);
    counters
        .last_step_ns
        .fetch_max(since_start(), Ordering::Relaxed);
    counters
        .scratch_peak
        .fetch_max(disklet.scratch_bytes(), Ordering::Relaxed);
    counters.flushes.store(disklet.flushes(), Ordering::Relaxed);
    counters
        .spilled
        .store(disklet.spilled_bytes(), Ordering::Relaxed);
    result?;
    emitter.overflow().map_or(Ok(()), Err)
}

/// CPU time stage `index` of a job used so far, ns.
pub(crate) fn stage_cpu_ns(state: &JobState, index: usize) -> u64 {
    state.stages[index].cpu_ns.load(Ordering::Relaxed)
}

/// Sends what the disklet emitted downstream (blocking on backpressure), cut into buffers of
/// at most `buffer_bytes` so a stream never holds more than its share of the grant.
pub(crate) fn forward(
    emitter: &mut Emitter,
    outputs: &mut [Out],
    ctx: &StageContext,
) -> Result<()> {
    let counters = &ctx.state.stages[ctx.index];
    let (taken, held_bytes) = emitter.take_sized_outputs();
    // What waits to be forwarded stays charged until it is in a buffer.
    let mut held = crate::memory::Held::new(&ctx.account, held_bytes);
    for (port, batches) in taken.into_iter().enumerate() {
        for (batch, bytes) in batches {
            for (piece, piece_bytes) in crate::stream::cut_sized(
                &batch,
                bytes,
                crate::stream::buffer_cap(ctx.buffer_bytes),
            )? {
                let rows = piece.num_rows() as u64;
                match &mut outputs[port] {
                    Out::Stream(tx) | Out::Apart(tx, _) => {
                        held.release(piece_bytes);
                        let sent = tx.blocking_slot().map(|slot| {
                            tx.blocking_send_sized(slot, piece, piece_bytes, 0, &ctx.account)
                        });
                        if !matches!(sent, Some(Ok(_))) {
                            // Its reader needs no more (a limit) or went away.
                            outputs[port].close()?;
                            continue;
                        }
                    }
                    Out::Closed => continue,
                    Out::Inline(stage) => {
                        held.release(piece_bytes);
                        stage.push(piece, piece_bytes)?;
                        outputs[port].maybe_apart();
                    }
                }
                counters.rows_out.fetch_add(rows, Ordering::Relaxed);
                counters.bytes_out.fetch_add(piece_bytes, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// Calls for more output without any emitted, in a row, before a disklet is taken to be stuck.
pub(crate) const MAX_IDLE_MORE_CALLS: u32 = 10_000;

/// Calls [`Disklet::more_output`] while the disklet holds output back, forwarding what each
/// call emits. A disklet that asks for [`MAX_IDLE_MORE_CALLS`] calls in a row without
/// emitting anything fails its job ([`DiskOsError::NoProgress`]): no disklet bug can hold a
/// disk's processor and grant.
pub(crate) fn drain_more(
    disklet: &mut dyn Disklet,
    emitter: &mut Emitter,
    outputs: &mut [Out],
    ctx: &StageContext,
) -> Result<()> {
    let mut idle = 0u32;
    while disklet.has_more_output() && !ctx.state.failed() {
        step(disklet, emitter, Call::More, ctx)?;
        if !emitter.has_output() {
            idle += 1;
            if idle >= MAX_IDLE_MORE_CALLS {
                return Err(DiskOsError::NoProgress {
                    disklet: disklet.name().to_string(),
                    calls: idle,
                });
            }
        } else {
            idle = 0;
        }
        forward(emitter, outputs, ctx)?;
    }
    Ok(())
}

/// The next buffer for a stage: from the input its disklet asks for, or from whichever of its
/// open inputs has one first. `None` once every input ended; `(i, None)` when input `i` ends.
pub(crate) fn next_buffer(
    disklet: &dyn Disklet,
    open: &mut [Option<StreamRx>],
) -> Option<(usize, Option<Buffer>)> {
    let live: Vec<usize> = (0..open.len()).filter(|i| open[*i].is_some()).collect();
    let wanted = match disklet.next_input() {
        NextInput::Input(k) if live.contains(&k) => Some(k),
        _ if live.len() == 1 => Some(live[0]),
        _ => None,
    };
    match (wanted, live.is_empty()) {
        (_, true) => None,
        (Some(k), _) => Some((k, open[k].as_mut().expect("live input").blocking_recv())),
        (None, _) => Some(recv_any(open)),
    }
}

/// Blocks until any open input has a buffer or ends.
pub(crate) fn recv_any(open: &mut [Option<StreamRx>]) -> (usize, Option<Buffer>) {
    futures::executor::block_on(std::future::poll_fn(|cx| {
        for (i, rx) in open.iter_mut().enumerate() {
            if let Some(rx) = rx
                && let std::task::Poll::Ready(b) = rx.poll_recv(cx)
            {
                return std::task::Poll::Ready((i, b));
            }
        }
        std::task::Poll::Pending
    }))
}

/// One disklet stage: a loop on its own blocking thread for the life of the job.
pub(crate) fn run_stage(
    mut disklet: Box<dyn Disklet>,
    inputs: Vec<StreamRx>,
    mut outputs: Vec<Out>,
    ctx: StageContext,
) -> Result<()> {
    let mut emitter = Emitter::capped(outputs.len(), ctx.emit_cap, &ctx.account);
    let mut open: Vec<Option<StreamRx>> = inputs.into_iter().map(Some).collect();
    let mut scratch_charged = 0u64;
    let result = (|| {
        loop {
            let next = next_buffer(disklet.as_ref(), &mut open);
            if ctx.state.failed() {
                return Ok(());
            }
            let call = match next {
                None => Call::Finish,
                Some((input, Some(buffer))) => Call::Process(input, buffer),
                Some((input, None)) => {
                    open[input] = None;
                    Call::InputEnded(input)
                }
            };
            let end = matches!(call, Call::Finish);
            step(disklet.as_mut(), &mut emitter, call, &ctx)?;
            let scratch_now = disklet.scratch_bytes();
            ctx.account.adjust(scratch_charged, scratch_now);
            scratch_charged = scratch_now;
            for (input, range) in emitter.take_skips() {
                if let Some(Some(skip)) = ctx.skips.get(input) {
                    skip.add([range]);
                }
            }
            let stop = emitter.is_done() || Out::all_done(&outputs);
            forward(&mut emitter, &mut outputs, &ctx)?;
            drain_more(disklet.as_mut(), &mut emitter, &mut outputs, &ctx)?;
            if end {
                return Ok(());
            }
            if stop {
                // The disklet needs no more input: finish now; closing the inputs stops the sources.
                for rx in open.iter_mut().flatten() {
                    rx.close();
                }
                step(disklet.as_mut(), &mut emitter, Call::Finish, &ctx)?;
                forward(&mut emitter, &mut outputs, &ctx)?;
                drain_more(disklet.as_mut(), &mut emitter, &mut outputs, &ctx)?;
                return Ok(());
            }
        }
    })();
    ctx.account.adjust(scratch_charged, 0);
    // The fused stages after this one see their input end (not after a failure: they drop).
    result.and_then(|()| Out::finish_all(&mut outputs))
}
