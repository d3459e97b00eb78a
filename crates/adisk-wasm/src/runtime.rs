//! The wasmtime engine and [`WasmDisklet`]: a user disklet behind the DiskOS [`Disklet`]
//! interface, sandboxed in its own store with a memory grant, a fuel budget and output caps.
//!
//! A job's inputs are queued per input (`input.rs`) and handed to the guest by a pump:
//! after every call the guest says which input it wants next (ABI v2 `adisk_next_input`; ABI v1:
//! any), and the pump hands it that input's next chunk, or tells it that input ended, until the
//! input it wants has nothing queued; DiskOS then brings a buffer of that input
//! ([`Disklet::next_input`]). An ABI v1 module sees exactly the calls it saw before v2 existed.
use crate::abi::{self, Shape, codes, v2};
use crate::error::{Result, WasmError};
use crate::host::{self, HostState, raw_output_schema};
use crate::input::Input;
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer, NextInput};
use adisk_diskos::job::CancelFlag;
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use wasmtime::{Config, Engine, Instance, Module, ResourceLimiter, Store, Trap, TypedFunc};

pub use crate::limits::{PAGE_BYTES, WasmLimits};
pub use crate::validate::ModuleFacts;

/// The engine shared by all user disklets of a disk.
#[derive(Clone)]
pub struct WasmRuntime {
    engine: Engine,
    limits: WasmLimits,
    _ticker: Arc<EpochTicker>,
}

/// How often running guests check whether their job was cancelled (the engine's epoch
/// advances this often; each check costs the guest a load and a compare).
pub const INTERRUPT_CHECK: std::time::Duration = std::time::Duration::from_millis(10);

