//! The `auto` offload decisions (after Riedel et al. §4.2): a scan runs as a pipeline of disk
//! read, disk processing, the link to the host and host processing, so its time is set by the
//! slowest of them. Moving an operator to the disks pays off when it shrinks what crosses the
//! link and the host more than it costs the (more numerous, slower) disk processors.
//!
//! ```text
//! t(at disks) = max( B / (n·r), B / (n·c_disk), s·B / L, s·B / (h·c_host) )
//! t(at host)  = max( B / (n·r),                   B / L,   B / (h·c_host) )
//! ```
//!
//! `B` bytes scanned, `n` disks, `r` read rate per disk, `s` selectivity (DataFusion's default
//! 0.2 when nothing better is known), `L` host link, `h` host cores, `c` processing rates.
//! Relations smaller than [`CostModel::small_table_bytes`] come back whole: their filters cost
//! a disk job either way and save nothing measurable.
use crate::client::cluster::{Cluster, TableEntry};

/// Default selectivity of one filter (DataFusion's own default), used by the cost model.
pub const DEFAULT_SELECTIVITY: f64 = 0.2;

/// Parameters of the `auto` decisions.
#[derive(Debug, Clone)]
pub struct CostModel {
    /// Disks.
    pub disks: f64,
    /// Storage read rate per disk, bytes/s (`disk_read_mbps`, or a local NVMe-class default).
    pub disk_read: f64,
    /// What processing costs ([`Rates`]: measured by `adisk calibrate`, or built in).
    pub rates: Rates,
    /// The slowest disk's processor against the host's cores (an emulated speed times a CPU
    /// limit below one core; 1: as fast).
    pub disk_speed: f64,
    /// Host link, bytes/s (`host_link_mbps`, or loopback-class when unlimited).
    pub link: f64,
    /// Each disk's own link to the others, bytes/s (measured by a ring of probes, see
    /// [`crate::client::links::DiskLinks`]; loopback-class when not measured).
    pub disk_link: f64,
    /// Host cores.
    pub host_cores: f64,
    /// Tables below this size are not filtered at the disks.
    pub small_table_bytes: u64,
    /// The largest scratch a stage can be granted next to its stream buffers.
    pub max_scratch_bytes: u64,
    /// The smallest disk's memory budget, bytes.
    pub disk_memory_bytes: u64,
    /// The most buffers per stream of any disk (each stream of a job holds that many, plus
    /// two).
    pub buffers_per_stream: u32,
    /// Every disk runs on the host's machine (loopback addresses, as `adisk up` starts them,
    /// or disks reporting the host's own machine id, e.g. in network namespaces of it): host
    /// and disks share its cores.
    pub shared_cores: bool,
    /// Disk-to-disk streams pass through the host (`exchange = via-host`).
    pub via_host: bool,
    /// Where `link` came from, for EXPLAIN ([`crate::client::links::LinkFigures::describe`]).
    pub links: String,
}

/// What a plan is expected to move, bytes: to the host, and from disk to disk; and the disk
/// jobs it runs on each disk.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Traffic {
    /// Bytes the host receives.
    pub to_host: u64,
    /// Bytes sent from disk to disk.
    pub disk_to_disk: u64,
    /// Disk jobs (scans, stages) per disk.
    pub jobs: u32,
    /// Rows the disks probe Bloom filters with (all disks, every filter).
    pub probe_rows: u64,
    /// Bytes of Bloom filters shipped to the disks (each disk its copy).
    pub filter_bytes: u64,
}

/// What processing costs, ns on one of the host's cores: per byte scanned, moved (encoded at
/// the sender, decoded at the receiver) and taken in by joins and aggregations, and per disk
/// job at each end.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Decoding stored pages and qualifying rows, per byte scanned.
    pub scan_ns: f64,
    /// Sending, per byte moved (the transport's, measured on the cluster; else Arrow IPC
    /// encoding's).
    pub encode_ns: f64,
    /// Receiving, per byte moved (the transport's, else Arrow IPC decoding's).
    pub decode_ns: f64,
    /// Joins and aggregations, per byte of their input.
    pub work_ns: f64,
    /// A host-centric plan's host per byte received, receiving and joining it (measured end
    /// to end; else receiving plus joining).
    pub host_byte_ns: f64,
    /// A `disks` plan's disks per byte exchanged, sending, receiving and joining it (measured
    /// end to end; else sending plus receiving).
    pub exchange_ns: f64,
    /// Probing a Bloom filter at a disk, per row.
    pub bloom_ns: f64,
    /// Shipping a Bloom filter (encoded at the host, decoded at the disk), per byte.
    pub filter_ns: f64,
    /// One disk job at its disk, beyond its data.
    pub disk_job_ns: f64,
    /// One disk job at the host, beyond its data.
    pub host_job_ns: f64,
    /// Where the figures came from, for EXPLAIN.
    pub source: String,
}

