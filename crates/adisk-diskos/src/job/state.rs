//! A job's live state on its disk; a snapshot of it is the job's statistics.
use crate::cancel::CancelFlag;
use crate::memory::Account;
use crate::stream::{ReadCounters, StreamHold};
use crate::{DiskOsError, Result};
use adisk_core::stats::{DiskJobStats, StageStats};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Default)]
pub(crate) struct StageCounters {
    pub(crate) name: &'static str,
    pub(crate) rows_in: AtomicU64,
    pub(crate) rows_out: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) cpu_ns: AtomicU64,
    pub(crate) scratch_granted: u64,
    pub(crate) scratch_peak: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) spilled: AtomicU64,
    pub(crate) setup_ns: (u64, u64),
    pub(crate) sorts_dropped: u64,
    /// Since the job's start: the first step's start + 1 (0: none yet), the last step's end.
    pub(crate) first_step_ns: AtomicU64,
    pub(crate) last_step_ns: AtomicU64,
}

/// Live state of a job; a snapshot of it is the job's [`DiskJobStats`].
pub struct JobState {
    pub(crate) job_id: String,
    pub(crate) disk_id: u32,
    pub(crate) started: Instant,
    pub(crate) read: Arc<ReadCounters>,
    pub(crate) stages: Vec<StageCounters>,
    /// Arrow IPC bytes shipped to the host (counted by the server).
    pub shipped_host_bytes: AtomicU64,
    pub(crate) shipped_disk_bytes: AtomicU64,
    /// Rows shipped out of the disk.
    pub rows_shipped: AtomicU64,
    /// CPU time spent encoding output (counted by the server).
    pub encode_cpu_ns: AtomicU64,
    pub(crate) admission_wait_ns: AtomicU64,
    pub(crate) schedule_wait_ns: Arc<AtomicU64>,
    pub(crate) granted_bytes: AtomicU64,
    pub(crate) account: Mutex<Option<Arc<Account>>>,
    /// Bytes of named results written.
    pub(crate) written_bytes: Arc<AtomicU64>,
    pub(crate) temp_granted: AtomicU64,
    pub(crate) temp_written: Mutex<Option<Arc<AtomicU64>>>,
    pub(crate) wall_ns: AtomicU64,
    /// The process's CPU time when the job was made, and its growth until the job ended.
    process_cpu_start: u64,
    process_cpu_ns: AtomicU64,
    pub(crate) failed: AtomicBool,
    /// Set the moment any part of the job fails, before that part's output streams close.
    pub(crate) broken: Mutex<Option<String>>,
    pub(crate) error: Mutex<Option<String>>,
    pub(crate) cancel: tokio::sync::watch::Sender<bool>,
    /// Set by [`JobState::abandon`].
    pub(crate) abandoned: AtomicBool,
}

impl JobState {
    /// Cancels the job (its consumer went away): sources waiting for pipe or host input stop.
    pub fn cancel(&self) {
        self.cancel.send_replace(true);
    }

