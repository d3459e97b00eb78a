//! A trace job's work rebuilt per replayed disk: the recorded per-disk volumes and CPU times,
//! spread over the replayed disks (see [`SkewMode`]).

use super::config::{ReplayConfig, SkewMode};
use super::trace::{DiskJobStats, JobStats};
use serde::Serialize;
use std::collections::BTreeMap;

/// The work of one disk in one job, in the recording's units (bytes; CPU ns at the recorded
/// disk CPU speed).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DiskWork {
    /// Bytes read from storage.
    pub bytes_read: f64,
    /// Bytes written to storage.
    pub bytes_written: f64,
    /// Disk CPU (reading, decoding, stages), ns.
    pub cpu_ns: f64,
    /// Of which reading and decoding (outside every stage), ns.
    pub decode_cpu_ns: f64,
    /// Of which the job's own compute steps (reading, decoding, stages; the rest is the disk
    /// process's transport and runtime while the job ran), ns.
    pub step_cpu_ns: f64,
    /// Bytes shipped to the host.
    pub bytes_shipped_host: f64,
    /// Bytes shipped to other disks.
    pub bytes_shipped_disks: f64,
    /// Wait for the memory grant before the job started, ns (a time: averaged, not summed,
    /// when disks are merged or split).
    pub admission_wait_ns: f64,
    /// When the host started the job on this disk after it started the job's first disk, ns
    /// (a time, like `admission_wait_ns`).
    pub start_offset_ns: f64,
    /// What the host saw this disk's part take beyond the disk's own wall time and its
    /// admission wait: the job's way to the disk, its last results' way back, its closing,
    /// and the disk process's wait for a core outside the job's steps, ns (a time, like
    /// `admission_wait_ns`; 0 in traces without the host's times).
    pub outside_ns: f64,
}

impl DiskWork {
    /// `d`'s work; its CPU is the larger of the job's own and the disk process's while the
    /// job ran (which adds the transport's and the runtime's). `job_start`: when the host
    /// started the job's first disk.
    fn from_stats(d: &DiskJobStats, job_start: u64) -> DiskWork {
        DiskWork {
            bytes_read: d.bytes_read as f64,
            bytes_written: d.bytes_written as f64,
            cpu_ns: d.cpu_ns.max(d.process_cpu_ns) as f64,
            decode_cpu_ns: d.decode_cpu_ns() as f64,
            step_cpu_ns: d.cpu_ns as f64,
            bytes_shipped_host: d.bytes_shipped_host as f64,
            bytes_shipped_disks: d.bytes_shipped_disks as f64,
            admission_wait_ns: d.admission_wait_ns as f64,
            start_offset_ns: d.started_ns.saturating_sub(job_start) as f64,
            outside_ns: d
                .host_wall_ns
                .saturating_sub(d.wall_ns + d.admission_wait_ns) as f64,
        }
    }
    /// `self + w · other` for the volumes; the admission wait is left to the caller.
    fn add_scaled(&mut self, other: &DiskWork, w: f64) {
        self.bytes_read += w * other.bytes_read;
        self.bytes_written += w * other.bytes_written;
        self.cpu_ns += w * other.cpu_ns;
        self.decode_cpu_ns += w * other.decode_cpu_ns;
        self.step_cpu_ns += w * other.step_cpu_ns;
        self.bytes_shipped_host += w * other.bytes_shipped_host;
        self.bytes_shipped_disks += w * other.bytes_shipped_disks;
    }
}

/// A job's work on the replayed disks.
#[derive(Clone, Debug, PartialEq)]
pub struct JobWork {
    /// One entry per replayed disk.
    pub disks: Vec<DiskWork>,
    /// Distinct disks the job ran on when recorded.
    pub recorded_disks: u32,
    /// Totals over the recorded disks.
    pub totals: DiskWork,
    /// Host CPU combining the job's results, ns at the recorded host speed.
    pub host_combine_ns: f64,
    /// Recorded max/mean of per-disk CPU (1 when even or zero).
    pub skew_cpu: f64,
    /// Recorded max/mean of per-disk bytes read (1 when even or zero).
    pub skew_bytes_read: f64,
    /// How many cores one disk's part of the job kept busy when recorded: the largest over
    /// its disks of CPU (the process's where larger) over the disk's wall time, at least 1.
    /// A disk's part of a job runs its chunks on at most this many cores.
    pub parallelism: f64,
    /// Host CPU the job's fixed per-disk cost adds (negative: saves) on the replayed disks,
    /// ns at the recorded host speed ([`ReplayConfig::job_costs_ns`]; 0 without it).
    pub host_fixed_ns: f64,
}

