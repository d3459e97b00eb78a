//! `adisk bench remote`: ActiveDisk against engines that read the same data over HTTP from
//! the storage side, on "several machines" (network namespaces on a bridge) with the host's
//! link shaped by the kernel to each `--link-mbit` rate in turn.
//!
//! - ActiveDisk: through its Flight SQL service (`adisk serve`, TLS), with the ADBC driver.
//! - DuckDB 1.5.5 with httpfs (external file cache off) on Snappy copies of the disks' files
//!   and on the disks' own (uncompressed) files.
//! - DataFusion with its HTTP object store, on the disks' own files.
//!
//! Each disk's namespace runs a file server (`adisk files-http`) beside the disk; the engines
//! run in the host's namespace, behind its shaped link. Per rate the cluster is started in
//! the host's namespace (this program re-executed there), the queries run interleaved engine
//! by engine (one warm-up each, then the repeats), every result's fingerprint is compared
//! across engines, and the bytes the host's link received are counted per run. At the end: a
//! summary per rate and one SVG plot of total time against link rate, a line per engine.
use crate::bench_remote_peers::{Engine, Fingerprint, Peer};
use crate::common::CliError;
use crate::netns::Net;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Port of the file servers in the disks' namespaces.
const FILES_PORT: u16 = 8080;

/// Options of `adisk bench remote`.
#[derive(clap::Args, Debug, Clone)]
pub struct RemoteBenchArgs {
    /// Scale factor.
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Disks (each a namespace of its own).
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// The host link's rates, Mbit/s each way (`tc tbf`), one run per rate; 0: unshaped.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    pub link_mbit: Vec<u64>,
    /// Timed runs per query and engine (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Skip the warm-up run of each query and engine.
    #[arg(long)]
    pub no_warmup: bool,
    /// Only these queries (comma-separated numbers).
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<u32>,
    /// The engines to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "adisk,duckdb-snappy,duckdb-own,datafusion-http"
    )]
    pub engines: Vec<Engine>,
    /// Threads of DuckDB and partitions of DataFusion (the machine's cores by default: 2).
    #[arg(long, default_value_t = 2)]
    pub peer_threads: u32,
    /// DiskOS memory per disk, MiB.
    #[arg(long, default_value_t = 256)]
    pub memory_mib: u64,
    /// Python interpreter with duckdb, duckdb-extension-httpfs, pyarrow and the ADBC driver.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// The bridge's network is 10.SUBNET.0.0/24.
    #[arg(long, default_value_t = 77)]
    pub subnet: u8,
    /// Where the plot goes (default: DIR/bench-remote-sfSF.svg); the results, as JSON, go
    /// beside it.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Results of an earlier run (its JSON) to show beside this run's in the summary and the
    /// plot: its rates that this run did not measure (e.g. a slow rate run with fewer
    /// repeats).
    #[arg(long)]
    pub with: Option<PathBuf>,
    /// Set for the run inside the host's namespace: its one link rate.
    #[arg(long, hide = true)]
    pub inner_rate: Option<u64>,
    /// Set for the run inside the host's namespace: where the disks are (JSON).
    #[arg(long, hide = true)]
    pub places: Option<String>,
    /// Set for the run inside the host's namespace: where it writes its results (JSON).
    #[arg(long, hide = true)]
    pub results: Option<PathBuf>,
}

/// Where the disks are, as the run in the host's namespace is told.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Places {
    namespaces: Vec<String>,
    /// Each disk's IP address.
    addresses: Vec<String>,
    /// The host's end of its link (in its namespace), whose counters say what it received.
    host_interface: String,
}

/// One engine's figures for one query.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Cell {
    /// Median wall time, s (NaN-free: absent when it failed).
    pub secs: Option<f64>,
    /// Bytes the host's link received in the last run.
    pub link_bytes: u64,
    /// Bytes the host's link sent in the last run (requests, plans, Bloom filters).
    #[serde(default)]
    pub sent_bytes: u64,
    /// Its error, or why its answer was judged wrong.
    pub error: Option<String>,
}

