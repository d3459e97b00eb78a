//! What a query returns: its rows, what every disk scan moved, the plan it ran.

use super::cost;
use super::metrics::ScanReport;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;
use std::time::Duration;

/// A query's result and what it moved.
#[derive(Debug)]
pub struct QueryOutput {
    /// Result schema.
    pub schema: SchemaRef,
    /// Rows.
    pub batches: Vec<RecordBatch>,
    /// Per scan and disk.
    pub scans: Vec<ScanReport>,
    /// Wall time.
    pub wall: Duration,
    /// The part of `wall` spent planning (at `auto`, both levels' plans and the choice; a
    /// failover's replanning not included).
    pub planning: Duration,
    /// CPU time of the host process (every thread) while the plan ran, ns: DataFusion's
    /// operators, decoding what the disks sent, the transport (a concurrent query's work
    /// counts too).
    pub host_cpu_ns: u64,
    /// The executed plan (with DataFusion's metrics).
    pub plan: Arc<dyn ExecutionPlan>,
    /// Host-link busy time during the query.
    pub link_busy: Option<Duration>,
    /// Failovers: each rerun of the query, e.g. `rerun without disk 2 (…)`.
    pub failover: Vec<String>,
    /// Which disks the query used, and why each other one was not ([`Cluster::usage`]).
    pub disks: Vec<String>,
    /// At `auto`: which plan the cost model chose, with its estimates.
    pub choice: Option<String>,
    /// At `auto`: what the cost model expected of the plan that ran (EXPLAIN ANALYZE sets it
    /// beside what the plan really moved and took).
    pub estimate: Option<cost::Estimate>,
    /// With disk groups: bytes the router between groups forwarded during the query (the
    /// router is the cluster's, so a concurrent query's streams count too).
    pub inter_group_bytes: Option<u64>,
}

impl QueryOutput {
    /// An output that is only rows made at the host (a report as a table): no scans.
    pub fn of_rows(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        let plan = Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
            schema.clone(),
        ));
        QueryOutput {
            schema,
            batches,
            scans: vec![],
            wall: Duration::ZERO,
            planning: Duration::ZERO,
            host_cpu_ns: 0,
            plan,
            link_busy: None,
            failover: vec![],
            disks: vec![],
            choice: None,
            estimate: None,
            inter_group_bytes: None,
        }
    }

    /// Result rows.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}
