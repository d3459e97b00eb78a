//! `adisk`: the ActiveDisk command. See `adisk --help` and the README.
mod app_cmd;
mod bench;
mod bench_app;
mod bench_checksum;
mod bench_cmd;
mod bench_cpu;
mod bench_exchange;
mod bench_fair;
mod bench_faults;
mod bench_remote;
mod bench_remote_peers;
mod bench_replay;
mod bench_serve;
mod bench_tpch;
mod calibrate;
mod cert_cmd;
mod chaos;
mod common;
mod cpu_limit;
mod disklet_cmd;
mod files_http;
mod linkfault;
mod local;
mod netns;
mod output;
mod py_server;
mod repair_cmd;
mod serve_cmd;
mod slt;
mod sql_cmd;
mod traces_cmd;
mod validate;

use adisk_host::JobRequest;
use adisk_host::load::{FileFormat, TpchLoad};
use clap::{Parser, Subcommand};
use common::{CliError, connect, connect_lazy, parse_param};
use std::path::PathBuf;
use std::process::ExitCode;

/// ActiveDisk: an active-storage engine. Disks run disklets on their local data; the host
/// plans, ships work to the disks and combines what comes back.
#[derive(Parser, Debug)]
#[command(name = "adisk", version, about, long_about = None)]
struct Cli {
    /// Cluster directory: holds cluster.toml and the local disks' data. For `adisk disk`, the
    /// disk's own data directory (its tables, manifest and temporary files).
    #[arg(
        long,
        global = true,
        env = "ADISK_HOME",
        default_value = "./adisk-data"
    )]
    dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one disk node (Arrow Flight server + DiskOS) on the data directory --dir.
    ///
    /// Here --dir is this disk's own data directory (tables, manifest, temporary files; one
    /// disk process per directory), not a cluster directory: the cluster is the
    /// cluster.toml the host reads, and --members names it for the disk.
    Disk(local::DiskArgs),
    /// Answer TPC-H partition requests (`TABLE SF PART PARTS` per line on standard input) with
    /// Arrow IPC streams on standard output: what a disk runs in a child process to generate
    /// (see `adisk_storage::tpch::generate_isolated`).
    #[command(hide = true)]
    TpchGenerate,
    /// Serve the Parquet files under --root over HTTP on --listen (the storage side of
    /// `adisk bench remote`'s peer engines).
    #[command(hide = true)]
    FilesHttp {
        /// Address to listen on (`ip:port`).
        #[arg(long)]
        listen: String,
        /// The directory whose `*.parquet` files are served.
        #[arg(long)]
        root: PathBuf,
    },
    /// Start a local cluster: N disk processes on 127.0.0.1, in the background.
    Up(local::UpArgs),
    /// Stop the local cluster started by `up`: only the disks `up` started (a hand-written
    /// cluster.toml, shared by several machines, and its disks are left alone).
    Down,
    /// Seeded fault injection: TPC-H queries checked against the official answers while disks
    /// are killed, stopped and restarted, bytes flipped and tables reloaded (own cluster under
    /// --dir/chaos-SEED).
    Chaos(chaos::ChaosArgs),
    /// TLS certificates for a cluster of several machines: its certificate authority and its
    /// members' certificates (rustls; see docs/deploy.md).
    #[command(subcommand)]
    Cert(cert_cmd::CertCommand),
    /// Disks, memory, jobs and tables of the cluster.
    Status {
        /// Output format.
        #[arg(long, value_enum, default_value_t = output::Format::Table)]
        format: output::Format,
        /// Ask a running Flight SQL service instead of the disks directly.
        #[command(flatten)]
        remote: sql_cmd::ConnectArgs,
    },
    /// Every disk reads all its partitions and checks them against its manifest (size and
    /// CRC-32), lists the corrupt ones and refetches each from a good copy on another disk;
    /// fails if a corrupt copy is left.
    Scrub {
        /// Output format (json: one line per disk).
        #[arg(long, value_enum, default_value_t = output::Format::Table)]
        format: output::Format,
        /// Only report: do not refetch corrupt copies.
        #[arg(long)]
        no_repair: bool,
    },
    /// Bring disks up to date from their replicas: each fetches, disk to disk, the copies its
    /// tables' latest loads say it holds and it lacks (a disk that came back empty, or missed
    /// a load). Disks also do this by themselves when they start.
    Repair {
        /// Only this disk (repeatable; default: every disk).
        #[arg(long = "disk")]
        disks: Vec<u32>,
        /// Also read every copy whole and refetch those that fail their check.
        #[arg(long)]
        verify: bool,
        /// Output format (json: one line per disk).
        #[arg(long, value_enum, default_value_t = output::Format::Table)]
        format: output::Format,
    },
    /// Restart a disk of the local cluster that stopped (killed, crashed), on its old address.
    Restart {
        /// The disk.
        #[arg(long)]
        disk: u32,
        /// Do not let it repair itself from its peers when it starts.
        #[arg(long)]
        no_auto_repair: bool,
    },
    /// Load data into the disks.
    #[command(subcommand)]
    Load(LoadCommand),
    /// Run a built-in disklet on every disk holding a table and print the combined result.
    Run(RunArgs),
    /// The papers' applications on the cluster (`active`: the disks compute, disk to disk;
    /// `conventional`: the host reads the raw input), with statistics per disk.
    #[command(subcommand)]
    App(app_cmd::AppCommand),
    /// Run SQL: DataFusion plans it at the host; scans, filters, partial aggregates and Bloom
    /// semi-joins run at the disks as the offload level allows.
    Sql(sql_cmd::SqlArgs),
    /// Print a query's plan with each operator marked disk or host (`explain analyze "…"` runs
    /// it and prints the bytes at every stage, per disk).
    Explain(sql_cmd::ExplainArgs),
    /// The traces the Flight SQL service keeps of your last queries: a list, or one written
    /// as an `adisk-trace` (for `adisk sim replay`) and a Perfetto timeline (`--connect`
    /// defaults to the service `adisk up` started).
    Traces(traces_cmd::TracesArgs),
    /// Run `.slt` files (sqllogictest format, expected rows checked in) at the given offload
    /// levels; one line per record, then `N passed, N failed`. `--complete` writes the expected
    /// rows from DuckDB on the same Parquet files.
    Slt(slt::SltArgs),
    /// TPC-H queries and the check against the official answers.
    #[command(subcommand)]
    Tpch(sql_cmd::TpchCommand),
    /// Start a 4-disk cluster, load TPC-H SF 0.1, run a select and an aggregation, stop.
    Demo {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Disks.
        #[arg(long, default_value_t = 4)]
        disks: u32,
    },
    /// Serve the cluster to Arrow Flight SQL clients (ADBC, JDBC, `adisk` itself): queries,
    /// prepared statements, the catalog; clients log in as users of `DIR/users.toml`.
    Serve(serve_cmd::ServeArgs),
    /// Users of the Flight SQL service.
    #[command(subcommand)]
    User(serve_cmd::UserCommand),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench_cmd::BenchCommand),
    /// User disklets in WebAssembly: install, list, run, remove.
    #[command(subcommand)]
    Disklet(disklet_cmd::DiskletCommand),
    /// Measure what one core of this machine costs per unit of each operator (scan, IPC,
    /// joins, groups, sorts, Bloom probes, partitioning) and write the cost file `auto` and
    /// the simulator read (DIR/costs.toml).
    Calibrate(calibrate::CalibrateArgs),
    /// Validate the simulator against the runtime: workloads measured on local clusters of
    /// 1–8 disks under emulated configurations beside the simulator's prediction for each
    /// (a reference trace replayed on it); errors, a JSON report and a scatter plot.
    Validate(validate::ValidateArgs),
    /// The architecture simulator.
    #[command(subcommand)]
    Sim(adisk_sim::cli::SimCommand),
}