/// The built-in rate of every byte's processing (`adisk bench scan`'s select over lineitem on
/// this class of machine: ~1.5 GB/s per core), where no cost file was measured.
const BUILTIN_NS_PER_BYTE: f64 = 1.0 / 1.5;

impl Rates {
    /// One rate for every byte, nothing per job, row probed or filter shipped: the model
    /// before `adisk calibrate`.
    pub fn builtin() -> Self {
        Rates {
            scan_ns: BUILTIN_NS_PER_BYTE,
            encode_ns: BUILTIN_NS_PER_BYTE,
            decode_ns: BUILTIN_NS_PER_BYTE,
            work_ns: BUILTIN_NS_PER_BYTE,
            host_byte_ns: 2.0 * BUILTIN_NS_PER_BYTE,
            exchange_ns: 2.0 * BUILTIN_NS_PER_BYTE,
            bloom_ns: 0.0,
            filter_ns: 0.0,
            disk_job_ns: 0.0,
            host_job_ns: 0.0,
            source: "built-in rates".into(),
        }
    }

    /// The figures of a cost file (`adisk calibrate`); one it lacks keeps its built-in value.
    pub fn from_calibration(c: &adisk_core::calibration::Calibration, path: &str) -> Self {
        use adisk_core::calibration as cal;
        let b = Rates::builtin();
        let encode_ns = c
            .ns(cal::SEND)
            .or(c.ns(cal::IPC_ENCODE))
            .unwrap_or(b.encode_ns);
        let decode_ns = c
            .ns(cal::RECEIVE)
            .or(c.ns(cal::IPC_DECODE))
            .unwrap_or(b.decode_ns);
        let work_ns = c.ns(cal::JOIN).unwrap_or(b.work_ns);
        Rates {
            scan_ns: c.ns(cal::SCAN).unwrap_or(b.scan_ns),
            encode_ns,
            decode_ns,
            work_ns,
            host_byte_ns: c.ns(cal::HOST_BYTE).unwrap_or(decode_ns + work_ns),
            exchange_ns: c.ns(cal::EXCHANGE_BYTE).unwrap_or(encode_ns + decode_ns),
            bloom_ns: c.ns(cal::BLOOM_PROBE).unwrap_or(b.bloom_ns),
            filter_ns: c.ns(cal::FILTER_SHIP).unwrap_or(b.filter_ns),
            disk_job_ns: c.ns(cal::STAGE).unwrap_or(0.0),
            host_job_ns: c.ns(cal::JOB_HOST).unwrap_or(0.0),
            source: format!("costs measured {} ({path})", c.machine.measured),
        }
    }
}

/// What `auto` expected of the plan it chose: the level, the seconds its cost model gave it
/// (beyond the scans every level shares) and what it expected to move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// `disks` or `host-centric`.
    pub level: &'static str,
    /// [`CostModel::traffic_time`] of the plan, s.
    pub secs: f64,
    /// Bytes expected to move.
    pub traffic: Traffic,
}

impl Estimate {
    /// The estimate of a plan at `level`.
    pub fn of(level: &'static str, secs: f64, traffic: Traffic) -> Self {
        Estimate {
            level,
            secs,
            traffic,
        }
    }

