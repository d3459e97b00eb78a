//! Disk drive model after Ruemmler & Wilkes, "An introduction to disk drive modeling"
//! (IEEE Computer 27(3), 1994), as used by ADsim (acharya-… §5.1) and DiskSim (uysal-…,
//! memik-…, chiu-…).
//!
//! * **Seek**: `seek(d) = a + b·√d` for `1 ≤ d < x0` cylinders (short seeks, dominated by
//!   settling/acceleration) and `seek(d) = c + e·d` for `d ≥ x0` (long seeks, coast at
//!   full speed); `seek(0) = 0`. The four coefficients are solved so that `seek(1)` equals
//!   the spec's minimum, `seek(C−1)` its maximum, the two regimes meet at `x0`, and the
//!   mean over uniformly random (start, end) cylinder pairs with `d ≥ 1` equals the spec's
//!   mean. `x0` is chosen as the value that makes the curve's slope most continuous.
//! * **Rotation**: period `T = 60 / rpm` s. The platter angle at time `t` is
//!   `((t + φ) mod T) / T` with a per-drive phase `φ` drawn from the seeded PRNG; a request
//!   waits until its first byte's angle passes under the head.
//! * **Zones**: `Z` zones of equal cylinder count; the formatted (sustained) media rate falls
//!   linearly from `media_mbps_outer` (zone 0, where data is placed first) to
//!   `media_mbps_inner`. Bytes per track `= rate · T`. Track and cylinder switches are
//!   taken to be included in the sustained media rate (as spec sheets quote it).
//! * **Controller overhead** per request that starts a new access.
//! * **Read-ahead / track buffer**: after a read the drive keeps reading sequentially into its
//!   buffer (up to `cache_bytes`) while idle; a sequential request that arrives later finds
//!   that much data already buffered. A sequential request that was already queued when the
//!   previous one finished streams on without overhead or rotational delay.

use crate::time::{SimDuration, SimTime};
use serde::{Deserialize, Serialize};

/// Spec-sheet parameters of a drive (one entry of the device catalogue).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DiskSpec {
    /// Spindle speed, revolutions per minute.
    pub rpm: f64,
    /// Single-cylinder (track-to-track) seek, ms.
    pub seek_ms_min: f64,
    /// Mean seek over random requests, ms.
    pub seek_ms_mean: f64,
    /// Full-stroke seek, ms.
    pub seek_ms_max: f64,
    /// Sustained formatted media rate in the outermost zone, MB/s (1 MB = 10^6 bytes).
    pub media_mbps_outer: f64,
    /// Sustained formatted media rate in the innermost zone, MB/s.
    pub media_mbps_inner: f64,
    /// Number of recording zones.
    #[serde(default = "default_zones")]
    pub zones: u32,
    /// Number of cylinders.
    pub cylinders: u32,
    /// Number of recording surfaces (heads).
    pub heads: u32,
    /// Controller overhead charged to every request that starts a new access, µs.
    #[serde(default = "default_overhead")]
    pub controller_overhead_us: f64,
    /// Track buffer used for read-ahead, bytes.
    #[serde(default = "default_cache")]
    pub cache_bytes: u64,
}

fn default_zones() -> u32 {
    1
}
fn default_overhead() -> f64 {
    300.0
}
fn default_cache() -> u64 {
    1 << 20
}

/// The fitted seek curve (see module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct SeekCurve {
    /// Short-seek constant, ms.
    pub a: f64,
    /// Short-seek √d coefficient, ms.
    pub b: f64,
    /// Long-seek constant, ms.
    pub c: f64,
    /// Long-seek per-cylinder coefficient, ms.
    pub e: f64,
    /// Boundary between the regimes, cylinders.
    pub x0: u32,
    /// Cylinders.
    pub cylinders: u32,
}

impl SeekCurve {
    /// Seek time for a distance of `d` cylinders, ms.
    pub fn seek_ms(&self, d: u32) -> f64 {
        if d == 0 {
            0.0
        } else if d < self.x0 {
            self.a + self.b * (d as f64).sqrt()
        } else {
            self.c + self.e * d as f64
        }
    }

