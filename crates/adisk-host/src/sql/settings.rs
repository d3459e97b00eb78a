//! What the planner's rules and the disk scans of one query read: its offload level, sizes,
//! the cost model, the host link.

use super::offload::Offload;
use super::{bundling, cost};
use crate::client::cluster::TableEntry;
use crate::client::throttle::TokenBucket;
use std::sync::Arc;

/// Settings of one SQL engine.
#[derive(Debug)]
pub struct SqlSettings {
    /// Offload level.
    pub offload: Offload,
    /// Bloom filter size in bytes.
    pub bloom_bytes: usize,
    /// Scratch per disk stage, KiB (0: the disk's default).
    pub scratch_kib: u64,
    /// Temporary disk space per disk job, KiB (0: none; sorts and aggregations past their
    /// scratch then fail instead of spilling).
    pub temp_kib: u64,
    /// Stream buffer size of the disk jobs, KiB (0: the disk's default).
    pub buffer_kib: u64,
    /// Collect exact-match counts to measure Bloom false positives.
    pub analyze: bool,
    /// The host link limiter, if the cluster has one.
    pub host_link: Option<Arc<TokenBucket>>,
    /// The cost model (used by `auto`).
    pub cost: cost::CostModel,
    /// The host program the disk jobs belong to: the unit of fair sharing at the disks.
    pub program: String,
    /// At `disks`: the disk that does the host's combining work (memik's central unit).
    pub central_unit: Option<u32>,
    /// At `disks`: every partitioned join without a join filter as a sort-merge join (its
    /// sorts spill), and only tiny build sides broadcast — the plan a query falls back to when
    /// a disk ran out of memory.
    pub spill_joins: bool,
    /// At `disks`: run each stage's fragment as memik's bundles under this relation, each
    /// bundle a DiskOS stage of its own (None: one fragment per stage, every operation between
    /// two exchanges bundled).
    pub bundling: Option<bundling::Bundling>,
}

impl SqlSettings {
    /// Whether filters on `table` run at the disks.
    pub fn filters_at_disks(&self, table: &TableEntry) -> bool {
        match self.offload {
            Offload::None | Offload::Project => false,
            Offload::Auto => self.cost.push_filters(table),
            _ => true,
        }
    }
}
