//! SSD model for modern what-ifs: `channels × dies_per_channel` dies work in parallel.
//!
//! A request of `n` bytes touches `p = ⌈n / page_bytes⌉` pages. Dies read pages in waves:
//! `t_array = ⌈p / (channels·dies)⌉ · page_read_us`. The data then crosses the channels
//! (`n / (channels · channel_mbps)`) and the host interface (`n / interface_mbps`); the
//! slowest of these bandwidth stages bounds the transfer. Service time
//! `= overhead + t_array + n / min(channels·channel_mbps, interface_mbps)`. Writes use
//! `page_program_us` instead of `page_read_us`.

use crate::model::disk::DiskOp;
use crate::time::{SimDuration, SimTime};
use serde::{Deserialize, Serialize};

/// SSD parameters.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SsdSpec {
    /// Independent channels.
    pub channels: u32,
    /// Dies per channel.
    pub dies_per_channel: u32,
    /// Flash page size, bytes.
    pub page_bytes: u64,
    /// Page read (array to register) latency, µs.
    pub page_read_us: f64,
    /// Page program latency, µs.
    pub page_program_us: f64,
    /// Per-channel bandwidth, MB/s.
    pub channel_mbps: f64,
    /// Host interface bandwidth, MB/s.
    pub interface_mbps: f64,
    /// Per-request controller/firmware overhead, µs.
    #[serde(default)]
    pub overhead_us: f64,
    /// Capacity, bytes.
    pub capacity_bytes: u64,
}

/// Mutable SSD state.
#[derive(Clone, Debug)]
pub struct SsdModel {
    spec: SsdSpec,
    /// Time the device becomes free.
    pub next_free: SimTime,
}

impl SsdModel {
    /// Validate and build.
    pub fn new(spec: &SsdSpec) -> Result<SsdModel, String> {
        for (k, v) in [
            ("page_read_us", spec.page_read_us),
            ("page_program_us", spec.page_program_us),
            ("channel_mbps", spec.channel_mbps),
            ("interface_mbps", spec.interface_mbps),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{k}: must be a positive number, got {v}"));
            }
        }
        if spec.channels == 0
            || spec.dies_per_channel == 0
            || spec.page_bytes == 0
            || spec.capacity_bytes == 0
        {
            return Err(
                "channels, dies_per_channel, page_bytes and capacity_bytes must be > 0".into(),
            );
        }
        Ok(SsdModel {
            spec: spec.clone(),
            next_free: SimTime::ZERO,
        })
    }
    /// Capacity, bytes.
    pub fn capacity(&self) -> u64 {
        self.spec.capacity_bytes
    }
    /// Service time of one request, ns.
    pub fn service_ns(&self, op: DiskOp, len: u64) -> f64 {
        let s = &self.spec;
        let pages = len.div_ceil(s.page_bytes);
        let parallel = (s.channels * s.dies_per_channel) as u64;
        let waves = pages.div_ceil(parallel) as f64;
        let page_us = if op == DiskOp::Read {
            s.page_read_us
        } else {
            s.page_program_us
        };
        let bw = (s.channels as f64 * s.channel_mbps).min(s.interface_mbps) * 1e6;
        s.overhead_us * 1e3 + waves * page_us * 1e3 + len as f64 / bw * 1e9
    }
    /// FIFO service; returns (start, finish).
    pub fn serve(&mut self, arrival: SimTime, op: DiskOp, len: u64) -> (SimTime, SimTime) {
        let start = arrival.max(self.next_free);
        let finish = start + SimDuration(self.service_ns(op, len).round().max(1.0) as u64);
        self.next_free = finish;
        (start, finish)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn large_reads_run_at_the_narrowest_bandwidth() {
        let spec = SsdSpec {
            channels: 8,
            dies_per_channel: 4,
            page_bytes: 16384,
            page_read_us: 50.0,
            page_program_us: 500.0,
            channel_mbps: 400.0,
            interface_mbps: 2000.0,
            overhead_us: 0.0,
            capacity_bytes: 1 << 40,
        };
        let m = SsdModel::new(&spec).unwrap();
        let len = 64 << 20;
        let t = m.service_ns(DiskOp::Read, len) * 1e-9;
        let rate = len as f64 / t / 1e6;
        // 64 MiB = 4096 pages = 128 waves of 50 µs = 6.4 ms on top of 33.5 ms at 2000 MB/s.
        assert!(rate > 1600.0 && rate < 2000.0, "rate {rate}");
        assert!(m.service_ns(DiskOp::Write, 16384) > m.service_ns(DiskOp::Read, 16384));
    }
}
