//! `adisk serve` (the host as a Flight SQL service) and `adisk user add`.
use crate::common::CliError;
use crate::sql_cmd::EngineArgs;
use adisk_host::sql::SqlOptions;
use adisk_server::auth::{Users, random_secret, write_private};
use adisk_server::{Access, Admission, Endpoints, SqlService};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `adisk serve` arguments.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Write the bound address (`host:port`) here once listening.
    #[arg(long)]
    pub port_file: Option<PathBuf>,
    /// `users`: clients log in with a user of the users file; `none`: anyone who reaches the
    /// port may query (only for a local demo).
    #[arg(long, default_value = "users")]
    pub auth: String,
    /// The users file (default: `DIR/users.toml`; made with an `admin` user when missing, its
    /// password written to `DIR/admin.password`, mode 0600).
    #[arg(long)]
    pub users: Option<PathBuf>,
    /// Address of the Prometheus endpoint (`GET /metrics`; port 0: any free port; `off`: none).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub metrics_listen: String,
    /// Write the metrics endpoint's bound address here once listening.
    #[arg(long)]
    pub metrics_port_file: Option<PathBuf>,
    /// Queries running at once.
    #[arg(long, default_value_t = 16)]
    pub max_running: usize,
    /// Queries waiting for a turn; one more is refused with a `busy` error.
    #[arg(long, default_value_t = 64)]
    pub max_queued: usize,
    /// Most MiB of Arrow one query's result may hold at this host before it is sent; past it
    /// the query fails with a clear error (results read from the disks' endpoints never pass
    /// here). At most `--max-running` results are held at once.
    #[arg(long, default_value_t = 1024)]
    pub max_result_mib: u64,
    /// Serve results made entirely at the disks (filtered projections of one table) as one
    /// endpoint per disk, read by the client straight from the disks: `on` or `off` (every
    /// result through this service).
    #[arg(long, default_value = "on")]
    pub disk_endpoints: String,
    /// How long a per-disk endpoint's ticket stays valid, seconds (1 to 3600).
    #[arg(long, default_value_t = 120)]
    pub endpoint_ttl_secs: u64,
    /// Keep the traces of the last N queries answered through the service (at most 32 MiB
    /// together), for their users to fetch (`adisk traces`, `adisk sql --connect … --trace`);
    /// 0: keep none.
    #[arg(long, default_value_t = adisk_server::traces::DEFAULT_KEEP)]
    pub keep_traces: usize,
    /// TLS of the service: `auto` (on with --tls-cert, or with the host's certificate of
    /// `[cluster.tls]`; plaintext, with a warning, when there is neither), `on` (refuses to
    /// start without a certificate), `off` (plaintext; for experiments only).
    #[arg(long, value_enum, default_value_t = ServeTls::Auto)]
    pub tls: ServeTls,
    /// The service's certificate (PEM; default: the host's of `[cluster.tls]`). It must name
    /// the host names or addresses clients connect to (`adisk cert issue host --host …`).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: clients must show a certificate signed by this CA (PEM); others are refused
    /// during the handshake. Users still log in.
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
    /// Started by `adisk up`: hold `DIR/serve.lock` (naming this process) so that `adisk
    /// down` stops only this server.
    #[arg(long, hide = true)]
    pub managed: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// `adisk serve --tls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServeTls {
    /// On when a certificate is at hand.
    Auto,
    /// On; no certificate is an error.
    On,
    /// Plaintext.
    Off,
}

/// The service's TLS from its arguments and the cluster's `[cluster.tls]` (None: plaintext,
/// said on standard error).
fn service_tls(
    a: &ServeArgs,
    cluster: &adisk_host::cluster::Cluster,
) -> Result<Option<adisk_core::tls::ServiceTls>, CliError> {
    let warn = |why: &str| {
        eprintln!(
            "WARNING: {why}: the Flight SQL service on {} is plaintext (passwords, tokens and \
             results readable on the network); for experiments only",
            a.listen
        );
    };
    let given = a.tls_cert.as_ref().zip(a.tls_key.as_ref());
    let files = given.map(|(c, k)| (c.clone(), k.clone())).or_else(|| {
        let t = cluster.config().cluster.tls.as_ref()?;
        Some((t.cert.clone(), t.key.clone()))
    });
    match (a.tls, files) {
        (ServeTls::Off, _) if given.is_some() || a.tls_client_ca.is_some() => Err(CliError::Other(
            "--tls off with --tls-cert or --tls-client-ca: choose one".into(),
        )),
        (ServeTls::Off, _) => {
            warn("--tls off");
            Ok(None)
        }
        (ServeTls::On, None) => Err(CliError::Other(
            "--tls on: no certificate (give --tls-cert and --tls-key, or set [cluster.tls] in cluster.toml)"
                .into(),
        )),
        (ServeTls::Auto, None) if a.tls_client_ca.is_some() => Err(CliError::Other(
            "--tls-client-ca: the service has no certificate of its own (--tls-cert, --tls-key)"
                .into(),
        )),
        (ServeTls::Auto, None) => {
            warn("no certificate (--tls-cert, or [cluster.tls] in cluster.toml)");
            Ok(None)
        }
        (_, Some((cert, key))) => {
            adisk_core::tls::ServiceTls::load(&cert, &key, a.tls_client_ca.as_deref())
                .map(Some)
                .map_err(|e| CliError::Other(e.to_string()))
        }
    }
}

