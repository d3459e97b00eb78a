//! The data directory of one disk.
use crate::integrity::PartitionReader;
use crate::writer::PartitionWriter;
use crate::{Result, StorageError, io_err};
use adisk_core::config::Compression;
use adisk_core::protocol::{CatalogRequest, DiskCatalog, PartitionInfo, TableInfo};
use arrow::datatypes::{Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

const MANIFEST: &str = "manifest.json";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize, Default, Clone)]
pub(crate) struct Manifest {
    format_version: u32,
    pub(crate) tables: BTreeMap<String, TableInfo>,
}

/// One disk's data directory: manifest, partitions, staged loads, plain files.
pub struct DiskStore {
    pub(crate) dir: PathBuf,
    disk_id: u32,
    pub(crate) manifest: Mutex<Manifest>,
    /// Files whose whole-file CRC-32 this process verified: path → (len, mtime).
    verified: Mutex<HashMap<PathBuf, (u64, SystemTime)>>,
    /// Partitions staged by loads not yet committed (see [`crate::staging`]).
    pub(crate) staging: Mutex<crate::staged::Staging>,
    /// Codec of the pages this store writes (reads take whatever each file says).
    compression: Compression,
    /// Counts the manifest's changes since this process opened the store (see
    /// [`DiskStore::catalog`]'s version).
    generation: std::sync::atomic::AtomicU64,
    /// Tells this opening of the store from every other (a restarted disk starts counting
    /// its changes from 0 again).
    opened: u64,
}

/// A number telling one opening of a store from another: the clock's nanoseconds mixed with
/// the process id and a count of this process's openings (only compared for equality).
fn opening_nonce() -> u64 {
    static OPENINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = OPENINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    adisk_core::hash::mix64(
        nanos ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
    )
}

/// Checks a table name: 1–64 chars of `[a-z0-9_]`, starting with a letter.
pub fn validate_table_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StorageError::Invalid(format!(
            "invalid table name `{name}`: use 1-64 characters of a-z, 0-9 and _, starting with a letter"
        )))
    }
}