    /// Mean seek over uniformly random distinct (start, end) cylinder pairs, ms.
    pub fn mean_ms(&self) -> f64 {
        let c = self.cylinders as f64;
        let mut sum = 0.0;
        for d in 1..self.cylinders {
            sum += 2.0 * (c - d as f64) * self.seek_ms(d);
        }
        sum / (c * (c - 1.0))
    }

    /// Fit the two-regime curve to min/mean/max over `cylinders` cylinders.
    pub fn fit(min: f64, mean: f64, max: f64, cylinders: u32) -> Result<SeekCurve, String> {
        if cylinders < 8 {
            return Err(format!(
                "need at least 8 cylinders to fit a seek curve, got {cylinders}"
            ));
        }
        if !(min > 0.0 && min < mean && mean < max) {
            return Err(format!(
                "seek times must satisfy 0 < min < mean < max (got {min}, {mean}, {max})"
            ));
        }
        let n = cylinders as usize;
        let cf = cylinders as f64;
        let norm = cf * (cf - 1.0);
        // Prefix sums over d = 1..x0-1 of p(d), p(d)·√d; totals of p(d), p(d)·d.
        let mut p_pre = vec![0.0; n + 1];
        let mut ps_pre = vec![0.0; n + 1];
        let mut pd_pre = vec![0.0; n + 1];
        for d in 1..n {
            let p = 2.0 * (cf - d as f64) / norm;
            p_pre[d + 1] = p_pre[d] + p;
            ps_pre[d + 1] = ps_pre[d] + p * (d as f64).sqrt();
            pd_pre[d + 1] = pd_pre[d] + p * d as f64;
        }
        let (p_tot, pd_tot) = (p_pre[n], pd_pre[n]);
        let mut best: Option<(f64, SeekCurve)> = None;
        for x0 in 2..(n - 1) {
            let s0 = p_pre[x0];
            let s1 = ps_pre[x0];
            let t0 = p_tot - s0;
            let t1 = pd_tot - pd_pre[x0];
            let xf = x0 as f64;
            // b(√x0 − 1) + e(C−1−x0) = max − min
            let (a11, a12, r1) = (xf.sqrt() - 1.0, cf - 1.0 - xf, max - min);
            // b(S1 − S0) + e(T1 − (C−1)T0) = mean − min·S0 − max·T0
            let (a21, a22, r2) = (s1 - s0, t1 - (cf - 1.0) * t0, mean - min * s0 - max * t0);
            let det = a11 * a22 - a12 * a21;
            if det.abs() < 1e-12 {
                continue;
            }
            let b = (r1 * a22 - a12 * r2) / det;
            let e = (a11 * r2 - a21 * r1) / det;
            if b < 0.0 || e < 0.0 {
                continue;
            }
            let curve = SeekCurve {
                a: min - b,
                b,
                c: max - e * (cf - 1.0),
                e,
                x0: x0 as u32,
                cylinders,
            };
            let mismatch = (b / (2.0 * xf.sqrt()) - e).abs();
            if best.as_ref().is_none_or(|(m, _)| mismatch < *m) {
                best = Some((mismatch, curve));
            }
        }
        best.map(|(_, c)| c).ok_or_else(|| {
            format!("no two-regime seek curve fits min {min} ms, mean {mean} ms, max {max} ms over {cylinders} cylinders")
        })
    }
}

/// A disk request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskOp {
    /// Read from the media.
    Read,
    /// Write to the media.
    Write,
}

/// The mutable state of one drive during a run.
#[derive(Clone, Debug)]
pub struct DiskModel {
    spec: DiskSpec,
    seek: SeekCurve,
    period_ns: f64,
    /// Per-zone bytes per track.
    zone_track_bytes: Vec<f64>,
    /// Per-zone media rate, bytes per ns.
    zone_rate: Vec<f64>,
    /// Per-zone first byte address.
    zone_start: Vec<u64>,
    cylinders_per_zone: u32,
    capacity: u64,
    phase_ns: f64,
    head_cylinder: u32,
    last_end: u64,
    last_op: DiskOp,
    last_done: SimTime,
    /// Time the mechanism becomes free.
    pub next_free: SimTime,
    /// Media time spent reading ahead while otherwise idle, ns (counted as busy time).
    pub readahead_ns: u64,
}