    /// One line for EXPLAIN ANALYZE: each estimate beside what the run measured (`to_host`
    /// and `disk_to_disk` bytes, `wall`), with their ratio.
    pub fn against(&self, to_host: u64, disk_to_disk: u64, wall: std::time::Duration) -> String {
        use adisk_core::stats::human_bytes;
        let ratio = |measured: f64, est: f64| match (measured, est) {
            (m, e) if e > 0.0 && m > 0.0 => format!("{:.2}×", m / e),
            (m, e) if m == e => "as estimated".into(),
            _ => "–".into(),
        };
        let t = self.traffic;
        format!(
            "the cost model's estimate of the {} plan against the run: to the host {} estimated, {} received ({}); between disks {} estimated, {} sent ({}); {:.3} s estimated beyond the scans, the query took {:.3} s",
            self.level,
            human_bytes(t.to_host),
            human_bytes(to_host),
            ratio(to_host as f64, t.to_host as f64),
            human_bytes(t.disk_to_disk),
            human_bytes(disk_to_disk),
            ratio(disk_to_disk as f64, t.disk_to_disk as f64),
            self.secs,
            wall.as_secs_f64()
        )
    }
}

impl CostModel {
    /// The model of a connected cluster with its host link's figures `links` (measured, or
    /// its throttle); `min_memory` is the smallest disk memory budget. Its rates are the
    /// cluster's cost file's (`[cluster] costs`), or built in.
    ///
    /// # Errors
    /// A cost file that cannot be read or is malformed.
    pub fn from_cluster(
        cluster: &Cluster,
        links: &crate::client::links::LinkFigures,
        min_memory: u64,
    ) -> crate::Result<Self> {
        let cfg = cluster.config();
        let rates = match &cfg.cluster.costs {
            Some(path) => {
                let c = adisk_core::calibration::Calibration::load(path)
                    .map_err(|e| crate::HostError::Invalid(e.to_string()))?;
                Rates::from_calibration(&c, &path.display().to_string())
            }
            None => Rates::builtin(),
        };
        let read = cfg
            .disks
            .iter()
            .map(|d| {
                if d.read_mbps > 0 {
                    d.read_mbps as f64 * 1e6 / 8.0
                } else {
                    2.0e9
                }
            })
            .fold(f64::MAX, f64::min);
        let buffers: u64 = cfg
            .disks
            .iter()
            .map(|d| 4 * (d.buffers_per_stream as u64 + 2) * d.buffer_kib * 1024)
            .max()
            .unwrap_or(0);
        Ok(CostModel {
            disks: cfg.disks.len().max(1) as f64,
            disk_read: read,
            rates,
            disk_speed: cfg.disks.iter().map(disk_speed).fold(1.0, f64::min),
            link: links.host_bytes_per_sec,
            disk_link: links.disks.bytes_per_sec(),
            host_cores: std::thread::available_parallelism()
                .map(|n| n.get() as f64)
                .unwrap_or(1.0),
            small_table_bytes: 1 << 20,
            max_scratch_bytes: min_memory.saturating_sub(buffers),
            disk_memory_bytes: min_memory,
            buffers_per_stream: cfg
                .disks
                .iter()
                .map(|d| d.buffers_per_stream)
                .max()
                .unwrap_or(2),
            shared_cores: cfg.disks.iter().all(|d| is_loopback(&d.address)),
            via_host: cfg.cluster.exchange == adisk_core::config::ExchangeMode::ViaHost,
            links: links.describe(),
        })
    }

    /// Seconds a plan moving `t` spends beyond the scans every level shares (reading, decoding
    /// and qualifying at the disks), as a pipeline whose slowest resource sets the pace (the
    /// scan model above, extended to the links between disks):
    ///
    /// * the host link carries `to_host`, plus every disk-to-disk byte twice when exchanges
    ///   pass through the host;
    /// * the disks' own links carry the rest, `n` of them;
    /// * every byte that moves is encoded and decoded once (Arrow IPC), and the joins and
    ///   aggregations above the scans process the rows the host-centric plan ships,
    ///   `host_work_bytes`, wherever they run: at the host in a host-centric plan (with what it
    ///   receives), spread over the disks otherwise. When host and disks share one machine's
    ///   cores, all of it competes for them.
    pub fn traffic_time(&self, t: Traffic, host_work_bytes: u64, at_disks: bool) -> f64 {
        let (link, disk_links, cpu) = self.traffic_parts(t, host_work_bytes, at_disks);
        link.max(disk_links).max(cpu)
    }

