//! Workloads at the level the papers describe them: data sizes, selectivities, passes,
//! communication patterns and memory use as parameters. Each workload compiles, for a given
//! topology, into a [`Plan`] of phases that the engine executes.
//!
//! Conventions: sizes are bytes; "per worker" quantities divide totals evenly (the papers
//! assume perfect load balance); memory-dependent behaviour uses [`crate::model::memory`].

pub mod apps;
pub mod chiu;
pub mod context;
pub mod riedel;
pub mod tpc;

use crate::config::WorkloadConfig;
use crate::engine::Plan;
use context::{KeyError, Wctx};

/// Compile `cfg` for the system described by `ctx`.
pub fn compile(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    match cfg.kind.as_str() {
        "select" => apps::select(cfg, ctx),
        "aggregate" => apps::aggregate(cfg, ctx),
        "group_by" => apps::group_by(cfg, ctx),
        "sort" => apps::sort(cfg, ctx),
        "join" => apps::join(cfg, ctx),
        "datacube" => apps::datacube(cfg, ctx),
        "dmine" => apps::dmine(cfg, ctx),
        "conv" => apps::conv(cfg, ctx),
        "earth" => apps::earth(cfg, ctx),
        "tpc" => tpc::memik_query(cfg, ctx),
        "tpch_sd" => chiu::tpch(cfg, ctx),
        "fsc" => chiu::fsc(cfg, ctx),
        "clustering" => chiu::clustering(cfg, ctx),
        "fft" => chiu::fft(cfg, ctx),
        "riedel_select" | "riedel_aggregate" | "riedel_join" | "riedel_join5" | "riedel_query" => {
            riedel::compile(cfg, ctx)
        }
        other => Err((
            "workload.kind".into(),
            format!(
                "unknown workload `{other}` (select, aggregate, group_by, sort, join, datacube, dmine, conv, earth, tpc, tpch_sd, fsc, clustering, fft, riedel_select, riedel_aggregate, riedel_join, riedel_join5, riedel_query)"
            ),
        )),
    }
}
