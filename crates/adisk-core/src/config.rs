//! `cluster.toml`: which disks form a cluster, where they listen, and their DiskOS limits.
//!
//! ```toml
//! [cluster]
//! name = "local"
//! host_link_mbps = 0          # 0: unthrottled
//! key_file = "cluster.key"    # the cluster's secret (made by `adisk up`; see auth)
//! disk_timeout_ms = 10000     # a disk silent this long is unreachable
//!
//! costs = "costs.toml"        # `auto`'s measured costs (`adisk calibrate`; absent: built-in)
//!
//! [cluster.tls]               # TLS on every link (absent: plaintext; see crate::tls)
//! ca = "tls/ca.pem"           # the cluster's CA (`adisk cert ca`)
//! cert = "tls/host.pem"       # the host's certificate and key (`adisk cert issue`)
//! key = "tls/host.key"
//!
//! [[disk]]
//! id = 0
//! address = "127.0.0.1:50051"
//! dir = "/abs/path/disk-0"    # informational for remote disks; used by `adisk up/down`
//! memory_mib = 64
//! buffer_kib = 256
//! buffers_per_stream = 2
//! pid = 12345                 # written by `adisk up`, absent for remote disks
//! ```
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Errors reading or validating a cluster configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read cluster config {path}: {source}")]
    Read {
        /// File that was being read.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the schema.
    #[error("malformed cluster config {path}: {message}")]
    Parse {
        /// File that was being parsed.
        path: PathBuf,
        /// What the parser said (includes line/column and key).
        message: String,
    },
    /// The file parsed but a value is not acceptable.
    #[error("invalid cluster config {path}: key `{key}`: {reason}")]
    Invalid {
        /// File.
        path: PathBuf,
        /// Offending key, e.g. `disk[2].memory_mib`.
        key: String,
        /// Why it is rejected.
        reason: String,
    },
    /// The file could not be written.
    #[error("cannot write cluster config {path}: {source}")]
    Write {
        /// File.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
}

/// The `[cluster]` table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// Free-form name.
    #[serde(default = "default_name")]
    pub name: String,
    /// Limit on what all disks together may send the host, in Mbit/s (0: unlimited).
    #[serde(default)]
    pub host_link_mbps: u64,
    /// How disk-to-disk streams travel: straight between disks, or through the host.
    #[serde(default)]
    pub exchange: ExchangeMode,
    /// The cluster's shared secret ([`crate::auth`]); relative paths are read from the
    /// directory of `cluster.toml`. None: the disks accept requests without credentials (only
    /// for disks started with `--insecure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// How long the host waits for a disk that stopped answering before it declares it
    /// unreachable, in milliseconds ([`Deadlines`]).
    #[serde(default = "default_disk_timeout_ms")]
    pub disk_timeout_ms: u64,
    /// Limit on the router between disk groups (chiu's disk groups behind a router): what all
    /// disk-to-disk streams crossing from one group to another may carry together, in Mbit/s
    /// (0: unlimited). Only with disks in more than one group.
    #[serde(default)]
    pub router_mbps: u64,
    /// TLS of every link between members ([`crate::tls`]): the cluster's CA and the host's
    /// own certificate and key. Absent: plaintext links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFiles>,
    /// The cost file `auto` prices plans with (`adisk calibrate`, [`crate::calibration`]);
    /// relative paths are read from the directory of `cluster.toml`. Absent: built-in rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub costs: Option<PathBuf>,
}

/// A member's TLS files (PEM): `[cluster.tls]` for the host, `adisk disk --tls-*` for a
/// disk. Relative paths are read from the directory of `cluster.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The cluster's CA certificate (`adisk cert ca`).
    pub ca: PathBuf,
    /// The member's certificate (`adisk cert issue`).
    pub cert: PathBuf,
    /// The member's private key.
    pub key: PathBuf,
}

impl TlsFiles {
    /// Reads the three files.
    ///
    /// # Errors
    /// [`crate::tls::TlsError`] naming the file that is missing or not PEM.
    pub fn load(&self) -> Result<crate::tls::TlsMaterial, crate::tls::TlsError> {
        crate::tls::TlsMaterial::load(&self.ca, &self.cert, &self.key)
    }

