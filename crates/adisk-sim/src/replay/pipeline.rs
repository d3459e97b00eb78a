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

use super::config::{ReplayConfig, StorageKind};
use super::workload::{DiskWork, JobWork};
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
    /// When the job ended.
    pub end: SimTime,
    /// Busy times.
    pub busy: JobBusy,
    /// Events processed.
    pub events: u64,
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

#[derive(Clone, Copy, Debug)]
struct Event {
    disk: u32,
    chunk: u32,
    step: Step,
}

/// A FIFO link: `model::link` occupancy when it has a rate, nothing when unlimited; delivery
/// `latency_ns` after the transfer leaves.
struct Link {
    spec: Option<LinkSpec>,
    latency_ns: u64,
    free: SimTime,
    busy_ns: u64,
}

impl Link {
    fn new(bytes_per_s: Option<f64>, latency_ns: u64) -> Link {
        Link {
            spec: bytes_per_s.map(|r| LinkSpec::new(r / 1e6, latency_ns as f64 / 1e3)),
            latency_ns,
            free: SimTime::ZERO,
            busy_ns: 0,
        }
    }
    /// Send `bytes` arriving at `at`; returns when they are delivered.
    fn send(&mut self, at: SimTime, bytes: u64) -> SimTime {
        let Some(spec) = &self.spec else {
            return at + SimDuration(self.latency_ns);
        };
        let start = at.max(self.free);
        let occupancy = SimDuration(spec.occupancy_ns(bytes).round() as u64);
        self.free = start + occupancy;
        self.busy_ns += occupancy.0;
        self.free + SimDuration(self.latency_ns)
    }
}

