//! Staged loads: a load writes every partition under its load id, invisible to scans and the
//! catalog, and becomes the live table only when the host commits it.
//!
//! ```text
//!   DIR/staging/<load>/<table>/part-NNNNN.parquet     staged (not in the manifest)
//!        │  commit: rename the directory, then replace the manifest (the commit point)
//!        ▼
//!   DIR/tables/<table>/g-<load>/part-NNNNN.parquet     live, listed with LoadStamp { load, disks }
//! ```
//!
//! Until the manifest is replaced, the previous table stays listed and its files in place; a
//! crash before it leaves the previous state, and [`DiskStore::open`] removes `staging/` and
//! any generation directory the manifest does not list. A commit checks that exactly the
//! partitions the host expects are staged. An aborted load's staged files are removed, and a
//! partition that finishes after its load was aborted removes itself.
use crate::store::{DiskStore, validate_table_name};
use crate::writer::PartitionWriter;
use crate::{Result, StorageError, io_err};
use adisk_core::protocol::{CommitTable, LoadStamp, PartitionInfo, TableInfo};
use arrow::datatypes::SchemaRef;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub use crate::staged::{GENERATION_PREFIX, MAX_ABORTED_LOADS, STAGING_DIR};
use crate::staged::{StagedTable, Staging};

/// Checks a load id: 1–64 characters of `[a-z0-9-]` (it names directories).
pub fn validate_load_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(StorageError::Invalid(format!(
            "invalid load id `{id}`: use 1-64 characters of a-z, 0-9 and -"
        )))
    }
}

fn staged_dir(load_id: &str, table: &str) -> String {
    format!("{STAGING_DIR}/{load_id}/{table}")
}

fn generation_dir(load_id: &str, table: &str) -> String {
    format!("tables/{table}/{GENERATION_PREFIX}{load_id}")
}