/// Rebuild `job`'s work on the replayed disks. A disk listed several times (one entry per
/// phase) is summed. The job runs on `cfg.disks × (its disks / recorded_disks)` replayed disks
/// (at least 1, at most `cfg.disks`): a job that used every recorded disk uses every replayed one.
pub fn job_work(job: &JobStats, recorded_disks: u32, cfg: &ReplayConfig) -> JobWork {
    let mut by_disk: BTreeMap<u32, DiskWork> = BTreeMap::new();
    let job_start = job.disks.iter().map(|d| d.started_ns).min().unwrap_or(0);
    for d in &job.disks {
        let w = DiskWork::from_stats(d, job_start);
        let fresh = !by_disk.contains_key(&d.disk_id);
        let slot = by_disk.entry(d.disk_id).or_default();
        slot.add_scaled(&w, 1.0);
        slot.admission_wait_ns = slot.admission_wait_ns.max(w.admission_wait_ns);
        slot.outside_ns = slot.outside_ns.max(w.outside_ns);
        if fresh || w.start_offset_ns < slot.start_offset_ns {
            slot.start_offset_ns = w.start_offset_ns;
        }
    }
    // What every disk paid outside its pipeline, whatever the others did: the least of the
    // disks that have the host's times. The rest of a disk's time outside was its wait for the
    // disks the replay simulates beside it (on a shared machine, for a core to send its last
    // batch): counted per disk, 8 disks on 2 cores were predicted 20–40 % slow on the
    // configuration they were recorded on.
    let timed: Vec<u32> = (job.disks.iter())
        .filter(|d| d.host_wall_ns > 0)
        .map(|d| d.disk_id)
        .collect();
    let least = (by_disk.iter())
        .filter(|(id, _)| timed.contains(id))
        .map(|(_, w)| w.outside_ns)
        .fold(f64::INFINITY, f64::min);
    let mut recorded: Vec<DiskWork> = by_disk.into_values().collect();
    for w in &mut recorded {
        w.outside_ns = w.outside_ns.min(least);
    }
    let r = recorded.len() as u32;
    let share = r as f64 / recorded_disks.max(1) as f64;
    let n = ((cfg.disks as f64 * share).round() as u32).clamp(1, cfg.disks);
    let (disk_fixed, host_fixed) = match cfg.job_costs_ns {
        Some(costs) if n != r => costs,
        _ => (0.0, 0.0),
    };
    for w in &mut recorded {
        w.cpu_ns -= disk_fixed.min(w.cpu_ns);
        w.decode_cpu_ns = w.decode_cpu_ns.min(w.cpu_ns);
        w.step_cpu_ns = w.step_cpu_ns.min(w.cpu_ns);
    }
    let mut totals = DiskWork::default();
    for w in &recorded {
        totals.add_scaled(w, 1.0);
        totals.admission_wait_ns += w.admission_wait_ns / r as f64;
        totals.start_offset_ns += w.start_offset_ns / r as f64;
        totals.outside_ns += w.outside_ns / r as f64;
    }
    let mut disks = match cfg.skew {
        SkewMode::Mean => vec![mean_of(&totals, n); n as usize],
        SkewMode::Recorded => spread(&recorded, n),
    };
    for d in &mut disks {
        d.cpu_ns += disk_fixed;
    }
    let parallelism = (job.disks.iter())
        .map(|d| {
            let busy = d.wall_ns.saturating_sub(d.admission_wait_ns);
            d.cpu_ns.max(d.process_cpu_ns) as f64 / busy.max(1) as f64
        })
        .fold(1.0, f64::max);
    JobWork {
        disks,
        parallelism,
        host_fixed_ns: host_fixed * (f64::from(n) - f64::from(r)),
        recorded_disks: r,
        host_combine_ns: job.host_combine_ns as f64,
        skew_cpu: max_over_mean(recorded.iter().map(|w| w.cpu_ns)),
        skew_bytes_read: max_over_mean(recorded.iter().map(|w| w.bytes_read)),
        totals,
    }
}

fn mean_of(totals: &DiskWork, n: u32) -> DiskWork {
    let mut w = DiskWork::default();
    w.add_scaled(totals, 1.0 / n as f64);
    w.admission_wait_ns = totals.admission_wait_ns;
    w.start_offset_ns = totals.start_offset_ns;
    w.outside_ns = totals.outside_ns;
    w
}

/// Lay the recorded disks' data end to end (disk `i` covers `[i, i+1)`) and give replayed disk
/// `k` the run `[k·r/n, (k+1)·r/n)`: totals are kept exactly, the same count replays each
/// disk as recorded, more disks split each one evenly.
fn spread(recorded: &[DiskWork], n: u32) -> Vec<DiskWork> {
    let r = recorded.len() as f64;
    let width = r / n as f64;
    (0..n)
        .map(|k| {
            let (lo, hi) = (k as f64 * width, (k + 1) as f64 * width);
            let mut w = DiskWork::default();
            let (mut wait, mut offset, mut outside) = (0.0, 0.0, 0.0);
            let first = lo.floor() as usize;
            let last = (hi.ceil() as usize).min(recorded.len());
            for (i, rec) in recorded.iter().enumerate().take(last).skip(first) {
                let overlap = (hi.min(i as f64 + 1.0) - lo.max(i as f64)).max(0.0);
                w.add_scaled(rec, overlap);
                wait += overlap * rec.admission_wait_ns;
                offset += overlap * rec.start_offset_ns;
                outside += overlap * rec.outside_ns;
            }
            w.admission_wait_ns = wait / width;
            w.start_offset_ns = offset / width;
            w.outside_ns = outside / width;
            w
        })
        .collect()
}