#[derive(Subcommand, Debug)]
enum LoadCommand {
    /// Generate TPC-H at the disks (range declustering on the primary key).
    Tpch {
        /// Scale factor (0.001 and up).
        #[arg(long)]
        sf: f64,
        /// Partitions per disk of the split tables.
        #[arg(long, default_value_t = 1)]
        partitions_per_disk: u32,
        /// Rows per Parquet row group (zone-map granularity).
        #[arg(long, default_value_t = adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS)]
        row_group_rows: usize,
        /// Only these tables (comma-separated).
        #[arg(long, value_delimiter = ',')]
        tables: Vec<String>,
        /// Copies of each partition, on consecutive disks (chained declustering).
        #[arg(long, default_value_t = 1)]
        replicas: u32,
        /// Place the tables in this disk group only (`adisk up --groups`): their partitions
        /// go to that group's disks, and queries joining them with tables of another group
        /// exchange rows through the router.
        #[arg(long)]
        group: Option<u32>,
    },
    /// Load Parquet files into a table.
    Parquet(FileLoadArgs),
    /// Load CSV files (with a header row) into a table.
    Csv(FileLoadArgs),
    /// An application's input, generated deterministically and written at the disks.
    #[command(flatten)]
    App(app_cmd::AppLoad),
    /// Generate deterministic grayscale images (one byte per pixel) as files spread over the disks.
    Images {
        /// Number of images.
        #[arg(long)]
        count: u32,
        /// Width and height, pixels.
        #[arg(long, default_value_t = 512)]
        side: u32,
    },
}

