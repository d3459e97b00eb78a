//! Copies of partitions between disks: what `adisk repair` and `adisk scrub` use to bring a
//! disk back to the state its tables' load stamps say it holds.
//!
//! ```text
//!   source disk                                  repairing disk
//!   ───────────                                  ──────────────
//!   read_copy(table, partition, load)            tables/<t>/g-<load>/part-NNNNN.parquet.tmp
//!     whole file, CRC-32 checked as read  ──►      written as it arrives, CRC-32 and size
//!                                                  checked against the source's manifest entry
//!                                                install_copy: fsync, rename, one manifest
//!                                                  replacement (the commit point)
//! ```
//!
//! A copy is installed only under the load that wrote it: into the table's entry when this disk
//! holds the same load, as a fresh entry when it holds none or an older one (whose files are
//! removed after the manifest is replaced), and never over a newer load (the copy is dropped).
//! A crash before the manifest replacement leaves a `*.tmp` or an unlisted generation directory,
//! which [`DiskStore::open`] removes.
use crate::store::{DiskStore, validate_table_name};
use crate::{Result, StorageError, io_err};
use adisk_core::protocol::{LoadStamp, PartitionInfo, TableInfo};
use arrow::datatypes::Schema;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

/// What [`DiskStore::install_copy`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Installed {
    /// The partition is now listed under the copy's load.
    Listed,
    /// This disk holds a newer load of the table: the copy was dropped.
    Superseded {
        /// The load this disk holds.
        held: String,
    },
}

/// A partition being received from another disk: written to a temporary file and checksummed
/// as it arrives.
pub struct IncomingCopy {
    table: String,
    info: PartitionInfo,
    tmp: PathBuf,
    file: File,
    crc: crc32fast::Hasher,
    written: u64,
}

impl IncomingCopy {
    /// Appends the next bytes of the file.
    ///
    /// # Errors
    /// More bytes than the source's manifest entry says the file has; a write error.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if self.written + bytes.len() as u64 > self.info.bytes {
            return Err(StorageError::Corrupt {
                path: self.tmp.clone(),
                reason: format!(
                    "copy of {} partition {} is longer than the {} bytes its manifest entry says",
                    self.table, self.info.partition, self.info.bytes
                ),
            });
        }
        self.file
            .write_all(bytes)
            .map_err(io_err(format!("writing {}", self.tmp.display())))?;
        self.crc.update(bytes);
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Bytes received so far.
    pub fn written(&self) -> u64 {
        self.written
    }
}

impl Drop for IncomingCopy {
    fn drop(&mut self) {
        // Removed unless installed (install renames it away first).
        let _ = std::fs::remove_file(&self.tmp);
    }
}

impl DiskStore {
    /// Opens this disk's copy of `table`'s partition `partition` as written by load `load_id`,
    /// for sending to another disk: its manifest entry, the table's schema and stamp, and the
    /// file.
    ///
    /// # Errors
    /// [`StorageError::UnknownTable`] when this disk holds no such copy (another load, no
    /// such partition); an I/O error opening it.
    pub fn open_copy(
        &self,
        table: &str,
        partition: u32,
        load_id: &str,
    ) -> Result<(TableInfo, File)> {
        validate_table_name(table)?;
        let t = self.table(table)?;
        let same_load = t.load.as_ref().is_some_and(|s| s.load_id == load_id);
        let info = t
            .partitions
            .iter()
            .find(|p| p.partition == partition)
            .filter(|_| same_load)
            .cloned();
        let Some(info) = info else {
            let held = t
                .load
                .as_ref()
                .map_or("no load id".to_string(), |s| format!("load {}", s.load_id));
            return Err(StorageError::UnknownTable(format!(
                "{table} partition {partition} of load {load_id} (disk {} holds {held}, partitions {:?})",
                self.disk_id(),
                t.partitions.iter().map(|p| p.partition).collect::<Vec<_>>()
            )));
        };
        let path = self.dir.join(&info.file);
        let file = File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
        Ok((
            TableInfo {
                partitions: vec![info],
                ..t
            },
            file,
        ))
    }

    /// Starts receiving a copy of `info` (the source's manifest entry) of `table` under `stamp`.
    pub fn begin_copy(
        &self,
        table: &str,
        stamp: &LoadStamp,
        info: &PartitionInfo,
    ) -> Result<IncomingCopy> {
        validate_table_name(table)?;
        crate::staging::validate_load_id(&stamp.load_id)?;
        let dir = self.dir.join(generation_dir(table, &stamp.load_id));
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let tmp = dir.join(format!("part-{:05}.parquet.tmp", info.partition));
        let file = File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
        Ok(IncomingCopy {
            table: table.to_string(),
            info: info.clone(),
            tmp,
            file,
            crc: crc32fast::Hasher::new(),
            written: 0,
        })
    }