/// Advances the engine's epoch every [`INTERRUPT_CHECK`] until the last runtime clone is
/// dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: Engine) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(INTERRUPT_CHECK);
                    engine.increment_epoch();
                }
            })
            .map_err(|e| WasmError::Registry(format!("cannot start the epoch thread: {e}")))?;
        Ok(EpochTicker { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl WasmRuntime {
    /// An engine with fuel metering and only the WebAssembly features the ABI allows.
    ///
    /// # Errors
    /// [`WasmError::Registry`] if the engine cannot be created on this machine.
    pub fn new(limits: WasmLimits) -> Result<Self> {
        let mut config = Config::new();
        config
            .consume_fuel(true)
            .epoch_interruption(true)
            .max_wasm_stack(limits.wasm_stack_bytes)
            .wasm_multi_memory(false)
            .wasm_memory64(false);
        let engine = Engine::new(&config)
            .map_err(|e| WasmError::Registry(format!("cannot create the wasm engine: {e}")))?;
        let ticker = Arc::new(EpochTicker::start(engine.clone())?);
        Ok(WasmRuntime {
            engine,
            limits,
            _ticker: ticker,
        })
    }

    /// The limits.
    pub fn limits(&self) -> &WasmLimits {
        &self.limits
    }

    /// Compiles a module (binary or WAT text) and validates it against its ABI version and the
    /// memory grant of `scratch_kib` (scratch + one input area per declared input).
    ///
    /// # Errors
    /// [`WasmError::ModuleTooLarge`], [`WasmError::Malformed`], [`WasmError::ForbiddenImport`],
    /// [`WasmError::Abi`], [`WasmError::Memory`].
    pub fn compile(&self, bytes: &[u8], scratch_kib: u64) -> Result<(Module, ModuleFacts)> {
        if bytes.len() as u64 > self.limits.module_bytes_max {
            return Err(WasmError::ModuleTooLarge {
                size_bytes: bytes.len() as u64,
                limit_bytes: self.limits.module_bytes_max,
            });
        }
        let started = Instant::now();
        let wasm = wat::parse_bytes(bytes).map_err(|e| WasmError::Malformed(format!("{e:#}")))?;
        let module = Module::from_binary(&self.engine, &wasm)
            .map_err(|e| WasmError::Malformed(format!("{e:#}")))?;
        let compile_ns = started.elapsed().as_nanos() as u64;
        let facts =
            crate::validate::validate(&module, &wasm, &self.limits, scratch_kib, compile_ns)?;
        Ok((module, facts))
    }
}

/// Parameters of one user disklet job.
pub struct WasmJob<'a> {
    /// Installed name.
    pub name: &'a str,
    /// `--param k=v` pairs.
    pub params: &'a BTreeMap<String, String>,
    /// Fuel budget asked for (None: the default).
    pub fuel: Option<u64>,
    /// Schemas of the input streams, in order.
    pub inputs: &'a [SchemaRef],
    /// ABI version, inputs and output ports the module declared.
    pub shape: Shape,
    /// Memory grant.
    pub grant_bytes: u64,
    /// Time spent compiling for this job (0 when the compiled module was cached).
    pub compile_ns: u64,
    /// The job's cancellation: the guest stops at its next interrupt check once it is set.
    pub cancel: CancelFlag,
}

/// The guest's `adisk_process`, by ABI version.
#[derive(Clone)]
enum ProcessFn {
    /// `(buf, len, position)`.
    V1(TypedFunc<(i32, i32, i64), i32>),
    /// `(input, buf, len, position)`.
    V2(TypedFunc<(i32, i32, i32, i64), i32>),
}

/// The exports a job calls after init.
struct Exports {
    process: ProcessFn,
    finish: TypedFunc<(), i32>,
    /// ABI v2 only.
    next_input: Option<TypedFunc<(), i32>>,
    /// ABI v2 only.
    input_ended: Option<TypedFunc<i32, i32>>,
}

impl Exports {
    fn get(store: &mut Store<HostState>, instance: &Instance, abi: u32) -> Result<Self> {
        let abi_err = |e: wasmtime::Error| WasmError::Abi(format!("{e:#}"));
        let finish = instance
            .get_typed_func(&mut *store, "adisk_finish")
            .map_err(abi_err)?;
        if abi == 1 {
            let process = ProcessFn::V1(
                instance
                    .get_typed_func(&mut *store, "adisk_process")
                    .map_err(abi_err)?,
            );
            return Ok(Exports {
                process,
                finish,
                next_input: None,
                input_ended: None,
            });
        }
        Ok(Exports {
            process: ProcessFn::V2(
                instance
                    .get_typed_func(&mut *store, "adisk_process")
                    .map_err(abi_err)?,
            ),
            finish,
            next_input: Some(
                instance
                    .get_typed_func(&mut *store, "adisk_next_input")
                    .map_err(abi_err)?,
            ),
            input_ended: Some(
                instance
                    .get_typed_func(&mut *store, "adisk_input_ended")
                    .map_err(abi_err)?,
            ),
        })
    }
}

/// A user disklet instance: one store, one instance, for the life of one job.
pub struct WasmDisklet {
    store: Store<HostState>,
    exports: Exports,
    inputs: Vec<Input>,
    input_capacity: usize,
    /// The input the guest asked for last (`None`: any).
    wanted: Option<usize>,
    output_schemas: Vec<SchemaRef>,
    fuel: u64,
    encoded: Vec<u8>,
    failed: bool,
    /// The guest returned DONE: it takes no more input.
    done: bool,
    compile_ns: u64,
    instantiate_ns: u64,
}

fn is_file_schema(schema: &Schema) -> bool {
    let f = schema.fields();
    f.len() == 2
        && f[0].name() == "offset"
        && f[1].name() == "bytes"
        && *f[1].data_type() == DataType::Binary
}

impl std::fmt::Debug for WasmDisklet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmDisklet")
            .field("name", &self.store.data().name)
            .field("fuel", &self.fuel)
            .finish_non_exhaustive()
    }
}