#[derive(clap::Args, Debug)]
struct FileLoadArgs {
    /// Table name.
    table: String,
    /// Input files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Declustering rule: range:COL, hash:COL or roundrobin.
    #[arg(long, default_value = "roundrobin")]
    decluster: String,
    /// Copies of each partition, on consecutive disks (chained declustering).
    #[arg(long, default_value_t = 1)]
    replicas: u32,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// scan | select | aggregate | groupby | bloom_probe | partition | sort
    disklet: String,
    /// Table to run on.
    #[arg(long)]
    table: String,
    /// Columns to read (default: the ones the parameters reference).
    #[arg(long, value_delimiter = ',')]
    columns: Vec<String>,
    /// Disklet parameter, KEY=VALUE (SQL fragments), repeatable: predicate, project, aggs,
    /// group_by, exchange, key, build_table, build_key, build_predicate, bloom_kib, order_by, limit.
    #[arg(long = "param", value_parser = parse_param)]
    params: Vec<(String, String)>,
    /// Scratch per disklet, KiB (0: a quarter of each disk's memory).
    #[arg(long, default_value_t = 0)]
    scratch_kib: u64,
    /// Temporary disk space per disk job, KiB: a `sort` (or a final aggregation) past its
    /// scratch spills sorted runs there and merges them (0: none; it fails instead).
    #[arg(long, default_value_t = 0)]
    temp_kib: u64,
    /// Stream buffer size of the disk jobs, KiB, lowered until the job's streams fit half of
    /// a disk's memory (0: the disks' own size; default: SQL's 1 MiB, except the disks' own
    /// for `sort` and exchanges).
    #[arg(long)]
    buffer_kib: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = output::Format::Table)]
    format: output::Format,
    /// Rows to print in table format.
    #[arg(long, default_value_t = 20)]
    max_rows: usize,
}

