//! count_if: counts (`mode=count`) or selects (`mode=select`: emits the stream positions of)
//! the rows matching every condition of `where`, e.g.
//!   `where=l_shipdate >= 1994-01-01; l_discount >= 0.05; l_quantity < 24`
//! Values are integers, decimals (scaled to the column's scale) or dates (DATE32 columns).
//! Output: `count:int64` (one row at finish), or `row:int64` (matching positions).
//! The Rust twin of `sdk/c/examples/count_if.c`: same parameters, results and error codes.
#![cfg_attr(target_arch = "wasm32", no_std)]

use adisk_sdk::{ColumnType, Error, Flow, Kept, Params, Result, Span, Table, Values, v1};

const MAX_CONDS: usize = 16;
const BLOCK: usize = 4096;

#[derive(Clone, Copy)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

#[derive(Clone, Copy)]
struct Cond {
    column: usize,
    op: Op,
    /// The value's text in the kept parameters; parsed at the first buffer, when the column's
    /// type (and a decimal's scale) is known.
    text: Span,
    ivalue: i64,
    fvalue: f64,
}

const NO_COND: Cond = Cond {
    column: 0,
    op: Op::Lt,
    text: Span::EMPTY,
    ivalue: 0,
    fvalue: 0.0,
};

struct CountIf {
    kept: Kept<8192>,
    conds: [Cond; MAX_CONDS],
    nconds: usize,
    resolved: bool,
    select: bool,
    count: i64,
    mask: [u8; BLOCK],
    positions: [i64; BLOCK],
    out: [u8; adisk_sdk::i64_table_len(1, BLOCK)],
}

impl CountIf {
    /// All zeros: the state costs no bytes in the module.
    const fn new() -> Self {
        CountIf {
            kept: Kept::new(),
            conds: [NO_COND; MAX_CONDS],
            nconds: 0,
            resolved: false,
            select: false,
            count: 0,
            mask: [0; BLOCK],
            positions: [0; BLOCK],
            out: [0; adisk_sdk::i64_table_len(1, BLOCK)],
        }
    }
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// `column op value; …` into `conds`; each value is kept as its span in `params`.
fn parse_where(
    params: Params<'_>,
    w: &[u8],
    conds: &mut [Cond; MAX_CONDS],
    n: &mut usize,
) -> Result {
    for part in w.split(|b| *b == b';') {
        let e = part.len();
        let mut a = 0;
        while a < e && is_space(part[a]) {
            a += 1;
        }
        let mut b = a;
        while b < e && !is_space(part[b]) && !matches!(part[b], b'<' | b'>' | b'=' | b'!') {
            b += 1;
        }
        if a == b {
            continue;
        }
        if *n == MAX_CONDS {
            return Err(Error::BadParam);
        }
        let Some(column) = params.column_index(&part[a..b]) else {
            v1::log_str("count_if: unknown column in where");
            return Err(Error::BadParam);
        };
        while b < e && is_space(part[b]) {
            b += 1;
        }
        let rest = &part[b..];
        let (op, used) = match rest {
            [b'<', b'=', ..] => (Op::Le, 2),
            [b'>', b'=', ..] => (Op::Ge, 2),
            [b'!', b'=', ..] => (Op::Ne, 2),
            [b'<', ..] => (Op::Lt, 1),
            [b'>', ..] => (Op::Gt, 1),
            [b'=', ..] => (Op::Eq, 1),
            _ => return Err(Error::BadParam),
        };
        conds[*n] = Cond {
            column,
            op,
            text: Span::of(params.bytes(), &rest[used..]),
            ..NO_COND
        };
        *n += 1;
    }
    Ok(())
}

/// `mask[i] &= values[i] op v` over one block.
fn apply<T: PartialOrd + Copy>(mask: &mut [u8], values: impl Iterator<Item = T>, op: Op, v: T) {
    let m = mask.iter_mut().zip(values);
    match op {
        Op::Lt => m.for_each(|(k, x)| *k &= u8::from(x < v)),
        Op::Le => m.for_each(|(k, x)| *k &= u8::from(x <= v)),
        Op::Gt => m.for_each(|(k, x)| *k &= u8::from(x > v)),
        Op::Ge => m.for_each(|(k, x)| *k &= u8::from(x >= v)),
        Op::Eq => m.for_each(|(k, x)| *k &= u8::from(x == v)),
        Op::Ne => m.for_each(|(k, x)| *k &= u8::from(x != v)),
    }
}

impl CountIf {
    /// Conditions get their values once the column types are known (first buffer).
    fn resolve(&mut self, t: &Table<'_>) -> Result {
        for c in &mut self.conds[..self.nconds] {
            if c.column >= t.columns() {
                return Err(Error::BadInput);
            }
            let text = self.kept.text(c.text);
            let parsed = match t.column_type(c.column)? {
                ColumnType::Date32 => adisk_sdk::parse_date(text),
                ColumnType::Float64 => {
                    let v = adisk_sdk::parse_scaled(text, 6);
                    if let Some((v, _)) = v {
                        c.fvalue = v as f64 / 1e6;
                    }
                    v
                }
                ColumnType::Int32 | ColumnType::Int64 => adisk_sdk::parse_scaled(text, 0),
                ColumnType::Decimal64 => adisk_sdk::parse_scaled(text, t.column(c.column)?.scale()),
                _ => return Err(Error::BadInput),
            };
            c.ivalue = parsed.ok_or(Error::BadParam)?.0;
        }
        self.resolved = true;
        Ok(())
    }
}

impl v1::Disklet for CountIf {
    fn init(&mut self, params: Params<'_>) -> Result {
        // The conditions refer to the parameters later: keep them.
        let params = self.kept.keep(params).ok_or(Error::BadParam)?;
        if let Some(v) = params.get("mode") {
            if v.len() == 6 && v[0] == b's' {
                self.select = true;
            } else if !(v.len() == 5 && v[0] == b'c') {
                return Err(Error::BadParam);
            }
        }
        if let Some(w) = params.get("where") {
            parse_where(params, w, &mut self.conds, &mut self.nconds)?;
        }
        v1::declare_output(if self.select {
            "row:int64"
        } else {
            "count:int64"
        })
    }

