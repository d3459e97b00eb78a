//! The execution engine: runs a [`Plan`] (phases of streaming work) on a [`Topology`]
//! (resources wired into an architecture) as a discrete-event simulation.
//!
//! Each worker streams its input in chunks through a bounded number of buffers: a chunk is
//! read by a drive (FIFO, with the drive model's seek/rotation/read-ahead), carried to the
//! worker over the I/O path, and processed by the worker's processor (FIFO). Processing a
//! chunk produces output bytes for each of the phase's flows; output accumulates per
//! destination and leaves as messages of the stream-buffer size over the network route.
//! The receiver's processor handles each message and, for flows that store their output,
//! its drive writes it. A buffer is released when its chunk's processing and every message
//! it emitted are complete, which is what bounds read-ahead ("2/4/8 buffers per stream").
//! A phase ends when all workers finished their input, every message and write is done and
//! (if the phase synchronises) every worker's completion signal reached the coordinator.

use crate::des::IdQueue;
use crate::model::cpu::OsCosts;
use crate::model::disk::{DiskModel, DiskOp};
use crate::model::link::LinkSpec;
use crate::model::ssd::SsdModel;
use crate::time::{SimDuration, SimTime};
use serde::Serialize;
use std::collections::HashMap;
use std::rc::Rc;

/// Index of a resource.
pub type ResId = usize;

/// What a resource is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResKind {
    /// A processor.
    Cpu,
    /// A drive mechanism (or SSD).
    Disk,
    /// A bus, loop, port or uplink.
    Link,
}

/// A FIFO server with accounting.
#[derive(Clone, Debug)]
pub struct Resource {
    /// Unique name, e.g. `disk3.cpu`, `fc-loop1`.
    pub name: String,
    /// Component it belongs to (for per-component breakdowns), e.g. `disk3`, `host`, `interconnect`.
    pub component: String,
    /// Kind.
    pub kind: ResKind,
    /// When it is next free.
    pub next_free: SimTime,
    /// Total busy time, ns.
    pub busy_ns: u64,
    /// Bytes that entered (links) or were transferred (drives).
    pub bytes_in: u64,
    /// Bytes that left (links).
    pub bytes_out: u64,
    /// Operations served.
    pub ops: u64,
    /// Link parameters (links only).
    pub link: Option<LinkSpec>,
}

impl Resource {
    /// A new idle resource.
    pub fn new(
        name: impl Into<String>,
        component: impl Into<String>,
        kind: ResKind,
        link: Option<LinkSpec>,
    ) -> Resource {
        Resource {
            name: name.into(),
            component: component.into(),
            kind,
            next_free: SimTime::ZERO,
            busy_ns: 0,
            bytes_in: 0,
            bytes_out: 0,
            ops: 0,
            link,
        }
    }

    /// Serve `ns` of processing arriving at `now` (plus a context switch of `ctx_ns` if
    /// the processor was idle); returns when it ends.
    fn serve_cpu(&mut self, now: SimTime, ns: u64, ctx_ns: u64) -> SimTime {
        let idle = self.next_free < now;
        let service = ns.saturating_add(if idle { ctx_ns } else { 0 });
        let start = now.max(self.next_free);
        let end = start + SimDuration(service);
        self.next_free = end;
        self.busy_ns = self.busy_ns.saturating_add(service);
        self.ops += 1;
        end
    }
}

/// One hop of a route: a given link, or whichever of several parallel links frees first.
#[derive(Clone, Debug)]
pub enum Hop {
    /// A specific link.
    One(ResId),
    /// Any of these parallel links (e.g. the two loops of a dual FC loop).
    AnyOf(Vec<ResId>),
}

/// The medium of a drive.
#[derive(Clone, Debug)]
pub enum Storage {
    /// Rotating disk.
    Disk(Box<DiskModel>),
    /// Solid-state drive.
    Ssd(SsdModel),
}

impl Storage {
    /// Serve a request: (start, finish, busy ns including read-ahead done while idle).
    fn serve(&mut self, now: SimTime, op: DiskOp, addr: u64, len: u64) -> (SimTime, SimTime, u64) {
        match self {
            Storage::Disk(d) => {
                let before = d.readahead_ns;
                let (s, e) = d.serve(now, op, addr, len);
                (s, e, (e - s).0 + (d.readahead_ns - before))
            }
            Storage::Ssd(sd) => {
                let (s, e) = sd.serve(now, op, len);
                (s, e, (e - s).0)
            }
        }
    }
    /// Capacity, bytes.
    pub fn capacity(&self) -> u64 {
        match self {
            Storage::Disk(d) => d.capacity(),
            Storage::Ssd(s) => s.capacity(),
        }
    }
}

/// A drive placed in the topology.
#[derive(Clone, Debug)]
pub struct Drive {
    /// Its resource (busy time, bytes).
    pub res: ResId,
    /// The medium.
    pub storage: Storage,
    /// Node that owns it privately (active disk, cluster host), or `None` if it sits on a
    /// shared fabric (single host, SMP).
    pub owner: Option<usize>,
    /// Hops between the drive and its owner (private) or the I/O fabric (shared).
    pub hops: Vec<Hop>,
    files: HashMap<u32, (u64, u64)>,
    bump: u64,
}

impl Drive {
    /// A drive with nothing stored.
    pub fn new(res: ResId, storage: Storage, owner: Option<usize>, hops: Vec<Hop>) -> Drive {
        Drive {
            res,
            storage,
            owner,
            hops,
            files: HashMap::new(),
            bump: 0,
        }
    }
    fn reserve(&mut self, file: u32, bytes: u64) {
        if self.files.contains_key(&file) {
            return;
        }
        let start = self.bump;
        self.files.insert(file, (start, 0));
        // Round regions to 1 MiB.
        self.bump = start + bytes.div_ceil(1 << 20).max(1) * (1 << 20);
    }
    fn stored(&self, file: u32) -> (u64, u64) {
        self.files.get(&file).copied().unwrap_or((0, 0))
    }
    fn overfull(&self) -> bool {
        self.bump > self.storage.capacity()
    }
}

/// A processing node: host, board, cluster node, active/smart disk.
#[derive(Clone, Debug)]
pub struct Node {
    /// Name.
    pub name: String,
    /// Its processors.
    pub cpus: Vec<ResId>,
    /// Clock rate, MHz.
    pub mhz: f64,
    /// Memory, bytes.
    pub mem_bytes: f64,
    /// OS costs.
    pub os: OsCosts,
    /// Hops between the node's memory and the shared I/O fabric (e.g. an SMP board link).
    pub io_hops: Vec<Hop>,
}

/// A processing element that owns a partition of the work.
#[derive(Clone, Debug)]
pub struct Worker {
    /// Node.
    pub node: usize,
    /// Processor.
    pub cpu: ResId,
    /// Volumes: `vols[0]` holds base data, `vols[1]` is the alternate (write) group; equal when the
    /// architecture does not split read and write groups.
    pub vols: [usize; 2],
}

