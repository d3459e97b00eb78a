//! Local clusters: `adisk disk`, `adisk up`, `adisk down`, `adisk demo`.
use crate::common::CliError;
use adisk_core::config::{ClusterConfig, ClusterSection, DiskConfig, TlsFiles};
use adisk_disk::{DiskNode, DiskNodeConfig};
use adisk_diskos::DiskOsConfig;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `adisk disk` arguments.
#[derive(clap::Args, Debug)]
pub struct DiskArgs {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Disk number in its cluster.
    #[arg(long, default_value_t = 0)]
    id: u32,
    /// DiskOS memory budget, MiB.
    #[arg(long, default_value_t = 64)]
    memory_mib: u64,
    /// Stream buffer size, KiB.
    #[arg(long, default_value_t = 256)]
    buffer_kib: u64,
    /// Buffers per stream.
    #[arg(long, default_value_t = 2)]
    buffers_per_stream: u32,
    /// Disklet buffers processed at once (default: cores).
    #[arg(long)]
    compute_slots: Option<usize>,
    /// Storage read rate limit, Mbit/s (0: unthrottled).
    #[arg(long, default_value_t = 0)]
    read_mbps: u64,
    /// Limit this disk to this many cores' worth of CPU time (e.g. 0.5: a CPU at half the
    /// speed of one of this machine's cores): a cgroup quota, to emulate a slower disk CPU.
    /// Needs root (or a delegated cgroup). Default: unlimited.
    #[arg(long)]
    cpus: Option<f64>,
    /// Emulate a processor this many times as fast as this machine's cores (0 < F < 1):
    /// DiskOS pauses after every compute step (decoding, disklets) for its CPU time ×
    /// (1/F − 1), holding its compute slot. Needs no privilege; the transport's CPU is not
    /// slowed. Default: the machine's speed.
    #[arg(long)]
    cpu_speed: Option<f64>,
    /// Codec of the Parquet pages this disk writes: `none` (dictionary and run-length
    /// encodings only), `lz4` or `snappy`.
    #[arg(long, default_value_t = adisk_core::config::Compression::None)]
    compression: adisk_core::config::Compression,
    /// Write the bound address here once listening.
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// The cluster's secret (`cluster.key`, made by `adisk up`): every request must carry a
    /// token made with it.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// The cluster's `cluster.toml`: exchange streams go only to the disks it names.
    #[arg(long)]
    members: Option<PathBuf>,
    /// Serve without a key: anyone who can reach the port can read, load, drop and shut down.
    #[arg(long, conflicts_with = "key_file")]
    insecure: bool,
    /// Do not repair from the peers on start (by default a disk that comes back empty, or
    /// that missed a load, fetches the copies it should hold from the disks named in
    /// `--members`).
    #[arg(long)]
    no_auto_repair: bool,
    /// Serve this disk's own metrics (`GET /metrics`, Prometheus text) on this address (port
    /// 0: any free port).
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Write the metrics endpoint's bound address here once listening.
    #[arg(long)]
    metrics_port_file: Option<PathBuf>,
    /// TLS on this disk's links: the cluster's CA certificate (`adisk cert ca`); with
    /// --tls-cert and --tls-key, this disk's own (`adisk cert issue`). Without: plaintext.
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// This disk's TLS certificate (PEM).
    #[arg(long, requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    /// This disk's TLS private key (PEM).
    #[arg(long, requires = "tls_ca")]
    tls_key: Option<PathBuf>,
}

/// Where a disk started by `adisk up` writes its metrics endpoint's address.
const METRICS_ADDRESS_FILE: &str = "metrics.address";

