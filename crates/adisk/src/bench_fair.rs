//! `adisk bench fair`: fair sharing of a disk between host programs (issue 10, acceptance 4).
//!
//! One disk process (two compute slots), `lineitem` at the given scale factor, and a Q1-like
//! group-by run with offload `aggregate` (scan, qualification and grouping at the disk). The
//! same query is timed
//!
//! * alone (median of `repeats`),
//! * beside `crowd` copies of it from another program (`bench-crowd`): the program's share,
//! * beside the same crowd, but submitted as part of that program: a job's share.
//!
//! Reported: each time and its ratio to the time alone. Fair sharing per program puts the
//! second near 2× (two programs share the disk); sharing per job, near `crowd + 1`×.
use crate::CliError;
use crate::local::{UpArgs, down, up};
use adisk_host::Cluster;
use adisk_host::sql::{Offload, SqlEngine, SqlOptions};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const QUERY: &str = "SELECT l_returnflag, l_linestatus, sum(l_quantity), sum(l_extendedprice * (1 - l_discount)), avg(l_discount), count(*) \
                     FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag, l_linestatus";

/// `adisk bench fair` arguments.
#[derive(clap::Args, Debug)]
pub struct FairBenchArgs {
    /// Scale factor.
    #[arg(long, default_value_t = 0.2)]
    pub sf: f64,
    /// Jobs of the other program running at once.
    #[arg(long, default_value_t = 8)]
    pub crowd: usize,
    /// Repeats of the query alone (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
}

fn engine(
    cluster: &Arc<Cluster>,
    program: &str,
) -> impl std::future::Future<Output = adisk_host::Result<SqlEngine>> + use<> {
    let opts = SqlOptions {
        offload: Offload::Aggregate,
        scratch_kib: 4096,
        program: Some(program.to_string()),
        ..Default::default()
    };
    SqlEngine::new(cluster.clone(), opts)
}

async fn timed(engine: &SqlEngine) -> Result<f64, CliError> {
    let start = Instant::now();
    let out = engine.query(QUERY).await?;
    if out.rows() != 4 {
        return Err(CliError::Other(format!(
            "the Q1-like query made {} groups, not 4",
            out.rows()
        )));
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Times the query of `program` while `crowd` copies of it run as program `bench-crowd`;
/// returns (its seconds, crowd jobs still running when it ended).
async fn beside_crowd(
    cluster: &Arc<Cluster>,
    crowd: usize,
    program: &str,
) -> Result<(f64, usize), CliError> {
    let mut tasks = Vec::with_capacity(crowd);
    for _ in 0..crowd {
        let eng = engine(cluster, "bench-crowd").await?;
        tasks.push(tokio::spawn(async move { timed(&eng).await }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let running = cluster
            .status()
            .await
            .into_iter()
            .next()
            .and_then(|s| s.ok())
            .map_or(0, |s| s.jobs_running as usize);
        if running >= crowd {
            break;
        }
        if Instant::now() > deadline {
            return Err(CliError::Other(format!(
                "only {running} of {crowd} crowd jobs started within 120 s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let single = timed(&engine(cluster, program).await?).await?;
    let still = tasks.iter().filter(|t| !t.is_finished()).count();
    for t in tasks {
        t.await
            .map_err(|e| CliError::Other(format!("a crowd query panicked: {e}")))??;
    }
    Ok((single, still))
}

pub async fn run(dir: &Path, a: FairBenchArgs) -> Result<(), CliError> {
    let cdir = dir.join("bench-fair");
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let memory_mib = 64 + 24 * (a.crowd as u64 + 1);
    let args = UpArgs {
        disks: 1,
        memory_mib,
        buffer_kib: 256,
        buffers_per_stream: 2,
        host_link_mbps: 0,
        disk_read_mbps: 0,
        exchange: Default::default(),
    };
    up(&cdir, &args).await?;
    let result = async {
        let cluster = Arc::new(crate::connect(&cdir).await?);
        let rows = cluster.catalog().await?.tables.get("lineitem").map(|t| t.rows()).unwrap_or(0);
        if rows < adisk_storage::tpch::approx_rows("lineitem", a.sf) * 99 / 100 {
            let load = adisk_host::load::TpchLoad { sf: a.sf, partitions_per_disk: 1, row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS, tables: vec!["lineitem".into()] };
            crate::output::load_tpch(&cluster, &load).await?;
        }
        let single = engine(&cluster, "bench-single").await?;
        timed(&single).await?; // warm-up
        let mut alone = Vec::with_capacity(a.repeats);
        for _ in 0..a.repeats.max(1) {
            alone.push(timed(&single).await?);
        }
        alone.sort_by(f64::total_cmp);
        let alone_s = alone[alone.len() / 2];
        let (own_s, own_still) = beside_crowd(&cluster, a.crowd, "bench-single").await?;
        let (same_s, same_still) = beside_crowd(&cluster, a.crowd, "bench-crowd").await?;
        println!("adisk bench fair: TPC-H SF {} lineitem, Q1-like group-by at 1 disk (2 compute slots), {} crowd jobs", a.sf, a.crowd);
        println!("{:<44} {:>9} {:>8} {:>14}", "the single query", "wall_ms", "ratio", "crowd_running");
        println!("{:<44} {:>9.1} {:>7.2}x {:>14}", format!("alone (median of {})", alone.len()), alone_s * 1e3, 1.0, "-");
        println!("{:<44} {:>9.1} {:>7.2}x {:>14}", "own program, beside the crowd (per program)", own_s * 1e3, own_s / alone_s, own_still);
        println!("{:<44} {:>9.1} {:>7.2}x {:>14}", "crowd's program, beside the crowd (per job)", same_s * 1e3, same_s / alone_s, same_still);
        println!("ratio: wall time / wall time alone. Fair per program: about 2x (acceptance: at most 2.5x); per job: up to {}x.", a.crowd + 1);
        println!("crowd_running: crowd queries not yet finished when the single one ended (0: the crowd ended first, nothing was shared).");
        Ok::<(), CliError>(())
    }
    .await;
    down(&cdir).await?;
    result
}
