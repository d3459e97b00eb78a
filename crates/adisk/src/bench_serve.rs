//! `adisk bench serve`: the Flight SQL service against the same queries run in this process.
//!
//! One local cluster with TPC-H at `--sf` and the service `adisk up` starts. For each query
//! (Q6 short, Q1 long) and each number of concurrent clients, for `--seconds`: every client
//! runs the query in a loop, over Flight SQL (its own connection, logged in) or in process
//! (its own `SqlEngine` over one shared `Cluster`, as a library user would). Reported: queries
//! per second, p50 and p99 latency, and Flight SQL ÷ in-process at p50; then, per query, one
//! client of each path taking turns query by query (the ratio least moved by the machine's
//! drift between measurements). Then one large result
//! (`SELECT * FROM lineitem`, every column) fetched through one endpoint, from per-disk
//! endpoints and in process: Arrow MB/s.
use crate::common::CliError;
use crate::local::{UpArgs, down, up};
use adisk_core::tls::ClientTls;
use adisk_host::Cluster;
use adisk_host::sql::{SqlEngine, SqlOptions, tpch};
use adisk_server::client::Client;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `adisk bench serve` arguments.
#[derive(clap::Args, Debug)]
pub struct ServeBenchArgs {
    /// TPC-H scale factor.
    #[arg(long, default_value_t = 0.1)]
    pub sf: f64,
    /// Disks.
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// Concurrent clients to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    pub clients: Vec<usize>,
    /// TPC-H queries to measure.
    #[arg(long, value_delimiter = ',', default_value = "6,1")]
    pub queries: Vec<u32>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
}

/// Latencies of one measurement, and its length.
struct Run {
    latencies: Vec<f64>,
    elapsed: f64,
}

impl Run {
    fn quantile(&self, q: f64) -> f64 {
        let mut v = self.latencies.clone();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    }
    fn qps(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed
    }
}

/// Runs `clients` loops of `one` at once (each runs until its own deadline); every latency.
async fn measure<F, Fut>(clients: usize, one: F) -> Result<Run, CliError>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<f64>, CliError>> + Send + 'static,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients).map(|i| tokio::spawn(one(i))).collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.map_err(|e| CliError::Other(e.to_string()))??);
    }
    Ok(Run {
        latencies,
        elapsed: started.elapsed().as_secs_f64(),
    })
}

pub async fn run(dir: &Path, a: ServeBenchArgs) -> Result<(), CliError> {
    let cdir = dir.join(format!("bench-serve-{}", a.disks));
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let args = UpArgs {
        no_serve: false,
        ..UpArgs::local(a.disks)
    };
    let config = up(&cdir, &args).await?;
    let result = bench(&cdir, &config, &a).await;
    down(&cdir).await?;
    result
}

async fn bench(
    cdir: &Path,
    config: &adisk_core::config::ClusterConfig,
    a: &ServeBenchArgs,
) -> Result<(), CliError> {
    let serve = config
        .serve
        .clone()
        .ok_or_else(|| CliError::Other("the cluster has no Flight SQL service".into()))?;
    let (url, tls) =
        adisk_server::client::served(&serve).map_err(|e| CliError::Other(e.to_string()))?;
    let password_file = serve
        .admin_password_file
        .ok_or_else(|| CliError::Other("no admin password file".into()))?;
    let password = std::fs::read_to_string(&password_file)
        .map_err(|e| CliError::Other(e.to_string()))?
        .trim()
        .to_string();
    let cluster = Arc::new(crate::common::connect(cdir).await?);
    eprintln!("loading TPC-H SF {} …", a.sf);
    crate::output::load_tpch(
        &cluster,
        &adisk_host::load::TpchLoad {
            sf: a.sf,
            partitions_per_disk: 1,
            row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS,
            tables: vec![],
            replicas: 1,
            disks: vec![],
        },
    )
    .await?;
    println!(
        "adisk bench serve: TPC-H SF {} on {} disks, {} s per measurement; Flight SQL at {url} vs in process",
        a.sf, a.disks, a.seconds
    );
    println!(
        "{:<6} {:>7} {:>11} {:>9} {:>9} {:>9} {:>15}",
        "query", "clients", "path", "qps", "p50_ms", "p99_ms", "flight/in-proc"
    );
    for q in &a.queries {
        let sql: &'static str = tpch::query(*q)?;
        for &n in &a.clients {
            let deadline = Duration::from_secs(a.seconds);
            let row =
                PathsRow::measure(&cluster, (&url, &tls), &password, sql, (n, deadline)).await?;
            row.print(*q, n);
        }
        interleaved(&cluster, (&url, &tls), &password, sql, *q, a.seconds).await?;
    }
    transfer(&cluster).await
}

