//! The limits every user disklet of a disk runs under: module size, fuel, output, input area
//! and memory grant.

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
        self.grant_bytes_for(scratch_kib, 1)
    }

    /// Memory grant of a disklet with `inputs` inputs: scratch + one input area per input.
    pub fn grant_bytes_for(&self, scratch_kib: u64, inputs: u32) -> u64 {
        scratch_kib
            .saturating_mul(1024)
            .saturating_add(self.input_area_bytes().saturating_mul(u64::from(inputs)))
    }
}