impl DiskStore {
    /// Opens (creating if needed) the data directory; removes leftovers of interrupted writes
    /// and of loads that were never committed.
    ///
    /// # Errors
    /// [`StorageError::BadManifest`] if the manifest does not parse or does not match its
    /// checksum.
    pub fn open(dir: &Path, disk_id: u32) -> Result<Self> {
        for sub in ["tables", "files"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(io_err(format!("creating {}", dir.join(sub).display())))?;
        }
        let path = dir.join(MANIFEST);
        let manifest = match std::fs::read(&path) {
            Ok(bytes) => decode_manifest(&path, &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Manifest {
                format_version: FORMAT_VERSION,
                ..Default::default()
            },
            Err(e) => {
                return Err(StorageError::Io {
                    context: format!("reading {}", path.display()),
                    source: e,
                });
            }
        };
        let store = DiskStore {
            dir: dir.to_path_buf(),
            disk_id,
            manifest: Mutex::new(manifest),
            verified: Mutex::default(),
            staging: Mutex::default(),
            compression: Compression::default(),
            generation: std::sync::atomic::AtomicU64::new(0),
            opened: opening_nonce(),
        };
        store.remove_temporaries()?;
        Ok(store)
    }

    /// The store writing its pages with `compression` from now on (files already written keep
    /// their codec: every file names its own).
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Codec of the pages this store writes.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Removes `*.tmp` files, everything staged (`staging/`), and generation directories
    /// (`tables/<t>/g-<load>/`) the manifest does not list: what interrupted writes, loads and
    /// commits leave.
    fn remove_temporaries(&self) -> Result<()> {
        let staging = self.dir.join(crate::staged::STAGING_DIR);
        if staging.exists() {
            tracing::warn!(dir = %staging.display(), "removing partitions of loads that were never committed");
            std::fs::remove_dir_all(&staging)
                .map_err(io_err(format!("removing {}", staging.display())))?;
        }
        let listed: std::collections::HashSet<PathBuf> = {
            let m = self.manifest.lock().expect("manifest lock");
            m.tables
                .values()
                .flat_map(|t| &t.partitions)
                .filter_map(|p| Path::new(&p.file).parent().map(|d| self.dir.join(d)))
                .collect()
        };
        let tables = self.dir.join("tables");
        let entries =
            std::fs::read_dir(&tables).map_err(io_err(format!("listing {}", tables.display())))?;
        for table_dir in entries.flatten() {
            for f in std::fs::read_dir(table_dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = f.path();
                let generation = f
                    .file_name()
                    .to_string_lossy()
                    .starts_with(crate::staged::GENERATION_PREFIX)
                    && path.is_dir();
                if generation && !listed.contains(&path) {
                    tracing::warn!(dir = %path.display(), "removing a generation no manifest lists (interrupted commit)");
                    let _ = std::fs::remove_dir_all(&path);
                } else if path.extension().is_some_and(|e| e == "tmp") {
                    tracing::warn!(file = %path.display(), "removing leftover of an interrupted write");
                    let _ = std::fs::remove_file(&path);
                }
            }
            let _ = std::fs::remove_dir(table_dir.path()); // only if empty
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
        DiskCatalog {
            disk_id: self.disk_id,
            tables: m.tables.values().cloned().collect(),
            version: self.catalog_version(),
            unchanged: false,
        }
    }

    /// The reply to a host's [`CatalogRequest`]: the tables are copied only when the catalog
    /// changed since the version it knows.
    pub fn catalog_for(&self, request: &CatalogRequest) -> DiskCatalog {
        let m = self.manifest.lock().expect("manifest lock");
        let version = self.catalog_version();
        let tables = match request.known.as_deref() == Some(version.as_str()) {
            true => vec![],
            false => m.tables.values().cloned().collect(),
        };
        drop(m);
        DiskCatalog {
            disk_id: self.disk_id,
            tables,
            version,
            unchanged: false,
        }
        .answering(request)
    }

    /// The catalog's version: the same string as long as the manifest is unchanged and this
    /// process serves it (read under the manifest's lock, which every change holds).
    fn catalog_version(&self) -> String {
        let g = self.generation.load(std::sync::atomic::Ordering::SeqCst);
        format!("{:016x}-{g}", self.opened)
    }

    /// One local table.
    pub fn table(&self, name: &str) -> Result<TableInfo> {
        let m = self.manifest.lock().expect("manifest lock");
        m.tables
            .get(name)
            .cloned()
            .ok_or_else(|| StorageError::UnknownTable(name.to_string()))
    }

    /// Starts writing partition `partition` of `table` (a job's named result: listed by
    /// [`DiskStore::commit_partition`]; loads are staged, see [`crate::staging`]).
    pub fn create_partition(
        &self,
        table: &str,
        partition: u32,
        schema: SchemaRef,
        row_group_rows: usize,
    ) -> Result<PartitionWriter> {
        validate_table_name(table)?;
        if let Ok(existing) = self.table(table) {
            check_same_schema(table, &existing.schema, &schema)?;
        }
        self.writer_in(
            &format!("tables/{table}"),
            table,
            partition,
            schema,
            row_group_rows,
        )
    }

    /// A partition writer whose file is `<relative_dir>/part-NNNNN.parquet`.
    pub(crate) fn writer_in(
        &self,
        relative_dir: &str,
        table: &str,
        partition: u32,
        schema: SchemaRef,
        row_group_rows: usize,
    ) -> Result<PartitionWriter> {
        let dir = self.dir.join(relative_dir);
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let relative = format!("{relative_dir}/part-{partition:05}.parquet");
        let final_path = self.dir.join(&relative);
        let tmp_path = final_path.with_extension("parquet.tmp");
        PartitionWriter::create(
            table,
            partition,
            tmp_path,
            final_path,
            relative,
            schema,
            crate::writer::writer_properties(row_group_rows, self.compression),
        )
    }

    /// Finishes a partition and lists it in the manifest (replacing one with the same number).
    pub fn commit_partition(&self, writer: PartitionWriter) -> Result<PartitionInfo> {
        let table = writer.table.clone();
        let schema = writer.schema.as_ref().clone();
        let info = writer.finish()?;
        let mut m = self.manifest.lock().expect("manifest lock");
        let entry = m.tables.entry(table.clone()).or_insert_with(|| TableInfo {
            name: table.clone(),
            schema: schema.clone(),
            partitions: vec![],
            load: None,
        });
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
        let Some(removed) = m.tables.remove(table) else {
            return Ok(false);
        };
        self.save_manifest(&m)?;
        drop(m);
        self.remove_files(&removed);
        Ok(true)
    }

    /// Removes the files of a table no longer listed (and their directories, once empty).
    pub(crate) fn remove_files(&self, table: &TableInfo) {
        for p in &table.partitions {
            let path = self.dir.join(&p.file);
            let _ = std::fs::remove_file(&path);
            if let Some(parent) = path.parent().filter(|d| {
                d.file_name().is_some_and(|n| {
                    n.to_string_lossy()
                        .starts_with(crate::staged::GENERATION_PREFIX)
                })
            }) {
                let _ = std::fs::remove_dir(parent);
            }
        }
        let _ = std::fs::remove_dir(self.dir.join("tables").join(&table.name));
    }

    /// Replaces the manifest: written to a temporary file with its checksum, synced, renamed
    /// into place, and the directory synced (the commit point of every load).
    pub(crate) fn save_manifest(&self, m: &Manifest) -> Result<()> {
        // Counted before writing: a change that fails halfway still gives a new version.
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = self.dir.join(MANIFEST);
        let tmp = self.dir.join("manifest.json.tmp");
        std::fs::write(&tmp, encode_manifest(m))
            .map_err(io_err(format!("writing {}", tmp.display())))?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io_err(format!("syncing {}", tmp.display())))?;
        std::fs::rename(&tmp, &path)
            .map_err(io_err(format!("renaming {} into place", tmp.display())))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(format!("syncing {}", self.dir.display())))
    }

