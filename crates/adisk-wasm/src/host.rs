//! The host side of the imports (`adisk_v1` and `adisk_v2`): what a guest can ask of the disk
//! during a call — emit on a port, ask an input to skip, log, declare an output's schema — and
//! the per-store state they act on, with the memory grant as a [`ResourceLimiter`].
use crate::abi::{self, codes, v2};
use crate::error::WasmError;
use crate::limits::WasmLimits;
use arrow::array::{BinaryArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::ops::Range;
use std::sync::Arc;
use wasmtime::{Caller, Engine, Linker, Memory, ResourceLimiter};

/// Per-store state the imports see.
pub(crate) struct HostState {
    pub name: String,
    pub limits: WasmLimits,
    pub grant_bytes: u64,
    pub memory: Option<Memory>,
    pub in_init: bool,
    /// Declared schema of each output port (`None`: raw bytes).
    pub output_schemas: Vec<Option<SchemaRef>>,
    /// Inputs of the disklet (skip requests name one).
    pub inputs: usize,
    /// Batches emitted during the current call, by port.
    pub pending: Vec<(usize, RecordBatch)>,
    /// Skip requests of the current call, by input.
    pub skips: Vec<(usize, Range<u64>)>,
    pub call_output_bytes: u64,
    pub job_output_bytes: u64,
    pub log_lines: u32,
}

impl HostState {
    pub fn new(
        name: &str,
        limits: WasmLimits,
        grant_bytes: u64,
        inputs: usize,
        outputs: usize,
    ) -> Self {
        HostState {
            name: name.to_string(),
            limits,
            grant_bytes,
            memory: None,
            in_init: true,
            output_schemas: vec![None; outputs],
            inputs,
            pending: Vec::new(),
            skips: Vec::new(),
            call_output_bytes: 0,
            job_output_bytes: 0,
            log_lines: 0,
        }
    }
}

impl ResourceLimiter for HostState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.grant_bytes {
            return Err(wasmtime::Error::new(WasmError::MemoryExceeded {
                name: self.name.clone(),
                desired_bytes: desired as u64,
                grant_bytes: self.grant_bytes,
            }));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
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

/// The schema of a port nothing was declared for: one raw record per `emit`.
pub(crate) fn raw_output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "bytes",
        DataType::Binary,
        false,
    )]))
}

fn guest_bytes(caller: &Caller<'_, HostState>, ptr: i32, len: i32) -> Option<Vec<u8>> {
    let memory = caller.data().memory?;
    let data = memory.data(caller);
    let (start, len) = (usize::try_from(ptr).ok()?, usize::try_from(len).ok()?);
    data.get(start..start.checked_add(len)?).map(<[u8]>::to_vec)
}

/// Both versions' imports; a v1 module's `emit`, `skip` and `declare_output` act on port 0 and
/// input 0.
pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let (m1, m2) = (abi::IMPORT_MODULE, v2::IMPORT_MODULE);
    let mut linker = Linker::new(engine);
    linker.func_wrap(
        m1,
        "emit",
        |c: Caller<'_, HostState>, ptr: i32, len: i32| emit(c, 0, ptr, len),
    )?;
    linker.func_wrap(m2, "emit", emit)?;
    linker.func_wrap(
        m1,
        "skip",
        |c: Caller<'_, HostState>, start: i64, end: i64| skip(c, 0, start, end),
    )?;
    linker.func_wrap(m2, "skip", skip)?;
    linker.func_wrap(m1, "log", log)?;
    linker.func_wrap(m2, "log", log)?;
    linker.func_wrap(
        m1,
        "declare_output",
        |c: Caller<'_, HostState>, ptr: i32, len: i32| declare_output(c, 0, ptr, len),
    )?;
    linker.func_wrap(m2, "declare_output", declare_output)?;
    Ok(linker)
}

