//! ABI constants (v1, and v2 in [`v2`]), module shapes and the ADT1 table layout (see
//! `docs/disklet-abi.md`).
//!
//! An ADT1 buffer: a 16-byte header `magic u32 = "ADT1", row_count u32, column_count u32,
//! total_bytes u32`, then one 16-byte descriptor per column `type u8, scale i8, reserved u16,
//! data_offset u32, validity_offset u32, aux_offset u32` (offsets from the buffer start, 8-byte
//! aligned; `validity_offset` 0 = no nulls, else one byte per row, 1 = valid). Fixed-width
//! columns are little-endian arrays; UTF8/BINARY columns have `row_count + 1` u32 offsets at
//! `data_offset` into the bytes at `aux_offset`.
use crate::error::{Result, WasmError};
use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Date32Array, Decimal128Array,
    Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

/// The import module of ABI v1. A new ABI version gets a new module name.
pub const IMPORT_MODULE: &str = "adisk_v1";
/// Magic of an ADT1 buffer ("ADT1" little-endian).
pub const ADT1_MAGIC: u32 = u32::from_le_bytes(*b"ADT1");
/// Header bytes.
pub const HEADER_BYTES: usize = 16;
/// Descriptor bytes per column.
pub const COLUMN_BYTES: usize = 16;
/// Most columns an ADT1 buffer may have.
pub const MAX_COLUMNS: usize = 256;

/// Column type codes.
pub mod types {
    /// 32-bit signed integer (Int8, Int16, Int32, UInt8, UInt16 are widened to it).
    pub const INT32: u8 = 1;
    /// 64-bit signed integer (UInt32 widened; UInt64 as its bits).
    pub const INT64: u8 = 2;
    /// IEEE double (Float32 widened).
    pub const FLOAT64: u8 = 3;
    /// Decimal with precision <= 18: unscaled i64, the scale in the descriptor.
    pub const DECIMAL64: u8 = 4;
    /// Days since 1970-01-01, i32.
    pub const DATE32: u8 = 5;
    /// UTF-8 strings: u32 offsets + bytes.
    pub const UTF8: u8 = 6;
    /// Byte strings: u32 offsets + bytes.
    pub const BINARY: u8 = 7;
    /// Booleans, one byte 0/1 per row.
    pub const BOOL: u8 = 8;
}

/// Exports every ABI v1 disklet provides: name and parameter types as text; each returns one i32.
pub const REQUIRED_EXPORTS: [(&str, &str); 4] = [
    ("adisk_input_area", "i32"),
    ("adisk_init", "i32 i32"),
    ("adisk_process", "i32 i32 i64"),
    ("adisk_finish", ""),
];

/// Imports an ABI v1 disklet may use: name, parameter types as text, result count.
pub const ALLOWED_IMPORTS: [(&str, &str, usize); 4] = [
    ("emit", "i32 i32", 1),
    ("skip", "i64 i64", 0),
    ("log", "i32 i32", 0),
    ("declare_output", "i32 i32", 1),
];

/// ABI v2: several inputs (one input area each) and several output ports.
pub mod v2 {
    /// The import module of ABI v2.
    pub const IMPORT_MODULE: &str = "adisk_v2";
    /// The custom section in which a v2 module declares its shape: `inputs=N outputs=K`.
    pub const SHAPE_SECTION: &str = "adisk_v2";
    /// Most inputs a module may declare.
    pub const MAX_INPUTS: u32 = 16;
    /// Most output ports a module may declare.
    pub const MAX_OUTPUTS: u32 = 64;
    /// What `adisk_next_input` returns for "any input".
    pub const ANY_INPUT: i32 = -1;
    /// Exports every v2 disklet provides: name and parameter types as text; each returns one i32.
    pub const REQUIRED_EXPORTS: [(&str, &str); 6] = [
        ("adisk_input_area", "i32 i32"),
        ("adisk_init", "i32 i32"),
        ("adisk_next_input", ""),
        ("adisk_process", "i32 i32 i32 i64"),
        ("adisk_input_ended", "i32"),
        ("adisk_finish", ""),
    ];
    /// Imports a v2 disklet may use: name, parameter types as text, result count.
    pub const ALLOWED_IMPORTS: [(&str, &str, usize); 4] = [
        ("emit", "i32 i32 i32", 1),
        ("skip", "i32 i64 i64", 0),
        ("log", "i32 i32", 0),
        ("declare_output", "i32 i32 i32", 1),
    ];
}

