//! What travels between host and disks.
//!
//! * A job is a [`JobSpec`] — JSON in a Flight `Ticket` (`DoGet`, results stream back) or in
//!   the descriptor of the first message of a `DoExchange` (host-resident input).
//! * Disk-to-disk pipe streams are Flight `DoPut`s whose descriptor command is a [`PutCommand`].
//! * Control is Flight actions named in [`action`], with JSON bodies.
//!
//! Expressions travel as DataFusion logical expressions encoded with `datafusion-proto`
//! ([`ExprBytes`]); they reference the columns of the stage's input by name. The host plans and
//! type-checks them, the disk turns them into DataFusion physical expressions.
use crate::bloom::BloomFilter;
use arrow_schema::Schema;
use base64::Engine;
use serde::{Deserialize, Serialize};

/// A `datafusion-proto`-encoded logical expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExprBytes(pub Vec<u8>);

impl Serialize for ExprBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for ExprBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(ExprBytes)
            .map_err(serde::de::Error::custom)
    }
}

/// An expression with the name of the column it produces.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NamedExpr {
    /// Output column name.
    pub name: String,
    /// The expression.
    pub expr: ExprBytes,
}

/// Where a job's input stream comes from. The host chooses; the disklet never does.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Disk-resident: chosen columns of the local partitions of a table.
    Table {
        /// Table name.
        table: String,
        /// Columns to read (empty: all).
        columns: Vec<String>,
        /// Predicate used only to skip partitions / row groups / pages by their statistics
        /// (zone maps). Rows are still filtered by a `select` stage.
        prune: Option<ExprBytes>,
        /// The local partitions to read (None: all of them). With replicas a partition has
        /// copies on several disks; the host names the ones this disk reads for the job, so
        /// that each partition is read exactly once. Naming one the disk does not hold fails.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        partitions: Option<Vec<u32>>,
    },
    /// Disk-resident: a byte range of a local file under the disk's `files/` directory,
    /// delivered as batches of one `Binary` column `bytes` and a `UInt64` column `offset`.
    File {
        /// Path relative to the disk's `files/` directory.
        path: String,
        /// First byte.
        offset: u64,
        /// Bytes to read (None: to the end).
        length: Option<u64>,
    },
    /// Pipe: the output of disklets on other disks (or this one), sent with `DoPut`.
    Pipe {
        /// Exchange identifier shared by the senders and this receiver.
        exchange_id: String,
        /// Number of senders; the stream ends when all of them have finished.
        senders: u32,
        /// Schema of the piped batches.
        schema: Schema,
    },
    /// Host-resident: the host sends the batches over the same `DoExchange` call.
    Host {
        /// Schema of the batches the host sends.
        schema: Schema,
    },
    /// Disk-resident, temporary: the [`StoredStream::Temp`] of the same name that an earlier
    /// output of this job writes; reading starts once that output is complete.
    Temp {
        /// Name within the job.
        name: String,
    },
}

/// Where one output stream of a job goes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Sink {
    /// Back to the host over the job's own Flight call (at most one output per job).
    Host,
    /// To other disks' [`Source::Pipe`] inputs (disk-to-disk exchange): each row goes to the
    /// target(s) its [`Route`] chooses.
    Exchange {
        /// Exchange identifier (the receivers' [`Source::Pipe`]).
        exchange_id: String,
        /// Addresses (`host:port`) of the receiving disks.
        targets: Vec<String>,
        /// This sender's number, 0..senders-1.
        sender: u32,
        /// How rows are routed to the targets.
        #[serde(default)]
        route: Route,
        /// Address (`host:port`) of a relay every stream of this output passes through on its
        /// way to a target (the host's, for `exchange = "via-host"`); None: straight to it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        relay: Option<String>,
        /// Per target, a relay its streams pass through instead of `relay` (the host's router
        /// for a target in another disk group); empty: `relay` for every target.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        target_relays: Vec<Option<String>>,
    },
    /// A disk-resident stream written to this disk's own storage.
    Store {
        /// What is written.
        stream: StoredStream,
    },
}

/// How an exchange output routes rows to its targets.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// Every row to every target (replication). With one target: a plain pipe.
    #[default]
    Broadcast,
    /// Row to target `hash(keys) mod targets` ([`crate::hash`], the same on every disk).
    Hash {
        /// Key expressions over the port's columns.
        keys: Vec<ExprBytes>,
    },
    /// Row to target `i` where `bounds[i-1] < key <= bounds[i]` (target 0 below the first
    /// bound, the last target above the last one): `targets = bounds + 1`.
    Range {
        /// Key expression.
        key: ExprBytes,
        /// Ascending literal expressions.
        bounds: Vec<ExprBytes>,
    },
}

