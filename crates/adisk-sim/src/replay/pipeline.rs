//! One job replayed as a discrete-event simulation. Each replayed disk streams its data in
//! `chunks_per_disk` chunks through FIFO stations:
//!
//! ```text
//!  storage read ─► disk CPU (cores) ─┬─► storage write (bytes_written)
//!  (model::disk / ssd / throttle)    ├─► disk link ──► other disks (bytes_shipped_disks)
//!                                    └─► host link ──► host NIC (shared) ──► host CPU (combine)
//! ```
//!
//! Every station serves chunks first come first served (`des::EventQueue` orders arrivals by
//! time, then scheduling order), so the stations of one disk overlap the way streams do, and
//! disks contend only for the shared NIC and the host's cores. The job ends when its last
//! chunk has been combined, written and delivered.

use super::config::{CpuSlows, ReplayConfig, StorageKind};
use super::schedule::JobPlan;
use super::workload::JobWork;
use crate::des::EventQueue;
use crate::model::cpu::CpuSpec;
use crate::model::disk::{DiskModel, DiskOp};
use crate::model::link::LinkSpec;
use crate::model::ssd::SsdModel;
use crate::time::{SimDuration, SimTime};

/// Busy time of the resources of one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobBusy {
    /// Busiest disk's CPU busy time over its core count, ns.
    pub disk_cpu_ns: u64,
    /// Busiest disk's storage, ns.
    pub storage_ns: u64,
    /// Busiest disk's host link, ns.
    pub host_link_ns: u64,
    /// Busiest disk's disk-to-disk link, ns.
    pub disk_link_ns: u64,
    /// The host's shared ingress, ns.
    pub host_nic_ns: u64,
    /// Host cores' busy time over the host core count, ns.
    pub host_cpu_ns: u64,
}

/// A simulated job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRun {
    /// When the job started.
    pub start: SimTime,
    /// When the job ended.
    pub end: SimTime,
    /// Busy times.
    pub busy: JobBusy,
}

/// Where a chunk is going next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Read,
    Compute,
    Write,
    Exchange,
    HostLink,
    Nic,
    Combine,
}

/// One chunk of one disk's part of a job.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    job: u32,
    disk: u32,
    chunk: u32,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// A job starts (its dependencies ended and the host's gap passed).
    Start(usize),
    /// A chunk reaches a station.
    Chunk(Chunk, Step),
    /// A job's last chunk is done.
    End(usize),
}

/// A FIFO link: `model::link` occupancy when it has a rate, nothing when unlimited; delivery
/// `latency_ns` after the transfer leaves.
struct Link {
    spec: Option<LinkSpec>,
    latency_ns: u64,
    free: SimTime,
    busy_ns: u64,
    /// A token bucket (`Some((depth in bytes, tokens, when counted))`): bytes pass at once
    /// while it holds tokens, refilled at the link's rate; full at the start.
    bucket: Option<(f64, f64, SimTime)>,
}

impl Link {
    fn new(bytes_per_s: Option<f64>, latency_ns: u64) -> Link {
        Link {
            spec: bytes_per_s.map(|r| LinkSpec::new(r / 1e6, latency_ns as f64 / 1e3)),
            latency_ns,
            free: SimTime::ZERO,
            busy_ns: 0,
            bucket: None,
        }
    }

    /// A throttle that is a token bucket holding `burst_s` seconds of its rate (as the
    /// runtime's emulated links and reads are); 0: a plain rate.
    fn with_burst(mut self, burst_s: f64) -> Link {
        if let Some(spec) = &self.spec
            && burst_s > 0.0
        {
            let depth = spec.bandwidth_mbps * 1e6 * burst_s;
            self.bucket = Some((depth, depth, SimTime::ZERO));
        }
        self
    }