/// `adisk up` arguments.
#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Number of disk processes.
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// DiskOS memory budget per disk, MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_mib: u64,
    /// Stream buffer size, KiB.
    #[arg(long, default_value_t = 256)]
    pub buffer_kib: u64,
    /// Buffers per stream.
    #[arg(long, default_value_t = 2)]
    pub buffers_per_stream: u32,
    /// Limit on what all disks together send the host, Mbit/s (0: unthrottled; token bucket
    /// at the host).
    #[arg(long, default_value_t = 0)]
    pub host_link_mbps: u64,
    /// Storage read rate limit of each disk, Mbit/s (0: unthrottled).
    #[arg(long, default_value_t = 0)]
    pub disk_read_mbps: u64,
    /// Limit each disk to this many cores' worth of CPU time (`adisk disk --cpus`: emulates
    /// slower disk CPUs; needs root). Default: unlimited.
    #[arg(long)]
    pub disk_cpus: Option<f64>,
    /// Emulate each disk's processor at this fraction of this machine's cores' speed
    /// (`adisk disk --cpu-speed`). Default: the machine's speed.
    #[arg(long)]
    pub disk_cpu_speed: Option<f64>,
    /// Codec of the Parquet pages the disks write: `none` (dictionary and run-length
    /// encodings only: the least decoding work per row), `lz4` or `snappy` (fewer bytes to
    /// read when the storage medium is the bottleneck).
    #[arg(long, default_value_t = adisk_core::config::Compression::None)]
    pub compression: adisk_core::config::Compression,
    /// How disk-to-disk streams travel: `direct` between disks, or `via-host` through the
    /// host's relay (counted on the host link).
    #[arg(long, default_value_t = adisk_core::config::ExchangeMode::Direct)]
    pub exchange: adisk_core::config::ExchangeMode,
    /// How long the host waits for a disk that stopped answering before it declares it
    /// unreachable, ms (HTTP/2 pings every quarter of it; control requests' deadline).
    #[arg(long, default_value_t = adisk_core::config::DEFAULT_DISK_TIMEOUT_MS)]
    pub disk_timeout_ms: u64,
    /// Start the disks without the cluster secret: anyone who can reach their ports can read,
    /// load, drop and shut down (only for measuring what authentication costs).
    #[arg(long)]
    pub insecure: bool,
    /// Disk groups behind a router (chiu): the disks are split into this many groups of
    /// consecutive ids; streams between groups pass the host's router.
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    /// Limit on the router between disk groups, Mbit/s (0: unthrottled).
    #[arg(long, default_value_t = 0)]
    pub router_mbps: u64,
    /// The cost file `auto` prices plans with (`adisk calibrate`); default: DIR/costs.toml
    /// when there is one, else the built-in rates.
    #[arg(long)]
    pub costs: Option<PathBuf>,
    /// Do not start the host's Flight SQL service (`adisk serve`) beside the disks.
    #[arg(long)]
    pub no_serve: bool,
    /// The disks do not repair from their peers when they start (by default, a second after
    /// starting, each asks its peers for their catalogs and fetches the copies it misses):
    /// for measurements on data known to be whole, which that work would disturb.
    #[arg(long)]
    pub no_auto_repair: bool,
    /// Who may use the Flight SQL service: `users` (of `DIR/users.toml`) or `none` (anyone
    /// who reaches the port: a local demo only).
    #[arg(long, default_value = "users")]
    pub serve_auth: String,
    /// TLS (rustls) on every link between the host and the disks and between disks, and on
    /// the Flight SQL service: `on` (the default) makes the cluster's CA and each member's
    /// certificate under DIR/tls (kept across restarts); `off` is plaintext, for experiments
    /// only (users' passwords, tokens and all data cross the network readable).
    #[arg(long, value_enum, default_value_t = OnOff::On, num_args = 0..=1, default_missing_value = "on")]
    pub tls: OnOff,
    /// Each disk in its own network namespace with its own address (`adisk chaos --netns`).
    #[arg(skip)]
    pub netns: Option<NetnsDisks>,
}

/// A setting that is on or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

/// Where disks run when each is its own machine: disk `d` in namespace `namespaces[d]`,
/// listening on `addresses[d]`.
#[derive(Clone, Debug, Default)]
pub struct NetnsDisks {
    /// Disk `d`'s network namespace.
    pub namespaces: Vec<String>,
    /// Disk `d`'s listening address (`ip:port`).
    pub addresses: Vec<String>,
}

impl NetnsDisks {
    fn of(&self, d: u32) -> Option<(&str, &str)> {
        let d = d as usize;
        Some((self.namespaces.get(d)?, self.addresses.get(d)?))
    }
}

impl UpArgs {
    /// `disks` disks with `adisk up`'s defaults and no Flight SQL service: the clusters the
    /// benchmarks, chaos and the demo start (other settings with `..UpArgs::local(n)`).
    pub fn local(disks: u32) -> Self {
        UpArgs {
            disks,
            memory_mib: 64,
            buffer_kib: 256,
            buffers_per_stream: 2,
            host_link_mbps: 0,
            disk_read_mbps: 0,
            disk_cpus: None,
            disk_cpu_speed: None,
            compression: Default::default(),
            exchange: Default::default(),
            disk_timeout_ms: adisk_core::config::DEFAULT_DISK_TIMEOUT_MS,
            insecure: false,
            groups: 1,
            router_mbps: 0,
            costs: None,
            no_serve: true,
            no_auto_repair: false,
            serve_auth: "users".into(),
            tls: OnOff::On,
            netns: None,
        }
    }
}

