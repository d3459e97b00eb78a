//! ABI v2: several inputs (1–16) and output ports (1–64) (imports from `adisk_v2`).
//! C: `adisk2.h`.
//!
//! A v2 module imports only from `adisk_v2` (so it logs with [`log`] here, not
//! [`crate::v1::log`]) and declares its shape in a custom section `adisk_v2` ([`export_v2!`]
//! writes it; [`shape!`] alone if you write the exports yourself).
use crate::{Error, Params, Result, check};

/// What [`Disklet::next_input`] returns for "any input".
pub const ANY_INPUT: i32 = -1;

#[cfg(target_arch = "wasm32")]
mod sys {
    #[link(wasm_import_module = "adisk_v2")]
    unsafe extern "C" {
        pub fn emit(port: i32, ptr: *const u8, len: i32) -> i32;
        pub fn declare_output(port: i32, ptr: *const u8, len: i32) -> i32;
        pub fn skip(input: i32, start: i64, end: i64);
        pub fn log(ptr: *const u8, len: i32);
    }
}

/// Off wasm32 the imports do nothing and fail.
#[cfg(not(target_arch = "wasm32"))]
#[allow(clippy::missing_safety_doc)]
mod sys {
    pub unsafe fn emit(_: i32, _: *const u8, _: i32) -> i32 {
        -4
    }
    pub unsafe fn declare_output(_: i32, _: *const u8, _: i32) -> i32 {
        -4
    }
    pub unsafe fn skip(_: i32, _: i64, _: i64) {}
    pub unsafe fn log(_: *const u8, _: i32) {}
}

fn len(bytes: &[u8]) -> i32 {
    i32::try_from(bytes.len()).unwrap_or(i32::MAX)
}

fn int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Emits one record on `port`: raw bytes, or one ADT1 table once the port is declared.
/// [`Error::BadPort`] (no such port), [`Error::BadBuffer`] (malformed).
pub fn emit(port: u32, record: &[u8]) -> Result {
    // SAFETY: the host reads `record.len()` bytes at `record`, which are ours.
    check(unsafe { sys::emit(int(port), record.as_ptr(), len(record)) })
}

/// Declares `port`'s schema (`name:type,…`, as [`crate::v1::declare_output`]). In `init` only;
/// a port without one carries raw records (`bytes: Binary`).
pub fn declare_output(port: u32, spec: &str) -> Result {
    // SAFETY: as in `emit`.
    check(unsafe { sys::declare_output(int(port), spec.as_ptr(), len(spec.as_bytes())) })
}

/// Asks input `input` to skip `[start, end)`; advisory (tables and files only).
pub fn skip(input: u32, start: i64, end: i64) {
    // SAFETY: no memory is passed.
    unsafe { sys::skip(int(input), start, end) }
}

/// Writes a log line (as [`crate::v1::log`], through the `adisk_v2` import).
pub fn log(line: &[u8]) {
    // SAFETY: as in `emit`.
    unsafe { sys::log(line.as_ptr(), len(line)) }
}

/// [`log`] of a `&str`.
pub fn log_str(line: &str) {
    log(line.as_bytes())
}

/// Builds INT64 `columns` as one ADT1 table in `scratch` and emits it on `port`.
pub fn emit_i64_table(port: u32, scratch: &mut [u8], columns: &[&[i64]]) -> Result {
    emit(port, crate::i64_table(scratch, columns)?)
}

/// Declares `port` with the column names and types of table input `input` (`_columns.i`,
/// `_types.i`), writing the declaration into `buf`. C: `adisk_declare_like_input`.
pub fn declare_like_input(port: u32, params: Params<'_>, input: u32, buf: &mut [u8]) -> Result {
    let names = params
        .input_param("_columns", input)
        .ok_or(Error::BadInput)?;
    let types = params.input_param("_types", input).ok_or(Error::BadInput)?;
    let (mut names, mut types) = (names.split(|b| *b == b','), types.split(|b| *b == b','));
    let mut o = 0;
    loop {
        let (n, t) = match (names.next(), types.next()) {
            (Some(n), Some(t)) => (n, t),
            (None, None) => break,
            _ => return Err(Error::BadInput), // as many names as types
        };
        let need = usize::from(o > 0) + n.len() + 1 + t.len();
        if o + need > buf.len() {
            return Err(Error::NoScratch);
        }
        if o > 0 {
            buf[o] = b',';
            o += 1;
        }
        buf[o..o + n.len()].copy_from_slice(n);
        o += n.len();
        buf[o] = b':';
        o += 1;
        buf[o..o + t.len()].copy_from_slice(t);
        o += t.len();
    }
    let spec = core::str::from_utf8(&buf[..o]).map_err(|_| Error::BadInput)?;
    declare_output(port, spec)
}

/// A buffer kept across calls. Under ABI v2 a buffer of input i stays in i's area, untouched,
/// until the next `adisk_process` for input i, so a merge may hold one buffer per input
/// without copying: keep a `Held` in the state and look at it again later.
#[derive(Clone, Copy, Debug, Default)]
pub struct Held {
    addr: usize,
    len: usize,
}

impl Held {
    /// Nothing held.
    pub const EMPTY: Held = Held { addr: 0, len: 0 };

    /// Holds `buf` (the buffer handed to [`Disklet::process`]).
    pub fn new(buf: &[u8]) -> Held {
        Held {
            addr: buf.as_ptr() as usize,
            len: buf.len(),
        }
    }