    fn resolve(&mut self, dir: &Path) {
        for p in [&mut self.ca, &mut self.cert, &mut self.key] {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }
}

/// Default of `[cluster] disk_timeout_ms`.
pub const DEFAULT_DISK_TIMEOUT_MS: u64 = 10_000;

fn default_disk_timeout_ms() -> u64 {
    DEFAULT_DISK_TIMEOUT_MS
}

/// How long a member waits for a peer that stopped answering (a stopped or hung process whose
/// kernel still accepts connections, a cut link).
///
/// Every connection sends HTTP/2 pings every quarter of the timeout and is closed when one
/// goes unanswered for half of it, so a stream from or to a silent peer fails within the
/// timeout even while no data flows; every control request (status, catalog, statistics,
/// drop, shutdown) and every connection attempt has the whole timeout as its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// The timeout.
    pub timeout: std::time::Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines::from_ms(DEFAULT_DISK_TIMEOUT_MS)
    }
}

impl Deadlines {
    /// Deadlines for a timeout of `ms` milliseconds.
    pub fn from_ms(ms: u64) -> Self {
        Deadlines {
            timeout: std::time::Duration::from_millis(ms),
        }
    }
    /// Interval between keepalive pings.
    pub fn ping_interval(&self) -> std::time::Duration {
        self.timeout / 4
    }
    /// How long a ping may go unanswered before the connection is closed.
    pub fn ping_timeout(&self) -> std::time::Duration {
        self.timeout / 2
    }
}

/// How disk-to-disk (exchange) streams travel.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ExchangeMode {
    /// Disk to disk over their own connection (uysal's direct communication; chiu's fully
    /// distributed smart disks).
    #[default]
    Direct,
    /// Every stream passes through the host's relay, on the host link (uysal's communication
    /// restricted to the front-end; chiu's partially distributed system).
    ViaHost,
}

impl std::fmt::Display for ExchangeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExchangeMode::Direct => "direct",
            ExchangeMode::ViaHost => "via-host",
        })
    }
}

impl std::str::FromStr for ExchangeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "direct" => Ok(ExchangeMode::Direct),
            "via-host" => Ok(ExchangeMode::ViaHost),
            other => Err(format!(
                "unknown exchange mode `{other}` (direct, via-host)"
            )),
        }
    }
}

/// The general-purpose codec a disk compresses the Parquet pages it writes with (on top of
/// Parquet's own dictionary and run-length encodings, which every codec keeps).
///
/// Decompressing is the disk's own CPU work on every page a scan touches, even when a filter
/// keeps one row of it; compress when the storage medium is the bottleneck
/// (`read_mbps`), not the disk's processor.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    /// Dictionary and run-length encodings only.
    #[default]
    None,
    /// LZ4 (raw blocks): little smaller than `none` for TPC-H, cheap to decode.
    Lz4,
    /// Snappy.
    Snappy,
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Snappy => "snappy",
        })
    }
}

impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "snappy" => Ok(Compression::Snappy),
            other => Err(format!("unknown compression `{other}` (none, lz4, snappy)")),
        }
    }
}

fn default_name() -> String {
    "local".to_string()
}

/// One `[[disk]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DiskConfig {
    /// Disk number, 0..N-1, unique.
    pub id: u32,
    /// `host:port` the disk's Flight server listens on.
    pub address: String,
    /// Data directory of the disk (used by local clusters).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// DiskOS memory budget.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u64,
    /// Size of one stream buffer.
    #[serde(default = "default_buffer_kib")]
    pub buffer_kib: u64,
    /// Buffers per stream (2 = double buffering).
    #[serde(default = "default_buffers_per_stream")]
    pub buffers_per_stream: u32,
    /// Storage read rate limit of this disk, in Mbit/s (0: unthrottled).
    #[serde(default)]
    pub read_mbps: u64,
    /// Codec of the Parquet pages this disk writes (loads, job results, repairs).
    #[serde(default)]
    pub compression: Compression,
    /// Process id when started by `adisk up`.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The disk group behind a router this disk belongs to (None: group 0). Streams between
    /// disks of different groups pass through the host's router ([`ClusterSection::router_mbps`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u32>,
    /// `host:port` of the disk's Prometheus endpoint (`GET /metrics`), when it serves one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_address: Option<String>,
    /// CPU limit of the disk process, in cores' worth of time (`adisk disk --cpus`: a cgroup
    /// quota, to emulate a slower disk CPU); None: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Emulated CPU speed of the disk, relative to the machine's cores (`adisk disk
    /// --cpu-speed`: DiskOS pauses after each compute step); None: the machine's speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_speed: Option<f64>,
}

