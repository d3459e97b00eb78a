//! Shared vocabulary of ActiveDisk: what the host and the disks say to each other.
//!
//! ```text
//!   host ──JobSpec (JSON in a Flight ticket)──► disk ──RecordBatches──► host
//!                                                 └──JobStats (Flight action "job_stats")──► host
//! ```
//!
//! * [`config`]: the `cluster.toml` a host reads (disks, addresses, memory) — validated, typed errors.
//! * [`protocol`]: job specifications (a graph: input streams, stages, outputs to sinks), action names.
//! * [`builder`]: the one way a disk job is made (ids, programs, wiring, sizes, the grant
//!   formula DiskOS admits jobs with and planners size them with).
//! * [`graph`]: the checks a job graph passes before a disk admits it (ports read once, no cycles).
//! * [`stats`]: per-job, per-stage statistics (bytes read / skipped / shipped, rows, CPU, memory).
//! * [`hash`]: a stable, platform-independent hash of Arrow columns, shared by `partition`
//!   and `bloom_probe` at the disks and the Bloom-filter build at the host.
//! * [`calibration`]: `costs.toml`, the per-operator costs `adisk calibrate` measures, read by
//!   `auto` and the simulator.
//! * [`auth`]: the cluster secret and the per-request tokens every member checks.
//! * [`endpoint`]: tickets a host seals for a client to read one disk's part of a result.
//! * [`bloom`]: the Bloom filter the host builds and the disks probe.
//! * [`sample`]: the even sample of rows written with every partition, for the planner's
//!   selectivity estimates.
//! * [`limits`]: depth and width bounds on expressions, plan fragments and SQL text, checked
//!   without recursion before anything recursive touches them.
//!
//! Nothing here does I/O except reading/writing `cluster.toml` and `cluster.key`.
#![warn(missing_docs)]

pub mod auth;
pub mod bloom;
pub mod builder;
pub mod calibration;
pub mod config;
pub mod endpoint;
pub mod graph;
pub mod hash;
pub mod ipc;
pub mod limits;
pub mod net;
pub mod protocol;
pub mod sample;
pub mod sketch;
pub mod stats;
pub mod tls;
pub mod trace;

/// Bytes in a KiB.
pub const KIB: u64 = 1024;
/// Bytes in a MiB.
pub const MIB: u64 = 1024 * 1024;