    /// Whether the host link sets the pace of a host-centric plan moving `t` (the I/O-bound
    /// regime the papers' active and smart disks are for), as `auto` reports its choice.
    pub fn link_bound(&self, t: Traffic, host_work_bytes: u64) -> bool {
        let (link, disk_links, cpu) = self.traffic_parts(t, host_work_bytes, false);
        link >= cpu.max(disk_links)
    }

    /// Seconds on the host link, the disks' links and processing (see [`Self::traffic_time`]).
    fn traffic_parts(&self, t: Traffic, host_work_bytes: u64, at_disks: bool) -> (f64, f64, f64) {
        let (to_host, between) = (t.to_host as f64, t.disk_to_disk as f64);
        let work = host_work_bytes as f64;
        let via = if self.via_host { 2.0 * between } else { 0.0 };
        let link = (to_host + via) / self.link;
        let disk_links = if self.via_host {
            0.0
        } else {
            between / (self.disks * self.disk_link)
        };
        let cpu = self.cpu_secs(t, work, at_disks);
        (link, disk_links, cpu)
    }

    /// Seconds of processing a plan moving `t` needs beyond the scans: every byte moved is
    /// encoded at its sender and decoded at its receiver; joins and aggregations take in
    /// `work` bytes at the host (host-centric) or at the disks, which send the host a result
    /// it combines; every disk job costs both ends its fixed share; Bloom filters cost their
    /// shipping and every row probed. Disks and host compete for the same cores when they
    /// share a machine.
    fn cpu_secs(&self, t: Traffic, work: f64, at_disks: bool) -> f64 {
        let r = &self.rates;
        let (to_host, between) = (t.to_host as f64, t.disk_to_disk as f64);
        let jobs = t.jobs as f64 * self.disks;
        let blooms = t.probe_rows as f64 * r.bloom_ns + t.filter_bytes as f64 * r.filter_ns;
        let (host_ns, disk_ns) = if at_disks {
            (
                to_host * r.host_byte_ns + jobs * r.host_job_ns,
                between * r.exchange_ns
                    + work * r.work_ns
                    + to_host * r.encode_ns
                    + jobs * r.disk_job_ns
                    + blooms,
            )
        } else {
            // The host joins what it receives (`host_byte_ns`), and any work beyond it.
            (
                to_host * r.host_byte_ns
                    + (work - to_host).max(0.0) * r.work_ns
                    + jobs * r.host_job_ns,
                to_host * r.encode_ns + jobs * r.disk_job_ns + blooms,
            )
        };
        let disk_ns = disk_ns / self.disk_speed;
        let ns = if self.shared_cores {
            (host_ns + disk_ns) / self.host_cores
        } else {
            (host_ns / self.host_cores).max(disk_ns / self.disks)
        };
        ns * 1e-9
    }

    /// Seconds to scan `bytes` with selectivity `s`, filtering at the disks or at the host.
    pub fn scan_time(&self, bytes: f64, s: f64, at_disks: bool) -> f64 {
        let read = bytes / (self.disks * self.disk_read);
        let host = self.host_cores * 1e9 / self.rates.scan_ns;
        let disks = self.disks * self.disk_speed * 1e9 / self.rates.scan_ns;
        if at_disks {
            read.max(bytes / disks)
                .max(s * bytes / self.link)
                .max(s * bytes / host)
        } else {
            read.max(bytes / self.link).max(bytes / host)
        }
    }

    /// Whether filters on `table` run at the disks.
    pub fn push_filters(&self, table: &TableEntry) -> bool {
        if table.bytes() < self.small_table_bytes {
            return false;
        }
        let b = table.bytes() as f64;
        self.scan_time(b, DEFAULT_SELECTIVITY, true) < self.scan_time(b, DEFAULT_SELECTIVITY, false)
    }