/// Identical cores serving work first come first served, each at `model::cpu` speed: work is
/// in recorded nanoseconds, i.e. cycles of a 1,000 MHz reference core, and the core runs at
/// `1000 · speed` MHz.
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
    /// Busy time per core, ns.
    fn busy_per_core_ns(&self) -> u64 {
        self.busy_ns / self.spec.count as u64
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

/// One replayed disk: its work and its stations.
struct Disk {
    work: DiskWork,
    storage: Storage,
    cpu: Cores,
    host_link: Link,
    disk_link: Link,
}

/// The prototype storage of one disk (an HDD's seek curve is fitted once per job).
enum StorageProto {
    Throttle(Option<f64>),
    Hdd(Box<DiskModel>),
    Ssd(Box<SsdModel>),
}

impl StorageProto {
    fn new(cfg: &ReplayConfig) -> Result<StorageProto, String> {
        Ok(match cfg.storage {
            StorageKind::Recorded => StorageProto::Throttle(cfg.disk_read_bytes_per_s),
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
            StorageProto::Throttle(rate) => Storage::Throttle(Link::new(*rate, 0)),
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

/// The stations of a job and its event list.
struct JobSim {
    queue: EventQueue<Event>,
    disks: Vec<Disk>,
    nic: Link,
    host: Cores,
    chunks: u32,
    combine_ns: f64,
    end: SimTime,
}

impl JobSim {
    fn new(job: &JobWork, cfg: &ReplayConfig, start: SimTime) -> Result<JobSim, String> {
        let proto = StorageProto::new(cfg)?;
        let half_rtt = cfg.rtt_ns / 2;
        let disks: Vec<Disk> = job
            .disks
            .iter()
            .map(|w| Disk {
                work: w.clone(),
                storage: proto.instance(),
                cpu: Cores::new(cfg.disk_cpus, cfg.disk_cpu_speed),
                host_link: Link::new(cfg.host_link_bytes_per_s, cfg.rtt_ns - half_rtt),
                disk_link: Link::new(cfg.disk_link_bytes_per_s, 0),
            })
            .collect();
        let mut queue = EventQueue::new();
        for (d, disk) in disks.iter().enumerate() {
            let at = start
                + SimDuration(half_rtt)
                + SimDuration(disk.work.admission_wait_ns.round() as u64);
            for chunk in 0..cfg.chunks_per_disk {
                let step = Step::Read;
                queue.schedule_at(
                    at,
                    Event {
                        disk: d as u32,
                        chunk,
                        step,
                    },
                );
            }
        }
        let total_chunks = (disks.len() as f64 * cfg.chunks_per_disk as f64).max(1.0);
        Ok(JobSim {
            queue,
            disks,
            nic: Link::new(cfg.host_nic_bytes_per_s, 0),
            host: Cores::new(cfg.host_cpus as f64, cfg.host_cpu_speed),
            chunks: cfg.chunks_per_disk,
            combine_ns: job.host_combine_ns / total_chunks,
            end: start + SimDuration(cfg.rtt_ns),
        })
    }

    fn then(&mut self, at: SimTime, e: Event, step: Step) {
        self.queue.schedule_at(at, Event { step, ..e });
    }

    fn handle(&mut self, now: SimTime, e: Event) {
        let chunks = self.chunks;
        let disk = &mut self.disks[e.disk as usize];
        let amount = |v: f64| part(v, e.chunk, chunks);
        match e.step {
            Step::Read => {
                let f = disk
                    .storage
                    .serve(now, DiskOp::Read, amount(disk.work.bytes_read));
                self.then(f, e, Step::Compute);
            }
            Step::Compute => {
                let f = disk.cpu.run(now, amount(disk.work.cpu_ns));
                let (written, exchanged) = (
                    amount(disk.work.bytes_written),
                    amount(disk.work.bytes_shipped_disks),
                );
                if written > 0 {
                    self.then(f, e, Step::Write);
                }
                if exchanged > 0 {
                    self.then(f, e, Step::Exchange);
                }
                self.then(f, e, Step::HostLink);
            }
            Step::Write => {
                let f = disk
                    .storage
                    .serve(now, DiskOp::Write, amount(disk.work.bytes_written));
                self.end = self.end.max(f);
            }
            Step::Exchange => {
                let f = disk
                    .disk_link
                    .send(now, amount(disk.work.bytes_shipped_disks));
                self.end = self.end.max(f);
            }
            Step::HostLink => {
                let f = disk
                    .host_link
                    .send(now, amount(disk.work.bytes_shipped_host));
                self.then(f, e, Step::Nic);
            }
            Step::Nic => {
                let f = self.nic.send(now, amount(disk.work.bytes_shipped_host));
                self.then(f, e, Step::Combine);
            }
            Step::Combine => {
                let f = self
                    .host
                    .run(now, part(self.combine_ns * chunks as f64, e.chunk, chunks));
                self.end = self.end.max(f);
            }
        }
    }

    fn busy(&self) -> JobBusy {
        let max = |f: &dyn Fn(&Disk) -> u64| self.disks.iter().map(f).max().unwrap_or(0);
        JobBusy {
            disk_cpu_ns: max(&|d| d.cpu.busy_per_core_ns()),
            storage_ns: max(&|d| d.storage.busy_ns()),
            host_link_ns: max(&|d| d.host_link.busy_ns),
            disk_link_ns: max(&|d| d.disk_link.busy_ns),
            host_nic_ns: self.nic.busy_ns,
            host_cpu_ns: self.host.busy_per_core_ns(),
        }
    }
}

/// Simulate `job` starting at `start` on `cfg`.
///
/// # Errors
///
/// The storage model's message when its spec is not valid.
pub fn run_job(job: &JobWork, cfg: &ReplayConfig, start: SimTime) -> Result<JobRun, String> {
    let mut sim = JobSim::new(job, cfg, start)?;
    while let Some((now, e)) = sim.queue.pop() {
        sim.handle(now, e);
    }
    Ok(JobRun {
        end: sim.end,
        busy: sim.busy(),
        events: sim.queue.processed(),
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
}
