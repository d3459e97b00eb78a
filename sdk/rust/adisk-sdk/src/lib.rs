//! Write ActiveDisk user disklets in Rust: the counterpart of the C SDK (`sdk/c/adisk.h`,
//! `adisk2.h`) for `wasm32-unknown-unknown`. The ABI is specified in `docs/disklet-abi.md`.
//!
//! * [`v1`]: ABI v1 (one input, one output): the `adisk_v1` imports as safe functions, the
//!   [`v1::Disklet`] trait and [`export_v1!`], which defines the four exports.
//! * [`v2`]: ABI v2 (several inputs and output ports): the `adisk_v2` imports, [`v2::Disklet`]
//!   and [`export_v2!`] (six exports and the `adisk_v2` shape section).
//! * [`Params`]: the `key=value` lines handed to `adisk_init`, [`Kept`] to keep them past init,
//!   [`parse_scaled`] and [`parse_date`] (the C SDK's literal parsers, byte for byte).
//! * [`Table`] and [`Column`]: read ADT1 input buffers (bounds-checked, never unsafe);
//!   [`TableWriter`]: build ADT1 output tables in a buffer of yours.
//!
//! Memory is what the C SDK does: no allocator. State lives in one static (the value given to
//! the export macro, usually all zeros so that it costs no bytes in the module), the input area
//! is reserved by growing linear memory ([`grow`]), and output tables are built in buffers
//! inside that state. The module's memory maximum must fit the grant (scratch + one input area
//! per input): the examples' `build.rs` passes `--max-memory` (default 2048 KiB) and a 64 KiB
//! stack to the linker.
//!
//! A v1 disklet:
//!
//! ```no_run
//! use adisk_sdk::{Flow, Params, Result, Table, v1};
//!
//! struct Rows { n: i64, out: [u8; 64] }
//!
//! impl v1::Disklet for Rows {
//!     fn init(&mut self, _params: Params<'_>) -> Result {
//!         v1::declare_output("rows:int64")
//!     }
//!     fn process(&mut self, buf: &[u8], _position: i64) -> Result<Flow> {
//!         self.n += Table::open(buf)?.rows() as i64;
//!         Ok(Flow::Continue)
//!     }
//!     fn finish(&mut self) -> Result {
//!         v1::emit_i64_table(&mut self.out, &[&[self.n]])
//!     }
//! }
//!
//! adisk_sdk::export_v1!(Rows = Rows { n: 0, out: [0; 64] });
//! ```
#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]

mod params;
mod table;
pub mod v1;
pub mod v2;

pub use params::{Kept, Params, Span, parse_date, parse_scaled};
pub use table::{Column, ColumnType, Table, TableWriter, Value, Values, i64_table, i64_table_len};

use core::cell::UnsafeCell;

/// Magic of an ADT1 buffer ("ADT1" little-endian).
pub const ADT1_MAGIC: u32 = u32::from_le_bytes(*b"ADT1");

/// Return code: success.
pub const OK: i32 = 0;
/// Return code of `adisk_process` / `adisk_input_ended`: no more input is needed.
pub const DONE: i32 = 1;

/// A failure: the negative return codes of the ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// `-1`: a parameter is missing or malformed.
    BadParam,
    /// `-2`: the input does not have the columns or types the disklet expects.
    BadInput,
    /// `-3`: the disklet's own scratch is exhausted.
    NoScratch,
    /// `-4`: any other failure.
    Failed,
    /// `-5`: `emit` / `declare_output` refused a malformed buffer.
    BadBuffer,
    /// `-6` (ABI v2): no such output port.
    BadPort,
    /// Any other negative code.
    Code(i32),
}

impl Error {
    /// The return code (negative).
    pub const fn code(self) -> i32 {
        match self {
            Error::BadParam => -1,
            Error::BadInput => -2,
            Error::NoScratch => -3,
            Error::Failed => -4,
            Error::BadBuffer => -5,
            Error::BadPort => -6,
            Error::Code(c) => c,
        }
    }

    /// The error a return code stands for; `None` for `0` and positive codes.
    pub const fn from_code(code: i32) -> Option<Error> {
        Some(match code {
            -1 => Error::BadParam,
            -2 => Error::BadInput,
            -3 => Error::NoScratch,
            -4 => Error::Failed,
            -5 => Error::BadBuffer,
            -6 => Error::BadPort,
            c if c < 0 => Error::Code(c),
            _ => return None,
        })
    }
}