    /// Whether a Bloom semi-join pays: the probe side is not tiny (over 1 000 rows: filtering
    /// it cascades through later joins), the filter drops most of it — it passes under a
    /// quarter of the probe's rows by the distinct keys on both sides (`pass`), or, where
    /// those are unknown, the probe side is over 4× the build side — and the build side's
    /// keys fit the filter at a useful false-positive rate (8 bits per key, ~2 %). An unknown
    /// build side is given the benefit of the doubt.
    pub fn push_bloom(
        &self,
        build_rows: Option<usize>,
        probe: (Option<usize>, Option<f64>),
        filter_bytes: usize,
    ) -> bool {
        let (probe_rows, pass) = probe;
        match (build_rows, probe_rows) {
            (Some(b), Some(p)) => {
                let keys_at_8_bits = filter_bytes;
                let drops_most = match pass {
                    Some(f) => f * 4.0 < 1.0,
                    None => b.saturating_mul(4) < p,
                };
                drops_most && b <= keys_at_8_bits && p > 1_000
            }
            (None, Some(p)) => p > 1_000,
            _ => false,
        }
    }
}

/// A disk's processor against the host's cores: its emulated speed times its CPU limit where
/// that is below one core.
fn disk_speed(d: &adisk_core::config::DiskConfig) -> f64 {
    let speed = d.cpu_speed.filter(|s| *s > 0.0 && *s <= 1.0).unwrap_or(1.0);
    let cpus = d.cpus.filter(|c| *c > 0.0).unwrap_or(1.0).min(1.0);
    speed * cpus
}

