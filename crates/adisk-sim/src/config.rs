//! Experiment files: TOML read like DiskSim's parameter files — a catalogue of device
//! specs (`[devices.*]`), named systems that instantiate them (`[systems.<name>]`), the
//! workload (`[workload]`), the system to run (`[run]`), sweep axes (`[sweep]`), named
//! variations (`[[variants]]`) and how to report (`[report]`).
//!
//! Every table rejects unknown keys, so a unit typo in a key name
//! (`bandwidth_mbs` for `bandwidth_mbps`) is an error naming the file, the key and the reason.

use crate::SimError;
use crate::model::cpu::{CpuSpec, OsCosts};
use crate::model::disk::DiskSpec;
use crate::model::link::LinkSpec;
use crate::model::ssd::SsdSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// A whole experiment file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    /// What the experiment is and what it re-creates.
    pub experiment: ExperimentMeta,
    /// Device catalogue.
    #[serde(default)]
    pub devices: Devices,
    /// Named systems (architecture instances).
    pub systems: BTreeMap<String, SystemConfig>,
    /// The workload.
    pub workload: WorkloadConfig,
    /// Which system to run and simulation granularity.
    pub run: RunConfig,
    /// Sweep axes: dotted key → list of values (cartesian product).
    #[serde(default)]
    pub sweep: BTreeMap<String, toml::Value>,
    /// Named variations, each a set of dotted keys to override (applied before the sweep).
    #[serde(default)]
    pub variants: Vec<Variant>,
    /// Reporting.
    #[serde(default)]
    pub report: ReportConfig,
}

/// Experiment metadata.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentMeta {
    /// Short name (used for output file names).
    pub name: String,
    /// Paper key: acharya, uysal, memik, riedel, chiu, or other.
    pub paper: String,
    /// The table/figure of the paper this re-creates.
    pub recreates: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Default seed.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_seed() -> u64 {
    1
}

/// The device catalogue.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Devices {
    /// Disk drives by name.
    #[serde(default)]
    pub disks: BTreeMap<String, DiskSpec>,
    /// SSDs by name.
    #[serde(default)]
    pub ssds: BTreeMap<String, SsdSpec>,
    /// Processors by name.
    #[serde(default)]
    pub cpus: BTreeMap<String, CpuSpec>,
    /// Links by name (in addition to the presets of [`crate::model::link::preset`]).
    #[serde(default)]
    pub links: BTreeMap<String, LinkSpec>,
}

/// Architecture kinds.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ArchKind {
    /// One host, conventional disks on an I/O interconnect (striping, deep async queues).
    SingleHost,
    /// Origin-like SMP: 2-processor boards, block transfers, XIO, FC loops, shared work queues.
    Smp,
    /// Cluster of workstations with local disks and a switched network plus a front-end.
    Cluster,
    /// Active disks on FC loops with a front-end host.
    ActiveDisks,
    /// Smart-disk cluster (memik-…): one smart disk is the central unit, switched network.
    SmartDisks,
    /// Distributed smart-disk groups (chiu-…): groups on switches behind a router, a client.
    SdGroups,
}

/// How peers exchange data.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Communication {
    /// Disk-to-disk (peer-to-peer) transfers.
    #[default]
    Direct,
    /// Every peer-to-peer transfer goes through the front-end / central unit.
    ViaHost,
}