/// One query at `n` clients on the three paths: through the Flight SQL service, in process
/// with an engine per client, in process with an engine per query.
struct PathsRow {
    flight: Run,
    local: Run,
    fresh: Run,
}

impl PathsRow {
    /// Runs `sql` at `n` clients for `deadline` on each path in turn.
    async fn measure(
        cluster: &Arc<Cluster>,
        (url, tls): (&str, &ClientTls),
        password: &str,
        sql: &'static str,
        (n, deadline): (usize, Duration),
    ) -> Result<PathsRow, CliError> {
        let (url2, pw, tls2) = (url.to_string(), password.to_string(), tls.clone());
        let flight = measure(n, move |_| {
            let (url, pw, tls) = (url2.clone(), pw.clone(), tls2.clone());
            async move {
                let mut c = Client::connect(&url, "admin", &pw, &tls)
                    .await
                    .map_err(|e| CliError::Other(e.to_string()))?;
                let (start, mut lat) = (Instant::now(), Vec::new());
                while lat.is_empty() || start.elapsed() < deadline {
                    let t = Instant::now();
                    c.query(sql)
                        .await
                        .map_err(|e| CliError::Other(e.to_string()))?;
                    lat.push(t.elapsed().as_secs_f64());
                }
                Ok(lat)
            }
        })
        .await?;
        let cl = cluster.clone();
        let local = measure(n, move |_| {
            let cl = cl.clone();
            async move {
                let engine = SqlEngine::new(cl, SqlOptions::default()).await?;
                let (start, mut lat) = (Instant::now(), Vec::new());
                while lat.is_empty() || start.elapsed() < deadline {
                    let t = Instant::now();
                    engine.query(sql).await?;
                    lat.push(t.elapsed().as_secs_f64());
                }
                Ok(lat)
            }
        })
        .await?;
        let cl = cluster.clone();
        let fresh = measure(n, move |_| {
            let cl = cl.clone();
            async move {
                let (start, mut lat) = (Instant::now(), Vec::new());
                while lat.is_empty() || start.elapsed() < deadline {
                    let t = Instant::now();
                    let engine = SqlEngine::new(cl.clone(), SqlOptions::default()).await?;
                    engine.query(sql).await?;
                    lat.push(t.elapsed().as_secs_f64());
                }
                Ok(lat)
            }
        })
        .await?;
        Ok(PathsRow {
            flight,
            local,
            fresh,
        })
    }

    /// The three lines of query `q` at `n` clients.
    fn print(&self, q: u32, n: usize) {
        let (flight, local, fresh) = (&self.flight, &self.local, &self.fresh);
        for (path, r) in [
            ("flight sql", &flight),
            ("in process", &local),
            ("in-proc/new", &fresh),
        ] {
            println!(
                "Q{:<5} {:>7} {:>11} {:>9.2} {:>9.1} {:>9.1} {:>15}",
                q,
                n,
                path,
                r.qps(),
                r.quantile(0.5) * 1e3,
                r.quantile(0.99) * 1e3,
                if path == "flight sql" {
                    format!("{:.3}", flight.quantile(0.5) / local.quantile(0.5))
                } else {
                    String::new()
                }
            );
        }
    }
}

/// One client of each path taking turns query by query for `seconds`, so that both see the
/// same moments of a noisy machine: p50 of each and their ratio.
async fn interleaved(
    cluster: &Arc<Cluster>,
    (url, tls): (&str, &ClientTls),
    password: &str,
    sql: &str,
    q: u32,
    seconds: u64,
) -> Result<(), CliError> {
    let mut client = Client::connect(url, "admin", password, tls)
        .await
        .map_err(|e| CliError::Other(e.to_string()))?;
    let engine = SqlEngine::new(cluster.clone(), SqlOptions::default()).await?;
    let (start, mut flight, mut local) = (Instant::now(), Vec::new(), Vec::new());
    while flight.is_empty() || start.elapsed() < Duration::from_secs(seconds) {
        let t = Instant::now();
        client
            .query(sql)
            .await
            .map_err(|e| CliError::Other(e.to_string()))?;
        flight.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        engine.query(sql).await?;
        local.push(t.elapsed().as_secs_f64());
    }
    let p50 = |v: Vec<f64>| {
        Run {
            latencies: v,
            elapsed: 1.0,
        }
        .quantile(0.5)
    };
    let pairs = flight.len();
    let (f, l) = (p50(flight), p50(local));
    println!(
        "Q{q:<5} {:>7} {:>11} flight sql p50 {:.1} ms, in process p50 {:.1} ms over {pairs} alternating pairs: {:.3}",
        1,
        "interleaved",
        f * 1e3,
        l * 1e3,
        f / l
    );
    Ok(())
}

