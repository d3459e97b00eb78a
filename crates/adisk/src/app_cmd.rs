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
    /// Frequent itemsets (uysal §5, chiu §4.2): count distribution for passes 1–2 (each disk
    /// counts, the host sums), then eclat (frequent pairs' tid-lists repartitioned disk to disk
    /// by equivalence class and mined locally), count distribution or hybrid distribution;
    /// checked against Apriori over the regenerated transactions.
    Dmine(DmineArgs),
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

/// `adisk app dmine`.
#[derive(Args, Debug)]
pub struct DmineArgs {
    #[command(flatten)]
    common: Common,
    /// Input table of transactions (`adisk load dmine`).
    #[arg(long, default_value = "dmine")]
    table: String,
    /// Minimum support, a fraction of the transactions in (0, 1].
    #[arg(long, default_value_t = 0.01)]
    support: f64,
    /// Passes after the second: `eclat` (uysal), `count` (count distribution at every pass) or
    /// `hybrid` (chiu's hybrid distribution).
    #[arg(long, default_value = "eclat")]
    method: String,
    /// Scratch of each disklet, KiB (default: a sixth of the smallest disk's memory).
    #[arg(long)]
    scratch_kib: Option<u64>,
    /// Hybrid distribution's candidate sections (must divide the disks; default: the fewest
    /// whose largest section fits the scratch).
    #[arg(long)]
    sections: Option<usize>,
    /// Pass 2's counters: `sparse` (uysal), `triangular` (eclat's original) or `auto`
    /// (triangular when it fits the scratch, else sparse).
    #[arg(long, default_value = "auto")]
    pair_table: String,
    /// List every frequent itemset with its count in the result.
    #[arg(long)]
    itemsets: bool,
    /// Skip the check against Apriori over the regenerated transactions.
    #[arg(long)]
    no_oracle: bool,
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
    /// Retail transactions (Agrawal & Srikant's generator, as uysal's and chiu's): disk d
    /// holds the d-th range of transaction ids; the parameters go to table `TABLE_gen`.
    Dmine {
        /// |D|: transactions.
        #[arg(long)]
        transactions: u64,
        /// |T|: average transaction length.
        #[arg(long, default_value_t = 10.0)]
        avg_len: f64,
        /// |I|: average length of the potentially frequent itemsets.
        #[arg(long, default_value_t = 4.0)]
        pattern_len: f64,
        /// |L|: number of potentially frequent itemsets.
        #[arg(long, default_value_t = 2000)]
        patterns: usize,
        /// N: number of items.
        #[arg(long, default_value_t = 1000)]
        items: u32,
        /// Table.
        #[arg(long, default_value = "dmine")]
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
        AppCommand::Dmine(a) => {
            let params = adisk_apps::dmine::DmineParams {
                input: a.table,
                support: a.support,
                method: a.method.parse().map_err(app_err)?,
                mode: mode(&a.common)?,
                scratch_kib: a.scratch_kib,
                sections: a.sections,
                pair_table: a.pair_table,
                list_itemsets: a.itemsets,
                oracle: !a.no_oracle,
            };
            let report = adisk_apps::dmine::run(&cluster, &params)
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
        AppLoad::Dmine {
            transactions,
            avg_len,
            pattern_len,
            patterns,
            items,
            table,
            seed,
        } => {
            let params = adisk_apps::dmine::generator::GenParams {
                transactions,
                avg_transaction_len: avg_len,
                avg_pattern_len: pattern_len,
                patterns,
                items,
                seed,
            };
            let bar = indicatif::ProgressBar::new(transactions);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/{len} transactions ({per_sec}, eta {eta})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(format!("generating {table}"));
            let b = bar.clone();
            let stored =
                adisk_apps::dmine::load(&cluster, &table, &params, move |n| b.set_position(n))
                    .await
                    .map_err(app_err)?;
            bar.finish_and_clear();
            println!("loaded {transactions} transactions ({stored} items) into `{table}`");
        }
    }
    Ok(())
}