/// A module's ABI version and the inputs and output ports it declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// ABI version, 1 or 2.
    pub abi: u32,
    /// Inputs.
    pub inputs: u32,
    /// Output ports.
    pub outputs: u32,
}

impl Shape {
    /// Every ABI v1 module: one input, one output.
    pub const V1: Shape = Shape {
        abi: 1,
        inputs: 1,
        outputs: 1,
    };
}

/// Parses the [`v2::SHAPE_SECTION`] text: `inputs=N outputs=K` (whitespace-separated, trailing
/// NULs ignored), `1 <= N <= MAX_INPUTS`, `1 <= K <= MAX_OUTPUTS`.
///
/// # Errors
/// A message naming what is wrong.
pub fn parse_shape(section: &[u8]) -> Result<Shape, String> {
    let text =
        std::str::from_utf8(section).map_err(|_| "the shape is not UTF-8 text".to_string())?;
    let (mut inputs, mut outputs) = (None, None);
    for item in text.trim_end_matches('\0').split_whitespace() {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| format!("`{item}` is not key=value"))?;
        let n: u32 = value
            .parse()
            .map_err(|_| format!("`{item}`: `{value}` is not a number"))?;
        let slot = match key {
            "inputs" => &mut inputs,
            "outputs" => &mut outputs,
            other => {
                return Err(format!(
                    "unknown key `{other}` (the shape has `inputs=` and `outputs=`)"
                ));
            }
        };
        if slot.replace(n).is_some() {
            return Err(format!("`{key}` is given twice"));
        }
    }
    let inputs = inputs.ok_or("the shape has no `inputs=`")?;
    let outputs = outputs.ok_or("the shape has no `outputs=`")?;
    if !(1..=v2::MAX_INPUTS).contains(&inputs) || !(1..=v2::MAX_OUTPUTS).contains(&outputs) {
        return Err(format!(
            "inputs={inputs} outputs={outputs}: a module has 1 to {} inputs and 1 to {} outputs",
            v2::MAX_INPUTS,
            v2::MAX_OUTPUTS
        ));
    }
    Ok(Shape {
        abi: 2,
        inputs,
        outputs,
    })
}

/// Return codes of the exports and imports.
pub mod codes {
    /// Success.
    pub const OK: i32 = 0;
    /// `adisk_process`: no more input is needed (the rest of the stream is skipped).
    pub const DONE: i32 = 1;
    /// A parameter is missing or malformed.
    pub const BAD_PARAM: i32 = -1;
    /// The input does not have the columns/types the disklet expects.
    pub const BAD_INPUT: i32 = -2;
    /// The disklet's own scratch is exhausted.
    pub const NO_SCRATCH: i32 = -3;
    /// Any other disklet-defined failure.
    pub const FAILED: i32 = -4;
    /// `emit`/`declare_output`: the buffer is malformed (bad layout, out of bounds).
    pub const BAD_BUFFER: i32 = -5;
    /// `emit`/`declare_output` (ABI v2): no such output port.
    pub const BAD_PORT: i32 = -6;

    /// Text for a code returned by the guest.
    pub fn describe(code: i32) -> String {
        let what = match code {
            BAD_PARAM => "bad parameter",
            BAD_INPUT => "input has unexpected columns or types",
            NO_SCRATCH => "out of scratch memory",
            FAILED => "disklet failure",
            BAD_BUFFER => "malformed buffer",
            BAD_PORT => "no such output port",
            _ => "unknown error code",
        };
        format!("error code {code} ({what})")
    }
}

fn ty_code(dt: &DataType) -> Option<(u8, i8)> {
    Some(match dt {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            (types::INT32, 0)
        }
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => (types::INT64, 0),
        DataType::Float32 | DataType::Float64 => (types::FLOAT64, 0),
        DataType::Decimal128(p, s) if *p <= 18 => (types::DECIMAL64, *s),
        DataType::Date32 => (types::DATE32, 0),
        DataType::Utf8 | DataType::LargeUtf8 => (types::UTF8, 0),
        DataType::Binary | DataType::LargeBinary => (types::BINARY, 0),
        DataType::Boolean => (types::BOOL, 0),
        _ => return None,
    })
}

