//! The wasmtime engine, install-time validation, and [`WasmDisklet`]: a user disklet behind the
//! DiskOS [`Disklet`] interface, sandboxed in its own store with a memory grant, a fuel budget
//! and output caps.
use crate::abi::{self, IMPORT_MODULE, codes};
use crate::error::{Result, WasmError};
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer};
use arrow::array::{Array, AsArray, BinaryArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use wasmtime::{Caller, Config, Engine, ExternType, Instance, Linker, Memory, Module, ResourceLimiter, Store, Trap, TypedFunc, ValType};

/// Size of a WebAssembly page.
pub const PAGE_BYTES: u64 = 64 * 1024;

/// Limits every user disklet of a disk runs under.
#[derive(Clone, Debug)]
pub struct WasmLimits {
    /// Largest module accepted at install.
    pub module_bytes_max: u64,
    /// Stream buffer size of the disk (sizes the input area).
    pub buffer_bytes: u64,
    /// Fuel (≈ WebAssembly instructions) per job when the job does not ask for a budget.
    pub fuel_default: u64,
    /// Largest fuel budget a job may ask for.
    pub fuel_max: u64,
    /// Bytes a disklet may emit during one call (`init`, one `process`, `finish`).
    pub output_bytes_per_call: u64,
    /// Bytes a disklet may emit during one job.
    pub output_bytes_per_job: u64,
    /// Skip requests per call.
    pub skips_per_call: usize,
    /// Log lines per job (more are dropped).
    pub log_lines_per_job: u32,
    /// Guest stack bytes the host lets wasm code use.
    pub wasm_stack_bytes: usize,
}

impl WasmLimits {
    /// Defaults for a disk with `buffer_bytes` stream buffers.
    pub fn new(buffer_bytes: u64) -> Self {
        WasmLimits {
            module_bytes_max: 16 * 1024 * 1024,
            buffer_bytes,
            fuel_default: 50_000_000_000,
            fuel_max: 1_000_000_000_000,
            output_bytes_per_call: 4 * buffer_bytes.max(PAGE_BYTES),
            output_bytes_per_job: 1 << 30,
            skips_per_call: 4096,
            log_lines_per_job: 64,
            wasm_stack_bytes: 512 * 1024,
        }
    }

    /// Bytes of the input area the host asks the guest to reserve: twice the stream buffer
    /// (ADT1 can be larger than Arrow) plus one page, rounded up to whole pages.
    pub fn input_area_bytes(&self) -> u64 {
        (2 * self.buffer_bytes + PAGE_BYTES).div_ceil(PAGE_BYTES) * PAGE_BYTES
    }

    /// Memory grant of a disklet installed with `scratch_kib`: scratch + input area.
    pub fn grant_bytes(&self, scratch_kib: u64) -> u64 {
        scratch_kib.saturating_mul(1024).saturating_add(self.input_area_bytes())
    }
}

/// What install-time validation found out about a module.
#[derive(Clone, Debug)]
pub struct ModuleFacts {
    /// Declared maximum of the module's memory, bytes.
    pub memory_max_bytes: u64,
    /// Time spent compiling.
    pub compile_ns: u64,
}

/// The engine shared by all user disklets of a disk.
#[derive(Clone)]
pub struct WasmRuntime {
    engine: Engine,
    limits: WasmLimits,
}

impl WasmRuntime {
    /// An engine with fuel metering and only the WebAssembly features ABI v1 allows.
    ///
    /// # Errors
    /// [`WasmError::Registry`] if the engine cannot be created on this machine.
    pub fn new(limits: WasmLimits) -> Result<Self> {
        let mut config = Config::new();
        config
            .consume_fuel(true)
            .max_wasm_stack(limits.wasm_stack_bytes)
            .wasm_multi_memory(false)
            .wasm_memory64(false);
        let engine = Engine::new(&config).map_err(|e| WasmError::Registry(format!("cannot create the wasm engine: {e}")))?;
        Ok(WasmRuntime { engine, limits })
    }

    /// The limits.
    pub fn limits(&self) -> &WasmLimits {
        &self.limits
    }

    /// Compiles and validates a module against ABI v1 and a memory grant.
    ///
    /// # Errors
    /// [`WasmError::ModuleTooLarge`], [`WasmError::Malformed`], [`WasmError::ForbiddenImport`],
    /// [`WasmError::Abi`], [`WasmError::Memory`].
    pub fn compile(&self, bytes: &[u8], grant_bytes: u64) -> Result<(Module, ModuleFacts)> {
        if bytes.len() as u64 > self.limits.module_bytes_max {
            return Err(WasmError::ModuleTooLarge { size_bytes: bytes.len() as u64, limit_bytes: self.limits.module_bytes_max });
        }
        let started = Instant::now();
        let module = Module::new(&self.engine, bytes).map_err(|e| WasmError::Malformed(format!("{e:#}")))?;
        let compile_ns = started.elapsed().as_nanos() as u64;
        let facts = validate(&module, grant_bytes, compile_ns)?;
        Ok((module, facts))
    }
}

fn valtypes(types: impl Iterator<Item = ValType>) -> String {
    types.map(|t| t.to_string()).collect::<Vec<_>>().join(" ")
}

fn validate(module: &Module, grant_bytes: u64, compile_ns: u64) -> Result<ModuleFacts> {
    for import in module.imports() {
        let allowed = abi::ALLOWED_IMPORTS.iter().find(|(name, ..)| *name == import.name());
        let (Some((name, params, results)), true) = (allowed, import.module() == IMPORT_MODULE) else {
            return Err(WasmError::ForbiddenImport { module: import.module().to_string(), name: import.name().to_string() });
        };
        let ExternType::Func(f) = import.ty() else {
            return Err(WasmError::Abi(format!("import `{IMPORT_MODULE}::{name}` must be a function")));
        };
        if valtypes(f.params()) != *params || f.results().len() != *results || f.results().any(|t| !matches!(t, ValType::I32)) {
            return Err(WasmError::Abi(format!("import `{name}` must have parameters ({params}) and {results} i32 result(s)")));
        }
    }
    for (name, arity) in abi::REQUIRED_EXPORTS {
        let Some(ExternType::Func(f)) = module.get_export(name) else {
            return Err(WasmError::Abi(format!("required export `{name}` is missing or not a function")));
        };
        let expected = if name == "adisk_process" { "i32 i32 i64".to_string() } else { vec!["i32"; arity].join(" ") };
        if valtypes(f.params()) != expected || f.results().len() != 1 || f.results().any(|t| !matches!(t, ValType::I32)) {
            return Err(WasmError::Abi(format!("export `{name}` must take ({expected}) and return one i32")));
        }
    }
    let Some(ExternType::Memory(memory)) = module.get_export("memory") else {
        return Err(WasmError::Abi("the module must export its memory as `memory`".into()));
    };
    if memory.is_shared() || memory.is_64() {
        return Err(WasmError::Memory("shared and 64-bit memories are not allowed".into()));
    }
    let Some(max_pages) = memory.maximum() else {
        return Err(WasmError::Memory(format!("the memory declares no maximum; declare one within the grant of {grant_bytes} bytes (clang: -Wl,--max-memory=N)")));
    };
    let memory_max_bytes = max_pages.saturating_mul(memory.page_size());
    if memory_max_bytes > grant_bytes {
        return Err(WasmError::Memory(format!("the memory declares a maximum of {memory_max_bytes} bytes, more than the grant of {grant_bytes} bytes (scratch + input area)")));
    }
    Ok(ModuleFacts { memory_max_bytes, compile_ns })
}

/// Per-store state the imports see.
struct HostState {
    name: String,
    limits: WasmLimits,
    grant_bytes: u64,
    memory: Option<Memory>,
    in_init: bool,
    output_schema: Option<SchemaRef>,
    pending: Vec<RecordBatch>,
    skips: Vec<std::ops::Range<u64>>,
    call_output_bytes: u64,
    job_output_bytes: u64,
    log_lines: u32,
}

impl ResourceLimiter for HostState {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.grant_bytes {
            return Err(wasmtime::Error::new(WasmError::MemoryExceeded { name: self.name.clone(), desired_bytes: desired as u64, grant_bytes: self.grant_bytes }));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 65_536)
    }

    fn instances(&self) -> usize {
        1
    }
    fn tables(&self) -> usize {
        4
    }
    fn memories(&self) -> usize {
        1
    }
}

