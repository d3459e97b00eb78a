//! chiu-… workloads.
use super::{KeyError, Wctx};
use crate::config::WorkloadConfig;
use crate::engine::Plan;
/// TPC-H on SD groups.
pub fn tpch(_cfg: &WorkloadConfig, _ctx: &Wctx) -> Result<Plan, KeyError> {
    Err(("workload.kind".into(), "in progress".into()))
}
/// FSC.
pub fn fsc(_cfg: &WorkloadConfig, _ctx: &Wctx) -> Result<Plan, KeyError> {
    Err(("workload.kind".into(), "in progress".into()))
}
/// Clustering.
pub fn clustering(_cfg: &WorkloadConfig, _ctx: &Wctx) -> Result<Plan, KeyError> {
    Err(("workload.kind".into(), "in progress".into()))
}
/// FFT.
pub fn fft(_cfg: &WorkloadConfig, _ctx: &Wctx) -> Result<Plan, KeyError> {
    Err(("workload.kind".into(), "in progress".into()))
}