/// The `declare_output` type of the ADT1 column a column of type `dt` travels as
/// (`decimal64(S)` for decimals), or `None` if ADT1 does not carry it.
pub fn type_name(dt: &DataType) -> Option<String> {
    let (code, scale) = ty_code(dt)?;
    let name = match code {
        types::INT32 => "int32",
        types::INT64 => "int64",
        types::FLOAT64 => "float64",
        types::DECIMAL64 => return Some(format!("decimal64({scale})")),
        types::DATE32 => "date32",
        types::UTF8 => "utf8",
        types::BINARY => "binary",
        _ => "bool",
    };
    Some(name.to_string())
}

/// Checks that every column of `schema` has an ADT1 type.
///
/// # Errors
/// [`WasmError::InvalidJob`] naming the first unsupported column.
pub fn check_input_schema(schema: &Schema) -> Result<()> {
    for f in schema.fields() {
        if ty_code(f.data_type()).is_none() {
            return Err(WasmError::InvalidJob(format!(
                "column `{}` has type {} which ABI v1 cannot pass to a disklet",
                f.name(),
                f.data_type()
            )));
        }
    }
    Ok(())
}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

fn var_bytes(a: &ArrayRef, start: usize, len: usize) -> usize {
    match a.data_type() {
        DataType::Utf8 => {
            let s = a.as_string::<i32>();
            (s.value_offsets()[start + len] - s.value_offsets()[start]) as usize
        }
        DataType::LargeUtf8 => {
            let s = a.as_string::<i64>();
            (s.value_offsets()[start + len] - s.value_offsets()[start]) as usize
        }
        DataType::Binary => {
            let s = a.as_binary::<i32>();
            (s.value_offsets()[start + len] - s.value_offsets()[start]) as usize
        }
        DataType::LargeBinary => {
            let s = a.as_binary::<i64>();
            (s.value_offsets()[start + len] - s.value_offsets()[start]) as usize
        }
        _ => 0,
    }
}

fn width(code: u8) -> usize {
    match code {
        types::INT32 | types::DATE32 => 4,
        types::INT64 | types::FLOAT64 | types::DECIMAL64 => 8,
        types::BOOL => 1,
        _ => 4, // offsets
    }
}

/// Bytes the ADT1 encoding of rows `start..start+len` of `batch` takes.
pub fn encoded_len(batch: &RecordBatch, start: usize, len: usize) -> usize {
    let mut n = HEADER_BYTES + COLUMN_BYTES * batch.num_columns();
    for c in batch.columns() {
        let (code, _) = ty_code(c.data_type()).unwrap_or((types::INT64, 0));
        let rows = if matches!(code, types::UTF8 | types::BINARY) {
            len + 1
        } else {
            len
        };
        n = align8(n) + rows * width(code);
        if c.null_count() > 0 {
            n = align8(n) + len;
        }
        n = align8(n) + var_bytes(c, start, len);
    }
    align8(n)
}