    /// Send `bytes` arriving at `at`; returns when they are delivered.
    fn send(&mut self, at: SimTime, bytes: u64) -> SimTime {
        let Some(spec) = &self.spec else {
            return at + SimDuration(self.latency_ns);
        };
        let occupancy = SimDuration(spec.occupancy_ns(bytes).round() as u64);
        self.busy_ns += occupancy.0;
        if let Some((depth, tokens, counted)) = &mut self.bucket {
            let rate = spec.bandwidth_mbps * 1e6;
            let refill = at.0.saturating_sub(counted.0) as f64 * 1e-9 * rate;
            *tokens = (*tokens + refill).min(*depth) - bytes as f64;
            *counted = (*counted).max(at);
            let wait = if *tokens < 0.0 { -*tokens / rate } else { 0.0 };
            return at + SimDuration((wait * 1e9) as u64) + SimDuration(self.latency_ns);
        }
        let start = at.max(self.free);
        self.free = start + occupancy;
        self.free + SimDuration(self.latency_ns)
    }
}

/// Identical cores serving work first come first served, each at `model::cpu` speed: work is
/// in recorded nanoseconds, i.e. cycles of a 1,000 MHz reference core, and the core runs at
/// `1000 · speed` MHz.
#[derive(Clone, Debug)]
struct Cores {
    spec: CpuSpec,
    free: Vec<SimTime>,
    busy_ns: u64,
}

impl Cores {
    /// `cpus` cores (fractional: `⌈cpus⌉` cores sharing `cpus` cores' worth) at `speed`.
    fn new(cpus: f64, speed: f64) -> Cores {
        let count = cpus.ceil().max(1.0) as u32;
        let spec = CpuSpec {
            mhz: 1000.0 * speed * cpus / count as f64,
            count,
        };
        Cores {
            free: vec![SimTime::ZERO; count as usize],
            spec,
            busy_ns: 0,
        }
    }
    /// Run `work_ns` recorded ns arriving at `at` on the core free first; returns the finish.
    fn run(&mut self, at: SimTime, work_ns: u64) -> SimTime {
        let mut best = 0;
        for (i, f) in self.free.iter().enumerate() {
            if *f < self.free[best] {
                best = i;
            }
        }
        let start = at.max(self.free[best]);
        let d = SimDuration::from_secs_f64(self.spec.secs(work_ns as f64));
        self.free[best] = start + d;
        self.busy_ns += d.0;
        self.free[best]
    }
}

/// What serves a disk's reads and writes.
enum Storage {
    /// Recorded storage: a read-rate throttle (writes are not throttled), or nothing.
    Throttle(Link),
    /// A drive; reads stream from address 0, writes go to the second half of the drive.
    Hdd {
        drive: Box<DiskModel>,
        read_at: u64,
        write_at: u64,
        busy_ns: u64,
    },
    /// An SSD.
    Ssd { ssd: Box<SsdModel>, busy_ns: u64 },
}

impl Storage {
    /// Serve `bytes` arriving at `at`; returns the finish.
    fn serve(&mut self, at: SimTime, op: DiskOp, bytes: u64) -> SimTime {
        if bytes == 0 {
            return at;
        }
        match self {
            Storage::Throttle(link) if op == DiskOp::Read => link.send(at, bytes),
            Storage::Throttle(_) => at,
            Storage::Hdd {
                drive,
                read_at,
                write_at,
                busy_ns,
            } => {
                let cursor = if op == DiskOp::Read {
                    read_at
                } else {
                    write_at
                };
                let (s, f) = drive.serve(at, op, *cursor, bytes);
                *cursor += bytes;
                *busy_ns += f.since(s).0;
                f
            }
            Storage::Ssd { ssd, busy_ns } => {
                let (s, f) = ssd.serve(at, op, bytes);
                *busy_ns += f.since(s).0;
                f
            }
        }
    }
    fn busy_ns(&self) -> u64 {
        match self {
            Storage::Throttle(link) => link.busy_ns,
            Storage::Hdd { busy_ns, .. } | Storage::Ssd { busy_ns, .. } => *busy_ns,
        }
    }
}

/// One replayed disk's stations.
struct Disk {
    storage: Storage,
    cpu: Cores,
    host_link: Link,
    disk_link: Link,
}