pub async fn run_disk(data: &Path, a: DiskArgs) -> Result<(), CliError> {
    // Before any work: every thread of the process runs under the limit (kept to the end).
    let cpu_limit = match a.cpus {
        Some(cores) => {
            let limit = crate::cpu_limit::CpuLimit::apply(cores)
                .map_err(|e| CliError::Other(e.to_string()))?;
            eprintln!("disk {}: {}", a.id, limit.describe());
            Some(limit)
        }
        None => None,
    };
    let os = disk_os_config(&a, cpu_limit.as_ref())?;
    let probe = ClusterConfig {
        cluster: ClusterSection {
            name: "check".into(),
            host_link_mbps: 0,
            exchange: Default::default(),
            key_file: None,
            disk_timeout_ms: adisk_core::config::DEFAULT_DISK_TIMEOUT_MS,
            router_mbps: 0,
            costs: None,
            tls: None,
        },
        disks: vec![DiskConfig {
            id: 0,
            address: "127.0.0.1:1".into(),
            dir: None,
            memory_mib: a.memory_mib,
            buffer_kib: a.buffer_kib,
            buffers_per_stream: a.buffers_per_stream,
            read_mbps: a.read_mbps,
            compression: a.compression,
            pid: None,
            group: None,
            metrics_address: None,
            cpus: None,
            cpu_speed: None,
        }],
        serve: None,
    };
    probe.validate(Path::new("command line"))?;
    let auth = match (&a.key_file, a.insecure) {
        (Some(path), _) => Some(std::sync::Arc::new(adisk_core::auth::Verifier::new(adisk_core::auth::ClusterKey::load(path).map_err(|e| CliError::Other(e.to_string()))?))),
        (None, true) => None,
        (None, false) => return Err(CliError::Other("a disk needs the cluster's key: pass --key-file (adisk up makes cluster.key), or --insecure to serve without authentication".into())),
    };
    // TPC-H generation runs in child processes of this binary, so dbgen's 300 MB text pool
    // never stays in the disk process.
    if let Ok(exe) = std::env::current_exe() {
        adisk_storage::tpch::generate_in_children(exe);
    }
    let node = DiskNode::bind(DiskNodeConfig {
        dir: data.to_path_buf(),
        listen: a.listen.clone(),
        os,
        auth,
        members: a.members.clone(),
        auto_repair: !a.no_auto_repair,
        compression: a.compression,
        tls: match (&a.tls_ca, &a.tls_cert, &a.tls_key) {
            (Some(ca), Some(cert), Some(key)) => Some(
                adisk_core::tls::TlsMaterial::load(ca, cert, key)
                    .map_err(|e| CliError::Other(e.to_string()))?,
            ),
            _ => None,
        },
    })
    .await?;
    node.diskos()
        .set_app_disklets(std::sync::Arc::new(adisk_apps::Disklets));
    if let Some(listen) = &a.metrics_listen {
        serve_disk_metrics(
            listen,
            a.metrics_port_file.as_deref(),
            node.diskos().clone(),
        )
        .await?;
    }
    let address = node.address().to_string();
    if let Some(pf) = &a.port_file {
        let tmp = pf.with_extension("tmp");
        std::fs::write(&tmp, &address)
            .and_then(|()| std::fs::rename(&tmp, pf))
            .map_err(|e| CliError::Other(format!("writing {}: {e}", pf.display())))?;
    }
    eprintln!("disk {} serving {} on {address}", a.id, data.display());
    let stop = async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {},
            _ = tokio::signal::ctrl_c() => {},
        }
    };
    node.serve(stop).await?;
    eprintln!("disk {} stopped", a.id);
    Ok(())
}

/// The DiskOS settings `adisk disk`'s arguments ask for.
fn disk_os_config(
    a: &DiskArgs,
    cpu_limit: Option<&crate::cpu_limit::CpuLimit>,
) -> Result<DiskOsConfig, CliError> {
    let mut os = DiskOsConfig::new(
        a.id,
        a.memory_mib * adisk_core::MIB,
        a.buffer_kib * adisk_core::KIB,
        a.buffers_per_stream,
    );
    match (a.compute_slots, cpu_limit) {
        (Some(c), _) => os.compute_slots = c.max(1),
        // As many buffers at once as the cores the limit is worth.
        (None, Some(l)) => os.compute_slots = (l.cores().ceil() as usize).max(1),
        (None, None) => {}
    }
    os.read_bytes_per_sec = a.read_mbps * 1_000_000 / 8;
    if let Some(speed) = a.cpu_speed {
        check_speed("--cpu-speed", speed)?;
        os.cpu_speed = speed;
        eprintln!(
            "disk {}: an emulated processor at {speed} of this machine's speed",
            a.id
        );
    }
    Ok(os)
}

/// Starts `args.disks` disk processes under `dir` and writes `dir/cluster.toml`.
/// The cost file a new cluster's `auto` reads: `--costs` (checked now, made absolute), else
/// one `adisk calibrate` left in the cluster's directory.
fn costs_file(dir: &Path, given: Option<&Path>) -> Result<Option<PathBuf>, CliError> {
    let Some(path) = given else {
        return Ok(Some(dir.join(crate::calibrate::COSTS_FILE)).filter(|p| p.exists()));
    };
    adisk_core::calibration::Calibration::load(path)
        .map_err(|e| CliError::Other(format!("--costs: {e}")))?;
    Ok(Some(std::path::absolute(path).map_err(|e| {
        CliError::Other(format!("--costs {}: {e}", path.display()))
    })?))
}