    /// Checks a received copy (size and CRC-32 against the source's manifest entry), moves it
    /// into place and lists it under its load in one manifest replacement.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] when the copy does not match its entry (nothing changes);
    /// [`StorageError::SchemaMismatch`] when this disk holds the same load with another schema.
    pub fn install_copy(
        &self,
        copy: IncomingCopy,
        schema: &Schema,
        stamp: &LoadStamp,
    ) -> Result<Installed> {
        let crc = copy.crc.clone().finalize();
        if copy.written != copy.info.bytes || crc != copy.info.crc32 {
            return Err(StorageError::Corrupt {
                path: copy.tmp.clone(),
                reason: format!(
                    "copy has {} bytes, CRC-32 {crc:08x}; the source's manifest says {} bytes, {:08x}",
                    copy.written, copy.info.bytes, copy.info.crc32
                ),
            });
        }
        copy.file
            .sync_all()
            .map_err(io_err(format!("syncing {}", copy.tmp.display())))?;
        let relative = format!(
            "{}/part-{:05}.parquet",
            generation_dir(&copy.table, &stamp.load_id),
            copy.info.partition
        );
        let info = PartitionInfo {
            file: relative.clone(),
            ..copy.info.clone()
        };
        let mut m = self.manifest.lock().expect("manifest lock");
        let current = m.tables.get(&copy.table).cloned();
        if let Some(held) = current
            .as_ref()
            .and_then(|t| t.load.as_ref())
            .filter(|held| held.load_id > stamp.load_id)
        {
            return Ok(Installed::Superseded {
                held: held.load_id.clone(),
            });
        }
        let same_load = current
            .as_ref()
            .is_some_and(|t| t.load.as_ref().map(|s| &s.load_id) == Some(&stamp.load_id));
        let mut next = m.clone();
        let entry = if same_load {
            let t = next.tables.get_mut(&copy.table).expect("current entry");
            if t.schema.fields() != schema.fields() {
                return Err(StorageError::SchemaMismatch {
                    table: copy.table.clone(),
                    reason: format!(
                        "the copy of load {} has another schema than this disk's",
                        stamp.load_id
                    ),
                });
            }
            t.partitions.retain(|p| p.partition != info.partition);
            t
        } else {
            next.tables.insert(
                copy.table.clone(),
                TableInfo {
                    name: copy.table.clone(),
                    schema: schema.clone(),
                    partitions: vec![],
                    load: Some(stamp.clone()),
                },
            );
            next.tables.get_mut(&copy.table).expect("inserted")
        };
        entry.partitions.push(info);
        entry.partitions.sort_by_key(|p| p.partition);
        let final_path = self.dir.join(&relative);
        std::fs::rename(&copy.tmp, &final_path).map_err(io_err(format!(
            "renaming {} into place",
            copy.tmp.display()
        )))?;
        self.forget_verified(&final_path);
        self.save_manifest(&next)?;
        *m = next;
        drop(m);
        if let Some(old) = current.filter(|_| !same_load) {
            self.remove_files(&old);
        }
        Ok(Installed::Listed)
    }

    /// Size and whole-file CRC-32 of `table`'s local partition `partition` against the
    /// manifest, reading every byte (nothing verified earlier is trusted).
    ///
    /// # Errors
    /// What does not match, or why it cannot be read.
    pub fn verify_partition(&self, info: &PartitionInfo) -> std::result::Result<(), String> {
        self.check_whole(info)
    }

    /// Drops `table` here if this disk holds a load of it older than `load_id` (a copy that
    /// missed a later load and holds none of its partitions). Returns whether it did.
    pub fn drop_if_older(&self, table: &str, load_id: &str) -> Result<bool> {
        let older = self
            .table(table)
            .ok()
            .and_then(|t| t.load)
            .is_some_and(|s| s.load_id.as_str() < load_id);
        if older {
            self.drop_table(table)
        } else {
            Ok(false)
        }
    }
}

