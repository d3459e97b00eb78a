//! ADT1 tables: reading input buffers, building output tables.
//!
//! ```text
//! header   16 bytes : magic u32 = "ADT1", row_count u32, column_count u32, total_bytes u32
//! columns  16 bytes each: type u8, scale i8, reserved u16, data_offset u32,
//!          validity_offset u32, aux_offset u32
//! data     fixed width: row_count values; UTF8/BINARY: row_count + 1 u32 offsets into the
//!          bytes at aux_offset; validity (0 = no nulls): row_count bytes, 1 = valid
//! ```
//! All little-endian, offsets from the start of the buffer, 8-byte aligned.
use crate::{ADT1_MAGIC, Error, Result};
use core::marker::PhantomData;

const HEADER: usize = 16;
const DESCRIPTOR: usize = 16;

/// ADT1 column types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ColumnType {
    /// `1`: i32 (Arrow Int8, Int16, Int32, UInt8, UInt16).
    Int32 = 1,
    /// `2`: i64 (Arrow Int64, UInt32, UInt64 as bits).
    Int64 = 2,
    /// `3`: f64 (Arrow Float32, Float64).
    Float64 = 3,
    /// `4`: i64 unscaled, the scale in the descriptor (Arrow Decimal128, precision ≤ 18).
    Decimal64 = 4,
    /// `5`: i32 days since 1970-01-01.
    Date32 = 5,
    /// `6`: UTF-8 strings (u32 offsets + bytes).
    Utf8 = 6,
    /// `7`: byte strings (u32 offsets + bytes).
    Binary = 7,
    /// `8`: one byte 0/1 per row.
    Bool = 8,
}

impl ColumnType {
    /// The type of ADT1 code `code`.
    pub const fn from_code(code: u8) -> Option<ColumnType> {
        Some(match code {
            1 => ColumnType::Int32,
            2 => ColumnType::Int64,
            3 => ColumnType::Float64,
            4 => ColumnType::Decimal64,
            5 => ColumnType::Date32,
            6 => ColumnType::Utf8,
            7 => ColumnType::Binary,
            8 => ColumnType::Bool,
            _ => return None,
        })
    }

    /// Whether values are offsets into bytes (UTF8, BINARY).
    pub const fn is_var(self) -> bool {
        matches!(self, ColumnType::Utf8 | ColumnType::Binary)
    }

    /// Bytes per row at `data_offset` (4 for the offsets of UTF8/BINARY).
    pub const fn width(self) -> usize {
        match self {
            ColumnType::Int64 | ColumnType::Float64 | ColumnType::Decimal64 => 8,
            ColumnType::Bool => 1,
            _ => 4,
        }
    }
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(at..at + 4)?.try_into().ok()?))
}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// An ADT1 table handed to `adisk_process`.
#[derive(Clone, Copy, Debug)]
pub struct Table<'a> {
    buf: &'a [u8],
    rows: usize,
    columns: usize,
}