/// Checks the job's inputs against the module's shape and the types ADT1 carries.
fn check_inputs(job: &WasmJob<'_>) -> Result<()> {
    if job.inputs.len() != job.shape.inputs as usize {
        return Err(WasmError::InvalidJob(format!(
            "user disklet `{}` (ABI v{}) takes {} input(s), the stage wires {}",
            job.name,
            job.shape.abi,
            job.shape.inputs,
            job.inputs.len()
        )));
    }
    job.inputs
        .iter()
        .filter(|s| !is_file_schema(s))
        .try_for_each(|s| abi::check_input_schema(s))
}

/// The init parameters: the user's `key=value` lines, then the host's description of the
/// inputs (ABI v1: `_input`, `_columns`; v2: `_inputs`, `_outputs`, and per input `i`
/// `_input.i`, `_columns.i` and, for tables, `_types.i`).
fn params_text(job: &WasmJob<'_>) -> String {
    let mut text: String = job
        .params
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect();
    let kind = |s: &SchemaRef| if is_file_schema(s) { "bytes" } else { "table" };
    let names = |s: &SchemaRef| {
        s.fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    if job.shape.abi == 1 {
        let input = &job.inputs[0];
        text.push_str(&format!(
            "_input={}\n_columns={}\n",
            kind(input),
            names(input)
        ));
        return text;
    }
    text.push_str(&format!(
        "_inputs={}\n_outputs={}\n",
        job.inputs.len(),
        job.shape.outputs
    ));
    for (i, s) in job.inputs.iter().enumerate() {
        text.push_str(&format!(
            "_input.{i}={}\n_columns.{i}={}\n",
            kind(s),
            names(s)
        ));
        if !is_file_schema(s) {
            let types: Vec<String> = s
                .fields()
                .iter()
                .filter_map(|f| abi::type_name(f.data_type()))
                .collect();
            text.push_str(&format!("_types.{i}={}\n", types.join(",")));
        }
    }
    text
}

/// Asks the guest for one input area per input (ABI v1 `adisk_input_area(capacity)`, v2
/// `adisk_input_area(input, capacity)`): each inside memory, none overlapping another.
fn reserve_areas(
    store: &mut Store<HostState>,
    instance: &Instance,
    job: &WasmJob<'_>,
    capacity: usize,
    fuel: u64,
) -> Result<Vec<u32>> {
    let abi_err = |e: wasmtime::Error| WasmError::Abi(format!("{e:#}"));
    let trap = |e: wasmtime::Error| classify(e, job.name, fuel, "init");
    let mut areas: Vec<u32> = Vec::with_capacity(job.inputs.len());
    for i in 0..job.inputs.len() {
        let (area, call) = if job.shape.abi == 1 {
            let f: TypedFunc<i32, i32> = instance
                .get_typed_func(&mut *store, "adisk_input_area")
                .map_err(abi_err)?;
            (
                f.call(&mut *store, capacity as i32).map_err(trap)?,
                format!("adisk_input_area({capacity})"),
            )
        } else {
            let f: TypedFunc<(i32, i32), i32> = instance
                .get_typed_func(&mut *store, "adisk_input_area")
                .map_err(abi_err)?;
            (
                f.call(&mut *store, (i as i32, capacity as i32))
                    .map_err(trap)?,
                format!("adisk_input_area({i}, {capacity})"),
            )
        };
        let memory_len = store.data().memory.map_or(0, |m| m.data_size(&*store));
        let refuse = |why: String| WasmError::Guest {
            name: job.name.to_string(),
            phase: "init",
            message: format!("{call} returned {area}, {why}"),
        };
        if area <= 0 || (area as usize).saturating_add(capacity) > memory_len {
            return Err(refuse(format!(
                "not a region inside the {memory_len}-byte memory (is the grant too small?)"
            )));
        }
        if let Some(other) = areas
            .iter()
            .position(|a| (*a as usize).abs_diff(area as usize) < capacity)
        {
            return Err(refuse(format!(
                "which overlaps the input area of input {other}"
            )));
        }
        areas.push(area as u32);
    }
    Ok(areas)
}

/// Copies the parameters into input area 0 and runs the guest's init.
fn run_init(
    store: &mut Store<HostState>,
    instance: &Instance,
    job: &WasmJob<'_>,
    area: u32,
    capacity: usize,
    fuel: u64,
) -> Result<()> {
    let text = params_text(job);
    if text.len() > capacity {
        return Err(WasmError::InvalidJob(format!(
            "parameters take {} bytes, more than the {capacity}-byte input area",
            text.len()
        )));
    }
    let memory = store
        .data()
        .memory
        .ok_or_else(|| WasmError::Abi("no exported memory".into()))?;
    memory.data_mut(&mut *store)[area as usize..area as usize + text.len()]
        .copy_from_slice(text.as_bytes());
    let init: TypedFunc<(i32, i32), i32> = instance
        .get_typed_func(&mut *store, "adisk_init")
        .map_err(|e| WasmError::Abi(format!("{e:#}")))?;
    let rc = init
        .call(&mut *store, (area as i32, text.len() as i32))
        .map_err(|e| classify(e, job.name, fuel, "init"))?;
    if rc != codes::OK {
        return Err(WasmError::Guest {
            name: job.name.to_string(),
            phase: "init",
            message: codes::describe(rc),
        });
    }
    store.data_mut().in_init = false;
    Ok(())
}

impl WasmDisklet {
    /// Instantiates `module` for one job, reserves its input areas, runs its init and asks
    /// which input it wants first.
    ///
    /// # Errors
    /// [`WasmError::InvalidJob`] (input count or types, fuel, parameters too long), and any
    /// run-time failure of `adisk_input_area` / `adisk_init` / `adisk_next_input` (trap,
    /// budget, error code).
    pub fn new(runtime: &WasmRuntime, module: &Module, job: WasmJob<'_>) -> Result<Self> {
        let started = Instant::now();
        let limits = runtime.limits.clone();
        check_inputs(&job)?;
        let fuel = job.fuel.unwrap_or(limits.fuel_default);
        if fuel == 0 || fuel > limits.fuel_max {
            return Err(WasmError::InvalidJob(format!(
                "fuel budget {fuel} is outside 1..={}",
                limits.fuel_max
            )));
        }
        let state = HostState::new(
            job.name,
            limits.clone(),
            job.grant_bytes,
            job.inputs.len(),
            job.shape.outputs as usize,
        );
        let mut store = Store::new(&runtime.engine, state);
        store.limiter(|s| s as &mut dyn ResourceLimiter);
        store
            .set_fuel(fuel)
            .map_err(|e| WasmError::Registry(format!("fuel: {e}")))?;
        interrupt_on_cancel(&mut store, job.cancel.clone());
        let linker = host::linker(&runtime.engine)
            .map_err(|e| WasmError::Registry(format!("linker: {e}")))?;
        let instance: Instance = linker
            .instantiate(&mut store, module)
            .map_err(|e| classify(e, job.name, fuel, "init"))?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| WasmError::Abi("no exported memory".into()))?;
        store.data_mut().memory = Some(memory);
        let exports = Exports::get(&mut store, &instance, job.shape.abi)?;
        let input_capacity = limits.input_area_bytes() as usize;
        let areas = reserve_areas(&mut store, &instance, &job, input_capacity, fuel)?;
        run_init(&mut store, &instance, &job, areas[0], input_capacity, fuel)?;
        let output_schemas = store
            .data()
            .output_schemas
            .iter()
            .map(|s| s.clone().unwrap_or_else(raw_output_schema))
            .collect();
        let inputs = job
            .inputs
            .iter()
            .zip(areas)
            .map(|(s, area)| Input::new(area, s.clone(), is_file_schema(s)))
            .collect();
        let mut d = WasmDisklet {
            store,
            exports,
            inputs,
            input_capacity,
            wanted: None,
            output_schemas,
            fuel,
            encoded: Vec::with_capacity(input_capacity),
            failed: false,
            done: false,
            compile_ns: job.compile_ns,
            instantiate_ns: 0,
        };
        d.wanted = d.ask_next_input()?;
        d.instantiate_ns = started.elapsed().as_nanos() as u64;
        Ok(d)
    }

    /// Compile time (0 when cached) and instantiate+init time of this instance, ns.
    pub fn setup_ns(&self) -> (u64, u64) {
        (self.compile_ns, self.instantiate_ns)
    }

    /// Fuel used so far.
    pub fn fuel_used(&self) -> u64 {
        self.fuel - self.store.get_fuel().unwrap_or(0)
    }

    /// Output ports.
    pub fn output_ports(&self) -> usize {
        self.output_schemas.len()
    }

    /// Schema of output port `port` (raw `bytes` unless the guest declared one).
    ///
    /// # Panics
    /// If `port` is not one of the disklet's ports.
    pub fn port_schema(&self, port: usize) -> SchemaRef {
        self.output_schemas[port].clone()
    }

    /// The input the guest wants its next buffer from.
    pub fn next_input(&self) -> NextInput {
        match self.wanted {
            Some(i) if !self.inputs[i].told_ended => NextInput::Input(i),
            _ => NextInput::Any,
        }
    }

    fn check_alive(&self) -> Result<()> {
        if self.failed {
            return Err(WasmError::Guest {
                name: self.store.data().name.clone(),
                phase: "process",
                message: "the instance already failed".into(),
            });
        }
        Ok(())
    }

    /// Calls into the guest with a fresh per-call output allowance, then moves what it emitted
    /// and the skips it asked for to `out`. A trap or exhausted budget becomes a typed error
    /// and leaves the instance unusable.
    fn call<R>(
        &mut self,
        phase: &'static str,
        out: &mut Emitter,
        f: impl FnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R> {
        self.store.data_mut().call_output_bytes = 0;
        let result = f(&mut self.store);
        self.drain(out);
        result.map_err(|e| {
            self.failed = true;
            classify(e, &self.store.data().name, self.fuel, phase)
        })
    }

    /// A return code: true for DONE (where `done_allowed`), false for OK, else the job fails.
    fn code(&mut self, phase: &'static str, rc: i32, done_allowed: bool) -> Result<bool> {
        match rc {
            codes::OK => Ok(false),
            codes::DONE if done_allowed => Ok(true),
            other => {
                self.failed = true;
                Err(WasmError::Guest {
                    name: self.store.data().name.clone(),
                    phase,
                    message: codes::describe(other),
                })
            }
        }
    }

    fn drain(&mut self, out: &mut Emitter) {
        let state = self.store.data_mut();
        for (port, b) in state.pending.drain(..) {
            out.emit(port, b);
        }
        for (input, s) in state.skips.drain(..) {
            out.skip_input(input, s);
        }
    }

    /// Which input the guest wants next (ABI v2 `adisk_next_input`; v1: any). Output it emits
    /// here leaves with the next call's.
    fn ask_next_input(&mut self) -> Result<Option<usize>> {
        let Some(f) = &self.exports.next_input else {
            return Ok(None);
        };
        let result = f.call(&mut self.store, ());
        let rc = result.map_err(|e| {
            self.failed = true;
            classify(e, &self.store.data().name, self.fuel, "next_input")
        })?;
        match usize::try_from(rc) {
            _ if rc == v2::ANY_INPUT => Ok(None),
            Ok(i) if i < self.inputs.len() => Ok(Some(i)),
            _ => {
                self.failed = true;
                let message = format!(
                    "adisk_next_input returned {rc}; the disklet has {} input(s) (-1: any)",
                    self.inputs.len()
                );
                Err(WasmError::Guest {
                    name: self.store.data().name.clone(),
                    phase: "next_input",
                    message,
                })
            }
        }
    }

    /// The input to hand the guest something from now: the one it wants if that has something
    /// ready, or, when it wants any (or one that ended), the first that has.
    fn deliverable(&self) -> Option<usize> {
        if self.done {
            return None;
        }
        match self.wanted {
            Some(i) if !self.inputs[i].told_ended => self.inputs[i].ready().then_some(i),
            _ => self.inputs.iter().position(Input::ready),
        }
    }

    /// Hands the guest chunks and input ends while it wants something that is ready.
    fn pump(&mut self, out: &mut Emitter) -> Result<()> {
        while let Some(i) = self.deliverable() {
            let done = if self.inputs[i].queue.is_empty() {
                self.tell_ended(i, out)?
            } else {
                self.deliver_chunk(i, out)?
            };
            if done {
                self.stop(out);
                return Ok(());
            }
            self.wanted = self.ask_next_input()?;
        }
        Ok(())
    }

    /// The guest returned DONE: it takes no more input from any input.
    fn stop(&mut self, out: &mut Emitter) {
        self.done = true;
        self.inputs.iter_mut().for_each(|i| i.queue.clear());
        out.done();
    }

    fn deliver_chunk(&mut self, i: usize, out: &mut Emitter) -> Result<bool> {
        let mut encoded = std::mem::take(&mut self.encoded);
        let result = self.inputs[i]
            .next_chunk(self.input_capacity, &mut encoded)
            .and_then(|position| self.call_process(i, &encoded, position, out));
        self.encoded = encoded;
        result
    }

    /// Copies one chunk into input `i`'s area and calls process; true if the guest is DONE.
    fn call_process(
        &mut self,
        i: usize,
        data: &[u8],
        position: u64,
        out: &mut Emitter,
    ) -> Result<bool> {
        let area = self.inputs[i].area;
        let memory = self
            .store
            .data()
            .memory
            .ok_or_else(|| WasmError::Abi("no exported memory".into()))?;
        memory.data_mut(&mut self.store)[area as usize..area as usize + data.len()]
            .copy_from_slice(data);
        let (buf, len, pos) = (area as i32, data.len() as i32, position as i64);
        let rc = match self.exports.process.clone() {
            ProcessFn::V1(f) => self.call("process", out, |s| f.call(s, (buf, len, pos)))?,
            ProcessFn::V2(f) => {
                self.call("process", out, |s| f.call(s, (i as i32, buf, len, pos)))?
            }
        };
        self.code("process", rc, true)
    }

    /// Tells the guest input `i` ended (ABI v2 `adisk_input_ended`); true if it is DONE.
    fn tell_ended(&mut self, i: usize, out: &mut Emitter) -> Result<bool> {
        self.inputs[i].told_ended = true;
        let Some(f) = self.exports.input_ended.clone() else {
            return Ok(false);
        };
        let rc = self.call("input_ended", out, |s| f.call(s, i as i32))?;
        self.code("input_ended", rc, true)
    }

    /// Processes one buffer of input `input`: an Arrow batch (table input) or the byte rows of a
    /// file stream, handed over in input-area-sized chunks as the guest asks for them.
    ///
    /// # Errors
    /// See [`WasmError`]; the instance is unusable afterwards.
    pub fn process_input(
        &mut self,
        input: usize,
        batch: &RecordBatch,
        position: u64,
        out: &mut Emitter,
    ) -> Result<()> {
        self.check_alive()?;
        let count = self.inputs.len();
        let slot = self.inputs.get_mut(input).ok_or_else(|| {
            WasmError::InvalidJob(format!(
                "a buffer of input {input}, but the disklet has {count}"
            ))
        })?;
        if !self.done {
            slot.push(batch, position)?;
        }
        self.pump(out)
    }

    /// Processes one buffer of the (first) input.
    ///
    /// # Errors
    /// See [`WasmDisklet::process_input`].
    pub fn process_batch(
        &mut self,
        batch: &RecordBatch,
        position: u64,
        out: &mut Emitter,
    ) -> Result<()> {
        self.process_input(0, batch, position, out)
    }

    /// Input `input` ended: the guest is told once it has been handed the input's last chunk.
    ///
    /// # Errors
    /// See [`WasmError`].
    pub fn end_input(&mut self, input: usize, out: &mut Emitter) -> Result<()> {
        self.check_alive()?;
        if let Some(slot) = self.inputs.get_mut(input) {
            slot.ended = true;
        }
        self.pump(out)
    }

    /// Ends every input (handing over what is queued, unless the guest is DONE) and calls the
    /// guest's finish.
    ///
    /// # Errors
    /// See [`WasmError`].
    pub fn finish_job(&mut self, out: &mut Emitter) -> Result<()> {
        self.check_alive()?;
        self.inputs.iter_mut().for_each(|i| i.ended = true);
        self.pump(out)?;
        let f = self.exports.finish.clone();
        let rc = self.call("finish", out, |s| f.call(s, ()))?;
        self.code("finish", rc, false).map(|_| ())
    }

    /// Bytes of guest memory in use.
    pub fn memory_bytes(&self) -> u64 {
        self.store
            .data()
            .memory
            .map_or(0, |m| m.data_size(&self.store) as u64)
    }
}

/// Turns a wasmtime error into a typed [`WasmError`].
/// At every epoch tick the guest checks `cancel` and stops with [`WasmError::Cancelled`]
/// once it is set (the phase is named by [`classify`]'s caller).
fn interrupt_on_cancel(store: &mut Store<HostState>, cancel: CancelFlag) {
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if cancel.is_set() {
            Err(WasmError::Cancelled {
                name: String::new(),
                phase: "",
            }
            .into())
        } else {
            Ok(wasmtime::UpdateDeadline::Continue(1))
        }
    });
}