/// One system (architecture instance). Which keys are required depends on `kind`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SystemConfig {
    /// Architecture.
    pub kind: ArchKind,
    /// Total number of disks (including the central unit for smart_disks).
    pub disks: u32,
    /// Drive type (catalogue name under `devices.disks`).
    #[serde(default)]
    pub disk: Option<String>,
    /// SSD type instead of a drive (catalogue name under `devices.ssds`).
    #[serde(default)]
    pub ssd: Option<String>,
    /// Host / front-end / cluster-node / SMP processor (catalogue name).
    #[serde(default)]
    pub host_cpu: Option<String>,
    /// Host / node / board memory, MB.
    #[serde(default)]
    pub host_memory_mb: Option<f64>,
    /// Front-end processor when different from `host_cpu` (cluster).
    #[serde(default)]
    pub frontend_cpu: Option<String>,
    /// Front-end memory, MB, when different from `host_memory_mb` (cluster).
    #[serde(default)]
    pub frontend_memory_mb: Option<f64>,
    /// Processor embedded in each active/smart disk.
    #[serde(default)]
    pub disk_cpu: Option<String>,
    /// Memory in each active/smart disk, MB.
    #[serde(default)]
    pub disk_memory_mb: Option<f64>,
    /// Active disks whose memory was scaled up from a base configuration (uysal-… §4): the
    /// base's memory per disk, MB, and its buffers per stream. A workload whose algorithm
    /// does not take the memory as a parameter (`workload.memory_parametrised = false`)
    /// sizes its tables as in the base; the added memory holds the added stream buffers.
    #[serde(default)]
    pub base_disk_memory_mb: Option<f64>,
    /// Buffers per stream of the base configuration (see `base_disk_memory_mb`).
    #[serde(default)]
    pub base_buffers_per_stream: Option<u32>,
    /// Host OS costs (defaults: uysal-… §3).
    #[serde(default)]
    pub host_os: Option<OsCosts>,
    /// DiskOS costs (defaults: uysal-… §3).
    #[serde(default)]
    pub disk_os: Option<OsCosts>,
    /// I/O interconnect link type (per loop/bus).
    #[serde(default)]
    pub io_link: Option<String>,
    /// Number of loops/buses sharing the I/O traffic.
    #[serde(default = "one_u32")]
    pub io_loops: u32,
    /// Cluster: number of hosts (disks are divided evenly).
    #[serde(default)]
    pub hosts: Option<u32>,
    /// Cluster: disks per host (alternative to `hosts`; hosts = disks / disks_per_host).
    #[serde(default)]
    pub disks_per_host: Option<u32>,
    /// Cluster: per-host I/O bus (PCI) link type.
    #[serde(default)]
    pub host_bus: Option<String>,
    /// Switched networks: port link type.
    #[serde(default)]
    pub net_link: Option<String>,
    /// Switched networks: nodes per switch (0 = one switch for all).
    #[serde(default)]
    pub nodes_per_switch: u32,
    /// Switched networks: uplink type between a switch and the core switch / router.
    #[serde(default)]
    pub uplink: Option<String>,
    /// Switched networks: trunked uplinks per switch.
    #[serde(default = "one_u32")]
    pub uplinks_per_switch: u32,
    /// Front-end / client port link type (defaults to `net_link`).
    #[serde(default)]
    pub frontend_link: Option<String>,
    /// SMP: processors per board.
    #[serde(default = "two_u32")]
    pub cpus_per_board: u32,
    /// SMP: inter-board link type.
    #[serde(default)]
    pub board_link: Option<String>,
    /// SMP: block-transfer engine (shmemput/get) link type.
    #[serde(default)]
    pub bte_link: Option<String>,
    /// SMP: XIO node link type.
    #[serde(default)]
    pub xio_link: Option<String>,
    /// SMP: number of XIO nodes.
    #[serde(default = "one_u32")]
    pub xio_nodes: u32,
    /// SMP / single host: use separate read and write disk groups for shuffling workloads.
    #[serde(default)]
    pub split_read_write: bool,
    /// sd_groups: number of groups (disks are divided evenly).
    #[serde(default = "one_u32")]
    pub groups: u32,
    /// Peer communication: direct or through the front-end / central unit.
    #[serde(default)]
    pub communication: Communication,
    /// DiskOS buffers per stream (2, 4, 8 in uysal-…).
    #[serde(default = "two_u32")]
    pub buffers_per_stream: u32,
    /// Host asynchronous requests outstanding per disk.
    #[serde(default = "four_u32")]
    pub queue_depth: u32,
    /// Requests outstanding per disk in the first (partitioning) phase of sort, when it
    /// differs from `queue_depth` (acharya-… §4: "two for sort phase one").
    #[serde(default)]
    pub queue_depth_sort_phase_one: Option<u32>,
    /// Cost parameters that differ for work executed at this system's workers (e.g. a
    /// different processor family in the disks, riedel-… Table 8); same names as
    /// `workload.cost_overrides`.
    #[serde(default)]
    pub worker_cost_overrides: BTreeMap<String, f64>,
}

