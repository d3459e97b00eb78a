//! `adisk bench …`: the benchmarks, each in its own module, dispatched from here.

use crate::common::CliError;
use std::path::{Path, PathBuf};

/// Benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Disk-side scan throughput: Q6-like select and Q1-like aggregation over lineitem, on 1
    /// and 4 disks, against DuckDB (1 thread) on the same Parquet files.
    Scan {
        /// Scale factor.
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        /// Disk counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        disks: Vec<u32>,
        /// Repeats per measurement (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Python interpreter with the `duckdb` module.
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// The 22 TPC-H queries: offload auto vs none (conventional) vs DuckDB (2 threads) on the
    /// same files, medians of repeats, with data reduction.
    Tpch(crate::bench_tpch::TpchBenchArgs),
    /// Fair sharing per host program: one query alone, then beside a crowd of copies from
    /// another program and from its own, on one disk.
    Fair(crate::bench_fair::FairBenchArgs),
    /// The papers' applications in both modes, host link throttled to 1/8 of the disks'
    /// aggregate read rate and unthrottled: medians, bytes per link, active ÷ conventional.
    App(crate::bench_app::AppBenchArgs),
    /// CPU emulation: one disk runs a CPU-bound application under each `--cpus` limit (a
    /// cgroup quota); its slowdown against the ratio of the limits. Needs root.
    Cpu(crate::bench_cpu::CpuBenchArgs),
    /// The simulator against the runtime: TPC-H queries at offload levels, each run's trace
    /// replayed on its recorded configuration; measured and predicted medians, the error.
    Replay(crate::bench_replay::ReplayBenchArgs),
    /// The Flight SQL service: queries per second and p50/p99 latency of Q6 and Q1 at 1, 4
    /// and 16 concurrent clients, against the same queries in process; a large result's MB/s.
    Serve(crate::bench_serve::ServeBenchArgs),
    /// Disk-to-disk streams: a pair and all-to-all, direct and via the host, against the
    /// loopback Flight DoPut rate measured in the same run.
    Exchange(crate::bench_exchange::ExchangeBenchArgs),
    /// ActiveDisk through Flight SQL (ADBC) against DuckDB-httpfs and DataFusion reading the
    /// same files over HTTP from the storage side, on several machines (network namespaces)
    /// with the host's link shaped to each `--link-mbit`: TPC-H, a table per rate, an SVG
    /// plot. Needs root and iproute2.
    Remote(crate::bench_remote::RemoteBenchArgs),
    /// What verifying every read costs: one lineitem partition decoded with and without the
    /// per-chunk and footer checksums, medians, cost per GB read.
    Checksum(crate::bench_checksum::ChecksumBenchArgs),
    /// What trust costs: TPC-H with authentication off vs on, with 2 replicas vs 1 (no
    /// failure), and queries with a disk killed mid-query vs without, side by side.
    Faults(crate::bench_faults::FaultsBenchArgs),
    /// User disklets: the WASM count_if example vs the built-in native disklets on lineitem, one disk.
    Disklet {
        /// Scale factor.
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        /// Repeats per measurement (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// The SDK directory (holds c/build.sh and c/examples/).
        #[arg(long, default_value = "sdk")]
        sdk: PathBuf,
    },
}

pub async fn bench(dir: &Path, cmd: BenchCommand) -> Result<(), CliError> {
    match cmd {
        BenchCommand::Scan {
            sf,
            disks,
            repeats,
            python,
        } => crate::bench::scan(dir, sf, &disks, repeats.max(1), &python).await,
        BenchCommand::Tpch(a) => crate::bench_tpch::run(dir, a).await,
        BenchCommand::Fair(a) => crate::bench_fair::run(dir, a).await,
        BenchCommand::Exchange(a) => crate::bench_exchange::run(dir, a).await,
        BenchCommand::Remote(a) => crate::bench_remote::run(dir, a).await,
        BenchCommand::Serve(a) => crate::bench_serve::run(dir, a).await,
        BenchCommand::App(a) => crate::bench_app::run(dir, a).await,
        BenchCommand::Cpu(a) => crate::bench_cpu::run(dir, a).await,
        BenchCommand::Replay(a) => crate::bench_replay::run(dir, a).await,
        BenchCommand::Checksum(a) => crate::bench_checksum::run(dir, a).await,
        BenchCommand::Faults(a) => crate::bench_faults::run(dir, a).await,
        BenchCommand::Disklet { sf, repeats, sdk } => {
            crate::disklet_cmd::bench(dir, sf, repeats.max(1), &sdk).await
        }
    }
}