    /// Cancels the job because its host stopped waiting for it (its result stream was dropped
    /// while it ran: the host went away, its connection lapsed, or it gave up on the query);
    /// counted in the disk's `jobs_abandoned` when the job ends.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
        self.cancel();
    }

    /// The job's cancellation, for code that cannot await it.
    pub fn cancel_flag(&self) -> CancelFlag {
        CancelFlag(self.cancel.subscribe())
    }

    /// Whether the job was cancelled.
    pub fn cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    pub(crate) fn new(
        job_id: &str,
        disk_id: u32,
        stages: &[(&'static str, u64, (u64, u64), u64)],
        cancel: tokio::sync::watch::Sender<bool>,
    ) -> Self {
        JobState {
            job_id: job_id.to_string(),
            disk_id,
            started: Instant::now(),
            read: Arc::new(ReadCounters::default()),
            stages: stages
                .iter()
                .map(|(name, scratch, setup_ns, sorts_dropped)| StageCounters {
                    name,
                    scratch_granted: *scratch,
                    setup_ns: *setup_ns,
                    sorts_dropped: *sorts_dropped,
                    ..Default::default()
                })
                .collect(),
            shipped_host_bytes: AtomicU64::new(0),
            shipped_disk_bytes: AtomicU64::new(0),
            rows_shipped: AtomicU64::new(0),
            encode_cpu_ns: AtomicU64::new(0),
            admission_wait_ns: AtomicU64::new(0),
            schedule_wait_ns: Arc::new(AtomicU64::new(0)),
            granted_bytes: AtomicU64::new(0),
            account: Mutex::new(None),
            written_bytes: Arc::new(AtomicU64::new(0)),
            temp_granted: AtomicU64::new(0),
            temp_written: Mutex::new(None),
            wall_ns: AtomicU64::new(0),
            process_cpu_start: adisk_core::stats::process_cpu_ns(),
            process_cpu_ns: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            broken: Mutex::new(None),
            error: Mutex::new(None),
            cancel,
            abandoned: AtomicBool::new(false),
        }
    }

    /// True while no part of the job failed and it was not cancelled. An exchange sender asks
    /// when its stream ended: only an intact job ends a pipe stream cleanly; any other end
    /// resets it, so its receiver never takes a cut stream for a finished one.
    pub fn intact(&self) -> std::result::Result<(), String> {
        if let Some(why) = &*self.broken.lock().expect("broken lock") {
            return Err(why.clone());
        }
        if self.cancelled() {
            return Err("the job was cancelled".into());
        }
        Ok(())
    }

    /// A producer's outcome: a failure marks the job broken, and only then are the producer's
    /// output streams let go (`holds`), so their readers see the mark when they see the end.
    pub(crate) fn settle<T>(&self, r: Result<T>, holds: Vec<StreamHold>) -> Result<T> {
        if let Err(e) = &r {
            self.broken
                .lock()
                .expect("broken lock")
                .get_or_insert_with(|| e.to_string());
        }
        drop(holds);
        r
    }

    pub(crate) fn fail(&self, e: &DiskOsError) {
        self.failed.store(true, Ordering::SeqCst);
        *self.error.lock().expect("error lock") = Some(e.to_string());
    }

    /// True once any part of the job failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Marks the end of the job (wall time).
    pub fn finish_wall(&self) {
        self.wall_ns
            .store(self.started.elapsed().as_nanos() as u64, Ordering::SeqCst);
        self.process_cpu_ns
            .store(self.process_cpu_so_far(), Ordering::SeqCst);
    }

    fn process_cpu_so_far(&self) -> u64 {
        adisk_core::stats::process_cpu_ns().saturating_sub(self.process_cpu_start)
    }

    /// Statistics now.
    pub fn snapshot(&self) -> DiskJobStats {
        let r = &self.read;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let stages: Vec<StageStats> = self
            .stages
            .iter()
            .map(|s| StageStats {
                disklet: s.name.to_string(),
                rows_in: l(&s.rows_in),
                rows_out: l(&s.rows_out),
                bytes_in: l(&s.bytes_in),
                bytes_out: l(&s.bytes_out),
                cpu_ns: l(&s.cpu_ns),
                scratch_granted_bytes: s.scratch_granted,
                scratch_peak_bytes: l(&s.scratch_peak),
                flushes: l(&s.flushes),
                spilled_bytes: l(&s.spilled),
                compile_ns: s.setup_ns.0,
                instantiate_ns: s.setup_ns.1,
                first_step_ns: l(&s.first_step_ns).saturating_sub(1),
                last_step_ns: l(&s.last_step_ns),
                sorts_dropped: s.sorts_dropped,
            })
            .collect();
        let wall = match l(&self.wall_ns) {
            0 => self.started.elapsed().as_nanos() as u64,
            w => w,
        };
        DiskJobStats {
            disk_id: self.disk_id,
            job_id: self.job_id.clone(),
            bytes_read: l(&r.bytes_read),
            bytes_skipped: l(&r.bytes_skipped),
            partitions_read: l(&r.partitions_read),
            partitions_skipped: l(&r.partitions_skipped),
            row_groups_read: l(&r.row_groups_read),
            row_groups_skipped: l(&r.row_groups_skipped),
            rows_read: l(&r.rows_read),
            rows_dropped_at_decode: r.rows_dropped.load(Ordering::Relaxed),
            bytes_scanned: l(&r.bytes_scanned),
            rows_shipped: l(&self.rows_shipped),
            bytes_shipped_host: l(&self.shipped_host_bytes),
            bytes_shipped_disks: l(&self.shipped_disk_bytes),
            cpu_ns: l(&r.cpu_ns)
                + stages.iter().map(|s| s.cpu_ns).sum::<u64>()
                + l(&self.encode_cpu_ns),
            wall_ns: wall,
            process_cpu_ns: match l(&self.process_cpu_ns) {
                0 => self.process_cpu_so_far(),
                c => c,
            },
            admission_wait_ns: l(&self.admission_wait_ns),
            schedule_wait_ns: l(&self.schedule_wait_ns),
            memory_granted_bytes: l(&self.granted_bytes),
            memory_peak_bytes: self
                .account
                .lock()
                .expect("account lock")
                .as_ref()
                .map_or(0, |a| a.peak()),
            bytes_written: l(&self.written_bytes),
            temp_granted_bytes: l(&self.temp_granted),
            temp_peak_bytes: self
                .temp_written
                .lock()
                .expect("temp lock")
                .as_ref()
                .map_or(0, |w| l(w)),
            stages,
            error: self.error.lock().expect("error lock").clone(),
            ended: false,
        }
    }
}