impl<'a> Table<'a> {
    /// Opens an ADT1 buffer: checks the magic and that the descriptors fit
    /// ([`Error::BadInput`] otherwise: raw bytes, say, from a file input). C: `adisk_table_open`.
    pub fn open(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < HEADER || u32_at(buf, 0) != Some(ADT1_MAGIC) {
            return Err(Error::BadInput);
        }
        let rows = u32_at(buf, 4).ok_or(Error::BadInput)? as usize;
        let columns = u32_at(buf, 8).ok_or(Error::BadInput)? as usize;
        if columns
            .checked_mul(DESCRIPTOR)
            .and_then(|d| d.checked_add(HEADER))
            .is_none_or(|end| end > buf.len())
        {
            return Err(Error::BadInput);
        }
        Ok(Table { buf, rows, columns })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn columns(&self) -> usize {
        self.columns
    }

    /// The whole buffer.
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// The type of column `c` ([`Error::BadInput`] if there is no such column or the type code
    /// is unknown).
    pub fn column_type(&self, c: usize) -> Result<ColumnType> {
        if c >= self.columns {
            return Err(Error::BadInput);
        }
        ColumnType::from_code(self.buf[HEADER + DESCRIPTOR * c]).ok_or(Error::BadInput)
    }

    /// Column `c`, its layout checked against the buffer ([`Error::BadInput`] if it does not
    /// fit).
    pub fn column(&self, c: usize) -> Result<Column<'a>> {
        let ty = self.column_type(c)?;
        let d = HEADER + DESCRIPTOR * c;
        let buf = self.buf;
        let scale = buf[d + 1] as i8;
        let at = |o: usize| {
            u32_at(buf, d + o)
                .map(|v| v as usize)
                .ok_or(Error::BadInput)
        };
        let (data_at, valid_at, aux_at) = (at(4)?, at(8)?, at(12)?);
        let slots = if ty.is_var() {
            self.rows + 1
        } else {
            self.rows
        };
        let range = |start: usize, len: Option<usize>| {
            len.and_then(|l| start.checked_add(l))
                .and_then(|end| buf.get(start..end))
                .ok_or(Error::BadInput)
        };
        let data = range(data_at, slots.checked_mul(ty.width()))?;
        let validity = if valid_at == 0 {
            None
        } else {
            Some(range(valid_at, Some(self.rows))?)
        };
        let aux = if ty.is_var() {
            let end = u32_at(data, 4 * self.rows).ok_or(Error::BadInput)? as usize;
            range(aux_at, Some(end))?
        } else {
            &[]
        };
        Ok(Column {
            ty,
            scale,
            rows: self.rows,
            data,
            validity,
            aux,
        })
    }
}

/// One column of a [`Table`].
#[derive(Clone, Copy, Debug)]
pub struct Column<'a> {
    ty: ColumnType,
    scale: i8,
    rows: usize,
    data: &'a [u8],
    validity: Option<&'a [u8]>,
    aux: &'a [u8],
}

impl<'a> Column<'a> {
    /// Its type.
    pub fn ty(&self) -> ColumnType {
        self.ty
    }

    /// The scale of a DECIMAL64 column (0 for the others).
    pub fn scale(&self) -> i32 {
        i32::from(self.scale)
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// One byte per row, 1 = valid; `None` when the column has no nulls.
    pub fn validity(&self) -> Option<&'a [u8]> {
        self.validity
    }

    /// Whether row `r` is not null.
    pub fn is_valid(&self, r: usize) -> bool {
        self.validity.is_none_or(|v| v[r] != 0)
    }