fn one_u32() -> u32 {
    1
}
fn two_u32() -> u32 {
    2
}
fn four_u32() -> u32 {
    4
}

/// Bundling relation for memik-… Algorithm 1.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Bundling {
    /// Empty relation: every operation is its own bundle.
    None,
    /// The relation of memik-… §4.2.1.
    #[default]
    Paper,
    /// The paper relation plus the "excessive" tuples of memik-… §6.2.
    Excessive,
}

/// The workload. `kind` selects the model; the other keys are its parameters.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// select, aggregate, group_by, sort, join, datacube, dmine, conv, earth, tpc,
    /// riedel_select, riedel_aggregate, riedel_join, riedel_join5, riedel_query,
    /// tpch_sd, fsc, clustering, fft.
    pub kind: String,
    /// Input size, bytes (total over all disks).
    #[serde(default)]
    pub dataset_bytes: Option<f64>,
    /// Tuple (record) size, bytes.
    #[serde(default)]
    pub tuple_bytes: Option<f64>,
    /// Fraction of tuples selected.
    #[serde(default)]
    pub selectivity: Option<f64>,
    /// Distinct groups (group-by).
    #[serde(default)]
    pub groups: Option<f64>,
    /// Hash-table entry size, bytes.
    #[serde(default)]
    pub entry_bytes: Option<f64>,
    /// Whether the algorithm sizes its tables by the memory it is given (default true).
    /// `false`: on a system with `base_disk_memory_mb` it keeps the base's table size
    /// (uysal-… §3: only sort, join and datacube were traced for several memory sizes).
    #[serde(default)]
    pub memory_parametrised: Option<bool>,
    /// Datacube: distinct values of each group-by attribute.
    #[serde(default)]
    pub cardinalities: Option<Vec<f64>>,
    /// Datacube: the joint distribution of the group-by attributes, which sets every
    /// group-by's size: "independent" (default; uniform and independent) or "hierarchical"
    /// (each attribute determined by the one with more distinct values: a group-by has as
    /// many groups as its attribute with the most distinct values, the lower bound).
    #[serde(default)]
    pub attribute_distribution: Option<String>,
    /// Join: result size, bytes.
    #[serde(default)]
    pub output_bytes: Option<f64>,
    /// Join: bytes of each tuple kept by the projection.
    #[serde(default)]
    pub projected_bytes: Option<f64>,
    /// Convolution: image side, pixels.
    #[serde(default)]
    pub image_side: Option<f64>,
    /// Convolution: kernel side.
    #[serde(default)]
    pub kernel_side: Option<f64>,
    /// Earth: times the input covers the output grid.
    #[serde(default)]
    pub coverage: Option<f64>,
    /// Data mining: transactions.
    #[serde(default)]
    pub transactions: Option<f64>,
    /// Data mining: items in the catalogue.
    #[serde(default)]
    pub items: Option<f64>,
    /// Data mining: average items per transaction.
    #[serde(default)]
    pub items_per_transaction: Option<f64>,
    /// Data mining: fraction of the input repartitioned in the third (eclat) pass.
    #[serde(default)]
    pub repartition_fraction: Option<f64>,
    /// Data mining / clustering: candidates counted in each pass.
    #[serde(default)]
    pub candidates_per_pass: Option<Vec<f64>>,
    /// Frequent-set counting: count or hybrid distribution.
    #[serde(default)]
    pub distribution: Option<String>,
    /// Transactions per disk (chiu-…).
    #[serde(default)]
    pub transactions_per_disk: Option<f64>,
    /// Clustering: records and dimensions.
    #[serde(default)]
    pub records: Option<f64>,
    /// Clustering: dimensions.
    #[serde(default)]
    pub dimensions: Option<f64>,
    /// FFT: matrix side.
    #[serde(default)]
    pub fft_n: Option<f64>,
    /// FFT: bytes per element.
    #[serde(default)]
    pub element_bytes: Option<f64>,
    /// TPC query name (Q1, Q3, Q6, Q12, Q13, Q16; riedel: Q1…Q17).
    #[serde(default)]
    pub query: Option<String>,
    /// memik-… Tables 5–7 size class: small, medium, large.
    #[serde(default)]
    pub size_class: Option<String>,
    /// memik-… Table 6 selectivity class: small, medium, large.
    #[serde(default)]
    pub selectivity_class: Option<String>,
    /// TPC-H scale factor (chiu-…, riedel-…).
    #[serde(default)]
    pub scale_factor: Option<f64>,
    /// Bundling relation (memik-…).
    #[serde(default)]
    pub bundling: Option<Bundling>,
    /// Database page / I/O request size, KB (1 KB = 1024 bytes).
    #[serde(default)]
    pub page_kb: Option<f64>,
    /// chiu-… §4.1.2: place each table in one disk group (table i in group i mod groups)
    /// instead of spreading every table over all disks.
    #[serde(default)]
    pub tables_in_separate_groups: bool,
    /// Bloom filter size, bytes (riedel-…).
    #[serde(default)]
    pub bloom_bytes: Option<f64>,
    /// Override named cost parameters (see [`crate::costs`]); unknown names are rejected.
    #[serde(default)]
    pub cost_overrides: BTreeMap<String, f64>,
    /// A cost file measured by `adisk calibrate` (relative to the experiment file): its
    /// `[sim]` costs, in cycles of the machine it measured, replace the defaults it names;
    /// `cost_overrides` still apply on top.
    #[serde(default)]
    pub calibration: Option<std::path::PathBuf>,
}

