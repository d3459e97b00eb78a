//! Admission: a job's memory and temporary-space grants, computed from its spec and taken
//! before any stage is built.
use super::launch::Launch;
use super::state::JobState;
use super::{DiskOs, RunningJob};
use crate::cancel::PendingCancel;
use crate::memory::Grant;
use crate::wiring::TempArea;
use crate::{DiskOsError, Result};
use adisk_core::builder::grant::MIN_JOB_BUFFER_KIB;
use adisk_core::builder::grant::{GrantSizes, job_grant};
use adisk_core::protocol::{DiskletSpec, FragmentKind, JobSpec, Source};
use arrow::array::RecordBatch;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::mpsc;

impl DiskOs {
    pub(super) fn scratch_for(&self, spec: &JobSpec, index: usize, stage: &DiskletSpec) -> u64 {
        let kib = match spec.stage_scratch_kib.get(index) {
            Some(&k) if k > 0 => k,
            _ => spec.scratch_kib,
        };
        let requested = if kib == 0 {
            self.config.default_scratch_bytes
        } else {
            kib.saturating_mul(1024)
        };
        match stage {
            DiskletSpec::Fragment {
                kind: FragmentKind::Aggregate | FragmentKind::Sort | FragmentKind::Stage,
                ..
            }
            | DiskletSpec::Merge { .. }
            | DiskletSpec::App { .. }
            | DiskletSpec::HashJoin { .. } => requested,
            DiskletSpec::Fragment {
                kind: FragmentKind::Select,
                ..
            } => 0,
            DiskletSpec::BloomProbe { filter, .. } => {
                (filter.size_bytes() as u64).max(requested.min(filter.size_bytes() as u64))
            }
            DiskletSpec::Select { .. } | DiskletSpec::Partition { .. } => 0,
            // The whole linear memory of a user disklet (scratch + input area) is its grant.
            DiskletSpec::Wasm { name, .. } => self
                .user
                .get()
                .and_then(|u| u.grant_bytes(name).ok())
                .unwrap_or(0),
        }
    }

    /// The stream buffer size of `spec`: its own request, or the disk's.
    pub(super) fn job_buffer_bytes(&self, spec: &JobSpec) -> Result<u64> {
        if spec.buffer_kib == 0 {
            return Ok(self.config.buffer_bytes);
        }
        if !(MIN_JOB_BUFFER_KIB..=adisk_core::protocol::MAX_JOB_BUFFER_KIB)
            .contains(&spec.buffer_kib)
        {
            return Err(DiskOsError::InvalidJob(format!(
                "stream buffers of {} KiB asked for (allowed: {MIN_JOB_BUFFER_KIB} to {} KiB)",
                spec.buffer_kib,
                adisk_core::protocol::MAX_JOB_BUFFER_KIB
            )));
        }
        if spec
            .disklets()
            .any(|s| matches!(s, DiskletSpec::Wasm { .. }))
            && spec.buffer_kib * 1024 != self.config.buffer_bytes
        {
            // A user disklet's input area is sized for the disk's buffers at install.
            return Err(DiskOsError::InvalidJob(
                "a job with a user disklet runs with the disk's own buffer size".into(),
            ));
        }
        Ok(spec.buffer_kib * 1024)
    }

