//! riedel-… workloads.
use super::{KeyError, Wctx};
use crate::config::WorkloadConfig;
use crate::engine::Plan;
/// Riedel queries.
pub fn compile(_cfg: &WorkloadConfig, _ctx: &Wctx) -> Result<Plan, KeyError> {
    Err(("workload.kind".into(), "in progress".into()))
}