impl DiskModel {
    /// Build a drive from its spec; `phase` in [0,1) and `start_cylinder` come from the run's PRNG.
    pub fn new(spec: &DiskSpec, phase: f64, start_cylinder: u32) -> Result<DiskModel, String> {
        validate_spec(spec)?;
        let seek = SeekCurve::fit(
            spec.seek_ms_min,
            spec.seek_ms_mean,
            spec.seek_ms_max,
            spec.cylinders,
        )?;
        let period_ns = 60.0e9 / spec.rpm;
        let zones = spec.zones.max(1);
        let cylinders_per_zone = (spec.cylinders / zones).max(1);
        let mut zone_track_bytes = Vec::new();
        let mut zone_rate = Vec::new();
        let mut zone_start = Vec::new();
        let mut addr = 0u64;
        for z in 0..zones {
            let frac = if zones == 1 {
                0.0
            } else {
                z as f64 / (zones - 1) as f64
            };
            let mbps =
                spec.media_mbps_outer + (spec.media_mbps_inner - spec.media_mbps_outer) * frac;
            let rate = mbps * 1e6 / 1e9; // bytes per ns
            let track = rate * period_ns;
            zone_start.push(addr);
            zone_rate.push(rate);
            zone_track_bytes.push(track);
            addr += (track * spec.heads as f64 * cylinders_per_zone as f64) as u64;
        }
        Ok(DiskModel {
            spec: spec.clone(),
            seek,
            period_ns,
            zone_track_bytes,
            zone_rate,
            zone_start,
            cylinders_per_zone,
            capacity: addr,
            phase_ns: phase.clamp(0.0, 1.0) * period_ns,
            head_cylinder: start_cylinder.min(spec.cylinders.saturating_sub(1)),
            last_end: u64::MAX,
            last_op: DiskOp::Read,
            last_done: SimTime::ZERO,
            next_free: SimTime::ZERO,
            readahead_ns: 0,
        })
    }

    /// A copy of this (idle) drive with another rotational phase and head position: drives of
    /// one type share the seek-curve fit.
    pub fn repositioned(&self, phase: f64, start_cylinder: u32) -> DiskModel {
        let mut d = self.clone();
        d.phase_ns = phase.clamp(0.0, 1.0) * self.period_ns;
        d.head_cylinder = start_cylinder.min(self.spec.cylinders.saturating_sub(1));
        d
    }

    /// Formatted capacity, bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    /// The fitted seek curve.
    pub fn seek_curve(&self) -> &SeekCurve {
        &self.seek
    }
    /// The spec this drive was built from.
    pub fn spec(&self) -> &DiskSpec {
        &self.spec
    }

    fn zone_of(&self, addr: u64) -> usize {
        match self.zone_start.binary_search(&addr) {
            Ok(z) => z,
            Err(z) => z.saturating_sub(1),
        }
        .min(self.zone_start.len() - 1)
    }

    /// Media rate at byte address `addr`, bytes per second.
    pub fn media_rate_at(&self, addr: u64) -> f64 {
        self.zone_rate[self.zone_of(addr)] * 1e9
    }

    /// (cylinder, angle in [0,1)) of byte address `addr`.
    fn locate(&self, addr: u64) -> (u32, f64) {
        let addr = addr % self.capacity.max(1);
        let z = self.zone_of(addr);
        let off = (addr - self.zone_start[z]) as f64;
        let track_bytes = self.zone_track_bytes[z];
        let track = (off / track_bytes).floor();
        let angle = (off - track * track_bytes) / track_bytes;
        let cyl = z as u32 * self.cylinders_per_zone
            + (track as u64 / self.spec.heads.max(1) as u64) as u32;
        (cyl.min(self.spec.cylinders - 1), angle)
    }

    /// Media time to transfer `len` bytes starting at `addr` (zone-aware), ns.
    fn media_ns(&self, addr: u64, len: u64) -> f64 {
        let mut ns = 0.0;
        let mut a = addr % self.capacity.max(1);
        let mut left = len;
        while left > 0 {
            let z = self.zone_of(a);
            let zone_end = self.zone_start.get(z + 1).copied().unwrap_or(self.capacity);
            let here = left.min(zone_end.saturating_sub(a).max(1));
            ns += here as f64 / self.zone_rate[z];
            left -= here;
            a = if a + here >= self.capacity {
                0
            } else {
                a + here
            };
        }
        ns
    }

