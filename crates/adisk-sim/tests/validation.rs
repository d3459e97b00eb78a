//! Component models against public spec sheets (issue 15, point 5).
//!
//! Each drive is built from the figures its manufacturer publishes and then measured the way a
//! spec sheet defines the figure — average seek over all seek combinations, average rotational
//! latency over random requests, sustained transfer of a deep sequential queue, access to data
//! of random reads — through the same `DiskModel::serve`/`SsdModel::serve` the simulator uses.
//! The table in `docs/simulator.md` (*Validation of the component models*) lists every figure,
//! its source and the error measured here; the bounds below are the errors stated there.

use adisk_sim::model::disk::{DiskModel, DiskOp, DiskSpec};
use adisk_sim::model::ssd::{SsdModel, SsdSpec};
use adisk_sim::rng::Rng;
use adisk_sim::time::{SimDuration, SimTime};

/// Relative error of a measured value against a published one.
fn error(measured: f64, published: f64) -> f64 {
    (measured - published) / published
}

fn check(what: &str, measured: f64, published: f64, bound: f64) {
    let e = error(measured, published);
    println!(
        "{what}: model {measured:.4}, published {published:.4}, error {:+.2}%",
        e * 100.0
    );
    assert!(
        e.abs() <= bound,
        "{what}: model {measured}, published {published}: error {:+.2}% exceeds {:.1}%",
        e * 100.0,
        bound * 100.0
    );
}

