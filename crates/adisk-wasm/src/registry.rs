//! The per-disk registry of installed user disklets: `disklets/<name>.wasm` plus
//! `disklets/index.json` (name → sha256, size, scratch, ABI version and shape), both written to a temporary file,
//! fsynced and renamed; compiled modules cached in memory by hash ("install once, run many").
use crate::abi::Shape;
use crate::error::{Result, WasmError, io_err};
use crate::runtime::{WasmDisklet, WasmJob, WasmRuntime, WasmStage};
use adisk_core::protocol::DiskletInfo;
use adisk_diskos::disklet::Disklet;
use adisk_diskos::job::CancelFlag;
use adisk_diskos::user::UserShape;
use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;
use wasmtime::Module;

/// Installed disklets per disk.
pub const MAX_INSTALLED: usize = 256;
/// Largest scratch a disklet may be installed with, KiB.
pub const MAX_SCRATCH_KIB: u64 = 1024 * 1024;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Entry {
    sha256: String,
    size_bytes: u64,
    scratch_kib: u64,
    memory_max_bytes: u64,
    /// ABI version, inputs and output ports (absent in indexes written before ABI v2: v1).
    #[serde(default = "one")]
    abi: u32,
    #[serde(default = "one")]
    inputs: u32,
    #[serde(default = "one")]
    outputs: u32,
}

fn one() -> u32 {
    1
}

impl Entry {
    fn shape(&self) -> Shape {
        Shape {
            abi: self.abi,
            inputs: self.inputs,
            outputs: self.outputs,
        }
    }

    fn grant_bytes(&self, runtime: &WasmRuntime) -> u64 {
        runtime
            .limits()
            .grant_bytes_for(self.scratch_kib, self.inputs)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, Default)]
struct Index {
    disklets: BTreeMap<String, Entry>,
}