/// Whether a `host:port` address is on this machine's loopback.
fn is_loopback(address: &str) -> bool {
    let host = address.rsplit_once(':').map(|(h, _)| h).unwrap_or(address);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 disks at 2 GB/s, a 2-core host, 1.5 GB/s per core.
    fn model(link_mbps: Option<f64>, shared_cores: bool, via_host: bool) -> CostModel {
        CostModel {
            disks: 4.0,
            disk_read: 2.0e9,
            rates: Rates::builtin(),
            disk_speed: 1.0,
            link: link_mbps.map_or(4.0e9, |m| m * 1e6 / 8.0),
            disk_link: 4.0e9,
            host_cores: 2.0,
            small_table_bytes: 1 << 20,
            max_scratch_bytes: 64 << 20,
            disk_memory_bytes: 68 << 20,
            buffers_per_stream: 2,
            shared_cores,
            via_host,
            links: "a test's".into(),
        }
    }

    const MB: u64 = 1_000_000;

    /// A join query: the host-centric plan ships 200 MB of join inputs; the `disks` plan sends
    /// 150 MB between disks and 1 MB of result to the host.
    fn times(m: &CostModel) -> (f64, f64) {
        let host = Traffic {
            to_host: 200 * MB,
            disk_to_disk: 0,
            ..Default::default()
        };
        let disks = Traffic {
            to_host: MB,
            disk_to_disk: 150 * MB,
            ..Default::default()
        };
        (
            m.traffic_time(host, host.to_host, false),
            m.traffic_time(disks, host.to_host, true),
        )
    }

    #[test]
    fn a_throttled_host_link_makes_the_disks_plan_cheaper() {
        let (host, disks) = times(&model(Some(100.0), true, false));
        // 200 MB over 12.5 MB/s = 16 s; the disks plan is CPU-bound at well under a second.
        assert!((host - 16.0).abs() < 1e-9, "{host}");
        assert!(disks < 1.0 && disks < host / 10.0, "{disks}");
    }

    #[test]
    fn sharing_the_hosts_cores_an_exchange_must_move_less_than_the_host_would_receive() {
        // Unthrottled on one machine: 150 MB exchanged (+1 MB) vs 200 MB to the host.
        let (host, disks) = times(&model(None, true, false));
        assert!(disks < host, "{disks} vs {host}");
        // Exchanging more than the host-centric plan ships loses.
        let m = model(None, true, false);
        let more = Traffic {
            to_host: MB,
            disk_to_disk: 250 * MB,
            ..Default::default()
        };
        assert!(m.traffic_time(more, 200 * MB, true) > host);
    }

    #[test]
    fn only_a_link_bound_host_centric_plan_goes_to_the_disks() {
        let shipped = Traffic {
            to_host: 200 * MB,
            disk_to_disk: 0,
            ..Default::default()
        };
        assert!(model(Some(100.0), true, false).link_bound(shipped, 200 * MB));
        assert!(!model(None, true, false).link_bound(shipped, 200 * MB));
    }

    #[test]
    fn via_host_exchanges_pay_the_host_link_twice() {
        let direct = times(&model(Some(100.0), true, false)).1;
        let via = times(&model(Some(100.0), true, true)).1;
        // (1 + 2 × 150) MB over 12.5 MB/s.
        assert!((via - 301.0 / 12.5).abs() < 1e-9, "{via}");
        assert!(via > direct);
    }

    #[test]
    fn an_estimate_is_set_beside_what_ran() {
        let e = Estimate::of(
            "disks",
            0.25,
            Traffic {
                to_host: 2 * MB,
                disk_to_disk: 0,
                ..Default::default()
            },
        );
        let line = e.against(3 * MB, 0, std::time::Duration::from_millis(1500));
        assert!(line.contains("the disks plan"), "{line}");
        assert!(line.contains("received (1.50×)"), "{line}");
        assert!(line.contains("sent (as estimated)"), "{line}");
        assert!(
            line.ends_with("0.250 s estimated beyond the scans, the query took 1.500 s"),
            "{line}"
        );
    }

    #[test]
    fn a_cost_files_figures_price_the_plans_and_missing_ones_fall_back() {
        use adisk_core::calibration::{self as cal, Calibration, Cost, Machine};
        let cost = |ns| Cost {
            ns,
            per: String::new(),
            how: String::new(),
        };
        let costs = [
            (cal::RECEIVE.to_string(), cost(2.0)),
            (cal::JOIN.to_string(), cost(1.0)),
            (cal::BLOOM_PROBE.to_string(), cost(10.0)),
        ];
        let c = Calibration {
            machine: Machine {
                cpu: "test".into(),
                cores: 2,
                clock_ghz: 3.0,
                measured: "today".into(),
                adisk: "0".into(),
            },
            costs: costs.into_iter().collect(),
            sim: Default::default(),
        };
        let r = Rates::from_calibration(&c, "x.toml");
        // Not measured end to end: receiving plus joining; sending plus receiving.
        assert_eq!(r.host_byte_ns, 3.0);
        assert_eq!(r.exchange_ns, BUILTIN_NS_PER_BYTE + 2.0);
        assert!(r.source.contains("today") && r.source.contains("x.toml"));
        // 10 million rows probed at 10 ns on each of 4 disks' own processors: 25 ms.
        let mut m = model(None, false, false);
        m.rates = r;
        let probed = Traffic {
            probe_rows: 10_000_000,
            ..Default::default()
        };
        let secs = m.traffic_time(probed, 0, false);
        assert!((secs - 0.025).abs() < 1e-9, "{secs}");
        // A disk at half speed takes twice as long.
        m.disk_speed = 0.5;
        assert!((m.traffic_time(probed, 0, false) - 0.05).abs() < 1e-9);
    }

    #[test]
    fn loopback_addresses_share_the_hosts_cores() {
        assert!(is_loopback("127.0.0.1:50051"));
        assert!(is_loopback("localhost:1"));
        assert!(is_loopback("[::1]:7"));
        assert!(!is_loopback("10.0.0.5:50051"));
        assert!(!is_loopback("disk3.example:50051"));
    }

    #[test]
    fn a_bloom_filter_goes_where_the_distinct_keys_say_it_drops_most_rows() {
        let m = model(None, false, false);
        let mib = 1 << 20;
        // TPC-H Q20 at SF 1: the build side guessed at 201 000 keys, the probe at 375 000
        // rows, but those keys are 3 % of the probe's (partkey, suppkey) pairs.
        assert!(m.push_bloom(Some(200_962), (Some(375_075), Some(0.033)), mib));
        assert!(!m.push_bloom(Some(200_962), (Some(375_075), None), mib));
        // Keys that cover most of the probe's pass most rows, however many rows it has.
        assert!(!m.push_bloom(Some(1_000), (Some(1_000_000), Some(0.5)), mib));
        assert!(m.push_bloom(Some(1_000), (Some(1_000_000), None), mib));
        // Tiny probes and filters too small for their keys are not worth it.
        assert!(!m.push_bloom(Some(10), (Some(900), Some(0.01)), mib));
        assert!(!m.push_bloom(Some(2 * mib), (Some(100 * mib), Some(0.01)), mib));
        assert!(m.push_bloom(None, (Some(5_000), None), mib));
    }
}
