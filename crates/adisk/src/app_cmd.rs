//! `adisk app NAME` (the papers' applications on the cluster) and `adisk load NAME` (their
//! deterministic inputs, written at the disks).
use crate::common::{CliError, connect};
use adisk_apps::Mode;
use adisk_host::Cluster;
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
    /// Frequent itemsets (uysal §5, chiu §4.2): count distribution for passes 1–2 (each disk
    /// counts, the host sums), then eclat (frequent pairs' tid-lists repartitioned disk to disk
    /// by equivalence class and mined locally), count distribution or hybrid distribution;
    /// checked against Apriori over the regenerated transactions.
    Dmine(DmineArgs),
    /// The data cube by PipeHash (acharya §4, uysal §5): the lattice's minimum spanning tree by
    /// estimated sizes, pipelines computed in one scan each at every disk, partials shipped to
    /// the disk responsible for their key range; group-by `mask` lands in `OUTPUT_g<mask>`.
    Datacube(DatacubeArgs),
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
    /// Adaptive-grid subspace clustering, pMAFIA (chiu §4.3): fine histograms at the disks,
    /// adaptive bins at the host, candidate dense units counted at the disks level by level.
    Cluster(ClusterArgs),
}

/// `adisk app cluster`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    common: Common,
    /// Points table (`adisk load cluster`).
    #[arg(long, default_value = "points")]
    table: String,
    /// Fine histogram bins per dimension.
    #[arg(long, default_value_t = 100)]
    fine_bins: usize,
    /// Density factor α (> 1).
    #[arg(long, default_value_t = 1.5)]
    alpha: f64,
    /// Merge tolerance β of adjacent fine bins, in [0, 1].
    #[arg(long, default_value_t = 0.35)]
    beta: f64,
    /// Most candidate units of one level.
    #[arg(long, default_value_t = 100_000)]
    max_candidates: usize,
    /// Check against a single-node run over the regenerated points and the planted clusters
    /// (the generator's parameters are those `adisk load cluster` recorded).
    #[arg(long)]
    check: bool,
}

/// `adisk app earth`.
#[derive(Args, Debug)]
pub struct EarthArgs {
    #[command(flatten)]
    common: Common,
    /// Records table (`adisk load earth`).
    #[arg(long, default_value = "earth")]
    table: String,
    /// Output grid width, pixels (default: the width the table was loaded with; given, it must
    /// agree with it).
    #[arg(long)]
    width: Option<u32>,
    /// Output grid height, pixels (default: the height the table was loaded with; given, it
    /// must agree with it).
    #[arg(long)]
    height: Option<u32>,
    /// The disks' window, KiB, at least one grid row (default: a quarter of the smallest
    /// disk's memory).
    #[arg(long)]
    window_kib: Option<u64>,
    /// Check against the composite of regenerated records: `--check` alone takes the
    /// generator's parameters the load recorded; `--check RECORDS,DAYS,SEED` must agree with them.
    #[arg(long, value_delimiter = ',', num_args = 0..=1)]
    check: Option<Vec<u64>>,
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
    /// Divisor, non-zero, negative allowed (default: the sum of the weights, or 1 if that is 0).
    #[arg(long, allow_negative_numbers = true)]
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
    /// Size of a sorted run, KiB, at least 64 (default: a quarter of the smallest disk's memory).
    #[arg(long)]
    run_kib: Option<u64>,
}

/// Options every application takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// `active` (the disks compute) or `conventional` (the host reads the raw input).
    #[arg(long, default_value = "active")]
    pub mode: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = crate::output::Format::Table)]
    pub format: crate::output::Format,
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
    /// Size of a sorted run, KiB, at least 64 (default: a quarter of the smallest disk's memory).
    #[arg(long)]
    run_kib: Option<u64>,
    /// Keys sampled per disk for the splitters (at least 1).
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
    /// Rows sampled in all for the size estimates and the key ranges (at least 1).
    #[arg(long, default_value_t = 4096)]
    samples: u64,
}