/// A disk-resident stream a job writes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum StoredStream {
    /// Temporary: lives under the job's temporary directory, is read back by a later stage
    /// of the same job ([`Source::Temp`]) and is deleted when the job ends, also when it fails.
    Temp {
        /// Name within the job.
        name: String,
    },
    /// A named result: a partition of table `name` (memik's "results stay at the disks"),
    /// written through the storage layer's tmp-and-rename path; later jobs and SQL read it like
    /// any table; listed and dropped like one.
    Result {
        /// Table name.
        name: String,
        /// Partition number (unique within the table across the cluster).
        partition: u32,
    },
    /// A named result split into several partitions by a `UInt32` column `by` of the port
    /// (not stored): rows whose `by` is `v` go to partition `first_partition + v`. Values
    /// must not decrease along the stream; each partition is complete when the value changes
    /// (sorted runs written one after another). Committed like [`StoredStream::Result`].
    Split {
        /// Table name.
        name: String,
        /// Partition number of value 0.
        first_partition: u32,
        /// The `UInt32` column choosing the partition.
        by: String,
        /// Most partitions (values of `by`) the stream may write.
        max_partitions: u32,
    },
}

/// One sort key (of `merge`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SortKey {
    /// Expression to sort by.
    pub expr: ExprBytes,
    /// Descending order.
    pub descending: bool,
    /// NULLs before non-NULLs.
    pub nulls_first: bool,
}

/// A built-in disklet and its parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", tag = "disklet")]
pub enum DiskletSpec {
    /// Keep rows matching `predicate`, then compute `projection` (empty: all input columns).
    Select {
        /// Row predicate.
        predicate: Option<ExprBytes>,
        /// Output columns.
        projection: Vec<NamedExpr>,
        /// Stop after this many output rows; the rest of the input stream is skipped.
        #[serde(default)]
        limit: Option<u64>,
    },
    /// Keep rows whose key may be in the Bloom filter.
    BloomProbe {
        /// Key expressions (hashed together with [`crate::hash`]).
        keys: Vec<ExprBytes>,
        /// The filter.
        filter: BloomFilter,
    },
    /// Route rows to `partitions` outputs by hash of the key.
    Partition {
        /// Key expressions.
        keys: Vec<ExprBytes>,
        /// Number of outputs.
        partitions: u32,
    },
    /// A relational bundle: a DataFusion physical-plan fragment (`datafusion-proto` bytes) whose
    /// one leaf is an `EmptyExec` standing for this stage's input stream. Only per-row and
    /// partial operators are accepted (filter, projection, partial aggregation); the disk
    /// refuses anything else.
    Fragment {
        /// What the fragment does, for statistics (`sql_select`, `sql_aggregate`).
        kind: FragmentKind,
        /// The encoded plan.
        plan: ExprBytes,
    },
    /// k-way merge of inputs each sorted by `keys` into one sorted output (all inputs have
    /// the same schema).
    Merge {
        /// Sort keys (column expressions over the inputs).
        keys: Vec<SortKey>,
    },
    /// Inner equi-join: input 0 (build) is read whole into a hash table within scratch, then
    /// input 1 (probe) streams past it. Output: the build columns, then the probe columns.
    HashJoin {
        /// Key expressions over the build input.
        build_keys: Vec<ExprBytes>,
        /// Key expressions over the probe input (same count and types).
        probe_keys: Vec<ExprBytes>,
    },
    /// A native disklet of an application (`adisk app`, crate `adisk-apps`), registered with
    /// the disk's DiskOS: `app`'s disklet `disklet`, with its own parameters. Its inputs and
    /// output ports are stated here so that admission sizes the grant from the spec alone;
    /// the disklet checks them against what it takes when built.
    App {
        /// The application (`sort`, `conv`, …).
        app: String,
        /// The disklet within it.
        name: String,
        /// Its parameters (JSON, checked by the disklet).
        #[serde(default)]
        params: serde_json::Value,
        /// Inputs it reads.
        inputs: u32,
        /// Output ports it writes.
        ports: u32,
    },
    /// A user disklet installed on the disk (WebAssembly, ABI v1 or v2, see
    /// `docs/disklet-abi.md`). Its module declares how many inputs and output ports it has
    /// (ABI v1: one of each); the stage wires that many inputs, and the job reads its ports
    /// `0..k` (the graph takes `k` from the wiring, the disk checks it against the module
    /// before admission).
    Wasm {
        /// Installed name.
        name: String,
        /// Parameters handed to the disklet's init as `key=value` lines.
        #[serde(default)]
        params: std::collections::BTreeMap<String, String>,
        /// CPU budget of the job in fuel units (≈ WebAssembly instructions); None: the disk's default.
        #[serde(default)]
        fuel: Option<u64>,
    },
}

/// What a [`DiskletSpec::Fragment`] computes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FragmentKind {
    /// Filters and projections.
    Select,
    /// An aggregation (possibly above filters and projections): partial where the disk holds
    /// the raw rows, final where an exchange brought it every partial state of its groups.
    Aggregate,
    /// A sort of the stage's whole input (possibly above filters and projections, possibly
    /// keeping only the first rows): DataFusion's sort, which sorts runs within the scratch
    /// grant and merges them.
    Sort,
    /// A whole stage of a query at the disks (`disks` offload level): joins, aggregations and
    /// sorts over several inputs — local table streams and exchange pipes, one leaf each.
    Stage,
}

