//! `adisk cert`: the cluster's certificate authority and its members' certificates, for
//! clusters of several machines (see docs/deploy.md). Keys are written readable by their owner
//! only; nothing is overwritten.
use crate::common::CliError;
use adisk_core::tls::{self, Pem};
use std::path::{Path, PathBuf};

/// `adisk cert` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum CertCommand {
    /// Make the cluster's certificate authority: OUT/ca.pem (give it to every member and
    /// client) and OUT/ca.key (keep it on one machine, away from the disks).
    Ca {
        /// The cluster's name (in the CA's subject).
        #[arg(long, default_value = "adisk")]
        cluster: String,
        /// Directory to write to (made if missing).
        #[arg(long)]
        out: PathBuf,
    },
    /// Issue a member's certificate (host, disk, or the Flight SQL service) under the CA in
    /// --ca: OUT/NAME.pem and OUT/NAME.key.
    Issue {
        /// Directory of the CA (`ca.pem`, `ca.key`).
        #[arg(long)]
        ca: PathBuf,
        /// The member's name (e.g. `host`, `disk-0`): the files' names and the subject.
        #[arg(long)]
        name: String,
        /// A host name or IP address clients outside the cluster reach it by (repeatable:
        /// the Flight SQL service's, a disk's for per-disk endpoints). Members check each
        /// other by the cluster's CA alone.
        #[arg(long = "host")]
        hosts: Vec<String>,
        /// Directory to write to (made if missing).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Runs an `adisk cert` subcommand.
pub fn run(command: &CertCommand) -> Result<(), CliError> {
    match command {
        CertCommand::Ca { cluster, out } => {
            let ca = tls::make_authority(cluster).map_err(|e| CliError::Other(e.to_string()))?;
            write_pair(out, "ca", &ca)?;
            println!(
                "certificate authority of cluster {cluster}: {} (for every member and client), {} (keep it safe)",
                out.join("ca.pem").display(),
                out.join("ca.key").display()
            );
        }
        CertCommand::Issue {
            ca,
            name,
            hosts,
            out,
        } => {
            let authority = read_authority(ca)?;
            let pem =
                tls::issue(&authority, name, hosts).map_err(|e| CliError::Other(e.to_string()))?;
            write_pair(out, name, &pem)?;
            println!(
                "certificate of {name}: {}, key {}",
                out.join(format!("{name}.pem")).display(),
                out.join(format!("{name}.key")).display()
            );
        }
    }
    Ok(())
}

/// The CA of directory `dir`.
pub fn read_authority(dir: &Path) -> Result<Pem, CliError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path)
            .map_err(|e| CliError::Other(format!("reading {}: {e}", path.display())))
    };
    Ok(Pem {
        cert: read("ca.pem")?,
        key: read("ca.key")?,
    })
}

/// Writes `NAME.pem` and `NAME.key` (mode 0600) under `dir`, refusing to overwrite either.
pub fn write_pair(dir: &Path, name: &str, pem: &Pem) -> Result<(), CliError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(CliError::Other(format!(
            "`{name}`: a certificate's name is letters, digits, - _ and ."
        )));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::Other(format!("creating {}: {e}", dir.display())))?;
    let files = [
        (format!("{name}.pem"), &pem.cert, 0o644),
        (format!("{name}.key"), &pem.key, 0o600),
    ];
    if let Some((file, _, _)) = files.iter().find(|(f, _, _)| dir.join(f).exists()) {
        return Err(CliError::Other(format!(
            "{} exists: not overwritten (remove it first to make a new one)",
            dir.join(file).display()
        )));
    }
    for (file, text, mode) in files {
        let path = dir.join(&file);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => CliError::Other(format!(
                    "{} exists: not overwritten (remove it first to make a new one)",
                    path.display()
                )),
                _ => CliError::Other(format!("writing {}: {e}", path.display())),
            })?;
        f.write_all(text.as_bytes())
            .map_err(|e| CliError::Other(format!("writing {}: {e}", path.display())))?;
    }
    Ok(())
}