/// max/mean of `values`; 1 when they are all zero.
fn max_over_mean(values: impl Iterator<Item = f64>) -> f64 {
    let (mut max, mut sum, mut count) = (0.0f64, 0.0, 0usize);
    for v in values {
        max = max.max(v);
        sum += v;
        count += 1;
    }
    if sum <= 0.0 || count == 0 {
        1.0
    } else {
        max / (sum / count as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(cpu: f64) -> DiskWork {
        DiskWork {
            cpu_ns: cpu,
            bytes_read: 2.0 * cpu,
            ..DiskWork::default()
        }
    }

    #[test]
    fn spreading_keeps_totals_and_splits_or_merges_disks() {
        let rec = vec![work(100.0), work(300.0)];
        let same = spread(&rec, 2);
        assert_eq!(same, rec);
        let more = spread(&rec, 4);
        let cpus: Vec<f64> = more.iter().map(|w| w.cpu_ns).collect();
        assert_eq!(cpus, vec![50.0, 50.0, 150.0, 150.0]);
        let fewer = spread(&rec, 1);
        assert_eq!(fewer[0].cpu_ns, 400.0);
        let odd = spread(&rec, 3);
        let total: f64 = odd.iter().map(|w| w.cpu_ns).sum();
        assert!((total - 400.0).abs() < 1e-9);
    }

    #[test]
    fn the_time_every_disk_spent_outside_its_pipeline_is_kept_and_averaged_when_merged() {
        use crate::replay::config::ReplayFile;
        use crate::replay::trace::Recorded;
        let disk = |id, wall_ns, host_wall_ns| DiskJobStats {
            disk_id: id,
            cpu_ns: 1000,
            wall_ns,
            host_wall_ns,
            admission_wait_ns: 10,
            ..DiskJobStats::default()
        };
        // 4 000 and 2 000 ns outside the disks' own time (admission wait off): 2 000 is what
        // both paid, the other 2 000 the first waited for the rest; a disk without the host's
        // times has none.
        let job = JobStats {
            disks: vec![
                disk(0, 5_000, 9_010),
                disk(1, 5_000, 7_010),
                disk(2, 5_000, 0),
            ],
            ..JobStats::default()
        };
        let rec = Recorded {
            disks: 3,
            host_cpus: 1,
            disk_cpus: 1.0,
            ..Recorded::default()
        };
        let on = |disks| {
            let c = ReplayFile {
                disks: Some(disks),
                ..ReplayFile::default()
            };
            job_work(&job, 3, &c.resolve("t", &rec).unwrap())
        };
        let same: Vec<f64> = on(3).disks.iter().map(|d| d.outside_ns).collect();
        assert_eq!(same, [2_000.0, 2_000.0, 0.0]);
        assert!((on(1).disks[0].outside_ns - 4_000.0 / 3.0).abs() < 1e-6);
    }

    #[test]
    fn skew_is_max_over_mean_and_one_for_zeros() {
        assert_eq!(max_over_mean([1.0, 3.0].into_iter()), 1.5);
        assert_eq!(max_over_mean([0.0, 0.0].into_iter()), 1.0);
        assert_eq!(max_over_mean(std::iter::empty()), 1.0);
    }

    #[test]
    fn calibrated_job_costs_are_paid_per_replayed_disk() {
        use crate::replay::config::ReplayFile;
        use crate::replay::trace::Recorded;
        let disk = |id| DiskJobStats {
            disk_id: id,
            cpu_ns: 1000,
            ..DiskJobStats::default()
        };
        let job = JobStats {
            disks: vec![disk(0), disk(1)],
            ..JobStats::default()
        };
        let rec = Recorded {
            disks: 2,
            host_cpus: 1,
            disk_cpus: 1.0,
            ..Recorded::default()
        };
        let cfg = |disks| {
            let mut c = ReplayFile {
                disks: Some(disks),
                ..ReplayFile::default()
            }
            .resolve("t", &rec)
            .unwrap();
            c.job_costs_ns = Some((100.0, 50.0));
            c
        };
        // Merged onto one disk: one fixed cost instead of two, and one host cost fewer.
        let one = job_work(&job, 2, &cfg(1));
        assert_eq!(one.disks[0].cpu_ns, 1900.0);
        assert_eq!(one.host_fixed_ns, -50.0);
        // Split over four: four fixed costs.
        let four = job_work(&job, 2, &cfg(4));
        let cpus: Vec<f64> = four.disks.iter().map(|d| d.cpu_ns).collect();
        assert_eq!(cpus, vec![550.0; 4]);
        assert_eq!(four.host_fixed_ns, 100.0);
        // On as many disks as recorded nothing changes.
        let same = job_work(&job, 2, &cfg(2));
        assert_eq!(same.disks[0].cpu_ns, 1000.0);
        assert_eq!(same.host_fixed_ns, 0.0);
    }
}
