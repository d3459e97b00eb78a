//! An even sample of a partition's rows, written with the partition (in its manifest entry)
//! and read by the host's planner: the fraction of sampled rows a filter keeps is its
//! estimated selectivity where distinct-value counts say nothing (`LIKE`, ranges, expressions,
//! tests between two columns).
//!
//! The sample is systematic: rows `0, s, 2s, …` of the partition in write order, with the step
//! `s` doubled (and every other kept row dropped) whenever [`2 × SAMPLE_ROWS`](SAMPLE_ROWS)
//! rows are kept. It holds between `SAMPLE_ROWS` and twice that (every row of a smaller
//! partition), spread evenly over the partition, and is the same for the same rows in the same
//! order, so replicas of a partition carry equal samples. Encoded as an Arrow IPC stream in
//! base64, at most [`SAMPLE_MAX_BYTES`]: wide rows are thinned until it fits.
use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;
use base64::Engine;
use std::sync::Arc;

/// The fewest rows kept of a partition with at least this many rows.
pub const SAMPLE_ROWS: usize = 128;
/// The most bytes of a sample's IPC encoding (before base64).
pub const SAMPLE_MAX_BYTES: usize = 64 << 10;
/// A sample thinned to fewer rows than this is dropped (rows too wide to sample).
const MIN_ROWS: usize = 16;

/// Keeps the sample while a partition is written.
#[derive(Debug)]
pub struct RowSampler {
    schema: SchemaRef,
    /// Rows seen so far.
    seen: u64,
    /// Every `step`-th row is kept.
    step: u64,
    kept: Vec<RecordBatch>,
    kept_rows: usize,
    /// A batch could not be sampled (an unsupported type): no sample.
    failed: bool,
}

impl RowSampler {
    /// A sampler for rows of `schema`.
    pub fn new(schema: SchemaRef) -> Self {
        RowSampler {
            schema,
            seen: 0,
            step: 1,
            kept: Vec::new(),
            kept_rows: 0,
            failed: false,
        }
    }

    /// Takes the rows of `batch` the sample keeps.
    pub fn update(&mut self, batch: &RecordBatch) {
        let n = batch.num_rows() as u64;
        if self.failed || n == 0 {
            self.seen += n;
            return;
        }
        let first = self.seen.div_ceil(self.step) * self.step - self.seen;
        let idx: UInt32Array = (first..n)
            .step_by(self.step as usize)
            .map(|i| i as u32)
            .collect();
        self.seen += n;
        if idx.is_empty() {
            return;
        }
        match arrow::compute::take_record_batch(batch, &idx).map(|b| compact(&b)) {
            Ok(b) => {
                self.kept_rows += b.num_rows();
                self.kept.push(b);
            }
            Err(_) => self.failed = true,
        }
        while !self.failed && self.kept_rows >= 2 * SAMPLE_ROWS {
            self.halve();
            self.step *= 2;
        }
    }

    /// Keeps every other kept row (the first, the third, …).
    fn halve(&mut self) {
        let all = match arrow::compute::concat_batches(&self.schema, &self.kept) {
            Ok(b) => b,
            Err(_) => {
                self.failed = true;
                return;
            }
        };
        let idx: UInt32Array = (0..all.num_rows() as u32).step_by(2).collect();
        match arrow::compute::take_record_batch(&all, &idx).map(|b| compact(&b)) {
            Ok(b) => {
                self.kept_rows = b.num_rows();
                self.kept = vec![b];
            }
            Err(_) => self.failed = true,
        }
    }

    /// The sample, encoded (`None`: no row, a type the sampler cannot take, or rows so wide
    /// that fewer than 16 fit in [`SAMPLE_MAX_BYTES`]).
    pub fn finish(mut self) -> Option<String> {
        loop {
            if self.failed || self.kept_rows == 0 {
                return None;
            }
            let all = arrow::compute::concat_batches(&self.schema, &self.kept).ok()?;
            let bytes = encode(&all)?;
            if bytes.len() <= SAMPLE_MAX_BYTES {
                return Some(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
            if self.kept_rows / 2 < MIN_ROWS {
                return None;
            }
            self.halve();
        }
    }
}

/// Copies the string and binary views of `b` out of the buffers they point into (a taken row
/// of a view array still points into its whole batch's buffers).
fn compact(b: &RecordBatch) -> RecordBatch {
    let columns: Vec<ArrayRef> = b
        .columns()
        .iter()
        .map(|c| {
            if let Some(a) = c.as_any().downcast_ref::<arrow::array::StringViewArray>() {
                Arc::new(a.gc()) as ArrayRef
            } else if let Some(a) = c.as_any().downcast_ref::<arrow::array::BinaryViewArray>() {
                Arc::new(a.gc()) as ArrayRef
            } else {
                c.clone()
            }
        })
        .collect();
    RecordBatch::try_new(b.schema(), columns).unwrap_or_else(|_| b.clone())
}

fn encode(batch: &RecordBatch) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).ok()?;
    w.write(batch).ok()?;
    w.finish().ok()?;
    drop(w);
    Some(out)
}

