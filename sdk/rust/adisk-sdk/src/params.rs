//! Parameters: `key=value\n` lines, and the C SDK's literal parsers.

/// The parameters handed to `adisk_init`: `key=value` lines (the user's, then the host's:
/// ABI v1 `_input`, `_columns`; ABI v2 `_inputs`, `_outputs`, `_input.i`, `_columns.i`,
/// `_types.i`). They live in the input area, which the next call overwrites: keep what you
/// need past init with [`Kept`].
#[derive(Clone, Copy, Debug)]
pub struct Params<'a> {
    text: &'a [u8],
}

impl<'a> Params<'a> {
    /// Parameters over `text`.
    pub const fn new(text: &'a [u8]) -> Self {
        Params { text }
    }

    /// The whole text.
    pub fn bytes(&self) -> &'a [u8] {
        self.text
    }

    /// The `(key, value)` of every line that has a `=`.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.text.split(|b| *b == b'\n').filter_map(|line| {
            let eq = line.iter().position(|b| *b == b'=')?;
            Some((&line[..eq], &line[eq + 1..]))
        })
    }

    /// The value of the first line `key=…` (C: `adisk_param`).
    pub fn get(&self, key: &str) -> Option<&'a [u8]> {
        self.get_bytes(key.as_bytes())
    }

    fn get_bytes(&self, key: &[u8]) -> Option<&'a [u8]> {
        let k = key.len();
        self.text
            .split(|b| *b == b'\n')
            .find(|line| line.len() > k && line[k] == b'=' && line.starts_with(key))
            .map(|line| &line[k + 1..])
    }

    /// The value of `key` as UTF-8 text (`None` if absent or not UTF-8).
    pub fn get_str(&self, key: &str) -> Option<&'a str> {
        core::str::from_utf8(self.get(key)?).ok()
    }

    /// The value of `key` as an integer (decimals truncated, as `parse_scaled` at scale 0).
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        parse_scaled(self.get(key)?, 0).map(|(v, _)| v)
    }

    /// Index of `name` in the comma-separated list `key` (C: `adisk_list_index`).
    pub fn list_index(&self, key: &str, name: &[u8]) -> Option<usize> {
        list_index(self.get(key)?, name)
    }

    /// Index of input column `name` (ABI v1: in `_columns`; C: `adisk_column_index`).
    pub fn column_index(&self, name: &[u8]) -> Option<usize> {
        self.list_index("_columns", name)
    }

    /// The value of `base.input`, e.g. `_types.1` (ABI v2; `base` at most 19 bytes).
    pub fn input_param(&self, base: &str, input: u32) -> Option<&'a [u8]> {
        let mut key = [0u8; 32];
        let len = input_key(&mut key, base, input)?;
        self.get_bytes(&key[..len])
    }

    /// Index of column `name` of input `input` (ABI v2: in `_columns.i`; C:
    /// `adisk_input_column`).
    pub fn input_column(&self, input: u32, name: &[u8]) -> Option<usize> {
        list_index(self.input_param("_columns", input)?, name)
    }
}

fn list_index(list: &[u8], name: &[u8]) -> Option<usize> {
    list.split(|b| *b == b',').position(|item| item == name)
}

/// Writes `base.input` into `key`; its length, or `None` if `base` is longer than 19 bytes.
fn input_key(key: &mut [u8; 32], base: &str, input: u32) -> Option<usize> {
    let base = base.as_bytes();
    if base.len() > 19 {
        return None;
    }
    key[..base.len()].copy_from_slice(base);
    let mut n = base.len();
    key[n] = b'.';
    n += 1;
    let mut digits = [0u8; 10];
    let (mut d, mut v) = (0, input);
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        key[n] = digits[d];
        n += 1;
    }
    Some(n)
}

/// A copy of the parameters that outlives init (C: `adisk_keep_params`), `N` bytes at most.
/// Put it in the disklet's state and refer to values in it by [`Span`].
pub struct Kept<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Kept<N> {
    /// Empty (all zeros: costs no bytes in the module).
    pub const fn new() -> Self {
        Kept {
            buf: [0; N],
            len: 0,
        }
    }

    /// Copies `params`; the copy, or `None` if it takes more than `N` bytes.
    pub fn keep(&mut self, params: Params<'_>) -> Option<Params<'_>> {
        let text = params.bytes();
        if text.len() > N {
            return None;
        }
        self.buf[..text.len()].copy_from_slice(text);
        self.len = text.len();
        Some(self.params())
    }

    /// The kept parameters.
    pub fn params(&self) -> Params<'_> {
        Params::new(&self.buf[..self.len])
    }

    /// The text of `span` (taken from these parameters with [`Span::of`]).
    pub fn text(&self, span: Span) -> &[u8] {
        span.get(&self.buf[..self.len])
    }
}

