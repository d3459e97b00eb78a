//! What a disk has staged: partitions per (load, table) and the loads aborted lately — the
//! state the store holds for its staged loads (`staging.rs`), and the names of their
//! directories.
use crate::{Result, StorageError};
use adisk_core::protocol::PartitionInfo;
use arrow::datatypes::SchemaRef;
use std::collections::{BTreeMap, VecDeque};

/// Directory (under the disk's) of staged loads.
pub const STAGING_DIR: &str = "staging";
/// Prefix of a committed load's directory under `tables/<table>/`.
pub const GENERATION_PREFIX: &str = "g-";
/// Aborted load ids remembered (so that late partitions of an aborted load remove themselves).
pub const MAX_ABORTED_LOADS: usize = 1024;

/// Partitions staged on this disk, per (load, table), and the loads aborted lately.
#[derive(Default)]
pub struct Staging {
    pub(crate) staged: BTreeMap<(String, String), StagedTable>,
    pub(crate) aborted: VecDeque<String>,
}

pub(crate) struct StagedTable {
    pub(crate) schema: SchemaRef,
    pub(crate) partitions: BTreeMap<u32, PartitionInfo>,
}

impl Staging {
    pub(crate) fn check_live(&self, load_id: &str) -> Result<()> {
        if self.aborted.iter().any(|a| a == load_id) {
            return Err(StorageError::Invalid(format!("load {load_id} was aborted")));
        }
        Ok(())
    }
}