/// Seagate Cheetah 9LP ST39102 (uysal-… §4, and the drive taken for chiu-… and memik-…), as
/// the experiment files state it from its product manual (publication 83329240).
fn cheetah_9lp() -> DiskSpec {
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

/// Seagate Savvio 10K.4 SAS ST9600204SS, product manual Rev. A, §4.1–4.2.1: 10K rpm, 6 heads,
/// 147,620 tracks per surface, 677,557 bytes per track (average), seek without controller
/// overhead 3.8 ms average / 0.30 ms single track / 7.81 ms full stroke (read), 4.0 ms average
/// access including controller overhead (so 0.2 ms of overhead). One zone at the average
/// bytes per track: the manual gives no zone table.
fn savvio_10k4() -> DiskSpec {
    let period_s = 60.0 / 10_000.0;
    let mbps = 677_557.0 / period_s / 1e6;
    DiskSpec {
        rpm: 10_000.0,
        seek_ms_min: 0.30,
        seek_ms_mean: 3.8,
        seek_ms_max: 7.81,
        media_mbps_outer: mbps,
        media_mbps_inner: mbps,
        zones: 1,
        cylinders: 147_620,
        heads: 6,
        controller_overhead_us: 200.0,
        cache_bytes: 16 << 20,
    }
}

/// Seagate Cheetah 15K.7 SAS, product manual Rev. D, §4.2.3: sustainable transfer 122 MB/s
/// (minimum) to 204 MB/s (maximum), average rotational latency 2.0 ms (15K rpm). The manual's
/// seek figures are not used here (any valid curve; geometry assumed).
fn cheetah_15k7() -> DiskSpec {
    DiskSpec {
        rpm: 15_000.0,
        seek_ms_min: 0.2,
        seek_ms_mean: 3.4,
        seek_ms_max: 6.5,
        media_mbps_outer: 204.0,
        media_mbps_inner: 122.0,
        zones: 16,
        cylinders: 100_000,
        heads: 6,
        controller_overhead_us: 100.0,
        cache_bytes: 16 << 20,
    }
}

/// Average seek as spec sheets define it: the mean over all (start, end) pairs of distinct
/// cylinders (Hitachi's 5K320 specification §4.4.2.1 writes the weighted average out), measured
/// over random pairs.
fn measured_average_seek_ms(spec: &DiskSpec, pairs: u32) -> f64 {
    let d = DiskModel::new(spec, 0.0, 0).expect("valid spec");
    let mut rng = Rng::new(11);
    let mut sum = 0.0;
    let mut k = 0;
    while k < pairs {
        let a = rng.below(spec.cylinders as u64) as u32;
        let b = rng.below(spec.cylinders as u64) as u32;
        if a == b {
            continue;
        }
        sum += d.seek_curve().seek_ms(a.abs_diff(b));
        k += 1;
    }
    sum / pairs as f64
}

/// Average rotational latency: small reads at random offsets of the outermost track (no
/// seek), each issued after a random idle gap, so the platter's angle is random; the latency
/// is the service time less the controller overhead and the media time.
fn measured_rotational_latency_ms(spec: &DiskSpec, requests: u32) -> f64 {
    let mut d = DiskModel::new(spec, 0.37, 0).expect("valid spec");
    let mut rng = Rng::new(5);
    let len = 512u64;
    let track_bytes = (spec.media_mbps_outer * 1e6 * 60.0 / spec.rpm) as u64;
    let media_ms = len as f64 / (spec.media_mbps_outer * 1e6) * 1e3;
    let mut now = SimTime::ZERO;
    let mut sum = 0.0;
    for _ in 0..requests {
        // Align to 512 bytes and stay off the previous request's end (not sequential).
        let addr = rng.below(track_bytes / len - 1) * len;
        now += SimDuration::from_us_f64(1000.0 + rng.next_f64() * 50_000.0);
        let (start, finish) = d.serve(now, DiskOp::Read, addr, len);
        let service_ms = finish.since(start).as_secs_f64() * 1e3;
        sum += service_ms - spec.controller_overhead_us / 1e3 - media_ms;
        now = finish;
    }
    sum / requests as f64
}

/// Sustained transfer: a deep queue of 256 KB reads (all queued at once) starting at `addr`.
fn measured_sustained_mbps(spec: &DiskSpec, from_end: bool) -> f64 {
    let mut d = DiskModel::new(spec, 0.5, 0).expect("valid spec");
    let req = 256 * 1024u64;
    let count = 200u64;
    let start_addr = if from_end {
        (d.capacity() - count * req) / req * req
    } else {
        0
    };
    let mut first_start = None;
    let mut last = SimTime::ZERO;
    for i in 0..count {
        let (s, e) = d.serve(SimTime::ZERO, DiskOp::Read, start_addr + i * req, req);
        if i == 1 {
            // Skip the first request's positioning: the figure is a sustained rate.
            first_start = Some(s);
        }
        last = e;
    }
    let t = last.since(first_start.expect("two requests")).as_secs_f64();
    ((count - 1) * req) as f64 / t / 1e6
}

/// Access to data of random 4 KB reads at queue depth one (Savvio 10K.4 manual, §4.2.1 note 4:
/// "Access time = controller overhead + average seek time … Access to data = access time +
/// latency time"), measured over random cylinders.
fn measured_random_read_ms(spec: &DiskSpec, requests: u32) -> f64 {
    let mut d = DiskModel::new(spec, 0.1, 0).expect("valid spec");
    let mut rng = Rng::new(3);
    let len = 4096u64;
    let mut now = SimTime::ZERO;
    let mut sum = 0.0;
    for _ in 0..requests {
        let addr = rng.below(d.capacity() / len - 1) * len;
        let (start, finish) = d.serve(now, DiskOp::Read, addr, len);
        sum += finish.since(start).as_secs_f64() * 1e3;
        now = finish;
    }
    sum / requests as f64
}

#[test]
fn cheetah_9lp_average_seek_latency_and_sustained_rates_match_its_spec() {
    let s = cheetah_9lp();
    check(
        "9LP average seek ms",
        measured_average_seek_ms(&s, 400_000),
        5.4,
        0.01,
    );
    let curve = DiskModel::new(&s, 0.0, 0)
        .expect("valid")
        .seek_curve()
        .clone();
    check("9LP track-to-track seek ms", curve.seek_ms(1), 0.6, 1e-6);
    check(
        "9LP full-stroke seek ms",
        curve.seek_ms(s.cylinders - 1),
        12.2,
        1e-6,
    );
    // 10,025 rpm: half a revolution is 2.993 ms.
    check(
        "9LP average latency ms",
        measured_rotational_latency_ms(&s, 20_000),
        60_000.0 / 10_025.0 / 2.0,
        0.02,
    );
    check(
        "9LP sustained outer MB/s",
        measured_sustained_mbps(&s, false),
        21.3,
        0.01,
    );
    check(
        "9LP sustained inner MB/s",
        measured_sustained_mbps(&s, true),
        14.5,
        0.01,
    );
}

#[test]
fn savvio_10k4_seek_access_latency_and_capacity_match_its_manual() {
    let s = savvio_10k4();
    check(
        "Savvio average seek ms",
        measured_average_seek_ms(&s, 400_000),
        3.8,
        0.01,
    );
    check(
        "Savvio average latency ms",
        measured_rotational_latency_ms(&s, 20_000),
        3.0,
        0.02,
    );
    // Access to data of a random 4 KB read: 4.0 ms access (overhead + seek) + 3.0 ms latency
    // (+ 0.036 ms to transfer 4 KB at 113 MB/s, which the manual's figure leaves out).
    check(
        "Savvio random 4 KB read ms",
        measured_random_read_ms(&s, 20_000),
        4.0 + 3.0,
        0.03,
    );
    // 600 GB formatted (rounded) = 6 heads × 147,620 tracks × 677,557 bytes.
    let d = DiskModel::new(&s, 0.0, 0).expect("valid");
    check("Savvio capacity GB", d.capacity() as f64 / 1e9, 600.0, 0.01);
}

#[test]
fn cheetah_15k7_sustained_rates_and_latency_match_its_manual() {
    let s = cheetah_15k7();
    check(
        "15K.7 sustained maximum MB/s",
        measured_sustained_mbps(&s, false),
        204.0,
        0.01,
    );
    check(
        "15K.7 sustained minimum MB/s",
        measured_sustained_mbps(&s, true),
        122.0,
        0.01,
    );
    check(
        "15K.7 average latency ms",
        measured_rotational_latency_ms(&s, 20_000),
        2.0,
        0.02,
    );
}

/// Hitachi Travelstar 5K320 (HTS543232L9SA00), OEM specification §4.4.2: read seeks 12 ms
/// average (the weighted average of all seek combinations), 20.0 ms full stroke, 1.0 ms single
/// track; 5400 rpm, 11.1 ms per revolution, 5.5 ms average latency. Cylinders, media rate and
/// overhead are not in that section (assumed; the seek fit's mean does not depend on them).
#[test]
fn travelstar_5k320_seek_curve_and_latency_match_its_specification() {
    let s = DiskSpec {
        rpm: 5400.0,
        seek_ms_min: 1.0,
        seek_ms_mean: 12.0,
        seek_ms_max: 20.0,
        media_mbps_outer: 60.0,
        media_mbps_inner: 30.0,
        zones: 16,
        cylinders: 100_000,
        heads: 4,
        controller_overhead_us: 200.0,
        cache_bytes: 8 << 20,
    };
    check(
        "5K320 average seek ms",
        measured_average_seek_ms(&s, 400_000),
        12.0,
        0.01,
    );
    let curve = DiskModel::new(&s, 0.0, 0)
        .expect("valid")
        .seek_curve()
        .clone();
    check("5K320 single-track seek ms", curve.seek_ms(1), 1.0, 1e-6);
    check(
        "5K320 full-stroke seek ms",
        curve.seek_ms(s.cylinders - 1),
        20.0,
        1e-6,
    );
    // The sheet rounds half of 11.1 ms to 5.5 ms; the model's half revolution is 5.556 ms.
    check(
        "5K320 average latency ms",
        measured_rotational_latency_ms(&s, 20_000),
        5.5,
        0.02,
    );
}

/// The SSD of the what-if experiments (`uysal/ssd-whatif-*.toml`: 8 channels × 4 dies, 16 KB
/// pages, 50 µs page read, 400 MB/s channels, 550 MB/s SATA interface) against a SATA data-
/// centre SSD's published figures: Kingston DC600M 960 GB (SEDC600M/960G), sequential read
/// 560 MB/s (peak), random 4 KB read 94,000 IOPS (Puget Systems' listing of Kingston's
/// specification; the queue depth of the IOPS figure is not given there, such figures are
/// usually at 32).
fn whatif_ssd() -> SsdSpec {
    SsdSpec {
        channels: 8,
        dies_per_channel: 4,
        page_bytes: 16384,
        page_read_us: 50.0,
        page_program_us: 500.0,
        channel_mbps: 400.0,
        interface_mbps: 550.0,
        overhead_us: 0.0,
        capacity_bytes: 960_000_000_000,
    }
}

/// `count` reads of `len` bytes, all queued at time zero; returns (MB/s, IOPS).
fn ssd_queued_reads(len: u64, count: u32) -> (f64, f64) {
    let mut m = SsdModel::new(&whatif_ssd()).expect("valid spec");
    let mut last = SimTime::ZERO;
    for _ in 0..count {
        last = m.serve(SimTime::ZERO, DiskOp::Read, len).1;
    }
    let t = last.as_secs_f64();
    (len as f64 * count as f64 / t / 1e6, count as f64 / t)
}

#[test]
fn ssd_sequential_read_within_two_percent_and_random_iops_error_as_documented() {
    // 256 KB: the simulator's chunk size. Queued requests overlap one request's flash reads
    // with the previous one's transfer, so the 550 MB/s interface limits.
    let (mbps_256k, _) = ssd_queued_reads(256 * 1024, 1000);
    check(
        "SSD sequential read MB/s (256 KB requests)",
        mbps_256k,
        560.0,
        0.02,
    );
    let (mbps_1m, _) = ssd_queued_reads(1 << 20, 1000);
    check(
        "SSD sequential read MB/s (1 MiB requests)",
        mbps_1m,
        560.0,
        0.02,
    );
    // Random 4 KB reads, all queued: the 32 dies overlap, the transfer path (7.45 µs per
    // 4 KB at 550 MB/s) limits to about 134,000 IOPS, 43% above the sheet's 94,000: the model
    // has no per-command controller/FTL cost. This bound records the known error (docs:
    // *Validation of the component models*) so that a model change updates the table.
    let (_, iops) = ssd_queued_reads(4096, 10_000);
    check("SSD random 4 KB read IOPS (queued)", iops, 94_000.0, 0.45);
    assert!(
        iops > 94_000.0,
        "the documented over-estimate changed sign: {iops} IOPS"
    );
}

/// One request of a DiskSim "validate" trace: read?, first 512-byte block, blocks, the
/// response time measured on the real drive (µs) and the idle time before the next (µs).
struct Measured {
    read: bool,
    block: u64,
    blocks: u64,
    response_us: f64,
    think_us: f64,
}

/// Parses DiskSim 4.0's validate format (`R|W Hit|Miss blkno bcount servtime nextinter`, as
/// read by `iotrace_validate_get_ioreq_event`).
fn parse_validate_trace(text: &str) -> Vec<Measured> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 6).then(|| Measured {
                read: f[0] == "R",
                block: f[2].parse().unwrap(),
                blocks: f[3].parse().unwrap(),
                response_us: f[4].parse().unwrap(),
                think_us: f[5].parse().unwrap(),
            })
        })
        .collect()
}

