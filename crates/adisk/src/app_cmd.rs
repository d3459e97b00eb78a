//! `adisk app NAME` (the papers' applications on the cluster) and `adisk load NAME` (their
//! deterministic inputs, written at the disks).
use crate::{CliError, connect};
use adisk_apps::Mode;
use clap::{Args, Subcommand};
use std::path::Path;

/// The applications.
#[derive(Subcommand, Debug)]
pub enum AppCommand {
    /// Two-pass NOW-sort of 100-byte records (uysal §5): sample splitters, range-partition disk
    /// to disk into sorted runs within each disk's memory, merge the runs at each disk; then
    /// the valsort-style check of the output.
    Sort(SortArgs),
    /// Out-of-core 2-D FFT (chiu §4.4): rows (BLOCK, *) over the disks, row FFTs at the disks,
    /// a transpose by disk-to-disk exchange into runs on each disk, merged into whole columns
    /// and FFT'd there; then the check against the single-node oracle.
    Fft(FftArgs),
}

/// Options every application takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// `active` (the disks compute) or `conventional` (the host reads the raw input).
    #[arg(long, default_value = "active")]
    pub mode: String,
    /// Output format: table or json.
    #[arg(long, default_value = "table")]
    pub format: String,
}

/// `adisk app sort`.
#[derive(Args, Debug)]
pub struct SortArgs {
    #[command(flatten)]
    common: Common,
    /// Input table of records (`adisk load sort`).
    #[arg(long, default_value = "sort")]
    table: String,
    /// Output table (partition d at disk d holds the d-th key range).
    #[arg(long, default_value = "sort_sorted")]
    output: String,
    /// Size of a sorted run, KiB (default: a quarter of the smallest disk's memory).
    #[arg(long)]
    run_kib: Option<u64>,
    /// Keys sampled per disk for the splitters.
    #[arg(long, default_value_t = 1000)]
    samples_per_disk: u64,
}

/// `adisk app fft`.
#[derive(Args, Debug)]
pub struct FftArgs {
    #[command(flatten)]
    common: Common,
    /// Input matrix table (`adisk load fft`).
    #[arg(long, default_value = "fft")]
    table: String,
    /// Output table (X; partition d at disk d holds the d-th block of columns).
    #[arg(long, default_value = "fft_out")]
    output: String,
    /// Seed the input was loaded with (the check regenerates the matrix from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Bytes a disk buffers before writing a run, KiB (default: 1/16 of the smallest disk's memory).
    #[arg(long)]
    cap_kib: Option<u64>,
    /// Stream buffer of the active jobs, KiB (default: 16, more for wide rows).
    #[arg(long)]
    buffer_kib: Option<u64>,
    /// Most values of one column segment in a run.
    #[arg(long, default_value_t = 256)]
    segment_values: u64,
}

/// The applications' input generators.
#[derive(Subcommand, Debug)]
pub enum AppLoad {
    /// Sort benchmark records (10-byte key, 90-byte payload), generated deterministically.
    Sort {
        /// Records.
        #[arg(long)]
        records: u64,
        /// Table.
        #[arg(long, default_value = "sort")]
        table: String,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// A complex rows x cols matrix (three planted tones plus noise), rows (BLOCK, *) over the
    /// disks, one element per row: row, col (UInt32), re, im (Float64).
    Fft {
        /// Rows of the matrix.
        #[arg(long)]
        rows: u64,
        /// Columns of the matrix.
        #[arg(long)]
        cols: u64,
        /// Table.
        #[arg(long, default_value = "fft")]
        table: String,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn mode(common: &Common) -> Result<Mode, CliError> {
    common
        .mode
        .parse()
        .map_err(|e: adisk_apps::AppError| CliError::Other(e.to_string()))
}

fn app_err(e: adisk_apps::AppError) -> CliError {
    match e {
        adisk_apps::AppError::Host(h) => CliError::Host(h),
        other => CliError::Other(other.to_string()),
    }
}

/// Runs `adisk app …`.
pub async fn run(dir: &Path, command: AppCommand) -> Result<(), CliError> {
    let cluster = connect(dir).await?;
    let (report, format) = match command {
        AppCommand::Sort(a) => {
            let params = adisk_apps::sort::SortParams {
                input: a.table,
                output: a.output,
                mode: mode(&a.common)?,
                run_bytes: a.run_kib.map(|k| k * 1024),
                samples_per_disk: a.samples_per_disk,
            };
            let report = adisk_apps::sort::run(&cluster, &params)
                .await
                .map_err(app_err)?;
            (report, a.common.format)
        }
        AppCommand::Fft(a) => {
            let params = adisk_apps::fft::FftParams {
                input: a.table,
                output: a.output,
                mode: mode(&a.common)?,
                seed: a.seed,
                cap_bytes: a.cap_kib.map(|k| k * 1024),
                buffer_kib: a.buffer_kib,
                segment_values: a.segment_values,
            };
            let report = adisk_apps::fft::run(&cluster, &params)
                .await
                .map_err(app_err)?;
            (report, a.common.format)
        }
    };
    match format.as_str() {
        "json" => println!("{}", report.to_json()),
        _ => print!("{}", report.to_text()),
    }
    if report.result.get("valid") == Some(&serde_json::Value::Bool(false)) {
        return Err(CliError::Other(format!(
            "{}: the output failed its check: {}",
            report.app, report.result
        )));
    }
    Ok(())
}

/// Runs `adisk load NAME` for an application's input.
pub async fn load(dir: &Path, what: AppLoad) -> Result<(), CliError> {
    let cluster = connect(dir).await?;
    match what {
        AppLoad::Sort {
            records,
            table,
            seed,
        } => {
            let bar = indicatif::ProgressBar::new(records);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/{len} records ({per_sec}, eta {eta})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(format!("generating {table}"));
            let b = bar.clone();
            let bytes =
                adisk_apps::sort::load(&cluster, &table, records, seed, move |n| b.set_position(n))
                    .await
                    .map_err(app_err)?;
            bar.finish_and_clear();
            println!("loaded {records} records ({bytes} bytes) into `{table}`");
        }
        AppLoad::Fft {
            rows,
            cols,
            table,
            seed,
        } => {
            let bar = indicatif::ProgressBar::new(rows.saturating_mul(cols));
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/{len} elements ({per_sec}, eta {eta})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(format!("generating {table}"));
            let b = bar.clone();
            let bytes = adisk_apps::fft::load(&cluster, &table, rows, cols, seed, move |n| {
                b.set_position(n)
            })
            .await
            .map_err(app_err)?;
            bar.finish_and_clear();
            println!("loaded a {rows} x {cols} complex matrix ({bytes} bytes) into `{table}`");
        }
    }
    Ok(())
}