impl<const N: usize> Default for Kept<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a piece of text lies inside a larger one (a value inside [`Kept`] parameters), so a
/// disklet's state can refer to it without a self-reference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// The empty span.
    pub const EMPTY: Span = Span { start: 0, len: 0 };

    /// The span of `part` inside `whole`.
    ///
    /// # Panics
    /// If `part` is not a subslice of `whole`.
    pub fn of(whole: &[u8], part: &[u8]) -> Span {
        let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
        assert!(
            start <= whole.len() && part.len() <= whole.len() - start,
            "Span::of: not a subslice"
        );
        Span {
            start: start as u32,
            len: part.len() as u32,
        }
    }

    /// The text of this span in `whole` (empty if it does not fit).
    pub fn get(self, whole: &[u8]) -> &[u8] {
        let (s, e) = (self.start as usize, self.start as usize + self.len as usize);
        whole.get(s..e).unwrap_or(&[])
    }

    /// Its length.
    pub const fn len(self) -> usize {
        self.len as usize
    }

    /// Whether it is empty.
    pub const fn is_empty(self) -> bool {
        self.len == 0
    }
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Parses an integer or decimal literal (`-12`, `0.05`) scaled by 10^`scale` (`0.05` at scale
/// 2 → 5; digits past the scale are dropped, not rounded), after optional white space and sign.
/// Returns `(value, bytes consumed)`, or `None` without a digit. Exactly the C SDK's
/// `adisk_parse_scaled`.
pub fn parse_scaled(s: &[u8], scale: i32) -> Option<(i64, usize)> {
    let n = s.len();
    let mut i = 0;
    while i < n && is_space(s[i]) {
        i += 1;
    }
    let mut neg = false;
    if i < n && (s[i] == b'-' || s[i] == b'+') {
        neg = s[i] == b'-';
        i += 1;
    }
    let (mut v, mut frac, mut digits) = (0i64, -1i32, 0);
    while i < n {
        let c = s[i];
        if c == b'.' && frac < 0 {
            frac = 0;
            i += 1;
            continue;
        }
        if !c.is_ascii_digit() {
            break;
        }
        i += 1;
        if frac >= 0 {
            if frac >= scale {
                continue;
            }
            frac += 1;
        }
        v = v.wrapping_mul(10).wrapping_add(i64::from(c - b'0'));
        digits += 1;
    }
    if digits == 0 {
        return None;
    }
    for _ in frac.max(0)..scale {
        v = v.wrapping_mul(10);
    }
    Some((if neg { v.wrapping_neg() } else { v }, i))
}

/// Days since 1970-01-01 of `YYYY-MM-DD` (proleptic Gregorian), after optional white space.
/// Returns `(days, bytes consumed)` or `None`. Exactly the C SDK's `adisk_parse_date` (which
/// checks the dashes, not the digits).
pub fn parse_date(s: &[u8]) -> Option<(i64, usize)> {
    let n = s.len();
    let mut i = 0;
    while i < n && is_space(s[i]) {
        i += 1;
    }
    if n - i < 10 || s[i + 4] != b'-' || s[i + 7] != b'-' {
        return None;
    }
    let digit = |k: usize| i32::from(s[i + k]).wrapping_sub(i32::from(b'0'));
    let mut y = 0i32;
    for k in 0..4 {
        y = y.wrapping_mul(10).wrapping_add(digit(k));
    }
    let m = digit(5).wrapping_mul(10).wrapping_add(digit(6));
    let d = digit(8).wrapping_mul(10).wrapping_add(digit(9));
    y -= i32::from(m <= 2);
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some((i64::from(era) * 146_097 + i64::from(doe) - 719_468, i + 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &[u8] = b"mode=select\nwhere=a < 3\n_columns=l_shipdate,l_discount,l_quantity\nempty=\n_columns.1=k,v\n_types.12=int64";

    #[test]
    fn params_as_the_c_sdk_reads_them() {
        let p = Params::new(P);
        assert_eq!(p.get("mode"), Some(&b"select"[..]));
        assert_eq!(p.get("where"), Some(&b"a < 3"[..]));
        assert_eq!(p.get("empty"), Some(&b""[..]));
        assert_eq!(p.get("mod"), None);
        assert_eq!(p.get("missing"), None);
        assert_eq!(p.column_index(b"l_discount"), Some(1));
        assert_eq!(p.column_index(b"l_quantity"), Some(2));
        assert_eq!(p.column_index(b"l_"), None);
        assert_eq!(p.input_column(1, b"v"), Some(1));
        assert_eq!(p.input_param("_types", 12), Some(&b"int64"[..]));
        assert_eq!(p.input_param("_types", 1), None);
        assert_eq!(p.iter().count(), 6);
    }

    #[test]
    fn kept_params_and_spans() {
        let mut kept = Kept::<256>::new();
        let params = kept.keep(Params::new(P)).unwrap();
        let w = params.get("where").unwrap();
        let span = Span::of(params.bytes(), w);
        assert_eq!(kept.text(span), b"a < 3");
        assert!(Kept::<4>::new().keep(Params::new(P)).is_none());
    }

    #[test]
    fn scaled_literals() {
        assert_eq!(parse_scaled(b"0.05", 2), Some((5, 4)));
        assert_eq!(parse_scaled(b" -12", 0), Some((-12, 4)));
        assert_eq!(parse_scaled(b"24", 2), Some((2400, 2)));
        assert_eq!(parse_scaled(b"0.079", 2), Some((7, 5)));
        assert_eq!(parse_scaled(b"1.5x", 0), Some((1, 3)));
        assert_eq!(parse_scaled(b"+.5", 6), Some((500_000, 3)));
        assert_eq!(parse_scaled(b"-", 0), None);
        assert_eq!(parse_scaled(b"", 0), None);
    }

    #[test]
    fn dates() {
        assert_eq!(parse_date(b"1970-01-01"), Some((0, 10)));
        assert_eq!(parse_date(b" 1994-01-01"), Some((8766, 11)));
        assert_eq!(parse_date(b"2000-03-01"), Some((11017, 10)));
        assert_eq!(parse_date(b"1969-12-31"), Some((-1, 10)));
        assert_eq!(parse_date(b"1994/01/01"), None);
        assert_eq!(parse_date(b"1994-01-1"), None);
    }
}