fn default_memory_mib() -> u64 {
    64
}
fn default_buffer_kib() -> u64 {
    256
}
fn default_buffers_per_stream() -> u32 {
    2
}

/// A whole `cluster.toml`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// `[cluster]`.
    pub cluster: ClusterSection,
    /// `[[disk]]` entries, ordered by id.
    #[serde(rename = "disk")]
    pub disks: Vec<DiskConfig>,
    /// `[serve]`: the host's Arrow Flight SQL service, when `adisk up` started one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<ServeSection>,
}

/// `[serve]` of `cluster.toml`: where the host's Flight SQL service listens and how a local
/// user logs in to it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// `host:port` it listens on (clients use `grpc://host:port`).
    pub address: String,
    /// `host:port` of its Prometheus endpoint (`http://host:port/metrics`).
    #[serde(default)]
    pub metrics_address: Option<String>,
    /// Process id, when started by `adisk up`.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The users file (argon2id hashes).
    #[serde(default)]
    pub users_file: Option<PathBuf>,
    /// The file holding the `admin` user's password (mode 0600), if `adisk serve` made it.
    #[serde(default)]
    pub admin_password_file: Option<PathBuf>,
    /// When it serves TLS (`grpc+tls://`): the CA certificate that signed its certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
}

/// Upper bound on disks in one cluster (a declared limit, not a tuning knob).
pub const MAX_DISKS: usize = 1024;