/// Decodes a sample written by [`RowSampler::finish`].
///
/// # Errors
/// Text that is not such a sample, as a message.
pub fn decode(text: &str) -> Result<RecordBatch, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("sample is not base64: {e}"))?;
    if bytes.len() > SAMPLE_MAX_BYTES {
        return Err(format!("sample of {} bytes is over the bound", bytes.len()));
    }
    let mut r = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| format!("sample is not an Arrow IPC stream: {e}"))?;
    let schema = r.schema();
    let mut batches = Vec::new();
    for b in r.by_ref() {
        batches.push(b.map_err(|e| format!("sample: {e}"))?);
    }
    arrow::compute::concat_batches(&schema, &batches).map_err(|e| format!("sample: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringViewArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8View, true),
        ]))
    }

    fn batch(from: i64, n: i64) -> RecordBatch {
        let k = Int64Array::from_iter_values(from..from + n);
        let s = StringViewArray::from_iter(
            (from..from + n)
                .map(|i| (i % 7 != 0).then(|| format!("a fairly long string value number {i}"))),
        );
        RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(s)]).unwrap()
    }

    fn sample_of(batches: &[(i64, i64)]) -> Option<RecordBatch> {
        let mut s = RowSampler::new(schema());
        for (from, n) in batches {
            s.update(&batch(*from, *n));
        }
        s.finish().map(|t| decode(&t).unwrap())
    }

    fn keys(b: &RecordBatch) -> Vec<i64> {
        let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        k.values().to_vec()
    }

    #[test]
    fn a_small_partition_is_sampled_whole_and_an_empty_one_not_at_all() {
        assert_eq!(
            keys(&sample_of(&[(0, 5), (5, 0), (5, 3)]).unwrap()),
            (0..8).collect::<Vec<_>>()
        );
        assert!(sample_of(&[]).is_none());
        assert!(sample_of(&[(0, 0)]).is_none());
    }

    #[test]
    fn a_large_partition_keeps_evenly_spaced_rows_across_batches_of_any_size() {
        // 100 003 rows in batches of odd sizes: step 512 keeps 196 rows, 0, 512, 1024, ….
        let mut batches = Vec::new();
        let (mut at, mut n) = (0, 1);
        while at < 100_003 {
            let len = n.min(100_003 - at);
            batches.push((at, len));
            at += len;
            n = n * 3 % 4099 + 1;
        }
        let s = sample_of(&batches).unwrap();
        let k = keys(&s);
        assert!(
            (SAMPLE_ROWS..2 * SAMPLE_ROWS).contains(&k.len()),
            "{}",
            k.len()
        );
        let step = k[1] - k[0];
        assert!(k.iter().enumerate().all(|(i, v)| *v == i as i64 * step));
        assert!(k.last().unwrap() + step >= 100_003);
        // Values and NULLs come along with their rows.
        let strings = s
            .column(1)
            .as_any()
            .downcast_ref::<StringViewArray>()
            .unwrap();
        for (i, key) in k.iter().enumerate() {
            assert_eq!(strings.is_null(i), key % 7 == 0);
        }
        // The same rows give the same sample.
        assert_eq!(sample_of(&batches), Some(s));
    }

    #[test]
    fn wide_rows_are_thinned_to_the_byte_bound_or_dropped() {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
        let wide = |len: usize| {
            let mut s = RowSampler::new(schema.clone());
            let a = arrow::array::StringArray::from_iter_values((0..200).map(|_| "x".repeat(len)));
            s.update(&RecordBatch::try_new(schema.clone(), vec![Arc::new(a)]).unwrap());
            s.finish()
        };
        let fits = decode(&wide(1000).unwrap()).unwrap();
        assert!(fits.num_rows() >= MIN_ROWS && fits.num_rows() < 200);
        assert!(wide(10_000).is_none());
        assert!(decode("not base64 !").is_err());
        assert!(decode("aGVsbG8=").is_err());
    }
}
