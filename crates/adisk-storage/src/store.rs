//! The data directory of one disk.
use crate::writer::PartitionWriter;
use crate::{Result, StorageError, io_err};
use adisk_core::protocol::{DiskCatalog, PartitionInfo, TableInfo};
use arrow::datatypes::{Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

const MANIFEST: &str = "manifest.json";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize, Default)]
struct Manifest {
    format_version: u32,
    tables: BTreeMap<String, TableInfo>,
}

/// One disk's data directory: manifest, partitions, plain files.
pub struct DiskStore {
    dir: PathBuf,
    disk_id: u32,
    manifest: Mutex<Manifest>,
    /// Files whose checksum was verified by this process: path → (len, mtime).
    verified: Mutex<HashMap<PathBuf, (u64, SystemTime)>>,
}

/// Checks a table name: 1–64 chars of `[a-z0-9_]`, starting with a letter.
pub fn validate_table_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StorageError::Invalid(format!(
            "invalid table name `{name}`: use 1-64 characters of a-z, 0-9 and _, starting with a letter"
        )))
    }
}

impl DiskStore {
    /// Opens (creating if needed) the data directory; removes leftovers of interrupted writes.
    pub fn open(dir: &Path, disk_id: u32) -> Result<Self> {
        for sub in ["tables", "files"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(io_err(format!("creating {}", dir.join(sub).display())))?;
        }
        let path = dir.join(MANIFEST);
        let manifest = match std::fs::read(&path) {
            Ok(bytes) => {
                let m: Manifest = serde_json::from_slice(&bytes)
                    .map_err(|e| StorageError::BadManifest { path: path.clone(), reason: e.to_string() })?;
                if m.format_version != FORMAT_VERSION {
                    return Err(StorageError::BadManifest {
                        path,
                        reason: format!("format version {} (this build reads {FORMAT_VERSION})", m.format_version),
                    });
                }
                m
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Manifest { format_version: FORMAT_VERSION, ..Default::default() },
            Err(e) => return Err(StorageError::Io { context: format!("reading {}", path.display()), source: e }),
        };
        let store = DiskStore { dir: dir.to_path_buf(), disk_id, manifest: Mutex::new(manifest), verified: Mutex::new(HashMap::new()) };
        store.remove_temporaries()?;
        Ok(store)
    }

    fn remove_temporaries(&self) -> Result<()> {
        let tables = self.dir.join("tables");
        let entries = std::fs::read_dir(&tables).map_err(io_err(format!("listing {}", tables.display())))?;
        for table_dir in entries.flatten() {
            if let Ok(files) = std::fs::read_dir(table_dir.path()) {
                for f in files.flatten() {
                    if f.path().extension().is_some_and(|e| e == "tmp") {
                        tracing::warn!(file = %f.path().display(), "removing leftover of an interrupted write");
                        let _ = std::fs::remove_file(f.path());
                    }
                }
            }
        }
        Ok(())
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The disk number.
    pub fn disk_id(&self) -> u32 {
        self.disk_id
    }

    /// Directory of plain files (`Source::File`).
    pub fn files_dir(&self) -> PathBuf {
        self.dir.join("files")
    }

    /// All local tables.
    pub fn catalog(&self) -> DiskCatalog {
        let m = self.manifest.lock().expect("manifest lock");
        DiskCatalog { disk_id: self.disk_id, tables: m.tables.values().cloned().collect() }
    }

    /// One local table.
    pub fn table(&self, name: &str) -> Result<TableInfo> {
        let m = self.manifest.lock().expect("manifest lock");
        m.tables.get(name).cloned().ok_or_else(|| StorageError::UnknownTable(name.to_string()))
    }

    /// Starts writing partition `partition` of `table`.
    pub fn create_partition(&self, table: &str, partition: u32, schema: SchemaRef, row_group_rows: usize) -> Result<PartitionWriter> {
        validate_table_name(table)?;
        if let Ok(existing) = self.table(table) {
            check_same_schema(table, &existing.schema, &schema)?;
        }
        let table_dir = self.dir.join("tables").join(table);
        std::fs::create_dir_all(&table_dir).map_err(io_err(format!("creating {}", table_dir.display())))?;
        let relative = format!("tables/{table}/part-{partition:05}.parquet");
        let final_path = self.dir.join(&relative);
        let tmp_path = final_path.with_extension("parquet.tmp");
        PartitionWriter::create(table, partition, tmp_path, final_path, relative, schema, row_group_rows)
    }

    /// Finishes a partition and lists it in the manifest (replacing one with the same number).
    pub fn commit_partition(&self, writer: PartitionWriter) -> Result<PartitionInfo> {
        let table = writer.table.clone();
        let schema = writer.schema.as_ref().clone();
        let info = writer.finish()?;
        let mut m = self.manifest.lock().expect("manifest lock");
        let entry = m.tables.entry(table.clone()).or_insert_with(|| TableInfo { name: table.clone(), schema: schema.clone(), partitions: vec![] });
        check_same_schema(&table, &entry.schema, &schema)?;
        entry.partitions.retain(|p| p.partition != info.partition);
        entry.partitions.push(info.clone());
        entry.partitions.sort_by_key(|p| p.partition);
        self.save_manifest(&m)?;
        Ok(info)
    }

    /// Removes a table's local partitions.
    pub fn drop_table(&self, table: &str) -> Result<bool> {
        let mut m = self.manifest.lock().expect("manifest lock");
        let Some(removed) = m.tables.remove(table) else { return Ok(false) };
        self.save_manifest(&m)?;
        for p in removed.partitions {
            let _ = std::fs::remove_file(self.dir.join(&p.file));
        }
        let _ = std::fs::remove_dir(self.dir.join("tables").join(table));
        Ok(true)
    }

    fn save_manifest(&self, m: &Manifest) -> Result<()> {
        let path = self.dir.join(MANIFEST);
        let tmp = self.dir.join("manifest.json.tmp");
        let bytes = serde_json::to_vec_pretty(m).expect("manifest serializes");
        std::fs::write(&tmp, bytes).map_err(io_err(format!("writing {}", tmp.display())))?;
        File::open(&tmp).and_then(|f| f.sync_all()).map_err(io_err(format!("syncing {}", tmp.display())))?;
        std::fs::rename(&tmp, &path).map_err(io_err(format!("renaming {} into place", tmp.display())))
    }

    /// Opens a partition file for reading, verifying size and CRC-32 against the manifest the
    /// first time this process opens it (and again whenever its size or mtime change).
    pub fn open_partition(&self, info: &PartitionInfo) -> Result<File> {
        let path = self.dir.join(&info.file);
        let mut file = File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
        let meta = file.metadata().map_err(io_err(format!("stat {}", path.display())))?;
        let stamp = (meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH));
        if self.verified.lock().expect("verified lock").get(&path) == Some(&stamp) {
            return Ok(file);
        }
        if meta.len() != info.bytes {
            return Err(StorageError::Corrupt { path, reason: format!("size {} but the manifest says {}", meta.len(), info.bytes) });
        }
        let (crc, _) = crate::reader::file_crc32(&mut file).map_err(io_err(format!("checksumming {}", path.display())))?;
        if crc != info.crc32 {
            return Err(StorageError::Corrupt { path, reason: format!("CRC-32 {crc:08x} but the manifest says {:08x}", info.crc32) });
        }
        self.verified.lock().expect("verified lock").insert(path, stamp);
        Ok(file)
    }

    /// Resolves a path under `files/`, refusing anything that escapes it.
    pub fn file_path(&self, relative: &str) -> Result<PathBuf> {
        let rel = Path::new(relative);
        if rel.is_absolute() || rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return Err(StorageError::Invalid(format!("file path `{relative}` must be relative and stay under files/")));
        }
        Ok(self.files_dir().join(rel))
    }
}

