//! The memory a disk grants a job, from its spec alone.
//!
//! DiskOS admits a job with [`job_grant`] before any stage is built (the whole grant is taken
//! or the job waits or is refused), and planners size a job's scratch and buffers with
//! [`grant_beyond_scratch`] (what is left of a disk's budget after the streams), so the host
//! and the disks count the same bytes. Every stream has [`slots_per_stream`] buffers of at most
//! [`buffer_cap`] bytes; every stage may hold [`EMIT_BUFFERS_PER_PORT`] buffers per output port;
//! every pipe input an inbox; every stored output [`STORE_BUFFERS`] buffers of its row group.
use crate::graph::{GraphError, Shape};
use crate::protocol::{JobSpec, Sink, Source, StoredStream};

/// Smallest stream buffer a job may ask for, KiB.
pub const MIN_JOB_BUFFER_KIB: u64 = 16;

/// Buffers of output a stage may hold per port between a call and forwarding, beyond what its
/// scratch held (the state a call turns into output).
pub const EMIT_BUFFERS_PER_PORT: u64 = 2;

/// Buffers a stored output (named result, split result) may hold in its row group in
/// progress; counted in the job's grant.
pub const STORE_BUFFERS: u64 = 4;

/// Bytes a stream buffer may hold beyond its payload size: the per-column metadata of a
/// buffer (a file buffer is `buffer_bytes` of payload plus its offset and a value offset).
pub const BUFFER_SLACK_BYTES: u64 = 1024;

/// The most a buffer of `buffer_bytes` may hold, in bytes: what the grant counts per slot.
pub fn buffer_cap(buffer_bytes: u64) -> u64 {
    buffer_bytes.saturating_add(BUFFER_SLACK_BYTES)
}

/// Buffers that can exist in a stream of `buffers` queued buffers: those, plus the one being
/// filled and the one being processed. The memory grant counts this many per stream.
pub fn slots_per_stream(buffers: u32) -> u32 {
    buffers.max(1) + 2
}

/// The sizes a job's grant is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantSizes {
    /// Stream buffer size, bytes.
    pub buffer_bytes: u64,
    /// Buffer slots per stream ([`slots_per_stream`]).
    pub slots_per_stream: u32,
    /// Messages an exchange inbox queues.
    pub inbox_messages: usize,
}

/// The memory grant of `spec` (of graph `shape`, its stages given `scratch` bytes each), from
/// the spec alone: every stream's buffer slots (`streams` ports, plus a stream per target of
/// a routed exchange), every stage's scratch and output allowance, every pipe input's inbox
/// (its queue plus the buffer a sender is handing over and the rest of a message being cut)
/// and every stored output's row group in progress.
pub fn job_grant(spec: &JobSpec, shape: &Shape, scratch: &[u64], sizes: &GrantSizes) -> u64 {
    let b = buffer_cap(sizes.buffer_bytes);
    let streams = shape.streams
        + spec
            .outputs
            .iter()
            .map(|o| routed_streams(&o.sink))
            .sum::<u64>();
    let buffers = streams
        .saturating_mul(u64::from(sizes.slots_per_stream))
        .saturating_mul(b);
    let outputs: u64 = shape
        .stage_ports
        .iter()
        .map(|ports| emit_allowance(b, *ports))
        .sum();
    buffers
        .saturating_add(scratch.iter().sum::<u64>())
        .saturating_add(outputs)
        .saturating_add(inboxes(spec, sizes.inbox_messages, b))
        .saturating_add(stored_outputs(spec).saturating_mul(STORE_BUFFERS * b))
}

/// Bytes of every pipe input's inbox: `messages` queued buffers of `b` bytes, and each sender
/// may hold one message of up to 2 buffers (charged) while it waits for room.
fn inboxes(spec: &JobSpec, messages: usize, b: u64) -> u64 {
    spec.inputs
        .iter()
        .map(|s| match s {
            Source::Pipe { senders, .. } => (messages as u64)
                .saturating_add(2 * u64::from((*senders).max(1)))
                .saturating_mul(b),
            _ => 0,
        })
        .sum()
}

/// Outputs stored as a named or split result (each holds its row group in progress).
fn stored_outputs(spec: &JobSpec) -> u64 {
    spec.outputs
        .iter()
        .filter(|o| {
            matches!(
                o.sink,
                Sink::Store {
                    stream: StoredStream::Result { .. } | StoredStream::Split { .. }
                }
            )
        })
        .count() as u64
}

/// A stage's output allowance in its job's grant: [`EMIT_BUFFERS_PER_PORT`] buffers per port.
pub fn emit_allowance(buffer_bytes: u64, ports: u32) -> u64 {
    buffer_bytes
        .saturating_mul(EMIT_BUFFERS_PER_PORT)
        .saturating_mul(u64::from(ports.max(1)))
}