/// A set of drives striped together.
#[derive(Clone, Debug)]
pub struct Volume {
    /// Drives.
    pub drives: Vec<usize>,
    /// Number of workers that share it (pull chunks from one shared queue).
    pub sharers: usize,
}

/// The network between nodes.
#[derive(Clone, Debug)]
pub enum Net {
    /// One node only.
    Local,
    /// Every node on the same shared loops/buses.
    Loops {
        /// The loops.
        loops: Vec<ResId>,
    },
    /// Switched network: per-node ports; switches joined by uplinks to a core switch/router.
    Switched {
        /// Transmit side of each node's port.
        tx: Vec<ResId>,
        /// Receive side of each node's port.
        rx: Vec<ResId>,
        /// Switch of each node (`usize::MAX` = attached to the core).
        switch_of: Vec<usize>,
        /// Uplink towards the core, per switch.
        up: Vec<ResId>,
        /// Downlink from the core, per switch.
        down: Vec<ResId>,
        /// Per-node I/O bus crossed by network traffic (cluster PCI).
        bus: Vec<Option<ResId>>,
    },
    /// SMP boards: block-transfer engine at the sender, board link at the receiver.
    Smp {
        /// Per-board block-transfer engine.
        bte: Vec<ResId>,
        /// Per-board link into the board.
        link_in: Vec<ResId>,
    },
}

/// An assembled architecture.
#[derive(Clone, Debug)]
pub struct Topology {
    /// All resources.
    pub resources: Vec<Resource>,
    /// All drives.
    pub drives: Vec<Drive>,
    /// All nodes.
    pub nodes: Vec<Node>,
    /// All volumes.
    pub volumes: Vec<Volume>,
    /// Workers.
    pub workers: Vec<Worker>,
    /// Coordinator node (front-end host, central unit, client, or the host itself).
    pub coordinator: usize,
    /// Volume the coordinator writes to.
    pub coord_vol: usize,
    /// Network.
    pub net: Net,
    /// Peer-to-peer traffic is forwarded by the coordinator.
    pub via_host: bool,
    /// Requests in flight per worker stream, counted in I/O requests.
    pub buffers_per_worker: u32,
    /// Messages a worker may have in flight for output produced at the end of its input
    /// (hosts: 16 asynchronous message buffers, uysal-… §5; disks: their stream buffers).
    pub message_window: u32,
    /// Disk groups (sd_groups; 1 elsewhere): workers are split into this many contiguous groups.
    pub groups: u32,
    /// One line describing the system.
    pub description: String,
}

impl Topology {
    /// Serve a read of `len` bytes at `addr` on `drive` arriving at `now`; returns when it ends.
    fn serve_read(&mut self, now: SimTime, drive: usize, addr: u64, len: u64) -> SimTime {
        let d = &mut self.drives[drive];
        let (_, e, busy) = d.storage.serve(now, DiskOp::Read, addr, len);
        let r = &mut self.resources[d.res];
        r.busy_ns = r.busy_ns.saturating_add(busy);
        r.bytes_in += len;
        r.ops += 1;
        r.next_free = e;
        e
    }

    /// Serve an append of `bytes` to `file` on `drive` arriving at `now` (after the file's
    /// stored part); returns when it ends.
    fn serve_write(&mut self, now: SimTime, drive: usize, file: u32, bytes: u64) -> SimTime {
        let d = &mut self.drives[drive];
        d.reserve(file, bytes);
        let (start, len) = d.stored(file);
        let addr = start + len;
        if let Some(ext) = d.files.get_mut(&file) {
            ext.1 += bytes;
        }
        let (_, e, busy) = d.storage.serve(now, DiskOp::Write, addr, bytes);
        let r = &mut self.resources[d.res];
        r.busy_ns = r.busy_ns.saturating_add(busy);
        r.bytes_in += bytes;
        r.ops += 1;
        r.next_free = e;
        e
    }

    /// Carry `bytes` over one leg: of each hop, the given link or the parallel link that
    /// frees first (recorded in `chosen`), all occupied together from when the last is free;
    /// returns when the slowest is done plus the links' latencies.
    fn serve_leg(
        &mut self,
        now: SimTime,
        hops: &[Hop],
        chosen: &mut Vec<ResId>,
        bytes: u64,
    ) -> SimTime {
        chosen.clear();
        for h in hops.iter() {
            let id = match h {
                Hop::One(r) => *r,
                Hop::AnyOf(rs) => {
                    let mut best = rs[0];
                    for r in rs {
                        if self.resources[*r].next_free < self.resources[best].next_free {
                            best = *r;
                        }
                    }
                    best
                }
            };
            chosen.push(id);
        }
        let mut start = now;
        for r in chosen.iter() {
            start = start.max(self.resources[*r].next_free);
        }
        let mut longest = 0u64;
        let mut latency = 0u64;
        for r in chosen.iter() {
            let res = &mut self.resources[*r];
            let spec = res.link.clone().unwrap_or_else(|| LinkSpec::new(1e9, 0.0));
            let occ = spec.occupancy_ns(bytes).round() as u64;
            res.next_free = start + SimDuration(occ);
            res.busy_ns = res.busy_ns.saturating_add(occ);
            res.bytes_in += bytes;
            res.ops += 1;
            longest = longest.max(occ);
            latency = latency.saturating_add((spec.latency_us * 1e3).round() as u64);
        }
        start + SimDuration(longest.saturating_add(latency))
    }
}

/// Where a flow's output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// To the coordinator.
    Coordinator,
    /// Spread evenly over all workers (including the sender's own share).
    Shuffle,
    /// A full copy to every other worker (replication / all-gather).
    AllPeers,
    /// Stays at the worker.
    Local,
}

/// How much a flow emits.
#[derive(Clone, Copy, Debug)]
pub enum Amount {
    /// Bytes out per byte of input, emitted as the input is processed.
    Ratio(f64),
    /// Bytes per worker, emitted when the worker finishes its input.
    Bytes(f64),
}

/// One output of a phase.
#[derive(Clone, Copy, Debug)]
pub struct Flow {
    /// Destination.
    pub dest: Dest,
    /// Amount.
    pub amount: Amount,
    /// Receiver work per byte received, cycles.
    pub recv_cycles_per_byte: f64,
    /// Store at the receiver in this file.
    pub write: Option<u32>,
}

/// A phase's input.
#[derive(Clone, Debug)]
pub enum Input {
    /// No streamed input.
    None,
    /// A file on the worker's read volume.
    File(u32),
    /// A fraction of a file (e.g. the pages an index scan touches).
    FilePart(u32, f64),
    /// A whole file read in non-contiguous segments of the given size, visited in a strided
    /// order (e.g. the column blocks of an out-of-core transpose): every segment is a separate
    /// request that seeks.
    Segmented(u32, u64),
    /// Bytes per worker already in memory.
    Memory(f64),
}

