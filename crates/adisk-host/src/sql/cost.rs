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
use super::scan::DEFAULT_SELECTIVITY;
use crate::cluster::{Catalog, Cluster, TableEntry};

/// Parameters of the `auto` decisions.
#[derive(Debug, Clone)]
pub struct CostModel {
    /// Disks.
    pub disks: f64,
    /// Storage read rate per disk, bytes/s (`disk_read_mbps`, or a local NVMe-class default).
    pub disk_read: f64,
    /// Filter/aggregate processing rate of one disk, bytes/s.
    pub disk_cpu: f64,
    /// Host link, bytes/s (`host_link_mbps`, or loopback-class when unlimited).
    pub link: f64,
    /// Host cores.
    pub host_cores: f64,
    /// Processing rate of one host core, bytes/s.
    pub host_cpu: f64,
    /// Tables below this size are not filtered at the disks.
    pub small_table_bytes: u64,
    /// The largest scratch a stage can be granted next to its stream buffers.
    pub max_scratch_bytes: u64,
}

impl CostModel {
    /// The model of a connected cluster; `min_memory` is the smallest disk memory budget.
    pub fn from_cluster(cluster: &Cluster, _catalog: &Catalog, min_memory: u64) -> Self {
        let cfg = cluster.config();
        let disks = cfg.disks.len().max(1) as f64;
        // Per-core processing rate measured by `adisk bench scan` on this class of machine
        // (select over lineitem: ~1.8 GB/s); disks and host run the same code.
        let cpu = 1.5e9;
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
        let link = if cfg.cluster.host_link_mbps > 0 {
            cfg.cluster.host_link_mbps as f64 * 1e6 / 8.0
        } else {
            4.0e9
        };
        let buffers: u64 = cfg
            .disks
            .iter()
            .map(|d| 4 * (d.buffers_per_stream as u64 + 2) * d.buffer_kib * 1024)
            .max()
            .unwrap_or(0);
        CostModel {
            disks,
            disk_read: read,
            disk_cpu: cpu,
            link,
            host_cores: std::thread::available_parallelism()
                .map(|n| n.get() as f64)
                .unwrap_or(1.0),
            host_cpu: cpu,
            small_table_bytes: 1 << 20,
            max_scratch_bytes: min_memory.saturating_sub(buffers),
        }
    }

    /// Seconds to scan `bytes` with selectivity `s`, filtering at the disks or at the host.
    pub fn scan_time(&self, bytes: f64, s: f64, at_disks: bool) -> f64 {
        let read = bytes / (self.disks * self.disk_read);
        if at_disks {
            read.max(bytes / (self.disks * self.disk_cpu))
                .max(s * bytes / self.link)
                .max(s * bytes / (self.host_cores * self.host_cpu))
        } else {
            read.max(bytes / self.link)
                .max(bytes / (self.host_cores * self.host_cpu))
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

    /// Whether a Bloom semi-join pays: the probe side is not tiny (over 1 000 rows: filtering it cascades through later joins) and much
    /// larger than the build side (4×), whose keys fit the filter at a useful false-positive
    /// rate (8 bits per key, ~2 %). An unknown build side is given the benefit of the doubt.
    pub fn push_bloom(
        &self,
        build_rows: Option<usize>,
        probe_rows: Option<usize>,
        filter_bytes: usize,
    ) -> bool {
        match (build_rows, probe_rows) {
            (Some(b), Some(p)) => {
                let keys_at_8_bits = filter_bytes;
                b.saturating_mul(4) < p && b <= keys_at_8_bits && p > 1_000
            }
            (None, Some(p)) => p > 1_000,
            _ => false,
        }
    }
}