/// `adisk app dmine`.
#[derive(Args, Debug)]
pub struct DmineArgs {
    #[command(flatten)]
    common: Common,
    /// Input table of transactions (`adisk load dmine`).
    #[arg(long, default_value = "dmine")]
    table: String,
    /// Minimum support, a fraction of the transactions in (0, 1], taken exactly as written:
    /// the minimum count is ceil(support × transactions).
    #[arg(long, default_value = "0.01", allow_hyphen_values = true)]
    support: String,
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
    /// Seed the input was loaded with, which the check regenerates the matrix from (default:
    /// the seed the load recorded, or 1; given, it must agree with the recorded one).
    #[arg(long)]
    seed: Option<u64>,
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
    /// Points in `dims` dimensions ([0, 100) each): uniform noise plus clusters planted in
    /// subspaces (pMAFIA's kind of data).
    Cluster {
        /// Points.
        #[arg(long)]
        points: u64,
        /// Dimensions.
        #[arg(long, default_value_t = 10)]
        dims: usize,
        /// Planted clusters.
        #[arg(long, default_value_t = 3)]
        clusters: usize,
        /// Largest subspace of a planted cluster.
        #[arg(long, default_value_t = 5)]
        max_cluster_dims: usize,
        /// Fraction of uniform noise.
        #[arg(long, default_value_t = 0.1)]
        noise: f64,
        /// Smallest width of a planted range.
        #[arg(long, default_value_t = 8.0)]
        min_width: f32,
        /// Largest width of a planted range.
        #[arg(long, default_value_t = 15.0)]
        max_width: f32,
        /// Table.
        #[arg(long, default_value = "points")]
        table: String,
        /// Seed.
        #[arg(long, default_value_t = 7)]
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
    // Flags refused before anything connects.
    match &command {
        AppCommand::Sort(SortArgs { run_kib, .. }) | AppCommand::Join(JoinArgs { run_kib, .. }) => {
            positive_run_kib(*run_kib)?
        }
        _ => {}
    }
    let cluster = connect(dir).await?;
    let (report, format) = match command {
        AppCommand::Sort(a) => sort(&cluster, a).await?,
        AppCommand::Conv(a) => conv(&cluster, a).await?,
        AppCommand::Earth(a) => earth(&cluster, a).await?,
        AppCommand::Cluster(a) => cluster_app(dir, &cluster, a).await?,
        AppCommand::Datacube(a) => datacube(&cluster, a).await?,
        AppCommand::Dmine(a) => dmine(&cluster, a).await?,
        AppCommand::Fft(a) => fft(&cluster, a).await?,
        AppCommand::Join(a) => join(&cluster, a).await?,
    };
    match format {
        crate::output::Format::Json => println!("{}", report.to_json()),
        crate::output::Format::Table => print!("{}", report.to_text()),
    }
    if report.result.get("valid") == Some(&serde_json::Value::Bool(false)) {
        return Err(CliError::Other(format!(
            "{}: the output failed its check: {}",
            report.app, report.result
        )));
    }
    Ok(())
}

/// A report and the format to print it in.
type Ran = (adisk_apps::report::Report, crate::output::Format);

/// `--run-kib 0` (sort, join): a run of no bytes holds no record.
fn positive_run_kib(run_kib: Option<u64>) -> Result<(), CliError> {
    if run_kib == Some(0) {
        return Err(CliError::Other(
            "--run-kib must be positive: a sorted run holds at least one record (runs start at 64 KiB)"
                .into(),
        ));
    }
    Ok(())
}

async fn sort(cluster: &Cluster, a: SortArgs) -> Result<Ran, CliError> {
    let params = adisk_apps::sort::SortParams {
        input: a.table,
        output: a.output,
        mode: mode(&a.common)?,
        run_bytes: a.run_kib.map(|k| k.saturating_mul(1024)),
        samples_per_disk: a.samples_per_disk,
    };
    let report = adisk_apps::sort::run(cluster, &params)
        .await
        .map_err(app_err)?;
    Ok((report, a.common.format))
}

async fn conv(cluster: &Cluster, a: ConvArgs) -> Result<Ran, CliError> {
    let kernel = if a.kernel.is_empty() {
        adisk_apps::conv::kernel::Kernel::boxed(a.k)
    } else {
        let sum: i64 = a.kernel.iter().map(|w| i64::from(*w)).sum();
        let divisor = a
            .divisor
            .unwrap_or(i32::try_from(sum).ok().filter(|s| *s != 0).unwrap_or(1));
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
    let report = adisk_apps::conv::run(cluster, &params)
        .await
        .map_err(app_err)?;
    Ok((report, a.common.format))
}

async fn earth(cluster: &Cluster, a: EarthArgs) -> Result<Ran, CliError> {
    let schema = adisk_apps::loaded::schema(cluster, &a.table)
        .await
        .map_err(app_err)?;
    let ((width, height), check) = adisk_apps::earth::from_load(
        schema.as_deref(),
        &a.table,
        (a.width, a.height),
        a.check.as_deref(),
    )
    .map_err(app_err)?;
    let params = adisk_apps::earth::EarthParams {
        table: a.table,
        width,
        height,
        window_bytes: a.window_kib.map(|k| k.saturating_mul(1024)),
        mode: mode(&a.common)?,
        check,
    };
    let report = adisk_apps::earth::run(cluster, &params)
        .await
        .map_err(app_err)?;
    Ok((report, a.common.format))
}

async fn cluster_app(dir: &Path, cluster: &Cluster, a: ClusterArgs) -> Result<Ran, CliError> {
    let check = if a.check {
        Some(recorded_points(dir, &a.table)?)
    } else {
        None
    };
    let run = adisk_apps::cluster::ClusterRun {
        table: a.table,
        params: adisk_apps::cluster::kernel::ClusterParams {
            fine_bins: a.fine_bins,
            alpha: a.alpha,
            beta: a.beta,
            max_candidates: a.max_candidates,
            ..Default::default()
        },
        mode: mode(&a.common)?,
        check,
    };
    let report = adisk_apps::cluster::run(cluster, &run)
        .await
        .map_err(app_err)?;
    Ok((report, a.common.format))
}

async fn datacube(cluster: &Cluster, a: DatacubeArgs) -> Result<Ran, CliError> {
    let params = adisk_apps::datacube::CubeParams {
        input: a.table,
        output: a.output,
        mode: mode(&a.common)?,
        memory_bytes: a.memory_kib.map(|k| k.saturating_mul(1024)),
        samples: a.samples,
    };
    let report = adisk_apps::datacube::run(cluster, &params)
        .await
        .map_err(app_err)?;
    Ok((report, a.common.format))
}

async fn dmine(cluster: &Cluster, a: DmineArgs) -> Result<Ran, CliError> {
    let params = adisk_apps::dmine::DmineParams {
        input: a.table,
        support: exact_support(&a.support)?,
        method: a.method.parse().map_err(app_err)?,
        mode: mode(&a.common)?,
        scratch_kib: a.scratch_kib,
        sections: a.sections,
        pair_table: a.pair_table,
        list_itemsets: a.itemsets,
        oracle: !a.no_oracle,
    };
    let report = adisk_apps::dmine::run(cluster, &params)
        .await
        .map_err(app_err)?;
    Ok((report, a.common.format))
}

/// `--support` as written, as the `f64` the run takes: only decimals that the `f64` stands
/// for exactly ([`adisk_apps::dmine::kernel::Support::from_f64`] gives them back), so that
/// the run's minimum count is `ceil(support · transactions)` of the decimal typed.
fn exact_support(text: &str) -> Result<f64, CliError> {
    use adisk_apps::dmine::kernel::Support;
    let support: Support = text
        .parse()
        .map_err(|e| CliError::Other(format!("--support: {e}")))?;
    let value = support.to_f64();
    if Support::from_f64(value).ok() != Some(support) {
        return Err(CliError::Other(format!(
            "--support {text}: more significant digits than a run keeps exactly (15)"
        )));
    }
    Ok(value)
}

async fn fft(cluster: &Cluster, a: FftArgs) -> Result<Ran, CliError> {
    let schema = adisk_apps::loaded::schema(cluster, &a.table)
        .await
        .map_err(app_err)?;
    let seed =
        adisk_apps::fft::seed_from_load(schema.as_deref(), &a.table, a.seed).map_err(app_err)?;
    let params = adisk_apps::fft::FftParams {
        input: a.table,
        output: a.output,
        mode: mode(&a.common)?,
        seed,
        cap_bytes: a.cap_kib.map(|k| k.saturating_mul(1024)),
        buffer_kib: a.buffer_kib,
        segment_values: a.segment_values,
    };
    let report = adisk_apps::fft::run(cluster, &params)
        .await
        .map_err(app_err)?;
    Ok((report, a.common.format))
}

async fn join(cluster: &Cluster, a: JoinArgs) -> Result<Ran, CliError> {
    let params = adisk_apps::join::JoinParams {
        left: a.left,
        right: a.right,
        output: a.output,
        mode: mode(&a.common)?,
        run_bytes: a.run_kib.map(|k| k.saturating_mul(1024)),
    };
    let report = adisk_apps::join::run(cluster, &params)
        .await
        .map_err(app_err)?;
    Ok((report, a.common.format))
}

/// Where `adisk load cluster` records the generator's parameters of `table` (for `--check`).
fn points_record(dir: &Path, table: &str) -> std::path::PathBuf {
    dir.join("apps").join(format!("{table}.cluster.json"))
}

fn record_points(
    dir: &Path,
    table: &str,
    g: &adisk_apps::cluster::kernel::GenParams,
) -> Result<(), CliError> {
    let path = points_record(dir, table);
    let text = serde_json::json!({
        "points": g.points, "dims": g.dims, "clusters": g.clusters,
        "max_cluster_dims": g.max_cluster_dims, "noise": g.noise,
        "min_width": g.min_width, "max_width": g.max_width, "seed": g.seed,
    });
    std::fs::create_dir_all(dir.join("apps"))
        .and_then(|()| std::fs::write(&path, text.to_string()))
        .map_err(|e| CliError::Other(format!("writing {}: {e}", path.display())))
}

fn recorded_points(
    dir: &Path,
    table: &str,
) -> Result<adisk_apps::cluster::kernel::GenParams, CliError> {
    let path = points_record(dir, table);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        CliError::Other(format!(
            "--check needs the parameters `adisk load cluster` recorded in {}: {e}",
            path.display()
        ))
    })?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
    let num = |k: &str| {
        v[k].as_f64()
            .ok_or_else(|| CliError::Other(format!("{}: no `{k}`", path.display())))
    };
    Ok(adisk_apps::cluster::kernel::GenParams {
        points: num("points")? as u64,
        dims: num("dims")? as usize,
        clusters: num("clusters")? as usize,
        max_cluster_dims: num("max_cluster_dims")? as usize,
        noise: num("noise")?,
        min_width: num("min_width")? as f32,
        max_width: num("max_width")? as f32,
        seed: num("seed")? as u64,
    })
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
        cluster_load @ AppLoad::Cluster { .. } => load_points(dir, &cluster, cluster_load).await?,
        cube_load @ AppLoad::Datacube { .. } => load_cube_rows(&cluster, cube_load).await?,
        dmine_load @ AppLoad::Dmine { .. } => load_transactions(&cluster, dmine_load).await?,
        AppLoad::Fft {
            rows,
            cols,
            table,
            seed,
        } => {
            let bar = progress(rows.saturating_mul(cols), &format!("generating {table}"));
            let b = bar.clone();
            let bytes = adisk_apps::fft::load(&cluster, &table, rows, cols, seed, move |n| {
                b.set_position(n)
            })
            .await
            .map_err(app_err)?;
            bar.finish_and_clear();
            println!("loaded a {rows} x {cols} complex matrix ({bytes} bytes) into `{table}`");
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

/// `adisk load app cluster`: planted clusters' points, generated at the host, loaded and
/// recorded for the run that checks them.
async fn load_points(dir: &Path, cluster: &Cluster, what: AppLoad) -> Result<(), CliError> {
    let AppLoad::Cluster {
        points,
        dims,
        clusters,
        max_cluster_dims,
        noise,
        min_width,
        max_width,
        table,
        seed,
    } = what
    else {
        unreachable!("called for AppLoad::Cluster")
    };
    let g = adisk_apps::cluster::kernel::GenParams {
        points,
        dims,
        clusters,
        max_cluster_dims,
        noise,
        min_width,
        max_width,
        seed,
    };
    let bar = progress(points, &format!("generating {table}"));
    let b = bar.clone();
    adisk_apps::cluster::load(cluster, &table, g, move |n| b.set_position(n))
        .await
        .map_err(app_err)?;
    bar.finish_and_clear();
    record_points(dir, &table, &g)?;
    println!(
        "loaded {points} points in {dims} dimensions ({clusters} planted clusters) into `{table}`"
    );
    Ok(())
}

/// `adisk load app datacube`: rows of skewed dimensions for the cube.
async fn load_cube_rows(cluster: &Cluster, what: AppLoad) -> Result<(), CliError> {
    let AppLoad::Datacube {
        rows,
        cards,
        zipf,
        table,
        seed,
    } = what
    else {
        unreachable!("called for AppLoad::Datacube")
    };
    let cardinalities = parse_cards(&cards)?;
    let bar = progress(rows, &format!("generating {table}"));
    let b = bar.clone();
    let params = adisk_apps::datacube::generator::GenParams {
        rows,
        cardinalities,
        zipf,
        seed,
    };
    let bytes = adisk_apps::datacube::load(cluster, &table, params, move |n| b.set_position(n))
        .await
        .map_err(app_err)?;
    bar.finish_and_clear();
    println!("loaded {rows} rows ({bytes} bytes) into `{table}`");
    Ok(())
}

/// `adisk load app dmine`: synthetic market-basket transactions.
async fn load_transactions(cluster: &Cluster, what: AppLoad) -> Result<(), CliError> {
    let AppLoad::Dmine {
        transactions,
        avg_len,
        pattern_len,
        patterns,
        items,
        table,
        seed,
    } = what
    else {
        unreachable!("called for AppLoad::Dmine")
    };
    let params = adisk_apps::dmine::generator::GenParams {
        transactions,
        avg_transaction_len: avg_len,
        avg_pattern_len: pattern_len,
        patterns,
        items,
        seed,
    };
    let bar = progress(transactions, &format!("generating {table}"));
    let b = bar.clone();
    let stored = adisk_apps::dmine::load(cluster, &table, &params, move |n| b.set_position(n))
        .await
        .map_err(app_err)?;
    bar.finish_and_clear();
    println!("loaded {transactions} transactions ({stored} items) into `{table}`");
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