/// One step of a plan; all workers run it, then the next begins.
#[derive(Clone, Debug)]
pub struct Phase {
    /// Name (shown in reports).
    pub name: String,
    /// Streamed input.
    pub input: Input,
    /// Worker cycles per input byte.
    pub cycles_per_byte: f64,
    /// Outputs.
    pub flows: Vec<Flow>,
    /// Worker cycles after its input is done.
    pub end_cycles: f64,
    /// Coordinator cycles after every worker is done.
    pub coord_end_cycles: f64,
    /// Coordinator sends a command message to each worker before it starts.
    pub command: bool,
    /// Extra bytes carried by each command (bundle code, Bloom filter, replicated table).
    pub broadcast_bytes: f64,
    /// Workers send a completion signal to the coordinator at the end.
    pub sync: bool,
    /// Which worker volume is read (0 or 1).
    pub read_vol: usize,
    /// Which worker volume receives writes (0 or 1).
    pub write_vol: usize,
    /// Expected total bytes written per file (to reserve space).
    pub write_estimates: Vec<(u32, f64)>,
    /// Bytes the coordinator writes to its volume after all workers finished.
    pub coord_writes: Vec<(u32, f64)>,
    /// Requests in flight per worker stream in this phase, if not the topology's
    /// `buffers_per_worker`.
    pub requests_in_flight: Option<u32>,
}

impl Phase {
    /// A phase with no input, outputs or costs.
    pub fn new(name: impl Into<String>) -> Phase {
        Phase {
            name: name.into(),
            input: Input::None,
            cycles_per_byte: 0.0,
            flows: Vec::new(),
            end_cycles: 0.0,
            coord_end_cycles: 0.0,
            command: false,
            broadcast_bytes: 0.0,
            sync: false,
            read_vol: 0,
            write_vol: 0,
            write_estimates: Vec::new(),
            coord_writes: Vec::new(),
            requests_in_flight: None,
        }
    }
}

/// A workload compiled for one topology.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// File names (index = file id).
    pub files: Vec<String>,
    /// Base files: (file, total bytes) spread evenly over the workers' volume 0.
    pub base_files: Vec<(u32, f64)>,
    /// Base files placed on one group of workers only: (file, group, groups). Worker `w`
    /// of `n` belongs to group `w·groups/n`.
    pub placement: Vec<(u32, usize, usize)>,
    /// Phases, in order.
    pub phases: Vec<Phase>,
    /// Workload facts worth reporting (passes, flushes, bundles…).
    pub notes: Vec<(String, String)>,
}

impl Plan {
    /// Intern a file name.
    pub fn file(&mut self, name: &str) -> u32 {
        if let Some(i) = self.files.iter().position(|f| f == name) {
            return i as u32;
        }
        self.files.push(name.to_string());
        (self.files.len() - 1) as u32
    }
    /// Record a note.
    pub fn note(&mut self, k: impl Into<String>, v: impl ToString) {
        self.notes.push((k.into(), v.to_string()));
    }
}

/// Granularity settings.
#[derive(Clone, Debug)]
pub struct Granularity {
    /// I/O request size, bytes.
    pub request_bytes: u64,
    /// Message size, bytes.
    pub message_bytes: u64,
    /// Upper bound on chunks per phase.
    pub max_chunks_per_phase: u64,
    /// Size of control messages, bytes.
    pub control_bytes: u64,
    /// Copy cost when forwarding, cycles per byte.
    pub copy_cycles_per_byte: f64,
    /// Lock taken per chunk grabbed from a shared work queue, µs.
    pub shared_queue_lock_us: f64,
}

/// Chunk size (bytes) and chunks kept in flight per worker for a phase that reads
/// `total_input` bytes with at most `cap` chunks. Chunks are whole requests, at least 256 KB
/// (or one message), and two of them are kept in flight: for a sequential stream with two
/// or more buffers this behaves like page-sized requests queued at a drive with read-ahead.
/// A worker with a single buffer (`in_flight <= 1`) reads one request at a time and
/// computes it before asking for the next (no overlap, and every request after an idle
/// drive pays its controller overhead), so it gets one-request chunks, one in flight, and
/// no `cap`: coarser chunks would hide the per-request costs that make the page size matter.
pub fn chunking(req: u64, msg: u64, total_input: f64, cap: u64, in_flight: u32) -> (u64, u32) {
    let req = req.max(512);
    if in_flight <= 1 {
        return (req, 1);
    }
    let floor = req.max(msg.min(256 << 10)).div_ceil(req) * req;
    let needed = (total_input / cap as f64).ceil() as u64;
    let chunk = floor.max(needed.div_ceil(req) * req);
    let requests_per_chunk = (chunk / req).max(1) as u32;
    (chunk, (in_flight / requests_per_chunk).max(2))
}

/// Timing of one phase.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseTiming {
    /// Name.
    pub name: String,
    /// Start, s.
    pub start_s: f64,
    /// End, s.
    pub end_s: f64,
    /// Chunk size used, bytes.
    pub chunk_bytes: u64,
}

/// Raw outcome of a run.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// Simulated completion time.
    pub end: SimTime,
    /// Resources with their counters.
    pub resources: Vec<Resource>,
    /// Phase timings.
    pub phases: Vec<PhaseTiming>,
    /// Events processed.
    pub events: u64,
    /// Warnings (e.g. a drive overfull).
    pub warnings: Vec<String>,
}

/// A route: legs of hops, shared between messages.
type Legs = Rc<Vec<Rc<Vec<Hop>>>>;

#[derive(Clone, Debug)]
enum Step {
    Leg(Rc<Vec<Hop>>),
    Cpu {
        res: ResId,
        ns: u64,
        ctx_ns: u64,
    },
    Read {
        drive: usize,
        addr: u64,
        len: u64,
    },
    Write {
        drive: usize,
        file: u32,
    },
    Release(u32),
    /// A paced message of sender slot `.0` has left the network: its window slot is free.
    SlotRelease(u32),
}

#[derive(Clone, Copy, Debug)]
enum Done {
    Chunk(u32),
    Msg(Option<u32>),
    Command(u32),
    WorkerEnd(u32),
    Sync(u32),
    CoordEnd,
}

struct Xfer {
    steps: Vec<Step>,
    pos: usize,
    bytes: u64,
    chosen: Vec<ResId>,
    done: Done,
}

struct ChunkState {
    worker: u32,
    pending: u32,
    bytes: u64,
}

#[derive(Clone)]
struct Cursor {
    drives: Vec<usize>,
    extents: Vec<(u64, u64)>,
    consumed: Vec<u64>,
    next: usize,
    memory_left: f64,
    segment: Option<u64>,
}