/// The prototype storage of one disk (an HDD's seek curve is fitted once per job).
enum StorageProto {
    Throttle(Option<f64>, f64),
    Hdd(Box<DiskModel>),
    Ssd(Box<SsdModel>),
}

impl StorageProto {
    fn new(cfg: &ReplayConfig) -> Result<StorageProto, String> {
        Ok(match cfg.storage {
            StorageKind::Recorded => {
                StorageProto::Throttle(cfg.disk_read_bytes_per_s, cfg.disk_read_burst_s)
            }
            StorageKind::Hdd => {
                let spec = cfg.hdd.clone().unwrap_or_else(super::config::default_hdd);
                StorageProto::Hdd(Box::new(DiskModel::new(&spec, 0.0, 0)?))
            }
            StorageKind::Ssd => {
                let spec = cfg.ssd.clone().unwrap_or_else(super::config::default_ssd);
                StorageProto::Ssd(Box::new(SsdModel::new(&spec)?))
            }
        })
    }
    fn instance(&self) -> Storage {
        match self {
            StorageProto::Throttle(rate, burst) => {
                Storage::Throttle(Link::new(*rate, 0).with_burst(*burst))
            }
            StorageProto::Hdd(d) => Storage::Hdd {
                write_at: d.capacity() / 2,
                drive: d.clone(),
                read_at: 0,
                busy_ns: 0,
            },
            StorageProto::Ssd(s) => Storage::Ssd {
                ssd: s.clone(),
                busy_ns: 0,
            },
        }
    }
}

/// Part `c` of `chunks` of an amount `total` (rounded to an integer): the parts are integers
/// that differ by at most one and sum to the rounded total.
fn part(total: f64, c: u32, chunks: u32) -> u64 {
    let t = total.max(0.0).round() as u128;
    let n = chunks.max(1) as u128;
    let c = c as u128;
    ((c + 1) * t / n - c * t / n) as u64
}

/// The stations of a request's jobs (a replayed disk's stations serve every job on it, and
/// the host's every job) and its event list.
struct RequestSim<'a> {
    queue: EventQueue<Event>,
    plans: &'a [JobPlan],
    jobs: Vec<JobState>,
    /// Per job, the jobs that wait for it.
    dependents: Vec<Vec<usize>>,
    disks: Vec<Disk>,
    nic: Link,
    host: Cores,
    /// The cores of the one machine the host and all disks share, when they do.
    machine: Option<Cores>,
    /// The runtime's read throttle: the thread that decodes a chunk reads the next one (its
    /// wait for the throttle is not overlapped with decoding), so a disk's next read starts
    /// when a lane finished its chunk.
    serial_reads: bool,
    chunks: u32,
    half_rtt: u64,
    rtt: u64,
    host_speed: f64,
    /// The disks' emulated speed when it slows only their jobs' compute steps
    /// ([`CpuSlows::Steps`]; their cores then run at the machine's speed).
    steps_slowed: Option<f64>,
}

/// The speed of a disk's cores: the replayed speed when it slows all of the disk's CPU, the
/// machine's when it slows only the steps (which then take longer instead).
fn core_speed(cfg: &ReplayConfig) -> f64 {
    match cfg.disk_cpu_slows {
        CpuSlows::Processor => cfg.disk_cpu_speed * cfg.recorded_disk_cpu_speed,
        CpuSlows::Steps => 1.0,
    }
}

/// A job's progress.
#[derive(Clone, Debug, Default)]
struct JobState {
    /// Dependencies that have not ended yet.
    waiting_for: usize,
    start: SimTime,
    end: SimTime,
    /// Chunk paths still under way (a chunk forks into write, exchange and host paths).
    pending: u64,
    /// Host combining CPU per chunk, recorded ns.
    combine_ns: f64,
    busy: JobBusy,
    /// Per replayed disk: CPU, storage, host link, disk link busy time, ns.
    disk_busy: Vec<[u64; 4]>,
    /// Per replayed disk: the cores its part of the job can use at once
    /// ([`super::workload::JobWork::parallelism`], at most the disk's).
    lanes: Vec<Cores>,
    /// Per replayed disk: the next chunk to read when reads wait for the chunk before them
    /// (`serial_reads`).
    next_read: Vec<u32>,
    done: bool,
}