impl FragmentKind {
    /// The disklet name statistics report for a fragment of this kind.
    pub fn disklet_name(self) -> &'static str {
        match self {
            FragmentKind::Select => "sql_select",
            FragmentKind::Aggregate => "sql_aggregate",
            FragmentKind::Sort => "sql_sort",
            FragmentKind::Stage => "sql_stage",
        }
    }
}

impl DiskletSpec {
    /// Short name (`select`, `aggregate`, …).
    pub fn name(&self) -> &'static str {
        match self {
            DiskletSpec::Select { .. } => "select",
            DiskletSpec::BloomProbe { .. } => "bloom_probe",
            DiskletSpec::Partition { .. } => "partition",
            DiskletSpec::Fragment { kind, .. } => kind.disklet_name(),
            DiskletSpec::Merge { .. } => "merge",
            DiskletSpec::HashJoin { .. } => "hash_join",
            DiskletSpec::App { .. } => "app",
            DiskletSpec::Wasm { .. } => "wasm",
        }
    }

    /// Output ports, known from the spec alone (admission sizes the grant with them); `None`
    /// for a user disklet, whose module declares them: the job's wiring says how many
    /// ([`crate::graph::check`] counts the ports read), the disk checks them against the module.
    pub fn output_ports(&self) -> Option<u32> {
        match self {
            DiskletSpec::Partition { partitions, .. } => Some(*partitions),
            DiskletSpec::App { ports, .. } => Some(*ports),
            DiskletSpec::Wasm { .. } => None,
            _ => Some(1),
        }
    }

    /// Inputs the disklet takes: `None` for any number from one up (`merge`; a user disklet,
    /// whose module declares its count, checked by the disk).
    pub fn inputs(&self) -> Option<usize> {
        match self {
            DiskletSpec::Merge { .. }
            | DiskletSpec::Wasm { .. }
            | DiskletSpec::Fragment {
                kind: FragmentKind::Stage,
                ..
            } => None,
            DiskletSpec::HashJoin { .. } => Some(2),
            DiskletSpec::App { inputs, .. } => Some(*inputs as usize),
            _ => Some(1),
        }
    }
}

/// Most stages, inputs or outputs in one job.
pub const MAX_JOB_GRAPH_NODES: usize = 256;

/// Largest job spec a disk takes besides its Bloom filters, as a fraction of its memory
/// budget ([`max_spec_bytes`]).
pub const MAX_SPEC_FRACTION: u64 = 16;

/// The largest job spec (besides its Bloom filters) a disk with `memory_bytes` of memory
/// takes: [`MAX_SPEC_FRACTION`] of it, at least 1 MiB. Building a job makes several copies of
/// its expressions, plans and parameters outside any grant, so their size is bounded by the
/// budget; a host with more to send (a data-mining pass's candidates) splits it over jobs.
pub fn max_spec_bytes(memory_bytes: u64) -> u64 {
    (memory_bytes / MAX_SPEC_FRACTION).max(1 << 20)
}

/// Most output ports of one stage.
pub const MAX_STAGE_PORTS: u32 = 1024;

/// A job for one disk: a graph of stages over input streams, whose outputs go to sinks.
///
/// ```text
///   inputs[0] ──► stages[0] ──► stages[2] ──► outputs[0] (host)
///   inputs[1] ──► stages[1] ──┘          └──► outputs[1] (exchange by hash, to 4 disks)
/// ```
///
/// Stages are listed in an order where every stage reads only inputs and earlier stages'
/// ports ([`Port`]), so the graph has no cycles; every port is read exactly once, by a stage or
/// by an output. The host wires every edge; a disklet never chooses an endpoint.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobSpec {
    /// Unique id chosen by the host.
    pub job_id: String,
    /// Which host program submitted it (fair sharing is per program).
    pub program: String,
    /// Input streams, [`Port::Input`]`(i)`.
    pub inputs: Vec<Source>,
    /// The stages (disklets) and the ports each reads.
    pub stages: Vec<Stage>,
    /// Output streams: a port each, to a sink.
    pub outputs: Vec<Output>,
    /// Scratch memory requested per stage, in KiB (granted at admission or refused).
    pub scratch_kib: u64,
    /// Stream buffer size for this job, KiB (0: the disk's own; at most
    /// [`MAX_JOB_BUFFER_KIB`]). Relational bundles ask for larger buffers than the disk's
    /// default: fewer, larger batches cut the per-buffer cost of vectorized operators.
    #[serde(default)]
    pub buffer_kib: u64,
    /// Temporary disk space the job may write (spill files, temporary streams), KiB; granted
    /// at admission like memory. 0: none.
    #[serde(default)]
    pub temp_kib: u64,
    /// Scratch per stage, KiB, by stage index, where a job's stages need different amounts (a
    /// query's stages at one disk, admitted together); a stage past the end or given 0 takes
    /// `scratch_kib`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stage_scratch_kib: Vec<u64>,
}

