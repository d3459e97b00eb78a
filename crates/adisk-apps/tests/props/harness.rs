//! The suite's machinery: in-process clusters (one per shape, reused by every case), the
//! proptest runner with its case counts and seeds, and reading a table back at the host.
use adisk_core::builder::{self, JobBuilder};
use adisk_core::config::{ClusterConfig, ClusterSection, DiskConfig, ExchangeMode};
use adisk_core::protocol::Sink;
use adisk_disk::{DiskNode, DiskNodeConfig};
use adisk_diskos::DiskOsConfig;
use adisk_host::Cluster;
use arrow::array::RecordBatch;
use futures::StreamExt;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Stream buffer of every disk, KiB (as the applications' tests run them).
const BUFFER_KIB: u64 = 64;
/// Buffers per stream of every disk.
const BUFFERS_PER_STREAM: u32 = 2;
/// Longest one case may take before it counts as a hang.
const CASE_TIMEOUT: Duration = Duration::from_secs(240);

/// A cluster's shape: its disks and each disk's memory, and how exchanges travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Shape {
    /// Disks.
    pub disks: u32,
    /// Memory of each disk, MiB.
    pub memory_mib: u64,
    /// Exchanges through the host's relay (uysal's front-end-only communication) rather
    /// than disk to disk.
    pub via_host: bool,
}

impl Shape {
    /// `disks` of `memory_mib` each, exchanging disk to disk.
    pub const fn new(disks: u32, memory_mib: u64) -> Self {
        Shape {
            disks,
            memory_mib,
            via_host: false,
        }
    }
}

/// The clusters cases run on: 1–5 disks, 8–64 MiB each.
pub const SHAPES: [Shape; 5] = [
    Shape::new(1, 8),
    Shape::new(2, 16),
    Shape::new(3, 8),
    Shape::new(5, 12),
    Shape::new(4, 64),
];

/// One running cluster: its disks (served on the pool's runtime) and the host's client.
pub struct Disks {
    /// The host's client.
    pub cluster: Cluster,
    /// Each disk's data directory, by disk id.
    pub dirs: Vec<tempfile::TempDir>,
    /// Held while a case runs: one case at a time on one cluster.
    busy: Mutex<()>,
}