fn put_u32(out: &mut [u8], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

macro_rules! fixed {
    ($out:expr, $at:expr, $arr:expr, $start:expr, $len:expr, $conv:expr) => {{
        let values = &$arr.values()[$start..$start + $len];
        let mut p = $at;
        for v in values {
            let bytes = ($conv)(*v).to_le_bytes();
            $out[p..p + bytes.len()].copy_from_slice(&bytes);
            p += bytes.len();
        }
    }};
}

/// Encodes rows `start..start+len` of `batch` as ADT1 into `out` (cleared first).
///
/// # Errors
/// [`WasmError::InvalidJob`] for a column type ABI v1 does not carry.
pub fn encode(batch: &RecordBatch, start: usize, len: usize, out: &mut Vec<u8>) -> Result<()> {
    let total = encoded_len(batch, start, len);
    out.clear();
    out.resize(total, 0);
    put_u32(out, 0, ADT1_MAGIC);
    put_u32(out, 4, len as u32);
    put_u32(out, 8, batch.num_columns() as u32);
    put_u32(out, 12, total as u32);
    let mut at = HEADER_BYTES + COLUMN_BYTES * batch.num_columns();
    for (i, c) in batch.columns().iter().enumerate() {
        let (code, scale) = ty_code(c.data_type()).ok_or_else(|| {
            WasmError::InvalidJob(format!(
                "column {i} has type {} which ABI v1 cannot carry",
                c.data_type()
            ))
        })?;
        let desc = HEADER_BYTES + COLUMN_BYTES * i;
        out[desc] = code;
        out[desc + 1] = scale as u8;
        at = align8(at);
        let data = at;
        put_u32(out, desc + 4, data as u32);
        let c = c.slice(start, len);
        put_values(out, data, &c, len);
        let rows = if matches!(code, types::UTF8 | types::BINARY) {
            len + 1
        } else {
            len
        };
        at = data + rows * width(code);
        if c.null_count() > 0 {
            at = put_validity(out, desc, align8(at), &c);
        }
        if matches!(code, types::UTF8 | types::BINARY) {
            at = put_bytes(out, (desc, data), align8(at), &c);
        }
    }
    debug_assert!(
        align8(at) <= total,
        "ADT1 encoding overran its computed length"
    );
    Ok(())
}

/// Writes the fixed-width values of the `len` rows of column `c` at `data` (strings' offsets
/// are written by [`put_bytes`]).
fn put_values(out: &mut [u8], data: usize, c: &ArrayRef, len: usize) {
    match c.data_type() {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::UInt8
        | DataType::UInt16
        | DataType::Int64
        | DataType::UInt32
        | DataType::UInt64 => put_integers(out, data, c, len),
        DataType::Float32 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::Float32Type>(),
            0,
            len,
            |v: f32| v as f64
        ),
        DataType::Float64 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::Float64Type>(),
            0,
            len,
            |v: f64| v
        ),
        DataType::Decimal128(..) => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::Decimal128Type>(),
            0,
            len,
            |v: i128| v as i64
        ),
        DataType::Date32 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::Date32Type>(),
            0,
            len,
            |v: i32| v
        ),
        DataType::Boolean => {
            let b = c.as_boolean();
            for r in 0..len {
                out[data + r] = u8::from(b.value(r));
            }
        }
        _ => {}
    }
}

/// [`put_values`] of an integer column (as INT32 or INT64).
fn put_integers(out: &mut [u8], data: usize, c: &ArrayRef, len: usize) {
    match c.data_type() {
        DataType::Int8 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::Int8Type>(),
            0,
            len,
            |v: i8| v as i32
        ),
        DataType::Int16 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::Int16Type>(),
            0,
            len,
            |v: i16| v as i32
        ),
        DataType::Int32 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::Int32Type>(),
            0,
            len,
            |v: i32| v
        ),
        DataType::UInt8 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::UInt8Type>(),
            0,
            len,
            |v: u8| v as i32
        ),
        DataType::UInt16 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::UInt16Type>(),
            0,
            len,
            |v: u16| v as i32
        ),
        DataType::Int64 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::Int64Type>(),
            0,
            len,
            |v: i64| v
        ),
        DataType::UInt32 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::UInt32Type>(),
            0,
            len,
            |v: u32| v as i64
        ),
        DataType::UInt64 => fixed!(
            out,
            data,
            c.as_primitive::<arrow::datatypes::UInt64Type>(),
            0,
            len,
            |v: u64| v as i64
        ),
        _ => {}
    }
}

/// Writes column `c`'s validity bytes at `at` (its descriptor at `desc` points to them); the
/// end.
fn put_validity(out: &mut [u8], desc: usize, at: usize, c: &ArrayRef) -> usize {
    put_u32(out, desc + 8, at as u32);
    for r in 0..c.len() {
        out[at + r] = u8::from(c.is_valid(r));
    }
    at + c.len()
}