fn guest_bytes(caller: &Caller<'_, HostState>, ptr: i32, len: i32) -> Option<Vec<u8>> {
    let memory = caller.data().memory?;
    let data = memory.data(caller);
    let (start, len) = (usize::try_from(ptr).ok()?, usize::try_from(len).ok()?);
    data.get(start..start.checked_add(len)?).map(<[u8]>::to_vec)
}

fn raw_output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("bytes", DataType::Binary, false)]))
}

fn linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    linker.func_wrap(IMPORT_MODULE, "emit", |caller: Caller<'_, HostState>, ptr: i32, len: i32| -> wasmtime::Result<i32> { emit(caller, ptr, len) })?;
    linker.func_wrap(IMPORT_MODULE, "skip", |mut caller: Caller<'_, HostState>, start: i64, end: i64| -> wasmtime::Result<()> {
        let state = caller.data_mut();
        if state.skips.len() >= state.limits.skips_per_call {
            return Err(wasmtime::Error::new(WasmError::OutputExceeded { name: state.name.clone(), detail: format!("more than {} skip requests in one call", state.limits.skips_per_call) }));
        }
        let (start, end) = (start as u64, end as u64);
        if start < end {
            state.skips.push(start..end);
        }
        Ok(())
    })?;
    linker.func_wrap(IMPORT_MODULE, "log", |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| {
        let text = guest_bytes(&caller, ptr, len.clamp(0, 1024)).map(|b| String::from_utf8_lossy(&b).to_string()).unwrap_or_else(|| "<log buffer out of bounds>".into());
        let state = caller.data_mut();
        if state.log_lines < state.limits.log_lines_per_job {
            state.log_lines += 1;
            tracing::info!(disklet = %state.name, "{text}");
        }
    })?;
    linker.func_wrap(IMPORT_MODULE, "declare_output", |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| -> i32 {
        let Some(text) = guest_bytes(&caller, ptr, len.clamp(0, 64 * 1024)) else { return codes::BAD_BUFFER };
        let state = caller.data_mut();
        if !state.in_init {
            return codes::BAD_BUFFER;
        }
        match abi::parse_output_spec(&String::from_utf8_lossy(&text)) {
            Ok(schema) => {
                state.output_schema = Some(schema);
                codes::OK
            }
            Err(why) => {
                tracing::info!(disklet = %state.name, "declare_output refused: {why}");
                codes::BAD_BUFFER
            }
        }
    })?;
    Ok(linker)
}