/// One stage of a job: a disklet and the ports it reads, in the disklet's input order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Stage {
    /// The disklet.
    pub disklet: DiskletSpec,
    /// Its inputs.
    pub inputs: Vec<Port>,
}

/// A stream endpoint inside a job.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Port {
    /// Input stream `i` of the job.
    Input(u32),
    /// Output port `port` of stage `stage`.
    Stage {
        /// Stage index.
        stage: u32,
        /// Output port of that stage.
        port: u32,
    },
}

impl Port {
    /// Output port `port` of the same stage (an input stream has only its one port: itself).
    pub fn port(self, port: u32) -> Port {
        match self {
            Port::Stage { stage, .. } => Port::Stage { stage, port },
            input => input,
        }
    }
}

/// An output stream of a job: one port, to one sink.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Output {
    /// The port.
    pub from: Port,
    /// Where it goes.
    pub sink: Sink,
}

/// Largest stream buffer a job may ask for, KiB.
pub const MAX_JOB_BUFFER_KIB: u64 = 16 * 1024;

impl JobSpec {
    /// Sends the streams of every exchange output to the targets `through` names a relay for
    /// (by target address) through that relay.
    pub fn relay_targets(&mut self, through: impl Fn(&str) -> Option<String>) {
        for output in &mut self.outputs {
            if let Sink::Exchange {
                targets,
                target_relays,
                ..
            } = &mut output.sink
            {
                let relays: Vec<Option<String>> = targets.iter().map(|t| through(t)).collect();
                if relays.iter().any(Option::is_some) {
                    *target_relays = relays;
                }
            }
        }
    }

    /// Routes every exchange output that names no relay of its own through `relay`.
    pub fn relay_exchanges(&mut self, relay: &str) {
        for output in &mut self.outputs {
            if let Sink::Exchange {
                relay: r @ None, ..
            } = &mut output.sink
            {
                *r = Some(relay.to_string());
            }
        }
    }

    /// The disklets, in stage order.
    pub fn disklets(&self) -> impl Iterator<Item = &DiskletSpec> {
        self.stages.iter().map(|s| &s.disklet)
    }

    /// Encodes as JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a JobSpec always serializes")
    }
    /// Decodes JSON bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// How a disk's error starts when the link to another disk failed (its status is Unavailable,
/// but the disk itself answers).
pub const LINK_FAILED: &str = "link to another disk failed";

/// Descriptor command of a `DoPut`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum PutCommand {
    /// A pipe stream from sender `sender` into exchange `exchange_id`.
    Exchange {
        /// Exchange id.
        exchange_id: String,
        /// Sender number.
        sender: u32,
        /// The sending disk's id, named when its stream fails.
        #[serde(default)]
        from: Option<u32>,
    },
    /// A pipe stream for exchange `exchange_id` at disk `target`, sent to the host's relay,
    /// which forwards it there as an [`PutCommand::Exchange`] (`exchange = "via-host"`).
    Relay {
        /// Address (`host:port`) of the receiving disk.
        target: String,
        /// Exchange id.
        exchange_id: String,
        /// Sender number.
        sender: u32,
        /// The sending disk's id, named when its stream fails.
        #[serde(default)]
        from: Option<u32>,
    },
    /// A partition of a table sent by the host (`adisk load parquet|csv`).
    Load {
        /// Table.
        table: String,
        /// Partition number (unique within the table across the cluster).
        partition: u32,
        /// Rows per Parquet row group.
        row_group_rows: usize,
        /// The load this partition is staged under; it becomes visible only when the host
        /// commits the load ([`action::LOAD_COMMIT`]).
        load_id: String,
    },
}