/// The lock a server started by `adisk up` holds in the cluster directory.
const LOCK_FILE: &str = "serve.lock";

/// `adisk user` commands.
#[derive(clap::Subcommand, Debug)]
pub enum UserCommand {
    /// Add a user (or set its password) in the users file; the password is read from the
    /// first line of standard input.
    Add {
        /// User name.
        name: String,
        /// The users file (default: `DIR/users.toml`).
        #[arg(long)]
        users: Option<PathBuf>,
        /// The user may install WebAssembly disklets through the service (`adisk disklet
        /// install --connect`); without it, such a request is refused.
        #[arg(long)]
        allow_disklet_install: bool,
    },
}

fn users_path(dir: &Path, given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| dir.join("users.toml"))
}

/// The users file, made with an `admin` user (random password in `DIR/admin.password`) when
/// it does not exist.
fn users(dir: &Path, path: &Path) -> Result<Users, CliError> {
    if !path.exists() {
        let password = random_secret();
        let secret = dir.join("admin.password");
        write_private(&secret, format!("{password}\n").as_bytes())
            .map_err(|e| CliError::Other(format!("{}: {e}", secret.display())))?;
        Users::add(path, "admin", &password, true).map_err(|e| CliError::Other(e.to_string()))?;
        eprintln!(
            "made {} with user `admin`; its password is in {}",
            path.display(),
            secret.display()
        );
    }
    Users::load(path).map_err(|e| CliError::Other(e.to_string()))
}

pub async fn serve(dir: &Path, a: ServeArgs) -> Result<(), CliError> {
    let _lock = if a.managed {
        Some(take_lock(dir)?)
    } else {
        None
    };
    let access = match a.auth.as_str() {
        "users" => Access::Users(users(dir, &users_path(dir, a.users.clone()))?),
        "none" => {
            eprintln!(
                "WARNING: --auth none: anyone who can reach {} may run queries on this cluster",
                a.listen
            );
            Access::Open
        }
        other => {
            return Err(CliError::Other(format!(
                "--auth {other}: expected `users` or `none`"
            )));
        }
    };
    let cluster = Arc::new(crate::common::connect(dir).await?);
    let tls = service_tls(&a, &cluster)?;
    let options = SqlOptions {
        result_cap_bytes: Some(a.max_result_mib.max(1) << 20),
        ..a.engine.options(a.engine.offload()?)
    };
    let admission = Admission {
        running: a.max_running.max(1),
        queued: a.max_queued,
    };
    let per_disk = match a.disk_endpoints.as_str() {
        "on" => true,
        "off" => false,
        other => {
            return Err(CliError::Other(format!(
                "--disk-endpoints {other}: expected `on` or `off`"
            )));
        }
    };
    let endpoints = Endpoints {
        per_disk,
        ttl: Duration::from_secs(a.endpoint_ttl_secs.clamp(1, 3600)),
    };
    let service = SqlService::new(cluster, options, access, admission, endpoints);
    service.traces().set_keep(a.keep_traces);
    if a.metrics_listen != "off" {
        let listener = tokio::net::TcpListener::bind(&a.metrics_listen)
            .await
            .map_err(|e| CliError::Other(format!("listening on {}: {e}", a.metrics_listen)))?;
        let address = listener
            .local_addr()
            .map_err(|e| CliError::Other(e.to_string()))?;
        if let Some(f) = &a.metrics_port_file {
            std::fs::write(f, address.to_string())
                .map_err(|e| CliError::Other(format!("{}: {e}", f.display())))?;
        }
        println!("metrics at http://{address}/metrics");
        tokio::spawn(adisk_server::metrics::serve_http(
            listener,
            service.metrics(),
            service.cluster(),
        ));
    }
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| CliError::Other(format!("listening on {}: {e}", a.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| CliError::Other(e.to_string()))?;
    if let Some(f) = &a.port_file {
        std::fs::write(f, address.to_string())
            .map_err(|e| CliError::Other(format!("{}: {e}", f.display())))?;
    }
    let scheme = if tls.is_some() { "grpc+tls" } else { "grpc" };
    println!(
        "serving Arrow Flight SQL on {scheme}://{address} (cluster {}{})",
        dir.display(),
        match &tls {
            Some(t) if t.mutual() => "; clients show a certificate",
            _ => "",
        }
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| CliError::Other(format!("installing a SIGTERM handler: {e}")))?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    adisk_server::serve(service, listener, tls.as_ref(), shutdown)
        .await
        .map_err(|e| CliError::Other(format!("serving: {e}")))
}

pub fn user(dir: &Path, command: UserCommand) -> Result<(), CliError> {
    match command {
        UserCommand::Add {
            name,
            users,
            allow_disklet_install,
        } => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(|e| CliError::Other(format!("reading the password: {e}")))?;
            let password = line.trim_end_matches(['\n', '\r']);
            if password.is_empty() {
                return Err(CliError::Other(
                    "an empty password: give it on the first line of standard input".into(),
                ));
            }
            if name.is_empty() || name.contains(':') {
                return Err(CliError::Other(format!(
                    "user name `{name}`: not empty and without `:`"
                )));
            }
            let path = users_path(dir, users);
            Users::add(&path, &name, password, allow_disklet_install)
                .map_err(|e| CliError::Other(e.to_string()))?;
            println!("user `{name}` set in {}", path.display());
            Ok(())
        }
    }
}

