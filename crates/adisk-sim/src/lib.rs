//! # adisk-sim — the ActiveDisk architecture simulator
//!
//! A deterministic discrete-event simulator of the architectures evaluated by the five
//! papers behind ActiveDisk (acharya-…, uysal-…, memik-…, riedel-…, chiu-…): single hosts
//! with conventional disks, SMPs, clusters, active disks, smart-disk clusters and
//! distributed smart-disk groups, with every experiment of the papers as a runnable file.
//!
//! Design goals: a seed and the commit reproduce a run byte for byte (integer nanosecond
//! time, `(time, sequence)` event order, a seeded PRNG, no wall clock); every cost has a
//! documented source (`costs`, `docs/simulator.md`); model code is separate from the
//! assembly of a configuration; fast enough to re-run all papers in seconds.
//!
//! ```text
//!   experiments/<paper>/*.toml ──► config (devices, systems, workload, sweep, report)
//!                                      │
//!            ┌─────────────────────────┼───────────────────────────┐
//!            ▼                         ▼                           ▼
//!     arch::build               workload::compile              costs::Costs
//!  (model::{disk,ssd,cpu,     (select … fft, TPC plans,      (cycles/byte, OS µs,
//!   link,memory} wired        Algorithm 1 bundling)           each with a source)
//!   into a Topology)                  │
//!            └──────────► engine::Engine ◄─── Plan (phases, flows)
//!                          │  des::IdQueue (time, seq) · rng · SimTime
//!                          ▼
//!                  report::RunReport ──► experiment (CSV, SVG, tables) ──► cli (`adisk sim`)
//! ```
//!
//! `replay` takes the other direction: a trace recorded on the real engine (`adisk-trace` v1:
//! per job and disk, bytes read, CPU, bytes shipped) is rebuilt as a per-disk pipeline over
//! the same component models and simulated on another configuration (`adisk sim replay`).
//!
//! ```no_run
//! use adisk_sim::cli::{run, SimCommand};
//! run(SimCommand::Run { file: "experiments/acharya/core-select.toml".into(), out: None,
//!                       format: "table".into(), seed: Some(1) }).unwrap();
//! ```

#![warn(missing_docs)]

pub mod arch;
pub mod cli;
pub mod conclusions;
pub mod config;
pub mod costs;
pub mod des;
pub mod embedded;
pub mod engine;
pub mod experiment;
pub mod model;
pub mod replay;
pub mod report;
pub mod rng;
pub mod sensitivity;
pub mod svg;
pub mod time;
pub mod trace;
pub mod workload;

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A configuration problem: file, dotted key and reason.
    #[error("{file}: {key}: {reason}")]
    Config {
        /// File.
        file: String,
        /// Dotted key (with line when known).
        key: String,
        /// Reason.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Bad command-line usage.
    #[error("{0}")]
    Usage(String),
    /// A trace file is not JSON, or a field has the wrong type.
    #[error("{path}: not an adisk trace (JSON): {reason}")]
    TraceNotJson {
        /// Trace file.
        path: String,
        /// The parser's message.
        reason: String,
    },
    /// A trace's `format` field is not `adisk-trace`.
    #[error("{path}: format: expected \"adisk-trace\", found {found}")]
    TraceFormat {
        /// Trace file.
        path: String,
        /// What the field held (`<missing>` when absent).
        found: String,
    },
    /// A trace's `version` is not one this simulator reads.
    #[error("{path}: version: unsupported trace version {found} (this simulator reads version 1)")]
    TraceVersion {
        /// Trace file.
        path: String,
        /// What the field held (`<missing>` when absent).
        found: String,
    },
    /// A trace's `recorded.disks` is 0.
    #[error("{path}: recorded.disks: a trace needs at least one disk, got 0")]
    TraceNoDisks {
        /// Trace file.
        path: String,
    },
    /// A job of a trace lists no disk.
    #[error("{path}: jobs[{job}].disks: a job needs at least one disk entry, the array is empty")]
    TraceEmptyJob {
        /// Trace file.
        path: String,
        /// Index of the job in `jobs`.
        job: usize,
    },
    /// A trace field holds a value no model can use.
    #[error("{path}: {key}: {reason}")]
    TraceInvalid {
        /// Trace file.
        path: String,
        /// Dotted key.
        key: String,
        /// Reason.
        reason: String,
    },
    /// An internal invariant failed.
    #[error("internal error: {0}")]
    Internal(String),
}