impl<'a> RequestSim<'a> {
    fn new(plans: &'a [JobPlan], cfg: &ReplayConfig) -> Result<RequestSim<'a>, String> {
        let proto = StorageProto::new(cfg)?;
        let half_rtt = cfg.rtt_ns / 2;
        let width = plans.iter().map(|p| p.work.disks.len()).max().unwrap_or(0);
        let disks = (0..width)
            .map(|_| Disk {
                storage: proto.instance(),
                // A recorded emulated speed slows the disk's own cores, not the machine's.
                cpu: Cores::new(cfg.disk_cpus, core_speed(cfg)),
                host_link: Link::new(cfg.host_link_bytes_per_s, cfg.rtt_ns - half_rtt),
                disk_link: Link::new(cfg.disk_link_bytes_per_s, 0),
            })
            .collect();
        let jobs = plans
            .iter()
            .map(|p| {
                let chunks = p.work.disks.len() as f64 * cfg.chunks_per_disk as f64;
                let more = cfg.disk_cpus / cfg.recorded_disk_cpus;
                let lane = (p.work.parallelism * more.max(1.0)).min(cfg.disk_cpus);
                let speed = core_speed(cfg);
                JobState {
                    waiting_for: p.deps.len(),
                    combine_ns: p.work.host_combine_ns / chunks.max(1.0),
                    disk_busy: vec![[0; 4]; p.work.disks.len()],
                    lanes: vec![Cores::new(lane, speed); p.work.disks.len()],
                    next_read: vec![0; p.work.disks.len()],
                    ..JobState::default()
                }
            })
            .collect();
        let mut dependents = vec![Vec::new(); plans.len()];
        for (k, p) in plans.iter().enumerate() {
            for &d in &p.deps {
                if let Some(list) = dependents.get_mut(d) {
                    list.push(k);
                }
            }
        }
        Ok(RequestSim {
            queue: EventQueue::new(),
            plans,
            jobs,
            dependents,
            disks,
            nic: Link::new(cfg.host_nic_bytes_per_s, 0).with_burst(cfg.host_nic_burst_s),
            host: Cores::new(cfg.host_cpus as f64, cfg.host_cpu_speed),
            machine: cfg.shared_cpus.map(|c| Cores::new(c, 1.0)),
            chunks: cfg.chunks_per_disk,
            half_rtt,
            rtt: cfg.rtt_ns,
            host_speed: cfg.host_cpu_speed,
            steps_slowed: (cfg.disk_cpu_slows == CpuSlows::Steps)
                .then_some(cfg.disk_cpu_speed * cfg.recorded_disk_cpu_speed),
            serial_reads: matches!(proto, StorageProto::Throttle(Some(_), _)),
        })
    }

    /// The host's gap before job `j`, at the replayed host speed.
    fn gap(&self, j: usize) -> SimDuration {
        SimDuration::from_secs_f64(self.plans[j].gap_ns as f64 * 1e-9 / self.host_speed)
    }

    /// Job `j` starts at `now`: every chunk's read is queued after half a round trip and the
    /// disk's wait for its grant.
    fn start(&mut self, now: SimTime, j: usize) {
        let work = &self.plans[j].work;
        let state = &mut self.jobs[j];
        state.start = now;
        state.end = now + SimDuration(self.rtt);
        state.pending = work.disks.len() as u64 * self.chunks as u64;
        for (d, w) in work.disks.iter().enumerate() {
            let offset = w.start_offset_ns / self.host_speed;
            let at = now
                + SimDuration(self.half_rtt)
                + SimDuration(w.admission_wait_ns as u64)
                + SimDuration(offset as u64);
            let first = if self.serial_reads {
                let lanes = self.jobs[j].lanes[d].spec.count;
                lanes.min(self.chunks)
            } else {
                self.chunks
            };
            self.jobs[j].next_read[d] = first;
            for chunk in 0..first {
                let e = Chunk {
                    job: j as u32,
                    disk: d as u32,
                    chunk,
                };
                self.queue.schedule_at(at, Event::Chunk(e, Step::Read));
            }
        }
        if self.jobs[j].pending == 0 {
            let end = self.jobs[j].end;
            self.queue.schedule_at(end, Event::End(j));
        }
    }

    /// Job `j` ended: the jobs waiting only for it start after their gaps.
    fn end(&mut self, j: usize) {
        self.jobs[j].done = true;
        let end = self.jobs[j].end;
        for i in 0..self.dependents[j].len() {
            let k = self.dependents[j][i];
            self.jobs[k].waiting_for -= 1;
            if self.jobs[k].waiting_for == 0 {
                let at = end + self.gap(k);
                self.queue.schedule_at(at, Event::Start(k));
            }
        }
    }

    /// One path of a chunk of job `c.job` finished at `at`; the host sees it the disk's
    /// recorded time outside its job later (less the round trip already modelled).
    fn finish_path(&mut self, c: Chunk, at: SimTime) {
        let outside = self.plans[c.job as usize].work.disks[c.disk as usize].outside_ns;
        let seen = at + SimDuration((outside as u64).saturating_sub(self.rtt));
        let job = &mut self.jobs[c.job as usize];
        job.end = job.end.max(seen);
        job.pending -= 1;
        if job.pending == 0 {
            let end = job.end;
            self.queue.schedule_at(end, Event::End(c.job as usize));
        }
    }

    fn then(&mut self, at: SimTime, c: Chunk, step: Step) {
        self.queue.schedule_at(at, Event::Chunk(c, step));
    }

    /// Run `work_ns` of disk `d`'s CPU work: on the disk's own cores, and when the disks share
    /// one machine on its cores too (the later finish counts).
    /// `held_ns` is how long it holds the disk's cores: `work_ns`, or more when an emulated
    /// slower processor pauses its steps (the machine's cores are free meanwhile).
    fn disk_cpu(&mut self, now: SimTime, d: usize, work_ns: u64, held_ns: u64) -> (SimTime, u64) {
        let cores = &mut self.disks[d].cpu;
        let before = cores.busy_ns;
        let mut f = cores.run(now, held_ns);
        let busy = cores.busy_ns - before;
        if let Some(m) = &mut self.machine {
            f = f.max(m.run(now, work_ns));
        }
        (f, busy)
    }

    /// How long `cpu_ns` of a disk's CPU, `step_ns` of it in compute steps, holds the disk's
    /// cores: all of it, or with [`CpuSlows::Steps`] the steps stretched by the emulated speed.
    fn held_ns(&self, cpu_ns: u64, step_ns: u64) -> u64 {
        match self.steps_slowed {
            None => cpu_ns,
            Some(speed) => {
                let steps = step_ns.min(cpu_ns);
                (steps as f64 / speed) as u64 + (cpu_ns - steps)
            }
        }
    }

    /// The host's combining work, on its cores (and the shared machine's).
    fn host_cpu(&mut self, now: SimTime, work_ns: u64) -> (SimTime, u64) {
        let before = self.host.busy_ns;
        let mut f = self.host.run(now, work_ns);
        let busy = self.host.busy_ns - before;
        if let Some(m) = &mut self.machine {
            let scaled = (work_ns as f64 / self.host_speed) as u64;
            f = f.max(m.run(now, scaled));
        }
        (f, busy)
    }

    fn handle(&mut self, now: SimTime, event: Event) {
        match event {
            Event::Start(j) => self.start(now, j),
            Event::End(j) => self.end(j),
            Event::Chunk(c, step) => self.step(now, c, step),
        }
    }

    fn step(&mut self, now: SimTime, c: Chunk, step: Step) {
        let chunks = self.chunks;
        let (j, d) = (c.job as usize, c.disk as usize);
        let w = &self.plans[j].work.disks[d];
        let amount = |v: f64| part(v, c.chunk, chunks);
        let (read, cpu, written, exchanged, shipped) = (
            amount(w.bytes_read),
            amount(w.cpu_ns),
            amount(w.bytes_written),
            amount(w.bytes_shipped_disks),
            amount(w.bytes_shipped_host),
        );
        let disk = &mut self.disks[d];
        match step {
            Step::Read => {
                let before = disk.storage.busy_ns();
                let f = disk.storage.serve(now, DiskOp::Read, read);
                self.jobs[j].disk_busy[d][1] += disk.storage.busy_ns() - before;
                self.then(f, c, Step::Compute);
            }
            Step::Compute => {
                let held = self.held_ns(cpu, amount(w.step_cpu_ns));
                let (f, busy) = self.disk_cpu(now, d, cpu, held);
                let f = f.max(self.jobs[j].lanes[d].run(now, held));
                self.jobs[j].disk_busy[d][0] += busy;
                let next = self.jobs[j].next_read[d];
                if next < chunks {
                    self.jobs[j].next_read[d] = next + 1;
                    let e = Chunk { chunk: next, ..c };
                    self.then(f, e, Step::Read);
                }
                let forks = u64::from(written > 0) + u64::from(exchanged > 0);
                self.jobs[j].pending += forks;
                if written > 0 {
                    self.then(f, c, Step::Write);
                }
                if exchanged > 0 {
                    self.then(f, c, Step::Exchange);
                }
                self.then(f, c, Step::HostLink);
            }
            Step::Write => {
                let before = disk.storage.busy_ns();
                let f = disk.storage.serve(now, DiskOp::Write, written);
                self.jobs[j].disk_busy[d][1] += disk.storage.busy_ns() - before;
                self.finish_path(c, f);
            }
            Step::Exchange => {
                let before = disk.disk_link.busy_ns;
                let f = disk.disk_link.send(now, exchanged);
                self.jobs[j].disk_busy[d][3] += disk.disk_link.busy_ns - before;
                self.finish_path(c, f);
            }
            Step::HostLink => {
                let before = disk.host_link.busy_ns;
                let f = disk.host_link.send(now, shipped);
                self.jobs[j].disk_busy[d][2] += disk.host_link.busy_ns - before;
                self.then(f, c, Step::Nic);
            }
            Step::Nic => {
                let before = self.nic.busy_ns;
                let f = self.nic.send(now, shipped);
                self.jobs[j].busy.host_nic_ns += self.nic.busy_ns - before;
                self.then(f, c, Step::Combine);
            }
            Step::Combine => {
                let total = self.jobs[j].combine_ns * chunks as f64;
                let (f, busy) = self.host_cpu(now, part(total, c.chunk, chunks));
                self.jobs[j].busy.host_cpu_ns += busy;
                self.finish_path(c, f);
            }
        }
    }

    /// Job `j`'s busy times: the busiest disk's per resource, per core where it has several.
    fn busy(&self, j: usize) -> JobBusy {
        let s = &self.jobs[j];
        let max = |k: usize| s.disk_busy.iter().map(|b| b[k]).max().unwrap_or(0);
        let disk_cores = self.disks.first().map_or(1, |d| d.cpu.spec.count as u64);
        JobBusy {
            disk_cpu_ns: max(0) / disk_cores,
            storage_ns: max(1),
            host_link_ns: max(2),
            disk_link_ns: max(3),
            host_nic_ns: s.busy.host_nic_ns,
            host_cpu_ns: s.busy.host_cpu_ns / self.host.spec.count as u64,
        }
    }
}

/// A simulated request: its jobs, and when its last job ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRun {
    /// Per job, in the plans' order.
    pub jobs: Vec<JobRun>,
    /// When the last job ended.
    pub end: SimTime,
    /// Events processed.
    pub events: u64,
}