/// Writes string or binary column `c`'s bytes at `at` and their offsets at `data` (its
/// descriptor at `desc` points to the bytes); the end.
fn put_bytes(out: &mut [u8], (desc, data): (usize, usize), at: usize, c: &ArrayRef) -> usize {
    put_u32(out, desc + 12, at as u32);
    let values: Vec<&[u8]> = match c.data_type() {
        DataType::Utf8 => c
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap_or("").as_bytes())
            .collect(),
        DataType::LargeUtf8 => c
            .as_string::<i64>()
            .iter()
            .map(|v| v.unwrap_or("").as_bytes())
            .collect(),
        DataType::Binary => c
            .as_binary::<i32>()
            .iter()
            .map(|v| v.unwrap_or(&[]))
            .collect(),
        _ => c
            .as_binary::<i64>()
            .iter()
            .map(|v| v.unwrap_or(&[]))
            .collect(),
    };
    let mut off = 0u32;
    put_u32(out, data, 0);
    for (r, v) in values.iter().enumerate() {
        out[at + off as usize..at + off as usize + v.len()].copy_from_slice(v);
        off += v.len() as u32;
        put_u32(out, data + 4 * (r + 1), off);
    }
    at + off as usize
}

/// Parses a `declare_output` text: `name:type[,name:type…]`, types `int32`, `int64`,
/// `float64`, `date32`, `utf8`, `binary`, `bool`, `decimal64(S)` (precision 18, scale `S`).
///
/// # Errors
/// A message naming the bad entry.
pub fn parse_output_spec(text: &str) -> Result<SchemaRef, String> {
    let mut fields = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, ty) = item
            .split_once(':')
            .ok_or_else(|| format!("`{item}` is not name:type"))?;
        let dt = match ty.trim() {
            "int32" => DataType::Int32,
            "int64" => DataType::Int64,
            "float64" => DataType::Float64,
            "date32" => DataType::Date32,
            "utf8" => DataType::Utf8,
            "binary" => DataType::Binary,
            "bool" => DataType::Boolean,
            other => match decimal_scale(other) {
                Some(scale) => DataType::Decimal128(18, scale),
                None => return Err(format!("unknown output type `{other}` for column `{name}`")),
            },
        };
        fields.push(Field::new(name.trim(), dt, true));
    }
    if fields.is_empty() || fields.len() > MAX_COLUMNS {
        return Err(format!(
            "an output declaration needs 1 to {MAX_COLUMNS} columns"
        ));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// The scale of `decimal64(S)`, 0 <= S <= 18.
fn decimal_scale(ty: &str) -> Option<i8> {
    let scale: i8 = ty
        .strip_prefix("decimal64(")?
        .strip_suffix(')')?
        .trim()
        .parse()
        .ok()?;
    (0..=18).contains(&scale).then_some(scale)
}

fn get_u32(buf: &[u8], at: usize) -> Result<u32, String> {
    buf.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| format!("offset {at} is outside the {}-byte buffer", buf.len()))
}

fn slice(buf: &[u8], at: usize, len: usize) -> Result<&[u8], String> {
    at.checked_add(len)
        .and_then(|end| buf.get(at..end))
        .ok_or_else(|| format!("range {at}+{len} is outside the {}-byte buffer", buf.len()))
}

/// Decodes an ADT1 buffer the guest emitted into a batch of `schema`; every offset is checked.
///
/// # Errors
/// A message saying what is malformed (the guest's fault).
pub fn decode(buf: &[u8], schema: &SchemaRef) -> Result<RecordBatch, String> {
    if get_u32(buf, 0)? != ADT1_MAGIC {
        return Err("no ADT1 magic".into());
    }
    let rows = get_u32(buf, 4)? as usize;
    let cols = get_u32(buf, 8)? as usize;
    if cols != schema.fields().len() {
        return Err(format!(
            "{cols} columns, but the declared output has {}",
            schema.fields().len()
        ));
    }
    let arrays = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| decode_column(buf, i, f, rows))
        .collect::<Result<Vec<ArrayRef>, String>>()?;
    RecordBatch::try_new(schema.clone(), arrays).map_err(|e| e.to_string())
}

/// One column of an ADT1 table, as it lies in the buffer.
struct RawColumn<'a> {
    /// Column number.
    i: usize,
    /// Its type code.
    code: u8,
    /// Its fixed-width values (for strings: the offsets).
    raw: &'a [u8],
    /// Which rows are valid (None: all).
    valid: Option<Vec<bool>>,
    rows: usize,
}