    fn process(&mut self, buf: &[u8], position: i64) -> Result<Flow> {
        let t = Table::open(buf)?;
        if !self.resolved {
            self.resolve(&t)?;
        }
        for start in (0..t.rows()).step_by(BLOCK) {
            let m = (t.rows() - start).min(BLOCK);
            let mask = &mut self.mask[..m];
            mask.fill(1);
            for c in &self.conds[..self.nconds] {
                let col = t.column(c.column)?;
                match col.ty() {
                    ColumnType::Int32 | ColumnType::Date32 => apply(
                        mask,
                        col.i32s()?.slice(start, m).iter(),
                        c.op,
                        c.ivalue as i32,
                    ),
                    ColumnType::Float64 => {
                        apply(mask, col.f64s()?.slice(start, m).iter(), c.op, c.fvalue)
                    }
                    _ => {
                        let x: Values<'_, i64> = col.i64s()?;
                        apply(mask, x.slice(start, m).iter(), c.op, c.ivalue)
                    }
                }
                if let Some(valid) = col.validity() {
                    mask.iter_mut()
                        .zip(&valid[start..start + m])
                        .for_each(|(k, v)| *k &= v);
                }
            }
            if !self.select {
                self.count += mask.iter().map(|k| i64::from(*k)).sum::<i64>();
            } else {
                let mut k = 0;
                for (i, _) in mask.iter().enumerate().filter(|(_, k)| **k != 0) {
                    self.positions[k] = position + (start + i) as i64;
                    k += 1;
                }
                if k > 0 {
                    v1::emit_i64_table(&mut self.out, &[&self.positions[..k]])
                        .map_err(|_| Error::Failed)?;
                }
            }
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result {
        if self.select {
            return Ok(());
        }
        v1::emit_i64_table(&mut self.out, &[&[self.count]])
    }
}

adisk_sdk::export_v1!(CountIf = CountIf::new());
