//! What a workload compiler works with: the system it compiles for ([`Wctx`]), the memory
//! its algorithm may use, its error type and the checks of its parameters.

use crate::config::ArchKind;
use crate::costs::Costs;
use crate::engine::{Phase, Topology};

/// Error: (dotted key, reason).
pub type KeyError = (String, String);

/// What a workload needs to know about the system it is compiled for.
pub struct Wctx<'a> {
    /// Workers.
    pub n: usize,
    /// Memory a worker can use for its algorithm, bytes.
    pub mem_per_worker: f64,
    /// Coordinator memory, bytes.
    pub coord_mem: f64,
    /// All workers run on the coordinator's node (single host).
    pub single_node: bool,
    /// Architecture.
    pub kind: ArchKind,
    /// Costs.
    pub costs: &'a Costs,
    /// Costs of work executed at the workers (the system's `worker_cost_overrides` applied).
    pub worker_costs: &'a Costs,
    /// I/O request size, bytes.
    pub request_bytes: f64,
    /// Workers are disks (active/smart disks).
    pub worker_disks: bool,
    /// Peer traffic is forwarded by the coordinator.
    pub via_host: bool,
    /// Disk groups (sd_groups).
    pub groups: usize,
    /// Requests in flight per worker in sort's first phase, if the system sets
    /// `queue_depth_sort_phase_one`.
    pub sort_phase_one_requests: Option<u32>,
}

/// OS memory footprint of a full-function host OS: 24 MB (uysal-… §4, from Acharya & Setia).
pub const HOST_OS_FOOTPRINT_BYTES: f64 = 24e6;
/// DiskOS + disklet code footprint (assumption: 1 MB).
pub const DISKOS_FOOTPRINT_BYTES: f64 = 1e6;

impl<'a> Wctx<'a> {
    /// Derive from a topology.
    pub fn new(
        topo: &Topology,
        kind: ArchKind,
        costs: &'a Costs,
        worker_costs: &'a Costs,
        request_bytes: f64,
    ) -> Wctx<'a> {
        let n = topo.workers.len();
        let worker_disks = matches!(
            kind,
            ArchKind::ActiveDisks | ArchKind::SmartDisks | ArchKind::SdGroups
        );
        let footprint = if worker_disks {
            DISKOS_FOOTPRINT_BYTES
        } else {
            HOST_OS_FOOTPRINT_BYTES
        };
        let mem_per_worker = topo
            .workers
            .first()
            .map(|w| {
                let node = &topo.nodes[w.node];
                let buffers = topo.buffers_per_worker as f64 * request_bytes;
                algorithm_memory(node.mem_bytes, node.cpus.len(), footprint, buffers)
            })
            .unwrap_or(0.0);
        let coord = &topo.nodes[topo.coordinator];
        let single_node = topo.workers.iter().all(|w| w.node == topo.coordinator);
        Wctx {
            n,
            mem_per_worker,
            coord_mem: (coord.mem_bytes - footprint).max(coord.mem_bytes * 0.1),
            single_node,
            kind,
            costs,
            worker_costs,
            request_bytes,
            worker_disks,
            via_host: topo.via_host,
            groups: topo.groups.max(1) as usize,
            sort_phase_one_requests: None,
        }
    }
    /// Cost parameter.
    pub fn c(&self, name: &str) -> f64 {
        self.costs.get(name)
    }
    /// Cost parameter of work executed at a worker.
    pub fn cw(&self, name: &str) -> f64 {
        self.worker_costs.get(name)
    }
    /// Mark a phase as dispatched by the coordinator and synchronised at its end (multi-node only).
    pub fn protocol(&self, mut ph: Phase) -> Phase {
        if !self.single_node {
            ph.command = true;
            ph.sync = true;
        }
        ph
    }
}

/// Memory a worker's algorithm can use: its node's memory shared by the node's processors,
/// less the OS footprint and its stream buffers (at least a tenth of its share).
pub fn algorithm_memory(
    node_mem_bytes: f64,
    cpus: usize,
    footprint: f64,
    buffers_bytes: f64,
) -> f64 {
    let per = node_mem_bytes / cpus.max(1) as f64;
    let fp = footprint / cpus.max(1) as f64;
    (per - fp - buffers_bytes).max(per * 0.1)
}

/// A context for unit tests of workload compilers: `n` workers with `mem_per_worker` bytes.
#[cfg(test)]
pub(crate) fn test_ctx<'a>(
    costs: &'a Costs,
    n: usize,
    mem_per_worker: f64,
    kind: ArchKind,
) -> Wctx<'a> {
    let worker_disks = matches!(
        kind,
        ArchKind::ActiveDisks | ArchKind::SmartDisks | ArchKind::SdGroups
    );
    Wctx {
        n,
        mem_per_worker,
        coord_mem: 1e9,
        single_node: false,
        kind,
        costs,
        worker_costs: costs,
        request_bytes: 256.0 * 1024.0,
        worker_disks,
        via_host: false,
        groups: 1,
        sort_phase_one_requests: None,
    }
}

/// Required numeric parameter.
pub fn req(v: Option<f64>, key: &str, kind: &str) -> Result<f64, KeyError> {
    let x = v.ok_or_else(|| {
        (
            format!("workload.{key}"),
            format!("required for kind {kind}"),
        )
    })?;
    if !x.is_finite() || x < 0.0 {
        return Err((
            format!("workload.{key}"),
            format!("must be a non-negative number, got {x}"),
        ));
    }
    Ok(x)
}

/// Required positive parameter.
pub fn pos(v: Option<f64>, key: &str, kind: &str) -> Result<f64, KeyError> {
    let x = req(v, key, kind)?;
    if x <= 0.0 {
        return Err((format!("workload.{key}"), format!("must be > 0, got {x}")));
    }
    Ok(x)
}

/// A fraction in [0, 1].
pub fn frac(v: Option<f64>, key: &str, kind: &str) -> Result<f64, KeyError> {
    let x = req(v, key, kind)?;
    if x > 1.0 {
        return Err((
            format!("workload.{key}"),
            format!("must be a fraction in [0, 1], got {x}"),
        ));
    }
    Ok(x)
}