/// Streams an output needs beyond its port's: a routed exchange has one per target.
pub fn routed_streams(sink: &Sink) -> u64 {
    match sink {
        Sink::Exchange { targets, .. } if targets.len() > 1 => targets.len() as u64,
        _ => 0,
    }
}

/// The memory a disk with `disk_buffer_bytes` buffers and `buffers_per_stream` grants `spec`
/// beyond its stages' scratch: stream buffers, output allowances, inboxes and stored outputs
/// (the job's own buffer size, if it asks for one, is used). A planner fits the scratch of a
/// job's stages into what is left of the disk's budget.
///
/// # Errors
/// `spec`'s graph is malformed.
pub fn grant_beyond_scratch(
    spec: &JobSpec,
    disk_buffer_bytes: u64,
    buffers_per_stream: u32,
) -> Result<u64, GraphError> {
    let buffer_bytes = if spec.buffer_kib == 0 {
        disk_buffer_bytes
    } else {
        spec.buffer_kib * 1024
    };
    grant_beyond_scratch_at(spec, buffer_bytes, buffers_per_stream)
}

/// [`grant_beyond_scratch`] with stream buffers of `buffer_bytes`, whatever `spec` asks for
/// (a planner trying sizes).
///
/// # Errors
/// `spec`'s graph is malformed.
pub fn grant_beyond_scratch_at(
    spec: &JobSpec,
    buffer_bytes: u64,
    buffers_per_stream: u32,
) -> Result<u64, GraphError> {
    let shape = crate::graph::check(spec)?;
    let sizes = GrantSizes {
        buffer_bytes,
        slots_per_stream: slots_per_stream(buffers_per_stream),
        // As a disk's exchange registry: one queued message per buffer of a stream.
        inbox_messages: buffers_per_stream as usize,
    };
    let no_scratch = vec![0; spec.stages.len()];
    Ok(job_grant(spec, &shape, &no_scratch, &sizes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{JobBuilder, exchange, store_result, table};
    use crate::protocol::{DiskletSpec, Route};

    #[test]
    fn routed_exchanges_count_a_stream_per_target() {
        let sink = |n: usize| {
            exchange(
                "x",
                (0..n).map(|i| format!("d{i}")).collect(),
                0,
                Route::Broadcast,
            )
        };
        assert_eq!(
            routed_streams(&sink(1)),
            0,
            "one target: the port's own stream goes straight out"
        );
        assert_eq!(routed_streams(&sink(4)), 4);
        assert_eq!(routed_streams(&Sink::Host), 0);
    }

    /// A pipe merged with a table, to the host or stored.
    fn merge_job(sink: Sink) -> JobSpec {
        let schema = arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
            "x",
            arrow::datatypes::DataType::Int64,
            false,
        )]);
        let mut job = JobBuilder::new("j");
        let pipe = job.input(Source::Pipe {
            exchange_id: "x".into(),
            senders: 4,
            schema,
        });
        let rows = job.input(table("t", vec![]));
        let merged = job.stage(DiskletSpec::Merge { keys: vec![] }, vec![pipe, rows]);
        job.output(merged, sink);
        job.build().unwrap()
    }

    /// Every part of the grant is there.
    #[test]
    fn the_grant_counts_buffers_scratch_outputs_and_inboxes() {
        let spec = merge_job(Sink::Host);
        let sizes = GrantSizes {
            buffer_bytes: 1000,
            slots_per_stream: 4,
            inbox_messages: 2,
        };
        let shape = crate::graph::check(&spec).unwrap();
        assert_eq!(shape.streams, 3, "two inputs, one stage port");
        let b = 1000 + BUFFER_SLACK_BYTES;
        // The inbox: 2 queued messages, and one of up to 2 buffers held by each of 4 senders.
        let expected = 3 * 4 * b + 7000 + EMIT_BUFFERS_PER_PORT * b + (2 + 2 * 4) * b;
        assert_eq!(job_grant(&spec, &shape, &[7000], &sizes), expected);
        // What a planner fits scratch around: the same count, without the scratch.
        assert_eq!(
            grant_beyond_scratch(&spec, 1000, 2).unwrap(),
            expected - 7000
        );
        let own = JobBuilder::from_spec(spec.clone())
            .buffer_kib(1)
            .build()
            .unwrap();
        let b2 = 1024 + BUFFER_SLACK_BYTES;
        assert_eq!(
            grant_beyond_scratch(&own, 1000, 2).unwrap(),
            3 * 4 * b2 + EMIT_BUFFERS_PER_PORT * b2 + (2 + 2 * 4) * b2,
            "the job's own buffer size counts"
        );
        // A stored output adds the row group it holds in progress.
        let stored = merge_job(store_result("r", 0));
        let shape = crate::graph::check(&stored).unwrap();
        assert_eq!(
            job_grant(&stored, &shape, &[7000], &sizes),
            expected + STORE_BUFFERS * b
        );
    }
}