impl DiskStore {
    /// Starts staging `table` under `load_id`: removes what other loads staged for the table.
    pub fn begin_staging(&self, load_id: &str, table: &str) -> Result<()> {
        validate_load_id(load_id)?;
        validate_table_name(table)?;
        let mut staging = self.staging.lock().expect("staging lock");
        staging.check_live(load_id)?;
        staging
            .staged
            .retain(|(load, t), _| t != table || load == load_id);
        let root = self.dir.join(STAGING_DIR);
        for load in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            if load.file_name().to_string_lossy() != load_id && load.path().join(table).exists() {
                tracing::warn!(load = %load.file_name().to_string_lossy(), table, "removing an earlier load's staged partitions");
                let _ = std::fs::remove_dir_all(load.path().join(table));
                let _ = std::fs::remove_dir(load.path()); // only if empty
            }
        }
        Ok(())
    }

    /// Starts writing partition `partition` of `table`, staged under `load_id`.
    pub fn create_staged_partition(
        &self,
        load_id: &str,
        table: &str,
        partition: u32,
        schema: SchemaRef,
        row_group_rows: usize,
    ) -> Result<PartitionWriter> {
        validate_load_id(load_id)?;
        validate_table_name(table)?;
        self.staging
            .lock()
            .expect("staging lock")
            .check_live(load_id)?;
        self.writer_in(
            &staged_dir(load_id, table),
            table,
            partition,
            schema,
            row_group_rows,
        )
    }

    /// Finishes a staged partition (not visible until its load is committed).
    pub fn finish_staged(&self, load_id: &str, writer: PartitionWriter) -> Result<PartitionInfo> {
        let (table, schema) = (writer.table.clone(), writer.schema.clone());
        let info = writer.finish()?;
        let mut staging = self.staging.lock().expect("staging lock");
        if let Err(e) = staging.check_live(load_id) {
            let _ = std::fs::remove_file(self.dir.join(&info.file));
            return Err(e);
        }
        let entry = staging
            .staged
            .entry((load_id.to_string(), table.clone()))
            .or_insert_with(|| StagedTable {
                schema: schema.clone(),
                partitions: BTreeMap::new(),
            });
        if entry.schema.fields() != schema.fields() {
            return Err(StorageError::SchemaMismatch {
                table,
                reason: format!("load {load_id} staged partitions with different schemas"),
            });
        }
        entry.partitions.insert(info.partition, info.clone());
        Ok(info)
    }

    /// Removes everything staged under `load_id`; partitions of it still being written remove
    /// themselves when they finish. Returns whether anything was staged.
    pub fn abort_load(&self, load_id: &str) -> Result<bool> {
        validate_load_id(load_id)?;
        let mut staging = self.staging.lock().expect("staging lock");
        if !staging.aborted.iter().any(|a| a == load_id) {
            if staging.aborted.len() == MAX_ABORTED_LOADS {
                staging.aborted.pop_front();
            }
            staging.aborted.push_back(load_id.to_string());
        }
        let before = staging.staged.len();
        staging.staged.retain(|(load, _), _| load != load_id);
        let dir = self.dir.join(STAGING_DIR).join(load_id);
        let existed = dir.exists();
        if existed {
            std::fs::remove_dir_all(&dir).map_err(io_err(format!("removing {}", dir.display())))?;
        }
        Ok(existed || before != staging.staged.len())
    }

    /// Makes the partitions staged under `load_id` the live `tables` of this disk, all in one
    /// manifest replacement; the tables' previous partitions are removed afterwards.
    ///
    /// # Errors
    /// The load was aborted, or what is staged differs from `tables[i].partitions` (nothing
    /// changes); a file system error while moving (what moved is moved back).
    pub fn commit_load(&self, load_id: &str, tables: &[CommitTable]) -> Result<Vec<TableInfo>> {
        validate_load_id(load_id)?;
        let mut staging = self.staging.lock().expect("staging lock");
        staging.check_live(load_id)?;
        let mut new_tables = Vec::new();
        for t in tables {
            validate_table_name(&t.table)?;
            new_tables.extend(self.committed_table(&staging, load_id, t)?);
        }
        let moved = self.move_generations(load_id, &new_tables)?;
        let mut m = self.manifest.lock().expect("manifest lock");
        let mut next = m.clone();
        let replaced: Vec<TableInfo> = tables
            .iter()
            .filter_map(|t| next.tables.remove(&t.table))
            .collect();
        next.tables
            .extend(new_tables.iter().map(|t| (t.name.clone(), t.clone())));
        if let Err(e) = self.save_manifest(&next) {
            self.move_back(&moved);
            return Err(e);
        }
        *m = next;
        drop(m);
        staging.staged.retain(|(load, _), _| load != load_id);
        drop(staging);
        let _ = std::fs::remove_dir_all(self.dir.join(STAGING_DIR).join(load_id));
        replaced.iter().for_each(|t| self.remove_files(t));
        Ok(new_tables)
    }

    /// The table `t` becomes on this disk (None: no partition here), checked against what is staged.
    fn committed_table(
        &self,
        staging: &Staging,
        load_id: &str,
        t: &CommitTable,
    ) -> Result<Option<TableInfo>> {
        let staged = staging.staged.get(&(load_id.to_string(), t.table.clone()));
        let have: Vec<u32> = staged
            .map(|s| s.partitions.keys().copied().collect())
            .unwrap_or_default();
        let mut expected = t.partitions.clone();
        expected.sort_unstable();
        if have != expected {
            return Err(StorageError::Invalid(format!(
                "load {load_id}: table `{}` has partitions {have:?} staged on disk {}, the host expects {expected:?}",
                t.table,
                self.disk_id()
            )));
        }
        let Some(staged) = staged.filter(|s| !s.partitions.is_empty()) else {
            return Ok(None);
        };
        let live_dir = generation_dir(load_id, &t.table);
        let partitions = staged
            .partitions
            .values()
            .map(|p| PartitionInfo {
                file: format!("{live_dir}/part-{:05}.parquet", p.partition),
                ..p.clone()
            })
            .collect();
        let load = Some(LoadStamp {
            load_id: load_id.to_string(),
            disks: t.disks.clone(),
            copies: t.copies.clone(),
        });
        Ok(Some(TableInfo {
            name: t.table.clone(),
            schema: staged.schema.as_ref().clone(),
            partitions,
            load,
        }))
    }

    /// Renames each table's staged directory to its generation directory; on failure moves
    /// back what moved. Returns (from, to) pairs.
    fn move_generations(
        &self,
        load_id: &str,
        tables: &[TableInfo],
    ) -> Result<Vec<(PathBuf, PathBuf)>> {
        let mut moved = Vec::new();
        for t in tables {
            let from = self.dir.join(staged_dir(load_id, &t.name));
            let to = self.dir.join(generation_dir(load_id, &t.name));
            let result = to
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|_| std::fs::rename(&from, &to));
            if let Err(e) = result {
                self.move_back(&moved);
                return Err(StorageError::Io {
                    context: format!("moving {} to {}", from.display(), to.display()),
                    source: e,
                });
            }
            moved.push((from, to));
        }
        Ok(moved)
    }

    fn move_back(&self, moved: &[(PathBuf, PathBuf)]) {
        for (from, to) in moved {
            if let Err(e) = std::fs::rename(to, from) {
                tracing::error!(dir = %to.display(), "cannot move a generation back after a failed commit: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))]).unwrap()
    }

    fn stage(store: &DiskStore, load: &str, partition: u32, rows: i64) {
        store.begin_staging(load, "t").unwrap();
        let b = batch(rows);
        let mut w = store
            .create_staged_partition(load, "t", partition, b.schema(), 4096)
            .unwrap();
        w.write(&b).unwrap();
        store.finish_staged(load, w).unwrap();
    }

    fn commit(partitions: Vec<u32>) -> Vec<CommitTable> {
        vec![CommitTable {
            table: "t".into(),
            partitions,
            disks: vec![0],
            copies: vec![],
        }]
    }

    fn rows(store: &DiskStore) -> u64 {
        store
            .table("t")
            .map(|t| t.partitions.iter().map(|p| p.rows).sum())
            .unwrap_or(0)
    }

    #[test]
    fn staged_loads_are_invisible_until_committed_and_replace_the_table_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        stage(&store, "l1", 0, 100);
        assert!(
            store.table("t").is_err(),
            "a staged partition is not in the catalog"
        );
        store.commit_load("l1", &commit(vec![0])).unwrap();
        assert_eq!(rows(&store), 100);
        // A second load: the first stays readable while it is staged, a wrong commit changes nothing.
        stage(&store, "l2", 0, 7);
        stage(&store, "l2", 1, 8);
        assert_eq!(rows(&store), 100);
        let err = store
            .commit_load("l2", &commit(vec![0]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[0, 1] staged") && err.contains("expects [0]"),
            "{err}"
        );
        assert_eq!(rows(&store), 100);
        let old_file = dir
            .path()
            .join(&store.table("t").unwrap().partitions[0].file);
        store.commit_load("l2", &commit(vec![0, 1])).unwrap();
        assert_eq!(rows(&store), 15);
        assert_eq!(store.table("t").unwrap().load.unwrap().load_id, "l2");
        assert!(
            !old_file.exists(),
            "the previous generation's files are removed"
        );
        assert!(!dir.path().join(STAGING_DIR).join("l2").exists());
        // Reopened (a restart): the committed load is what the manifest lists.
        drop(store);
        let store = DiskStore::open(dir.path(), 0).unwrap();
        assert_eq!(rows(&store), 15);
    }

    #[test]
    fn aborted_and_interrupted_loads_leave_the_previous_state_and_nothing_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        stage(&store, "l1", 0, 100);
        store.commit_load("l1", &commit(vec![0])).unwrap();
        stage(&store, "l2", 0, 5);
        assert!(store.abort_load("l2").unwrap());
        assert!(
            store.commit_load("l2", &commit(vec![0])).is_err(),
            "an aborted load cannot commit"
        );
        // A partition of the aborted load that finishes late removes itself.
        let b = batch(3);
        assert!(
            store
                .create_staged_partition("l2", "t", 1, b.schema(), 4096)
                .is_err()
        );
        assert_eq!(rows(&store), 100);
        assert!(!dir.path().join(STAGING_DIR).join("l2").exists());
        // A load staged, then the process killed: a restart removes it, and a generation
        // directory moved but never listed (killed between rename and manifest) too.
        stage(&store, "l3", 0, 9);
        std::fs::create_dir_all(dir.path().join("tables/t/g-l4")).unwrap();
        drop(store);
        let store = DiskStore::open(dir.path(), 0).unwrap();
        assert_eq!(rows(&store), 100);
        assert!(!dir.path().join(STAGING_DIR).exists());
        assert!(!dir.path().join("tables/t/g-l4").exists());
        // The next load of the table removes what an earlier, uncommitted one staged.
        stage(&store, "l5", 0, 1);
        stage(&store, "l6", 0, 2);
        assert!(!dir.path().join(STAGING_DIR).join("l5").exists());
        assert!(store.commit_load("l5", &commit(vec![0])).is_err());
        assert!(validate_load_id("../x").is_err());
    }
}