    /// Opens a partition file, checking its size against the manifest and its whole-file
    /// CRC-32: the first time this process opens it (and again whenever its size or mtime
    /// change) for a partition with per-read checksums, which are verified as it is read
    /// ([`DiskStore::partition_reader`]); at every open for one written before they existed.
    pub fn open_partition(&self, info: &PartitionInfo) -> Result<File> {
        let path = self.dir.join(&info.file);
        let mut file = File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
        let meta = file
            .metadata()
            .map_err(io_err(format!("stat {}", path.display())))?;
        let stamp = (
            meta.len(),
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        );
        let cached = info.checksums.is_some()
            && self.verified.lock().expect("verified lock").get(&path) == Some(&stamp);
        if cached {
            return Ok(file);
        }
        if meta.len() != info.bytes {
            return Err(StorageError::Corrupt {
                path,
                reason: format!("size {} but the manifest says {}", meta.len(), info.bytes),
            });
        }
        let (crc, _) = crate::reader::file_crc32(&mut file)
            .map_err(io_err(format!("checksumming {}", path.display())))?;
        if crc != info.crc32 {
            return Err(StorageError::Corrupt {
                path,
                reason: format!("CRC-32 {crc:08x} but the manifest says {:08x}", info.crc32),
            });
        }
        self.verified
            .lock()
            .expect("verified lock")
            .insert(path, stamp);
        Ok(file)
    }

    /// Reads every byte of every local partition (never trusting what was verified before) and
    /// checks size and CRC-32 against the manifest.
    pub fn scrub(&self) -> adisk_core::protocol::ScrubReport {
        let mut report = adisk_core::protocol::ScrubReport {
            disk_id: self.disk_id(),
            ..Default::default()
        };
        for table in self.catalog().tables {
            for info in &table.partitions {
                report.partitions += 1;
                report.bytes += info.bytes;
                if let Err(reason) = self.check_whole(info) {
                    report.corrupt.push(adisk_core::protocol::CorruptPartition {
                        table: table.name.clone(),
                        partition: info.partition,
                        file: info.file.clone(),
                        reason,
                    });
                }
            }
        }
        report
    }

    /// Forgets that this process verified `path` whole (it was replaced).
    pub(crate) fn forget_verified(&self, path: &Path) {
        self.verified.lock().expect("verified lock").remove(path);
    }

    /// Size and whole-file CRC-32 of a partition against the manifest.
    pub(crate) fn check_whole(&self, info: &PartitionInfo) -> std::result::Result<(), String> {
        let path = self.dir.join(&info.file);
        let mut file = File::open(&path).map_err(|e| format!("cannot open: {e}"))?;
        let (crc, len) =
            crate::reader::file_crc32(&mut file).map_err(|e| format!("cannot read: {e}"))?;
        if len != info.bytes {
            return Err(format!("size {len} but the manifest says {}", info.bytes));
        }
        if crc != info.crc32 {
            self.verified.lock().expect("verified lock").remove(&path);
            return Err(format!(
                "CRC-32 {crc:08x} but the manifest says {:08x}",
                info.crc32
            ));
        }
        Ok(())
    }

