//! `adisk chaos --seed N --minutes M`: seeded fault injection against a real local cluster.
//!
//! A stream of TPC-H queries at random offload levels, each checked against DuckDB's official
//! answer, interleaved with faults: a disk killed (SIGKILL) and restarted, a disk stopped
//! (SIGSTOP) for a while and continued, a byte flipped in a data file and later restored, a
//! table reloaded (an atomic load racing the queries), a disk's link slowed or cut (every disk
//! is reached through a fault-injecting proxy, `crate::linkfault`: host to disk, disk to disk
//! and repairs alike; with `--netns` each disk is its own machine, a network namespace, and
//! its link is set down or shaped by the kernel instead); with `--replicas 2` or more also a
//! disk's directory deleted and the disk restarted empty (it must repair itself from its
//! peers), and a flipped byte repaired by `scrub` from another copy instead of restored. Every decision comes from the seed (a
//! SplitMix64 stream), so a failing seed replays the same sequence of events; timings are the
//! machine's.
//!
//! What counts as a failure: a wrong answer (ever); an error while no fault is active; an
//! error that is not typed (a panic, an internal error); a query that does not end within
//! [`QUERY_DEADLINE`]. While a fault is active, a clear error is the expected outcome — without
//! replicas, a query over a dead disk's partitions cannot answer.
use crate::common::CliError;
use crate::linkfault::{LinkMode, LinkProxy};
use crate::local::{self, NetnsDisks, UpArgs};
use crate::netns::Net;
use adisk_core::config::ClusterConfig;
use adisk_host::sql::{Offload, SqlEngine, SqlOptions, oracle, tpch};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a query may take before the run counts it as hung.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(120);

/// `adisk chaos` arguments.
#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    /// Seed of the event stream (the same seed replays the same events).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How long to run, minutes (fractions allowed).
    #[arg(long, default_value_t = 1.0)]
    pub minutes: f64,
    /// Disks.
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// TPC-H scale factor (one with official answers: 0.01, 0.1 or 1).
    #[arg(long, default_value_t = 0.01)]
    pub sf: f64,
    /// Copies of each partition (`load --replicas`): with 2, a killed or stopped disk's
    /// partitions are read from their other copy.
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    /// Each disk its own machine: a Linux network namespace on a bridge, with its own address;
    /// link faults are the kernel's (the disk's link set down, or shaped with `tc tbf`) instead
    /// of the proxy's. Needs root and iproute2.
    #[arg(long)]
    pub netns: bool,
    /// With `--netns`: the bridge's network is 10.SUBNET.0.0/24 (another run, or the netns
    /// test, can go beside it on another).
    #[arg(long, default_value_t = 77)]
    pub subnet: u8,
}

/// The rate a slowed link is shaped to under `--netns`.
pub const NETNS_SLOW_RATE: &str = "8mbit";

/// How link faults reach the disks' links.
enum Links {
    /// A proxy in front of every disk (`crate::linkfault`).
    Proxies(Vec<LinkProxy>),
    /// The disks' own links between network namespaces.
    Netns(Net),
}

impl Links {
    fn set(&self, d: u32, mode: LinkMode) -> Result<(), CliError> {
        let net = match self {
            Links::Proxies(proxies) => {
                proxies[d as usize].set(mode);
                return Ok(());
            }
            Links::Netns(net) => net,
        };
        let d = d as usize;
        match mode {
            LinkMode::Up => {
                net.unshape(d);
                net.mend(d)
            }
            LinkMode::Slow => net.shape(d, NETNS_SLOW_RATE),
            LinkMode::Cut => net.cut(d),
        }
        .map_err(|e| CliError::Other(format!("link fault on disk {d}: {e}")))
    }

    /// Disk `d`'s network namespace, under `--netns`.
    fn namespace(&self, d: u32) -> Option<String> {
        match self {
            Links::Netns(net) => Some(net.namespace(d as usize)),
            Links::Proxies(_) => None,
        }
    }
}

/// SplitMix64: the run's only source of decisions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A fault in force.
enum Fault {
    /// Disk killed; restarted when the fault ends.
    Killed(u32),
    /// Disk stopped; continued when the fault ends.
    Stopped(u32),
    /// A byte of `file` flipped at `offset`; flipped back when the fault ends (or, with
    /// replicas, found and refetched by a scrub).
    Flipped { file: PathBuf, offset: u64 },
    /// Disk killed and its directory deleted; restarted empty when the fault ends, and it must
    /// repair itself from its peers (only with replicas).
    Wiped(u32),
    /// The disk's link slowed (every chunk delayed) or cut (nothing forwarded); up again when
    /// the fault ends.
    Link(u32),
}