fn check_same_schema(table: &str, existing: &Schema, new: &Schema) -> Result<()> {
    if existing.fields() != new.fields() {
        return Err(StorageError::SchemaMismatch {
            table: table.to_string(),
            reason: format!("existing columns {:?}, new columns {:?}", field_list(existing), field_list(new)),
        });
    }
    Ok(())
}

fn field_list(s: &Schema) -> Vec<String> {
    s.fields().iter().map(|f| format!("{}: {}", f.name(), f.data_type())).collect()
}

/// Shared handle.
pub type SharedStore = Arc<DiskStore>;

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field};

    fn batch(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))]).unwrap()
    }

    #[test]
    fn write_commit_reopen_verify_and_detect_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let b = batch(10_000);
        let mut w = store.create_partition("t", 3, b.schema(), 4096).unwrap();
        w.write(&b).unwrap();
        let info = store.commit_partition(w).unwrap();
        assert_eq!(info.rows, 10_000);
        assert_eq!(info.row_groups, 3);
        drop(store);
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let t = store.table("t").unwrap();
        store.open_partition(&t.partitions[0]).unwrap();
        // Flip a byte in the middle; a fresh process (new store) must notice.
        let path = dir.path().join(&info.file);
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let err = store.open_partition(&t.partitions[0]).unwrap_err();
        assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn abandoned_writes_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let b = batch(10);
        let mut w = store.create_partition("t", 0, b.schema(), 4096).unwrap();
        w.write(&b).unwrap();
        drop(w);
        assert!(store.table("t").is_err());
        assert_eq!(std::fs::read_dir(dir.path().join("tables/t")).unwrap().count(), 0);
        assert!(validate_table_name("../x").is_err());
        assert!(store.file_path("../etc/passwd").is_err());
    }
}