fn classify(e: wasmtime::Error, name: &str, fuel: u64, phase: &'static str) -> WasmError {
    let e = match e.downcast::<WasmError>() {
        Ok(WasmError::Cancelled { .. }) => {
            return WasmError::Cancelled {
                name: name.to_string(),
                phase,
            };
        }
        Ok(typed) => return typed,
        Err(e) => e,
    };
    let cancelled = |c: &(dyn std::error::Error + 'static)| {
        matches!(
            c.downcast_ref::<WasmError>(),
            Some(WasmError::Cancelled { .. })
        )
    };
    if e.chain().any(cancelled) {
        return WasmError::Cancelled {
            name: name.to_string(),
            phase,
        };
    }
    if let Some(trap) = e.downcast_ref::<Trap>() {
        if *trap == Trap::OutOfFuel {
            return WasmError::BudgetExceeded {
                name: name.to_string(),
                fuel,
                phase,
            };
        }
        return WasmError::Trap {
            name: name.to_string(),
            phase,
            message: trap.to_string(),
        };
    }
    if let Some(typed) = e.chain().find_map(|c| c.downcast_ref::<WasmError>()) {
        return WasmError::Trap {
            name: name.to_string(),
            phase,
            message: typed.to_string(),
        };
    }
    WasmError::Trap {
        name: name.to_string(),
        phase,
        message: format!("{e:#}"),
    }
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
        self.0.port_schema(0)
    }
    fn output_ports(&self) -> usize {
        self.0.output_ports()
    }
    fn port_schema(&self, port: usize) -> SchemaRef {
        self.0.port_schema(port)
    }
    fn next_input(&self) -> NextInput {
        self.0.next_input()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> adisk_diskos::Result<()> {
        self.0
            .process_input(input.input, input.batch, input.position, out)
            .map_err(to_os)
    }
    fn input_ended(&mut self, input: usize, out: &mut Emitter) -> adisk_diskos::Result<()> {
        self.0.end_input(input, out).map_err(to_os)
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
}
