//! The Arrow layouts of the 2-D FFT's streams and tables, and conversions to the kernel's types.
//!
//! * **Matrix tables** (the input `fft` and the output `fft_out`): one row per element,
//!   `row: UInt32, col: UInt32, re: Float64, im: Float64`. Narrow, fixed-width columns: Parquet
//!   row groups of 64 Ki elements (1 MiB of values) whatever the matrix width, integer bounds
//!   in the manifest (the host reads the matrix's shape from them), and any row or column
//!   assembled by a disklet within a bounded scratch. The input holds `x[row][col]` in
//!   row-major order, rows `(BLOCK, *)` over the disks; the output holds `X[row][col]`
//!   (numpy's `fft2`), columns `(*, BLOCK)` over the disks, column-major.
//! * **Pieces** (the exchange): `target: UInt32, row: UInt32, col_start: UInt32, re, im:
//!   List<Float64>`, one row's share of one target disk's columns.
//! * **Runs** (the split result of pass 1): `run: UInt32` (the split column, not stored) and
//!   the matrix columns, elements of `B` in column-major order within each run. Fixed-width
//!   rows: the split writer sizes its row groups (charged to the job) from the row width.
use super::kernel::{Piece, Segment};
use crate::disklet_util::invalid;
use adisk_diskos::Result;
use arrow::array::{Array, ArrayRef, Float64Array, ListArray, RecordBatch, UInt32Array};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use rustfft::num_complex::Complex64;
use std::sync::{Arc, LazyLock};

/// The item field of the `re` / `im` lists.
fn item() -> FieldRef {
    Arc::new(Field::new("item", DataType::Float64, false))
}

fn list_type() -> DataType {
    DataType::List(item())
}

fn u32_field(name: &str) -> Field {
    Field::new(name, DataType::UInt32, false)
}

static ELEMENTS: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        u32_field("row"),
        u32_field("col"),
        Field::new("re", DataType::Float64, false),
        Field::new("im", DataType::Float64, false),
    ]))
});

/// Schema of a matrix table: `row, col: UInt32, re, im: Float64`.
pub fn elements_schema() -> SchemaRef {
    ELEMENTS.clone()
}

/// Schema of a matrix stream with a leading `UInt32` column `lead` (the split column of a
/// split result: `part` for the output, `run` for the runs of pass 1).
pub fn led_elements_schema(lead: &str) -> SchemaRef {
    let mut fields = vec![u32_field(lead)];
    fields.extend(ELEMENTS.fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new(fields))
}

/// Schema of the exchanged pieces.
pub fn pieces_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        u32_field("target"),
        u32_field("row"),
        u32_field("col_start"),
        Field::new("re", list_type(), false),
        Field::new("im", list_type(), false),
    ]))
}

/// Checks that `schema` has `columns` with these types, by name.
///
/// # Errors
/// A column missing or of another type.
pub fn check_columns(schema: &Schema, what: &str, columns: &[(&str, DataType)]) -> Result<()> {
    for (name, ty) in columns {
        let ok = schema
            .field_with_name(name)
            .is_ok_and(|f| same_type(f.data_type(), ty));
        if !ok {
            return Err(invalid(format!(
                "fft: the {what} stream needs a column `{name}` of type {ty}"
            )));
        }
    }
    Ok(())
}

/// Equal types; lists compare by their item type only (Parquet may restore another item
/// name or nullability).
fn same_type(got: &DataType, want: &DataType) -> bool {
    match (got, want) {
        (DataType::List(a), DataType::List(b)) => a.data_type() == b.data_type(),
        _ => got == want,
    }
}

/// The columns of a matrix table, for [`check_columns`].
pub fn element_columns() -> Vec<(&'static str, DataType)> {
    vec![
        ("row", DataType::UInt32),
        ("col", DataType::UInt32),
        ("re", DataType::Float64),
        ("im", DataType::Float64),
    ]
}

/// The list columns of pieces and runs plus their integer columns `ints`.
pub fn list_columns(ints: &[&'static str]) -> Vec<(&'static str, DataType)> {
    let mut v: Vec<_> = ints.iter().map(|n| (*n, DataType::UInt32)).collect();
    v.push(("re", list_type()));
    v.push(("im", list_type()));
    v
}

/// A column of `batch` by name, downcast.
///
/// # Errors
/// Missing or of another array type.
pub fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| {
            invalid(format!(
                "fft: the stream's column `{name}` is missing or mistyped"
            ))
        })
}

/// Complex values from one entry of the `re` and `im` list columns.
///
/// # Errors
/// Lists of different lengths or not of `Float64`.
pub fn list_values(re: &ListArray, im: &ListArray, i: usize) -> Result<Vec<Complex64>> {
    let (a, b) = (re.value(i), im.value(i));
    let (a, b) = (
        a.as_any().downcast_ref::<Float64Array>(),
        b.as_any().downcast_ref::<Float64Array>(),
    );
    let (Some(a), Some(b)) = (a, b) else {
        return Err(invalid("fft: `re`/`im` lists are not Float64"));
    };
    super::kernel::join_re_im(a.values(), b.values()).map_err(|e| invalid(format!("fft: {e}")))
}

/// Builds rows of list-valued records: a few `UInt32` columns plus `re` / `im` lists.
#[derive(Default)]
pub struct ListRows {
    ints: Vec<Vec<u32>>,
    offsets: Vec<i32>,
    re: Vec<f64>,
    im: Vec<f64>,
}

