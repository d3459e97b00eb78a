//! The replay configuration: what to replay a trace on. A TOML file (`--config FILE`),
//! command-line flags that override it, and the recording's own values for every key left out.

use super::trace::Recorded;
use crate::SimError;
use crate::model::disk::DiskSpec;
use crate::model::ssd::SsdSpec;
use serde::{Deserialize, Serialize};

/// Largest number of disks a replay simulates.
pub const MAX_DISKS: u32 = 100_000;
/// Largest number of chunks each disk's data is cut into.
pub const MAX_CHUNKS_PER_DISK: u32 = 4096;
/// Largest `disks × chunks_per_disk`: bounds the events of one job (about six per chunk) and
/// its event list (every chunk's read is queued at the job's start, 32 bytes each).
pub const MAX_CHUNKS_PER_JOB: u64 = 1_000_000;
/// Largest number of cores of a disk or of the host.
pub const MAX_CPUS: f64 = 1024.0;
/// Chunks per disk when not given (fewer when `disks × 32` would pass [`MAX_CHUNKS_PER_JOB`]).
pub const DEFAULT_CHUNKS_PER_DISK: u32 = 32;

/// The default chunks per disk for `disks` disks.
pub fn default_chunks_per_disk(disks: u32) -> u32 {
    let fit = MAX_CHUNKS_PER_JOB / disks.max(1) as u64;
    fit.clamp(1, DEFAULT_CHUNKS_PER_DISK as u64) as u32
}

/// What serves a disk's reads.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StorageKind {
    /// As in the trace: reading costs the measured decode CPU, plus the recorded (or given)
    /// read-rate throttle when there is one.
    #[default]
    Recorded,
    /// A hard drive (`model::disk`), `[hdd]` or [`default_hdd`].
    Hdd,
    /// An SSD (`model::ssd`), `[ssd]` or [`default_ssd`].
    Ssd,
}

/// How a job's recorded per-disk work is spread over the replayed disks.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SkewMode {
    /// Recorded disks' data laid end to end and cut into equal runs, one per replayed disk:
    /// the same disks replay each recorded disk exactly; more disks split each recorded disk
    /// (keeping its max/mean skew); fewer merge neighbours.
    #[default]
    Recorded,
    /// Every replayed disk gets the mean per-disk work (no skew).
    Mean,
}

/// What a slower disk processor (`disk_cpu_speed` below 1) slows.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CpuSlows {
    /// All of a disk's CPU: its jobs' steps and the process's transport and runtime, as a
    /// slower processor would.
    #[default]
    Processor,
    /// Only its jobs' compute steps (reading, decoding, the stages), as the runtime's
    /// `--disk-cpu-speed` emulation does: it pauses after each step, and the transport, IPC
    /// encoding and the runtime's own threads run at the machine's speed.
    Steps,
}

/// A rate as written in the file or on the command line: bytes per second, or `"unlimited"`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum RateValue {
    /// Bytes per second.
    BytesPerSecond(f64),
    /// Only `"unlimited"` is accepted.
    Word(String),
}

impl std::str::FromStr for RateValue {
    type Err = String;
    fn from_str(s: &str) -> Result<RateValue, String> {
        if s == "unlimited" {
            return Ok(RateValue::Word(s.into()));
        }
        s.parse::<f64>()
            .map(RateValue::BytesPerSecond)
            .map_err(|_| format!("expected bytes per second or `unlimited`, got `{s}`"))
    }
}