/// Longest a restarted empty disk may take to repair itself.
pub const REPAIR_DEADLINE: Duration = Duration::from_secs(60);

/// What the run saw.
#[derive(Default, Debug)]
struct Tally {
    events: BTreeMap<&'static str, u64>,
    correct: u64,
    expected_errors: u64,
    failures: Vec<String>,
}

impl Tally {
    fn event(&mut self, name: &'static str) {
        *self.events.entry(name).or_default() += 1;
    }
}

/// Runs the chaos loop; fails when any failure was seen.
pub async fn run(dir: &Path, a: &ChaosArgs) -> Result<(), CliError> {
    let answers = tpch::official_answers(a.sf)?;
    let cdir = dir.join(format!("chaos-{}", a.seed));
    if cdir.join("cluster.toml").exists() {
        let _ = local::down(&cdir).await;
    }
    let _ = std::fs::remove_dir_all(&cdir);
    let net = match a.netns {
        true => Some(
            Net::make(a.disks as usize, a.subnet)
                .map_err(|why| CliError::Other(format!("chaos --netns: {why}")))?,
        ),
        false => None,
    };
    let args = UpArgs {
        memory_mib: 128,
        disk_timeout_ms: 3_000,
        netns: net.as_ref().map(|n| NetnsDisks {
            namespaces: (0..a.disks as usize).map(|d| n.namespace(d)).collect(),
            addresses: (0..a.disks as usize)
                .map(|d| format!("{}:7000", n.disk(d)))
                .collect(),
        }),
        ..UpArgs::local(a.disks)
    };
    let config = local::up(&cdir, &args).await?;
    let links = match net {
        Some(net) => Ok(Links::Netns(net)),
        None => proxy_links(&cdir, &config).await.map(Links::Proxies),
    };
    let result = match links {
        Ok(links) => {
            let result = chaos_loop(&cdir, config, &links, a, &answers).await;
            let _ = local::down(&cdir).await;
            result
        }
        Err(e) => {
            let _ = local::down(&cdir).await;
            Err(e)
        }
    };
    let tally = result?;
    println!(
        "chaos seed {} for {} min on {} disks{}, {} replicas: {:?}",
        a.seed,
        a.minutes,
        a.disks,
        if a.netns {
            " (each in its own network namespace)"
        } else {
            ""
        },
        a.replicas,
        tally.events
    );
    println!(
        "answers correct {}, clear errors under a fault {}, failures {}",
        tally.correct,
        tally.expected_errors,
        tally.failures.len()
    );
    if tally.failures.is_empty() {
        let _ = std::fs::remove_dir_all(&cdir);
        return Ok(());
    }
    for f in &tally.failures {
        println!("FAIL {f}");
    }
    Err(CliError::Other(format!(
        "chaos seed {}: {} failures (rerun with --seed {} to replay)",
        a.seed,
        tally.failures.len(),
        a.seed
    )))
}

/// Puts a [`LinkProxy`] in front of every disk and names the proxies in `cluster.toml`, so
/// that the host and the disks (which read it as their members) reach each disk through its
/// proxy; `config` keeps the disks' own addresses (where a restarted disk listens).
async fn proxy_links(cdir: &Path, config: &ClusterConfig) -> Result<Vec<LinkProxy>, CliError> {
    let mut links = Vec::new();
    let mut proxied = config.clone();
    for disk in &mut proxied.disks {
        let target = disk
            .address
            .parse()
            .map_err(|e| CliError::Other(format!("disk address {}: {e}", disk.address)))?;
        let link = LinkProxy::start("127.0.0.1:0", target)
            .await
            .map_err(|e| CliError::Other(format!("starting a link proxy: {e}")))?;
        disk.address = link.address().to_string();
        links.push(link);
    }
    proxied.save(&cdir.join("cluster.toml"))?;
    Ok(links)
}

