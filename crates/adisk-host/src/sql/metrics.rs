//! What each disk scan of a query moved ([`ScanReport`]), collected while the query runs
//! ([`QueryMetrics`]).

use adisk_core::stats::DiskJobStats;
use std::sync::Mutex;
use std::time::Duration;

/// What one disk did for one scan of a query.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScanReport {
    /// Scan number in the plan.
    pub scan_id: usize,
    /// Table.
    pub table: String,
    /// The bundle's stages, described.
    pub stages: Vec<String>,
    /// Disk.
    pub disk: u32,
    /// The disk's job statistics (None if they could not be fetched).
    pub stats: Option<DiskJobStats>,
    /// Rows received at the host.
    pub rows_received: u64,
    /// Bytes received at the host.
    pub bytes_received: u64,
    /// Wall time of the job seen from the host.
    pub wall_ns: u64,
    /// When the host started the job, ns after the query began (its metrics were made).
    pub started_ns: u64,
    /// Bloom: keys in the filter.
    pub bloom_keys: Option<u64>,
    /// Bloom: filter size.
    pub bloom_bytes: Option<u64>,
    /// Bloom: rows shipped whose key is really in the build side (analyze only).
    pub bloom_true_matches: Option<u64>,
    /// Control bytes of the job: its spec (the ticket that starts it), the statistics request
    /// and the statistics answer.
    pub control_bytes: u64,
    /// Rows and bytes the cost model expected the whole scan (all its disks) to ship; None
    /// where it had no estimate (and for the jobs of `disks` stages).
    pub expected: Option<(u64, u64)>,
}

/// Control bytes of one job: its spec going out, the statistics request and answer coming
/// back (JSON, as the action carries them).
pub(crate) fn control_bytes(spec_bytes: usize, job_id: &str, stats: Option<&DiskJobStats>) -> u64 {
    let answer = stats.map_or(0, |s| serde_json::to_vec(s).map_or(0, |v| v.len()));
    (spec_bytes + job_id.len() + answer) as u64
}

/// Scan reports of the query being run.
#[derive(Debug)]
pub struct QueryMetrics {
    /// When the query being run started (set by [`QueryMetrics::begin`]; until then, when
    /// the metrics were made): the origin of [`ScanReport::started_ns`].
    origin: Mutex<std::time::Instant>,
    scans: Mutex<Vec<ScanReport>>,
    pending: std::sync::atomic::AtomicUsize,
    settled: tokio::sync::Notify,
}

impl Default for QueryMetrics {
    fn default() -> Self {
        QueryMetrics {
            origin: Mutex::new(std::time::Instant::now()),
            scans: Mutex::default(),
            pending: std::sync::atomic::AtomicUsize::default(),
            settled: tokio::sync::Notify::default(),
        }
    }
}

impl QueryMetrics {
    /// `at` in ns after the query began (0 when before).
    pub(crate) fn since_origin_ns(&self, at: std::time::Instant) -> u64 {
        let origin = *self.origin.lock().unwrap_or_else(|p| p.into_inner());
        at.saturating_duration_since(origin).as_nanos() as u64
    }

    /// A query that began at `started` runs on these metrics (a session's metrics serve
    /// each of its queries in turn).
    pub(crate) fn begin(&self, started: std::time::Instant) {
        *self.origin.lock().unwrap_or_else(|p| p.into_inner()) = started;
    }

    pub(crate) fn started(&self) {
        self.pending
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    pub(crate) fn record(&self, r: ScanReport) {
        self.scans.lock().expect("metrics lock").push(r);
        let before = self.pending.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |p| Some(p.saturating_sub(1)),
        );
        if before.unwrap_or(0) <= 1 {
            self.settled.notify_waiters();
        }
    }
    /// Waits (at most `limit`) until every started job has reported.
    pub(crate) async fn settle(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.pending.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            let wait = self.settled.notified();
            if self.pending.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                break;
            }
        }
    }
    pub(crate) fn take(&self) -> Vec<ScanReport> {
        self.pending.store(0, std::sync::atomic::Ordering::SeqCst);
        std::mem::take(&mut *self.scans.lock().expect("metrics lock"))
    }
}