    /// Opens a partition for a scan: every byte decoded through the returned reader is
    /// verified against the manifest's checksums when it is read; reads are counted in
    /// `bytes_read`.
    pub fn partition_reader(
        &self,
        info: &PartitionInfo,
        bytes_read: Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<PartitionReader> {
        let path = self.dir.join(&info.file);
        let file = self.open_partition(info)?;
        let counting = crate::reader::CountingFile::new(file, bytes_read)
            .map_err(io_err(format!("opening {}", path.display())))?;
        Ok(PartitionReader::new(counting, path, info.checksums.clone()))
    }

    /// A partition reader that verifies nothing (not even on first open): only for measuring
    /// what verification costs (`adisk bench checksum`); scans never use it.
    pub fn partition_reader_unverified(
        &self,
        info: &PartitionInfo,
        bytes_read: Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<PartitionReader> {
        let path = self.dir.join(&info.file);
        let file = File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
        let counting = crate::reader::CountingFile::new(file, bytes_read)
            .map_err(io_err(format!("opening {}", path.display())))?;
        Ok(PartitionReader::new(counting, path, None))
    }

    /// Resolves a path under `files/`, refusing anything that escapes it.
    pub fn file_path(&self, relative: &str) -> Result<PathBuf> {
        let rel = Path::new(relative);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(StorageError::Invalid(format!(
                "file path `{relative}` must be relative and stay under files/"
            )));
        }
        Ok(self.files_dir().join(rel))
    }
}

/// The manifest as written: its tables and a CRC-32 of their canonical JSON.
fn encode_manifest(m: &Manifest) -> Vec<u8> {
    let tables = serde_json::to_value(&m.tables).expect("manifest serializes");
    let crc32 = crc32fast::hash(&serde_json::to_vec(&tables).expect("manifest serializes"));
    let doc =
        serde_json::json!({ "format_version": m.format_version, "crc32": crc32, "tables": tables });
    serde_json::to_vec_pretty(&doc).expect("manifest serializes")
}

/// Parses a manifest and checks its CRC-32 (a manifest written before it had one is accepted).
fn decode_manifest(path: &Path, bytes: &[u8]) -> Result<Manifest> {
    let bad = |reason: String| StorageError::BadManifest {
        path: path.to_path_buf(),
        reason,
    };
    let doc: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let tables = doc.get("tables").ok_or_else(|| bad("no `tables`".into()))?;
    match doc.get("crc32").map(|c| c.as_u64()) {
        Some(Some(expected)) => {
            let crc =
                crc32fast::hash(&serde_json::to_vec(tables).expect("a parsed value serializes"));
            if u64::from(crc) != expected {
                return Err(bad(format!(
                    "CRC-32 {crc:08x} but the manifest says {expected:08x}"
                )));
            }
        }
        Some(None) => return Err(bad("`crc32` is not a number".into())),
        None => {
            tracing::warn!(path = %path.display(), "manifest without a checksum (written by an older version)")
        }
    }
    let m: Manifest = serde_json::from_value(doc).map_err(|e| bad(e.to_string()))?;
    if m.format_version != FORMAT_VERSION {
        return Err(bad(format!(
            "format version {} (this build reads {FORMAT_VERSION})",
            m.format_version
        )));
    }
    Ok(m)
}

fn check_same_schema(table: &str, existing: &Schema, new: &Schema) -> Result<()> {
    if existing.fields() != new.fields() {
        return Err(StorageError::SchemaMismatch {
            table: table.to_string(),
            reason: format!(
                "existing columns {:?}, new columns {:?}",
                field_list(existing),
                field_list(new)
            ),
        });
    }
    Ok(())
}

fn field_list(s: &Schema) -> Vec<String> {
    s.fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect()
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

    /// A column whose first rows are all distinct is written without a dictionary, one that
    /// repeats keeps it; a partition with no rows still commits.
    #[test]
    fn nearly_unique_columns_are_written_plain() {
        use parquet::basic::Encoding;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            Field::new("unique", DataType::Int64, false),
            Field::new("repeats", DataType::Int64, false),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values((0..10_000).map(|i| i * 7919))),
                Arc::new(Int64Array::from_iter_values((0..10_000).map(|i| i % 50))),
            ],
        )
        .unwrap();
        let mut w = store
            .create_partition("t", 0, schema.clone(), 65_536)
            .unwrap();
        w.write(&b).unwrap();
        let info = store.commit_partition(w).unwrap();
        let file = std::fs::File::open(dir.path().join(&info.file)).unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        let chunk = |c: usize| {
            reader
                .metadata()
                .row_group(0)
                .column(c)
                .encodings()
                .collect::<Vec<_>>()
        };
        assert!(
            !chunk(0).contains(&Encoding::RLE_DICTIONARY),
            "{:?}",
            chunk(0)
        );
        assert!(
            chunk(1).contains(&Encoding::RLE_DICTIONARY),
            "{:?}",
            chunk(1)
        );
        let w = store.create_partition("t", 1, schema, 65_536).unwrap();
        assert_eq!(store.commit_partition(w).unwrap().rows, 0);
        assert_eq!(store.table("t").unwrap().partitions.len(), 2);
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
    fn the_catalog_version_changes_with_the_manifest_and_the_opening() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let empty = store.catalog().version;
        assert_eq!(store.catalog().version, empty, "unchanged: same version");
        let b = batch(100);
        let mut w = store.create_partition("t", 0, b.schema(), 4096).unwrap();
        w.write(&b).unwrap();
        store.commit_partition(w).unwrap();
        let loaded = store.catalog().version;
        assert_ne!(loaded, empty);
        let known = CatalogRequest {
            without_checksums: true,
            known: Some(loaded.clone()),
            ..Default::default()
        };
        let reply = store.catalog_for(&known);
        assert!(reply.unchanged && reply.tables.is_empty(), "{reply:?}");
        let stale = CatalogRequest {
            known: Some(empty.clone()),
            ..known.clone()
        };
        let reply = store.catalog_for(&stale);
        assert!(!reply.unchanged && reply.tables.len() == 1);
        assert!(reply.tables[0].partitions[0].checksums.is_none());
        // A repair's listing: the same tables, loads and partitions, no statistics.
        let full = store.catalog();
        let listing = store.catalog_for(&CatalogRequest {
            listing_only: true,
            ..Default::default()
        });
        let (f, l) = (&full.tables[0], &listing.tables[0]);
        assert!(!f.partitions[0].ndv.is_empty() && f.partitions[0].checksums.is_some());
        assert_eq!((&l.name, &l.load, &l.schema), (&f.name, &f.load, &f.schema));
        let (fp, lp) = (&f.partitions[0], &l.partitions[0]);
        assert_eq!(
            (lp.partition, lp.rows, &lp.file),
            (fp.partition, fp.rows, &fp.file)
        );
        assert!(fp.sample.is_some() && lp.sample.is_none());
        assert!(lp.ndv.is_empty() && lp.bounds.is_empty() && lp.checksums.is_none());
        let sizes = |c: &adisk_core::protocol::DiskCatalog| serde_json::to_vec(c).unwrap().len();
        assert!(
            sizes(&listing) * 2 < sizes(&full),
            "{} of {}",
            sizes(&listing),
            sizes(&full)
        );
        assert!(store.drop_table("t").unwrap());
        assert!(!store.catalog().answering(&known).unchanged, "dropped");
        drop(store);
        let reopened = DiskStore::open(dir.path(), 0).unwrap();
        assert_ne!(
            reopened.catalog().version,
            empty,
            "a new opening, a new version"
        );
    }

    #[test]
    fn pages_are_written_with_the_store_codec_and_read_back_whatever_it_was() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let dir = tempfile::tempdir().unwrap();
        let b = batch(10_000);
        let codecs = [
            (Compression::None, parquet::basic::Compression::UNCOMPRESSED),
            (Compression::Lz4, parquet::basic::Compression::LZ4_RAW),
            (Compression::Snappy, parquet::basic::Compression::SNAPPY),
        ];
        for (i, (codec, parquet_codec)) in codecs.into_iter().enumerate() {
            let store = DiskStore::open(dir.path(), 0)
                .unwrap()
                .with_compression(codec);
            let mut w = store
                .create_partition("t", i as u32, b.schema(), 4096)
                .unwrap();
            w.write(&b).unwrap();
            let info = store.commit_partition(w).unwrap();
            let file = store.open_partition(&info).unwrap();
            let meta = SerializedFileReader::new(file).unwrap().metadata().clone();
            assert_eq!(meta.row_group(0).column(0).compression(), parquet_codec);
        }
        // One table, three codecs: every file reads back whole.
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let t = store.table("t").unwrap();
        assert_eq!(t.partitions.len(), 3);
        for p in &t.partitions {
            let file = store.open_partition(p).unwrap();
            let rows: usize =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .unwrap()
                    .build()
                    .unwrap()
                    .map(|b| b.unwrap().num_rows())
                    .sum();
            assert_eq!(rows, 10_000);
        }
        assert!("zstd".parse::<Compression>().is_err());
        assert_eq!("lz4".parse::<Compression>(), Ok(Compression::Lz4));
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
        // Not even the table's directory the write made.
        assert!(!dir.path().join("tables/t").exists());
        assert!(validate_table_name("../x").is_err());
        assert!(store.file_path("../etc/passwd").is_err());
    }

    /// Flips one byte at `offset` keeping the file's size and mtime (as bit rot does).
    fn flip_keeping_mtime(path: &Path, offset: u64) {
        use std::os::unix::fs::FileExt;
        let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, offset).unwrap();
        f.write_all_at(&[b[0] ^ 0x10], offset).unwrap();
        f.set_modified(mtime).unwrap();
    }

    fn read_all(store: &DiskStore, info: &PartitionInfo) -> Result<u64> {
        let reader = store.partition_reader(info, Default::default())?;
        let meta = reader.metadata()?;
        let mut rows = 0;
        for rg in 0..meta.metadata().num_row_groups() {
            let mask = parquet::arrow::ProjectionMask::all();
            let bytes = reader.row_group(meta.metadata(), rg, &mask)?;
            let r =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::new_with_metadata(
                    bytes,
                    meta.clone(),
                )
                .with_row_groups(vec![rg])
                .build()
                .unwrap();
            for b in r {
                rows += b
                    .map_err(|e| StorageError::Corrupt {
                        path: PathBuf::new(),
                        reason: e.to_string(),
                    })?
                    .num_rows() as u64;
            }
        }
        Ok(rows)
    }

    #[test]
    fn flips_after_the_first_open_are_detected_on_every_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let b = batch(20_000);
        let mut w = store.create_partition("t", 0, b.schema(), 4096).unwrap();
        w.write(&b).unwrap();
        let info = store.commit_partition(w).unwrap();
        let sums = info.checksums.clone().unwrap();
        assert_eq!(sums.chunk_crc32.len(), 5);
        assert_eq!(
            read_all(&store, &info).unwrap(),
            20_000,
            "first open: whole-file CRC, then per-read checks"
        );
        let path = dir.path().join(&info.file);
        // A data page in the middle of row group 2, flipped after the first open.
        let original = std::fs::read(&path).unwrap();
        flip_keeping_mtime(&path, sums.tail_offset / 2);
        let err = read_all(&store, &info).unwrap_err();
        assert!(
            matches!(&err, StorageError::Corrupt { path: p, reason } if p == &path && reason.contains("column chunk")),
            "{err}"
        );
        // The footer.
        std::fs::write(&path, &original).unwrap();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert_eq!(read_all(&store, &info).unwrap(), 20_000);
        flip_keeping_mtime(&path, info.bytes - 20);
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
        let err = read_all(&store, &info).unwrap_err();
        assert!(
            matches!(&err, StorageError::Corrupt { reason, .. } if reason.contains("footer")),
            "{err}"
        );
    }

    #[test]
    fn a_flipped_manifest_is_refused_and_one_without_checksums_still_opens() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let b = batch(100);
        let mut w = store.create_partition("t", 0, b.schema(), 4096).unwrap();
        w.write(&b).unwrap();
        store.commit_partition(w).unwrap();
        drop(store);
        let path = dir.path().join(MANIFEST);
        let text = std::fs::read_to_string(&path).unwrap();
        // A digit of the row count: still valid JSON, a different table.
        std::fs::write(&path, text.replace("\"rows\": 100", "\"rows\": 900")).unwrap();
        let err = DiskStore::open(dir.path(), 0).err().unwrap();
        assert!(
            matches!(&err, StorageError::BadManifest { path: p, reason } if p == &path && reason.contains("CRC-32")),
            "{err}"
        );
        // A manifest of an older version (no crc32, no per-read checksums) opens, and its
        // partition is verified whole at every open.
        let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        doc.as_object_mut().unwrap().remove("crc32");
        doc["tables"]["t"]["partitions"][0]
            .as_object_mut()
            .unwrap()
            .remove("checksums");
        std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let info = store.table("t").unwrap().partitions[0].clone();
        assert!(info.checksums.is_none());
        assert_eq!(read_all(&store, &info).unwrap(), 100);
        flip_keeping_mtime(&dir.path().join(&info.file), info.bytes / 2);
        assert!(matches!(
            read_all(&store, &info),
            Err(StorageError::Corrupt { .. })
        ));
    }
}
