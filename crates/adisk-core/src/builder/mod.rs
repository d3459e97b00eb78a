//! The one way a disk job is made.
//!
//! Every request — SQL at every offload level, `adisk run`, the applications, user
//! WebAssembly disklets, exchanges, benchmarks and tests — describes what runs at a disk with a
//! [`JobBuilder`]: it gives the job its id ([`new_id`]) and program (the unit of fair sharing
//! at the disks), wires its inputs, stages and outputs, sizes it ([`Sizes`],
//! [`fitted_buffer_kib`]) and checks the graph ([`crate::graph::check`]) before the job leaves
//! the host. [`grant`] is the memory a disk grants a job, computed from the spec alone: DiskOS
//! admits jobs with it and planners size jobs with it, so both count the same bytes.
//!
//! ```text
//!   let mut job = JobBuilder::new("sort-pass1").program(PROGRAM);
//!   let rows = job.input(Source::Pipe { .. });          // Port::Input(0)
//!   let runs = job.stage(app("runs", params), vec![rows]); // Port::Stage { stage: 0, port: 0 }
//!   job.output(runs, Sink::Store { .. });
//!   let spec: JobSpec = job.sizes(sizes).build()?;       // the graph checked
//! ```
pub mod grant;

use crate::graph::GraphError;
use crate::protocol::{
    DiskletSpec, JobSpec, Output, Port, Route, Sink, Source, Stage, StoredStream,
};
use std::sync::atomic::{AtomicU64, Ordering};

/// Memory and buffer sizes of a job (0: the disk's defaults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Scratch per stage, KiB.
    pub scratch_kib: u64,
    /// Stream buffer size, KiB.
    pub buffer_kib: u64,
    /// Temporary disk space, KiB.
    pub temp_kib: u64,
}

static NEXT_JOB: AtomicU64 = AtomicU64::new(0);

/// A job id unique across host processes: `kind-pid-counter-nanos`.
pub fn new_id(kind: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{kind}-{}-{}-{nanos:x}",
        std::process::id(),
        NEXT_JOB.fetch_add(1, Ordering::Relaxed)
    )
}

/// The default program of this process: every job it submits shares it (fair sharing at the
/// disks is per program).
pub fn program_id() -> String {
    format!("host-{}", std::process::id())
}

/// A disk job being made: a graph of input streams, stages and outputs, its id, program and
/// sizes. [`JobBuilder::build`] checks the graph.
#[derive(Clone, Debug)]
#[must_use = "a job builder does nothing until it is built"]
pub struct JobBuilder {
    spec: JobSpec,
}

impl JobBuilder {
    /// An empty job with a fresh id of `kind` ([`new_id`]), of this process's program.
    pub fn new(kind: &str) -> Self {
        JobBuilder {
            spec: JobSpec {
                job_id: new_id(kind),
                program: program_id(),
                inputs: vec![],
                stages: vec![],
                outputs: vec![],
                scratch_kib: 0,
                buffer_kib: 0,
                temp_kib: 0,
                stage_scratch_kib: vec![],
            },
        }
    }

    /// A chain `source → stages[0] → … → stages[n-1] → sink`. A final `partition` stage with
    /// a broadcast exchange sink sends its output port `i` to `targets[i]` alone.
    pub fn chain(kind: &str, source: Source, stages: Vec<DiskletSpec>, sink: Sink) -> Self {
        let mut job = JobBuilder::new(kind);
        let mut last = job.input(source);
        let ends_in_partition = matches!(stages.last(), Some(DiskletSpec::Partition { .. }));
        for disklet in stages {
            last = job.stage(disklet, vec![last]);
        }
        match sink {
            Sink::Exchange {
                exchange_id,
                targets,
                sender,
                route: Route::Broadcast,
                relay,
                target_relays,
            } if ends_in_partition => {
                for (i, target) in targets.into_iter().enumerate() {
                    let sink = Sink::Exchange {
                        exchange_id: exchange_id.clone(),
                        targets: vec![target],
                        sender,
                        route: Route::Broadcast,
                        relay: relay.clone(),
                        target_relays: target_relays.get(i).cloned().into_iter().collect(),
                    };
                    job.output(last.port(i as u32), sink);
                }
            }
            sink => job.output(last, sink),
        }
        job
    }

    /// `spec` to be changed (a copy of a job for another disk, another id, other inputs).
    pub fn from_spec(spec: JobSpec) -> Self {
        JobBuilder { spec }
    }