/// Greatest common divisor.
fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl Cursor {
    fn next_chunk(&mut self, chunk: u64) -> Option<(usize, u64, u64)> {
        if let Some(seg) = self.segment {
            return self.next_segment(seg.max(1));
        }
        let n = self.drives.len();
        for _ in 0..n {
            let i = self.next % n;
            self.next += 1;
            let (start, len) = self.extents[i];
            let used = self.consumed[i];
            if used < len {
                let take = chunk.min(len - used);
                self.consumed[i] += take;
                return Some((self.drives[i], start + used, take));
            }
        }
        None
    }

    /// Next segment in strided order: segment `k` of a drive's extent is
    /// `(k · stride) mod count`, with `stride ≈ √count` coprime to `count`.
    fn next_segment(&mut self, seg: u64) -> Option<(usize, u64, u64)> {
        let n = self.drives.len();
        for _ in 0..n {
            let i = self.next % n;
            self.next += 1;
            let (start, len) = self.extents[i];
            let count = len.div_ceil(seg);
            let k = self.consumed[i];
            if k < count {
                self.consumed[i] += 1;
                let mut stride = ((count as f64).sqrt() as u64).max(1);
                while gcd(stride, count) != 1 {
                    stride += 1;
                }
                let idx = (k * stride) % count;
                let off = idx * seg;
                return Some((self.drives[i], start + off, seg.min(len - off)));
            }
        }
        None
    }
}

#[derive(Clone, Default)]
struct WState {
    cursor: usize,
    in_flight: u32,
    input_done: bool,
    end_emitted: bool,
    ended: bool,
    acc: Vec<f64>,
}

/// The simulator for one run.
pub struct Engine<'p> {
    topo: Topology,
    plan: &'p Plan,
    gran: Granularity,
    q: IdQueue,
    xfers: Vec<Option<Xfer>>,
    free_xfers: Vec<u32>,
    chunks: Vec<ChunkState>,
    free_chunks: Vec<u32>,
    ws: Vec<WState>,
    cursors: Vec<Cursor>,
    phase: usize,
    phase_start: SimTime,
    chunk_bytes: u64,
    msg_bytes: u64,
    k_chunks: u32,
    outstanding: u64,
    ended_workers: usize,
    coord_end_started: bool,
    coord_writes_issued: bool,
    /// Paced sends per sender slot (workers, then the coordinator): queued steps and bytes.
    slot_queue: Vec<std::collections::VecDeque<(Vec<Step>, u64)>>,
    slot_inflight: Vec<u32>,
    step_pool: Vec<Vec<Step>>,
    chosen_pool: Vec<Vec<ResId>>,
    timings: Vec<PhaseTiming>,
    routes: HashMap<(usize, usize), Legs>,
    drive_routes: HashMap<(usize, usize), Rc<Vec<Hop>>>,
    write_rr: Vec<usize>,
}