    /// Serve a request arriving at `arrival`; returns (start, finish). FIFO: the request
    /// starts when the mechanism is free.
    pub fn serve(
        &mut self,
        arrival: SimTime,
        op: DiskOp,
        addr: u64,
        len: u64,
    ) -> (SimTime, SimTime) {
        let start = arrival.max(self.next_free);
        let sequential = addr == self.last_end && op == self.last_op;
        let queued = arrival <= self.last_done;
        let overhead = self.spec.controller_overhead_us * 1e3;
        let media = self.media_ns(addr, len);
        let service_ns = if sequential && queued {
            media
        } else if sequential && op == DiskOp::Read {
            // Read-ahead kept streaming into the track buffer while the drive was idle.
            let idle = (start.0 - self.last_done.0) as f64;
            let rate = self.zone_rate[self.zone_of(addr % self.capacity.max(1))];
            let buffered = (idle * rate)
                .min(self.spec.cache_bytes as f64)
                .min(len as f64);
            let ahead = media * (buffered / len.max(1) as f64);
            self.readahead_ns += ahead.round() as u64;
            overhead + media - ahead
        } else {
            let (cyl, angle) = self.locate(addr);
            let dist = cyl.abs_diff(self.head_cylinder);
            let seek_ns = self.seek.seek_ms(dist) * 1e6;
            let t_ready = start.0 as f64 + overhead + seek_ns;
            let head_angle = ((t_ready + self.phase_ns) % self.period_ns) / self.period_ns;
            let mut wait = angle - head_angle;
            if wait < 0.0 {
                wait += 1.0;
            }
            overhead + seek_ns + wait * self.period_ns + media
        };
        let finish = start + SimDuration(service_ns.round().max(1.0) as u64);
        self.head_cylinder = self.locate(addr + len.saturating_sub(1)).0;
        self.last_end = addr + len;
        self.last_op = op;
        self.last_done = finish;
        self.next_free = finish;
        (start, finish)
    }
}