/// Blocks SIGPIPE in the calling thread.
fn block_sigpipe() {
    // SAFETY: sigset operations on a local set; pthread_sigmask on the calling thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Disk(_)) {
        // Client commands behave like Unix tools when their output pipe closes (`| head`):
        // they end quietly instead of failing on the write. Disk nodes keep SIGPIPE ignored.
        // SAFETY: setting a signal disposition before any thread is started.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ADISK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Sim(cmd) => adisk_sim::cli::run(cmd).map_err(CliError::from),
        command => {
            // The runtime's threads write to the disks' sockets with writev, which raises SIGPIPE
            // when a disk died: they block it (the write fails with EPIPE instead, and the query
            // fails over); only the main thread, which writes the output, keeps SIGPIPE.
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .on_thread_start(block_sigpipe)
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: cannot start the runtime: {e}");
                    return ExitCode::from(1);
                }
            };
            runtime.block_on(dispatch(cli.dir, command))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn dispatch(dir: PathBuf, command: Command) -> Result<(), CliError> {
    match command {
        Command::Disk(args) => local::run_disk(&dir, args).await,
        Command::FilesHttp { listen, root } => files_http::serve(&listen, &root).await,
        Command::TpchGenerate => {
            let out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
            let input = std::io::BufReader::new(std::io::stdin());
            adisk_storage::tpch::serve_generator(input, out)
                .map_err(|e| CliError::Other(e.to_string()))
        }
        Command::Up(args) => {
            let config = local::up(&dir, &args).await?;
            println!("{}", local::describe(&config, &dir));
            local::measure_links(&dir).await;
            Ok(())
        }
        Command::Down => local::down(&dir).await,
        Command::Chaos(args) => chaos::run(&dir, &args).await,
        Command::Cert(command) => cert_cmd::run(&command),
        Command::Status { format, remote } => match remote.client(&dir).await? {
            Some(mut client) => {
                let report = client
                    .status()
                    .await
                    .map_err(|e| CliError::Other(e.to_string()))?;
                output::print_status(&report, format)
            }
            None => output::status(&connect_lazy(&dir)?, format).await,
        },
        Command::Scrub { format, no_repair } => {
            repair_cmd::scrub(&connect_lazy(&dir)?, format, no_repair).await
        }
        Command::Repair {
            disks,
            verify,
            format,
        } => repair_cmd::repair(&connect_lazy(&dir)?, &disks, verify, format).await,
        Command::Restart {
            disk,
            no_auto_repair,
        } => local::restart(&dir, disk, !no_auto_repair).await,
        Command::Run(a) => {
            let cluster = std::sync::Arc::new(connect(&dir).await?);
            let req = JobRequest {
                disklet: a.disklet,
                table: a.table,
                columns: a.columns,
                params: a.params.into_iter().collect(),
                scratch_kib: a.scratch_kib,
                temp_kib: a.temp_kib,
                buffer_kib: a.buffer_kib,
            };
            let out = adisk_host::run::run(&cluster, &req).await?;
            output::print_job(&out, a.format, a.max_rows)
        }
        Command::Sql(a) => sql_cmd::sql(&dir, a).await,
        Command::Explain(a) => sql_cmd::explain(&dir, a).await,
        Command::Traces(a) => traces_cmd::traces(&dir, a).await,
        Command::Slt(a) => slt::slt(connect(&dir).await?, a)
            .await
            .map_err(|e| CliError::Other(e.to_string())),
        Command::Tpch(c) => sql_cmd::tpch_cmd(&dir, c).await,
        Command::Demo { sf, disks } => local::demo(&dir, sf, disks).await,
        Command::Serve(args) => serve_cmd::serve(&dir, args).await,
        Command::User(command) => serve_cmd::user(&dir, command),
        Command::Bench(b) => bench_cmd::bench(&dir, b).await,
        Command::Calibrate(a) => calibrate::run(&dir, a).await,
        Command::Validate(a) => validate::run(&dir, a).await,
        Command::Disklet(cmd) => disklet_cmd::run(&dir, cmd).await,
        Command::App(a) => app_cmd::run(&dir, a).await,
        Command::Load(what) => load(&dir, what).await,
        Command::Sim(_) => unreachable!("handled before the runtime starts"),
    }
}

/// `adisk load …`: TPC-H generated at the disks, Parquet or CSV files declustered, an
/// application's input, the convolution example's images.
async fn load(dir: &std::path::Path, what: LoadCommand) -> Result<(), CliError> {
    match what {
        LoadCommand::Tpch {
            sf,
            partitions_per_disk,
            row_group_rows,
            tables,
            replicas,
            group,
        } => {
            let cluster = connect(dir).await?;
            let disks = match group {
                None => vec![],
                Some(g) => group_disks(cluster.config(), g)?,
            };
            output::load_tpch(
                &cluster,
                &TpchLoad {
                    sf,
                    partitions_per_disk,
                    row_group_rows,
                    tables,
                    replicas,
                    disks,
                },
            )
            .await
        }
        LoadCommand::Parquet(a) => {
            output::load_files(
                &connect(dir).await?,
                &a.table,
                FileFormat::Parquet,
                &a.files,
                &a.decluster,
                a.replicas,
            )
            .await
        }
        LoadCommand::Csv(a) => {
            output::load_files(
                &connect(dir).await?,
                &a.table,
                FileFormat::Csv,
                &a.files,
                &a.decluster,
                a.replicas,
            )
            .await
        }
        LoadCommand::App(what) => app_cmd::load(dir, what).await,
        LoadCommand::Images { count, side } => disklet_cmd::load_images(dir, count, side).await,
    }
}

/// The disks of group `g` of a cluster (`adisk up --groups`).
fn group_disks(config: &adisk_core::config::ClusterConfig, g: u32) -> Result<Vec<u32>, CliError> {
    let disks: Vec<u32> = config
        .disks
        .iter()
        .map(|d| d.id)
        .filter(|d| config.group_of(*d) == g)
        .collect();
    if disks.is_empty() {
        let groups: std::collections::BTreeSet<u32> =
            config.disks.iter().map(|d| config.group_of(d.id)).collect();
        return Err(CliError::Other(format!(
            "no disk group {g} in this cluster (its groups: {groups:?})"
        )));
    }
    Ok(disks)
}