/// Flight action names and their bodies.
pub mod action {
    /// Body: none. Returns [`super::DiskStatus`].
    pub const STATUS: &str = "status";
    /// Body: none (the whole catalog), or a [`super::CatalogRequest`] (what the host plans
    /// with: without the partitions' chunk checksums, and only when it changed since the
    /// version the host holds). Returns [`super::DiskCatalog`].
    pub const CATALOG: &str = "catalog";
    /// Body: job id (UTF-8). Returns [`crate::stats::DiskJobStats`].
    pub const JOB_STATS: &str = "job_stats";
    /// Body: [`super::GenerateTpch`]. Returns a stream of [`super::LoadProgress`].
    pub const GENERATE_TPCH: &str = "generate_tpch";
    /// Body: table name. Removes the table's local partitions.
    pub const DROP_TABLE: &str = "drop_table";
    /// Body: none. The disk stops serving after in-flight calls end.
    pub const SHUTDOWN: &str = "shutdown";
    /// Body: [`super::InstallDisklet`]. Validates, compiles and stores a user disklet; returns [`super::DiskletInfo`].
    pub const DISKLET_INSTALL: &str = "disklet_install";
    /// Body: none. Returns the installed user disklets, `Vec<`[`super::DiskletInfo`]`>`.
    pub const DISKLET_LIST: &str = "disklet_list";
    /// Body: disklet name (UTF-8). Returns `true` if it was installed.
    pub const DISKLET_REMOVE: &str = "disklet_remove";
    /// Body: [`super::GenerateImages`]. Writes the images; returns the number written.
    pub const GENERATE_IMAGES: &str = "generate_images";
    /// Body: a path prefix under `files/` (UTF-8). Returns `Vec<`[`super::FileInfo`]`>`.
    pub const LIST_FILES: &str = "list_files";
    /// Body: [`super::LoadCommit`]. Makes the staged partitions of a load the live tables in
    /// one manifest replacement; returns the committed `Vec<`[`super::TableInfo`]`>`.
    pub const LOAD_COMMIT: &str = "load_commit";
    /// Body: load id (UTF-8). Removes everything staged under that load; returns `true`.
    pub const LOAD_ABORT: &str = "load_abort";
    /// Body: none. Reads every byte of every local partition and checks it against the
    /// manifest; returns [`super::ScrubReport`].
    pub const SCRUB: &str = "scrub";
    /// Body: [`super::PartitionRead`]. Streams this disk's copy of a partition to another
    /// disk of the cluster: first the table's [`super::TableInfo`] with that one partition's
    /// manifest entry (JSON), then the file's bytes in chunks; fails with `DataLoss` if the
    /// bytes read do not match the manifest.
    pub const PARTITION_READ: &str = "partition_read";
    /// Body: [`super::RepairRequest`]. The disk compares its tables with its peers' load
    /// stamps and fetches every copy it should hold and lacks (or that fails its check) from a
    /// peer holding it; returns [`super::RepairReport`].
    pub const REPAIR: &str = "repair";
    /// Body: [`super::LinkProbe`]. Streams filler replies of up to [`super::LINK_PROBE_CHUNK`] bytes
    /// until the probe's bytes or time run out, for the caller to measure the link's rate and
    /// round trip (`adisk_host::links`).
    pub const LINK_PROBE: &str = "link_probe";
    /// Body: [`super::PeerProbe`]. The disk runs a [`LINK_PROBE`] against another disk of the
    /// cluster and returns what arrived, [`super::PeerProbeReport`]: how the host learns the
    /// links between disks (`adisk_host::links`).
    pub const PEER_PROBE: &str = "peer_probe";
}

/// Body of [`action::LINK_PROBE`]: how much filler to send at most, bytes and milliseconds
/// (each capped at [`LINK_PROBE_MAX_BYTES`] and [`LINK_PROBE_MAX_MS`]).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LinkProbe {
    /// Bytes.
    pub bytes: u64,
    /// Milliseconds.
    pub max_ms: u64,
}

/// Body of [`action::PEER_PROBE`]: the peer to probe and the probe (capped as
/// [`LinkProbe`]).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PeerProbe {
    /// The peer disk's id.
    pub peer: u32,
    /// Bytes.
    pub bytes: u64,
    /// Milliseconds.
    pub max_ms: u64,
}

/// Reply of [`action::PEER_PROBE`]: the bytes that arrived after the peer's first reply and
/// the time from that reply to its last.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct PeerProbeReport {
    /// Bytes after the first reply.
    pub bytes: u64,
    /// Microseconds from the first reply to the last.
    pub micros: u64,
}

impl PeerProbeReport {
    /// Its rate, bytes/s (None when nothing measurable arrived).
    pub fn rate(&self) -> Option<f64> {
        (self.bytes > 0 && self.micros > 0).then(|| self.bytes as f64 * 1e6 / self.micros as f64)
    }
}

/// Size of one filler reply of a link probe, bytes.
pub const LINK_PROBE_CHUNK: usize = 64 * 1024;
/// The most bytes one link probe sends.
pub const LINK_PROBE_MAX_BYTES: u64 = 64 << 20;
/// The longest one link probe runs, ms.
pub const LINK_PROBE_MAX_MS: u64 = 2_000;

/// Body of [`action::PARTITION_READ`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartitionRead {
    /// Table.
    pub table: String,
    /// Partition number.
    pub partition: u32,
    /// The load whose copy is wanted (a disk holding another load refuses).
    pub load_id: String,
}

/// Body of [`action::REPAIR`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct RepairRequest {
    /// Also read every local copy whole and refetch those that fail their check (what
    /// `adisk scrub` asks of a disk with corrupt partitions); otherwise only missing copies.
    #[serde(default)]
    pub verify: bool,
    /// Only these tables (empty: all).
    #[serde(default)]
    pub tables: Vec<String>,
}

