//! When each job of a trace runs: the order and overlap the recording shows. A job that
//! started after another ended depends on it (the host waited for it: a semi-join's build
//! side before its probe, one `disks` stage round before the next); jobs that overlapped run
//! side by side, sharing the disks, links and cores. The time the host spent between the
//! last job it waited for and the job's start (planning, building a Bloom filter or hash
//! table) is kept as a gap, as is its time after the last job (the final operators); both
//! scale with the host's CPU speed.
//!
//! A trace without start times (`started_ns` and `host_wall_ns` all 0, e.g. written by
//! hand) replays its jobs one after another with no gaps, and `host_ns` as the final work.

use super::config::ReplayConfig;
use super::trace::{JobStats, Trace};
use super::workload::{JobWork, job_work};

/// One job's place in the replay.
#[derive(Clone, Debug, PartialEq)]
pub struct JobPlan {
    /// Its work on the replayed disks.
    pub work: JobWork,
    /// The jobs that must end before it starts.
    pub deps: Vec<usize>,
    /// Host time between the last of `deps` ending (or the request's start) and this job's
    /// start, ns at the recorded host speed.
    pub gap_ns: u64,
}

/// A trace's jobs and the host's time after them.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Per job, in the trace's order.
    pub jobs: Vec<JobPlan>,
    /// Host time after the last job ends, ns at the recorded host speed.
    pub tail_ns: u64,
    /// Whether the trace had start times (else: one job after another).
    pub timed: bool,
}

/// The recorded start and end of `job`, ns after the request began.
fn span(job: &JobStats) -> (u64, u64) {
    let start = job.disks.iter().map(|d| d.started_ns).min().unwrap_or(0);
    let end = job
        .disks
        .iter()
        .map(|d| d.started_ns + d.host_wall_ns.max(d.wall_ns))
        .max()
        .unwrap_or(start);
    (start, end)
}

/// The schedule of `trace`'s jobs on `cfg`.
pub fn schedule(trace: &Trace, cfg: &ReplayConfig) -> Schedule {
    let timed = trace
        .jobs
        .iter()
        .flat_map(|j| &j.disks)
        .any(|d| d.started_ns > 0 || d.host_wall_ns > 0);
    let work = |j: &JobStats| job_work(j, trace.recorded.disks, cfg);
    if !timed {
        let jobs = trace
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| JobPlan {
                work: work(j),
                deps: if i == 0 { vec![] } else { vec![i - 1] },
                gap_ns: 0,
            })
            .collect();
        return Schedule {
            jobs,
            tail_ns: trace.host_ns,
            timed,
        };
    }
    let spans: Vec<(u64, u64)> = trace.jobs.iter().map(span).collect();
    let mut jobs: Vec<JobPlan> = trace
        .jobs
        .iter()
        .zip(&spans)
        .map(|(j, &(start, _))| {
            let ended: Vec<usize> = (0..spans.len()).filter(|&i| spans[i].1 <= start).collect();
            let ready = ended.iter().map(|&i| spans[i].1).max().unwrap_or(0);
            // Only the jobs not already waited for through another: one that ended before
            // the last of them started is implied (the replay keeps that order too).
            let last_start = ended.iter().map(|&i| spans[i].0).max().unwrap_or(0);
            let deps = ended
                .into_iter()
                .filter(|&i| spans[i].1 > last_start)
                .collect();
            JobPlan {
                work: work(j),
                deps,
                gap_ns: start - ready,
            }
        })
        .collect();
    let last_end = spans.iter().map(|s| s.1).max().unwrap_or(0);
    let tail_ns = trace.wall_ns.saturating_sub(last_end).max(trace.host_ns);
    spread_host_cpu(trace, &mut jobs, tail_ns);
    for j in &mut jobs {
        j.work.host_combine_ns = (j.work.host_combine_ns + j.work.host_fixed_ns).max(0.0);
    }
    Schedule {
        jobs,
        tail_ns,
        timed,
    }
}