fn skip(
    mut caller: Caller<'_, HostState>,
    input: i32,
    start: i64,
    end: i64,
) -> wasmtime::Result<()> {
    let state = caller.data_mut();
    if state.skips.len() >= state.limits.skips_per_call {
        return Err(wasmtime::Error::new(WasmError::OutputExceeded {
            name: state.name.clone(),
            detail: format!(
                "more than {} skip requests in one call",
                state.limits.skips_per_call
            ),
        }));
    }
    let (start, end) = (start as u64, end as u64);
    // Advisory: a request naming no input of the disklet is ignored.
    if let Ok(input) = usize::try_from(input)
        && input < state.inputs
        && start < end
    {
        state.skips.push((input, start..end));
    }
    Ok(())
}

fn log(mut caller: Caller<'_, HostState>, ptr: i32, len: i32) {
    let text = guest_bytes(&caller, ptr, len.clamp(0, 1024))
        .map(|b| String::from_utf8_lossy(&b).to_string())
        .unwrap_or_else(|| "<log buffer out of bounds>".into());
    let state = caller.data_mut();
    if state.log_lines < state.limits.log_lines_per_job {
        state.log_lines += 1;
        tracing::info!(disklet = %state.name, "{text}");
    }
}

/// The port index if `port` is one of the disklet's output ports.
fn port_index(state: &HostState, port: i32) -> Option<usize> {
    usize::try_from(port)
        .ok()
        .filter(|p| *p < state.output_schemas.len())
}

fn declare_output(mut caller: Caller<'_, HostState>, port: i32, ptr: i32, len: i32) -> i32 {
    let Some(text) = guest_bytes(&caller, ptr, len.clamp(0, 64 * 1024)) else {
        return codes::BAD_BUFFER;
    };
    let state = caller.data_mut();
    if !state.in_init {
        return codes::BAD_BUFFER;
    }
    let Some(port) = port_index(state, port) else {
        return codes::BAD_PORT;
    };
    match abi::parse_output_spec(&String::from_utf8_lossy(&text)) {
        Ok(schema) => {
            state.output_schemas[port] = Some(schema);
            codes::OK
        }
        Err(why) => {
            tracing::info!(disklet = %state.name, "declare_output refused: {why}");
            codes::BAD_BUFFER
        }
    }
}

/// Counts `len` bytes against the per-call and per-job output limits.
fn charge_output(state: &mut HostState, len: i32) -> wasmtime::Result<()> {
    let len_bytes = u64::try_from(len).unwrap_or(0);
    state.call_output_bytes += len_bytes;
    state.job_output_bytes += len_bytes;
    let exceeded = |detail: String| {
        Err(wasmtime::Error::new(WasmError::OutputExceeded {
            name: state.name.clone(),
            detail,
        }))
    };
    if state.call_output_bytes > state.limits.output_bytes_per_call {
        return exceeded(format!(
            "more than {} bytes emitted in one call",
            state.limits.output_bytes_per_call
        ));
    }
    if state.job_output_bytes > state.limits.output_bytes_per_job {
        return exceeded(format!(
            "more than {} bytes emitted by the job",
            state.limits.output_bytes_per_job
        ));
    }
    Ok(())
}

fn emit(mut caller: Caller<'_, HostState>, port: i32, ptr: i32, len: i32) -> wasmtime::Result<i32> {
    let Some(port) = port_index(caller.data(), port) else {
        return Ok(codes::BAD_PORT);
    };
    charge_output(caller.data_mut(), len)?;
    let Some(bytes) = guest_bytes(&caller, ptr, len) else {
        return Ok(codes::BAD_BUFFER);
    };
    let state = caller.data_mut();
    let batch = match &state.output_schemas[port] {
        None => RecordBatch::try_new(
            raw_output_schema(),
            vec![Arc::new(BinaryArray::from(vec![bytes.as_slice()]))],
        )
        .map_err(|e| wasmtime::Error::msg(e.to_string()))?,
        Some(schema) => match abi::decode(&bytes, schema) {
            Ok(b) => b,
            Err(why) => {
                tracing::info!(disklet = %state.name, "emit refused: {why}");
                return Ok(codes::BAD_BUFFER);
            }
        },
    };
    state.pending.push((port, batch));
    Ok(codes::OK)
}
