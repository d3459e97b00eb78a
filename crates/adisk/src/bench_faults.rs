//! `adisk bench faults`: what trust costs, side by side in one run. Three local clusters hold
//! the same TPC-H data: without authentication (`up --insecure`), with it (the default), and
//! with it and `--replicas 2`. The 22 queries run at `auto` on all three, interleaved query by
//! query after one warm-up each (medians of the repeats); then, on the replicated cluster,
//! chosen queries run once normally and once with a disk killed (SIGKILL) half-way through
//! their normal time, on fresh connections each, the killed disk restarted between runs.
//! Every answer is checked against DuckDB's official one (Q13 is checked for row count only,
//! as its comments depend on the generator).
use crate::common::CliError;
use crate::local::{UpArgs, down, restart_disk, up};
use adisk_core::config::ClusterConfig;
use adisk_host::sql::{Offload, SqlEngine, SqlOptions, oracle, tpch};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `adisk bench faults`.
#[derive(clap::Args, Debug)]
pub struct FaultsBenchArgs {
    /// Scale factor (one with official answers: 0.01, 0.1 or 1).
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Disks per cluster.
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// Repeats per query and cluster (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Only these queries in the first table (comma-separated numbers).
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<u32>,
    /// Queries timed with a disk killed mid-query.
    #[arg(long, value_delimiter = ',', default_value = "1,9,18")]
    pub kill_queries: Vec<u32>,
    /// DiskOS memory per disk, MiB.
    #[arg(long, default_value_t = 256)]
    pub memory_mib: u64,
}