impl RawColumn<'_> {
    /// Is row `r` valid?
    fn valid(&self, r: usize) -> bool {
        self.valid.as_ref().is_none_or(|v| v[r])
    }

    /// The `W` bytes of row `r`'s fixed-width value.
    fn bytes<const W: usize>(&self, r: usize) -> [u8; W] {
        self.raw[W * r..W * r + W].try_into().expect("W bytes")
    }
}

/// Decodes column `i` (declared as `f`) of `rows` rows of the ADT1 table in `buf`.
fn decode_column(buf: &[u8], i: usize, f: &Field, rows: usize) -> Result<ArrayRef, String> {
    let desc = HEADER_BYTES + COLUMN_BYTES * i;
    let code = *buf.get(desc).ok_or("descriptor outside the buffer")?;
    let data = get_u32(buf, desc + 4)? as usize;
    let validity = get_u32(buf, desc + 8)? as usize;
    let aux = get_u32(buf, desc + 12)? as usize;
    let expected = ty_code(f.data_type()).map(|t| t.0).unwrap_or(0);
    if code != expected {
        return Err(format!(
            "column {i} `{}` has type code {code}, declared {expected}",
            f.name()
        ));
    }
    let valid: Option<Vec<bool>> = if validity == 0 {
        None
    } else {
        Some(
            slice(buf, validity, rows)?
                .iter()
                .map(|b| *b != 0)
                .collect(),
        )
    };
    let n = if matches!(code, types::UTF8 | types::BINARY) {
        rows + 1
    } else {
        rows
    };
    let len = n.checked_mul(width(code)).ok_or("row count overflows")?;
    let c = RawColumn {
        i,
        code,
        raw: slice(buf, data, len)?,
        valid,
        rows,
    };
    let rows = 0..rows;
    Ok(match code {
        types::INT32 => Arc::new(Int32Array::from_iter(
            rows.map(|r| c.valid(r).then(|| i32::from_le_bytes(c.bytes(r)))),
        )),
        types::DATE32 => Arc::new(Date32Array::from_iter(
            rows.map(|r| c.valid(r).then(|| i32::from_le_bytes(c.bytes(r)))),
        )),
        types::INT64 => Arc::new(Int64Array::from_iter(
            rows.map(|r| c.valid(r).then(|| i64::from_le_bytes(c.bytes(r)))),
        )),
        types::DECIMAL64 => decode_decimal(&c, f, buf[desc + 1] as i8)?,
        types::FLOAT64 => Arc::new(Float64Array::from_iter(
            rows.map(|r| c.valid(r).then(|| f64::from_le_bytes(c.bytes(r)))),
        )),
        types::BOOL => Arc::new(BooleanArray::from_iter(
            rows.map(|r| c.valid(r).then(|| c.raw[r] != 0)),
        )),
        types::UTF8 | types::BINARY => decode_bytes(&c, buf, aux)?,
        other => return Err(format!("column {i}: unknown type code {other}")),
    })
}

/// A DECIMAL64 column of scale `scale` (as written), declared as `f`.
fn decode_decimal(c: &RawColumn<'_>, f: &Field, scale: i8) -> Result<ArrayRef, String> {
    let i = c.i;
    let DataType::Decimal128(precision, declared) = f.data_type() else {
        return Err(format!("column {i}: not a decimal"));
    };
    if scale != *declared {
        return Err(format!(
            "column {i} `{}` has scale {scale}, declared {declared}",
            f.name()
        ));
    }
    let values = Decimal128Array::from_iter((0..c.rows).map(|r| {
        c.valid(r)
            .then(|| i128::from(i64::from_le_bytes(c.bytes(r))))
    }));
    Ok(Arc::new(
        values
            .with_precision_and_scale(*precision, *declared)
            .map_err(|e| format!("column {i}: {e}"))?,
    ))
}