    /// Admits and starts a job. `host_input` feeds its [`Source::Host`] input, if it has one.
    ///
    /// The grant — every stream's buffer slots, every stage's scratch and the temporary disk
    /// space — is computed from the spec alone and taken before any stage is built: no plan
    /// fragment is decoded, no Bloom filter checked and no user disklet instantiated (its
    /// `init` is guest code) for a job that is refused, and a failure while building returns
    /// the grant at once.
    ///
    /// # Errors
    /// A malformed graph, unknown table/column, invalid stages, memory or temporary space
    /// refused — before anything runs.
    pub async fn start_job(
        self: &Arc<Self>,
        spec: JobSpec,
        host_input: Option<mpsc::Receiver<RecordBatch>>,
    ) -> Result<RunningJob> {
        let shape =
            adisk_core::graph::check(&spec).map_err(|e| DiskOsError::InvalidJob(e.to_string()))?;
        self.check_user_shapes(&spec, &shape.stage_ports)?;
        let host_inputs = spec
            .inputs
            .iter()
            .filter(|s| matches!(s, Source::Host { .. }))
            .count();
        if host_inputs > 1 || (host_inputs == 1) != host_input.is_some() {
            return Err(DiskOsError::InvalidJob(
                "a host-resident input needs a DoExchange call (and only it), one per job".into(),
            ));
        }
        let sources = spec
            .inputs
            .iter()
            .map(|s| self.plan_source(s))
            .collect::<Result<Vec<_>>>()?;
        let buffer_bytes = self.job_buffer_bytes(&spec)?;
        let scratch: Vec<u64> = spec
            .disklets()
            .enumerate()
            .map(|(i, d)| self.scratch_for(&spec, i, d))
            .collect();
        let sizes = GrantSizes {
            buffer_bytes,
            slots_per_stream: crate::stream::slots_per_stream(self.config.buffers_per_stream),
            inbox_messages: self.exchanges.capacity(),
        };
        let requested = job_grant(&spec, &shape, &scratch, &sizes);
        let wait = Instant::now();
        let grant = self.budget.grant(requested).await?;
        let temp = self.temp_grant(&spec).await?;
        let admission_wait_ns = wait.elapsed().as_nanos() as u64;
        let area = TempArea::new(
            &self.temp_root(),
            self.temp_serial.fetch_add(1, Ordering::Relaxed),
            temp.as_ref().map_or(0, Grant::bytes),
        );
        // Only now is stage code run (a failure drops the grants, returning them).
        let pending = PendingCancel::new();
        let built = self
            .build(
                &spec,
                &sources,
                &scratch,
                &shape.stage_ports,
                &area,
                pending.flag(),
            )
            .await?;
        let described: Vec<(&'static str, u64, (u64, u64), u64)> = built
            .stages
            .iter()
            .zip(&scratch)
            .map(|(d, s)| (d.name(), *s, d.setup_ns(), d.sorts_dropped()))
            .collect();
        let state = Arc::new(JobState::new(
            &spec.job_id,
            self.config.disk_id,
            &described,
            pending.disarm(),
        ));
        state
            .admission_wait_ns
            .store(admission_wait_ns, Ordering::Relaxed);
        state.granted_bytes.store(grant.bytes(), Ordering::Relaxed);
        *state.account.lock().expect("account lock") = Some(grant.account().clone());
        state
            .temp_granted
            .store(temp.as_ref().map_or(0, Grant::bytes), Ordering::Relaxed);
        *state.temp_written.lock().expect("temp lock") = Some(area.written_counter());
        self.running
            .lock()
            .expect("running lock")
            .push(state.clone());
        let job = Launch {
            spec,
            grants: (grant, temp),
            area: Arc::new(area),
            state,
            sources,
            built,
            host_input,
            buffer_bytes,
        };
        Ok(self.launch(job))
    }

    /// The temporary-space grant of `spec` (none when it asks for none).
    pub(super) async fn temp_grant(&self, spec: &JobSpec) -> Result<Option<Grant>> {
        if spec.temp_kib == 0 {
            return Ok(None);
        }
        let bytes = spec.temp_kib.saturating_mul(1024);
        match self.temp_budget.grant(bytes).await {
            Ok(g) => Ok(Some(g)),
            Err(DiskOsError::GrantTooLarge {
                requested_bytes,
                budget_bytes,
            }) => Err(DiskOsError::TempSpaceExceeded {
                granted_bytes: 0,
                detail: format!(
                    "the job asks for {requested_bytes} bytes, the disk grants at most {budget_bytes}"
                ),
            }),
            Err(e) => Err(e),
        }
    }

    /// Where the jobs' temporary areas live (emptied when the disk starts).
    pub(super) fn temp_root(&self) -> std::path::PathBuf {
        self.store.dir().join("tmp")
    }
}