/// Simulate the jobs of `plans` on `cfg`: those without dependencies start after their gaps
/// from time 0, the others their gaps after the last of their dependencies ended.
///
/// # Errors
///
/// The storage model's message when its spec is not valid.
pub fn run_request(plans: &[JobPlan], cfg: &ReplayConfig) -> Result<RequestRun, String> {
    let mut sim = RequestSim::new(plans, cfg)?;
    for (j, p) in plans.iter().enumerate() {
        if p.deps.is_empty() {
            let at = SimTime::ZERO + sim.gap(j);
            sim.queue.schedule_at(at, Event::Start(j));
        }
    }
    while let Some((now, e)) = sim.queue.pop() {
        sim.handle(now, e);
    }
    if let Some(j) = sim.jobs.iter().position(|s| !s.done) {
        return Err(format!(
            "job {j} never started: its dependencies form a cycle"
        ));
    }
    let jobs: Vec<JobRun> = (0..plans.len())
        .map(|j| JobRun {
            start: sim.jobs[j].start,
            end: sim.jobs[j].end,
            busy: sim.busy(j),
        })
        .collect();
    Ok(RequestRun {
        end: jobs.iter().map(|r| r.end).max().unwrap_or(SimTime::ZERO),
        jobs,
        events: sim.queue.processed(),
    })
}