/// Reply to [`action::REPAIR`]: what one disk checked, fetched, dropped and could not fix.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct RepairReport {
    /// Disk number.
    pub disk_id: u32,
    /// Tables compared with the peers' load stamps.
    pub tables: u64,
    /// Copies this disk should hold under its tables' latest loads.
    pub expected: u64,
    /// Copies it read whole and found good (with `verify`).
    pub verified: u64,
    /// Copies fetched from peers.
    pub repaired: Vec<RepairedPartition>,
    /// Tables dropped here: an older load of a table of which this disk holds no copy now.
    pub dropped: Vec<String>,
    /// Copies that could not be restored, and why.
    pub failed: Vec<FailedRepair>,
    /// Peers that did not answer.
    pub unreachable: Vec<u32>,
    /// Bytes received from peers.
    pub bytes_received: u64,
    /// Wall time, ms.
    pub elapsed_ms: u64,
}

/// A copy a repair fetched.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RepairedPartition {
    /// Table.
    pub table: String,
    /// Partition number.
    pub partition: u32,
    /// The peer it came from.
    pub from_disk: u32,
    /// Its size.
    pub bytes: u64,
    /// Why it was fetched: `missing`, `older load …`, or `corrupt: …`.
    pub reason: String,
}

/// A copy a repair could not restore.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FailedRepair {
    /// Table.
    pub table: String,
    /// Partition number.
    pub partition: u32,
    /// Why (no live copy, every source failed: with their errors).
    pub reason: String,
}

/// Request to generate TPC-H partitions at a disk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GenerateTpch {
    /// Scale factor.
    pub sf: f64,
    /// Table (`lineitem`, `orders`, …).
    pub table: String,
    /// Which of `part_count` parts this disk generates (1-based as in dbgen: 1..=part_count).
    pub parts: Vec<u32>,
    /// Total parts of the table across the cluster.
    pub part_count: u32,
    /// Rows per Parquet row group.
    pub row_group_rows: usize,
    /// The load the parts are staged under (visible only once committed).
    pub load_id: String,
}

/// Progress of a load at one disk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct LoadProgress {
    /// Table.
    pub table: String,
    /// Rows written so far.
    pub rows: u64,
    /// Bytes written so far.
    pub bytes: u64,
    /// True for the last message.
    pub done: bool,
}

/// One partition of a table on a disk, as listed in the disk's manifest.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PartitionInfo {
    /// Partition number, unique within the table across the cluster.
    pub partition: u32,
    /// File name relative to the disk directory.
    pub file: String,
    /// Rows.
    pub rows: u64,
    /// File size in bytes.
    pub bytes: u64,
    /// CRC-32 of the whole file, checked when the disk first opens it.
    pub crc32: u32,
    /// Row groups in the file.
    pub row_groups: u32,
    /// Distinct-value sketch per column, in schema order (`None`: the type has no stable
    /// hash; empty: written before sketches existed).
    #[serde(default)]
    pub ndv: Vec<Option<crate::sketch::Hll>>,
    /// Smallest and largest value per column, in schema order, for integer and date columns
    /// (`None`: another type, or no non-NULL value; empty: written before bounds existed). The
    /// planner joins two tables at their disks without an exchange when these show that equal
    /// keys always sit on the same disk (co-partitioned tables).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bounds: Vec<Option<[i64; 2]>>,
    /// Per column, in schema order: whether its values never decrease from one row to the
    /// next, with no NULL (integer and date columns, checked while writing; empty: written
    /// before this existed). A disk that reads such partitions in key order says its scan is
    /// sorted, and drops the sorts and hash aggregations that order makes needless.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sorted: Vec<bool>,
    /// Checksums verified on every read (`None`: written before they existed; such a file is
    /// checked against [`PartitionInfo::crc32`] whole, at every open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksums: Option<PartitionChecksums>,
    /// An even sample of the partition's rows ([`crate::sample`]: Arrow IPC in base64, at
    /// most 64 KiB; `None`: no row, rows too wide, or written before samples existed). The
    /// planner estimates what a filter keeps from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<String>,
}

/// CRC-32s of a partition file's parts, so that a disk verifies exactly what it reads, each
/// time it reads it: the footer and page index before decoding them, every column chunk of a
/// row group before decoding it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PartitionChecksums {
    /// Where the column chunks end: `[tail_offset, end of file)` holds the page index and the
    /// footer.
    pub tail_offset: u64,
    /// CRC-32 of `[tail_offset, end of file)`.
    pub tail_crc32: u32,
    /// CRC-32 of every column chunk: per row group, per leaf column in file order.
    pub chunk_crc32: Vec<Vec<u32>>,
}

