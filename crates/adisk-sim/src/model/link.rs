//! Interconnect links.
//!
//! Every link is a FIFO server. A transfer of `n` bytes occupies it for
//! `overhead_us + n / bandwidth` (arbitration/setup plus serialisation) and is delivered
//! `latency_us` after it leaves. Shared buses and fibre-channel loops are one such server
//! for all attached devices (one transfer at a time, first come first served); several
//! loops are several servers and a transfer takes the one that frees first. A switched
//! network gives each port a transmit and a receive server (full duplex), the switch
//! fabric itself is non-blocking, and an uplink between switches is one more server per
//! direction whose bandwidth is the sum of its trunked links. Switched networks and the SMP
//! fabric are store-and-forward at message granularity: each hop is its own FIFO stage and
//! the switch buffers whole messages. Within one leg (the I/O path of a shared-fabric drive:
//! loop, XIO, board link) the hops are cut-through: they start together when all are free,
//! each is busy for its own serialisation time, and the data arrives when the slowest has
//! finished plus the sum of the latencies.

use serde::{Deserialize, Serialize};

/// Link parameters.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Bandwidth, MB/s (10^6 bytes per second).
    pub bandwidth_mbps: f64,
    /// One-way latency added to delivery, µs.
    #[serde(default)]
    pub latency_us: f64,
    /// Per-transfer occupancy overhead (arbitration, setup), µs.
    #[serde(default)]
    pub overhead_us: f64,
}

impl LinkSpec {
    /// A link from bandwidth and latency.
    pub fn new(bandwidth_mbps: f64, latency_us: f64) -> LinkSpec {
        LinkSpec {
            bandwidth_mbps,
            latency_us,
            overhead_us: 0.0,
        }
    }
    /// Reject non-positive bandwidth or negative latencies.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.bandwidth_mbps.is_finite() && self.bandwidth_mbps > 0.0) {
            return Err(format!(
                "bandwidth_mbps: must be a positive number, got {}",
                self.bandwidth_mbps
            ));
        }
        if !(self.latency_us.is_finite() && self.latency_us >= 0.0) {
            return Err(format!("latency_us: must be >= 0, got {}", self.latency_us));
        }
        if !(self.overhead_us.is_finite() && self.overhead_us >= 0.0) {
            return Err(format!(
                "overhead_us: must be >= 0, got {}",
                self.overhead_us
            ));
        }
        Ok(())
    }
    /// Occupancy for `bytes`, ns.
    pub fn occupancy_ns(&self, bytes: u64) -> f64 {
        self.overhead_us * 1e3 + bytes as f64 / (self.bandwidth_mbps * 1e6) * 1e9
    }
}

/// Named network technologies (bandwidths as data rates after encoding). Each value's
/// source is listed in `docs/simulator.md`.
pub fn preset(name: &str) -> Option<LinkSpec> {
    Some(match name {
        // 100BaseT: 100 Mb/s = 12.5 MB/s; 3Com SuperStack II 3900 switch latency assumed 10 µs.
        "100baset" => LinkSpec::new(12.5, 10.0),
        // Gigabit Ethernet: 125 MB/s.
        "gigabit" => LinkSpec::new(125.0, 10.0),
        // ATM OC-3: 155 Mb/s = 19.4 MB/s (memik-… §6.1).
        "atm155" => LinkSpec::new(19.375, 20.0),
        // IBM SP-2 TB3 switch port: 50.9 MB/s peak (memik-… §6.1); latency assumed 40 µs.
        "sp2_tb3" => LinkSpec::new(50.9, 40.0),
        // Fibre Channel loop: 100 MB/s per loop (uysal-… §4, acharya-… Table 1).
        "fc_loop" => LinkSpec::new(100.0, 1.0),
        // PCI 32 bit / 33 MHz: 133 MB/s (uysal-… §4).
        "pci" => LinkSpec::new(133.0, 1.0),
        // InfiniBand 1x: 2.5 Gb/s signalling, 8b/10b → 250 MB/s (chiu-… §3.1, IBA spec 1.0a).
        "infiniband_1x" => LinkSpec::new(250.0, 5.0),
        // Origin 2000 inter-board link: 780 MB/s, 1 µs (uysal-… §4).
        "origin_link" => LinkSpec::new(780.0, 1.0),
        // Ultra-wide SCSI bus: 40 MB/s (riedel-… §5).
        "ultra_wide_scsi" => LinkSpec::new(40.0, 1.0),
        _ => return None,
    })
}