fn emit(mut caller: Caller<'_, HostState>, ptr: i32, len: i32) -> wasmtime::Result<i32> {
    let len_bytes = u64::try_from(len).unwrap_or(0);
    {
        let state = caller.data_mut();
        state.call_output_bytes += len_bytes;
        state.job_output_bytes += len_bytes;
        if state.call_output_bytes > state.limits.output_bytes_per_call {
            return Err(wasmtime::Error::new(WasmError::OutputExceeded { name: state.name.clone(), detail: format!("more than {} bytes emitted in one call", state.limits.output_bytes_per_call) }));
        }
        if state.job_output_bytes > state.limits.output_bytes_per_job {
            return Err(wasmtime::Error::new(WasmError::OutputExceeded { name: state.name.clone(), detail: format!("more than {} bytes emitted by the job", state.limits.output_bytes_per_job) }));
        }
    }
    let Some(bytes) = guest_bytes(&caller, ptr, len) else { return Ok(codes::BAD_BUFFER) };
    let state = caller.data_mut();
    let batch = match &state.output_schema {
        None => RecordBatch::try_new(raw_output_schema(), vec![Arc::new(BinaryArray::from(vec![bytes.as_slice()]))]).map_err(|e| wasmtime::Error::msg(e.to_string()))?,
        Some(schema) => match abi::decode(&bytes, schema) {
            Ok(b) => b,
            Err(why) => {
                tracing::info!(disklet = %state.name, "emit refused: {why}");
                return Ok(codes::BAD_BUFFER);
            }
        },
    };
    state.pending.push(batch);
    Ok(codes::OK)
}

