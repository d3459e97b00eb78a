//! `adisk serve` (the host as a Flight SQL service) and `adisk user add`.
use crate::CliError;
use crate::sql_cmd::EngineArgs;
use adisk_server::auth::{Users, random_secret, write_private};
use adisk_server::{Access, Admission, SqlService};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Queries running at once.
    #[arg(long, default_value_t = 16)]
    pub max_running: usize,
    /// Queries waiting for a turn; one more is refused with a `busy` error.
    #[arg(long, default_value_t = 64)]
    pub max_queued: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
}

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
        Users::add(path, "admin", &password).map_err(|e| CliError::Other(e.to_string()))?;
        eprintln!(
            "made {} with user `admin`; its password is in {}",
            path.display(),
            secret.display()
        );
    }
    Users::load(path).map_err(|e| CliError::Other(e.to_string()))
}

pub async fn serve(dir: &Path, a: ServeArgs) -> Result<(), CliError> {
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
    let cluster = Arc::new(crate::connect(dir).await?);
    let options = a.engine.options(a.engine.offload()?);
    let admission = Admission {
        running: a.max_running.max(1),
        queued: a.max_queued,
    };
    let service = SqlService::new(cluster, options, access, admission);
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
    println!(
        "serving Arrow Flight SQL on grpc://{address} (cluster {})",
        dir.display()
    );
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    adisk_server::serve(service, listener, shutdown)
        .await
        .map_err(|e| CliError::Other(format!("serving: {e}")))
}

pub fn user(dir: &Path, command: UserCommand) -> Result<(), CliError> {
    match command {
        UserCommand::Add { name, users } => {
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
            Users::add(&path, &name, password).map_err(|e| CliError::Other(e.to_string()))?;
            println!("user `{name}` set in {}", path.display());
            Ok(())
        }
    }
}