    /// The job's id, given (a query names its job at each disk `QUERY-dN`).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.spec.job_id = id.into();
        self
    }

    /// A fresh id of `kind` ([`new_id`]).
    pub fn fresh_id(self, kind: &str) -> Self {
        self.id(new_id(kind))
    }

    /// The program the job belongs to (jobs of one program share the disks' compute fairly
    /// with other programs').
    pub fn program(mut self, program: impl Into<String>) -> Self {
        self.spec.program = program.into();
        self
    }

    /// Scratch per stage, stream buffer size and temporary space (0: the disk's defaults).
    pub fn sizes(mut self, sizes: Sizes) -> Self {
        self.spec.scratch_kib = sizes.scratch_kib;
        self.spec.buffer_kib = sizes.buffer_kib;
        self.spec.temp_kib = sizes.temp_kib;
        self
    }

    /// Scratch per stage, KiB (0: the disk's default).
    pub fn scratch_kib(mut self, kib: u64) -> Self {
        self.spec.scratch_kib = kib;
        self
    }

    /// Stream buffer size, KiB (0: the disk's own).
    pub fn buffer_kib(mut self, kib: u64) -> Self {
        self.spec.buffer_kib = kib;
        self
    }

    /// Temporary disk space the job may write, KiB.
    pub fn temp_kib(mut self, kib: u64) -> Self {
        self.spec.temp_kib = kib;
        self
    }

    /// Scratch of each stage, KiB, by stage index (a stage past the end or given 0 takes the
    /// job's scratch per stage).
    pub fn stage_scratch_kib(mut self, kib: Vec<u64>) -> Self {
        self.spec.stage_scratch_kib = kib;
        self
    }

    /// Every table input reads only `partitions` (None: all of the disk's).
    pub fn reading(mut self, partitions: Option<Vec<u32>>) -> Self {
        for input in &mut self.spec.inputs {
            if let Source::Table { partitions: p, .. } = input {
                p.clone_from(&partitions);
            }
        }
        self
    }

    /// Adds an input stream; its port.
    pub fn input(&mut self, source: Source) -> Port {
        self.spec.inputs.push(source);
        Port::Input(self.spec.inputs.len() as u32 - 1)
    }

    /// Adds a stage running `disklet` over `inputs` (in the disklet's input order); its output
    /// port 0 (port `i` is [`Port::port`]`(i)` of it).
    pub fn stage(&mut self, disklet: DiskletSpec, inputs: Vec<Port>) -> Port {
        self.spec.stages.push(Stage { disklet, inputs });
        Port::Stage {
            stage: self.spec.stages.len() as u32 - 1,
            port: 0,
        }
    }

    /// Sends `from` to `sink`.
    pub fn output(&mut self, from: Port, sink: Sink) {
        self.spec.outputs.push(Output { from, sink });
    }

    /// The job as built so far.
    pub fn spec(&self) -> &JobSpec {
        &self.spec
    }

    /// The job, its graph checked.
    ///
    /// # Errors
    /// The graph is malformed ([`crate::graph::check`]'s rules).
    pub fn build(self) -> Result<JobSpec, GraphError> {
        crate::graph::check(&self.spec)?;
        Ok(self.spec)
    }

    /// The job, its graph not checked: only for tests of the disks' own checks, which must
    /// refuse what a builder would not build.
    pub fn build_unchecked(self) -> JobSpec {
        self.spec
    }
}

/// An exchange sink to `targets` (disk addresses) by `route`, from sender number `sender`,
/// straight (no relay).
pub fn exchange(
    exchange_id: impl Into<String>,
    targets: Vec<String>,
    sender: u32,
    route: Route,
) -> Sink {
    Sink::Exchange {
        exchange_id: exchange_id.into(),
        targets,
        sender,
        route,
        relay: None,
        target_relays: vec![],
    }
}

/// A table input reading `columns` (empty: all) of the disk's partitions of `table`.
pub fn table(table: impl Into<String>, columns: Vec<String>) -> Source {
    Source::Table {
        table: table.into(),
        columns,
        prune: None,
        partitions: None,
    }
}

/// A sink storing the stream as partition `partition` of the named result `name`.
pub fn store_result(name: impl Into<String>, partition: u32) -> Sink {
    Sink::Store {
        stream: StoredStream::Result {
            name: name.into(),
            partition,
        },
    }
}

/// The largest stream buffer, KiB, from `largest` down by halves to DiskOS's smallest
/// ([`grant::MIN_JOB_BUFFER_KIB`]), at which the streams of every job of `specs` — their
/// buffers, inboxes and output allowances, as DiskOS counts them
/// ([`grant::grant_beyond_scratch_at`]) — take at most half of a disk's `memory_bytes`, leaving
/// the rest for scratch. Larger buffers cut the per-buffer cost of vectorized operators; a job
/// on a small disk must still fit. Jobs that exchange rows take one size together (a pipe
/// message may be at most two of the receiver's buffers). At the smallest size the disk
/// decides: it refuses a job that does not fit, typed.
pub fn fitted_buffer_kib<'a>(
    specs: impl Iterator<Item = &'a JobSpec> + Clone,
    largest: u64,
    memory_bytes: u64,
    buffers_per_stream: u32,
) -> u64 {
    let mut kib = largest;
    while kib / 2 >= grant::MIN_JOB_BUFFER_KIB {
        let fits = specs.clone().all(|spec| {
            grant::grant_beyond_scratch_at(spec, kib * 1024, buffers_per_stream)
                .map_or(true, |bytes| bytes <= memory_bytes / 2)
        });
        if fits {
            break;
        }
        kib /= 2;
    }
    kib
}

#[cfg(test)]
mod tests;