/// The configuration file (every key optional: left out = as recorded).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReplayFile {
    /// Number of disks.
    pub disks: Option<u32>,
    /// Disk CPU speed relative to the recording's (0.5 = CPU costs ×2).
    pub disk_cpu_speed: Option<f64>,
    /// What the disk CPU speed slows: `processor` (all of it, default) or `steps`.
    pub disk_cpu_slows: Option<CpuSlows>,
    /// Cores per disk (fractional = a share of one core).
    pub disk_cpus: Option<f64>,
    /// Host CPU speed relative to the recording's.
    pub host_cpu_speed: Option<f64>,
    /// Host cores.
    pub host_cpus: Option<u32>,
    /// Cores of one machine the host and every disk share (a local cluster); 0: each on its
    /// own machine.
    pub shared_cpus: Option<f64>,
    /// Per-disk link to the host, bytes/s or `"unlimited"`.
    pub host_link_bytes_per_s: Option<RateValue>,
    /// The host's shared ingress limit, bytes/s or `"unlimited"` (default unlimited).
    pub host_nic_bytes_per_s: Option<RateValue>,
    /// The ingress limit as a token bucket: seconds of its rate that may pass at once, the
    /// bucket full when the request starts (default 0: a plain rate). The runtime's host-link
    /// throttle holds 0.05 s.
    pub host_nic_burst_s: Option<f64>,
    /// Per-disk link to other disks, bytes/s or `"unlimited"`.
    pub disk_link_bytes_per_s: Option<RateValue>,
    /// Read-rate throttle with `storage = "recorded"`, bytes/s or `"unlimited"`.
    pub disk_read_bytes_per_s: Option<RateValue>,
    /// The read throttle as a token bucket, seconds of its rate (default 0; the runtime's
    /// `--disk-read-mbps` holds 0.02 s).
    pub disk_read_burst_s: Option<f64>,
    /// `recorded`, `hdd` or `ssd`.
    pub storage: Option<StorageKind>,
    /// Host↔disk round trip, ns.
    pub rtt_ns: Option<u64>,
    /// Chunks each disk's data is cut into (default 32, fewer beyond 31,250 disks).
    pub chunks_per_disk: Option<u32>,
    /// `recorded` or `mean`.
    pub skew: Option<SkewMode>,
    /// The drive for `storage = "hdd"`.
    pub hdd: Option<DiskSpec>,
    /// The SSD for `storage = "ssd"`.
    pub ssd: Option<SsdSpec>,
}

/// Command-line overrides of the configuration file.
#[derive(clap::Args, Clone, Debug, Default, PartialEq)]
pub struct ReplayOverrides {
    /// Number of disks (data assumed spread evenly over them).
    #[arg(long)]
    pub disks: Option<u32>,
    /// Disk CPU speed relative to the recording's (0.5 = half as fast).
    #[arg(long)]
    pub disk_cpu_speed: Option<f64>,
    /// What the disk CPU speed slows: processor (all of a disk's CPU) or steps (only its jobs'
    /// compute steps, as the runtime's `--disk-cpu-speed` emulation).
    #[arg(long, value_enum)]
    pub disk_cpu_slows: Option<CpuSlows>,
    /// Cores per disk.
    #[arg(long)]
    pub disk_cpus: Option<f64>,
    /// Host CPU speed relative to the recording's.
    #[arg(long)]
    pub host_cpu_speed: Option<f64>,
    /// Host cores.
    #[arg(long)]
    pub host_cpus: Option<u32>,
    /// Cores of one machine the host and every disk share (0: each on its own machine).
    #[arg(long)]
    pub shared_cpus: Option<f64>,
    /// Per-disk host link, bytes/s or `unlimited`.
    #[arg(long)]
    pub host_link_bytes_per_s: Option<RateValue>,
    /// Host's shared ingress, bytes/s or `unlimited`.
    #[arg(long)]
    pub host_nic_bytes_per_s: Option<RateValue>,
    /// The ingress limit's token bucket, seconds of its rate (0: a plain rate).
    #[arg(long)]
    pub host_nic_burst_s: Option<f64>,
    /// Per-disk disk-to-disk link, bytes/s or `unlimited`.
    #[arg(long)]
    pub disk_link_bytes_per_s: Option<RateValue>,
    /// Read throttle with `--storage recorded`, bytes/s or `unlimited`.
    #[arg(long)]
    pub disk_read_bytes_per_s: Option<RateValue>,
    /// The read throttle's token bucket, seconds of its rate (0: a plain rate).
    #[arg(long)]
    pub disk_read_burst_s: Option<f64>,
    /// recorded|hdd|ssd
    #[arg(long, value_enum)]
    pub storage: Option<StorageKind>,
    /// Host↔disk round trip, ns.
    #[arg(long)]
    pub rtt_ns: Option<u64>,
    /// Chunks per disk per job.
    #[arg(long)]
    pub chunks_per_disk: Option<u32>,
    /// recorded|mean
    #[arg(long, value_enum)]
    pub skew: Option<SkewMode>,
}

