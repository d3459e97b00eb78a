//! `adisk bench tpch`: the 22 TPC-H queries at offload `auto` and `none` (conventional) on a
//! local cluster, and DuckDB with 2 threads on the same Parquet files, in one run; medians of
//! `repeats` runs after one warm-up each, the three engines' runs interleaved query by query.
//! Reports per-query times, ratios and data reduction.
use crate::common::CliError;
use crate::local::{NetnsDisks, OnOff, UpArgs, down, up};
use crate::netns::Net;
use adisk_core::stats::human_bytes;
use adisk_host::sql::cost::Estimate;
use adisk_host::sql::{Offload, SqlEngine, SqlOptions, report, tpch};
use std::path::Path;
use std::sync::Arc;

const DUCKDB_TPCH_TIME: &str = include_str!("duckdb_tpch_time.py");

/// Options of `adisk bench tpch`.
#[derive(clap::Args, Debug)]
pub struct TpchBenchArgs {
    /// Scale factor.
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Disks.
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// Repeats per query and mode (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Only these queries (comma-separated numbers).
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<u32>,
    /// Limit on what all disks together send the host, Mbit/s (0: unthrottled).
    #[arg(long, default_value_t = 0)]
    pub host_link_mbps: u64,
    /// Storage read limit per disk, Mbit/s (0: unthrottled).
    #[arg(long, default_value_t = 0)]
    pub disk_read_mbps: u64,
    /// Codec of the data's Parquet pages (`none`, `lz4`, `snappy`); data loaded with another
    /// is loaded again.
    #[arg(long, default_value_t = adisk_core::config::Compression::None)]
    pub compression: adisk_core::config::Compression,
    /// DiskOS memory per disk, MiB.
    #[arg(long, default_value_t = 256)]
    pub memory_mib: u64,
    /// Stream buffer size of the SQL jobs at the disks, KiB (0: the disks' default of 256).
    #[arg(long, default_value_t = adisk_host::sql::SQL_BUFFER_KIB)]
    pub buffer_kib: u64,
    /// DuckDB threads.
    #[arg(long, default_value_t = 2)]
    pub duckdb_threads: u32,
    /// Skip DuckDB.
    #[arg(long)]
    pub no_duckdb: bool,
    /// Python interpreter with the `duckdb` module.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Skip the warm-up run of each query (for slow throttled runs).
    #[arg(long)]
    pub no_warmup: bool,
    /// Skip offload `none` (the conventional baseline), for quicker runs.
    #[arg(long)]
    pub no_conventional: bool,
    /// Compare these offload levels side by side instead (e.g. `semijoin,disks,auto`): per
    /// query the median time, the bytes the host received and the bytes sent disk to disk.
    /// `disks/none`, `disks/paper`, `disks/excessive`: `disks` run as memik's bundles.
    #[arg(long, value_delimiter = ',')]
    pub levels: Vec<String>,
    /// How disk-to-disk streams travel: `direct` (chiu's fully distributed smart disks) or
    /// `via-host` (the partially distributed system: every exchange through the host).
    #[arg(long, default_value_t = adisk_core::config::ExchangeMode::Direct)]
    pub exchange: adisk_core::config::ExchangeMode,
    /// With `--levels`: the disk that does the host's combining work at `disks` and `auto`.
    #[arg(long)]
    pub central_unit: Option<u32>,
    /// Several machines: each disk in a Linux network namespace on a bridge, and the host (this
    /// benchmark) in one of its own, so that its link is a real one the kernel can shape
    /// (`--link-mbit`). Needs root and iproute2.
    #[arg(long)]
    pub netns: bool,
    /// With `--netns`: shape the host's link to this many Mbit/s each way (`tc tbf`); the
    /// cost model is not told, it measures the link.
    #[arg(long, requires = "netns")]
    pub link_mbit: Option<u64>,
    /// With `--netns`: the bridge's network is 10.SUBNET.0.0/24.
    #[arg(long, default_value_t = 78)]
    pub subnet: u8,
    /// TLS on the cluster's links (`on`, as `adisk up`), or `off` to measure what it costs.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub tls: OnOff,
    /// The cost file `auto` prices plans with (`adisk calibrate`); default: the built-in rates.
    #[arg(long)]
    pub costs: Option<std::path::PathBuf>,
    /// Set by `--netns` for the run inside the host's namespace: the disks' namespaces and
    /// addresses (JSON).
    #[arg(long, hide = true)]
    pub netns_disks: Option<String>,
}