impl<'p> Engine<'p> {
    /// Prepare a run: place base files.
    pub fn new(topo: Topology, plan: &'p Plan, gran: Granularity) -> Engine<'p> {
        let nw = topo.workers.len();
        let nvol = topo.volumes.len();
        let mut e = Engine {
            topo,
            plan,
            gran,
            q: IdQueue::new(),
            xfers: Vec::new(),
            free_xfers: Vec::new(),
            chunks: Vec::new(),
            free_chunks: Vec::new(),
            ws: vec![WState::default(); nw],
            cursors: Vec::new(),
            phase: 0,
            phase_start: SimTime::ZERO,
            chunk_bytes: 0,
            msg_bytes: 1,
            k_chunks: 2,
            outstanding: 0,
            ended_workers: 0,
            coord_end_started: false,
            coord_writes_issued: false,
            slot_queue: (0..=nw)
                .map(|_| std::collections::VecDeque::new())
                .collect(),
            slot_inflight: vec![0; nw + 1],
            step_pool: Vec::new(),
            chosen_pool: Vec::new(),
            timings: Vec::new(),
            routes: HashMap::new(),
            drive_routes: HashMap::new(),
            write_rr: vec![0; nvol],
        };
        e.place_base_files();
        e
    }

    fn place_base_files(&mut self) {
        // Spread each base file evenly over the distinct volumes 0 of its workers (all
        // workers, or one group of them).
        let nw = self.topo.workers.len();
        for (file, total) in &self.plan.base_files {
            let place = self.plan.placement.iter().find(|p| p.0 == *file);
            let mut vols: Vec<usize> = self
                .topo
                .workers
                .iter()
                .enumerate()
                .filter(|(w, _)| match place {
                    Some(&(_, g, groups)) => groups > 0 && w * groups / nw.max(1) == g,
                    None => true,
                })
                .map(|(_, wk)| wk.vols[0])
                .collect();
            vols.sort_unstable();
            vols.dedup();
            let drives: Vec<usize> = vols
                .iter()
                .flat_map(|v| self.topo.volumes[*v].drives.clone())
                .collect();
            if drives.is_empty() {
                continue;
            }
            let per = (*total / drives.len() as f64).round().max(0.0) as u64;
            for d in &drives {
                let dr = &mut self.topo.drives[*d];
                dr.reserve(*file, per);
                if let Some(e) = dr.files.get_mut(file) {
                    e.1 = per;
                }
            }
        }
    }

    /// Run all phases to completion.
    pub fn run(mut self) -> RunOutcome {
        self.begin_phase();
        while let Some((_, x)) = self.q.pop() {
            self.advance(x);
        }
        let mut warnings = Vec::new();
        for (i, d) in self.topo.drives.iter().enumerate() {
            if d.overfull() {
                warnings.push(format!(
                    "drive {i} holds more than its capacity ({} bytes reserved)",
                    d.bump
                ));
            }
        }
        if self.phase < self.plan.phases.len() {
            warnings.push(format!(
                "run stopped in phase {} ({})",
                self.phase, self.plan.phases[self.phase].name
            ));
        }
        RunOutcome {
            end: self.q.now(),
            resources: self.topo.resources,
            phases: self.timings,
            events: self.q.processed(),
            warnings,
        }
    }

    // ----- phases -------------------------------------------------------------------

    fn begin_phase(&mut self) {
        let now = self.q.now();
        if self.phase >= self.plan.phases.len() {
            return;
        }
        let plan = self.plan;
        let ph = &plan.phases[self.phase];
        self.phase_start = now;
        self.outstanding = 0;
        self.ended_workers = 0;
        self.coord_end_started = false;
        self.coord_writes_issued = false;
        let nw = self.topo.workers.len();
        self.reserve_write_regions(ph);
        let total_input = self.open_cursors(ph);
        self.size_messages(ph, total_input);
        self.timings.push(PhaseTiming {
            name: ph.name.clone(),
            start_s: now.as_secs_f64(),
            end_s: now.as_secs_f64(),
            chunk_bytes: self.chunk_bytes,
        });
        if ph.command {
            self.send_commands(ph);
        } else {
            for w in 0..nw {
                self.fill(w);
                self.check_worker_end(w);
            }
        }
        if nw == 0 {
            self.check_phase_end();
        }
    }

    /// Reserve on every drive the phase writes to its share of each estimated output file.
    fn reserve_write_regions(&mut self, ph: &Phase) {
        for (file, total) in &ph.write_estimates {
            let mut vols: Vec<usize> = self
                .topo
                .workers
                .iter()
                .map(|w| w.vols[ph.write_vol])
                .collect();
            vols.push(self.topo.coord_vol);
            vols.sort_unstable();
            vols.dedup();
            let drives: Vec<usize> = vols
                .iter()
                .flat_map(|v| self.topo.volumes[*v].drives.clone())
                .collect();
            let per = (*total * 1.25 / drives.len().max(1) as f64) as u64 + (4 << 20);
            for d in drives {
                self.topo.drives[d].reserve(*file, per);
            }
        }
    }

    /// Open the phase's input cursors (one per private volume / per worker, one shared per
    /// shared volume) and reset every worker; returns the phase's total input, bytes.
    fn open_cursors(&mut self, ph: &Phase) -> f64 {
        self.cursors.clear();
        let mut shared: HashMap<usize, usize> = HashMap::new();
        let mut total_input = 0.0f64;
        for w in 0..self.topo.workers.len() {
            let vol = self.topo.workers[w].vols[ph.read_vol];
            let sharers = self.topo.volumes[vol].sharers;
            let idx = match (&ph.input, sharers > 1) {
                (Input::File(_) | Input::FilePart(..) | Input::Segmented(..), true) => {
                    if let Some(i) = shared.get(&vol) {
                        *i
                    } else {
                        let c = self.make_cursor(vol, &ph.input);
                        total_input += c.extents.iter().map(|e| e.1 as f64).sum::<f64>();
                        self.cursors.push(c);
                        shared.insert(vol, self.cursors.len() - 1);
                        self.cursors.len() - 1
                    }
                }
                _ => {
                    let c = self.make_cursor(vol, &ph.input);
                    total_input +=
                        c.extents.iter().map(|e| e.1 as f64).sum::<f64>() + c.memory_left;
                    self.cursors.push(c);
                    self.cursors.len() - 1
                }
            };
            let nflows = ph.flows.len();
            self.ws[w] = WState {
                cursor: idx,
                acc: vec![0.0; nflows],
                ..WState::default()
            };
        }
        total_input
    }

    /// Size the phase's messages and input chunks. Messages: the stream-buffer size,
    /// coarsened (in whole buffers) when a phase would move more than `max_chunks_per_phase`
    /// of them; per-message costs stay per buffer.
    fn size_messages(&mut self, ph: &Phase, total_input: f64) {
        let nw = self.topo.workers.len();
        let mut flow_bytes = 0.0f64;
        for fl in &ph.flows {
            let fan = match fl.dest {
                Dest::AllPeers => nw.saturating_sub(1) as f64,
                _ => 1.0,
            };
            flow_bytes += fan
                * match fl.amount {
                    Amount::Ratio(r) => r * total_input,
                    Amount::Bytes(b) => b * nw as f64,
                };
        }
        let base_msg = self.gran.message_bytes.max(1);
        // Phases that write while they read (sort, join, repartitions) interleave reads and
        // writes on the same drives; coarse chunks would hide those seeks, so they get a
        // four times finer bound.
        let streams_writes = ph
            .flows
            .iter()
            .any(|f| f.write.is_some() && matches!(f.amount, Amount::Ratio(_)));
        let cap = self.gran.max_chunks_per_phase.max(1) * if streams_writes { 4 } else { 1 };
        let needed_msg = (flow_bytes / cap as f64).ceil() as u64;
        self.msg_bytes = base_msg.max(needed_msg.div_ceil(base_msg) * base_msg);
        let in_flight = ph
            .requests_in_flight
            .unwrap_or(self.topo.buffers_per_worker);
        (self.chunk_bytes, self.k_chunks) = chunking(
            self.gran.request_bytes,
            self.gran.message_bytes,
            total_input,
            cap,
            in_flight,
        );
    }

    /// The coordinator dispatches the phase: a command (with the phase's broadcast) to every
    /// worker.
    fn send_commands(&mut self, ph: &Phase) {
        let coord = self.topo.coordinator;
        let bytes = self.gran.control_bytes + ph.broadcast_bytes.max(0.0) as u64;
        for w in 0..self.topo.workers.len() {
            let node = self.topo.workers[w].node;
            let mut steps = self.take_steps();
            let send_ns = self.os_ns(coord, |o| o.per_message_us());
            steps.push(Step::Cpu {
                res: self.topo.nodes[coord].cpus[0],
                ns: send_ns,
                ctx_ns: 0,
            });
            self.push_route(&mut steps, coord, node, bytes);
            let recv_ns = self.os_ns(node, |o| o.per_message_us());
            steps.push(Step::Cpu {
                res: self.topo.workers[w].cpu,
                ns: recv_ns,
                ctx_ns: 0,
            });
            self.start_xfer(steps, bytes, Done::Command(w as u32));
        }
    }

    fn make_cursor(&self, vol: usize, input: &Input) -> Cursor {
        let drives = self.topo.volumes[vol].drives.clone();
        let (extents, memory_left) = match input {
            Input::File(f) => (
                drives
                    .iter()
                    .map(|d| self.topo.drives[*d].stored(*f))
                    .collect(),
                0.0,
            ),
            Input::FilePart(f, frac) => (
                drives
                    .iter()
                    .map(|d| {
                        let (s, l) = self.topo.drives[*d].stored(*f);
                        (s, (l as f64 * frac.clamp(0.0, 1.0)) as u64)
                    })
                    .collect(),
                0.0,
            ),
            Input::Segmented(f, _) => (
                drives
                    .iter()
                    .map(|d| self.topo.drives[*d].stored(*f))
                    .collect(),
                0.0,
            ),
            Input::Memory(b) => (vec![(0, 0); drives.len()], b.max(0.0)),
            Input::None => (vec![(0, 0); drives.len()], 0.0),
        };
        let n = drives.len();
        let segment = match input {
            Input::Segmented(_, seg) => Some(*seg),
            _ => None,
        };
        Cursor {
            drives,
            extents,
            consumed: vec![0; n],
            next: 0,
            memory_left,
            segment,
        }
    }

    fn check_phase_end(&mut self) {
        if self.coord_end_started || self.phase >= self.plan.phases.len() {
            return;
        }
        if self.ended_workers < self.topo.workers.len() || self.outstanding > 0 {
            return;
        }
        let ph = &self.plan.phases[self.phase];
        let coord = self.topo.coordinator;
        if !self.coord_writes_issued && !ph.coord_writes.is_empty() {
            self.coord_writes_issued = true;
            let writes = ph.coord_writes.clone();
            let vol = self.topo.coord_vol;
            let msg = self.gran.message_bytes.max(1);
            for (file, total) in writes {
                let drives = self.topo.volumes[vol].drives.clone();
                if drives.is_empty() {
                    continue;
                }
                let mut left = total.max(0.0) as u64;
                let msg = msg.max((left / 4096).div_ceil(msg) * msg);
                for d in &drives {
                    self.topo.drives[*d].reserve(file, left / drives.len() as u64 + (4 << 20));
                }
                while left > 0 {
                    let bytes = left.min(msg);
                    left -= bytes;
                    let drive = drives[self.write_rr[vol] % drives.len()];
                    self.write_rr[vol] += 1;
                    let mut steps = self.take_steps();
                    self.push_node_to_drive(&mut steps, coord, drive, bytes);
                    steps.push(Step::Write { drive, file });
                    steps.push(Step::SlotRelease(self.topo.workers.len() as u32));
                    self.outstanding += 1;
                    let slot = self.topo.workers.len();
                    self.slot_queue[slot].push_back((steps, bytes));
                }
            }
            let slot = self.topo.workers.len();
            self.pump(slot);
            if self.outstanding > 0 {
                return;
            }
        }
        self.coord_end_started = true;
        let ph = &self.plan.phases[self.phase];
        let ns = self.cycles_ns(coord, ph.coord_end_cycles);
        let res = self.topo.nodes[coord].cpus[0];
        self.start_xfer(vec![Step::Cpu { res, ns, ctx_ns: 0 }], 0, Done::CoordEnd);
    }

    // ----- workers ------------------------------------------------------------------

    fn fill(&mut self, w: usize) {
        let ph = &self.plan.phases[self.phase];
        while !self.ws[w].input_done && self.ws[w].in_flight < self.k_chunks {
            let cur = self.ws[w].cursor;
            let chunk = self.chunk_bytes;
            let worker = self.topo.workers[w].clone();
            let mut steps = self.take_steps();
            let bytes;
            let mut requests = 0u64;
            if self.cursors[cur].memory_left > 0.0 {
                let take = (chunk as f64).min(self.cursors[cur].memory_left);
                self.cursors[cur].memory_left -= take;
                bytes = take.ceil() as u64;
            } else if let Some((drive, addr, len)) = self.cursors[cur].next_chunk(chunk) {
                steps.push(Step::Read { drive, addr, len });
                self.push_drive_to_node(&mut steps, drive, worker.node, len);
                bytes = len;
                requests = len.div_ceil(self.gran.request_bytes.max(1));
            } else {
                self.ws[w].input_done = true;
                break;
            }
            let node = &self.topo.nodes[worker.node];
            let cycles = ph.cycles_per_byte * bytes as f64;
            let shared = self.topo.volumes[worker.vols[ph.read_vol]].sharers > 1 && requests > 0;
            let lock = if shared {
                self.gran.shared_queue_lock_us * 1e3
            } else {
                0.0
            };
            let ns = cycles / node.mhz * 1e3 + requests as f64 * node.os.per_io_us() * 1e3 + lock;
            let ctx_ns = (node.os.context_switch_us * 1e3) as u64;
            steps.push(Step::Cpu {
                res: worker.cpu,
                ns: ns.round() as u64,
                ctx_ns,
            });
            let c = self.alloc_chunk(w as u32, bytes);
            self.ws[w].in_flight += 1;
            self.start_xfer(steps, bytes, Done::Chunk(c));
        }
    }

    fn alloc_chunk(&mut self, worker: u32, bytes: u64) -> u32 {
        let st = ChunkState {
            worker,
            pending: 1,
            bytes,
        };
        if let Some(i) = self.free_chunks.pop() {
            self.chunks[i as usize] = st;
            i
        } else {
            self.chunks.push(st);
            (self.chunks.len() - 1) as u32
        }
    }

    fn chunk_computed(&mut self, c: u32) {
        let w = self.chunks[c as usize].worker as usize;
        let bytes = self.chunks[c as usize].bytes as f64;
        let nflows = self.plan.phases[self.phase].flows.len();
        for f in 0..nflows {
            let flow = self.plan.phases[self.phase].flows[f];
            if let Amount::Ratio(r) = flow.amount {
                self.accumulate(w, f, &flow, r * bytes, Some(c), false);
            }
        }
        self.release_chunk(c);
    }

    fn release_chunk(&mut self, c: u32) {
        let st = &mut self.chunks[c as usize];
        st.pending -= 1;
        if st.pending > 0 {
            return;
        }
        let w = st.worker as usize;
        self.free_chunks.push(c);
        self.ws[w].in_flight -= 1;
        self.fill(w);
        self.check_worker_end(w);
    }

    /// Add `bytes` of output of flow `f` at worker `w`; emit full messages (or everything when
    /// `flush`). Shuffles accumulate one total and emit a message to every destination once each
    /// destination's even share fills a message (the same as per-destination buffers under an
    /// even split, at O(1) cost per chunk).
    fn accumulate(
        &mut self,
        w: usize,
        f: usize,
        flow: &Flow,
        bytes: f64,
        chunk: Option<u32>,
        flush: bool,
    ) {
        let nw = self.topo.workers.len();
        let msg = self.msg_bytes.max(1) as f64;
        self.ws[w].acc[f] += bytes;
        let (fanout, share): (usize, f64) = match flow.dest {
            Dest::Coordinator | Dest::Local => (1, 1.0),
            Dest::Shuffle => (nw, 1.0 / nw as f64),
            Dest::AllPeers => (nw.saturating_sub(1), 1.0),
        };
        if fanout == 0 {
            self.ws[w].acc[f] = 0.0;
            return;
        }
        loop {
            let per_dest = self.ws[w].acc[f] * share;
            let send = if per_dest >= msg {
                msg
            } else if flush && per_dest >= 0.5 {
                per_dest
            } else {
                break;
            };
            self.ws[w].acc[f] -= send / share;
            let bytes = send.round() as u64;
            match flow.dest {
                Dest::Coordinator => self.send(w, nw, flow, bytes, chunk),
                Dest::Local => self.send(w, w, flow, bytes, chunk),
                Dest::Shuffle => {
                    for d in 0..nw {
                        self.send(w, d, flow, bytes, chunk);
                    }
                }
                Dest::AllPeers => {
                    for d in 0..nw {
                        if d != w {
                            self.send(w, d, flow, bytes, chunk);
                        }
                    }
                }
            }
        }
    }

    fn send(&mut self, w: usize, dest: usize, flow: &Flow, bytes: u64, chunk: Option<u32>) {
        let nw = self.topo.workers.len();
        let src = self.topo.workers[w].node;
        let (dst_node, dst_cpu, dst_vol) = if dest == nw {
            let c = self.topo.coordinator;
            (c, self.topo.nodes[c].cpus[0], self.topo.coord_vol)
        } else {
            let wk = &self.topo.workers[dest];
            (
                wk.node,
                wk.cpu,
                wk.vols[self.plan.phases[self.phase].write_vol],
            )
        };
        let mut steps = self.take_steps();
        self.push_route(&mut steps, src, dst_node, bytes);
        // The sender's buffer is free once the message has left the sender (its port, loop
        // or block-transfer engine); switches and receivers buffer it from there.
        let at = if src == dst_node {
            0
        } else {
            self.sender_legs(src).min(steps.len())
        };
        match chunk {
            Some(c) => steps.insert(at, Step::Release(c)),
            // End-of-input output goes through the same bounded window of buffers.
            None => steps.insert(at, Step::SlotRelease(w as u32)),
        }
        let node = &self.topo.nodes[dst_node];
        let buffers = (bytes as f64 / self.gran.message_bytes.max(1) as f64)
            .ceil()
            .max(1.0);
        let os = if src == dst_node {
            0.0
        } else {
            node.os.per_message_us() * 1e3 * buffers
        };
        let ns = flow.recv_cycles_per_byte * bytes as f64 / node.mhz * 1e3 + os;
        if ns > 0.0 {
            steps.push(Step::Cpu {
                res: dst_cpu,
                ns: ns.round() as u64,
                ctx_ns: 0,
            });
        }
        if let Some(file) = flow.write {
            let drives = &self.topo.volumes[dst_vol].drives;
            if !drives.is_empty() {
                let drive = drives[self.write_rr[dst_vol] % drives.len()];
                self.write_rr[dst_vol] += 1;
                self.push_node_to_drive(&mut steps, dst_node, drive, bytes);
                steps.push(Step::Write { drive, file });
            }
        }
        self.outstanding += 1;
        match chunk {
            Some(c) => {
                self.chunks[c as usize].pending += 1;
                self.start_xfer(steps, bytes, Done::Msg(None));
            }
            None => {
                self.slot_queue[w].push_back((steps, bytes));
                self.pump(w);
            }
        }
    }

    /// Start queued sends of `slot` while fewer than the window are in flight.
    fn pump(&mut self, slot: usize) {
        let window = if slot == self.topo.workers.len() {
            16
        } else {
            self.topo.message_window.max(2)
        };
        while self.slot_inflight[slot] < window {
            let Some((steps, bytes)) = self.slot_queue[slot].pop_front() else {
                break;
            };
            self.slot_inflight[slot] += 1;
            self.start_xfer(steps, bytes, Done::Msg(None));
        }
    }

    fn check_worker_end(&mut self, w: usize) {
        let st = &self.ws[w];
        if !st.input_done || st.in_flight > 0 || st.end_emitted {
            return;
        }
        self.ws[w].end_emitted = true;
        let ph = self.plan.phases[self.phase].clone();
        for (f, flow) in ph.flows.iter().enumerate() {
            let extra = match flow.amount {
                Amount::Bytes(b) => b.max(0.0),
                Amount::Ratio(_) => 0.0,
            };
            self.accumulate(w, f, flow, extra, None, true);
        }
        let worker = self.topo.workers[w].clone();
        let ns = self.cycles_ns(worker.node, ph.end_cycles);
        self.start_xfer(
            vec![Step::Cpu {
                res: worker.cpu,
                ns,
                ctx_ns: 0,
            }],
            0,
            Done::WorkerEnd(w as u32),
        );
    }

    fn worker_ended(&mut self, w: usize) {
        let ph = &self.plan.phases[self.phase];
        if ph.sync {
            let node = self.topo.workers[w].node;
            let coord = self.topo.coordinator;
            let bytes = self.gran.control_bytes;
            let mut steps = self.take_steps();
            self.push_route(&mut steps, node, coord, bytes);
            let ns = self.os_ns(coord, |o| o.per_message_us());
            steps.push(Step::Cpu {
                res: self.topo.nodes[coord].cpus[0],
                ns,
                ctx_ns: 0,
            });
            self.start_xfer(steps, bytes, Done::Sync(w as u32));
        } else {
            self.ws[w].ended = true;
            self.ended_workers += 1;
            self.check_phase_end();
        }
    }

    // ----- routes -------------------------------------------------------------------

    /// Legs from node `a` to node `b`. Shared loops are one leg; switched networks and SMP
    /// fabrics are store-and-forward, one leg per hop (switches buffer whole messages).
    fn net_legs(&mut self, a: usize, b: usize) -> Legs {
        if let Some(h) = self.routes.get(&(a, b)) {
            return h.clone();
        }
        let legs: Vec<Vec<Hop>> = match &self.topo.net {
            Net::Local => Vec::new(),
            Net::Loops { loops } => vec![vec![Hop::AnyOf(loops.clone())]],
            Net::Switched {
                tx,
                rx,
                switch_of,
                up,
                down,
                bus,
            } => {
                let mut h = Vec::new();
                if let Some(b0) = bus[a] {
                    h.push(vec![Hop::One(b0)]);
                }
                h.push(vec![Hop::One(tx[a])]);
                let (sa, sb) = (switch_of[a], switch_of[b]);
                if sa != sb {
                    if sa != usize::MAX {
                        h.push(vec![Hop::One(up[sa])]);
                    }
                    if sb != usize::MAX {
                        h.push(vec![Hop::One(down[sb])]);
                    }
                }
                h.push(vec![Hop::One(rx[b])]);
                if let Some(b1) = bus[b] {
                    h.push(vec![Hop::One(b1)]);
                }
                h
            }
            Net::Smp { bte, link_in } => vec![vec![Hop::One(bte[a])], vec![Hop::One(link_in[b])]],
        };
        let legs = Rc::new(legs.into_iter().map(Rc::new).collect::<Vec<_>>());
        self.routes.insert((a, b), legs.clone());
        legs
    }

    /// Legs of a route that belong to the sender (after them its buffer is free).
    fn sender_legs(&self, a: usize) -> usize {
        match &self.topo.net {
            Net::Local => 0,
            Net::Loops { .. } | Net::Smp { .. } => 1,
            Net::Switched { bus, .. } => 1 + usize::from(bus[a].is_some()),
        }
    }

    fn push_legs(&mut self, steps: &mut Vec<Step>, a: usize, b: usize) {
        let legs = self.net_legs(a, b);
        for l in legs.iter() {
            steps.push(Step::Leg(l.clone()));
        }
    }

    fn push_route(&mut self, steps: &mut Vec<Step>, a: usize, b: usize, bytes: u64) {
        if a == b {
            return;
        }
        let coord = self.topo.coordinator;
        if self.topo.via_host && a != coord && b != coord {
            self.push_legs(steps, a, coord);
            let node = &self.topo.nodes[coord];
            let ns = self.gran.copy_cycles_per_byte * bytes as f64 / node.mhz * 1e3
                + 2.0 * node.os.per_message_us() * 1e3;
            steps.push(Step::Cpu {
                res: node.cpus[0],
                ns: ns.round() as u64,
                ctx_ns: 0,
            });
            self.push_legs(steps, coord, b);
        } else {
            self.push_legs(steps, a, b);
        }
    }

    fn push_drive_to_node(&mut self, steps: &mut Vec<Step>, drive: usize, node: usize, bytes: u64) {
        let d = &self.topo.drives[drive];
        match d.owner {
            Some(o) if o != node => {
                if !d.hops.is_empty() {
                    let h = self.local_hops(drive, usize::MAX);
                    steps.push(Step::Leg(h));
                }
                self.push_route(steps, o, node, bytes);
            }
            _ => {
                let h = self.local_hops(drive, node);
                if !h.is_empty() {
                    steps.push(Step::Leg(h));
                }
            }
        }
    }

    /// Hops between a drive and a node's memory when no other node is involved
    /// (`node = usize::MAX`: the drive's own hops only).
    fn local_hops(&mut self, drive: usize, node: usize) -> Rc<Vec<Hop>> {
        if let Some(h) = self.drive_routes.get(&(drive, node)) {
            return h.clone();
        }
        let d = &self.topo.drives[drive];
        let mut h = d.hops.clone();
        if d.owner.is_none() && node != usize::MAX {
            h.extend(self.topo.nodes[node].io_hops.iter().cloned());
        }
        let h = Rc::new(h);
        self.drive_routes.insert((drive, node), h.clone());
        h
    }

    fn push_node_to_drive(&mut self, steps: &mut Vec<Step>, node: usize, drive: usize, bytes: u64) {
        let d = &self.topo.drives[drive];
        match d.owner {
            Some(o) if o != node => {
                let has = !d.hops.is_empty();
                self.push_route(steps, node, o, bytes);
                if has {
                    let h = self.local_hops(drive, usize::MAX);
                    steps.push(Step::Leg(h));
                }
            }
            _ => {
                let h = self.local_hops(drive, node);
                if !h.is_empty() {
                    steps.push(Step::Leg(h));
                }
            }
        }
    }

    fn os_ns(&self, node: usize, f: impl Fn(&OsCosts) -> f64) -> u64 {
        (f(&self.topo.nodes[node].os) * 1e3).round() as u64
    }

    fn cycles_ns(&self, node: usize, cycles: f64) -> u64 {
        (cycles.max(0.0) / self.topo.nodes[node].mhz * 1e3).round() as u64
    }

    // ----- transfers ----------------------------------------------------------------

    fn take_steps(&mut self) -> Vec<Step> {
        self.step_pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(8))
    }

