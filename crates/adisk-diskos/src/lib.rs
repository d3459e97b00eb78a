//! DiskOS: the small operating system of one ActiveDisk disk.
//!
//! ```text
//!            JobSpec ──► admit: MemoryBudget grants buffers + scratch (or queue / refuse)
//!                           │
//!   ┌── source ─────────────▼──────────────┐   pipe     ┌─ stage 1 ─┐  pipe   ┌─ stage k ─┐
//!   │ table: Parquet partitions, zone maps │──[N bufs]─►│ disklet   │─[N]─► … │ disklet   │──► sink
//!   │ file: byte ranges                    │            └───────────┘         └───────────┘   host /
//!   │ pipe: DoPut from other disks         │   ▲ skip requests        compute slots: fair     other
//!   │ host: DoExchange                     │   └──────────────────     per program, per buffer disks
//!   └──────────────────────────────────────┘
//! ```
//!
//! * [`memory`]: the fixed memory budget and per-job grants; buffers in flight are accounted.
//! * [`stream`]: fixed-size stream buffers and the stream readers (table, file).
//! * [`disklet`]: the disklet interface — `init` (construction with params and scratch),
//!   `process(buffer, emit)`, `finish(emit)` — and the [`disklet::Emitter`].
//! * [`disklets`]: the built-in disklets (select, aggregate/group-by, bloom_probe, partition, merge, hash_join, and the plan-fragment runner).
//! * [`exchange`]: inboxes of disk-to-disk pipe streams.
//! * [`sched`]: the compute slots, shared fairly between host programs.
//! * [`narrow`]: decimal arithmetic of plan fragments in 64 bits where the values fit.
//! * [`job`]: wiring a [`adisk_core::protocol::JobSpec`] into tasks, scheduling, statistics.
//!
//! Jobs of several host programs run at once. Every buffer a disklet processes, and every
//! buffer a scan reads and decodes, needs a compute slot; slots are handed out buffer by buffer
//! and fairly per host program (`JobSpec::program`, start-time fair queuing on the CPU time
//! each program used), so a program with one job gets the same share of the disk as one with
//! many, and jobs never run to completion one after another.
#![warn(missing_docs)]

pub mod apps;
pub mod cancel;
pub mod compact;
pub mod disklet;
pub mod disklets;
pub mod error;
pub mod exchange;
pub mod expr;
pub mod job;
pub mod late;
pub mod like;
pub mod memory;
pub mod narrow;
pub mod order;
pub mod sched;
pub mod stage;
pub mod stream;
pub mod user;
pub mod wiring;

pub(crate) use error::df_err;
pub use error::{DiskOsError, Result};
pub use job::{DiskOs, DiskOsConfig};

pub use adisk_core::stats::thread_cpu_ns;