    fn values<T: Value>(&self, ok: bool) -> Result<Values<'a, T>> {
        if !ok {
            return Err(Error::BadInput);
        }
        Ok(Values::new(self.data))
    }

    /// The values of an INT32 or DATE32 column.
    pub fn i32s(&self) -> Result<Values<'a, i32>> {
        self.values(matches!(self.ty, ColumnType::Int32 | ColumnType::Date32))
    }

    /// The values of an INT64 or DECIMAL64 (unscaled) column.
    pub fn i64s(&self) -> Result<Values<'a, i64>> {
        self.values(matches!(self.ty, ColumnType::Int64 | ColumnType::Decimal64))
    }

    /// The values of a FLOAT64 column.
    pub fn f64s(&self) -> Result<Values<'a, f64>> {
        self.values(self.ty == ColumnType::Float64)
    }

    /// The values (0/1) of a BOOL column.
    pub fn bools(&self) -> Result<Values<'a, u8>> {
        self.values(self.ty == ColumnType::Bool)
    }

    /// Row `r` of any integer-like column as i64 (INT32, DATE32, BOOL, INT64, DECIMAL64
    /// unscaled; FLOAT64 truncated); `None` for UTF8/BINARY. C: `adisk_value_i64`.
    ///
    /// # Panics
    /// If `r` is out of range.
    pub fn value_i64(&self, r: usize) -> Option<i64> {
        Some(match self.ty {
            ColumnType::Int32 | ColumnType::Date32 => {
                i64::from(Values::<i32>::new(self.data).get(r))
            }
            ColumnType::Bool => i64::from(self.data[r]),
            ColumnType::Float64 => Values::<f64>::new(self.data).get(r) as i64,
            ColumnType::Int64 | ColumnType::Decimal64 => Values::<i64>::new(self.data).get(r),
            ColumnType::Utf8 | ColumnType::Binary => return None,
        })
    }

    /// The bytes of row `r` of a UTF8 or BINARY column (C: `adisk_col_bytes`); empty for the
    /// other types.
    ///
    /// # Panics
    /// If `r` is out of range or the offsets are not increasing.
    pub fn bytes(&self, r: usize) -> &'a [u8] {
        if !self.ty.is_var() {
            return &[];
        }
        let offsets = Values::<u32>::new(self.data);
        &self.aux[offsets.get(r) as usize..offsets.get(r + 1) as usize]
    }

    /// Row `r` of a UTF8 column as text (`None` if it is not UTF-8).
    pub fn str(&self, r: usize) -> Option<&'a str> {
        core::str::from_utf8(self.bytes(r)).ok()
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A fixed-width little-endian value of an ADT1 column: `i32`, `i64`, `f64`, `u8` (BOOL) and
/// `u32` (UTF8/BINARY offsets).
pub trait Value: Copy + sealed::Sealed + 'static {
    /// Bytes per value.
    const WIDTH: usize;
    /// Reads one value from `WIDTH` bytes.
    fn read(bytes: &[u8]) -> Self;
    /// Writes one value into `WIDTH` bytes.
    fn write(self, bytes: &mut [u8]);
}