/// Reject physically meaningless specs with the offending key.
pub fn validate_spec(s: &DiskSpec) -> Result<(), String> {
    let checks: [(&str, f64); 6] = [
        ("rpm", s.rpm),
        ("seek_ms_min", s.seek_ms_min),
        ("seek_ms_mean", s.seek_ms_mean),
        ("seek_ms_max", s.seek_ms_max),
        ("media_mbps_outer", s.media_mbps_outer),
        ("media_mbps_inner", s.media_mbps_inner),
    ];
    for (k, v) in checks {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{k}: must be a positive number, got {v}"));
        }
    }
    if s.controller_overhead_us < 0.0 || !s.controller_overhead_us.is_finite() {
        return Err(format!(
            "controller_overhead_us: must be >= 0, got {}",
            s.controller_overhead_us
        ));
    }
    if s.cylinders < 8 {
        return Err(format!("cylinders: need at least 8, got {}", s.cylinders));
    }
    if s.heads == 0 {
        return Err("heads: must be at least 1".into());
    }
    if s.zones == 0 || s.zones > s.cylinders {
        return Err(format!(
            "zones: must be between 1 and cylinders, got {}",
            s.zones
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Seagate Cheetah 9LP (ST39102), uysal-… §4: 10,025 rpm, 14.5–21.3 MB/s, 5.4 ms mean
    /// read seek, 12.2 ms max; 6,962 cylinders and 12 heads and a 0.6 ms track-to-track seek
    /// from the product manual [uysal-… ref 33].
    pub(crate) fn cheetah_9lp() -> DiskSpec {
        DiskSpec {
            rpm: 10025.0,
            seek_ms_min: 0.6,
            seek_ms_mean: 5.4,
            seek_ms_max: 12.2,
            media_mbps_outer: 21.3,
            media_mbps_inner: 14.5,
            zones: 8,
            cylinders: 6962,
            heads: 12,
            controller_overhead_us: 300.0,
            cache_bytes: 1 << 20,
        }
    }

    #[test]
    fn seek_curve_hits_min_mean_max() {
        let s = cheetah_9lp();
        let c = SeekCurve::fit(s.seek_ms_min, s.seek_ms_mean, s.seek_ms_max, s.cylinders).unwrap();
        assert!((c.seek_ms(1) - 0.6).abs() < 1e-9);
        assert!((c.seek_ms(s.cylinders - 1) - 12.2).abs() < 1e-9);
        assert!((c.mean_ms() - 5.4).abs() / 5.4 < 1e-6);
        // Monotone non-decreasing.
        let mut prev = 0.0;
        for d in 0..s.cylinders {
            let v = c.seek_ms(d);
            assert!(v + 1e-9 >= prev, "seek curve decreases at {d}");
            prev = v;
        }
    }

    #[test]
    fn simulated_random_seeks_average_to_spec_mean_within_one_percent() {
        // Measure through the drive itself: random (start, end) cylinder pairs.
        for spec in [
            cheetah_9lp(),
            DiskSpec {
                seek_ms_min: 1.62,
                seek_ms_mean: 8.46,
                seek_ms_max: 21.77,
                ..cheetah_9lp()
            },
        ] {
            let d = DiskModel::new(&spec, 0.0, 0).unwrap();
            let mut rng = Rng::new(7);
            let n = 400_000;
            let mut sum = 0.0;
            let mut k = 0;
            while k < n {
                let a = rng.below(spec.cylinders as u64) as u32;
                let b = rng.below(spec.cylinders as u64) as u32;
                if a == b {
                    continue;
                }
                sum += d.seek_curve().seek_ms(a.abs_diff(b));
                k += 1;
            }
            let mean = sum / n as f64;
            assert!(
                (mean - spec.seek_ms_mean).abs() / spec.seek_ms_mean < 0.01,
                "mean {mean} vs {}",
                spec.seek_ms_mean
            );
        }
    }

    #[test]
    fn sequential_rate_matches_zone_rate_within_one_percent() {
        let spec = cheetah_9lp();
        let mut d = DiskModel::new(&spec, 0.3, 100).unwrap();
        // Deep queue of 256 KB reads from the start of the outer zone: all requests
        // arrive at time zero, as with asynchronous prefetching.
        let req = 256 * 1024u64;
        let n = 200u64;
        let mut end = SimTime::ZERO;
        for i in 0..n {
            let (_, f) = d.serve(SimTime::ZERO, DiskOp::Read, i * req, req);
            end = f;
        }
        let rate = (n * req) as f64 / end.as_secs_f64() / 1e6;
        assert!(
            (rate - 21.3).abs() / 21.3 < 0.01,
            "outer-zone rate {rate} MB/s"
        );
        // Innermost zone.
        let inner_start = d.capacity() - 100 * req;
        let mut d = DiskModel::new(&spec, 0.3, 100).unwrap();
        let mut end = SimTime::ZERO;
        for i in 0..90 {
            let (_, f) = d.serve(SimTime::ZERO, DiskOp::Read, inner_start + i * req, req);
            end = f;
        }
        let rate = (90 * req) as f64 / end.as_secs_f64() / 1e6;
        assert!(
            (rate - 14.5).abs() / 14.5 < 0.01,
            "inner-zone rate {rate} MB/s"
        );
    }

    #[test]
    fn capacity_is_close_to_the_nine_gigabyte_drive() {
        let d = DiskModel::new(&cheetah_9lp(), 0.0, 0).unwrap();
        let gb = d.capacity() as f64 / 1e9;
        assert!((7.0..11.0).contains(&gb), "capacity {gb} GB");
    }

    #[test]
    fn random_reads_cost_more_than_sequential_and_read_ahead_helps() {
        let spec = cheetah_9lp();
        let mut d = DiskModel::new(&spec, 0.0, 0).unwrap();
        let (_, f1) = d.serve(SimTime::ZERO, DiskOp::Read, 0, 8192);
        // Far random read.
        let (s2, f2) = d.serve(f1, DiskOp::Read, d.capacity() / 2, 8192);
        let random = (f2 - s2).as_secs_f64();
        assert!(random > 0.002, "random read too cheap: {random}");
        // Sequential read arriving 5 ms after completion: read-ahead has buffered it.
        let t = f2 + SimDuration::from_ms_f64(5.0);
        let (s3, f3) = d.serve(t, DiskOp::Read, d.capacity() / 2 + 8192, 8192);
        let seq = (f3 - s3).as_secs_f64();
        assert!(
            seq <= spec.controller_overhead_us * 1e-6 + 1e-7,
            "read-ahead not used: {seq}"
        );
    }
}