/// The runtime every cluster is served on, and the clusters by shape.
struct Pool {
    runtime: tokio::runtime::Runtime,
    /// By (disks, memory).
    clusters: Mutex<BTreeMap<(u32, u64), Arc<Disks>>>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        remove_stale_directories();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        Pool {
            runtime,
            clusters: Mutex::new(BTreeMap::new()),
        }
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The directories' prefix: `adisk-props-PID-` under the system's temporary directory.
fn prefix(pid: u32) -> String {
    format!("adisk-props-{pid}-")
}

/// Statics are never dropped, so the disks' directories outlive the test process: remove
/// those of earlier runs whose process is gone.
fn remove_stale_directories() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("adisk-props-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if pid != std::process::id() && !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Starts a cluster of `shape`: its disk nodes on 127.0.0.1, serving for the rest of the
/// process, each with the applications' disklets.
async fn start(shape: Shape) -> Disks {
    let (mut configs, mut dirs) = (Vec::new(), Vec::new());
    for id in 0..shape.disks {
        let dir = tempfile::Builder::new()
            .prefix(&prefix(std::process::id()))
            .tempdir()
            .expect("a temporary directory");
        let os = DiskOsConfig::new(
            id,
            shape.memory_mib << 20,
            BUFFER_KIB << 10,
            BUFFERS_PER_STREAM,
        );
        let node = DiskNode::bind(DiskNodeConfig::local(dir.path().to_path_buf(), os))
            .await
            .expect("a disk node binds 127.0.0.1:0");
        node.diskos()
            .set_app_disklets(Arc::new(adisk_apps::Disklets));
        configs.push(DiskConfig {
            id,
            address: node.address().to_string(),
            dir: None,
            memory_mib: shape.memory_mib,
            buffer_kib: BUFFER_KIB,
            buffers_per_stream: BUFFERS_PER_STREAM,
            read_mbps: 0,
            compression: Default::default(),
            pid: None,
            group: None,
            metrics_address: None,
            cpus: None,
            cpu_speed: None,
        });
        tokio::spawn(node.serve(std::future::pending::<()>()));
        dirs.push(dir);
    }
    let config = ClusterConfig {
        cluster: ClusterSection {
            name: format!("props-{}x{}", shape.disks, shape.memory_mib),
            host_link_mbps: 0,
            exchange: Default::default(),
            key_file: None,
            disk_timeout_ms: adisk_core::config::DEFAULT_DISK_TIMEOUT_MS,
            router_mbps: 0,
            costs: None,
            tls: None,
        },
        disks: configs,
        serve: None,
    };
    let cluster = Cluster::connect(config)
        .await
        .expect("the host connects to its disks");
    Disks {
        cluster,
        dirs,
        busy: Mutex::new(()),
    }
}

/// Runs one case on the cluster of `shape` (started on first use) with its exchange mode,
/// alone on that cluster, within [`CASE_TIMEOUT`]: past it the case fails as a hang.
pub fn on_cluster<F, Fut>(shape: Shape, case: F) -> Result<(), TestCaseError>
where
    F: FnOnce(Arc<Disks>) -> Fut,
    Fut: std::future::Future<Output = Result<(), TestCaseError>>,
{
    let pool = pool();
    let disks = {
        let mut clusters = lock(&pool.clusters);
        let key = (shape.disks, shape.memory_mib);
        match clusters.get(&key) {
            Some(d) => d.clone(),
            None => {
                let d = Arc::new(pool.runtime.block_on(start(shape)));
                clusters.insert(key, d.clone());
                d
            }
        }
    };
    let _busy = lock(&disks.busy);
    disks.cluster.set_exchange_mode(if shape.via_host {
        ExchangeMode::ViaHost
    } else {
        ExchangeMode::Direct
    });
    let run = case(disks.clone());
    let outcome = pool
        .runtime
        .block_on(async move { tokio::time::timeout(CASE_TIMEOUT, run).await });
    match outcome {
        Ok(result) => result,
        Err(_) => Err(TestCaseError::fail(format!(
            "hang: the case did not finish within {CASE_TIMEOUT:?}"
        ))),
    }
}

/// A number from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Cases that ended in a documented refusal instead of a result, by property.
static REFUSED: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Counts a case of property `name` the application refused as documented (printed with
/// the property's summary, so that a suite refusing most of its cases shows).
pub fn refused(name: &'static str) {
    *lock(&REFUSED).entry(name).or_insert(0) += 1;
}

/// Runs property `name` over `strategy`: `ADISK_PROP_CASES` cases (default `ci_cases`) from
/// seed `ADISK_PROP_SEED` (default 0) mixed with the name, so that each property has its own
/// fixed stream and a seed reproduces a run. Shrinks a failure for at most 2 minutes.
pub fn check<S>(
    name: &str,
    ci_cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: proptest::strategy::Strategy,
    S::Value: std::fmt::Debug,
{
    let cases = env_u64("ADISK_PROP_CASES", u64::from(ci_cases)) as u32;
    let seed = env_u64("ADISK_PROP_SEED", 0);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let named = crc32fast::hash(name.as_bytes());
    seed_bytes[8..12].copy_from_slice(&named.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_time: 120_000,
        max_global_rejects: cases.saturating_mul(4).max(64),
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let started = Instant::now();
    if let Err(e) = runner.run(&strategy, test) {
        panic!("property {name} failed (ADISK_PROP_SEED={seed}, {cases} cases): {e}");
    }
    let refusals = lock(&REFUSED).get(name).copied().unwrap_or(0);
    eprintln!(
        "property {name}: {cases} cases in {:.1} s, {refusals} documented refusals (ADISK_PROP_SEED={seed})",
        started.elapsed().as_secs_f64()
    );
}

/// Every partition of `table` read back at the host: (partition, disk, its batches in
/// stored order), by partition number. An absent table reads as no partitions.
pub async fn read_table(
    cluster: &Cluster,
    table: &str,
) -> Result<Vec<(u32, u32, Vec<RecordBatch>)>, String> {
    let catalog = cluster.catalog().await.map_err(|e| e.to_string())?;
    let Some(entry) = catalog.tables.get(table) else {
        return Ok(Vec::new());
    };
    let reads = entry
        .placements
        .iter()
        .map(|(d, p)| {
            let source = builder::table(table, vec![]);
            let spec = JobBuilder::chain("props-read", source, vec![], Sink::Host)
                .program("props")
                .reading(Some(vec![p.partition]))
                .build()
                .map_err(|e| format!("reading {table}: {e}"))?;
            Ok(async move {
                let mut stream = cluster.start(*d, &spec).await.map_err(|e| e.to_string())?;
                let mut batches = Vec::new();
                while let Some(b) = stream.next().await {
                    batches.push(b.map_err(|e| format!("reading {table}: {e}"))?);
                }
                Ok::<_, String>((p.partition, *d, batches))
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut parts = futures::future::try_join_all(reads).await?;
    parts.sort_by_key(|(p, _, _)| *p);
    Ok(parts)
}

/// Drops every table whose name starts with `prefix`.
pub async fn drop_tables(cluster: &Cluster, prefix: &str) -> Result<(), String> {
    let catalog = cluster.catalog().await.map_err(|e| e.to_string())?;
    let names = catalog.tables.keys().chain(catalog.incomplete.keys());
    for name in names.filter(|n| n.starts_with(prefix)) {
        cluster
            .drop_table(name)
            .await
            .map_err(|e| format!("dropping {name}: {e}"))?;
    }
    Ok(())
}

/// The tables whose name starts with `prefix`.
pub async fn tables_named(cluster: &Cluster, prefix: &str) -> Result<Vec<String>, String> {
    let catalog = cluster.catalog().await.map_err(|e| e.to_string())?;
    Ok(catalog
        .tables
        .keys()
        .chain(catalog.incomplete.keys())
        .filter(|n| n.starts_with(prefix))
        .cloned()
        .collect())
}

/// A failed case with `context`.
pub fn fail(context: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(context.to_string())
}

/// A multiset of rows as an order-independent fingerprint: (rows, Σ h₁, Σ h₂) over two
/// independent 64-bit hashes of each row's bytes. Two different multisets agree with
/// probability about 2⁻¹²⁸ per comparison.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fingerprint {
    /// Rows.
    pub rows: u64,
    /// Σ of the first hash (wrapping).
    pub first: u64,
    /// Σ of the second hash (wrapping).
    pub second: u64,
}

impl Fingerprint {
    /// Adds one row, given as 32-bit words.
    pub fn add(&mut self, words: &[u32]) {
        let (mut a, mut b) = (0x243f_6a88_85a3_08d3u64, 0x1319_8a2e_0370_7344u64);
        for w in words {
            a = mix(a ^ u64::from(*w));
            b = mix(b.wrapping_add(u64::from(*w)).rotate_left(17));
        }
        self.rows += 1;
        self.first = self.first.wrapping_add(a);
        self.second = self.second.wrapping_add(b);
    }
}

/// SplitMix64's finalizer.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Loads `table` with the rows `0..rows` as the applications' loads split them: disk `d`
/// gets `[d·rows/n, (d+1)·rows/n)`, each generated by `batch(range)` in batches of 4096.
pub async fn load_rows(
    cluster: &Cluster,
    table: &str,
    schema: arrow::datatypes::SchemaRef,
    rows: u64,
    batch: impl Fn(std::ops::Range<u64>) -> RecordBatch + Clone + Send + Sync + 'static,
) -> Result<(), String> {
    let n = u64::from(cluster.disk_count());
    let generators = (0..n)
        .map(|d| {
            let (start, end) = (d * rows / n, (d + 1) * rows / n);
            let batch = batch.clone();
            Box::new(move |_| {
                let chunks = (start..end)
                    .step_by(4096)
                    .map(move |s| Ok(batch(s..(s + 4096).min(end))));
                Box::new(chunks) as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(cluster, table, schema, generators, |_| {})
        .await
        .map(|_| ())
        .map_err(|e| format!("loading {table}: {e}"))
}

/// Asserts that the tables named with `prefix` are exactly `expected`, plus any of
/// `optional` (a run leaves no intermediate table behind).
pub async fn only_tables(
    cluster: &Cluster,
    prefix: &str,
    expected: &[&str],
    optional: &[&str],
) -> Result<(), TestCaseError> {
    let mut got = tables_named(cluster, prefix).await.map_err(fail)?;
    got.retain(|t| !optional.contains(&t.as_str()));
    got.sort();
    let mut want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    want.sort();
    if got != want {
        return Err(fail(format!(
            "tables after the run: {got:?} (besides {optional:?}), expected {want:?}"
        )));
    }
    Ok(())
}

/// Asserts that no disk keeps a directory of a table named with `prefix` (every table of the
/// case dropped: nothing of them may remain on disk, empty directories included) and that
/// no load is left staged.
pub fn no_leftovers(disks: &Disks, prefix: &str) -> Result<(), TestCaseError> {
    for (d, dir) in disks.dirs.iter().enumerate() {
        let tables = dir.path().join("tables");
        let left: Vec<String> = std::fs::read_dir(&tables)
            .map_err(|e| fail(format!("listing {}: {e}", tables.display())))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(prefix))
            .collect();
        if !left.is_empty() {
            return Err(fail(format!("disk {d} keeps table directories {left:?}")));
        }
        let staged = std::fs::read_dir(dir.path().join("staging"))
            .map(|entries| entries.count())
            .unwrap_or(0);
        if staged > 0 {
            return Err(fail(format!("disk {d} keeps {staged} staged entries")));
        }
    }
    Ok(())
}

/// Drops the case's tables (those named with `prefix`) and checks nothing of them remains.
pub async fn finish(disks: &Disks, prefix: &str) -> Result<(), TestCaseError> {
    drop_tables(&disks.cluster, prefix).await.map_err(fail)?;
    no_leftovers(disks, prefix)
}

/// Asserts that every disk job of `report` stayed within its grants: memory peak ≤ memory
/// granted, temporary space peak ≤ temporary space granted.
pub fn within_grants(report: &adisk_apps::report::Report) -> Result<(), TestCaseError> {
    for phase in &report.phases {
        for s in &phase.disks {
            let memory = s.memory_peak_bytes > s.memory_granted_bytes;
            let temp = s.temp_peak_bytes > s.temp_granted_bytes;
            if memory || temp {
                return Err(fail(format!(
                    "{}: job {} at disk {} peaked at {} bytes of memory ({} granted) and {} bytes of temporary space ({} granted)",
                    phase.name,
                    s.job_id,
                    s.disk_id,
                    s.memory_peak_bytes,
                    s.memory_granted_bytes,
                    s.temp_peak_bytes,
                    s.temp_granted_bytes
                )));
            }
        }
    }
    Ok(())
}