async fn chaos_loop(
    cdir: &Path,
    config: ClusterConfig,
    links: &Links,
    a: &ChaosArgs,
    answers: &BTreeMap<u32, String>,
) -> Result<Tally, CliError> {
    let cluster = Arc::new(
        adisk_host::Cluster::connect(ClusterConfig::load(&cdir.join("cluster.toml"))?).await?,
    );
    let load = adisk_host::load::TpchLoad {
        sf: a.sf,
        partitions_per_disk: 1,
        row_group_rows: 1 << 16,
        tables: vec![],
        replicas: a.replicas,
        disks: vec![],
    };
    adisk_host::load::load_tpch(&cluster, &load, |_, _| {}).await?;
    let answers = oracles(&cluster, answers).await?;
    let answers = &answers;
    drop(cluster);
    let mut rng = Rng(a.seed);
    let mut tally = Tally::default();
    let mut fault: Option<Fault> = None;
    let deadline = Instant::now() + Duration::from_secs_f64(a.minutes * 60.0);
    while Instant::now() < deadline {
        match rng.below(10) {
            0..=5 => query(cdir, &mut rng, fault.is_some(), answers, &mut tally).await,
            6 | 7 if fault.is_none() => {
                fault = Some(inject(
                    cdir, &config, links, a.replicas, &mut rng, &mut tally,
                )?)
            }
            6 | 7 => {
                end(
                    cdir,
                    &config,
                    links,
                    a.replicas,
                    fault.take().expect("a fault"),
                    &mut rng,
                    &mut tally,
                )
                .await?
            }
            8 if fault.is_none() => reload(cdir, a, &mut rng, &mut tally).await,
            _ => {}
        }
    }
    if let Some(f) = fault.take() {
        end(cdir, &config, links, a.replicas, f, &mut rng, &mut tally).await?;
    }
    // The cluster is whole again: every query must answer.
    for _ in 0..3 {
        query(cdir, &mut rng, false, answers, &mut tally).await;
    }
    Ok(tally)
}

/// The answer each query is checked against: DuckDB's official one, except where it depends
/// on generator text (Q13: tpchgen draws comments differently from dbgen), where it is DuckDB's
/// on the same files, taken before any fault (reloads regenerate identical rows).
async fn oracles(
    cluster: &adisk_host::Cluster,
    official: &BTreeMap<u32, String>,
) -> Result<BTreeMap<u32, String>, CliError> {
    let mut answers = official.clone();
    let catalog = cluster.catalog().await?;
    let texts: Vec<&str> = tpch::TEXT_DEPENDENT_QUERIES
        .iter()
        .map(|q| tpch::query(*q))
        .collect::<Result<_, _>>()?;
    let same = oracle::duckdb_same_data(cluster, &catalog, &texts)?;
    for (q, a) in tpch::TEXT_DEPENDENT_QUERIES.iter().zip(same) {
        answers.insert(
            *q,
            a.map_err(|e| CliError::Other(format!("DuckDB on the same files, Q{q}: {e}")))?,
        );
    }
    Ok(answers)
}

/// One TPC-H query at a random level, on a fresh connection (as a client would).
async fn query(
    cdir: &Path,
    rng: &mut Rng,
    faulty: bool,
    answers: &BTreeMap<u32, String>,
    tally: &mut Tally,
) {
    tally.event("query");
    let q = 1 + rng.below(22) as u32;
    let offload = Offload::ALL[rng.below(Offload::ALL.len() as u64) as usize];
    let what = format!("Q{q:02} at {offload:?}");
    let run = async {
        let config = ClusterConfig::load(&cdir.join("cluster.toml"))?;
        let cluster = Arc::new(adisk_host::Cluster::connect(config).await?);
        let engine = SqlEngine::new(
            cluster,
            SqlOptions {
                offload,
                ..SqlOptions::default()
            },
        )
        .await?;
        Ok::<_, adisk_host::HostError>(engine.query(tpch::query(q)?).await?)
    };
    match tokio::time::timeout(QUERY_DEADLINE, run).await {
        Err(_) => tally.failures.push(format!(
            "{what}: no answer within {} s",
            QUERY_DEADLINE.as_secs()
        )),
        Ok(Ok(out)) => match oracle::compare(&out, &answers[&q], |c| {
            !tpch::TEXT_DEPENDENT_QUERIES.contains(&q) && tpch::generator_text_column(c)
        }) {
            Ok(()) => tally.correct += 1,
            Err(diff) => tally.failures.push(format!("{what}: WRONG ANSWER: {diff}")),
        },
        Ok(Err(e)) if faulty && !untyped(&e) => tally.expected_errors += 1,
        Ok(Err(e)) => tally.failures.push(format!(
            "{what}: {} error{}: {e}",
            if untyped(&e) { "untyped" } else { "unexpected" },
            if faulty { " under a fault" } else { "" }
        )),
    }
}