macro_rules! value {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Value for $t {
            const WIDTH: usize = core::mem::size_of::<$t>();
            #[inline(always)]
            fn read(bytes: &[u8]) -> Self {
                let mut b = [0u8; core::mem::size_of::<$t>()];
                b.copy_from_slice(bytes);
                <$t>::from_le_bytes(b)
            }
            #[inline(always)]
            fn write(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
value!(i32, i64, f64, u8, u32);

/// The values of a fixed-width column (or a range of them), read straight from the buffer:
/// no copy, no alignment assumption.
#[derive(Clone, Copy, Debug)]
pub struct Values<'a, T> {
    bytes: &'a [u8],
    _t: PhantomData<T>,
}

impl<'a, T: Value> Values<'a, T> {
    fn new(bytes: &'a [u8]) -> Self {
        Values {
            bytes,
            _t: PhantomData,
        }
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.bytes.len() / T::WIDTH
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i`.
    ///
    /// # Panics
    /// If `i` is out of range.
    #[inline]
    pub fn get(&self, i: usize) -> T {
        T::read(&self.bytes[i * T::WIDTH..(i + 1) * T::WIDTH])
    }

    /// Values `start..start + len`.
    ///
    /// # Panics
    /// If the range is out of bounds.
    pub fn slice(&self, start: usize, len: usize) -> Values<'a, T> {
        Values::new(&self.bytes[start * T::WIDTH..(start + len) * T::WIDTH])
    }

    /// The values in order.
    #[inline]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = T> + 'a {
        self.bytes.chunks_exact(T::WIDTH).map(T::read)
    }
}

/// Builds one ADT1 table in a buffer of yours, column by column, in the order declared with
/// `declare_output`:
///
/// ```
/// # use adisk_sdk::TableWriter;
/// let mut out = [0u8; 256];
/// let mut w = TableWriter::new(&mut out, 2, 3)?;
/// w.int64(&[1, 2, 3])?.validity(&[1, 0, 1])?;
/// w.utf8(["a", "", "xyz"])?;
/// let table = w.finish()?; // emit it with v1::emit(table) or v2::emit(port, table)
/// assert_eq!(adisk_sdk::Table::open(table)?.column(1)?.str(2), Some("xyz"));
/// # Ok::<(), adisk_sdk::Error>(())
/// ```
///
/// Every method fails with [`Error::NoScratch`] when the buffer is too small and with
/// [`Error::BadBuffer`] when a column has the wrong number of rows or there are too many
/// columns.
pub struct TableWriter<'b> {
    out: &'b mut [u8],
    rows: usize,
    columns: usize,
    written: usize,
    at: usize,
}

impl<'b> TableWriter<'b> {
    /// A table of `columns` columns of `rows` rows in `out`.
    pub fn new(out: &'b mut [u8], columns: usize, rows: usize) -> Result<Self> {
        if rows > u32::MAX as usize || columns > u32::MAX as usize {
            return Err(Error::BadBuffer);
        }
        let head = HEADER + DESCRIPTOR * columns;
        if head > out.len() {
            return Err(Error::NoScratch);
        }
        Ok(TableWriter {
            out,
            rows,
            columns,
            written: 0,
            at: head,
        })
    }

    /// Reserves `len` bytes at the next 8-byte boundary (padding zeroed); their offset.
    fn reserve(&mut self, len: usize) -> Result<usize> {
        let start = align8(self.at);
        let end = start.checked_add(len).ok_or(Error::NoScratch)?;
        if end > self.out.len() {
            return Err(Error::NoScratch);
        }
        self.out[self.at..start].fill(0);
        self.at = end;
        Ok(start)
    }

    fn descriptor(&mut self, ty: ColumnType, scale: i8, data: usize, aux: usize) {
        let d = HEADER + DESCRIPTOR * self.written;
        let desc = &mut self.out[d..d + DESCRIPTOR];
        desc[0] = ty as u8;
        desc[1] = scale as u8;
        desc[2..4].fill(0);
        (data as u32).write(&mut desc[4..8]);
        0u32.write(&mut desc[8..12]);
        (aux as u32).write(&mut desc[12..16]);
        self.written += 1;
    }

    fn next_column(&self, values: usize) -> Result {
        if self.written == self.columns || values != self.rows {
            return Err(Error::BadBuffer);
        }
        Ok(())
    }

    /// A fixed-width column of type `ty` (`T` must be its value type: `i32` for INT32 and
    /// DATE32, `i64` for INT64 and DECIMAL64, `f64` for FLOAT64, `u8` for BOOL).
    pub fn fixed<T: Value>(
        &mut self,
        ty: ColumnType,
        scale: i8,
        values: &[T],
    ) -> Result<&mut Self> {
        self.next_column(values.len())?;
        if ty.is_var() || ty.width() != T::WIDTH {
            return Err(Error::BadBuffer);
        }
        let data = self.reserve(T::WIDTH * values.len())?;
        for (dst, v) in self.out[data..self.at]
            .chunks_exact_mut(T::WIDTH)
            .zip(values)
        {
            v.write(dst);
        }
        self.descriptor(ty, scale, data, 0);
        Ok(self)
    }

    /// An INT64 column.
    pub fn int64(&mut self, values: &[i64]) -> Result<&mut Self> {
        self.fixed(ColumnType::Int64, 0, values)
    }

    /// An INT32 column.
    pub fn int32(&mut self, values: &[i32]) -> Result<&mut Self> {
        self.fixed(ColumnType::Int32, 0, values)
    }

    /// A FLOAT64 column.
    pub fn float64(&mut self, values: &[f64]) -> Result<&mut Self> {
        self.fixed(ColumnType::Float64, 0, values)
    }

    /// A DATE32 column (days since 1970-01-01).
    pub fn date32(&mut self, values: &[i32]) -> Result<&mut Self> {
        self.fixed(ColumnType::Date32, 0, values)
    }

    /// A DECIMAL64 column of unscaled values; `scale` must match the declaration
    /// (`decimal64(S)`).
    pub fn decimal64(&mut self, scale: i8, values: &[i64]) -> Result<&mut Self> {
        self.fixed(ColumnType::Decimal64, scale, values)
    }

    /// A BOOL column (0/1 per row).
    pub fn bool(&mut self, values: &[u8]) -> Result<&mut Self> {
        self.fixed(ColumnType::Bool, 0, values)
    }

    /// A UTF8 or BINARY column: `rows` values.
    pub fn var<'v>(
        &mut self,
        ty: ColumnType,
        values: impl IntoIterator<Item = &'v [u8]>,
    ) -> Result<&mut Self> {
        self.next_column(self.rows)?;
        if !ty.is_var() {
            return Err(Error::BadBuffer);
        }
        let data = self.reserve(4 * (self.rows + 1))?;
        let aux = self.reserve(0)?;
        let (mut n, mut off) = (0usize, 0usize);
        0u32.write(&mut self.out[data..data + 4]);
        for v in values {
            if n == self.rows {
                return Err(Error::BadBuffer);
            }
            let end = (aux + off).checked_add(v.len()).ok_or(Error::NoScratch)?;
            if end > self.out.len() || off + v.len() > u32::MAX as usize {
                return Err(Error::NoScratch);
            }
            self.out[aux + off..end].copy_from_slice(v);
            off += v.len();
            n += 1;
            (off as u32).write(&mut self.out[data + 4 * n..data + 4 * n + 4]);
        }
        if n != self.rows {
            return Err(Error::BadBuffer);
        }
        self.at = aux + off;
        self.descriptor(ty, 0, data, aux);
        Ok(self)
    }

    /// A UTF8 column.
    pub fn utf8<'v>(&mut self, values: impl IntoIterator<Item = &'v str>) -> Result<&mut Self> {
        self.var(ColumnType::Utf8, values.into_iter().map(str::as_bytes))
    }

    /// A BINARY column.
    pub fn binary<'v>(&mut self, values: impl IntoIterator<Item = &'v [u8]>) -> Result<&mut Self> {
        self.var(ColumnType::Binary, values)
    }

    /// Nulls for the column written last: one byte per row, 1 = valid, 0 = null.
    pub fn validity(&mut self, valid: &[u8]) -> Result<&mut Self> {
        if self.written == 0 || valid.len() != self.rows {
            return Err(Error::BadBuffer);
        }
        let at = self.reserve(valid.len())?;
        self.out[at..at + valid.len()].copy_from_slice(valid);
        let d = HEADER + DESCRIPTOR * (self.written - 1);
        (at as u32).write(&mut self.out[d + 8..d + 12]);
        Ok(self)
    }

    /// Writes the header; the table's bytes (every column must have been written).
    pub fn finish(mut self) -> Result<&'b [u8]> {
        if self.written != self.columns {
            return Err(Error::BadBuffer);
        }
        let total = self.reserve(0)?;
        let out: &'b mut [u8] = self.out;
        ADT1_MAGIC.write(&mut out[0..4]);
        (self.rows as u32).write(&mut out[4..8]);
        (self.columns as u32).write(&mut out[8..12]);
        (total as u32).write(&mut out[12..16]);
        Ok(&out[..total])
    }
}