/// Which system runs and at what granularity.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Name of a table under `[systems]`.
    pub system: String,
    /// Override the chosen system's disk count.
    #[serde(default)]
    pub disks: Option<u32>,
    /// I/O request size, KB (default 256, the papers' request size).
    #[serde(default = "default_request_kb")]
    pub request_kb: f64,
    /// Message (stream buffer) size, KB.
    #[serde(default = "default_request_kb")]
    pub message_kb: f64,
    /// Upper bound on simulated chunks per phase; larger inputs use chunks that are whole
    /// multiples of the request size (costs per request are still charged per request).
    #[serde(default = "default_max_chunks")]
    pub max_chunks_per_phase: u64,
}

fn default_request_kb() -> f64 {
    256.0
}
fn default_max_chunks() -> u64 {
    16_384
}

/// A named variation.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Label shown in tables and figures.
    pub label: String,
    /// Dotted key → value overrides.
    #[serde(default)]
    pub set: BTreeMap<String, toml::Value>,
}

/// How to report a sweep.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReportConfig {
    /// Axis on the x axis of the figure (a sweep key, or "variant").
    #[serde(default)]
    pub x: Option<String>,
    /// Axis whose values are the figure's series.
    #[serde(default)]
    pub series: Option<String>,
    /// Metric plotted: total_s, normalized, speedup.
    #[serde(default)]
    pub y: Option<String>,
    /// Baseline for `normalized`/`speedup`: axis → value; all other axes must match.
    #[serde(default)]
    pub baseline: BTreeMap<String, toml::Value>,
    /// Also write a table averaged over this axis (memik-… Table 8 style).
    #[serde(default)]
    pub average_over: Option<String>,
    /// Use a log scale on the y axis.
    #[serde(default)]
    pub log_y: bool,
    /// Figure style: `lines` (default) or `stacked` (grouped bars of computation / I/O /
    /// communication, memik-… style; the y metric scales each bar).
    #[serde(default)]
    pub style: Option<String>,
}

