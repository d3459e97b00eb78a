//! Fused chains: a stage whose only input is the only output port of the stage before it runs
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
use crate::disklet::{Disklet, Emitter};
use crate::job::{Call, StageContext, drain_more, forward, stage_cpu_ns, step};
use crate::stream::{Buffer, StreamTx};
use crate::{DiskOsError, Result};
use adisk_core::protocol::{Port, Stage};

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
        let (state, holds) = (
            stage.ctx.state.clone(),
            crate::job::holds_of(stage.outputs()),
        );
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