/// The configuration a replay runs on, every value resolved.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ReplayConfig {
    /// Number of disks.
    pub disks: u32,
    /// Disk CPU speed relative to the recording's.
    pub disk_cpu_speed: f64,
    /// What the disk CPU speed (and the recording's) slows.
    pub disk_cpu_slows: CpuSlows,
    /// Cores per disk.
    pub disk_cpus: f64,
    /// The recording's cores per disk: a job's recorded parallelism grows with
    /// `disk_cpus / recorded_disk_cpus`.
    pub recorded_disk_cpus: f64,
    /// The recording's emulated disk processor speed (1: the machine's): `disk_cpu_speed` is
    /// relative to it.
    pub recorded_disk_cpu_speed: f64,
    /// Host CPU speed relative to the recording's.
    pub host_cpu_speed: f64,
    /// Host cores.
    pub host_cpus: u32,
    /// Cores of the one machine the host and every disk share (`None`: separate machines).
    pub shared_cpus: Option<f64>,
    /// Per-disk host link, bytes/s (`None` = unlimited).
    pub host_link_bytes_per_s: Option<f64>,
    /// Host's shared ingress, bytes/s (`None` = unlimited).
    pub host_nic_bytes_per_s: Option<f64>,
    /// Its token bucket, seconds of its rate (0: none).
    pub host_nic_burst_s: f64,
    /// Per-disk disk-to-disk link, bytes/s (`None` = unlimited).
    pub disk_link_bytes_per_s: Option<f64>,
    /// Read throttle with recorded storage, bytes/s (`None` = none).
    pub disk_read_bytes_per_s: Option<f64>,
    /// Its token bucket, seconds of its rate (0: none).
    pub disk_read_burst_s: f64,
    /// Storage.
    pub storage: StorageKind,
    /// Host↔disk round trip, ns.
    pub rtt_ns: u64,
    /// Chunks per disk per job.
    pub chunks_per_disk: u32,
    /// How per-disk work is spread.
    pub skew: SkewMode,
    /// The drive, when `storage` is `hdd`.
    pub hdd: Option<DiskSpec>,
    /// The SSD, when `storage` is `ssd`.
    pub ssd: Option<SsdSpec>,
    /// A disk job's fixed CPU at a disk and at the host, ns (`stage_ns` and `job_host_ns` of a
    /// cost file, `adisk calibrate`): when set, a job replayed on more or fewer disks than it
    /// ran on pays them per replayed disk instead of per recorded one. `None`: the recorded
    /// CPU is spread with the data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_costs_ns: Option<(f64, f64)>,
}

/// A 7,200 rpm nearline drive of the 2020s (assumption, typical spec sheet: 8.5 ms mean
/// seek, 250 MB/s outer and 130 MB/s inner zone, ~4 TB).
pub fn default_hdd() -> DiskSpec {
    DiskSpec {
        rpm: 7200.0,
        seek_ms_min: 0.8,
        seek_ms_mean: 8.5,
        seek_ms_max: 17.0,
        media_mbps_outer: 250.0,
        media_mbps_inner: 130.0,
        zones: 16,
        cylinders: 250_000,
        heads: 10,
        controller_overhead_us: 100.0,
        cache_bytes: 8 << 20,
    }
}

/// The SATA SSD of the simulator's what-if experiments (`experiments/uysal/ssd-whatif-*.toml`):
/// 8 channels × 4 dies, 16 KB pages, 50/500 µs read/program, 400 MB/s channels, 550 MB/s
/// interface, 20 µs overhead.
pub fn default_ssd() -> SsdSpec {
    SsdSpec {
        channels: 8,
        dies_per_channel: 4,
        page_bytes: 16384,
        page_read_us: 50.0,
        page_program_us: 500.0,
        channel_mbps: 400.0,
        interface_mbps: 550.0,
        overhead_us: 20.0,
        capacity_bytes: 512_000_000_000,
    }
}

