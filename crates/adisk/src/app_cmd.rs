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
    /// The data cube by PipeHash (acharya §4, uysal §5): the lattice's minimum spanning tree by
    /// estimated sizes, pipelines computed in one scan each at every disk, partials shipped to
    /// the disk responsible for their key range; group-by `mask` lands in `OUTPUT_g<mask>`.
    Datacube(DatacubeArgs),
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

/// `adisk app datacube`.
#[derive(Args, Debug)]
pub struct DatacubeArgs {
    #[command(flatten)]
    common: Common,
    /// Fact table (`adisk load datacube`): `d0..dk` UInt32, `measure` Int64.
    #[arg(long, default_value = "datacube")]
    table: String,
    /// Prefix of the result tables (`OUTPUT_g<mask>`, bit j of mask = dimension dj grouped).
    #[arg(long, default_value = "cube")]
    output: String,
    /// Scratch of each disklet of a pipeline job, KiB (default: from the disks' memory).
    #[arg(long)]
    memory_kib: Option<u64>,
    /// Rows sampled in all for the size estimates and the key ranges.
    #[arg(long, default_value_t = 4096)]
    samples: u64,
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
    /// A data cube fact table (`d0..dk` UInt32, `measure` Int64), generated deterministically.
    Datacube {
        /// Rows.
        #[arg(long)]
        rows: u64,
        /// Distinct values of each dimension, comma-separated (1 to 8 dimensions).
        #[arg(long, default_value = "100,50,20,10")]
        cards: String,
        /// Skew of every dimension: 0 uniform, otherwise the Zipf exponent (0..=10).
        #[arg(long, default_value_t = 0.0)]
        zipf: f64,
        /// Table.
        #[arg(long, default_value = "datacube")]
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
        AppCommand::Datacube(a) => {
            let params = adisk_apps::datacube::CubeParams {
                input: a.table,
                output: a.output,
                mode: mode(&a.common)?,
                memory_bytes: a.memory_kib.map(|k| k.saturating_mul(1024)),
                samples: a.samples,
            };
            let report = adisk_apps::datacube::run(&cluster, &params)
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
        AppLoad::Datacube {
            rows,
            cards,
            zipf,
            table,
            seed,
        } => {
            let cardinalities = parse_cards(&cards)?;
            let bar = indicatif::ProgressBar::new(rows);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/{len} rows ({per_sec}, eta {eta})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(format!("generating {table}"));
            let b = bar.clone();
            let params = adisk_apps::datacube::generator::GenParams {
                rows,
                cardinalities,
                zipf,
                seed,
            };
            let bytes =
                adisk_apps::datacube::load(&cluster, &table, params, move |n| b.set_position(n))
                    .await
                    .map_err(app_err)?;
            bar.finish_and_clear();
            println!("loaded {rows} rows ({bytes} bytes) into `{table}`");
        }
    }
    Ok(())
}

/// `--cards 100,50,20,10`: the dimensions' cardinalities (an empty list has no dimensions,
/// which the generator refuses with its own error).
fn parse_cards(text: &str) -> Result<Vec<u32>, CliError> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>().map_err(|_| {
                CliError::Other(format!(
                    "--cards: `{t}` is not a cardinality (comma-separated integers, e.g. 100,50,20,10)"
                ))
            })
        })
        .collect()
}