fn generation_dir(table: &str, load_id: &str) -> String {
    format!(
        "tables/{table}/{}{load_id}",
        crate::staged::GENERATION_PREFIX
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use adisk_core::protocol::CommitTable;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field};
    use std::io::Read;
    use std::sync::Arc;

    fn batch(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))]).unwrap()
    }

    /// A disk holding partitions `parts` of `t` under load `load` (copies on disks 0 and 1).
    fn loaded(load: &str, parts: &[u32], rows: i64) -> (tempfile::TempDir, DiskStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        store.begin_staging(load, "t").unwrap();
        for p in parts {
            let b = batch(rows + i64::from(*p));
            let mut w = store
                .create_staged_partition(load, "t", *p, b.schema(), 4096)
                .unwrap();
            w.write(&b).unwrap();
            store.finish_staged(load, w).unwrap();
        }
        let copies = parts
            .iter()
            .map(|p| adisk_core::protocol::PartitionCopies {
                partition: *p,
                disks: vec![0, 1],
            })
            .collect();
        store
            .commit_load(
                load,
                &[CommitTable {
                    table: "t".into(),
                    partitions: parts.to_vec(),
                    disks: vec![0, 1],
                    copies,
                }],
            )
            .unwrap();
        (dir, store)
    }

    /// Copies partition `p` of `from` into `to` the way a repair does.
    fn copy(from: &DiskStore, to: &DiskStore, p: u32, load: &str) -> Result<Installed> {
        let (table, mut file) = from.open_copy("t", p, load)?;
        let mut incoming =
            to.begin_copy("t", table.load.as_ref().unwrap(), &table.partitions[0])?;
        let mut buf = vec![0; 1000];
        loop {
            let n = file.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            incoming.write(&buf[..n])?;
        }
        to.install_copy(incoming, &table.schema, table.load.as_ref().unwrap())
    }

    fn rows(store: &DiskStore) -> Vec<(u32, u64)> {
        store
            .table("t")
            .map(|t| t.partitions.iter().map(|p| (p.partition, p.rows)).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_copy_restores_a_wiped_disk_and_replaces_a_corrupt_partition() {
        let (_a, source) = loaded("l1", &[0, 1], 100);
        let empty = tempfile::tempdir().unwrap();
        let target = DiskStore::open(empty.path(), 1).unwrap();
        assert_eq!(copy(&source, &target, 1, "l1").unwrap(), Installed::Listed);
        assert_eq!(copy(&source, &target, 0, "l1").unwrap(), Installed::Listed);
        assert_eq!(rows(&target), vec![(0, 100), (1, 101)]);
        assert_eq!(target.table("t").unwrap().load.unwrap().load_id, "l1");
        let info = target.table("t").unwrap().partitions[1].clone();
        target.verify_partition(&info).unwrap();
        // Corrupt it, then copy it again: the same entry, good bytes.
        let path = empty.path().join(&info.file);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(target.verify_partition(&info).is_err());
        copy(&source, &target, 1, "l1").unwrap();
        target
            .verify_partition(&target.table("t").unwrap().partitions[1])
            .unwrap();
        assert_eq!(rows(&target), vec![(0, 100), (1, 101)]);
        // Survives a restart; no temporary file left.
        drop(target);
        let target = DiskStore::open(empty.path(), 1).unwrap();
        assert_eq!(rows(&target), vec![(0, 100), (1, 101)]);
        let left: Vec<_> = walk(empty.path())
            .into_iter()
            .filter(|p| p.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn copies_replace_older_loads_never_newer_ones_and_bad_bytes_change_nothing() {
        let (_a, source) = loaded("l2", &[0], 100);
        // An older load here: replaced by the copy, its files removed.
        let (old_dir, older) = loaded("l1", &[0, 1], 7);
        let old_file = old_dir
            .path()
            .join(&older.table("t").unwrap().partitions[0].file);
        copy(&source, &older, 0, "l2").unwrap();
        assert_eq!(rows(&older), vec![(0, 100)]);
        assert_eq!(older.table("t").unwrap().load.unwrap().load_id, "l2");
        assert!(!old_file.exists());
        // A newer load here: the copy is dropped.
        let (_n, newer) = loaded("l3", &[0], 5);
        assert_eq!(
            copy(&source, &newer, 0, "l2").unwrap(),
            Installed::Superseded { held: "l3".into() }
        );
        assert_eq!(rows(&newer), vec![(0, 5)]);
        // Wrong bytes, or too many: refused, nothing listed, nothing left.
        let empty = tempfile::tempdir().unwrap();
        let target = DiskStore::open(empty.path(), 1).unwrap();
        let (table, _) = source.open_copy("t", 0, "l2").unwrap();
        let stamp = table.load.clone().unwrap();
        let mut incoming = target
            .begin_copy("t", &stamp, &table.partitions[0])
            .unwrap();
        incoming
            .write(&vec![0u8; table.partitions[0].bytes as usize])
            .unwrap();
        assert!(matches!(
            target.install_copy(incoming, &table.schema, &stamp),
            Err(StorageError::Corrupt { .. })
        ));
        let mut incoming = target
            .begin_copy("t", &stamp, &table.partitions[0])
            .unwrap();
        assert!(
            incoming
                .write(&vec![0u8; table.partitions[0].bytes as usize + 1])
                .is_err()
        );
        drop(incoming);
        assert!(target.table("t").is_err());
        assert!(
            walk(empty.path())
                .iter()
                .all(|p| !p.to_string_lossy().ends_with(".tmp"))
        );
        // Only the load a disk holds can be copied from it.
        assert!(matches!(
            source.open_copy("t", 0, "l1"),
            Err(StorageError::UnknownTable(_))
        ));
        assert!(matches!(
            source.open_copy("t", 5, "l2"),
            Err(StorageError::UnknownTable(_))
        ));
        // A table that missed a later load is dropped, a current one is kept.
        assert!(older.drop_if_older("t", "l9").unwrap());
        assert!(!newer.drop_if_older("t", "l1").unwrap());
    }

    fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
        let mut out = vec![];
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()))
            } else {
                out.push(e.path())
            }
        }
        out
    }
}