/// A UTF8 or BINARY column: its offsets in `c`, its bytes at `aux` in `buf`.
fn decode_bytes(c: &RawColumn<'_>, buf: &[u8], aux: usize) -> Result<ArrayRef, String> {
    let (i, rows) = (c.i, c.rows);
    let offsets: Vec<usize> = (0..=rows)
        .map(|r| u32::from_le_bytes(c.bytes(r)) as usize)
        .collect();
    let end = *offsets.last().unwrap_or(&0);
    let bytes = slice(buf, aux, end)?;
    let mut values = Vec::with_capacity(rows);
    for r in 0..rows {
        let (a, b) = (offsets[r], offsets[r + 1]);
        if a > b || b > end {
            return Err(format!("column {i}: offsets not increasing at row {r}"));
        }
        values.push(c.valid(r).then(|| &bytes[a..b]));
    }
    if c.code != types::UTF8 {
        return Ok(Arc::new(BinaryArray::from(values)));
    }
    let strings: Vec<Option<&str>> = values
        .into_iter()
        .map(|v| v.map(std::str::from_utf8).transpose())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("column {i}: {e}"))?;
    Ok(Arc::new(StringArray::from(strings)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, false),
            Field::new("d", DataType::Decimal128(15, 2), false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])),
                Arc::new(StringArray::from(vec!["x", "yz", ""])),
                Arc::new(
                    Decimal128Array::from(vec![100, 250, -5])
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        encode(&batch, 1, 2, &mut out).unwrap();
        assert_eq!(out.len(), encoded_len(&batch, 1, 2));
        assert_eq!(get_u32(&out, 4).unwrap(), 2);
        let back_schema = parse_output_spec("a:int64,s:utf8").unwrap();
        // Decode only the first two columns' layout: build a 2-column buffer.
        let two = RecordBatch::try_new(
            back_schema.clone(),
            vec![batch.column(0).slice(1, 2), batch.column(1).slice(1, 2)],
        )
        .unwrap();
        encode(&two, 0, 2, &mut out).unwrap();
        let decoded = decode(&out, &back_schema).unwrap();
        assert_eq!(
            decoded
                .column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .iter()
                .collect::<Vec<_>>(),
            vec![None, Some(3)]
        );
        assert_eq!(decoded.column(1).as_string::<i32>().value(0), "yz");
        assert!(decode(&out[..20], &back_schema).is_err());
    }

    #[test]
    fn shapes_parse_and_refuse() {
        assert_eq!(
            parse_shape(b"inputs=2 outputs=3\0").unwrap(),
            Shape {
                abi: 2,
                inputs: 2,
                outputs: 3
            }
        );
        assert_eq!(
            parse_shape(b" outputs=1\ninputs=16 ").unwrap(),
            Shape {
                abi: 2,
                inputs: 16,
                outputs: 1
            }
        );
        for (bad, why) in [
            ("inputs=2", "no `outputs=`"),
            ("inputs=0 outputs=1", "1 to 16"),
            ("inputs=1 outputs=65", "1 to 64"),
            ("inputs=1 inputs=2 outputs=1", "twice"),
            ("inputs=x outputs=1", "not a number"),
            ("ports=1", "unknown key"),
            ("inputs", "key=value"),
        ] {
            let e = parse_shape(bad.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn decimals_declare_describe_and_decode() {
        let dt = DataType::Decimal128(12, 2);
        assert_eq!(type_name(&dt).as_deref(), Some("decimal64(2)"));
        assert_eq!(type_name(&DataType::Int8).as_deref(), Some("int32"));
        assert_eq!(type_name(&DataType::Float16), None);
        let schema = parse_output_spec("d:decimal64(2),n:int64").unwrap();
        assert_eq!(schema.field(0).data_type(), &DataType::Decimal128(18, 2));
        assert!(
            parse_output_spec("d:decimal64(19)").is_err()
                && parse_output_spec("d:decimal64(x)").is_err()
        );
        let d = Decimal128Array::from(vec![Some(1234), None, Some(-5)])
            .with_precision_and_scale(18, 2)
            .unwrap();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(d), Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        let mut out = Vec::new();
        encode(&batch, 0, 3, &mut out).unwrap();
        assert_eq!(decode(&out, &schema).unwrap(), batch);
        let other_scale = parse_output_spec("d:decimal64(3),n:int64").unwrap();
        assert!(decode(&out, &other_scale).unwrap_err().contains("scale"));
    }
}