/// Parameters of one user disklet job.
pub struct WasmJob<'a> {
    /// Installed name.
    pub name: &'a str,
    /// `--param k=v` pairs.
    pub params: &'a BTreeMap<String, String>,
    /// Fuel budget asked for (None: the default).
    pub fuel: Option<u64>,
    /// Schema of the input stream.
    pub input: &'a SchemaRef,
    /// Memory grant.
    pub grant_bytes: u64,
    /// Time spent compiling for this job (0 when the compiled module was cached).
    pub compile_ns: u64,
}

/// A user disklet instance: one store, one instance, for the life of one job.
pub struct WasmDisklet {
    store: Store<HostState>,
    input_area: u32,
    input_capacity: usize,
    process_fn: TypedFunc<(i32, i32, i64), i32>,
    finish_fn: TypedFunc<(), i32>,
    raw_input: bool,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    fuel: u64,
    encoded: Vec<u8>,
    failed: bool,
    compile_ns: u64,
    instantiate_ns: u64,
}

fn is_file_schema(schema: &Schema) -> bool {
    let f = schema.fields();
    f.len() == 2 && f[0].name() == "offset" && f[1].name() == "bytes" && *f[1].data_type() == DataType::Binary
}

impl std::fmt::Debug for WasmDisklet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmDisklet").field("name", &self.store.data().name).field("fuel", &self.fuel).finish_non_exhaustive()
    }
}

impl WasmDisklet {
    /// Instantiates `module` for one job and runs its init.
    ///
    /// # Errors
    /// [`WasmError::InvalidJob`] (input types, fuel, parameters too long), and any run-time
    /// failure of `adisk_input_area` / `adisk_init` (trap, budget, error code).
    pub fn new(runtime: &WasmRuntime, module: &Module, job: WasmJob<'_>) -> Result<Self> {
        let started = Instant::now();
        let limits = runtime.limits.clone();
        let raw_input = is_file_schema(job.input);
        if !raw_input {
            abi::check_input_schema(job.input)?;
        }
        let fuel = job.fuel.unwrap_or(limits.fuel_default);
        if fuel == 0 || fuel > limits.fuel_max {
            return Err(WasmError::InvalidJob(format!("fuel budget {fuel} is outside 1..={}", limits.fuel_max)));
        }
        let name = job.name.to_string();
        let state = HostState {
            name: name.clone(),
            limits: limits.clone(),
            grant_bytes: job.grant_bytes,
            memory: None,
            in_init: true,
            output_schema: None,
            pending: Vec::new(),
            skips: Vec::new(),
            call_output_bytes: 0,
            job_output_bytes: 0,
            log_lines: 0,
        };
        let mut store = Store::new(&runtime.engine, state);
        store.limiter(|s| s as &mut dyn ResourceLimiter);
        store.set_fuel(fuel).map_err(|e| WasmError::Registry(format!("fuel: {e}")))?;
        let trap = |e: wasmtime::Error| classify(e, &name, fuel, "init");
        let linker = linker(&runtime.engine).map_err(|e| WasmError::Registry(format!("linker: {e}")))?;
        let instance: Instance = linker.instantiate(&mut store, module).map_err(trap)?;
        let memory = instance.get_memory(&mut store, "memory").ok_or_else(|| WasmError::Abi("no exported memory".into()))?;
        store.data_mut().memory = Some(memory);
        let abi_err = |e: wasmtime::Error| WasmError::Abi(format!("{e:#}"));
        let input_area_fn: TypedFunc<i32, i32> = instance.get_typed_func(&mut store, "adisk_input_area").map_err(abi_err)?;
        let init_fn: TypedFunc<(i32, i32), i32> = instance.get_typed_func(&mut store, "adisk_init").map_err(abi_err)?;
        let process_fn = instance.get_typed_func(&mut store, "adisk_process").map_err(abi_err)?;
        let finish_fn = instance.get_typed_func(&mut store, "adisk_finish").map_err(abi_err)?;
        let input_capacity = limits.input_area_bytes() as usize;
        let area = input_area_fn.call(&mut store, input_capacity as i32).map_err(trap)?;
        let memory_len = memory.data_size(&store);
        if area <= 0 || (area as usize).saturating_add(input_capacity) > memory_len {
            return Err(WasmError::Guest { name, phase: "init", message: format!("adisk_input_area({input_capacity}) returned {area}, not a region inside the {memory_len}-byte memory (is the grant too small?)") });
        }
        // Parameters, as `key=value` lines, plus the input description.
        let mut text = String::new();
        for (k, v) in job.params {
            text.push_str(&format!("{k}={v}\n"));
        }
        text.push_str(&format!("_input={}\n", if raw_input { "bytes" } else { "table" }));
        let names: Vec<&str> = job.input.fields().iter().map(|f| f.name().as_str()).collect();
        text.push_str(&format!("_columns={}\n", names.join(",")));
        if text.len() > input_capacity {
            return Err(WasmError::InvalidJob(format!("parameters take {} bytes, more than the {input_capacity}-byte input area", text.len())));
        }
        memory.data_mut(&mut store)[area as usize..area as usize + text.len()].copy_from_slice(text.as_bytes());
        let rc = init_fn.call(&mut store, (area, text.len() as i32)).map_err(trap)?;
        if rc != codes::OK {
            return Err(WasmError::Guest { name, phase: "init", message: codes::describe(rc) });
        }
        store.data_mut().in_init = false;
        let output_schema = store.data().output_schema.clone().unwrap_or_else(raw_output_schema);
        Ok(WasmDisklet {
            store,
            input_area: area as u32,
            input_capacity,
            process_fn,
            finish_fn,
            raw_input,
            input_schema: job.input.clone(),
            output_schema,
            fuel,
            encoded: Vec::with_capacity(input_capacity),
            failed: false,
            compile_ns: job.compile_ns,
            instantiate_ns: started.elapsed().as_nanos() as u64,
        })
    }