impl ClusterConfig {
    /// Reads and validates `path`.
    ///
    /// # Errors
    /// [`ConfigError::Read`], [`ConfigError::Parse`] (with line and key), [`ConfigError::Invalid`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Self::parse(&text, path)?;
        if let (Some(key), Some(dir)) = (&config.cluster.key_file, path.parent())
            && key.is_relative()
        {
            config.cluster.key_file = Some(dir.join(key));
        }
        if let (Some(tls), Some(dir)) = (&mut config.cluster.tls, path.parent()) {
            tls.resolve(dir);
        }
        if let (Some(costs), Some(dir)) = (&config.cluster.costs, path.parent())
            && costs.is_relative()
        {
            config.cluster.costs = Some(dir.join(costs));
        }
        Ok(config)
    }

    /// The verifier (and signer) of the cluster's secret, if `key_file` names one.
    ///
    /// # Errors
    /// [`crate::auth::AuthError::Key`] when the file cannot be read or is not private.
    pub fn verifier(&self) -> Result<Option<crate::auth::Verifier>, crate::auth::AuthError> {
        let Some(path) = &self.cluster.key_file else {
            return Ok(None);
        };
        Ok(Some(crate::auth::Verifier::new(
            crate::auth::ClusterKey::load(path)?,
        )))
    }

    /// The host's TLS material, if `[cluster.tls]` names it.
    ///
    /// # Errors
    /// [`crate::tls::TlsError`] naming a file that is missing or not PEM.
    pub fn tls(&self) -> Result<Option<crate::tls::TlsMaterial>, crate::tls::TlsError> {
        self.cluster.tls.as_ref().map(TlsFiles::load).transpose()
    }

    /// How long the host waits for a silent disk.
    pub fn deadlines(&self) -> Deadlines {
        Deadlines::from_ms(self.cluster.disk_timeout_ms)
    }

    /// Whether `address` is one of this cluster's disks.
    pub fn is_member(&self, address: &str) -> bool {
        self.disks.iter().any(|d| d.address == address)
    }

    /// The group of the disk at `address` (None: not a disk of this cluster).
    pub fn group_at(&self, address: &str) -> Option<u32> {
        self.disks
            .iter()
            .find(|d| d.address == address)
            .map(|d| d.group.unwrap_or(0))
    }

    /// The group of disk `id` (0 for a disk with none, or an unknown id).
    pub fn group_of(&self, id: u32) -> u32 {
        self.disks
            .iter()
            .find(|d| d.id == id)
            .and_then(|d| d.group)
            .unwrap_or(0)
    }

    /// Whether the disks sit in more than one group (streams between groups then pass the
    /// router).
    pub fn grouped(&self) -> bool {
        let first = self.disks.first().map_or(0, |d| d.group.unwrap_or(0));
        self.disks.iter().any(|d| d.group.unwrap_or(0) != first)
    }

    /// Parses and validates TOML text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: ClusterConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim().to_string(),
        })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Checks ids, addresses and limits.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            key,
            reason,
        };
        if self.disks.is_empty() {
            return Err(invalid(
                "disk".into(),
                "a cluster needs at least one [[disk]]".into(),
            ));
        }
        if self.disks.len() > MAX_DISKS {
            return Err(invalid("disk".into(), format!("at most {MAX_DISKS} disks")));
        }
        if !(100..=3_600_000).contains(&self.cluster.disk_timeout_ms) {
            return Err(invalid(
                "cluster.disk_timeout_ms".into(),
                "must be 100..=3600000".into(),
            ));
        }
        for (i, disk) in self.disks.iter().enumerate() {
            if disk.id as usize != i {
                return Err(invalid(
                    format!("disk[{i}].id"),
                    format!(
                        "ids must be 0..N-1 in order; found {} at position {i}",
                        disk.id
                    ),
                ));
            }
            if disk.address.parse::<std::net::SocketAddr>().is_err() && !disk.address.contains(':')
            {
                return Err(invalid(
                    format!("disk[{i}].address"),
                    format!("`{}` is not host:port", disk.address),
                ));
            }
            if disk.memory_mib == 0 || disk.memory_mib > 1 << 20 {
                return Err(invalid(
                    format!("disk[{i}].memory_mib"),
                    "must be 1..=1048576".into(),
                ));
            }
            if disk.buffer_kib == 0
                || disk.buffer_kib * 1024 * u64::from(disk.buffers_per_stream.max(1))
                    > disk.memory_mib * 1024 * 1024
            {
                return Err(invalid(
                    format!("disk[{i}].buffer_kib"),
                    "must be > 0 and a stream's buffers must fit in memory_mib".into(),
                ));
            }
            if disk.buffers_per_stream == 0 || disk.buffers_per_stream > 64 {
                return Err(invalid(
                    format!("disk[{i}].buffers_per_stream"),
                    "must be 1..=64".into(),
                ));
            }
        }
        Ok(())
    }

    /// Writes the config as TOML, via a temporary file and a rename.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let text = toml::to_string_pretty(self).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|source| ConfigError::Write {
                path: path.to_path_buf(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let ok = "[cluster]\nname='x'\n[[disk]]\nid=0\naddress='127.0.0.1:1'\n";
        let c = ClusterConfig::parse(ok, Path::new("c.toml")).unwrap();
        assert_eq!(c.disks[0].memory_mib, 64);
        let unknown = "[cluster]\n[[disk]]\nid=0\naddress='127.0.0.1:1'\nmemory_mb=3\n";
        let e = ClusterConfig::parse(unknown, Path::new("c.toml")).unwrap_err();
        assert!(e.to_string().contains("memory_mb"), "{e}");
        let bad_id = "[cluster]\n[[disk]]\nid=3\naddress='127.0.0.1:1'\n";
        let e = ClusterConfig::parse(bad_id, Path::new("c.toml")).unwrap_err();
        assert!(e.to_string().contains("disk[0].id"), "{e}");
        let garbage = "[cluster\n";
        assert!(matches!(
            ClusterConfig::parse(garbage, Path::new("c.toml")),
            Err(ConfigError::Parse { .. })
        ));
    }
}
