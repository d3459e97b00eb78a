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
use crate::common::CliError;
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

/// One run of the query: seconds at the host, and the disk job's (wall, admission wait,
/// compute-slot wait, CPU) in seconds.
async fn timed_with_disk(engine: &SqlEngine) -> Result<(f64, [f64; 4]), CliError> {
    let start = Instant::now();
    let out = engine.query(QUERY).await?;
    if out.rows() != 4 {
        return Err(CliError::Other(format!(
            "the Q1-like query made {} groups, not 4",
            out.rows()
        )));
    }
    let wall = start.elapsed().as_secs_f64();
    let s = |ns: u64| ns as f64 / 1e9;
    let disk = out
        .scans
        .iter()
        .filter_map(|r| r.stats.as_ref())
        .fold([0.0f64; 4], |acc, d| {
            [
                acc[0].max(s(d.wall_ns)),
                acc[1] + s(d.admission_wait_ns),
                acc[2] + s(d.schedule_wait_ns),
                acc[3] + s(d.cpu_ns),
            ]
        });
    Ok((wall, disk))
}

/// One measurement of the single query: host wall time and its disk job's numbers, seconds.
#[derive(Clone, Copy)]
struct Sample {
    wall: f64,
    disk: [f64; 4],
    crowd_running: usize,
}

/// The median sample by wall time.
fn median(mut v: Vec<Sample>) -> Sample {
    v.sort_by(|x, y| x.wall.total_cmp(&y.wall));
    v[v.len() / 2]
}

/// Times the query of `program` while `crowd` copies of it run as program `bench-crowd`.
async fn beside_crowd(
    cluster: &Arc<Cluster>,
    crowd: usize,
    program: &str,
) -> Result<Sample, CliError> {
    let mut tasks = Vec::with_capacity(crowd);
    for _ in 0..crowd {
        let eng = engine(cluster, "bench-crowd").await?;
        tasks.push(tokio::spawn(async move { timed_with_disk(&eng).await }));
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
    let (wall, disk) = timed_with_disk(&engine(cluster, program).await?).await?;
    let crowd_running = tasks.iter().filter(|t| !t.is_finished()).count();
    for t in tasks {
        t.await
            .map_err(|e| CliError::Other(format!("a crowd query panicked: {e}")))??;
    }
    Ok(Sample {
        wall,
        disk,
        crowd_running,
    })
}

fn print_row(name: &str, s: &Sample, alone: f64) {
    let ms = |x: f64| x * 1e3;
    let crowd = if name.starts_with("alone") {
        "-".to_string()
    } else {
        s.crowd_running.to_string()
    };
    println!(
        "{:<40} {:>8.1} {:>6.2}x {:>8.1} {:>9.1} {:>8.1} {:>8.1} {:>6}",
        name,
        ms(s.wall),
        s.wall / alone,
        ms(s.disk[0]),
        ms(s.disk[1]),
        ms(s.disk[2]),
        ms(s.disk[3]),
        crowd
    );
}

pub async fn run(dir: &Path, a: FairBenchArgs) -> Result<(), CliError> {
    let cdir = dir.join("bench-fair");
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let memory_mib = 64 + 24 * (a.crowd as u64 + 1);
    let args = UpArgs {
        memory_mib,
        ..UpArgs::local(1)
    };
    up(&cdir, &args).await?;
    let result = async {
        let cluster = Arc::new(crate::common::connect(&cdir).await?);
        let rows = cluster.catalog().await?.tables.get("lineitem").map(|t| t.rows()).unwrap_or(0);
        if rows < adisk_storage::tpch::approx_rows("lineitem", a.sf) * 99 / 100 {
            let load = adisk_host::load::TpchLoad { sf: a.sf, partitions_per_disk: 1, row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS, tables: vec!["lineitem".into()], replicas: 1, disks: vec![] };
            crate::output::load_tpch(&cluster, &load).await?;
        }
        let single = engine(&cluster, "bench-single").await?;
        timed_with_disk(&single).await?; // warm-up
        let repeats = a.repeats.max(1);
        let mut samples = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..repeats {
            let (wall, disk) = timed_with_disk(&single).await?;
            samples[0].push(Sample { wall, disk, crowd_running: 0 });
            samples[1].push(beside_crowd(&cluster, a.crowd, "bench-single").await?);
            samples[2].push(beside_crowd(&cluster, a.crowd, "bench-crowd").await?);
        }
        let [alone, own, same] = samples.map(median);
        println!("adisk bench fair: TPC-H SF {} lineitem, Q1-like group-by at 1 disk (2 compute slots), {} crowd jobs, median of {repeats}", a.sf, a.crowd);
        println!("{:<40} {:>8} {:>7} {:>8} {:>9} {:>8} {:>8} {:>6}", "the single query", "wall_ms", "ratio", "disk_ms", "admit_ms", "slot_ms", "cpu_ms", "crowd");
        print_row("alone", &alone, alone.wall);
        print_row("own program, beside the crowd", &own, alone.wall);
        print_row("crowd's program, beside the crowd", &same, alone.wall);
        println!("ratio: wall time / wall time alone (fair per program: about 2x; per job: up to {}x). disk_ms: the disk job's wall time;", a.crowd + 1);
        println!("admit_ms / slot_ms: its waits for memory and for compute slots; cpu_ms: its CPU; crowd: crowd queries still running at its end.");
        Ok::<(), CliError>(())
    }
    .await;
    down(&cdir).await?;
    result
}
