//! A query's trace ([`adisk_core::trace::Trace`], the `adisk-trace` format `adisk sim replay`
//! reads) made from what its disk jobs reported: the same statistics EXPLAIN ANALYZE prints,
//! a job per scan (or per `disks` stage) with each disk's part and when it started, and the
//! configuration the query ran on.

use super::metrics::ScanReport;
use super::output::QueryOutput;
use crate::client::cluster::Cluster;
use crate::client::links::{DiskLinks, LinkFigures, LinkSource};
use adisk_core::trace::{Recorded, TRACE_FORMAT, TRACE_VERSION, Trace, TraceDisk, TraceJob};
use std::collections::BTreeMap;

/// The trace of `out`, the answer to `text`, run on `cluster`. The link figures are those
/// the host knows ([`Cluster::known_link_figures`]: an `auto` plan's, or the throttle's):
/// recording a trace never probes a link, whose filler streams (a quarter of a second from
/// every disk) would load the disks and the host link just before the next query.
pub async fn trace(out: &QueryOutput, text: &str, cluster: &Cluster) -> Trace {
    let figures = cluster.known_link_figures();
    trace_of(
        &out.scans,
        out.wall,
        out.host_cpu_ns,
        text,
        cluster,
        figures,
    )
}

/// The trace of a query that ran the scans `scans` in `wall`, the host's CPU busy
/// `host_cpu_ns` meanwhile (the parts of a [`QueryOutput`] a trace needs, for a caller that
/// keeps them after handing the rows on), on links of `figures` (the Flight SQL service
/// passes [`Cluster::known_link_figures`]: recording a trace never probes a link).
pub fn trace_of(
    scans: &[ScanReport],
    wall: std::time::Duration,
    host_cpu_ns: u64,
    text: &str,
    cluster: &Cluster,
    figures: LinkFigures,
) -> Trace {
    let jobs = jobs(scans);
    let disks = jobs
        .iter()
        .flat_map(|j| j.disks.iter().map(|d| d.stats.disk_id))
        .collect::<std::collections::BTreeSet<u32>>()
        .len() as u32;
    Trace {
        format: TRACE_FORMAT.into(),
        version: TRACE_VERSION,
        what: "sql".into(),
        text: text.into(),
        recorded: recorded_with(cluster, disks.max(1), figures),
        wall_ns: wall.as_nanos() as u64,
        host_ns: 0,
        host_cpu_ns,
        jobs,
    }
}

/// A job per scan (or stage), in the order their first disk started; a disk whose statistics
/// could not be fetched is left out (EXPLAIN ANALYZE counts nothing for it either).
fn jobs(scans: &[ScanReport]) -> Vec<TraceJob> {
    let mut by_scan: BTreeMap<usize, Vec<&ScanReport>> = BTreeMap::new();
    for r in scans {
        by_scan.entry(r.scan_id).or_default().push(r);
    }
    let mut jobs: Vec<(u64, TraceJob)> = by_scan
        .into_values()
        .map(|reports| {
            let start = reports.iter().map(|r| r.started_ns).min().unwrap_or(0);
            let end = reports
                .iter()
                .map(|r| r.started_ns + r.wall_ns)
                .max()
                .unwrap_or(0);
            let mut disks: Vec<TraceDisk> = reports
                .iter()
                .filter_map(|r| {
                    r.stats.clone().map(|stats| TraceDisk {
                        stats,
                        started_ns: r.started_ns,
                        host_wall_ns: r.wall_ns,
                    })
                })
                .collect();
            disks.sort_by_key(|d| (d.started_ns, d.stats.disk_id));
            let job = TraceJob {
                description: reports[0].table.clone(),
                result_rows: reports.iter().map(|r| r.rows_received).sum(),
                host_combine_ns: 0,
                wall_ns: end - start,
                disks,
            };
            (start, job)
        })
        .collect();
    jobs.sort_by_key(|(start, _)| *start);
    jobs.into_iter().map(|(_, job)| job).collect()
}

/// What the trace says the query ran on: the links as measured so far (none where only
/// assumed or not yet measured: this measures nothing), the
/// disks' read throttle, the host's cores; the disks' cores: their CPU limit where every disk
/// has one (`adisk disk --cpus`), all of this machine's for disks started on it, else 1. When
/// every disk was started on this machine (a local cluster: `cluster.toml` knows their
/// processes) they and the host share its cores.
pub async fn recorded(cluster: &Cluster, disks: u32) -> Recorded {
    recorded_with(cluster, disks, cluster.known_link_figures())
}

/// [`recorded`] with the link figures given.
fn recorded_with(cluster: &Cluster, disks: u32, figures: LinkFigures) -> Recorded {
    let host_measured = !matches!(figures.source, LinkSource::Assumed | LinkSource::Unmeasured);
    let config = cluster.config();
    let read_mbps = config.disks.iter().map(|d| d.read_mbps).max().unwrap_or(0);
    let machine = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let local = !config.disks.is_empty() && config.disks.iter().all(|d| d.pid.is_some());
    let limits: Option<Vec<f64>> = config.disks.iter().map(|d| d.cpus).collect();
    let disk_cpus = match limits {
        Some(l) if !l.is_empty() => l.into_iter().fold(f64::INFINITY, f64::min),
        _ if local => f64::from(machine),
        _ => 1.0,
    };
    Recorded {
        disks,
        host_cpus: machine,
        disk_cpus,
        host_link_bytes_per_s: host_measured.then_some(figures.host_bytes_per_sec),
        disk_link_bytes_per_s: match figures.disks {
            DiskLinks::Measured { bytes_per_sec, .. } => Some(bytes_per_sec),
            DiskLinks::ThroughHost | DiskLinks::Assumed => None,
        },
        disk_read_bytes_per_s: (read_mbps > 0).then(|| read_mbps as f64 * 1e6 / 8.0),
        rtt_ns: figures.rtt.map_or(0, |rtt| rtt.as_nanos() as u64),
        shared_cpus: local.then_some(f64::from(machine)),
        disk_cpu_speed: config
            .disks
            .iter()
            .map(|d| d.cpu_speed)
            .collect::<Option<Vec<f64>>>()
            .and_then(|s| s.into_iter().reduce(f64::min)),
    }
}