/// Simulate one job alone, starting at `start`.
///
/// # Errors
///
/// As [`run_request`].
pub fn run_job(job: &JobWork, cfg: &ReplayConfig, start: SimTime) -> Result<JobRun, String> {
    let plan = JobPlan {
        work: job.clone(),
        deps: vec![],
        gap_ns: 0,
    };
    let run = run_request(std::slice::from_ref(&plan), cfg)?;
    let r = &run.jobs[0];
    Ok(JobRun {
        start: r.start + SimDuration(start.0),
        end: r.end + SimDuration(start.0),
        busy: r.busy.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_integers_that_sum_to_the_total() {
        let parts: Vec<u64> = (0..3).map(|c| part(10.0, c, 3)).collect();
        assert_eq!(parts.iter().sum::<u64>(), 10);
        assert!(parts.iter().all(|p| *p == 3 || *p == 4));
        assert_eq!(part(0.0, 0, 5), 0);
        assert_eq!(part(-3.0, 0, 5), 0);
    }

    #[test]
    fn half_a_core_takes_twice_as_long() {
        let mut half = Cores::new(0.5, 1.0);
        assert_eq!(half.run(SimTime::ZERO, 1000), SimTime(2000));
        let mut two = Cores::new(2.0, 1.0);
        assert_eq!(two.run(SimTime::ZERO, 1000), SimTime(1000));
        assert_eq!(two.run(SimTime::ZERO, 1000), SimTime(1000));
        assert_eq!(two.run(SimTime::ZERO, 1000), SimTime(2000));
    }

    #[test]
    fn a_token_bucket_lets_its_burst_pass_then_paces_at_its_rate() {
        // 1 MB/s holding 0.05 s: 50 000 bytes pass at once, the next 100 000 take 0.1 s.
        let mut bucket = Link::new(Some(1e6), 0).with_burst(0.05);
        assert_eq!(bucket.send(SimTime::ZERO, 50_000), SimTime::ZERO);
        assert_eq!(bucket.send(SimTime::ZERO, 100_000), SimTime(100_000_000));
        // A second later the bucket is full again (not fuller).
        let later = SimTime(1_100_000_000);
        assert_eq!(bucket.send(later, 60_000), SimTime(1_110_000_000));
        // Without a burst the same link is a plain rate.
        let mut plain = Link::new(Some(1e6), 0).with_burst(0.0);
        assert_eq!(plain.send(SimTime::ZERO, 50_000), SimTime(50_000_000));
        assert_eq!((plain.busy_ns, bucket.busy_ns), (50_000_000, 210_000_000));
    }
}