    fn start_xfer(&mut self, steps: Vec<Step>, bytes: u64, done: Done) {
        let chosen = self.chosen_pool.pop().unwrap_or_default();
        let x = Xfer {
            steps,
            pos: 0,
            bytes,
            chosen,
            done,
        };
        let id = if let Some(i) = self.free_xfers.pop() {
            self.xfers[i as usize] = Some(x);
            i
        } else {
            self.xfers.push(Some(x));
            (self.xfers.len() - 1) as u32
        };
        self.run_step(id);
    }

    /// Start the current step of `id` (or finish it if no steps remain).
    fn run_step(&mut self, id: u32) {
        let now = self.q.now();
        let Some(x) = self.xfers[id as usize].as_mut() else {
            return;
        };
        if x.pos >= x.steps.len() {
            self.retire_xfer(id);
            return;
        }
        let bytes = x.bytes;
        if let Step::Release(c) = x.steps[x.pos] {
            x.pos += 1;
            self.release_chunk(c);
            self.run_step(id);
            return;
        }
        if let Step::SlotRelease(slot) = x.steps[x.pos] {
            x.pos += 1;
            self.slot_inflight[slot as usize] -= 1;
            self.pump(slot as usize);
            self.run_step(id);
            return;
        }
        let finish = match &x.steps[x.pos] {
            Step::Release(_) | Step::SlotRelease(_) => unreachable!("handled above"),
            Step::Cpu { res, ns, ctx_ns } => self.topo.resources[*res].serve_cpu(now, *ns, *ctx_ns),
            Step::Read { drive, addr, len } => self.topo.serve_read(now, *drive, *addr, *len),
            Step::Write { drive, file } => self.topo.serve_write(now, *drive, *file, bytes),
            Step::Leg(hops) => self.topo.serve_leg(now, hops, &mut x.chosen, bytes),
        };
        self.q.schedule_at(finish, id);
    }

