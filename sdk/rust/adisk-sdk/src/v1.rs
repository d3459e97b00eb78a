//! ABI v1: one input, one output (imports from `adisk_v1`). C: `adisk.h`.
//!
//! A v1 module imports only from `adisk_v1`: do not mix these functions with [`crate::v2`]'s
//! in one module (the disk refuses it: `the module mixes ABI versions`).
use crate::{Params, Result, check};

#[cfg(target_arch = "wasm32")]
mod sys {
    #[link(wasm_import_module = "adisk_v1")]
    unsafe extern "C" {
        pub fn emit(ptr: *const u8, len: i32) -> i32;
        pub fn declare_output(ptr: *const u8, len: i32) -> i32;
        pub fn skip(start: i64, end: i64);
        pub fn log(ptr: *const u8, len: i32);
    }
}

/// Off wasm32 (unit tests, `cargo check` on the host) the imports do nothing and fail.
#[cfg(not(target_arch = "wasm32"))]
#[allow(clippy::missing_safety_doc)]
mod sys {
    pub unsafe fn emit(_: *const u8, _: i32) -> i32 {
        -4
    }
    pub unsafe fn declare_output(_: *const u8, _: i32) -> i32 {
        -4
    }
    pub unsafe fn skip(_: i64, _: i64) {}
    pub unsafe fn log(_: *const u8, _: i32) {}
}

fn len(bytes: &[u8]) -> i32 {
    i32::try_from(bytes.len()).unwrap_or(i32::MAX)
}

/// Emits one output record: raw bytes (one row of a `bytes: Binary` column), or, after
/// [`declare_output`], one ADT1 table ([`crate::TableWriter`], [`emit_i64_table`]).
/// [`crate::Error::BadBuffer`] if the host finds it malformed.
pub fn emit(record: &[u8]) -> Result {
    // SAFETY: the host reads `record.len()` bytes at `record`, which are ours.
    check(unsafe { sys::emit(record.as_ptr(), len(record)) })
}

/// Declares the output a table of schema `spec`: `name:type,…`, types `int32 int64 float64
/// date32 utf8 binary bool decimal64(S)`. In `init` only.
pub fn declare_output(spec: &str) -> Result {
    // SAFETY: as in `emit`.
    check(unsafe { sys::declare_output(spec.as_ptr(), len(spec.as_bytes())) })
}

/// Asks the input to skip rows (tables) or bytes (files) `[start, end)`; advisory.
pub fn skip(start: i64, end: i64) {
    // SAFETY: no memory is passed.
    unsafe { sys::skip(start, end) }
}

/// Writes a log line (at most 1 KiB, 64 lines per job) at the disk's `info` level.
pub fn log(line: &[u8]) {
    // SAFETY: as in `emit`.
    unsafe { sys::log(line.as_ptr(), len(line)) }
}

/// [`log`] of a `&str`.
pub fn log_str(line: &str) {
    log(line.as_bytes())
}

/// Builds INT64 `columns` (no nulls, equal lengths) as one ADT1 table in `scratch`
/// ([`crate::i64_table_len`] bytes) and emits it. C: `adisk_emit_i64_table`.
pub fn emit_i64_table(scratch: &mut [u8], columns: &[&[i64]]) -> Result {
    emit(crate::i64_table(scratch, columns)?)
}

/// An ABI v1 disklet; [`crate::export_v1!`] turns it into the module's exports.
pub trait Disklet {
    /// `adisk_init`: the parameters; declare the output here. They are overwritten after
    /// this call: keep what you need ([`crate::Kept`]).
    fn init(&mut self, params: Params<'_>) -> Result;
    /// `adisk_process`: one input buffer (an ADT1 table, or raw bytes for a file input) whose
    /// first row (byte) is at stream `position`. It is overwritten after this call.
    fn process(&mut self, buf: &[u8], position: i64) -> Result<crate::Flow>;
    /// `adisk_finish`: the end of the input.
    fn finish(&mut self) -> Result;
}

/// Defines the ABI v1 exports (`adisk_input_area`, `adisk_init`, `adisk_process`,
/// `adisk_finish`) over a [`v1::Disklet`](crate::v1::Disklet) kept in a static initialised
/// with a constant expression:
///
/// ```ignore
/// adisk_sdk::export_v1!(CountIf = CountIf::new());   // const fn new() -> CountIf
/// ```
///
/// `adisk_input_area` grows memory by the capacity asked for ([`crate::input_area`]). Use it
/// once per module. The module's `memory` export comes from the linker.
#[macro_export]
macro_rules! export_v1 {
    ($ty:ty = $init:expr) => {
        static __ADISK_DISKLET: $crate::Global<$ty> = $crate::Global::new($init);

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_input_area(capacity: i32) -> i32 {
            $crate::input_area(capacity)
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_init(params: i32, len: i32) -> i32 {
            // SAFETY: the host put `len` bytes of parameters at `params`, inside memory, and
            // calls one export at a time.
            let (state, params) =
                unsafe { (__ADISK_DISKLET.get_mut(), $crate::host_slice(params, len)) };
            $crate::status($crate::v1::Disklet::init(
                state,
                $crate::Params::new(params),
            ))
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_process(buf: i32, len: i32, position: i64) -> i32 {
            // SAFETY: as in `adisk_init`: one buffer of `len` bytes at `buf`.
            let (state, buf) = unsafe { (__ADISK_DISKLET.get_mut(), $crate::host_slice(buf, len)) };
            $crate::status_flow($crate::v1::Disklet::process(state, buf, position))
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_finish() -> i32 {
            // SAFETY: as in `adisk_init`.
            let state = unsafe { __ADISK_DISKLET.get_mut() };
            $crate::status($crate::v1::Disklet::finish(state))
        }
    };
}