/// One rate's results.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct RateResults {
    rate_mbit: u64,
    /// Query number -> engine name -> figures.
    queries: BTreeMap<u32, BTreeMap<String, Cell>>,
}

pub async fn run(dir: &Path, a: RemoteBenchArgs) -> Result<(), CliError> {
    if let Some(rate) = a.inner_rate {
        return inner(dir, &a, rate).await;
    }
    let fail = |why: String| CliError::Other(format!("bench remote: {why}"));
    if a.engines.is_empty() || a.link_mbit.is_empty() {
        return Err(fail("give at least one engine and one link rate".into()));
    }
    let cdir = dir.join(format!("bench-remote-{}", a.disks));
    std::fs::create_dir_all(&cdir).map_err(|e| fail(format!("{}: {e}", cdir.display())))?;
    let mut net = Net::make(a.disks as usize, a.subnet).map_err(fail)?;
    net.add_host().map_err(fail)?;
    let places = Places {
        namespaces: (0..a.disks as usize).map(|d| net.namespace(d)).collect(),
        addresses: (0..a.disks as usize).map(|d| net.disk(d)).collect(),
        host_interface: net.host_names().2,
    };
    let _files = FileServers::start(&places, &cdir)?;
    let mut all = Vec::new();
    for &rate in &a.link_mbit {
        match rate {
            0 => net.unshape_host(),
            r => net.shape_host(&format!("{r}mbit")).map_err(fail)?,
        }
        eprintln!("host link {}", rate_name(rate));
        all.push(one_rate(dir, &net, &places, rate)?);
    }
    drop(net);
    if let Some(path) = &a.with {
        let fail = |e: String| CliError::Other(format!("--with {}: {e}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let earlier: Vec<RateResults> =
            serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
        all.extend(
            earlier
                .into_iter()
                .filter(|r| !a.link_mbit.contains(&r.rate_mbit)),
        );
        all.sort_by_key(|r| {
            if r.rate_mbit == 0 {
                u64::MAX
            } else {
                r.rate_mbit
            }
        });
    }
    summarize(&a, &all, dir)
}

/// Runs this benchmark again inside the host's namespace for one `rate`; its results.
fn one_rate(dir: &Path, net: &Net, places: &Places, rate: u64) -> Result<RateResults, CliError> {
    let fail = |why: String| CliError::Other(format!("bench remote: {why}"));
    let results = dir.join(format!("bench-remote-{rate}.json"));
    let _ = std::fs::remove_file(&results);
    let exe = std::env::current_exe().map_err(|e| fail(e.to_string()))?;
    let places = serde_json::to_string(places).map_err(|e| fail(e.to_string()))?;
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", &net.host_names().0])
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .args(["--inner-rate", &rate.to_string(), "--places", &places])
        .arg("--results")
        .arg(&results)
        .status()
        .map_err(|e| fail(format!("ip netns exec: {e}")))?;
    let text = std::fs::read_to_string(&results).map_err(|e| {
        fail(format!(
            "the run at {} ({status}) wrote no results: {e}",
            rate_name(rate)
        ))
    })?;
    serde_json::from_str(&text).map_err(|e| fail(format!("{}: {e}", results.display())))
}

fn rate_name(rate: u64) -> String {
    match rate {
        0 => "unshaped".into(),
        r if r >= 1000 && r % 1000 == 0 => format!("{} Gbit/s", r / 1000),
        r => format!("{r} Mbit/s"),
    }
}

/// The file servers, one per disk namespace, killed when dropped.
struct FileServers(Vec<std::process::Child>);

impl FileServers {
    fn start(places: &Places, root: &Path) -> Result<FileServers, CliError> {
        let exe = std::env::current_exe().map_err(|e| CliError::Other(e.to_string()))?;
        let mut servers = FileServers(Vec::new());
        for (ns, address) in places.namespaces.iter().zip(&places.addresses) {
            let listen = format!("{address}:{FILES_PORT}");
            let child = std::process::Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(&exe)
                .args(["files-http", "--listen", &listen, "--root"])
                .arg(root)
                .stdin(std::process::Stdio::null())
                .spawn()
                .map_err(|e| CliError::Other(format!("starting the file server in {ns}: {e}")))?;
            servers.0.push(child);
            wait_listening(&listen)?;
        }
        Ok(servers)
    }
}

impl Drop for FileServers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits up to 10 s until `address` accepts connections.
fn wait_listening(address: &str) -> Result<(), CliError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(address).is_err() {
        if std::time::Instant::now() > deadline {
            return Err(CliError::Other(format!(
                "the file server at {address} did not listen within 10 s"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// The run inside the host's namespace at one link rate: the cluster up, its data loaded (once
/// per scale factor), the Snappy copies made (once), the engines started, the queries run.
async fn inner(dir: &Path, a: &RemoteBenchArgs, rate: u64) -> Result<(), CliError> {
    use crate::local::{OnOff, UpArgs, down, up};
    let places: Places = serde_json::from_str(a.places.as_deref().unwrap_or(""))
        .map_err(|e| CliError::Other(format!("--places: {e}")))?;
    let cdir = dir.join(format!("bench-remote-{}", a.disks));
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let args = UpArgs {
        memory_mib: a.memory_mib,
        netns: Some(crate::local::NetnsDisks {
            namespaces: places.namespaces.clone(),
            addresses: places
                .addresses
                .iter()
                .map(|ip| format!("{ip}:7000"))
                .collect(),
        }),
        tls: OnOff::On,
        no_serve: false,
        ..UpArgs::local(a.disks)
    };
    let config = up(&cdir, &args).await?;
    let result = async {
        let cluster = crate::common::connect(&cdir).await?;
        crate::bench_tpch::ensure_tpch(&cluster, &cdir, a.sf, Default::default()).await?;
        let layout = crate::bench_remote_peers::Layout::read(&cdir, &places.addresses, FILES_PORT)?;
        layout.make_snappy_copies(&cdir)?;
        let serve = config
            .serve
            .as_ref()
            .ok_or_else(|| CliError::Other("adisk up started no Flight SQL service".into()))?;
        let mut peers = Vec::new();
        for e in &a.engines {
            peers.push(Peer::start(*e, &a.python, a.peer_threads, serve, &layout, &cdir).await?);
        }
        let results = run_queries(a, rate, &places.host_interface, &mut peers).await?;
        let path = a
            .results
            .clone()
            .unwrap_or_else(|| dir.join("bench-remote.json"));
        let text =
            serde_json::to_string_pretty(&results).map_err(|e| CliError::Other(e.to_string()))?;
        std::fs::write(&path, text)
            .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
        print_rate(a, &results);
        Ok::<(), CliError>(())
    }
    .await;
    down(&cdir).await?;
    result
}

/// Bytes the host's link has received and sent so far.
fn counters(interface: &str) -> (u64, u64) {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{interface}/statistics/{name}"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    (read("rx_bytes"), read("tx_bytes"))
}

/// The queries, engines interleaved per query: one warm-up each, then the repeats in turn.
async fn run_queries(
    a: &RemoteBenchArgs,
    rate: u64,
    interface: &str,
    peers: &mut [Peer],
) -> Result<RateResults, CliError> {
    let queries: Vec<u32> = if a.queries.is_empty() {
        (1..=22).collect()
    } else {
        a.queries.clone()
    };
    let mut out = RateResults {
        rate_mbit: rate,
        queries: BTreeMap::new(),
    };
    for n in queries {
        let sql = adisk_host::sql::tpch::query(n)?;
        eprintln!("  Q{n:02} …");
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
        let mut cells: Vec<Cell> = vec![Cell::default(); peers.len()];
        let mut prints: Vec<Option<Fingerprint>> = vec![None; peers.len()];
        let runs = a.repeats.max(1) + usize::from(!a.no_warmup);
        for run in 0..runs {
            for (i, p) in peers.iter_mut().enumerate() {
                if cells[i].error.is_some() {
                    continue;
                }
                let before = counters(interface);
                match p.run(sql).await {
                    Ok((secs, print)) => {
                        let after = counters(interface);
                        cells[i].link_bytes = after.0.saturating_sub(before.0);
                        cells[i].sent_bytes = after.1.saturating_sub(before.1);
                        if run > 0 || a.no_warmup {
                            times[i].push(secs);
                        }
                        prints[i] = Some(print);
                    }
                    Err(e) => cells[i].error = Some(e),
                }
            }
        }
        judge(&prints, &mut cells, peers);
        let mut row = BTreeMap::new();
        for (i, mut cell) in cells.into_iter().enumerate() {
            if cell.error.is_none() && !times[i].is_empty() {
                cell.secs = Some(median(&mut times[i]));
            }
            row.insert(peers[i].engine.name().to_string(), cell);
        }
        out.queries.insert(n, row);
    }
    Ok(out)
}

/// Marks every engine whose answer differs from the first engine's that answered.
fn judge(prints: &[Option<Fingerprint>], cells: &mut [Cell], peers: &[Peer]) {
    let reference = prints.iter().enumerate().find_map(|(i, p)| {
        p.as_ref()
            .filter(|_| cells[i].error.is_none())
            .map(|p| (i, p))
    });
    let Some((r, reference)) = reference else {
        return;
    };
    for (i, p) in prints.iter().enumerate() {
        if let Some(p) = p
            && cells[i].error.is_none()
            && let Err(why) = p.agrees(reference)
        {
            cells[i].error = Some(format!(
                "wrong answer: {why} (against {})",
                peers[r].engine.name()
            ));
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One rate's table: per query each engine's median time and what its link received.
fn print_rate(a: &RemoteBenchArgs, r: &RateResults) {
    let names: Vec<&str> = a.engines.iter().map(|e| e.name()).collect();
    println!(
        "\nadisk bench remote: SF {} on {} disks, host link {}, median of {}{}",
        a.sf,
        a.disks,
        rate_name(r.rate_mbit),
        a.repeats.max(1),
        if a.no_warmup {
            ", no warm-up"
        } else {
            " after a warm-up"
        }
    );
    println!(
        "time: median wall seconds at the client; in / out: bytes the host's link received and sent in the last run"
    );
    let mut head = format!("{:<6}", "query");
    for n in &names {
        head += &format!(" {:>16} {:>10} {:>10}", format!("{n} s"), "in", "out");
    }
    println!("{head}");
    for (q, row) in &r.queries {
        let mut line = format!("Q{q:02}   ");
        for n in &names {
            let c = row.get(*n).cloned().unwrap_or_default();
            let t = c.secs.map_or("error".into(), |s| format!("{s:.3}"));
            line += &format!(
                " {t:>16} {:>10} {:>10}",
                adisk_core::stats::human_bytes(c.link_bytes),
                adisk_core::stats::human_bytes(c.sent_bytes)
            );
        }
        println!("{line}");
    }
    let totals = totals(r, &names);
    let mut line = format!("{:<6}", "total");
    for (t, answered) in &totals {
        line += &format!(
            " {:>16} {:>10} {:>10}",
            format!("{t:.2} ({answered})"),
            "",
            ""
        );
    }
    println!("{line}");
    print_local_ratio(r);
    for (q, row) in &r.queries {
        for (n, c) in row {
            if let Some(e) = &c.error {
                println!("Q{q:02} {n}: {e}");
            }
        }
    }
}

/// ActiveDisk's times over DuckDB's on local files (when both ran): the total's ratio and the
/// queries more than 1.5× slower.
fn print_local_ratio(r: &RateResults) {
    let (ours, local) = (Engine::Adisk.name(), Engine::DuckdbLocal.name());
    let pairs: Vec<(u32, f64, f64)> = r
        .queries
        .iter()
        .filter_map(|(q, row)| Some((*q, row.get(ours)?.secs?, row.get(local)?.secs?)))
        .collect();
    let (a, d): (f64, f64) = pairs
        .iter()
        .fold((0.0, 0.0), |(a, d), p| (a + p.1, d + p.2));
    if pairs.is_empty() || d <= 0.0 {
        return;
    }
    let slow: Vec<String> = pairs
        .iter()
        .filter(|(_, a, d)| *a > 1.5 * d)
        .map(|(q, a, d)| format!("Q{q} {:.2}×", a / d))
        .collect();
    println!(
        "{ours} ÷ {local}: {:.2}× over the {} queries both answered; above 1.5×: {}",
        a / d,
        pairs.len(),
        if slow.is_empty() {
            "none".into()
        } else {
            slow.join(", ")
        }
    );
}

/// Per engine: the total of its medians and how many queries it answered.
fn totals(r: &RateResults, names: &[&str]) -> Vec<(f64, usize)> {
    names
        .iter()
        .map(|n| {
            let secs: Vec<f64> = r
                .queries
                .values()
                .filter_map(|row| row.get(*n).and_then(|c| c.secs))
                .collect();
            (secs.iter().sum(), secs.len())
        })
        .collect()
}

/// The summary over rates, the results as JSON and the plot.
fn summarize(a: &RemoteBenchArgs, all: &[RateResults], dir: &Path) -> Result<(), CliError> {
    let names: Vec<&str> = a.engines.iter().map(|e| e.name()).collect();
    println!("\nTotals over the queries each engine answered (s), and each ÷ ActiveDisk's:");
    print!("{:<14}", "host link");
    for n in &names {
        print!(" {n:>22}");
    }
    println!();
    let mut series: Vec<adisk_sim::svg::Series> = names
        .iter()
        .map(|n| adisk_sim::svg::Series {
            label: n.to_string(),
            points: Vec::new(),
        })
        .collect();
    let mut wrong = 0;
    for r in all {
        let totals = totals(r, &names);
        let base = names
            .iter()
            .position(|n| *n == Engine::Adisk.name())
            .map(|i| totals[i].0);
        print!("{:<14}", rate_name(r.rate_mbit));
        for (i, (t, answered)) in totals.iter().enumerate() {
            let ratio = base
                .filter(|b| *b > 0.0)
                .map_or(String::new(), |b| format!(" {:.1}×", t / b));
            print!(" {:>22}", format!("{t:.2}{ratio} ({answered})"));
            series[i].points.push((rate_name(r.rate_mbit), *t));
        }
        println!();
        wrong += r
            .queries
            .values()
            .flat_map(|row| row.values())
            .filter(|c| {
                c.error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("wrong answer"))
            })
            .count();
    }
    let plot = a
        .plot
        .clone()
        .unwrap_or_else(|| dir.join(format!("bench-remote-sf{}.svg", a.sf)));
    let title = format!(
        "TPC-H SF {} on {} disks: total of the 22 queries against the host link",
        a.sf, a.disks
    );
    let svg = adisk_sim::svg::line_chart(&title, "host link", "total time, s (log)", &series, true);
    let json = plot.with_extension("json");
    let text = serde_json::to_string_pretty(all).map_err(|e| CliError::Other(e.to_string()))?;
    std::fs::write(&plot, svg)
        .and_then(|()| std::fs::write(&json, text))
        .map_err(|e| CliError::Other(format!("{}: {e}", plot.display())))?;
    println!("plot: {}; results: {}", plot.display(), json.display());
    match wrong {
        0 => Ok(()),
        n => Err(CliError::Other(format!(
            "bench remote: {n} wrong answers (see above)"
        ))),
    }
}
