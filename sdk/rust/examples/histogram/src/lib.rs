//! histogram: counts the values of one integer-like column in `bins` equal-width bins over
//! `[min, max)`: `bin = (v - min) * bins / (max - min)`; values outside are not counted.
//!   `column=l_quantity bins=10 min=1 max=51`   (decimals are scaled to the column's scale)
//! Output: `bin:int64, count:int64`, every bin, emitted at finish.
//! The Rust twin of `sdk/c/examples/histogram.c`: same parameters, results and error codes.
#![cfg_attr(target_arch = "wasm32", no_std)]

use adisk_sdk::{ColumnType, Error, Flow, Kept, Params, Result, Span, Table, v1};

const MAX_BINS: usize = 4096;

struct Histogram {
    kept: Kept<8192>,
    column: usize,
    bins: i64,
    /// `min` and `max` as text; parsed at the first buffer (dates or scaled decimals).
    min: Span,
    max: Span,
    lo: i64,
    hi: i64,
    resolved: bool,
    counts: [i64; MAX_BINS],
    bin_ids: [i64; MAX_BINS],
    out: [u8; adisk_sdk::i64_table_len(2, MAX_BINS)],
}

impl Histogram {
    const fn new() -> Self {
        Histogram {
            kept: Kept::new(),
            column: 0,
            bins: 0,
            min: Span::EMPTY,
            max: Span::EMPTY,
            lo: 0,
            hi: 0,
            resolved: false,
            counts: [0; MAX_BINS],
            bin_ids: [0; MAX_BINS],
            out: [0; adisk_sdk::i64_table_len(2, MAX_BINS)],
        }
    }

    /// `min` and `max` as values of the column's type.
    fn resolve(&mut self, t: &Table<'_>) -> Result {
        let ty = t.column_type(self.column)?;
        let (min, max) = (self.kept.text(self.min), self.kept.text(self.max));
        let parse = |text: &[u8]| match ty {
            ColumnType::Date32 => adisk_sdk::parse_date(text),
            ColumnType::Decimal64 => {
                adisk_sdk::parse_scaled(text, t.column(self.column).ok()?.scale())
            }
            _ => adisk_sdk::parse_scaled(text, 0),
        };
        match (parse(min), parse(max)) {
            (Some((lo, _)), Some((hi, _))) if hi > lo => (self.lo, self.hi) = (lo, hi),
            _ => return Err(Error::BadParam),
        }
        self.resolved = true;
        Ok(())
    }

    fn add(&mut self, values: impl Iterator<Item = i64>, valid: Option<&[u8]>) {
        let (lo, hi, bins) = (self.lo, self.hi, self.bins);
        let width = hi - lo;
        for (i, v) in values.enumerate() {
            if valid.is_some_and(|valid| valid[i] == 0) || v < lo || v >= hi {
                continue;
            }
            self.counts[((v - lo) * bins / width) as usize] += 1;
        }
    }
}

impl v1::Disklet for Histogram {
    fn init(&mut self, params: Params<'_>) -> Result {
        // min and max are parsed later: keep the parameters.
        let params = self.kept.keep(params).ok_or(Error::BadParam)?;
        let column = params.get("column").ok_or(Error::BadParam)?;
        self.column = params.column_index(column).ok_or(Error::BadParam)?;
        self.bins = match params
            .get("bins")
            .and_then(|v| adisk_sdk::parse_scaled(v, 0))
        {
            Some((b, _)) if (1..=MAX_BINS as i64).contains(&b) => b,
            _ => return Err(Error::BadParam),
        };
        let (Some(min), Some(max)) = (params.get("min"), params.get("max")) else {
            return Err(Error::BadParam);
        };
        (self.min, self.max) = (Span::of(params.bytes(), min), Span::of(params.bytes(), max));
        v1::declare_output("bin:int64,count:int64")
    }

    fn process(&mut self, buf: &[u8], _position: i64) -> Result<Flow> {
        let t = Table::open(buf)?;
        if self.column >= t.columns() {
            return Err(Error::BadInput);
        }
        if !self.resolved {
            self.resolve(&t)?;
        }
        let col = t.column(self.column)?;
        match col.ty() {
            ColumnType::Int64 | ColumnType::Decimal64 => {
                self.add(col.i64s()?.iter(), col.validity())
            }
            ColumnType::Int32 | ColumnType::Date32 => {
                self.add(col.i32s()?.iter().map(i64::from), col.validity())
            }
            _ => return Err(Error::BadInput),
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result {
        let bins = self.bins as usize;
        for (b, id) in self.bin_ids[..bins].iter_mut().enumerate() {
            *id = b as i64;
        }
        v1::emit_i64_table(
            &mut self.out,
            &[&self.bin_ids[..bins], &self.counts[..bins]],
        )
    }
}

adisk_sdk::export_v1!(Histogram = Histogram::new());