/// The dotted key written at byte `pos` of `src` (table header + key), and its line.
fn key_at(src: &str, pos: usize) -> (String, usize) {
    let pos = pos.min(src.len());
    let line_start = src[..pos].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line_end = src[pos..].find('\n').map(|i| pos + i).unwrap_or(src.len());
    let line = &src[line_start..line_end];
    let line_no = src[..line_start].lines().count() + 1;
    let trimmed = line.trim();
    if trimmed.starts_with('[') {
        return (
            trimmed.trim_matches(|c| c == '[' || c == ']').to_string(),
            line_no,
        );
    }
    let key = line
        .split('=')
        .next()
        .unwrap_or(line)
        .trim()
        .trim_matches('"')
        .to_string();
    let header = src[..line_start]
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .map(|l| l.trim().trim_matches(|c| c == '[' || c == ']').to_string());
    match header {
        Some(h) if !h.is_empty() => (format!("{h}.{key}"), line_no),
        _ => (key, line_no),
    }
}

/// Map a TOML deserialisation error to a [`SimError::Config`] naming file, key and reason.
pub fn toml_error(file: &Path, src: &str, err: &toml::de::Error) -> SimError {
    let key = match err.span() {
        Some(span) => {
            let (k, line) = key_at(src, span.start);
            format!("{k} (line {line})")
        }
        None => "?".to_string(),
    };
    SimError::Config {
        file: file.display().to_string(),
        key,
        reason: err.message().to_string(),
    }
}

/// Parse an experiment from text.
pub fn parse(file: &Path, src: &str) -> Result<ExperimentFile, SimError> {
    let value: toml::Value = toml::from_str(src).map_err(|e| toml_error(file, src, &e))?;
    let exp: ExperimentFile = from_value(file, src, value)?;
    Ok(exp)
}

/// Deserialize a (possibly overridden) value tree; errors keep file and key.
pub fn from_value(file: &Path, src: &str, value: toml::Value) -> Result<ExperimentFile, SimError> {
    // Re-serialising keeps spans meaningful for errors on overridden trees too.
    let text = toml::to_string(&value).map_err(|e| SimError::Config {
        file: file.display().to_string(),
        key: "?".into(),
        reason: e.to_string(),
    })?;
    match toml::from_str::<ExperimentFile>(&text) {
        Ok(e) => Ok(e),
        Err(e) => {
            // Point at the original text's line when the same key is written there.
            let mut err = toml_error(file, &text, &e);
            if let SimError::Config { key, .. } = &mut err
                && let Some(k) = key.split(" (line").next().map(str::to_string)
            {
                let last = k.rsplit('.').next().unwrap_or(&k).to_string();
                let needle = format!("\n{last}");
                let found = src.find(&needle).map(|p| p + 1).or_else(|| {
                    if src.starts_with(&last) {
                        Some(0)
                    } else {
                        None
                    }
                });
                *key = match found {
                    Some(pos) => {
                        let (_, line) = key_at(src, pos);
                        format!("{k} (line {line})")
                    }
                    None => k,
                };
            }
            Err(err)
        }
    }
}

/// Set a dotted key (`a.b.c`) in a TOML value tree, creating tables as needed.
pub fn set_dotted(root: &mut toml::Value, key: &str, v: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    let mut cur = root;
    for (i, p) in parts.iter().enumerate() {
        let table = cur
            .as_table_mut()
            .ok_or_else(|| format!("{key}: `{}` is not a table", parts[..i].join(".")))?;
        if i + 1 == parts.len() {
            table.insert((*p).to_string(), v);
            return Ok(());
        }
        cur = table
            .entry((*p).to_string())
            .or_insert_with(|| toml::Value::Table(toml::map::Map::new()));
    }
    Ok(())
}

/// Get a dotted key from a TOML value tree.
pub fn get_dotted<'a>(root: &'a toml::Value, key: &str) -> Option<&'a toml::Value> {
    let mut cur = root;
    for p in key.split('.') {
        cur = cur.as_table()?.get(p)?;
    }
    Some(cur)
}

/// Render a TOML scalar for tables and file names.
pub fn value_label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => {
            if f.fract() == 0.0 && f.abs() < 1e15 {
                format!("{}", *f as i64)
            } else {
                format!("{f}")
            }
        }
        toml::Value::Boolean(b) => b.to_string(),
        other => other.to_string(),
    }
}