/// An error that is not a clear, typed one: a panic or an internal failure.
fn untyped(e: &adisk_host::HostError) -> bool {
    let text = e.to_string();
    text.contains("panicked") || text.contains("Internal")
}

/// Starts a random fault (deleting a disk's directory only when every partition has another
/// copy).
fn inject(
    cdir: &Path,
    config: &ClusterConfig,
    links: &Links,
    replicas: u32,
    rng: &mut Rng,
    tally: &mut Tally,
) -> Result<Fault, CliError> {
    let d = rng.below(config.disks.len() as u64) as u32;
    let pid = current_pid(cdir, d)?;
    Ok(match rng.below(if replicas >= 2 { 6 } else { 5 }) {
        0 => {
            tally.event("kill");
            // SAFETY: signalling a disk process this run started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            Fault::Killed(d)
        }
        1 => {
            tally.event("stop");
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
            Fault::Stopped(d)
        }
        2 => {
            tally.event("flip");
            let files = data_files(&cdir.join(format!("disk-{d}")));
            let file = files[rng.below(files.len() as u64) as usize].clone();
            let len = std::fs::metadata(&file)
                .map(|m| m.len())
                .unwrap_or(1)
                .max(1);
            let offset = rng.below(len);
            flip(&file, offset)?;
            Fault::Flipped { file, offset }
        }
        3 => {
            tally.event("slow-link");
            links.set(d, LinkMode::Slow)?;
            Fault::Link(d)
        }
        4 => {
            tally.event("cut-link");
            links.set(d, LinkMode::Cut)?;
            Fault::Link(d)
        }
        _ => {
            tally.event("wipe");
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            wait_gone(pid)?;
            let disk_dir = cdir.join(format!("disk-{d}"));
            std::fs::remove_dir_all(&disk_dir)
                .map_err(|e| CliError::Other(format!("deleting {}: {e}", disk_dir.display())))?;
            Fault::Wiped(d)
        }
    })
}