/// Takes `DIR/serve.lock` and writes this process's pid in it; refused while another
/// server holds it.
fn take_lock(dir: &Path) -> Result<std::fs::File, CliError> {
    use std::io::{Read, Seek, Write};
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
    if file.try_lock().is_err() {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Err(CliError::Other(format!(
            "{} is already served (pid {})",
            dir.display(),
            holder.trim()
        )));
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| write!(file, "{}", std::process::id()))
        .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
    Ok(file)
}

/// Whether `pid` is the server holding `DIR/serve.lock` (when unsure: not, so it is not
/// signalled).
fn holds_lock(dir: &Path, pid: u32) -> bool {
    crate::common::lock_names(&dir.join(LOCK_FILE), pid).unwrap_or(false)
}

/// Starts `adisk serve --managed` over the cluster in `dir` (logging to `DIR/serve.log`) and
/// waits until it listens; its `[serve]` section of `cluster.toml`.
pub async fn start_managed(
    exe: &Path,
    dir: &Path,
    auth: &str,
    tls_ca: Option<&Path>,
) -> Result<adisk_core::config::ServeSection, CliError> {
    use std::os::unix::process::CommandExt;
    if auth != "users" && auth != "none" {
        return Err(CliError::Other(format!(
            "--serve-auth {auth}: expected `users` or `none`"
        )));
    }
    let port_file = dir.join("serve.address");
    let metrics_file = dir.join("serve.metrics");
    let _ = std::fs::remove_file(&port_file);
    let _ = std::fs::remove_file(&metrics_file);
    let log_path = dir.join("serve.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| CliError::Other(format!("{}: {e}", log_path.display())))?;
    let log2 = log
        .try_clone()
        .map_err(|e| CliError::Other(e.to_string()))?;
    let mut child = std::process::Command::new(exe)
        .arg("--dir")
        .arg(dir)
        .args(["serve", "--managed", "--auth", auth, "--port-file"])
        .arg(&port_file)
        .args(["--tls", if tls_ca.is_some() { "on" } else { "off" }])
        .arg("--metrics-port-file")
        .arg(&metrics_file)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(|e| CliError::Other(format!("starting adisk serve: {e}")))?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let address = loop {
        if let Ok(a) = std::fs::read_to_string(&port_file)
            && !a.trim().is_empty()
        {
            break a.trim().to_string();
        }
        let failed = match child.try_wait() {
            Ok(Some(status)) => Some(format!("exited ({status})")),
            _ if std::time::Instant::now() > deadline => Some("did not listen within 30 s".into()),
            _ => None,
        };
        if let Some(why) = failed {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(CliError::Other(format!(
                "the Flight SQL service {why}:\n{}",
                log.trim()
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let password = dir.join("admin.password");
    Ok(adisk_core::config::ServeSection {
        address,
        metrics_address: std::fs::read_to_string(&metrics_file).ok(),
        pid: Some(child.id()),
        users_file: (auth == "users").then(|| dir.join("users.toml")),
        admin_password_file: (auth == "users" && password.exists()).then_some(password),
        tls_ca: tls_ca.map(Path::to_path_buf),
    })
}

/// Stops the server `adisk up` started (SIGTERM, then SIGKILL after 5 s): only a process that
/// holds `DIR/serve.lock` naming it, never a pid the OS gave to another process since.
pub async fn stop_managed(dir: &Path, serve: &adisk_core::config::ServeSection) {
    let Some(pid) = serve.pid.filter(|p| holds_lock(dir, *p)) else {
        return;
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    // SAFETY: signalling the server process this cluster's `up` started (it holds the lock).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    loop {
        crate::common::reap(pid);
        if !crate::common::alive(pid) {
            return;
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