/// Which load wrote a table on a disk, and which disks that load's table spans. The host
/// accepts a table only if every disk holding it carries the same stamp and those are exactly
/// the stamp's disks (a load interrupted during its commit leaves a table it reports incomplete).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LoadStamp {
    /// The load's id.
    pub load_id: String,
    /// Disks holding at least one partition of the table as this load wrote it.
    pub disks: Vec<u32>,
    /// Every partition of the table as this load wrote it, with the disks holding a copy
    /// (primary first; empty for loads by earlier versions: then each disk's own list counts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<PartitionCopies>,
}

/// One partition of a loaded table and the disks holding a copy of it, primary first.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartitionCopies {
    /// Partition number.
    pub partition: u32,
    /// Disks holding a copy (chained declustering: primary, primary + 1, … mod N).
    pub disks: Vec<u32>,
}

/// Body of [`action::LOAD_COMMIT`]: the tables of one load as one disk must hold them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LoadCommit {
    /// The load.
    pub load_id: String,
    /// Every table of the load (also those with no partition on this disk: they are dropped here).
    pub tables: Vec<CommitTable>,
}

/// One table of a [`LoadCommit`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CommitTable {
    /// Table.
    pub table: String,
    /// Partitions this disk must have staged (the commit fails otherwise).
    pub partitions: Vec<u32>,
    /// Disks holding partitions of the table after the load (recorded in its [`LoadStamp`]).
    pub disks: Vec<u32>,
    /// Every partition's copies (recorded in its [`LoadStamp`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<PartitionCopies>,
}

/// A table as seen by one disk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TableInfo {
    /// Name.
    pub name: String,
    /// Arrow schema.
    pub schema: Schema,
    /// Local partitions.
    pub partitions: Vec<PartitionInfo>,
    /// The load that wrote the table (`None`: written by a job's named result or before
    /// loads were staged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadStamp>,
}

/// Reply to [`action::CATALOG`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct DiskCatalog {
    /// Disk number.
    pub disk_id: u32,
    /// Tables with at least one local partition (none when [`DiskCatalog::unchanged`]).
    pub tables: Vec<TableInfo>,
    /// The catalog's version at this disk: it changes whenever the disk's manifest does, and
    /// when the disk restarts (empty from a disk that does not version its catalog).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The catalog is still the version the request named ([`CatalogRequest::known`]): its
    /// tables are left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unchanged: bool,
}

/// Body of [`action::CATALOG`] from a host planning queries. It fetches the catalog for every
/// query, and the catalogs are large: at TPC-H SF 1 on 4 disks they take 650 KB, most of it
/// the columns' distinct-value sketches and 4 % the partitions' checksums.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct CatalogRequest {
    /// Leave out every partition's checksums.
    #[serde(default)]
    pub without_checksums: bool,
    /// Leave out every partition's checksums and planning statistics (distinct-value
    /// sketches, bounds, order, row samples): which tables, loads and partitions a disk holds,
    /// what a peer's repair reads. At TPC-H SF 1 a disk's catalog is 0.5 MB with them, 10 KB
    /// without.
    #[serde(default)]
    pub listing_only: bool,
    /// The version the host holds: a disk whose catalog is still that version answers with
    /// [`DiskCatalog::unchanged`] and no tables.
    #[serde(default)]
    pub known: Option<String>,
}

impl DiskCatalog {
    /// The catalog with every partition's checksums left out.
    pub fn without_checksums(mut self) -> Self {
        for t in &mut self.tables {
            for p in &mut t.partitions {
                p.checksums = None;
            }
        }
        self
    }

    /// The reply to `request` from a disk whose catalog is `self`.
    pub fn answering(self, request: &CatalogRequest) -> Self {
        if !self.version.is_empty() && request.known.as_deref() == Some(self.version.as_str()) {
            return DiskCatalog {
                disk_id: self.disk_id,
                tables: vec![],
                version: self.version,
                unchanged: true,
            };
        }
        match (request.listing_only, request.without_checksums) {
            (true, _) => self.listing(),
            (false, true) => self.without_checksums(),
            (false, false) => self,
        }
    }

    /// The catalog without checksums and planning statistics ([`CatalogRequest::listing_only`]).
    pub fn listing(self) -> Self {
        let mut listing = self.without_checksums();
        for p in listing
            .tables
            .iter_mut()
            .flat_map(|t| t.partitions.iter_mut())
        {
            p.ndv = Vec::new();
            p.bounds = Vec::new();
            p.sorted = Vec::new();
            p.sample = None;
        }
        listing
    }
}

/// Reply to [`action::SCRUB`]: what a disk found reading all its partitions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct ScrubReport {
    /// Disk number.
    pub disk_id: u32,
    /// Partitions read.
    pub partitions: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Partitions whose bytes do not match the manifest.
    pub corrupt: Vec<CorruptPartition>,
}

/// A partition that failed its check.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CorruptPartition {
    /// Table.
    pub table: String,
    /// Partition number.
    pub partition: u32,
    /// File, relative to the disk's directory.
    pub file: String,
    /// What did not match.
    pub reason: String,
}