/// `--netns`: makes the namespaces (the host's link shaped to `--link-mbit`), runs this same
/// benchmark inside the host's namespace, and removes them after.
fn in_namespaces(a: &TpchBenchArgs) -> Result<(), CliError> {
    let fail = |why: String| CliError::Other(format!("bench tpch --netns: {why}"));
    let mut net = Net::make(a.disks as usize, a.subnet).map_err(fail)?;
    net.add_host().map_err(fail)?;
    if let Some(mbit) = a.link_mbit {
        net.shape_host(&format!("{mbit}mbit")).map_err(fail)?;
    }
    let disks = a.disks as usize;
    let plan = serde_json::json!({
        "namespaces": (0..disks).map(|d| net.namespace(d)).collect::<Vec<_>>(),
        "addresses": (0..disks).map(|d| format!("{}:7000", net.disk(d))).collect::<Vec<_>>(),
    });
    let exe = std::env::current_exe().map_err(|e| fail(e.to_string()))?;
    eprintln!(
        "host in namespace {} ({}), its link {}; disks at {}",
        net.host_names().0,
        net.host_in_namespace(),
        a.link_mbit.map_or("unshaped".to_string(), |m| format!(
            "shaped to {m} Mbit/s each way"
        )),
        plan["addresses"]
    );
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", &net.host_names().0])
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .arg("--netns-disks")
        .arg(plan.to_string())
        .status()
        .map_err(|e| fail(format!("ip netns exec: {e}")))?;
    drop(net);
    match status.success() {
        true => Ok(()),
        false => Err(fail(format!("the run in the host's namespace {status}"))),
    }
}