/// Bytes a table of `columns` INT64 columns of `rows` rows takes (no nulls): what
/// [`i64_table`] needs, to size an output buffer in a `const`.
pub const fn i64_table_len(columns: usize, rows: usize) -> usize {
    HEADER + DESCRIPTOR * columns + 8 * columns * rows
}

/// Builds a table of INT64 columns (no nulls, all of the same length) in `out`; its bytes.
/// It takes `16 + 16·columns + 8·columns·rows` bytes. C: `adisk_i64_table`.
pub fn i64_table<'b>(out: &'b mut [u8], columns: &[&[i64]]) -> Result<&'b [u8]> {
    let rows = columns.first().map_or(0, |c| c.len());
    let mut w = TableWriter::new(out, columns.len(), rows)?;
    for c in columns {
        w.int64(c)?;
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i64_table_has_the_c_layout() {
        let mut out = [0xffu8; 16 + 32 + 8 * 6];
        let t = i64_table(&mut out, &[&[1, 2, 3], &[-4, 5, 6]]).unwrap();
        assert_eq!(t.len(), 16 + 32 + 48);
        let words: Vec<u32> = t[..48].chunks(4).map(u32::read).collect();
        assert_eq!(
            words,
            [ADT1_MAGIC, 3, 2, 96, 2, 48, 0, 0, 2, 72, 0, 0],
            "header, then descriptors as adisk_i64_table writes them"
        );
        let table = Table::open(t).unwrap();
        let c = table.column(1).unwrap();
        assert_eq!(c.i64s().unwrap().iter().collect::<Vec<_>>(), [-4, 5, 6]);
        assert_eq!(c.value_i64(0), Some(-4));
        assert!(c.i32s().is_err() && c.validity().is_none());
        assert_eq!(
            i64_table(&mut [0u8; 95], &[&[1, 2, 3], &[4, 5, 6]]),
            Err(Error::NoScratch)
        );
    }

    #[test]
    fn mixed_columns_round_trip() {
        let mut out = [0u8; 512];
        let mut w = TableWriter::new(&mut out, 5, 3).unwrap();
        w.int32(&[7, -8, 9]).unwrap().validity(&[1, 0, 1]).unwrap();
        w.utf8(["héllo", "", "x"]).unwrap();
        w.float64(&[0.5, -1.0, 2.25]).unwrap();
        w.decimal64(2, &[105, 0, -7]).unwrap();
        w.binary([&b"\x00\x01"[..], b"", b"z"])
            .unwrap()
            .validity(&[0, 1, 1])
            .unwrap();
        assert!(w.bool(&[1, 0, 1]).is_err(), "a sixth column");
        let t = w.finish().unwrap();
        assert_eq!(t.len() % 8, 0);
        let table = Table::open(t).unwrap();
        assert_eq!((table.rows(), table.columns()), (3, 5));
        let a = table.column(0).unwrap();
        assert_eq!(
            (a.ty(), a.is_valid(1), a.is_valid(2)),
            (ColumnType::Int32, false, true)
        );
        assert_eq!(
            a.i32s().unwrap().slice(1, 2).iter().collect::<Vec<_>>(),
            [-8, 9]
        );
        let s = table.column(1).unwrap();
        assert_eq!(
            (s.str(0), s.str(1), s.str(2)),
            (Some("héllo"), Some(""), Some("x"))
        );
        assert_eq!(s.value_i64(0), None);
        assert_eq!(table.column(2).unwrap().f64s().unwrap().get(2), 2.25);
        let d = table.column(3).unwrap();
        assert_eq!((d.scale(), d.value_i64(2)), (2, Some(-7)));
        let b = table.column(4).unwrap();
        assert_eq!(
            (b.bytes(0), b.validity()),
            (&b"\x00\x01"[..], Some(&[0u8, 1, 1][..]))
        );
        for c in 0..5 {
            let o = u32::read(&t[16 + 16 * c + 4..16 + 16 * c + 8]) as usize;
            assert_eq!(o % 8, 0, "column {c} aligned");
        }
        assert!(table.column(5).is_err());
    }

    #[test]
    fn malformed_buffers_are_bad_input() {
        assert_eq!(Table::open(b"ADT1").err(), Some(Error::BadInput));
        assert_eq!(Table::open(&[0u8; 32]).err(), Some(Error::BadInput));
        let mut out = [0u8; 64];
        let t = i64_table(&mut out, &[&[1, 2]]).unwrap().to_vec();
        let mut bad = t.clone();
        bad[4] = 9; // 9 rows: the data runs past the end
        assert_eq!(
            Table::open(&bad).unwrap().column(0).err(),
            Some(Error::BadInput)
        );
        let mut bad = t.clone();
        bad[8] = 3; // 3 columns: the descriptors run past the end
        assert_eq!(Table::open(&bad).err(), Some(Error::BadInput));
        let mut bad = t;
        bad[16] = 42; // unknown type code
        assert_eq!(
            Table::open(&bad).unwrap().column_type(0),
            Err(Error::BadInput)
        );
    }
}