    /// Compile time (0 when cached) and instantiate+init time of this instance, ns.
    pub fn setup_ns(&self) -> (u64, u64) {
        (self.compile_ns, self.instantiate_ns)
    }

    /// Fuel used so far.
    pub fn fuel_used(&self) -> u64 {
        self.fuel - self.store.get_fuel().unwrap_or(0)
    }

    fn check_alive(&self) -> Result<()> {
        if self.failed {
            return Err(WasmError::Guest { name: self.store.data().name.clone(), phase: "process", message: "the instance already failed".into() });
        }
        Ok(())
    }

    /// Copies `len` bytes of `self.encoded` (or `bytes`) into the input area and calls process.
    fn call_process(&mut self, bytes: Option<&[u8]>, position: u64, out: &mut Emitter) -> Result<bool> {
        let data: &[u8] = bytes.unwrap_or(&self.encoded);
        let memory = self.store.data().memory.ok_or_else(|| WasmError::Abi("no exported memory".into()))?;
        let start = self.input_area as usize;
        memory.data_mut(&mut self.store)[start..start + data.len()].copy_from_slice(data);
        let len = data.len() as i32;
        self.store.data_mut().call_output_bytes = 0;
        let result = self.process_fn.call(&mut self.store, (self.input_area as i32, len, position as i64));
        self.drain(out);
        let rc = result.map_err(|e| {
            self.failed = true;
            classify(e, &self.store.data().name, self.fuel, "process")
        })?;
        match rc {
            codes::OK => Ok(false),
            codes::DONE => Ok(true),
            other => {
                self.failed = true;
                Err(WasmError::Guest { name: self.store.data().name.clone(), phase: "process", message: codes::describe(other) })
            }
        }
    }

    fn drain(&mut self, out: &mut Emitter) {
        let state = self.store.data_mut();
        for b in state.pending.drain(..) {
            out.emit(0, b);
        }
        for s in state.skips.drain(..) {
            out.skip(s);
        }
    }