pub async fn up(dir: &Path, args: &UpArgs) -> Result<ClusterConfig, CliError> {
    check_counts(args)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::Other(format!("creating {}: {e}", dir.display())))?;
    let dir = std::fs::canonicalize(dir)
        .map_err(|e| CliError::Other(format!("{}: {e}", dir.display())))?;
    let costs = costs_file(&dir, args.costs.as_deref())?;
    // One `up` at a time per directory: the check for a running cluster and the start of
    // its disks happen under this lock (released when `up` returns, however it returns).
    let _up = up_lock(&dir)?;
    let config_path = dir.join("cluster.toml");
    if let Ok(old) = ClusterConfig::load(&config_path)
        && old
            .disks
            .iter()
            .any(|d| d.pid.is_some_and(|p| holds_lock(p, d.dir.as_deref())))
    {
        return Err(CliError::Other(format!(
            "a cluster is already running in {} (run `adisk down` first)",
            dir.display()
        )));
    }
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Other(format!("cannot find the adisk binary: {e}")))?;
    let key_file = if args.insecure {
        None
    } else {
        Some(cluster_key(&dir)?)
    };
    let tls_files = match args.tls {
        OnOff::On => Some(local_tls(&dir, &member_hosts(args))?),
        OnOff::Off => {
            eprintln!(
                "WARNING: --tls off: the cluster's links and its Flight SQL service are plaintext \
                 (passwords, tokens and data readable on the network); for experiments only"
            );
            None
        }
    };
    let mut children = Vec::new();
    for id in 0..args.disks {
        let spawned = spawn_local_disk(
            &exe,
            &dir,
            args,
            id,
            (key_file.as_deref(), tls_files.as_ref()),
        );
        match spawned {
            Ok(child) => children.push(child),
            Err(e) => return Err(kill_all(&mut children, e)),
        }
    }
    let mut disks = match wait_started(&mut children, args).await {
        Ok(disks) => disks,
        Err(e) => return Err(kill_all(&mut children, e)),
    };
    if args.groups > 1 {
        for d in &mut disks {
            d.group = Some(d.id * args.groups / args.disks);
        }
    }
    let mut config = ClusterConfig {
        cluster: ClusterSection {
            name: "local".into(),
            host_link_mbps: args.host_link_mbps,
            exchange: args.exchange,
            key_file,
            disk_timeout_ms: args.disk_timeout_ms,
            router_mbps: args.router_mbps,
            costs,
            tls: tls_files.clone(),
        },
        disks,
        serve: None,
    };
    config.save(&config_path)?;
    if !args.no_serve {
        // The service reads the cluster.toml just written; its own section is added after.
        let ca = tls_files.as_ref().map(|t| t.ca.as_path());
        match crate::serve_cmd::start_managed(&exe, &dir, &args.serve_auth, ca).await {
            Ok(serve) => config.serve = Some(serve),
            Err(e) => {
                let _ = std::fs::remove_file(&config_path);
                return Err(kill_all(&mut children, e));
            }
        }
        config.save(&config_path)?;
    }
    Ok(config)
}

/// `--disks` within 1..=256 and `--groups` of at least one disk each.
fn check_counts(args: &UpArgs) -> Result<(), CliError> {
    if args.groups == 0 || args.groups > args.disks {
        return Err(CliError::Other(format!(
            "--groups {} for {} disks: each group needs at least one disk",
            args.groups, args.disks
        )));
    }
    if args.disks == 0 || args.disks > 256 {
        return Err(CliError::Other(format!(
            "--disks {} outside 1..=256",
            args.disks
        )));
    }
    if let Some(s) = args.disk_cpu_speed {
        check_speed("--disk-cpu-speed", s)?;
    }
    if let Some(c) = args.disk_cpus {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if !(c.is_finite() && c >= 0.01 && c <= cores as f64) {
            return Err(CliError::Other(format!(
                "--disk-cpus {c}: give a number of cores above 0.01 and at most {cores} (this machine's cores)"
            )));
        }
    }
    Ok(())
}

/// An emulated CPU speed must be in (0, 1].
fn check_speed(flag: &str, speed: f64) -> Result<(), CliError> {
    if speed.is_finite() && (0.01..=1.0).contains(&speed) {
        return Ok(());
    }
    Err(CliError::Other(format!(
        "{flag} {speed}: give a fraction of this machine's speed from 0.01 to 1"
    )))
}

/// Starts disk `id` of a local cluster (in its network namespace if `args` names them): the
/// child, its port file and its directory.
fn spawn_local_disk(
    exe: &Path,
    dir: &Path,
    args: &UpArgs,
    id: u32,
    (key_file, tls_files): (Option<&Path>, Option<&TlsFiles>),
) -> Result<(u32, std::process::Child, PathBuf, PathBuf), CliError> {
    let place = args.netns.as_ref().and_then(|n| n.of(id));
    if args.netns.is_some() && place.is_none() {
        return Err(CliError::Other(format!(
            "no network namespace for disk {id}"
        )));
    }
    let disk = DiskConfig {
        id,
        address: place.map_or("127.0.0.1:0", |p| p.1).into(),
        dir: None,
        memory_mib: args.memory_mib,
        buffer_kib: args.buffer_kib,
        buffers_per_stream: args.buffers_per_stream,
        read_mbps: args.disk_read_mbps,
        compression: args.compression,
        pid: None,
        group: None,
        metrics_address: None,
        cpus: args.disk_cpus,
        cpu_speed: args.disk_cpu_speed,
    };
    let namespace = place.map(|p| p.0);
    let tls = disk_tls(dir, tls_files, id);
    let (child, port_file, disk_dir) = spawn_disk(
        exe,
        dir,
        &disk,
        key_file,
        !args.no_auto_repair,
        namespace,
        tls.as_ref(),
    )?;
    Ok((id, child, port_file, disk_dir))
}

/// Stops the disks a failed `up` started (nothing is left running after it); returns `e`.
fn kill_all(
    children: &mut [(u32, std::process::Child, PathBuf, PathBuf)],
    e: CliError,
) -> CliError {
    for (_, child, _, _) in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    e
}

/// Takes `dir/up.lock`, refusing when another `adisk up` holds it.
fn up_lock(dir: &Path) -> Result<std::fs::File, CliError> {
    let path = dir.join("up.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(CliError::Other(format!(
            "another `adisk up` is starting a cluster in {}",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(CliError::Other(format!("{}: {e}", path.display())))
        }
    }
}