/// When the trace has the host's CPU time while the plan ran but no job's combining time,
/// the part of it not spent in the gaps between jobs and after the last one (taken as one
/// busy core) is the jobs' combining: shared by the bytes each shipped the host (equally
/// when none did).
fn spread_host_cpu(trace: &Trace, jobs: &mut [JobPlan], tail_ns: u64) {
    if trace.host_cpu_ns == 0 || jobs.iter().any(|j| j.work.host_combine_ns > 0.0) {
        return;
    }
    let between: u64 = jobs
        .iter()
        .filter(|j| !j.deps.is_empty())
        .map(|j| j.gap_ns)
        .sum();
    let combine = trace.host_cpu_ns.saturating_sub(between + tail_ns) as f64;
    let shipped: Vec<f64> = jobs
        .iter()
        .map(|j| j.work.totals.bytes_shipped_host)
        .collect();
    let total: f64 = shipped.iter().sum();
    let n = jobs.len() as f64;
    for (j, s) in jobs.iter_mut().zip(shipped) {
        let share = if total > 0.0 { s / total } else { 1.0 / n };
        j.work.host_combine_ns = combine * share;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::config::ReplayFile;
    use crate::replay::trace::{DiskJobStats, Recorded};

    fn job(started_ns: u64, host_wall_ns: u64) -> JobStats {
        JobStats {
            disks: vec![DiskJobStats {
                started_ns,
                host_wall_ns,
                cpu_ns: 10,
                ..DiskJobStats::default()
            }],
            ..JobStats::default()
        }
    }

    fn trace(jobs: Vec<JobStats>, wall_ns: u64) -> Trace {
        Trace {
            recorded: Recorded {
                disks: 1,
                host_cpus: 1,
                disk_cpus: 1.0,
                ..Recorded::default()
            },
            wall_ns,
            jobs,
            ..Trace::default()
        }
    }

    fn plan(t: &Trace) -> Schedule {
        let cfg = ReplayFile::default().resolve("t", &t.recorded).unwrap();
        schedule(t, &cfg)
    }

    #[test]
    fn jobs_that_overlapped_run_together_and_later_ones_wait_with_their_gap() {
        // Two jobs side by side from 5 ns, a third started 7 ns after both ended.
        let t = trace(vec![job(5, 100), job(6, 50), job(112, 30)], 150);
        let s = plan(&t);
        assert!(s.timed);
        let deps: Vec<&[usize]> = s.jobs.iter().map(|j| j.deps.as_slice()).collect();
        assert_eq!(deps, [&[][..], &[][..], &[0, 1][..]]);
        let gaps: Vec<u64> = s.jobs.iter().map(|j| j.gap_ns).collect();
        assert_eq!(gaps, [5, 6, 7]);
        assert_eq!(s.tail_ns, 150 - 142);
    }

    #[test]
    fn the_hosts_cpu_beyond_its_gaps_is_the_jobs_combining_by_bytes_shipped() {
        let mut t = trace(vec![job(5, 100), job(112, 30)], 150);
        t.jobs[0].disks[0].bytes_shipped_host = 300;
        t.jobs[1].disks[0].bytes_shipped_host = 100;
        // 7 ns between the jobs, 8 ns after them: 100 - 15 = 85 ns of combining.
        t.host_cpu_ns = 100;
        let s = plan(&t);
        let combine: Vec<f64> = s.jobs.iter().map(|j| j.work.host_combine_ns).collect();
        assert_eq!(combine, [85.0 * 0.75, 85.0 * 0.25]);
        // A trace that has the jobs' own combining keeps it.
        t.jobs[1].host_combine_ns = 3;
        assert_eq!(plan(&t).jobs[1].work.host_combine_ns, 3.0);
    }

    #[test]
    fn a_job_waits_only_for_those_not_waited_for_through_another() {
        // A chain: 1 after 0, 2 after 1 (and so after 0).
        let t = trace(vec![job(0, 10), job(12, 10), job(25, 10)], 40);
        let deps: Vec<Vec<usize>> = plan(&t).jobs.into_iter().map(|j| j.deps).collect();
        assert_eq!(deps, [vec![], vec![0], vec![1]]);
    }

    #[test]
    fn an_untimed_trace_runs_its_jobs_in_sequence() {
        let mut t = trace(vec![job(0, 0), job(0, 0)], 100);
        t.host_ns = 9;
        let s = plan(&t);
        assert!(!s.timed);
        assert_eq!(s.jobs[1].deps, [0]);
        assert_eq!(s.tail_ns, 9);
    }
}