/// A large result three ways, side by side in each of 3 rounds: through one endpoint at a
/// service (the host runs the query and streams it), from per-disk endpoints (the client reads
/// every disk at once), and in process. Arrow MB/s, medians of 3. Both services run in this
/// process over the same cluster, differing only in `Endpoints::per_disk`.
async fn transfer(cluster: &Arc<Cluster>) -> Result<(), CliError> {
    let sql = "SELECT * FROM lineitem";
    let (one, tls) = local_service(cluster, false).await?;
    let (per_disk, _) = local_service(cluster, true).await?;
    let other = |e: adisk_server::client::ClientError| CliError::Other(e.to_string());
    let mut one_c = Client::connect(&one, "", "", &tls).await.map_err(other)?;
    let mut disk_c = Client::connect(&per_disk, "", "", &tls)
        .await
        .map_err(other)?;
    let engine = SqlEngine::new(cluster.clone(), SqlOptions::default()).await?;
    let (mut t_one, mut t_disks, mut t_local) = (Vec::new(), Vec::new(), Vec::new());
    let (mut bytes, mut bytes_disks) = (0, 0);
    for _ in 0..3 {
        let t = Instant::now();
        let (_, batches) = one_c.query(sql).await.map_err(other)?;
        t_one.push(t.elapsed().as_secs_f64());
        bytes = arrow_bytes(&batches);
        let t = Instant::now();
        let (_, batches) = disk_c.query(sql).await.map_err(other)?;
        t_disks.push(t.elapsed().as_secs_f64());
        bytes_disks = arrow_bytes(&batches);
        let t = Instant::now();
        engine.query(sql).await?;
        t_local.push(t.elapsed().as_secs_f64());
    }
    if bytes != bytes_disks {
        return Err(CliError::Other(format!(
            "per-disk endpoints returned {bytes_disks} bytes, one endpoint {bytes}"
        )));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (o, d, l) = (median(t_one), median(t_disks), median(t_local));
    let mb = bytes as f64 / 1e6;
    println!("large result `{sql}`: {mb:.1} MB of Arrow, medians of 3");
    println!(
        "  one endpoint (through the host)  {:>8.1} MB/s  {o:.2} s",
        mb / o
    );
    println!(
        "  per-disk endpoints ({} disks)     {:>8.1} MB/s  {d:.2} s  ({:.2}x one endpoint)",
        cluster.disk_count(),
        mb / d,
        o / d
    );
    println!(
        "  in process (no Flight SQL)       {:>8.1} MB/s  {l:.2} s",
        mb / l
    );
    Ok(())
}

fn arrow_bytes(batches: &[arrow::array::RecordBatch]) -> u64 {
    batches
        .iter()
        .map(adisk_core::stats::batch_bytes)
        .sum::<u64>()
}

/// A Flight SQL service in this process over `cluster` (open access, loopback; TLS with the
/// host's certificate when the cluster's links use TLS): its URL and its clients' TLS.
async fn local_service(
    cluster: &Arc<Cluster>,
    per_disk: bool,
) -> Result<(String, ClientTls), CliError> {
    let other = |e: adisk_core::tls::TlsError| CliError::Other(e.to_string());
    let files = cluster.config().cluster.tls.clone();
    let service_tls = files
        .as_ref()
        .map(|t| adisk_core::tls::ServiceTls::load(&t.cert, &t.key, None))
        .transpose()
        .map_err(other)?;
    let client_tls = files
        .as_ref()
        .map(|t| ClientTls::load(Some(&t.ca), None))
        .transpose()
        .map_err(other)?
        .unwrap_or_default();
    use adisk_server::{Access, Admission, Endpoints, SqlService};
    let service = SqlService::new(
        cluster.clone(),
        SqlOptions::default(),
        Access::Open,
        Admission {
            running: 4,
            queued: 4,
        },
        Endpoints {
            per_disk,
            ..Endpoints::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CliError::Other(e.to_string()))?;
    let address = listener
        .local_addr()
        .map_err(|e| CliError::Other(e.to_string()))?;
    let scheme = if service_tls.is_some() {
        "grpc+tls"
    } else {
        "grpc"
    };
    tokio::spawn(async move {
        adisk_server::serve(
            service,
            listener,
            service_tls.as_ref(),
            futures::future::pending(),
        )
        .await
    });
    Ok((format!("{scheme}://{address}"), client_tls))
}