    /// Transfer `id` has no steps left: recycle its slot and buffers, then act on its end.
    fn retire_xfer(&mut self, id: u32) {
        let Some(Xfer {
            mut steps,
            mut chosen,
            done,
            ..
        }) = self.xfers[id as usize].take()
        else {
            return;
        };
        self.free_xfers.push(id);
        steps.clear();
        chosen.clear();
        if self.step_pool.len() < 4096 {
            self.step_pool.push(steps);
            self.chosen_pool.push(chosen);
        }
        self.finish(done);
    }

    /// A step of `id` completed.
    fn advance(&mut self, id: u32) {
        let Some(x) = self.xfers[id as usize].as_mut() else {
            return;
        };
        if let Some(Step::Leg(_)) = x.steps.get(x.pos) {
            for r in &x.chosen {
                self.topo.resources[*r].bytes_out += x.bytes;
            }
        }
        x.pos += 1;
        self.run_step(id);
    }

    fn finish(&mut self, done: Done) {
        match done {
            Done::Chunk(c) => self.chunk_computed(c),
            Done::Msg(Some(c)) => self.release_chunk(c),
            Done::Msg(None) => {
                debug_assert!(self.outstanding > 0);
                self.outstanding -= 1;
                self.check_phase_end();
            }
            Done::Command(w) => {
                self.fill(w as usize);
                self.check_worker_end(w as usize);
            }
            Done::WorkerEnd(w) => self.worker_ended(w as usize),
            Done::Sync(w) => {
                self.ws[w as usize].ended = true;
                self.ended_workers += 1;
                self.check_phase_end();
            }
            Done::CoordEnd => {
                let now = self.q.now();
                if let Some(t) = self.timings.last_mut() {
                    t.end_s = now.as_secs_f64();
                }
                self.phase += 1;
                self.begin_phase();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segmented_cursor_reads_every_byte_once_out_of_order() {
        let len = 1_000_000u64;
        let seg = 24_576u64;
        let mut c = Cursor {
            drives: vec![0, 1],
            extents: vec![(0, len), (5_000_000, len - 7)],
            consumed: vec![0, 0],
            next: 0,
            memory_left: 0.0,
            segment: Some(seg),
        };
        let mut seen: Vec<Vec<(u64, u64)>> = vec![Vec::new(), Vec::new()];
        let mut jumps = 0;
        let mut last = [u64::MAX; 2];
        while let Some((d, addr, l)) = c.next_chunk(1 << 20) {
            if last[d] != u64::MAX && addr != last[d] {
                jumps += 1;
            }
            last[d] = addr + l;
            seen[d].push((addr, l));
        }
        for (d, (start, total)) in [(0, len), (5_000_000, len - 7)].iter().enumerate() {
            let mut v = seen[d].clone();
            v.sort_unstable();
            let mut pos = *start;
            for (a, l) in v {
                assert_eq!(a, pos, "gap or overlap on drive {d}");
                pos += l;
            }
            assert_eq!(pos, start + total);
        }
        assert!(
            jumps > 70,
            "segments should not be read sequentially ({jumps} jumps)"
        );
    }

    #[test]
    fn contiguous_cursor_stripes_round_robin() {
        let mut c = Cursor {
            drives: vec![3, 4],
            extents: vec![(0, 10), (100, 5)],
            consumed: vec![0, 0],
            next: 0,
            memory_left: 0.0,
            segment: None,
        };
        let got: Vec<(usize, u64, u64)> = std::iter::from_fn(|| c.next_chunk(4)).collect();
        assert_eq!(
            got,
            vec![(3, 0, 4), (4, 100, 4), (3, 4, 4), (4, 104, 1), (3, 8, 2)]
        );
    }
}