/// The disks' places from `--netns-disks`.
fn netns_disks(json: &str) -> Result<NetnsDisks, CliError> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| CliError::Other(format!("--netns-disks: {e}")))?;
    let list = |key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(NetnsDisks {
        namespaces: list("namespaces"),
        addresses: list("addresses"),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// DuckDB in a child Python process that runs one query per request.
struct DuckDb(crate::py_server::PyServer);

impl DuckDb {
    fn start(python: &str, cluster_dir: &Path, threads: u32) -> Result<Self, CliError> {
        let dir = cluster_dir.display().to_string();
        let args = [dir.as_str(), &threads.to_string()];
        let server = crate::py_server::PyServer::start(python, DUCKDB_TPCH_TIME, &args, "DuckDB")?;
        Ok(DuckDb(server))
    }

    /// Runs `sql` once; its wall time in seconds.
    fn time(&mut self, sql: &str) -> Result<f64, CliError> {
        let line = self
            .0
            .ask(sql)
            .map_err(|e| CliError::Other(format!("DuckDB: {e}")))?;
        line.parse::<f64>()
            .map_err(|_| CliError::Other(format!("DuckDB: {line}")))
    }
}

/// Per-mode samples of one query.
#[derive(Default)]
struct Samples {
    times: Vec<f64>,
    read: u64,
    shipped: u64,
}

impl Samples {
    fn add(&mut self, out: &adisk_host::sql::QueryOutput) {
        self.times.push(out.wall.as_secs_f64());
        (self.read, _, self.shipped) = report::totals(out);
    }
}

pub async fn run(dir: &Path, a: TpchBenchArgs) -> Result<(), CliError> {
    if a.netns && a.netns_disks.is_none() {
        return in_namespaces(&a);
    }
    let queries: Vec<u32> = if a.queries.is_empty() {
        (1..=22).collect()
    } else {
        a.queries.clone()
    };
    let texts = queries
        .iter()
        .map(|n| tpch::query(*n))
        .collect::<Result<Vec<_>, _>>()?;
    let cdir = dir.join(format!("bench-tpch-{}", a.disks));
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let args = UpArgs {
        memory_mib: a.memory_mib,
        host_link_mbps: a.host_link_mbps,
        disk_read_mbps: a.disk_read_mbps,
        compression: a.compression,
        exchange: a.exchange,
        netns: a.netns_disks.as_deref().map(netns_disks).transpose()?,
        tls: a.tls,
        costs: a.costs.clone(),
        ..UpArgs::local(a.disks)
    };
    up(&cdir, &args).await?;
    let result = async {
        let cluster = Arc::new(crate::common::connect(&cdir).await?);
        ensure_tpch(&cluster, &cdir, a.sf, a.compression).await?;
        if !a.levels.is_empty() {
            return levels_table(&cluster, &a, &queries, &texts).await;
        }
        auto_against_none(&cluster, &cdir, &a, &queries, &texts).await
    }
    .await;
    down(&cdir).await?;
    result
}

/// The default table: each query at `auto` and at `none` (and in DuckDB on the same files
/// unless `--no-duckdb`), interleaved after a warm-up; medians, bytes read and shipped.
async fn auto_against_none(
    cluster: &Arc<adisk_host::Cluster>,
    cdir: &Path,
    a: &TpchBenchArgs,
    queries: &[u32],
    texts: &[&str],
) -> Result<(), CliError> {
    let mut duck = if a.no_duckdb {
        None
    } else {
        eprintln!(
            "starting DuckDB ({} threads) on the same files …",
            a.duckdb_threads
        );
        Some(DuckDb::start(&a.python, &cdir, a.duckdb_threads)?)
    };
    let auto = SqlEngine::new(
        cluster.clone(),
        SqlOptions {
            offload: Offload::Auto,
            buffer_kib: a.buffer_kib,
            ..Default::default()
        },
    )
    .await?;
    let none = SqlEngine::new(
        cluster.clone(),
        SqlOptions {
            offload: Offload::None,
            buffer_kib: a.buffer_kib,
            ..Default::default()
        },
    )
    .await?;
    print_header(a);
    let mut totals = Totals::default();
    for (i, n) in queries.iter().enumerate() {
        eprintln!("Q{n:02} …");
        let row = QueryRow::measure(texts[i], a, (&auto, &none), duck.as_mut()).await?;
        row.print(*n, a);
        totals.add(&row);
    }
    let (t_auto, t_none, t_duck, faster) = (totals.auto, totals.none, totals.duck, totals.faster);
    println!(
        "total {:>10.1} {:>10} {:>10} {:>9} {:>9}",
        t_auto * 1e3,
        opt(t_none * 1e3, 1),
        if a.no_duckdb {
            "–".into()
        } else {
            format!("{:.1}", t_duck * 1e3)
        },
        opt(t_none / t_auto, 2),
        if a.no_duckdb {
            "–".into()
        } else {
            format!("{:.2}", t_duck / t_auto)
        }
    );
    if !a.no_conventional {
        println!(
            "auto faster than none on {faster} of {} queries",
            queries.len()
        );
    }
    println!(
        "auto total ÷ DuckDB total = {}",
        if a.no_duckdb {
            "–".into()
        } else {
            format!("{:.2}", t_auto / t_duck)
        }
    );
    println!(
        "none/auto, duck/auto above 1: auto faster. reduction: bytes shipped by none ÷ by auto. read: storage bytes read at the disks (auto)."
    );
    println!(
        "Runs were interleaved per query (DuckDB, auto, none, repeated), each engine warmed up once first (auto twice where its first run was the cost model's choice between two plans)."
    );
    Ok(())
}

/// The default table's title and column names.
fn print_header(a: &TpchBenchArgs) {
    let repeats = a.repeats.max(1);
    println!(
        "adisk bench tpch: SF {} on {} disks, host link {}, disk read {}, median of {repeats}",
        a.sf,
        a.disks,
        if a.host_link_mbps > 0 {
            format!("{} Mbit/s", a.host_link_mbps)
        } else {
            "unthrottled".into()
        },
        if a.disk_read_mbps > 0 {
            format!("{} Mbit/s", a.disk_read_mbps)
        } else {
            "unthrottled".into()
        }
    );
    println!(
        "{:<5} {:>10} {:>10} {:>10} {:>9} {:>9} {:>10} {:>12} {:>12} {:>9}",
        "query",
        "auto_ms",
        "none_ms",
        "duck_ms",
        "none/auto",
        "duck/auto",
        "read",
        "ship_auto",
        "ship_none",
        "reduction"
    );
}

/// A number, or a dash for a mode that did not run (NaN).
fn opt(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "–".to_string()
    } else {
        format!("{v:.digits$}")
    }
}

/// One query of the default table, measured.
struct QueryRow {
    /// Median at `auto`, s.
    auto: f64,
    /// Median at `none`, s (NaN: not run).
    none: f64,
    /// Median in DuckDB, s.
    duck: Option<f64>,
    /// What `auto` read and shipped.
    auto_samples: Samples,
    /// What `none` shipped.
    none_shipped: u64,
}

impl QueryRow {
    /// Runs `sql`: one warm-up of each engine, then the repeats interleaved (DuckDB, auto,
    /// none).
    async fn measure(
        sql: &str,
        a: &TpchBenchArgs,
        (auto, none): (&SqlEngine, &SqlEngine),
        mut duck: Option<&mut DuckDb>,
    ) -> Result<QueryRow, CliError> {
        if !a.no_warmup {
            if let Some(d) = duck.as_deref_mut() {
                d.time(sql)?;
            }
            warm_up(auto, sql).await?;
            if !a.no_conventional {
                none.query(sql).await?;
            }
        }
        let (mut x, mut y, mut dt) = (Samples::default(), Samples::default(), Vec::new());
        for _ in 0..a.repeats.max(1) {
            if let Some(d) = duck.as_deref_mut() {
                dt.push(d.time(sql)?);
            }
            x.add(&auto.query(sql).await?);
            if !a.no_conventional {
                y.add(&none.query(sql).await?);
            }
        }
        Ok(QueryRow {
            auto: median(x.times.clone()),
            none: if a.no_conventional {
                f64::NAN
            } else {
                median(y.times)
            },
            duck: (!dt.is_empty()).then(|| median(dt)),
            auto_samples: x,
            none_shipped: y.shipped,
        })
    }

    /// The row of query `n`.
    fn print(&self, n: u32, a: &TpchBenchArgs) {
        let (xs, ys, x) = (self.auto, self.none, &self.auto_samples);
        println!(
            "Q{n:02}   {:>10.1} {:>10} {:>10} {:>9} {:>9} {:>10} {:>12} {:>12} {:>9}",
            xs * 1e3,
            opt(ys * 1e3, 1),
            self.duck
                .map(|d| format!("{:.1}", d * 1e3))
                .unwrap_or_else(|| "–".into()),
            opt(ys / xs, 2),
            self.duck
                .map(|d| format!("{:.2}", d / xs))
                .unwrap_or_else(|| "–".into()),
            human_bytes(x.read),
            human_bytes(x.shipped),
            if a.no_conventional {
                "–".into()
            } else {
                human_bytes(self.none_shipped)
            },
            if a.no_conventional {
                "–".into()
            } else {
                format!("{:.1}x", self.none_shipped as f64 / x.shipped.max(1) as f64)
            }
        );
    }
}

/// The default table's totals.
#[derive(Default)]
struct Totals {
    auto: f64,
    none: f64,
    duck: f64,
    /// Queries where `auto` beat `none`.
    faster: usize,
}

impl Totals {
    fn add(&mut self, row: &QueryRow) {
        self.auto += row.auto;
        self.none += row.none;
        if row.auto < row.none {
            self.faster += 1;
        }
        self.duck += row.duck.unwrap_or(0.0);
    }
}

/// Loads TPC-H at `sf` (one partition per disk) into the cluster of `cdir`, unless it holds
/// that scale factor already, written with `compression` (the disks' codec).
pub async fn ensure_tpch(
    cluster: &adisk_host::cluster::Cluster,
    cdir: &Path,
    sf: f64,
    compression: adisk_core::config::Compression,
) -> Result<(), CliError> {
    let catalog = cluster.catalog().await?;
    let orders = catalog.tables.get("orders").map(|t| t.rows()).unwrap_or(0);
    if orders == tpch::orders_rows(sf) && crate::output::loaded_with(cdir, compression) {
        return Ok(());
    }
    for t in [
        "customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier",
    ] {
        let _ = cluster.drop_table(t).await;
    }
    let load = adisk_host::load::TpchLoad {
        sf,
        partitions_per_disk: 1,
        row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS,
        tables: vec![],
        replicas: 1,
        disks: vec![],
    };
    crate::output::load_tpch(cluster, &load).await?;
    crate::output::mark_loaded(cdir, compression)
}

/// A `--levels` entry: an offload level, at `disks` optionally with memik's bundling
/// (`disks/none`, `disks/paper`, `disks/excessive`).
fn level_with_bundling(
    spec: &str,
) -> Result<(Offload, Option<adisk_host::sql::bundling::Bundling>), CliError> {
    let (level, bundling) = match spec.split_once('/') {
        Some((l, b)) => (l, Some(b.parse()?)),
        None => (spec, None),
    };
    Ok((level.parse::<Offload>()?, bundling))
}

/// `--levels`: the queries at each level, runs interleaved level by level per query after one
/// warm-up each; medians, bytes to the host and disk to disk, and each level's speed-up over the
/// first level named.
async fn levels_table(
    cluster: &Arc<adisk_host::Cluster>,
    a: &TpchBenchArgs,
    queries: &[u32],
    texts: &[&str],
) -> Result<(), CliError> {
    let levels: Vec<&String> = a.levels.iter().collect();
    let engines = level_engines(cluster, a).await?;
    let auto = (levels.len() > 1)
        .then(|| levels.iter().position(|l| l.as_str() == "auto"))
        .flatten();
    print_levels_header(cluster, a, &levels, auto.is_some()).await;
    let mut totals = vec![0.0; levels.len()];
    let mut auto_ratios = Vec::new();
    let mut estimates = Vec::with_capacity(queries.len());
    for (n, sql) in queries.iter().zip(texts) {
        eprintln!("Q{n:02} …");
        let (medians, links, est) = measure_levels(&engines, sql, a).await?;
        let mut line = format!("Q{n:02}  ");
        for (i, l) in links.iter().enumerate() {
            totals[i] += medians[i];
            line += &format!(
                " {:>12.1} {:>11} {:>11}",
                medians[i] * 1e3,
                human_bytes(l.to_host),
                human_bytes(l.disk_to_disk)
            );
        }
        for m in medians.iter().skip(1) {
            line += &format!(" {:>10.2}", medians[0] / m);
        }
        if let Some(ai) = auto {
            let best = (medians.iter().enumerate())
                .filter(|(i, _)| *i != ai)
                .map(|(_, m)| *m)
                .fold(f64::INFINITY, f64::min);
            let ratio = medians[ai] / best;
            auto_ratios.push(ratio);
            line += &format!(" {ratio:>10.2}");
        }
        println!("{line}");
        estimates.push((*n, est, links));
    }
    let mut line = format!("{:<5}", "total");
    for t in &totals {
        line += &format!(" {:>12.1} {:>11} {:>11}", t * 1e3, "", "");
    }
    for t in totals.iter().skip(1) {
        line += &format!(" {:>10.2}", totals[0] / t);
    }
    println!("{line}");
    println!(
        "_host: bytes the host received; _d2d: bytes sent disk to disk; A/B above 1: B faster than A. Runs interleaved per query, each level warmed up once (auto twice where its first run was the cost model's choice between two plans)."
    );
    print_estimates(&levels, &estimates);
    if !auto_ratios.is_empty() {
        let within = auto_ratios.iter().filter(|r| **r <= 1.25).count();
        let worst = auto_ratios.iter().copied().fold(0.0, f64::max);
        println!(
            "auto within 1.25x of the fastest other level on {within} of {} queries (worst {worst:.2}x); auto's figures at the end: {}",
            auto_ratios.len(),
            cluster.link_figures().await.describe()
        );
    }
    Ok(())
}

/// A SQL engine per `--levels` entry.
async fn level_engines(
    cluster: &Arc<adisk_host::Cluster>,
    a: &TpchBenchArgs,
) -> Result<Vec<SqlEngine>, CliError> {
    let mut engines = Vec::with_capacity(a.levels.len());
    for level in &a.levels {
        let (l, bundling) = level_with_bundling(level)?;
        let options = SqlOptions {
            offload: l,
            bundling,
            buffer_kib: a.buffer_kib,
            central_unit: a
                .central_unit
                .filter(|_| matches!(l, Offload::Disks | Offload::Auto)),
            ..Default::default()
        };
        engines.push(SqlEngine::new(cluster.clone(), options).await?);
    }
    Ok(engines)
}

/// The `--levels` table's title and column names (with `auto/best` and the link figures
/// `auto` plans with when `auto` is compared).
async fn print_levels_header(
    cluster: &Arc<adisk_host::Cluster>,
    a: &TpchBenchArgs,
    levels: &[&String],
    auto: bool,
) {
    let link = if a.host_link_mbps > 0 {
        format!("{} Mbit/s", a.host_link_mbps)
    } else {
        "not throttled".into()
    };
    println!(
        "adisk bench tpch --levels: SF {} on {} disks, host link {link}, TLS {:?}, exchange {}{}, median of {}",
        a.sf,
        a.disks,
        a.tls,
        a.exchange,
        a.central_unit
            .map(|c| format!(", central unit disk {c}"))
            .unwrap_or_default(),
        a.repeats.max(1)
    );
    let mut header = format!("{:<5}", "query");
    for l in levels {
        header += &format!(
            " {:>12} {:>11} {:>11}",
            format!("{l}_ms"),
            format!("{l}_host"),
            format!("{l}_d2d")
        );
    }
    for l in levels.iter().skip(1) {
        header += &format!(" {:>10}", format!("{}/{l}", levels[0]));
    }
    if auto {
        header += &format!(" {:>10}", "auto/best");
        println!(
            "auto plans with: {}",
            cluster.link_figures().await.describe()
        );
    }
    println!("{header}");
}

/// Warms `engine` up on `sql`: one run, and more while `auto` is still learning which of two
/// plans to keep (`adisk_host::sql::feedback`: the first run of each plan is not kept, so the
/// model's choice runs twice and the other plan, when it is tried, twice), at most six in
/// all, so that the repeats measure the plan `auto` keeps.
async fn warm_up(engine: &SqlEngine, sql: &str) -> Result<(), CliError> {
    let learning = |c: &str| c.contains("(cost model: ") || c.contains("(trying ");
    for _ in 0..6 {
        let out = engine.query(sql).await?;
        let more = out.choice.as_deref().is_some_and(learning);
        if !more || !adisk_host::sql::feedback::enabled() {
            break;
        }
    }
    Ok(())
}

/// One query at every level: a warm-up each, then the repeats interleaved level by level;
/// per level the median time, the links of the last run and its cost model's estimate.
async fn measure_levels(
    engines: &[SqlEngine],
    sql: &str,
    a: &TpchBenchArgs,
) -> Result<(Vec<f64>, Vec<report::Links>, Vec<Option<Estimate>>), CliError> {
    let mut times = vec![Vec::new(); engines.len()];
    let mut links = vec![report::Links::default(); engines.len()];
    let mut est = vec![None; engines.len()];
    if !a.no_warmup {
        for e in engines {
            warm_up(e, sql).await?;
        }
    }
    for _ in 0..a.repeats.max(1) {
        for (i, e) in engines.iter().enumerate() {
            let out = e.query(sql).await?;
            times[i].push(out.wall.as_secs_f64());
            links[i] = report::links(&out);
            est[i] = out.estimate;
        }
    }
    let medians = times.into_iter().map(median).collect();
    Ok((medians, links, est))
}

/// One query's cost-model estimates per level beside the links its last run measured.
type QueryEstimates = (u32, Vec<Option<Estimate>>, Vec<report::Links>);

/// The cost model's estimate of each level's plan beside what it moved (every level's
/// `estimate`, see [`adisk_host::sql::cost::Estimate`]): where `auto` chose wrongly, which
/// estimate was off.
fn print_estimates(levels: &[&String], rows: &[QueryEstimates]) {
    let mut header = format!("{:<5}", "query");
    for l in levels {
        header += &format!(
            " {:>12} {:>11} {:>7} {:>11} {:>7}",
            format!("{l}_est_ms"),
            format!("{l}_est_host"),
            "÷",
            format!("{l}_est_d2d"),
            "÷"
        );
    }
    println!(
        "\nthe cost model's estimates (ms beyond the scans; bytes, then measured ÷ estimated):"
    );
    println!("{header}");
    let ratio = |m: u64, e: u64| match (m, e) {
        (m, e) if e > 0 => format!("{:.2}", m as f64 / e as f64),
        (0, 0) => "=".into(),
        _ => "–".into(),
    };
    for (n, est, links) in rows {
        let mut line = format!("Q{n:02}  ");
        for (e, l) in est.iter().zip(links) {
            line += &match e {
                Some(e) => format!(
                    " {:>12.1} {:>11} {:>7} {:>11} {:>7}",
                    e.secs * 1e3,
                    human_bytes(e.traffic.to_host),
                    ratio(l.to_host, e.traffic.to_host),
                    human_bytes(e.traffic.disk_to_disk),
                    ratio(l.disk_to_disk, e.traffic.disk_to_disk)
                ),
                None => format!(" {:>12} {:>11} {:>7} {:>11} {:>7}", "–", "–", "", "–", ""),
            };
        }
        println!("{line}");
    }
}