/// Replays a validate trace as DiskSim does: one request at a time, each issued the
/// recorded idle time after the previous one completed. Returns the model's response times
/// (µs) in trace order.
fn replay(spec: &DiskSpec, trace: &[Measured]) -> Vec<f64> {
    let mut d = DiskModel::new(spec, 0.0, 0).expect("valid spec");
    let mut now = SimTime::ZERO;
    let mut out = Vec::with_capacity(trace.len());
    for r in trace {
        let op = if r.read { DiskOp::Read } else { DiskOp::Write };
        let (_, finish) = d.serve(now, op, r.block * 512, r.blocks * 512);
        out.push(finish.since(now).as_secs_f64() * 1e6);
        now = finish + SimDuration::from_us_f64(r.think_us);
    }
    out
}

/// Ruemmler & Wilkes' demerit: the root mean square horizontal distance between two response
/// time distributions (sorted samples of equal count), in the samples' unit.
fn rms_distance(a: &[f64], b: &[f64]) -> f64 {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let n = a.len().min(b.len()).max(1) as f64;
    (a.iter().zip(&b).map(|(x, y)| (x - y).powi(2)).sum::<f64>() / n).sqrt()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The Seagate ST39102LW (Cheetah 9LP) validation trace distributed with DiskSim 4.0
/// (`valid/cheetah9LP.trace`: 10,000 requests measured on the real drive, 6,594 reads of
/// 2–12 KB at scattered addresses, 3,406 writes). The trace is not in this repository (it is
/// DiskSim's); point `ADISK_DISKSIM_VALID` at DiskSim's `valid` directory to run it, else the
/// test passes and says it was skipped. Reads are compared (mean and demerit); writes are
/// reported only: the drive acknowledges writes from its write-back cache ("Fast write level
/// = 2" in DiskSim's parameters, 1.3 ms measured on average), which the model does not have.
/// Measured: reads 5.504 ms against 5.804 ms (−5.2%), demerit 0.50 ms = 8.6% of the mean
/// (DiskSim's own, calibrated model of this drive: 0.107 ms).
#[test]
fn cheetah_9lp_replays_the_disksim_validation_trace() {
    let Some(dir) = std::env::var_os("ADISK_DISKSIM_VALID") else {
        println!("skipped: ADISK_DISKSIM_VALID (DiskSim's valid directory) not set");
        return;
    };
    let path = std::path::Path::new(&dir).join("cheetah9LP.trace");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let trace = parse_validate_trace(&text);
    assert_eq!(trace.len(), 10_000);
    let model = replay(&cheetah_9lp(), &trace);
    let pick = |read: bool, src: &dyn Fn(usize) -> f64| -> Vec<f64> {
        (0..trace.len())
            .filter(|i| trace[*i].read == read)
            .map(src)
            .collect()
    };
    let (real_r, model_r) = (
        pick(true, &|i| trace[i].response_us),
        pick(true, &|i| model[i]),
    );
    let (real_w, model_w) = (
        pick(false, &|i| trace[i].response_us),
        pick(false, &|i| model[i]),
    );
    let demerit = rms_distance(&real_r, &model_r);
    println!(
        "reads: measured mean {:.3} ms, model {:.3} ms; demerit {:.3} ms = {:.1}% of the mean",
        mean(&real_r) / 1e3,
        mean(&model_r) / 1e3,
        demerit / 1e3,
        demerit / mean(&real_r) * 100.0
    );
    println!(
        "writes: measured mean {:.3} ms, model {:.3} ms (no write-back cache in the model)",
        mean(&real_w) / 1e3,
        mean(&model_w) / 1e3
    );
    check(
        "Cheetah 9LP, mean read response (ms)",
        mean(&model_r) / 1e3,
        mean(&real_r) / 1e3,
        0.06,
    );
    assert!(demerit / mean(&real_r) < 0.10, "demerit {demerit} µs");
}