    /// Processes one Arrow batch (table input) or the byte rows of a file stream.
    ///
    /// # Errors
    /// See [`WasmError`]; the instance is unusable afterwards.
    pub fn process_batch(&mut self, batch: &RecordBatch, position: u64, out: &mut Emitter) -> Result<()> {
        self.check_alive()?;
        if self.raw_input {
            let offsets = batch.column(0).as_primitive::<UInt64Type>().clone();
            let bytes = batch.column(1).as_binary::<i32>().clone();
            for r in 0..batch.num_rows() {
                let (base, value) = (offsets.value(r), bytes.value(r));
                for (i, chunk) in value.chunks(self.input_capacity).enumerate() {
                    if self.call_process(Some(chunk), base + (i * self.input_capacity) as u64, out)? {
                        out.done();
                        return Ok(());
                    }
                }
            }
            return Ok(());
        }
        // Hand the columns over in the order `_columns` announced (a scan may deliver them in file order).
        let reordered;
        let batch = if batch.schema().fields() == self.input_schema.fields() {
            batch
        } else {
            let mut columns = Vec::with_capacity(self.input_schema.fields().len());
            for f in self.input_schema.fields() {
                let c = batch.column_by_name(f.name()).ok_or_else(|| WasmError::InvalidJob(format!("input buffer lacks column `{}`", f.name())))?;
                columns.push(c.clone());
            }
            reordered = RecordBatch::try_new(self.input_schema.clone(), columns).map_err(|e| WasmError::InvalidJob(format!("input buffer does not match the input schema: {e}")))?;
            &reordered
        };
        let rows = batch.num_rows();
        let mut start = 0;
        while start < rows {
            let mut len = rows - start;
            while abi::encoded_len(batch, start, len) > self.input_capacity {
                if len == 1 {
                    return Err(WasmError::InvalidJob(format!("row {} takes more than the {}-byte input area", position + start as u64, self.input_capacity)));
                }
                len = len.div_ceil(2);
            }
            let mut encoded = std::mem::take(&mut self.encoded);
            abi::encode(batch, start, len, &mut encoded)?;
            self.encoded = encoded;
            if self.call_process(None, position + start as u64, out)? {
                out.done();
                return Ok(());
            }
            start += len;
        }
        Ok(())
    }

    /// Calls the guest's finish.
    ///
    /// # Errors
    /// See [`WasmError`].
    pub fn finish_job(&mut self, out: &mut Emitter) -> Result<()> {
        self.check_alive()?;
        self.store.data_mut().call_output_bytes = 0;
        let result = self.finish_fn.call(&mut self.store, ());
        self.drain(out);
        let rc = result.map_err(|e| {
            self.failed = true;
            classify(e, &self.store.data().name, self.fuel, "finish")
        })?;
        if rc != codes::OK {
            return Err(WasmError::Guest { name: self.store.data().name.clone(), phase: "finish", message: codes::describe(rc) });
        }
        Ok(())
    }

    /// Bytes of guest memory in use.
    pub fn memory_bytes(&self) -> u64 {
        self.store.data().memory.map_or(0, |m| m.data_size(&self.store) as u64)
    }
}

/// Turns a wasmtime error into a typed [`WasmError`].
fn classify(e: wasmtime::Error, name: &str, fuel: u64, phase: &'static str) -> WasmError {
    let e = match e.downcast::<WasmError>() {
        Ok(typed) => return typed,
        Err(e) => e,
    };
    if let Some(trap) = e.downcast_ref::<Trap>() {
        if *trap == Trap::OutOfFuel {
            return WasmError::BudgetExceeded { name: name.to_string(), fuel, phase };
        }
        return WasmError::Trap { name: name.to_string(), phase, message: trap.to_string() };
    }
    if let Some(typed) = e.chain().find_map(|c| c.downcast_ref::<WasmError>()) {
        return WasmError::Trap { name: name.to_string(), phase, message: typed.to_string() };
    }
    WasmError::Trap { name: name.to_string(), phase, message: format!("{e:#}") }
}

/// Adapts [`WasmDisklet`] to the DiskOS interface.
pub struct WasmStage(pub WasmDisklet);

fn to_os(e: WasmError) -> adisk_diskos::DiskOsError {
    crate::to_diskos_error(e)
}

impl Disklet for WasmStage {
    fn name(&self) -> &'static str {
        "wasm"
    }
    fn output_schema(&self) -> SchemaRef {
        self.0.output_schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> adisk_diskos::Result<()> {
        self.0.process_batch(input.batch, input.position, out).map_err(to_os)
    }
    fn finish(&mut self, out: &mut Emitter) -> adisk_diskos::Result<()> {
        self.0.finish_job(out).map_err(to_os)
    }
    fn scratch_bytes(&self) -> u64 {
        self.0.memory_bytes()
    }
    fn setup_ns(&self) -> (u64, u64) {
        self.0.setup_ns()
    }
}

#[allow(dead_code)]
fn _assert_send() {
    fn send<T: Send>() {}
    send::<WasmDisklet>();
    let _ = |a: &dyn Array| a.len();
}