impl ListRows {
    /// An empty builder with `ints` integer columns.
    pub fn new(ints: usize) -> Self {
        ListRows {
            ints: vec![Vec::new(); ints],
            offsets: vec![0],
            re: Vec::new(),
            im: Vec::new(),
        }
    }

    /// Appends a record.
    pub fn push(&mut self, ints: &[u32], values: &[Complex64]) {
        for (col, v) in self.ints.iter_mut().zip(ints) {
            col.push(*v);
        }
        self.re.extend(values.iter().map(|v| v.re));
        self.im.extend(values.iter().map(|v| v.im));
        self.offsets.push(self.re.len() as i32);
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held (about what the batch will take).
    pub fn bytes(&self) -> u64 {
        (self.re.len() * 16 + self.len() * (4 * self.ints.len() + 8)) as u64
    }

    /// The records as a batch of `schema` (its integer columns first, then `re`, `im`); the
    /// builder is left empty.
    ///
    /// # Errors
    /// A schema of another shape.
    pub fn take(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let ints = self.ints.len();
        let taken = std::mem::replace(self, ListRows::new(ints));
        let offsets = OffsetBuffer::new(taken.offsets.into());
        let list = |v: Vec<f64>| -> ArrayRef {
            Arc::new(ListArray::new(
                item(),
                offsets.clone(),
                Arc::new(Float64Array::from(v)),
                None,
            ))
        };
        let mut columns: Vec<ArrayRef> = taken
            .ints
            .into_iter()
            .map(|c| Arc::new(UInt32Array::from(c)) as ArrayRef)
            .collect();
        columns.push(list(taken.re));
        columns.push(list(taken.im));
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| invalid(format!("fft: {e}")))
    }
}

/// Builds element rows, with a leading `UInt32` column of one value when `lead` is given.
pub struct ElementRows {
    lead: Option<(&'static str, u32)>,
    row: Vec<u32>,
    col: Vec<u32>,
    re: Vec<f64>,
    im: Vec<f64>,
}

impl ElementRows {
    /// An empty builder; `lead` = (column name, value of every row).
    pub fn new(lead: Option<(&'static str, u32)>) -> Self {
        ElementRows {
            lead,
            row: Vec::new(),
            col: Vec::new(),
            re: Vec::new(),
            im: Vec::new(),
        }
    }

    /// Appends element `(row, col)`.
    pub fn push(&mut self, row: u32, col: u32, v: Complex64) {
        self.row.push(row);
        self.col.push(col);
        self.re.push(v.re);
        self.im.push(v.im);
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        self.row.len()
    }

    /// Whether no element is held.
    pub fn is_empty(&self) -> bool {
        self.row.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        (self.len() * (24 + if self.lead.is_some() { 4 } else { 0 })) as u64
    }

    /// The elements as a batch; the builder is left empty.
    ///
    /// # Errors
    /// Never in practice (the schema is fixed).
    pub fn take(&mut self) -> Result<RecordBatch> {
        let lead = self.lead;
        let t = std::mem::replace(self, ElementRows::new(lead));
        let n = t.row.len();
        let mut columns: Vec<ArrayRef> = Vec::new();
        if let Some((_, v)) = lead {
            columns.push(Arc::new(UInt32Array::from(vec![v; n])));
        }
        columns.push(Arc::new(UInt32Array::from(t.row)));
        columns.push(Arc::new(UInt32Array::from(t.col)));
        columns.push(Arc::new(Float64Array::from(t.re)));
        columns.push(Arc::new(Float64Array::from(t.im)));
        let schema = match lead {
            Some((name, _)) => led_elements_schema(name),
            None => elements_schema(),
        };
        RecordBatch::try_new(schema, columns).map_err(|e| invalid(format!("fft: {e}")))
    }
}

/// The pieces of a batch of the exchange.
///
/// # Errors
/// Missing or mistyped columns, bad lists.
pub fn pieces(batch: &RecordBatch) -> Result<Vec<(u32, Piece)>> {
    let target = column::<UInt32Array>(batch, "target")?;
    let row = column::<UInt32Array>(batch, "row")?;
    let start = column::<UInt32Array>(batch, "col_start")?;
    let (re, im) = (
        column::<ListArray>(batch, "re")?,
        column::<ListArray>(batch, "im")?,
    );
    (0..batch.num_rows())
        .map(|i| {
            let piece = Piece {
                row: u64::from(row.value(i)),
                col_start: u64::from(start.value(i)),
                values: list_values(re, im, i)?,
            };
            Ok((target.value(i), piece))
        })
        .collect()
}

/// The segments of a batch of a stored run (elements in column-major order): runs of
/// consecutive rows of one column, at most `max_values` each.
///
/// # Errors
/// Missing or mistyped columns.
pub fn segments(batch: &RecordBatch, max_values: usize) -> Result<Vec<Segment>> {
    let row = column::<UInt32Array>(batch, "row")?;
    let col = column::<UInt32Array>(batch, "col")?;
    let re = column::<Float64Array>(batch, "re")?;
    let im = column::<Float64Array>(batch, "im")?;
    let mut out: Vec<Segment> = Vec::new();
    for i in 0..batch.num_rows() {
        let (r, c) = (u64::from(row.value(i)), u64::from(col.value(i)));
        let v = Complex64::new(re.value(i), im.value(i));
        match out.last_mut() {
            Some(s)
                if s.col == c
                    && s.row_start + s.values.len() as u64 == r
                    && s.values.len() < max_values =>
            {
                s.values.push(v)
            }
            _ => out.push(Segment {
                col: c,
                row_start: r,
                values: vec![v],
            }),
        }
    }
    Ok(out)
}
