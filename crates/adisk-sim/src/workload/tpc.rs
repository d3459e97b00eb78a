//! TPC-D queries of memik-… as plan trees, operation bundling (Algorithm 1).
use super::{KeyError, Wctx};
use crate::config::WorkloadConfig;
use crate::engine::Plan;
/// memik-… query on any architecture.
pub fn memik_query(_cfg: &WorkloadConfig, _ctx: &Wctx) -> Result<Plan, KeyError> {
    Err(("workload.kind".into(), "tpc: in progress".into()))
}