/// Installed user disklets of one disk.
pub struct DiskletRegistry {
    dir: PathBuf,
    runtime: WasmRuntime,
    index: Mutex<Index>,
    /// Compiled modules by sha256, with the time their compilation took.
    cache: Mutex<HashMap<String, (Module, u64)>>,
    /// Instances made (each ran, or tried to run, the guest's `init`) per disklet since the
    /// disk started.
    instances: Mutex<HashMap<String, u64>>,
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(WasmError::BadName(name.to_string()))
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f =
        std::fs::File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
    f.write_all(bytes)
        .map_err(io_err(format!("writing {}", tmp.display())))?;
    f.sync_all()
        .map_err(io_err(format!("syncing {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(format!("renaming {}", tmp.display())))
}

impl DiskletRegistry {
    /// Opens (creating) `disk_dir/disklets`; removes leftovers of interrupted installs.
    ///
    /// # Errors
    /// I/O errors, or a damaged index.
    pub fn open(disk_dir: &Path, runtime: WasmRuntime) -> Result<Self> {
        let dir = disk_dir.join("disklets");
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.path().extension().is_some_and(|x| x == "tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let index_path = dir.join("index.json");
        let index = match std::fs::read(&index_path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| WasmError::Registry(format!("{}: {e}", index_path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index::default(),
            Err(e) => return Err(io_err(format!("reading {}", index_path.display()))(e)),
        };
        Ok(DiskletRegistry {
            dir,
            runtime,
            index: Mutex::new(index),
            cache: Mutex::new(HashMap::new()),
            instances: Mutex::new(HashMap::new()),
        })
    }

    /// The engine.
    pub fn runtime(&self) -> &WasmRuntime {
        &self.runtime
    }

    fn info(&self, name: &str, e: &Entry) -> DiskletInfo {
        let cached = self
            .cache
            .lock()
            .expect("cache lock")
            .get(&e.sha256)
            .map(|(_, ns)| *ns);
        DiskletInfo {
            name: name.to_string(),
            sha256: e.sha256.clone(),
            size_bytes: e.size_bytes,
            scratch_kib: e.scratch_kib,
            memory_max_bytes: e.memory_max_bytes,
            grant_bytes: e.grant_bytes(&self.runtime),
            compiled: cached.is_some(),
            compile_ns: cached.unwrap_or(0),
            instances: self
                .instances
                .lock()
                .expect("instances lock")
                .get(name)
                .copied()
                .unwrap_or(0),
            abi: e.abi,
            inputs: e.inputs,
            outputs: e.outputs,
        }
    }

    /// Validates, compiles and stores a module under `name` (replacing an older one).
    ///
    /// # Errors
    /// Every rejection of [`WasmRuntime::compile`], [`WasmError::BadName`], I/O errors.
    pub fn install(&self, name: &str, bytes: &[u8], scratch_kib: u64) -> Result<DiskletInfo> {
        check_name(name)?;
        if scratch_kib > MAX_SCRATCH_KIB {
            return Err(WasmError::Memory(format!(
                "scratch {scratch_kib} KiB is more than the {MAX_SCRATCH_KIB} KiB limit"
            )));
        }
        let (module, facts) = self.runtime.compile(bytes, scratch_kib)?;
        let sha256 = sha256_hex(bytes);
        let mut index = self.index.lock().expect("index lock");
        if !index.disklets.contains_key(name) && index.disklets.len() >= MAX_INSTALLED {
            return Err(WasmError::Registry(format!(
                "{MAX_INSTALLED} disklets are already installed"
            )));
        }
        write_atomically(&self.dir.join(format!("{name}.wasm")), bytes)?;
        let Shape {
            abi,
            inputs,
            outputs,
        } = facts.shape;
        let entry = Entry {
            sha256: sha256.clone(),
            size_bytes: bytes.len() as u64,
            scratch_kib,
            memory_max_bytes: facts.memory_max_bytes,
            abi,
            inputs,
            outputs,
        };
        let mut next = index.clone();
        next.disklets.insert(name.to_string(), entry.clone());
        write_atomically(
            &self.dir.join("index.json"),
            &serde_json::to_vec_pretty(&next).expect("index serializes"),
        )?;
        *index = next;
        self.cache
            .lock()
            .expect("cache lock")
            .insert(sha256, (module, facts.compile_ns));
        drop(index);
        Ok(self.info(name, &entry))
    }

    /// The installed disklets.
    pub fn list(&self) -> Vec<DiskletInfo> {
        let index = self.index.lock().expect("index lock").clone();
        index
            .disklets
            .iter()
            .map(|(n, e)| self.info(n, e))
            .collect()
    }

    /// Removes a disklet. Returns false if it was not installed.
    ///
    /// # Errors
    /// I/O errors.
    pub fn remove(&self, name: &str) -> Result<bool> {
        check_name(name)?;
        let mut index = self.index.lock().expect("index lock");
        let Some(entry) = index.disklets.get(name).cloned() else {
            return Ok(false);
        };
        let mut next = index.clone();
        next.disklets.remove(name);
        write_atomically(
            &self.dir.join("index.json"),
            &serde_json::to_vec_pretty(&next).expect("index serializes"),
        )?;
        *index = next;
        let _ = std::fs::remove_file(self.dir.join(format!("{name}.wasm")));
        if !index.disklets.values().any(|e| e.sha256 == entry.sha256) {
            self.cache.lock().expect("cache lock").remove(&entry.sha256);
        }
        Ok(true)
    }

    fn entry(&self, name: &str) -> Result<Entry> {
        self.index
            .lock()
            .expect("index lock")
            .disklets
            .get(name)
            .cloned()
            .ok_or_else(|| WasmError::NotInstalled(name.to_string()))
    }

    /// Memory grant of an installed disklet, bytes.
    ///
    /// # Errors
    /// [`WasmError::NotInstalled`].
    pub fn grant_bytes(&self, name: &str) -> Result<u64> {
        Ok(self.entry(name)?.grant_bytes(&self.runtime))
    }

    /// ABI version, inputs and output ports of an installed disklet.
    ///
    /// # Errors
    /// [`WasmError::NotInstalled`].
    pub fn shape(&self, name: &str) -> Result<Shape> {
        Ok(self.entry(name)?.shape())
    }

    /// The compiled module (from the cache, or read, checked against its hash and compiled),
    /// and the compile time this call spent (0 on a cache hit).
    fn module(&self, name: &str, entry: &Entry) -> Result<(Module, u64)> {
        if let Some((m, _)) = self.cache.lock().expect("cache lock").get(&entry.sha256) {
            return Ok((m.clone(), 0));
        }
        let path = self.dir.join(format!("{name}.wasm"));
        let bytes = std::fs::read(&path).map_err(io_err(format!("reading {}", path.display())))?;
        if sha256_hex(&bytes) != entry.sha256 {
            return Err(WasmError::Registry(format!(
                "{} does not match its recorded sha256",
                path.display()
            )));
        }
        let started = Instant::now();
        let (module, _) = self.runtime.compile(&bytes, entry.scratch_kib)?;
        let ns = started.elapsed().as_nanos() as u64;
        self.cache
            .lock()
            .expect("cache lock")
            .insert(entry.sha256.clone(), (module.clone(), ns));
        Ok((module, ns))
    }

    /// Instantiates an installed one-input disklet for one job and runs its init.
    ///
    /// # Errors
    /// [`WasmError::NotInstalled`], and everything [`WasmDisklet::new`] reports.
    pub fn instantiate(
        &self,
        name: &str,
        params: &BTreeMap<String, String>,
        fuel: Option<u64>,
        input: &SchemaRef,
    ) -> Result<WasmDisklet> {
        self.instantiate_inputs(name, params, fuel, std::slice::from_ref(input))
    }

    /// Instantiates an installed disklet over `inputs` (as many as its shape declares) for one
    /// job and runs its init.
    ///
    /// # Errors
    /// [`WasmError::NotInstalled`], and everything [`WasmDisklet::new`] reports.
    pub fn instantiate_inputs(
        &self,
        name: &str,
        params: &BTreeMap<String, String>,
        fuel: Option<u64>,
        inputs: &[SchemaRef],
    ) -> Result<WasmDisklet> {
        self.instantiate_for_job(name, params, fuel, inputs, CancelFlag::never())
    }

    /// [`DiskletRegistry::instantiate_inputs`] for a job whose cancellation stops the guest
    /// (init included) at its next interrupt check, with [`WasmError::Cancelled`].
    ///
    /// # Errors
    /// As [`DiskletRegistry::instantiate_inputs`].
    pub fn instantiate_for_job(
        &self,
        name: &str,
        params: &BTreeMap<String, String>,
        fuel: Option<u64>,
        inputs: &[SchemaRef],
        cancel: CancelFlag,
    ) -> Result<WasmDisklet> {
        let entry = self.entry(name)?;
        let (module, compile_ns) = self.module(name, &entry)?;
        let job = WasmJob {
            name,
            params,
            fuel,
            inputs,
            shape: entry.shape(),
            grant_bytes: entry.grant_bytes(&self.runtime),
            compile_ns,
            cancel,
        };
        *self
            .instances
            .lock()
            .expect("instances lock")
            .entry(name.to_string())
            .or_default() += 1;
        WasmDisklet::new(&self.runtime, &module, job)
    }
}

impl adisk_diskos::user::UserDisklets for DiskletRegistry {
    fn grant_bytes(&self, name: &str) -> adisk_diskos::Result<u64> {
        DiskletRegistry::grant_bytes(self, name).map_err(crate::to_diskos_error)
    }

    fn shape(&self, name: &str) -> adisk_diskos::Result<UserShape> {
        let s = DiskletRegistry::shape(self, name).map_err(crate::to_diskos_error)?;
        Ok(UserShape {
            abi: s.abi,
            inputs: s.inputs as usize,
            outputs: s.outputs as usize,
        })
    }

    fn build(
        &self,
        name: &str,
        params: &BTreeMap<String, String>,
        fuel: Option<u64>,
        inputs: &[SchemaRef],
        cancel: CancelFlag,
    ) -> adisk_diskos::Result<Box<dyn Disklet>> {
        let d = self
            .instantiate_for_job(name, params, fuel, inputs, cancel)
            .map_err(crate::to_diskos_error)?;
        Ok(Box::new(WasmStage(d)))
    }
}