/// The three clusters: name, without authentication, replicas.
const SETUPS: [(&str, bool, u32); 3] = [
    ("noauth", true, 1),
    ("auth", false, 1),
    ("replicas2", false, 2),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub async fn run(dir: &Path, a: FaultsBenchArgs) -> Result<(), CliError> {
    let base = dir.join("bench-faults");
    let mut dirs = Vec::new();
    for (name, insecure, _) in SETUPS {
        let cdir = base.join(name);
        if cdir.join("cluster.toml").exists() {
            let _ = down(&cdir).await;
        }
        let args = UpArgs {
            memory_mib: a.memory_mib,
            insecure,
            ..UpArgs::local(a.disks)
        };
        let started = up(&cdir, &args).await;
        dirs.push(cdir);
        if let Err(e) = started {
            for d in &dirs {
                let _ = down(d).await;
            }
            return Err(e);
        }
    }
    let result = measure(&dirs, &a).await;
    for d in &dirs {
        down(d).await?;
    }
    result
}

/// A connection and an `auto` engine to the cluster in `cdir`.
async fn engine(cdir: &Path) -> Result<SqlEngine, CliError> {
    let cluster = Arc::new(crate::common::connect(cdir).await?);
    Ok(SqlEngine::new(
        cluster,
        SqlOptions {
            offload: Offload::Auto,
            ..Default::default()
        },
    )
    .await?)
}

/// Loads TPC-H into each cluster unless it holds it already at this scale.
async fn load(dirs: &[PathBuf], a: &FaultsBenchArgs) -> Result<(), CliError> {
    for (cdir, (name, _, replicas)) in dirs.iter().zip(SETUPS) {
        let cluster = crate::common::connect(cdir).await?;
        let catalog = cluster.catalog().await?;
        let orders = catalog.tables.get("orders");
        if orders.is_some_and(|t| {
            t.rows() == tpch::orders_rows(a.sf) && t.replicas() == replicas as usize
        }) {
            continue;
        }
        eprintln!(
            "loading TPC-H SF {} into {name} ({replicas} replicas) …",
            a.sf
        );
        crate::output::load_tpch(
            &cluster,
            &adisk_host::load::TpchLoad {
                sf: a.sf,
                partitions_per_disk: 1,
                row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS,
                tables: vec![],
                replicas,
                disks: vec![],
            },
        )
        .await?;
    }
    Ok(())
}

/// Checks an answer against the official one; a wrong answer ends the benchmark.
fn check(
    q: u32,
    out: &adisk_host::sql::QueryOutput,
    answers: &BTreeMap<u32, String>,
    what: &str,
) -> Result<(), CliError> {
    let skip =
        |c: &str| tpch::TEXT_DEPENDENT_QUERIES.contains(&q) || tpch::generator_text_column(c);
    oracle::compare(out, &answers[&q], skip)
        .map_err(|diff| CliError::Other(format!("Q{q} on {what}: WRONG ANSWER: {diff}")))
}

async fn measure(dirs: &[PathBuf], a: &FaultsBenchArgs) -> Result<(), CliError> {
    load(dirs, a).await?;
    let answers = tpch::official_answers(a.sf)?;
    let queries: Vec<u32> = if a.queries.is_empty() {
        (1..=22).collect()
    } else {
        a.queries.clone()
    };
    let mut engines = Vec::new();
    for d in dirs {
        engines.push(engine(d).await?);
    }
    println!(
        "adisk bench faults: TPC-H SF {} on {} disks per cluster, offload auto, median of {}",
        a.sf,
        a.disks,
        a.repeats.max(1)
    );
    println!(
        "{:<5} {:>11} {:>11} {:>13} {:>11} {:>14}",
        "query", "noauth_ms", "auth_ms", "replicas2_ms", "auth/noauth", "replicas2/auth"
    );
    let mut totals = [0.0; 3];
    for q in &queries {
        eprintln!("Q{q:02} …");
        let sql = tpch::query(*q)?;
        for (e, (name, ..)) in engines.iter().zip(SETUPS) {
            check(*q, &e.query(sql).await?, &answers, name)?;
        }
        let mut samples = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..a.repeats.max(1) {
            for (i, e) in engines.iter().enumerate() {
                samples[i].push(e.query(sql).await?.wall.as_secs_f64());
            }
        }
        let m: Vec<f64> = samples.into_iter().map(median).collect();
        for i in 0..3 {
            totals[i] += m[i];
        }
        println!(
            "Q{q:02}   {:>11.1} {:>11.1} {:>13.1} {:>11.3} {:>14.3}",
            m[0] * 1e3,
            m[1] * 1e3,
            m[2] * 1e3,
            m[1] / m[0],
            m[2] / m[1]
        );
    }
    println!(
        "total {:>11.1} {:>11.1} {:>13.1} {:>11.3} {:>14.3}",
        totals[0] * 1e3,
        totals[1] * 1e3,
        totals[2] * 1e3,
        totals[1] / totals[0],
        totals[2] / totals[1]
    );
    println!(
        "auth/noauth: the cost of per-request tokens; replicas2/auth: of a second copy of every partition (no failure). Runs interleaved per query, each cluster warmed up once."
    );
    drop(engines);
    kill_mid_query(&dirs[2], a, &answers).await
}

/// On the replicated cluster: each query normally and with a disk killed half-way, on fresh
/// connections, `repeats` times (a different victim each time, restarted after).
async fn kill_mid_query(
    cdir: &Path,
    a: &FaultsBenchArgs,
    answers: &BTreeMap<u32, String>,
) -> Result<(), CliError> {
    println!(
        "\nA disk killed mid-query (replicas2 cluster; SIGKILL at half the query's normal time, the query rerun without it):"
    );
    println!(
        "{:<5} {:>11} {:>13} {:>8}  {}",
        "query", "normal_ms", "disk_died_ms", "ratio", "failover"
    );
    for q in &a.kill_queries {
        let sql = tpch::query(*q)?;
        let (mut normal, mut failed, mut notes) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..a.repeats.max(1) {
            let out = engine(cdir).await?.query(sql).await?;
            check(*q, &out, answers, "replicas2")?;
            normal.push(out.wall.as_secs_f64());
            let victim = 1 + (rep as u32 % (a.disks - 1).max(1));
            let (out, wall) = query_killing(cdir, sql, victim, out.wall / 2).await?;
            check(*q, &out, answers, "replicas2 with a disk killed")?;
            failed.push(wall.as_secs_f64());
            notes.extend(
                out.failover
                    .iter()
                    .map(|f| f.split(" (").next().unwrap_or(f).to_string()),
            );
            let config = ClusterConfig::load(&cdir.join("cluster.toml"))?;
            restart_disk(cdir, &config, victim, true, None).await?;
        }
        let (n, f) = (median(normal), median(failed));
        notes.dedup();
        println!(
            "Q{q:02}   {:>11.1} {:>13.1} {:>8.2}  {}",
            n * 1e3,
            f * 1e3,
            f / n,
            if notes.is_empty() {
                "none (it ended before the kill)".into()
            } else {
                notes.join(", ")
            }
        );
    }
    println!(
        "disk_died_ms: from submitting the query to its answer, the failed run and the rerun included."
    );
    Ok(())
}

/// Runs `sql` on a fresh connection and kills disk `victim` after `after`; the output and
/// the wall time from submission.
async fn query_killing(
    cdir: &Path,
    sql: &str,
    victim: u32,
    after: Duration,
) -> Result<(adisk_host::sql::QueryOutput, Duration), CliError> {
    let engine = engine(cdir).await?;
    let pid = ClusterConfig::load(&cdir.join("cluster.toml"))?.disks[victim as usize]
        .pid
        .ok_or_else(|| CliError::Other(format!("disk {victim} has no pid")))?;
    let start = Instant::now();
    let killer = async {
        tokio::time::sleep(after).await;
        // SAFETY: signalling a disk process this benchmark started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    };
    let query = async { (engine.query(sql).await, start.elapsed()) };
    let ((out, wall), ()) = tokio::join!(query, killer);
    Ok((out?, wall))
}