    /// The buffer again.
    ///
    /// # Safety
    /// `adisk_process` has not been called for its input since it was held (the host then
    /// overwrites that input's area), and it was taken from a `process` buffer.
    pub unsafe fn bytes<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the caller's promise; the ABI keeps the area untouched until then.
        unsafe { core::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

/// An ABI v2 disklet; [`crate::export_v2!`] turns it into the module's exports.
pub trait Disklet {
    /// `adisk_init`: the parameters (the user's, then `_inputs`, `_outputs`, and per input
    /// `_input.i`, `_columns.i`, `_types.i`); declare the ports here.
    fn init(&mut self, params: Params<'_>) -> Result;
    /// `adisk_next_input`: the input wanted next, or `None` for any. Asked after init and
    /// after every call; the host hands over nothing else while that input has no buffer.
    fn next_input(&mut self) -> Option<u32> {
        None
    }
    /// `adisk_process`: one buffer of input `input`, at stream `position`. It stays where it
    /// is until the next `process` call for the same input ([`Held`]).
    fn process(&mut self, input: u32, buf: &[u8], position: i64) -> Result<crate::Flow>;
    /// `adisk_input_ended`: input `input` delivered its last buffer.
    fn input_ended(&mut self, input: u32) -> Result<crate::Flow> {
        let _ = input;
        Ok(crate::Flow::Continue)
    }
    /// `adisk_finish`: every input ended (or a call returned DONE).
    fn finish(&mut self) -> Result;
}

/// The shape text as a byte array (used by [`shape!`]).
#[doc(hidden)]
pub const fn shape_bytes<const N: usize>(text: &str) -> [u8; N] {
    let b = text.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = b[i];
        i += 1;
    }
    out
}

/// Declares the module's shape: `inputs` inputs (1–16) and `outputs` output ports (1–64), as
/// the custom section `adisk_v2` holding `inputs=N outputs=K`. C: `ADISK_SHAPE(N, K)`. Once
/// per module ([`export_v2!`] does it).
#[macro_export]
macro_rules! shape {
    ($inputs:literal, $outputs:literal) => {
        const _: () = {
            const TEXT: &str = concat!("inputs=", $inputs, " outputs=", $outputs);
            #[used]
            #[unsafe(link_section = "adisk_v2")]
            static SHAPE: [u8; TEXT.len()] = $crate::v2::shape_bytes(TEXT);
        };
    };
}

/// Defines the ABI v2 exports (`adisk_input_area`, `adisk_init`, `adisk_next_input`,
/// `adisk_process`, `adisk_input_ended`, `adisk_finish`) and the shape section over a
/// [`v2::Disklet`](crate::v2::Disklet) kept in a static:
///
/// ```no_run
/// use adisk_sdk::{Flow, Params, Result, Table, v2};
///
/// /// Counts the rows of each of two inputs; port 0 gets `input, rows`.
/// struct Rows { rows: [i64; 2], out: [u8; adisk_sdk::i64_table_len(2, 2)] }
///
/// impl v2::Disklet for Rows {
///     fn init(&mut self, _params: Params<'_>) -> Result {
///         v2::declare_output(0, "input:int64,rows:int64")
///     }
///     fn process(&mut self, input: u32, buf: &[u8], _position: i64) -> Result<Flow> {
///         self.rows[input as usize] += Table::open(buf)?.rows() as i64;
///         Ok(Flow::Continue)
///     }
///     fn finish(&mut self) -> Result {
///         v2::emit_i64_table(0, &mut self.out, &[&[0, 1], &self.rows])
///     }
/// }
///
/// const EMPTY: Rows = Rows { rows: [0; 2], out: [0; adisk_sdk::i64_table_len(2, 2)] };
/// adisk_sdk::export_v2!(Rows = EMPTY, inputs = 2, outputs = 1);
/// ```
///
/// `next_input` and `input_ended` have defaults (any input; go on). `adisk_input_area` grows
/// memory by one area per input.
#[macro_export]
macro_rules! export_v2 {
    ($ty:ty = $init:expr, inputs = $inputs:literal, outputs = $outputs:literal) => {
        $crate::shape!($inputs, $outputs);

        static __ADISK_DISKLET: $crate::Global<$ty> = $crate::Global::new($init);

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_input_area(_input: i32, capacity: i32) -> i32 {
            $crate::input_area(capacity)
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_init(params: i32, len: i32) -> i32 {
            // SAFETY: the host put `len` bytes of parameters at `params`, inside memory, and
            // calls one export at a time.
            let (state, params) =
                unsafe { (__ADISK_DISKLET.get_mut(), $crate::host_slice(params, len)) };
            $crate::status($crate::v2::Disklet::init(
                state,
                $crate::Params::new(params),
            ))
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_next_input() -> i32 {
            // SAFETY: as in `adisk_init`.
            let state = unsafe { __ADISK_DISKLET.get_mut() };
            match $crate::v2::Disklet::next_input(state) {
                Some(i) => i as i32,
                None => $crate::v2::ANY_INPUT,
            }
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_process(input: i32, buf: i32, len: i32, position: i64) -> i32 {
            // SAFETY: as in `adisk_init`: one buffer of `len` bytes at `buf`.
            let (state, buf) = unsafe { (__ADISK_DISKLET.get_mut(), $crate::host_slice(buf, len)) };
            $crate::status_flow($crate::v2::Disklet::process(
                state,
                input as u32,
                buf,
                position,
            ))
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_input_ended(input: i32) -> i32 {
            // SAFETY: as in `adisk_init`.
            let state = unsafe { __ADISK_DISKLET.get_mut() };
            $crate::status_flow($crate::v2::Disklet::input_ended(state, input as u32))
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn adisk_finish() -> i32 {
            // SAFETY: as in `adisk_init`.
            let state = unsafe { __ADISK_DISKLET.get_mut() };
            $crate::status($crate::v2::Disklet::finish(state))
        }
    };
}