/// Waits until every started disk wrote its address; the disks' entries for `cluster.toml`.
async fn wait_started(
    children: &mut [(u32, std::process::Child, PathBuf, PathBuf)],
    args: &UpArgs,
) -> Result<Vec<DiskConfig>, CliError> {
    let mut disks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    for (id, child, port_file, disk_dir) in children.iter_mut() {
        loop {
            if let Ok(address) = std::fs::read_to_string(&*port_file) {
                disks.push(DiskConfig {
                    id: *id,
                    address: address.trim().to_string(),
                    dir: Some(disk_dir.clone()),
                    memory_mib: args.memory_mib,
                    buffer_kib: args.buffer_kib,
                    buffers_per_stream: args.buffers_per_stream,
                    read_mbps: args.disk_read_mbps,
                    compression: args.compression,
                    pid: Some(child.id()),
                    group: None,
                    // Written before the disk's address.
                    metrics_address: std::fs::read_to_string(disk_dir.join(METRICS_ADDRESS_FILE))
                        .ok()
                        .map(|a| a.trim().to_string()),
                    cpus: args.disk_cpus,
                    cpu_speed: args.disk_cpu_speed,
                });
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(disk_dir.join("disk.log")).unwrap_or_default();
                return Err(CliError::Other(format!(
                    "disk {id} exited ({status}) during start-up:\n{}",
                    log.trim()
                )));
            }
            if Instant::now() > deadline {
                return Err(CliError::Other(format!(
                    "disk {id} did not start within 20 s (see {})",
                    disk_dir.join("disk.log").display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(disks)
}

/// Serves the disk's own `/metrics` on `listen` ([`adisk_server::metrics::render_disk`]),
/// writing the bound address to `port_file` first.
async fn serve_disk_metrics(
    listen: &str,
    port_file: Option<&Path>,
    os: std::sync::Arc<adisk_diskos::DiskOs>,
) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| CliError::Other(format!("metrics: listening on {listen}: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| CliError::Other(e.to_string()))?;
    if let Some(pf) = port_file {
        let tmp = pf.with_extension("tmp");
        std::fs::write(&tmp, address.to_string())
            .and_then(|()| std::fs::rename(&tmp, pf))
            .map_err(|e| CliError::Other(format!("writing {}: {e}", pf.display())))?;
    }
    tokio::spawn(adisk_server::metrics::serve_text(listener, move || {
        let status = os.status();
        async move { adisk_server::metrics::render_disk(&status) }
    }));
    Ok(())
}

/// Starts the disk process of `disk` (listening on its `address`) under the cluster directory
/// `dir`, logging to its `disk.log`; returns the child, the file it writes its bound address
/// to, and its data directory.
fn spawn_disk(
    exe: &Path,
    dir: &Path,
    disk: &DiskConfig,
    key_file: Option<&Path>,
    auto_repair: bool,
    namespace: Option<&str>,
    tls: Option<&TlsFiles>,
) -> Result<(std::process::Child, PathBuf, PathBuf), CliError> {
    use std::os::unix::process::CommandExt;
    let id = disk.id;
    let disk_dir = dir.join(format!("disk-{id}"));
    std::fs::create_dir_all(&disk_dir)
        .map_err(|e| CliError::Other(format!("creating {}: {e}", disk_dir.display())))?;
    let port_file = disk_dir.join("address");
    let _ = std::fs::remove_file(&port_file);
    let metrics_file = disk_dir.join(METRICS_ADDRESS_FILE);
    let _ = std::fs::remove_file(&metrics_file);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(disk_dir.join("disk.log"))
        .map_err(|e| CliError::Other(format!("creating the disk log: {e}")))?;
    let log2 = log
        .try_clone()
        .map_err(|e| CliError::Other(e.to_string()))?;
    // In its namespace: `ip netns exec` enters it and execs the disk (the same process).
    let mut command = match namespace {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => std::process::Command::new(exe),
    };
    let child = command
        .arg("disk")
        .arg("--dir")
        .arg(&disk_dir)
        .args(["--listen", &disk.address, "--id", &id.to_string()])
        .args([
            "--memory-mib",
            &disk.memory_mib.to_string(),
            "--buffer-kib",
            &disk.buffer_kib.to_string(),
        ])
        .args(["--buffers-per-stream", &disk.buffers_per_stream.to_string()])
        .args(["--read-mbps", &disk.read_mbps.to_string()])
        .args(["--compression", &disk.compression.to_string()])
        .args(
            disk.cpus
                .map_or_else(Vec::new, |c| vec!["--cpus".into(), c.to_string()]),
        )
        .args(
            disk.cpu_speed
                .map_or_else(Vec::new, |c| vec!["--cpu-speed".into(), c.to_string()]),
        )
        .arg("--port-file")
        .arg(&port_file)
        .args([
            "--metrics-listen",
            disk.metrics_address.as_deref().unwrap_or("127.0.0.1:0"),
        ])
        .arg("--metrics-port-file")
        .arg(&metrics_file)
        .args(match key_file {
            Some(key) => vec!["--key-file".as_ref(), key.as_os_str()],
            None => vec!["--insecure".as_ref()],
        })
        .arg("--members")
        .arg(dir.join("cluster.toml"))
        .args(tls.map_or_else(Vec::new, |t| {
            vec![
                "--tls-ca".as_ref(),
                t.ca.as_os_str(),
                "--tls-cert".as_ref(),
                t.cert.as_os_str(),
                "--tls-key".as_ref(),
                t.key.as_os_str(),
            ]
        }))
        .args(if auto_repair {
            &[][..]
        } else {
            &["--no-auto-repair"][..]
        })
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(|e| CliError::Other(format!("starting disk {id}: {e}")))?;
    Ok((child, port_file, disk_dir))
}

/// Waits until no process holds the directory lock of `disk_dir`: a killed disk's threads may
/// still be exiting (holding their files) after its main thread is gone.
async fn wait_unlocked(disk_dir: &Path, timeout: Duration) -> Result<(), CliError> {
    let deadline = Instant::now() + timeout;
    loop {
        let free = match std::fs::File::open(disk_dir.join(adisk_disk::LOCK_FILE)) {
            Ok(f) => !matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)),
            Err(_) => true,
        };
        if free {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CliError::Other(format!(
                "{} is still locked by another process after {} s",
                disk_dir.display(),
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `adisk restart --disk D`: restarts a disk of the local cluster that is not running, on its
/// old address (it then repairs itself from its peers unless `auto_repair` is off).
pub async fn restart(dir: &Path, d: u32, auto_repair: bool) -> Result<(), CliError> {
    let path = dir.join("cluster.toml");
    if !path.exists() {
        return Err(CliError::Other(format!(
            "no cluster at {} (run `adisk up` first, or set --dir / ADISK_HOME)",
            dir.display()
        )));
    }
    let config = ClusterConfig::load(&path)?;
    let disk = config.disks.get(d as usize).ok_or_else(|| {
        CliError::Other(format!(
            "--disk {d}: the cluster has disks 0..{}",
            config.disks.len()
        ))
    })?;
    if let Some(pid) = disk
        .pid
        .filter(|p| crate::common::alive(*p) && holds_lock(*p, disk.dir.as_deref()))
    {
        return Err(CliError::Other(format!(
            "disk {d} is running (pid {pid}); only a disk that stopped can be restarted"
        )));
    }
    restart_disk(dir, &config, d, auto_repair, None).await?;
    println!(
        "disk {d} restarted on {}{}",
        disk.address,
        if auto_repair {
            "; it repairs itself from its peers (see adisk status)"
        } else {
            ""
        }
    );
    Ok(())
}

/// Restarts disk `d` of the local cluster in `dir` (after it died) on its old address (in
/// network namespace `namespace`, if it runs in one), and records its new pid in
/// `cluster.toml`.
pub async fn restart_disk(
    dir: &Path,
    config: &ClusterConfig,
    d: u32,
    auto_repair: bool,
    namespace: Option<&str>,
) -> Result<(), CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Other(format!("cannot find the adisk binary: {e}")))?;
    let key_file = config.cluster.key_file.clone();
    let disk = &config.disks[d as usize];
    wait_unlocked(&dir.join(format!("disk-{d}")), Duration::from_secs(20)).await?;
    let (mut child, port_file, disk_dir) = spawn_disk(
        &exe,
        dir,
        disk,
        key_file.as_deref(),
        auto_repair,
        namespace,
        disk_tls(dir, config.cluster.tls.as_ref(), d).as_ref(),
    )?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !port_file.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(CliError::Other(format!(
                "disk {d} exited ({status}) on restart (see {})",
                disk_dir.join("disk.log").display()
            )));
        }
        if Instant::now() > deadline {
            return Err(CliError::Other(format!(
                "disk {d} did not restart within 20 s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let path = dir.join("cluster.toml");
    let mut current = ClusterConfig::load(&path)?;
    current.disks[d as usize].pid = Some(child.id());
    current.save(&path)?;
    Ok(())
}

/// Where a local cluster keeps its TLS files.
const TLS_DIR: &str = "tls";

/// Each member's certificate name and the addresses clients reach it at: the host (its Flight
/// SQL service listens on 127.0.0.1) and each disk (its per-disk endpoints).
fn member_hosts(args: &UpArgs) -> Vec<(String, Vec<String>)> {
    let local = || vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let disk = |d: u32| match args.netns.as_ref().and_then(|n| n.of(d)) {
        Some((_, address)) => vec![
            address
                .rsplit_once(':')
                .map_or(address, |a| a.0)
                .to_string(),
        ],
        None => local(),
    };
    std::iter::once(("host".to_string(), local()))
        .chain((0..args.disks).map(|d| (format!("disk-{d}"), disk(d))))
        .collect()
}

/// The local cluster's CA and its members' certificates under `dir/tls` (those missing are
/// made; existing ones are kept, as the cluster's key is): the host's files.
fn local_tls(dir: &Path, members: &[(String, Vec<String>)]) -> Result<TlsFiles, CliError> {
    let tls = dir.join(TLS_DIR);
    let other = |e: adisk_core::tls::CertError| CliError::Other(e.to_string());
    if !tls.join("ca.pem").exists() {
        let ca = adisk_core::tls::make_authority("local").map_err(other)?;
        crate::cert_cmd::write_pair(&tls, "ca", &ca)?;
    }
    let ca = crate::cert_cmd::read_authority(&tls)?;
    for (name, hosts) in members {
        if !tls.join(format!("{name}.pem")).exists() {
            let own = adisk_core::tls::issue(&ca, name, hosts).map_err(other)?;
            crate::cert_cmd::write_pair(&tls, &name, &own)?;
        }
    }
    Ok(TlsFiles {
        ca: tls.join("ca.pem"),
        cert: tls.join("host.pem"),
        key: tls.join("host.key"),
    })
}

/// Disk `id`'s TLS files beside the host's `host` (None: plaintext).
fn disk_tls(dir: &Path, host: Option<&TlsFiles>, id: u32) -> Option<TlsFiles> {
    host.map(|h| TlsFiles {
        ca: h.ca.clone(),
        cert: dir.join(TLS_DIR).join(format!("disk-{id}.pem")),
        key: dir.join(TLS_DIR).join(format!("disk-{id}.key")),
    })
}

/// The cluster's secret under `dir` (made on first `up`, kept across restarts so the disks'
/// key and the host's stay the same).
fn cluster_key(dir: &Path) -> Result<PathBuf, CliError> {
    let path = dir.join(adisk_core::auth::KEY_FILE);
    let made = if path.exists() {
        adisk_core::auth::ClusterKey::load(&path)
    } else {
        adisk_core::auth::ClusterKey::create(&path)
    };
    made.map_err(|e| CliError::Other(e.to_string()))?;
    Ok(path)
}

/// Measures the new cluster's links from here and keeps the figures in `dir` (`links.json`),
/// so that the first queries `auto` plans use them instead of each probing first (a full
/// probe of every disk and of the disks' ring: ~0.4 s on loopback). Prints them; a cluster
/// that cannot be reached is said so and left as it is (the queries will probe).
pub async fn measure_links(dir: &Path) {
    match crate::common::connect(dir).await {
        Ok(cluster) => println!("  links: {}", cluster.measure_links().await.describe()),
        Err(e) => eprintln!("the links were not measured: {e}"),
    }
}

pub fn describe(config: &ClusterConfig, dir: &Path) -> String {
    let mut s = format!(
        "cluster of {} disks up; config {}\n",
        config.disks.len(),
        dir.join("cluster.toml").display()
    );
    for d in &config.disks {
        s.push_str(&format!(
            "  disk {} at {} (pid {}, {} MiB, {} KiB x {} buffers, compression {}{})\n",
            d.id,
            d.address,
            d.pid.unwrap_or(0),
            d.memory_mib,
            d.buffer_kib,
            d.buffers_per_stream,
            d.compression,
            if d.read_mbps > 0 {
                format!(", reads at {} Mbit/s", d.read_mbps)
            } else {
                String::new()
            }
        ));
    }
    if let Some(serve) = &config.serve {
        s.push_str(&format!(
            "  Flight SQL service at {} (pid {}{}){}{}\n",
            adisk_server::client::served_url(serve),
            serve.pid.unwrap_or(0),
            match &serve.metrics_address {
                Some(m) => format!(", metrics at http://{m}/metrics"),
                None => String::new(),
            },
            match &serve.admin_password_file {
                Some(f) => format!("; user admin, password in {}", f.display()),
                None => String::new(),
            },
            match &serve.tls_ca {
                Some(ca) => format!("; its CA certificate is {}", ca.display()),
                None => String::new(),
            }
        ));
    }
    s
}

/// Stops what `adisk up` started in `dir`: a `shutdown` action to each disk it started (those
/// with a pid in `cluster.toml`), then SIGTERM, then SIGKILL; removes `cluster.toml` only when
/// `up` made all of it. A hand-written `cluster.toml` (disks started with `adisk disk`, perhaps
/// a file several machines share) is left alone, and so are its disks.
pub async fn down(dir: &Path) -> Result<(), CliError> {
    let path = dir.join("cluster.toml");
    if !path.exists() {
        return Err(CliError::Other(format!("no cluster at {}", dir.display())));
    }
    let config = ClusterConfig::load(&path)?;
    let ours: Vec<u32> = config
        .disks
        .iter()
        .filter(|d| d.pid.is_some())
        .map(|d| d.id)
        .collect();
    if ours.is_empty() {
        return Err(CliError::Other(format!(
            "{} names no disk that `adisk up` started (none has a pid): nothing was stopped or removed; stop each `adisk disk` where it runs (its service manager, or SIGTERM)",
            path.display()
        )));
    }
    if let Some(serve) = &config.serve {
        crate::serve_cmd::stop_managed(dir, serve).await;
    }
    // Only processes that hold their disk's directory lock are ours: a pid the OS gave to an
    // unrelated process since is never waited for or signalled.
    let pids: Vec<u32> = config
        .disks
        .iter()
        .filter_map(|d| d.pid.filter(|p| holds_lock(*p, d.dir.as_deref())))
        .collect();
    if let Ok(cluster) = adisk_host::Cluster::connect_lazy(config.clone()) {
        cluster.shutdown_disks(&ours).await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut signalled = false;
    loop {
        pids.iter().for_each(|p| crate::common::reap(*p));
        let left: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| crate::common::alive(*p))
            .collect();
        if left.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            if signalled {
                for p in &left {
                    // SAFETY: sending a signal to a disk process we started.
                    unsafe { libc::kill(*p as libc::pid_t, libc::SIGKILL) };
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                break;
            }
            for p in &left {
                // SAFETY: as above.
                unsafe { libc::kill(*p as libc::pid_t, libc::SIGTERM) };
            }
            signalled = true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if ours.len() == config.disks.len() {
        let _ = std::fs::remove_file(&path);
    }
    // The link figures kept between queries are of these disks' links.
    let _ = std::fs::remove_file(dir.join(adisk_host::client::link_memory::FILE));
    let kept = config.disks.len() - ours.len();
    println!(
        "cluster in {} stopped ({} disks){}",
        dir.display(),
        ours.len(),
        if kept > 0 {
            format!(
                "; {kept} disks not started by `adisk up` left running, and {} kept",
                path.display()
            )
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Whether process `pid` is the disk process serving `data` (it holds the directory's lock
/// and the lock file names it). Without a known directory, trusts the pid.
fn holds_lock(pid: u32, data: Option<&Path>) -> bool {
    let Some(data) = data else { return true };
    crate::common::lock_names(&data.join(adisk_disk::LOCK_FILE), pid).unwrap_or(true)
}

/// The embedded demo.
pub async fn demo(dir: &Path, sf: f64, disks: u32) -> Result<(), CliError> {
    let demo_dir = dir.join("demo");
    let config = up(&demo_dir, &UpArgs::local(disks)).await?;
    println!("{}", describe(&config, &demo_dir));
    let result = demo_body(&demo_dir, sf).await;
    down(&demo_dir).await?;
    result
}

const DEMO_INTRO: &str = "\
ActiveDisk runs operators (disklets) at the storage nodes that hold the data, so that only
results cross the interconnect. This demo loads TPC-H into the disks, then shows three things:
  1. a select + aggregate (TPC-H Q6's shape): each disk filters and sums its own rows and
     ships one partial sum; the host adds them up;
  2. a group-by (Q1's shape): each disk groups its rows, the host merges the partial groups;
  3. TPC-H Q3 in SQL, planned by DataFusion, run twice: conventionally (the disks ship whole
     rows, the host does all the work) and with `auto` offload (the disks filter, project and
     Bloom-filter join inputs first).
Watch \"read\" (bytes the disks read from storage) against \"shipped\" (bytes sent to the host):
their ratio, the data reduction, is what computing where the data lives saves.";

async fn demo_body(dir: &Path, sf: f64) -> Result<(), CliError> {
    println!("{DEMO_INTRO}\n");
    let cluster = std::sync::Arc::new(crate::common::connect(dir).await?);
    let tables = adisk_storage::tpch::TABLES.map(String::from).to_vec();
    crate::output::load_tpch(
        &cluster,
        &adisk_host::load::TpchLoad {
            sf,
            partitions_per_disk: 1,
            row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS,
            tables,
            replicas: 1,
            disks: vec![],
        },
    )
    .await?;
    println!(
        "\n== 1. Q6-like select + aggregate: at the disks, select → partial sum; at the host, the final sum =="
    );
    demo_job(&cluster, &demo_q6()).await?;
    println!(
        "\n== 2. Q1-like group-by: at the disks, select → hash group-by; at the host, merge of partial groups =="
    );
    demo_job(&cluster, &demo_q1()).await?;
    let q3 = adisk_host::sql::tpch::query(3)?;
    println!(
        "\n== 3. SQL: TPC-H Q3 (`adisk tpch query 3`), conventional (offload none) vs auto =="
    );
    let mut shipped = Vec::new();
    for offload in [
        adisk_host::sql::Offload::None,
        adisk_host::sql::Offload::Auto,
    ] {
        let engine = adisk_host::sql::SqlEngine::new(
            cluster.clone(),
            adisk_host::sql::SqlOptions {
                offload,
                ..Default::default()
            },
        )
        .await?;
        let out = engine.query(q3).await?;
        println!("offload {offload:<4}: {}", crate::sql_cmd::moved(&out));
        shipped.push(adisk_host::sql::report::totals(&out).2);
        if offload == adisk_host::sql::Offload::Auto {
            crate::sql_cmd::print_batches(
                &out.batches,
                &out.schema,
                crate::sql_cmd::ResultFormat::Table,
            )?;
        }
    }
    println!(
        "\nSame answer both ways; `auto` shipped {:.0}x fewer bytes to the host than the conventional plan.\n\
         To see what ran where, per disk and per stage, on a cluster of your own:\n  \
         adisk up --disks 4 && adisk load tpch --sf 0.1 && adisk tpch query 3 --analyze",
        shipped[0] as f64 / shipped[1].max(1) as f64
    );
    Ok(())
}

/// Runs one built-in job of the demo and prints its rows, statistics and data reduction.
async fn demo_job(
    cluster: &std::sync::Arc<adisk_host::Cluster>,
    job: &adisk_host::JobRequest,
) -> Result<(), CliError> {
    let out = adisk_host::run::run(cluster, job).await?;
    crate::output::print_job(&out, crate::output::Format::Table, 20)?;
    let totals = out.stats.totals();
    println!(
        "→ the disks read {} and shipped {} to the host: {:.0}x less than they read.",
        adisk_core::stats::human_bytes(totals.bytes_read),
        adisk_core::stats::human_bytes(totals.bytes_shipped_host),
        totals.bytes_read as f64 / totals.bytes_shipped_host.max(1) as f64
    );
    Ok(())
}

fn demo_q6() -> adisk_host::JobRequest {
    let params = [
        (
            "predicate",
            "l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
        ),
        ("aggs", "sum(l_extendedprice * l_discount) AS revenue"),
    ];
    adisk_host::JobRequest {
        disklet: "aggregate".into(),
        table: "lineitem".into(),
        params: params
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

fn demo_q1() -> adisk_host::JobRequest {
    let params = [
        ("predicate", "l_shipdate <= DATE '1998-09-02'"),
        ("group_by", "l_returnflag, l_linestatus"),
        (
            "aggs",
            "sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS sum_base_price, sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price, avg(l_discount) AS avg_disc, count(*) AS count_order",
        ),
    ];
    adisk_host::JobRequest {
        disklet: "groupby".into(),
        table: "lineitem".into(),
        params: params
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}
