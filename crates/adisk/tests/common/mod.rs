//! Helpers shared by the multi-process tests: run the `adisk` binary, expect success or a clean failure.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `adisk --dir DIR ARGS…` (ignoring `$ADISK_HOME`).
pub fn adisk(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_adisk"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env_remove("ADISK_HOME")
        .output()
        .expect("adisk runs")
}

/// Runs adisk and expects success; returns standard output.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let out = adisk(dir, args);
    assert!(
        out.status.success(),
        "adisk {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Runs adisk and expects a failure without a panic; returns standard error.
#[allow(dead_code)]
pub fn fails(dir: &Path, args: &[&str]) -> String {
    let out = adisk(dir, args);
    assert!(
        !out.status.success(),
        "adisk {args:?} should fail but printed:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "adisk {args:?} panicked:\n{err}");
    err
}

/// The DuckDB oracle: runs `sql` over the cluster's Parquet files (`tests/oracle/duckdb_query.py`);
/// rows as JSON values.
#[allow(dead_code)] // not every test binary uses it
pub fn duckdb(dir: &Path, sql: &str) -> Vec<Vec<serde_json::Value>> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/duckdb_query.py");
    let python = std::env::var("ADISK_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python)
        .arg(script)
        .arg(dir)
        .arg(sql)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "DuckDB oracle failed (pip install duckdb):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("oracle json")
}

/// Waits until `condition` holds, polling every 20 ms; fails the test naming `what` when it
/// has not held within `timeout` (tests wait on conditions, never on fixed sleeps).
#[allow(dead_code)] // not every test binary uses it
pub fn wait_until(what: &str, timeout: std::time::Duration, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether process `pid` has exited (gone, or a zombie nobody reaped yet).
#[allow(dead_code)]
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// The `[[disk]]` part of `cluster.toml` (without the Flight SQL service's `[serve]`).
fn disks_part(dir: &Path) -> String {
    let config = std::fs::read_to_string(dir.join("cluster.toml")).expect("cluster.toml");
    config
        .split("\n[serve]")
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The pids of the disk processes `adisk up` recorded in `cluster.toml`, in disk order.
#[allow(dead_code)]
pub fn disk_pids(dir: &Path) -> Vec<i32> {
    disks_part(dir)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pid"))
        .filter_map(|v| v.trim_start().strip_prefix('='))
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

/// `adisk status --format json` (disks that do not answer carry an `error`).
#[allow(dead_code)]
pub fn status_json(dir: &Path) -> serde_json::Value {
    let out = adisk(dir, &["status", "--format", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// The address of disk `d` in `cluster.toml`.
#[allow(dead_code)]
pub fn disk_address(dir: &Path, d: usize) -> String {
    let addresses: Vec<String> = disks_part(dir)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("address"))
        .filter_map(|v| v.trim_start().strip_prefix('='))
        .map(|v| v.trim().trim_matches('"').to_string())
        .collect();
    addresses[d].clone()
}

/// Waits until disk `d` (just killed) refuses connections: its process may still be exiting
/// (the thread-group leader turns zombie before the other threads release the socket).
#[allow(dead_code)]
pub fn wait_refused(dir: &Path, d: usize) {
    let address = disk_address(dir, d);
    wait_until(
        &format!("disk {d} at {address} to refuse connections"),
        std::time::Duration::from_secs(10),
        || std::net::TcpStream::connect(&address).is_err(),
    );
}

/// A local cluster of 4 disk processes with TPC-H at scale `sf` loaded with `replicas` copies
/// of every partition; stopped when dropped.
#[allow(dead_code)]
pub struct TpchCluster(tempfile::TempDir);

#[allow(dead_code)]
impl TpchCluster {
    /// Starts the disks and loads TPC-H.
    pub fn start(sf: &str, replicas: u32) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        ok(dir.path(), &["up", "--disks", "4"]);
        ok(
            dir.path(),
            &[
                "load",
                "tpch",
                "--sf",
                sf,
                "--replicas",
                &replicas.to_string(),
            ],
        );
        TpchCluster(dir)
    }
    /// The cluster's directory (`--dir`).
    pub fn dir(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for TpchCluster {
    fn drop(&mut self) {
        let _ = adisk(self.0.path(), &["down"]);
    }
}

/// `adisk tpch check` at SF 0.01 and `level`: all 22 answers must match the official ones.
#[allow(dead_code)]
pub fn check_tpch(dir: &Path, level: &str, what: &str) {
    let out = ok(dir, &["tpch", "check", "--sf", "0.01", "--offload", level]);
    assert!(
        out.contains("22 passed, 0 failed"),
        "{what}, offload {level}:\n{out}"
    );
}

/// Kills disk `d` with SIGKILL and waits until its port refuses connections.
#[allow(dead_code)]
pub fn kill_disk(dir: &Path, d: usize) {
    let pid = disk_pids(dir)[d];
    // SAFETY: signalling a disk process the calling test's cluster started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    wait_refused(dir, d);
}

/// A local cluster (`adisk up ARGS`) in a temporary directory, stopped when dropped.
#[allow(dead_code)]
pub struct Cluster(tempfile::TempDir);

#[allow(dead_code)]
impl Cluster {
    /// Starts the disks with `adisk up ARGS`.
    pub fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut up = vec!["up"];
        up.extend_from_slice(args);
        ok(dir.path(), &up);
        Cluster(dir)
    }
    /// The cluster's directory (`--dir`).
    pub fn dir(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = adisk(self.0.path(), &["down"]);
    }
}

/// Standard output parsed as JSON (panics, naming the text, if it is not).
#[allow(dead_code)]
pub fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

/// Asserts that every job of every phase of an application report stayed within its memory
/// grant; returns each disk's largest grant.
#[allow(dead_code)]
pub fn peaks_within_grants(report: &serde_json::Value) -> std::collections::BTreeMap<u64, u64> {
    let mut largest = std::collections::BTreeMap::new();
    for phase in report["phases"].as_array().expect("phases") {
        for d in phase["disks"].as_array().expect("disks") {
            let (grant, peak) = (
                d["memory_granted_bytes"].as_u64().expect("a grant"),
                d["memory_peak_bytes"].as_u64().expect("a peak"),
            );
            assert!(
                peak <= grant,
                "{}: disk {} peak {peak} > grant {grant}",
                phase["name"],
                d["disk_id"]
            );
            let g = largest
                .entry(d["disk_id"].as_u64().expect("a disk"))
                .or_insert(0);
            *g = grant.max(*g);
        }
    }
    largest
}

/// A kill trigger for [`killed_mid_run_fails_cleanly`]: some disk holds a grant over 4 MiB
/// (the first big phase of sort and join).
#[allow(dead_code)]
pub fn big_grant(status: &serde_json::Value) -> bool {
    status["disks"].as_array().is_some_and(|d| {
        d.iter()
            .any(|d| d["memory_granted_bytes"].as_u64().unwrap_or(0) > 4 << 20)
    })
}

/// A kill trigger for [`killed_mid_run_fails_cleanly`]: disk 2, the one to be killed, is
/// running a job of the application.
#[allow(dead_code)]
pub fn disk_2_busy(status: &serde_json::Value) -> bool {
    status["disks"].as_array().is_some_and(|d| {
        d.iter()
            .any(|d| d["disk_id"] == 2 && d["jobs_running"].as_u64().unwrap_or(0) > 0)
    })
}

/// Runs `adisk app ARGS`, kills disk 2 (SIGKILL) as soon as `status` satisfies `trigger`, and
/// checks that the run fails cleanly: it ends within 60 s with a typed error naming a disk and
/// no panic, and the live disks come back to no grant, job, inbox or temporary file, and hold
/// no table whose name contains `leftover` (the run's disk-resident output and runs).
#[allow(dead_code)]
pub fn killed_mid_run_fails_cleanly(
    c: &Cluster,
    args: &[&str],
    trigger: fn(&serde_json::Value) -> bool,
    leftover: Option<&str>,
) {
    let (out_path, err_path) = (c.dir().join("killed.out"), c.dir().join("killed.err"));
    let file = |p: &Path| std::fs::File::create(p).expect("output file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_adisk"))
        .arg("--dir")
        .arg(c.dir())
        .arg("app")
        .args(args)
        .env_remove("ADISK_HOME")
        .stdout(file(&out_path))
        .stderr(file(&err_path))
        .spawn()
        .expect("adisk runs");
    wait_until(
        &format!("adisk app {args:?} to reach its kill point"),
        std::time::Duration::from_secs(60),
        || trigger(&status_json(c.dir())),
    );
    kill_disk(c.dir(), 2);
    let mut status = None;
    wait_until(
        &format!("adisk app {args:?} to end after the kill"),
        std::time::Duration::from_secs(60),
        || {
            status = child.try_wait().expect("wait");
            status.is_some()
        },
    );
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        !status.expect("ended").success(),
        "{args:?} should fail:\n{}\n{err}",
        std::fs::read_to_string(&out_path).unwrap_or_default()
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("disk"), "{err}");
    wait_until(
        "live disks idle",
        std::time::Duration::from_secs(30),
        || {
            let s = status_json(c.dir());
            s["disks"].as_array().is_some_and(|disks| {
                disks.iter().filter(|d| d["disk_id"] != 2).all(|d| {
                    d["memory_granted_bytes"] == 0
                        && d["jobs_running"] == 0
                        && d["temp_files_bytes"] == 0
                        && d["exchange_inboxes"] == 0
                        && leftover.is_none_or(|l| !d["tables"].to_string().contains(l))
                })
            })
        },
    );
}

#[allow(dead_code)] // not every test binary uses it
/// The cluster's CA certificate when its links use TLS (`adisk up`'s `DIR/tls/ca.pem`).
pub fn cluster_ca(dir: &Path) -> Option<PathBuf> {
    Some(dir.join("tls/ca.pem")).filter(|p| p.exists())
}

#[allow(dead_code)] // not every test binary uses it
/// A channel to `url` (`grpc://`, `grpc+tcp://` or `grpc+tls://` with `ca`).
pub async fn channel_to(url: &str, ca: Option<&Path>) -> tonic::transport::Channel {
    let (scheme, address) = url.split_once("://").expect("a URL");
    let secure = scheme == "grpc+tls";
    let mut endpoint = tonic::transport::Channel::from_shared(format!(
        "{}://{address}",
        if secure { "https" } else { "http" }
    ))
    .unwrap();
    if secure {
        let pem = std::fs::read_to_string(ca.expect("a CA for grpc+tls")).unwrap();
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(pem));
        endpoint = endpoint.tls_config(tls).unwrap();
    }
    endpoint.connect().await.expect("connects")
}

#[allow(dead_code)] // not every test binary uses it
/// A channel to the disk at `address` of the cluster in `dir`, as a user's client reaches it
/// (TLS when the cluster uses it; no client certificate).
pub async fn disk_channel(dir: &Path, address: &str) -> tonic::transport::Channel {
    let ca = cluster_ca(dir);
    let scheme = if ca.is_some() { "grpc+tls" } else { "grpc" };
    channel_to(&format!("{scheme}://{address}"), ca.as_deref()).await
}