/// Waits until process `pid` is gone (its files and port released).
fn wait_gone(pid: u32) -> Result<(), CliError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        });
        if !matches!(zombie, Ok(false)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CliError::Other(format!(
                "disk process {pid} did not end within 20 s of SIGKILL"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ends a fault: restarts, continues, restores (or, with replicas, scrubs and repairs), or
/// restarts an empty disk and waits until it repaired itself.
async fn end(
    cdir: &Path,
    config: &ClusterConfig,
    links: &Links,
    replicas: u32,
    fault: Fault,
    rng: &mut Rng,
    tally: &mut Tally,
) -> Result<(), CliError> {
    match fault {
        Fault::Killed(d) => {
            tally.event("restart");
            local::restart_disk(cdir, config, d, true, links.namespace(d).as_deref()).await?;
        }
        Fault::Stopped(d) => {
            tally.event("continue");
            // SAFETY: signalling a disk process this run started.
            unsafe { libc::kill(current_pid(cdir, d)? as libc::pid_t, libc::SIGCONT) };
        }
        Fault::Flipped { file, offset } if replicas >= 2 && rng.below(2) == 0 => {
            tally.event("scrub-repair");
            if let Err(why) = scrub_repairs(cdir, &file).await {
                tally
                    .failures
                    .push(format!("scrub after a flip in {}: {why}", file.display()));
                flip(&file, offset)?;
            }
        }
        Fault::Flipped { file, offset } => {
            tally.event("restore");
            flip(&file, offset)?;
        }
        Fault::Link(d) => {
            tally.event("link-up");
            links.set(d, LinkMode::Up)?;
        }
        Fault::Wiped(d) => {
            tally.event("restart-empty");
            local::restart_disk(cdir, config, d, true, links.namespace(d).as_deref()).await?;
            if let Err(why) = repaired_itself(cdir, d).await {
                tally.failures.push(why);
            }
        }
    }
    Ok(())
}

/// Runs `adisk scrub`'s protocol: the scrub must find `file` corrupt and the repair must
/// refetch it from another copy.
async fn scrub_repairs(cdir: &Path, file: &Path) -> Result<(), String> {
    let config = ClusterConfig::load(&cdir.join("cluster.toml")).map_err(|e| e.to_string())?;
    let cluster = adisk_host::Cluster::connect(config)
        .await
        .map_err(|e| e.to_string())?;
    let reports = cluster.scrub().await;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut found = None;
    for (d, r) in reports.iter().enumerate() {
        let r = r
            .as_ref()
            .map_err(|e| format!("disk {d} did not scrub: {e}"))?;
        if let Some(c) = r.corrupt.iter().find(|c| {
            c.file.ends_with(&name) && file.to_string_lossy().contains(&format!("disk-{d}/"))
        }) {
            found = Some((d as u32, c.table.clone(), c.partition));
        }
    }
    let (d, table, partition) = found.ok_or("the scrub did not find the flipped file")?;
    let request = adisk_core::protocol::RepairRequest {
        verify: true,
        tables: vec![table.clone()],
    };
    let (_, report) = cluster
        .repair(&[d], &request)
        .await
        .pop()
        .ok_or("no repair report")?;
    let report = report.map_err(|e| e.to_string())?;
    if report
        .repaired
        .iter()
        .any(|x| x.table == table && x.partition == partition)
    {
        Ok(())
    } else {
        Err(format!(
            "disk {d} did not refetch {table} partition {partition}: {:?}",
            report.failed
        ))
    }
}

/// Waits until no table needs repair on disk `d` (restarted empty).
async fn repaired_itself(cdir: &Path, d: u32) -> Result<(), String> {
    let deadline = Instant::now() + REPAIR_DEADLINE;
    loop {
        let config = ClusterConfig::load(&cdir.join("cluster.toml")).map_err(|e| e.to_string())?;
        let cluster = adisk_host::Cluster::connect(config)
            .await
            .map_err(|e| e.to_string())?;
        if let Ok(catalog) = cluster.catalog().await
            && catalog.incomplete.is_empty()
            && catalog.tables.values().all(|t| !t.needs_repair())
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "disk {d}, restarted empty, did not repair itself within {} s",
                REPAIR_DEADLINE.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reloads `nation` or `region` (an atomic load while nothing else is faulty).
async fn reload(cdir: &Path, a: &ChaosArgs, rng: &mut Rng, tally: &mut Tally) {
    tally.event("reload");
    let table = if rng.below(2) == 0 {
        "nation"
    } else {
        "region"
    };
    let run = async {
        let config = ClusterConfig::load(&cdir.join("cluster.toml"))?;
        let cluster = adisk_host::Cluster::connect(config).await?;
        let load = adisk_host::load::TpchLoad {
            sf: a.sf,
            partitions_per_disk: 1,
            row_group_rows: 1 << 16,
            tables: vec![table.to_string()],
            replicas: a.replicas,
            disks: vec![],
        };
        adisk_host::load::load_tpch(&cluster, &load, |_, _| {}).await
    };
    if let Err(e) = run.await {
        tally.failures.push(format!("reloading {table}: {e}"));
    }
}

fn current_pid(cdir: &Path, d: u32) -> Result<u32, CliError> {
    let config = ClusterConfig::load(&cdir.join("cluster.toml"))?;
    config.disks[d as usize]
        .pid
        .ok_or_else(|| CliError::Other(format!("disk {d} has no pid in cluster.toml")))
}

/// Parquet files of a disk's tables.
fn data_files(disk_dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![disk_dir.join("tables")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Flips the lowest bit of the byte at `offset`, keeping the file's size and mtime (as bit rot
/// does).
fn flip(file: &Path, offset: u64) -> Result<(), CliError> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let io =
        |e: std::io::Error| CliError::Other(format!("flipping a byte of {}: {e}", file.display()));
    let mtime = std::fs::metadata(file)
        .and_then(|m| m.modified())
        .map_err(io)?;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .map_err(io)?;
    let mut b = [0u8];
    f.seek(SeekFrom::Start(offset))
        .and_then(|_| f.read_exact(&mut b))
        .map_err(io)?;
    b[0] ^= 1;
    f.seek(SeekFrom::Start(offset))
        .and_then(|_| f.write_all(&b))
        .map_err(io)?;
    f.set_modified(mtime).map_err(io)?;
    Ok(())
}