/// Reply to [`action::STATUS`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct DiskStatus {
    /// Disk number.
    pub disk_id: u32,
    /// Process id.
    pub pid: u32,
    /// DiskOS memory budget in bytes.
    pub memory_bytes: u64,
    /// Bytes currently granted to jobs.
    pub memory_granted_bytes: u64,
    /// Stream buffer size in bytes.
    pub buffer_bytes: u64,
    /// Buffers per stream.
    pub buffers_per_stream: u32,
    /// Jobs running.
    pub jobs_running: u32,
    /// Jobs waiting for a memory grant.
    pub jobs_waiting: u32,
    /// Jobs finished since start.
    pub jobs_finished: u64,
    /// Jobs failed since start.
    pub jobs_failed: u64,
    /// Of the failed jobs, those stopped because a disklet made no progress.
    #[serde(default)]
    pub jobs_stalled: u64,
    /// Of the failed jobs, those cancelled because their host stopped waiting for them (it
    /// went away, its connection lapsed, or it gave up on the query).
    #[serde(default)]
    pub jobs_abandoned: u64,
    /// Tables and their local row counts.
    pub tables: Vec<(String, u64)>,
    /// Temporary disk space currently granted to jobs.
    #[serde(default)]
    pub temp_granted_bytes: u64,
    /// Bytes of temporary files on disk now (spill files, temporary streams).
    #[serde(default)]
    pub temp_files_bytes: u64,
    /// Open disk-to-disk exchange inboxes.
    #[serde(default)]
    pub exchange_inboxes: u32,
    /// What the disk's jobs moved since it started (finished and failed jobs).
    #[serde(default)]
    pub totals: DiskTotals,
    /// The machine it runs on ([`crate::net::machine_id`]): the host's planner tells disks on
    /// its own machine (sharing its cores) from disks of their own.
    #[serde(default)]
    pub machine: Option<String>,
}

/// What a disk's jobs moved since the disk started, summed as each job ends.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DiskTotals {
    /// Bytes read from storage.
    pub bytes_read: u64,
    /// Bytes skipped (zone maps, column and partition pruning).
    pub bytes_skipped: u64,
    /// Rows read.
    pub rows_read: u64,
    /// Bytes shipped to the host (or to an endpoint's reader).
    pub bytes_shipped_host: u64,
    /// Bytes shipped to other disks.
    pub bytes_shipped_disks: u64,
    /// CPU time of the jobs' stages, ns.
    pub cpu_ns: u64,
}

impl DiskTotals {
    /// Adds one job's statistics.
    pub fn add(&mut self, job: &crate::stats::DiskJobStats) {
        self.bytes_read += job.bytes_read;
        self.bytes_skipped += job.bytes_skipped;
        self.rows_read += job.rows_read;
        self.bytes_shipped_host += job.bytes_shipped_host;
        self.bytes_shipped_disks += job.bytes_shipped_disks;
        self.cpu_ns += job.cpu_ns;
    }
}

/// Request to install a user disklet on a disk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct InstallDisklet {
    /// Name (1-64 of `A-Z a-z 0-9 _ -`).
    pub name: String,
    /// Scratch KiB; the memory grant is scratch + the input area (two stream buffers + 64 KiB).
    pub scratch_kib: u64,
    /// The module (binary WebAssembly or WAT text), base64.
    pub module: ExprBytes,
}

/// An installed user disklet on one disk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct DiskletInfo {
    /// Name.
    pub name: String,
    /// SHA-256 of the module, hex.
    pub sha256: String,
    /// Module size.
    pub size_bytes: u64,
    /// Scratch, KiB.
    pub scratch_kib: u64,
    /// Declared maximum of the module's memory.
    pub memory_max_bytes: u64,
    /// Memory grant on this disk (scratch + one input area per input).
    pub grant_bytes: u64,
    /// True if the compiled module is in the disk's cache.
    pub compiled: bool,
    /// Time its compilation took (0 if not compiled yet).
    pub compile_ns: u64,
    /// Jobs that instantiated it (and so ran its `init`) since the disk started.
    #[serde(default)]
    pub instances: u64,
    /// ABI version of the module (1 or 2; 0 from a disk that predates ABI v2).
    #[serde(default)]
    pub abi: u32,
    /// Inputs the module reads (ABI v1: 1).
    #[serde(default)]
    pub inputs: u32,
    /// Output ports the module writes (ABI v1: 1).
    #[serde(default)]
    pub outputs: u32,
}

/// Request to generate deterministic grayscale images at a disk (`files/images/img-NNNNN.gray`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GenerateImages {
    /// Image numbers this disk holds.
    pub indices: Vec<u32>,
    /// Width and height in pixels (one byte each).
    pub side: u32,
}

/// A plain file under a disk's `files/` directory.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FileInfo {
    /// Path relative to `files/`.
    pub path: String,
    /// Size.
    pub bytes: u64,
}