/// Read a configuration file.
///
/// # Errors
///
/// [`SimError::Io`] when unreadable, [`SimError::Config`] (file, key, reason) when not valid.
pub fn load(path: &std::path::Path) -> Result<ReplayFile, SimError> {
    let text = std::fs::read_to_string(path).map_err(|e| SimError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    parse(&path.display().to_string(), &text)
}

/// Parse configuration text; `file` names it in errors.
///
/// # Errors
///
/// [`SimError::Config`] when the text is not TOML or holds an unknown key or a wrong type.
pub fn parse(file: &str, text: &str) -> Result<ReplayFile, SimError> {
    toml::from_str(text).map_err(|e| SimError::Config {
        file: file.into(),
        key: e
            .span()
            .map_or("?".into(), |s| format!("at byte {}", s.start)),
        reason: e.message().to_string(),
    })
}

impl ReplayFile {
    /// This file with every flag given on the command line put over it.
    pub fn with_overrides(mut self, o: &ReplayOverrides) -> ReplayFile {
        fn put<T: Clone>(slot: &mut Option<T>, v: &Option<T>) {
            if v.is_some() {
                slot.clone_from(v);
            }
        }
        put(&mut self.disks, &o.disks);
        put(&mut self.disk_cpu_speed, &o.disk_cpu_speed);
        put(&mut self.disk_cpu_slows, &o.disk_cpu_slows);
        put(&mut self.disk_cpus, &o.disk_cpus);
        put(&mut self.host_cpu_speed, &o.host_cpu_speed);
        put(&mut self.host_cpus, &o.host_cpus);
        put(&mut self.shared_cpus, &o.shared_cpus);
        put(&mut self.host_link_bytes_per_s, &o.host_link_bytes_per_s);
        put(&mut self.host_nic_bytes_per_s, &o.host_nic_bytes_per_s);
        put(&mut self.disk_link_bytes_per_s, &o.disk_link_bytes_per_s);
        put(&mut self.disk_read_bytes_per_s, &o.disk_read_bytes_per_s);
        put(&mut self.host_nic_burst_s, &o.host_nic_burst_s);
        put(&mut self.disk_read_burst_s, &o.disk_read_burst_s);
        put(&mut self.storage, &o.storage);
        put(&mut self.rtt_ns, &o.rtt_ns);
        put(&mut self.chunks_per_disk, &o.chunks_per_disk);
        put(&mut self.skew, &o.skew);
        self
    }

    /// Resolve against the recording: every key left out takes the recorded value.
    ///
    /// # Errors
    ///
    /// [`SimError::Config`] naming the key for a value out of range.
    pub fn resolve(&self, file: &str, rec: &Recorded) -> Result<ReplayConfig, SimError> {
        let bad = |key: &str, reason: String| SimError::Config {
            file: file.into(),
            key: key.into(),
            reason,
        };
        let recorded_cpus = if rec.disk_cpus > 0.0 {
            rec.disk_cpus
        } else {
            1.0
        };
        let storage = self.storage.unwrap_or_default();
        let disks = self.disks.unwrap_or(rec.disks);
        let c = ReplayConfig {
            disks,
            disk_cpu_speed: self.disk_cpu_speed.unwrap_or(1.0),
            disk_cpu_slows: self.disk_cpu_slows.unwrap_or_default(),
            disk_cpus: self.disk_cpus.unwrap_or(recorded_cpus),
            recorded_disk_cpus: recorded_cpus,
            recorded_disk_cpu_speed: rec.disk_cpu_speed.unwrap_or(1.0),
            host_cpu_speed: self.host_cpu_speed.unwrap_or(1.0),
            host_cpus: self.host_cpus.unwrap_or(rec.host_cpus.max(1)),
            shared_cpus: self.shared_cpus.or(rec.shared_cpus).filter(|c| *c != 0.0),
            host_link_bytes_per_s: rate(
                &bad,
                "host_link_bytes_per_s",
                &self.host_link_bytes_per_s,
                rec.host_link_bytes_per_s,
            )?,
            host_nic_bytes_per_s: rate(
                &bad,
                "host_nic_bytes_per_s",
                &self.host_nic_bytes_per_s,
                None,
            )?,
            disk_link_bytes_per_s: rate(
                &bad,
                "disk_link_bytes_per_s",
                &self.disk_link_bytes_per_s,
                rec.disk_link_bytes_per_s,
            )?,
            disk_read_bytes_per_s: rate(
                &bad,
                "disk_read_bytes_per_s",
                &self.disk_read_bytes_per_s,
                rec.disk_read_bytes_per_s,
            )?,
            host_nic_burst_s: self.host_nic_burst_s.unwrap_or(0.0),
            disk_read_burst_s: self.disk_read_burst_s.unwrap_or(0.0),
            storage,
            rtt_ns: self.rtt_ns.unwrap_or(rec.rtt_ns),
            chunks_per_disk: self
                .chunks_per_disk
                .unwrap_or_else(|| default_chunks_per_disk(disks)),
            skew: self.skew.unwrap_or_default(),
            hdd: (storage == StorageKind::Hdd)
                .then(|| self.hdd.clone().unwrap_or_else(default_hdd)),
            ssd: (storage == StorageKind::Ssd)
                .then(|| self.ssd.clone().unwrap_or_else(default_ssd)),
            job_costs_ns: None,
        };
        c.validate(&bad)?;
        Ok(c)
    }
}

fn rate(
    bad: &dyn Fn(&str, String) -> SimError,
    key: &str,
    given: &Option<RateValue>,
    recorded: Option<f64>,
) -> Result<Option<f64>, SimError> {
    match given {
        None => Ok(recorded),
        Some(RateValue::Word(w)) if w == "unlimited" => Ok(None),
        Some(RateValue::Word(w)) => Err(bad(
            key,
            format!("expected bytes per second or \"unlimited\", got \"{w}\""),
        )),
        Some(RateValue::BytesPerSecond(v)) if v.is_finite() && *v > 0.0 => Ok(Some(*v)),
        Some(RateValue::BytesPerSecond(v)) => {
            Err(bad(key, format!("must be a positive rate, got {v}")))
        }
    }
}

impl ReplayConfig {
    fn validate(&self, bad: &dyn Fn(&str, String) -> SimError) -> Result<(), SimError> {
        if self.disks == 0 || self.disks > MAX_DISKS {
            return Err(bad(
                "disks",
                format!("must be 1 to {MAX_DISKS}, got {}", self.disks),
            ));
        }
        for (key, v) in [
            ("disk_cpu_speed", self.disk_cpu_speed),
            ("host_cpu_speed", self.host_cpu_speed),
            ("disk_cpus", self.disk_cpus),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= MAX_CPUS) {
                return Err(bad(key, format!("must be > 0 and <= {MAX_CPUS}, got {v}")));
            }
        }
        if let Some(v) = self.shared_cpus
            && !(v.is_finite() && v > 0.0 && v <= MAX_CPUS)
        {
            let reason = format!("must be 0 (none) or > 0 and <= {MAX_CPUS}, got {v}");
            return Err(bad("shared_cpus", reason));
        }
        for (key, v) in [
            ("host_nic_burst_s", self.host_nic_burst_s),
            ("disk_read_burst_s", self.disk_read_burst_s),
        ] {
            if !(v.is_finite() && (0.0..=60.0).contains(&v)) {
                return Err(bad(key, format!("must be 0 to 60 seconds, got {v}")));
            }
        }
        if self.host_cpus == 0 || self.host_cpus as f64 > MAX_CPUS {
            return Err(bad(
                "host_cpus",
                format!("must be 1 to {MAX_CPUS}, got {}", self.host_cpus),
            ));
        }
        if self.chunks_per_disk == 0 || self.chunks_per_disk > MAX_CHUNKS_PER_DISK {
            return Err(bad(
                "chunks_per_disk",
                format!(
                    "must be 1 to {MAX_CHUNKS_PER_DISK}, got {}",
                    self.chunks_per_disk
                ),
            ));
        }
        if self.disks as u64 * self.chunks_per_disk as u64 > MAX_CHUNKS_PER_JOB {
            return Err(bad(
                "chunks_per_disk",
                format!("disks × chunks_per_disk must be at most {MAX_CHUNKS_PER_JOB}"),
            ));
        }
        if let Some(h) = &self.hdd {
            crate::model::disk::validate_spec(h).map_err(|r| bad("hdd", r))?;
        }
        if let Some(s) = &self.ssd {
            crate::model::ssd::SsdModel::new(s).map_err(|r| bad("ssd", r))?;
        }
        Ok(())
    }
}