/// `Result<T, Error>`; `Result` alone is `Result<(), Error>`.
pub type Result<T = (), E = Error> = core::result::Result<T, E>;

/// What `process` (and, ABI v2, `input_ended`) tells the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// `0`: go on.
    Continue,
    /// `1` (DONE): no more input is needed; the rest is skipped and `finish` follows.
    Done,
}

/// Turns an import's return code into a `Result`.
pub(crate) fn check(code: i32) -> Result {
    match Error::from_code(code) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The return code of an export returning `Result`.
#[doc(hidden)]
pub fn status(r: Result) -> i32 {
    match r {
        Ok(()) => OK,
        Err(e) => e.code(),
    }
}

/// The return code of an export returning `Result<Flow>`.
#[doc(hidden)]
pub fn status_flow(r: Result<Flow>) -> i32 {
    match r {
        Ok(Flow::Continue) => OK,
        Ok(Flow::Done) => DONE,
        Err(e) => e.code(),
    }
}

/// The bytes the host handed over at address `addr` (parameters, an input buffer): the ABI
/// passes addresses in linear memory as `i32`.
///
/// # Safety
/// `addr..addr+len` must be readable and stay unchanged while the slice lives: true of the
/// arguments of `adisk_init` / `adisk_process` during that call.
#[doc(hidden)]
pub unsafe fn host_slice<'a>(addr: i32, len: i32) -> &'a [u8] {
    if addr == 0 || len <= 0 {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { core::slice::from_raw_parts(addr as u32 as usize as *const u8, len as usize) }
}

/// Grows linear memory by whole pages covering `bytes`; returns the address of the new region,
/// or `None` when the grant is exhausted (and always off wasm32).
pub fn grow(bytes: usize) -> Option<usize> {
    #[cfg(target_arch = "wasm32")]
    {
        let pages = bytes.div_ceil(65536);
        let old = core::arch::wasm32::memory_grow(0, pages);
        if old == usize::MAX {
            return None;
        }
        Some(old * 65536)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = bytes;
        None
    }
}

/// The default `adisk_input_area`: grows memory by `capacity` bytes and returns their address
/// (0, which the host refuses, if the grant is exhausted). C: `ADISK_DEFAULT_INPUT_AREA`.
pub fn input_area(capacity: i32) -> i32 {
    if capacity < 0 {
        return 0;
    }
    grow(capacity as usize).map_or(0, |a| a as i32)
}

/// The disklet's state, in a static (what [`export_v1!`] and [`export_v2!`] define).
///
/// WebAssembly without threads runs one call at a time and the host never calls back into the
/// module from an import, so the exports are the only users of the state and never overlap.
#[doc(hidden)]
pub struct Global<T>(UnsafeCell<T>);

// SAFETY: the state is reached only through `get_mut`, by the exports of a single-threaded
// module, one call at a time (above).
unsafe impl<T> Sync for Global<T> {}

impl<T> Global<T> {
    /// The state, initialised at compile time.
    pub const fn new(value: T) -> Self {
        Global(UnsafeCell::new(value))
    }

    /// # Safety
    /// No other reference to the state may be alive: call it once per export call.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut(&self) -> &mut T {
        // SAFETY: the caller's promise.
        unsafe { &mut *self.0.get() }
    }
}

/// A log line built with `core::fmt` in a fixed buffer (text past `N` bytes is dropped):
///
/// ```
/// use core::fmt::Write;
/// let mut line = adisk_sdk::Line::<128>::new();
/// let _ = write!(line, "bins={}", 10);
/// assert_eq!(line.as_bytes(), b"bins=10");
/// // adisk_sdk::v1::log(line.as_bytes());
/// ```
pub struct Line<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Line<N> {
    /// An empty line.
    pub const fn new() -> Self {
        Line {
            buf: [0; N],
            len: 0,
        }
    }

    /// The text so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> Default for Line<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> core::fmt::Write for Line<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[cfg(all(target_arch = "wasm32", not(test), feature = "panic-handler"))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}
