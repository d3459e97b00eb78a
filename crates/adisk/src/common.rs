//! What the subcommands share: the error every command reports, connecting to the cluster of
//! a directory, `KEY=VALUE` parameters, whether a process is alive or holds its lock file.

use adisk_core::config::ClusterConfig;
use adisk_host::cluster::Cluster;
use std::path::Path;

/// Every failure the command reports, with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Host-side error.
    #[error(transparent)]
    Host(#[from] adisk_host::HostError),
    /// Config error.
    #[error(transparent)]
    Config(#[from] adisk_core::config::ConfigError),
    /// Disk node error.
    #[error(transparent)]
    Disk(#[from] adisk_disk::DiskNodeError),
    /// Storage error.
    #[error(transparent)]
    Storage(#[from] adisk_storage::StorageError),
    /// Simulator error.
    #[error(transparent)]
    Sim(#[from] adisk_sim::SimError),
    /// Anything else, with a message.
    #[error("{0}")]
    Other(String),
}

/// Reads `DIR/cluster.toml` and connects.
pub async fn connect(dir: &std::path::Path) -> Result<Cluster, CliError> {
    let path = dir.join("cluster.toml");
    if !path.exists() {
        return Err(CliError::Other(format!(
            "no cluster at {} (run `adisk up` first, or set --dir / ADISK_HOME)",
            dir.display()
        )));
    }
    let config = ClusterConfig::load(&path)?;
    Ok(Cluster::connect(config).await?.keep_link_figures_in(dir))
}

/// The cluster in `dir`, each disk connected to only when first asked (see
/// [`Cluster::connect_lazy`]).
pub fn connect_lazy(dir: &std::path::Path) -> Result<Cluster, CliError> {
    let path = dir.join("cluster.toml");
    if !path.exists() {
        return Err(CliError::Other(format!(
            "no cluster at {} (run `adisk up` first, or set --dir / ADISK_HOME)",
            dir.display()
        )));
    }
    Ok(Cluster::connect_lazy(ClusterConfig::load(&path)?)?)
}

/// `KEY=VALUE` as a pair (the value may hold `=`).
pub fn parse_param(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .ok_or_else(|| format!("`{s}` is not KEY=VALUE"))
}

/// Whether the lock file at `path` is held and names `pid`: `Some(false)` when it is missing,
/// not held or names another process; `None` when it cannot be checked.
pub fn lock_names(path: &Path, pid: u32) -> Option<bool> {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return Some(false);
    };
    match file.try_lock_shared() {
        Ok(()) => Some(false), // nobody holds it: the process is gone
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            Some(file.read_to_string(&mut holder).is_ok() && holder.trim() == pid.to_string())
        }
        Err(std::fs::TryLockError::Error(_)) => None,
    }
}

/// Whether process `pid` exists.
pub fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence and permission.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// Collects process `pid` if it is our child and has exited (no zombie is left).
pub fn reap(pid: u32) {
    let mut status = 0;
    // SAFETY: non-blocking wait on a pid; harmless if it is not our child.
    unsafe {
        libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG);
    }
}
