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
    /// Sort-merge project-join (uysal §5) on the two-pass sort: both relations range-partitioned
    /// disk to disk into sorted runs, then at each disk a merge of each relation's runs and a
    /// merge join; the result stays at the disks (a named result).
    Join(JoinArgs),
    /// Image convolution with any k×k kernel (acharya §4, uysal §5) on the images of `adisk
    /// load images`: each disk convolves its images in place, one image per stream buffer;
    /// then every image is checked against a plain reference.
    Conv(ConvArgs),
    /// Satellite composite (acharya §4, uysal §5): each disk composes its sensor records into a
    /// band of the output grid within its memory, shipping the band when a record falls outside
    /// it; the host max-composes the bands into the image and checks it against a plain
    /// composite of the regenerated records.
    Earth(EarthArgs),
}

/// `adisk app earth`.
#[derive(Args, Debug)]
pub struct EarthArgs {
    #[command(flatten)]
    common: Common,
    /// Records table (`adisk load earth`).
    #[arg(long, default_value = "earth")]
    table: String,
    /// Output grid width, pixels (as loaded).
    #[arg(long, default_value_t = 1024)]
    width: u32,
    /// Output grid height, pixels (as loaded).
    #[arg(long, default_value_t = 512)]
    height: u32,
    /// The disks' window, KiB (default: a quarter of the smallest disk's memory).
    #[arg(long)]
    window_kib: Option<u64>,
    /// Check against the composite of regenerated records: `RECORDS,DAYS,SEED` as loaded.
    #[arg(long, value_delimiter = ',')]
    check: Vec<u64>,
}

/// `adisk app conv`.
#[derive(Args, Debug)]
pub struct ConvArgs {
    #[command(flatten)]
    common: Common,
    /// Image side, pixels (as loaded).
    #[arg(long, default_value_t = 512)]
    side: u32,
    /// Kernel weights, k² comma-separated integers, row by row (default: a k×k box blur).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    kernel: Vec<i32>,
    /// k of the default box kernel.
    #[arg(long, default_value_t = 3)]
    k: usize,
    /// Divisor (default: the sum of the weights, or 1 if that is 0).
    #[arg(long)]
    divisor: Option<i32>,
    /// Output table.
    #[arg(long, default_value = "conv_out")]
    output: String,
}

/// `adisk app join`.
#[derive(Args, Debug)]
pub struct JoinArgs {
    #[command(flatten)]
    common: Common,
    /// Left relation (`adisk load join`).
    #[arg(long, default_value = "join_r")]
    left: String,
    /// Right relation.
    #[arg(long, default_value = "join_s")]
    right: String,
    /// Output table.
    #[arg(long, default_value = "join_out")]
    output: String,
    /// Size of a sorted run, KiB (default: a quarter of the smallest disk's memory).
    #[arg(long)]
    run_kib: Option<u64>,
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
    /// Swath-like satellite sensor records (day, lat, lon, value) over many days.
    Earth {
        /// Records.
        #[arg(long)]
        records: u64,
        /// Days the records span.
        #[arg(long, default_value_t = 10)]
        days: u32,
        /// Output grid width the swaths are sampled for.
        #[arg(long, default_value_t = 1024)]
        width: u32,
        /// Output grid height.
        #[arg(long, default_value_t = 512)]
        height: u32,
        /// Table.
        #[arg(long, default_value = "earth")]
        table: String,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// The join's two relations of 64-byte tuples (UInt32 `key` uniform in 0..keys, 15
    /// more UInt32 fields), as uysal's.
    Join {
        /// Tuples per relation.
        #[arg(long)]
        rows: u64,
        /// Distinct keys (the output has about rows² / keys tuples).
        #[arg(long)]
        keys: Option<u32>,
        /// Left relation.
        #[arg(long, default_value = "join_r")]
        left: String,
        /// Right relation.
        #[arg(long, default_value = "join_s")]
        right: String,
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
        AppCommand::Conv(a) => {
            let kernel = if a.kernel.is_empty() {
                adisk_apps::conv::kernel::Kernel::boxed(a.k)
            } else {
                let sum: i32 = a.kernel.iter().sum();
                let divisor = a.divisor.unwrap_or(if sum == 0 { 1 } else { sum });
                adisk_apps::conv::kernel::Kernel::new(a.kernel, divisor)
            }
            .map_err(app_err)?;
            let params = adisk_apps::conv::ConvParams {
                images: "images".into(),
                side: a.side,
                kernel,
                output: a.output,
                mode: mode(&a.common)?,
            };
            let report = adisk_apps::conv::run(&cluster, &params)
                .await
                .map_err(app_err)?;
            (report, a.common.format)
        }
        AppCommand::Earth(a) => {
            let check = match a.check.as_slice() {
                [] => None,
                [r, d, s] => Some((*r, *d as u32, *s)),
                _ => return Err(CliError::Other("--check takes RECORDS,DAYS,SEED".into())),
            };
            let params = adisk_apps::earth::EarthParams {
                table: a.table,
                width: a.width,
                height: a.height,
                window_bytes: a.window_kib.map(|k| k * 1024),
                mode: mode(&a.common)?,
                check,
            };
            let report = adisk_apps::earth::run(&cluster, &params)
                .await
                .map_err(app_err)?;
            (report, a.common.format)
        }
        AppCommand::Join(a) => {
            let params = adisk_apps::join::JoinParams {
                left: a.left,
                right: a.right,
                output: a.output,
                mode: mode(&a.common)?,
                run_bytes: a.run_kib.map(|k| k * 1024),
            };
            let report = adisk_apps::join::run(&cluster, &params)
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

/// A progress bar of `total` rows.
fn progress(total: u64, message: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {pos}/{len} ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(message.to_string());
    bar
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
        AppLoad::Earth {
            records,
            days,
            width,
            height,
            table,
            seed,
        } => {
            let bar = progress(records, &format!("generating {table}"));
            let b = bar.clone();
            adisk_apps::earth::load(
                &cluster,
                &table,
                (records, days, seed),
                (width, height),
                move |n| b.set_position(n),
            )
            .await
            .map_err(app_err)?;
            bar.finish_and_clear();
            println!("loaded {records} sensor records over {days} days into `{table}`");
        }
        AppLoad::Join {
            rows,
            keys,
            left,
            right,
            seed,
        } => {
            let keys =
                keys.unwrap_or_else(|| rows.saturating_mul(8).min(u64::from(u32::MAX)) as u32);
            let bar = progress(2 * rows, &format!("generating {left}, {right}"));
            let b = bar.clone();
            let bytes =
                adisk_apps::join::load(&cluster, (&left, &right), rows, keys, seed, move |n| {
                    b.set_position(n)
                })
                .await
                .map_err(app_err)?;
            bar.finish_and_clear();
            println!(
                "loaded {rows} tuples into each of `{left}` and `{right}` ({bytes} bytes, {keys} keys)"
            );
        }
    }
    Ok(())
}
