//! Batches that hold far more memory than their rows: copied down to their rows.
//!
//! Two producers make them. An operator that emits a large result at once and hands it on in
//! slices (DataFusion's aggregation emitting its groups, a sort's output): every slice keeps
//! the whole arrays alive. And Arrow IPC decoding: each column of a received batch is a slice
//! of the one buffer its message arrived in. DiskOS counts a buffer by its rows
//! ([`adisk_core::stats::batch_bytes`]), so without a copy the memory really held is larger
//! than what was granted; and DataFusion's operators inside a fragment reserve what a batch
//! holds (`get_array_memory_size`), so a sort over 8 192-row slices of a 30 MB array asked for
//! 154 MB per batch and failed TPC-H Q18 at SF 10 with 1 GiB disks.
//!
//! [`compact`] copies the columns whose memory is more than [`BLOAT`] times their rows' bytes,
//! when the batch would free at least [`MIN_SAVED`] bytes; other batches pass untouched.
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, make_array};
use arrow::array::{MutableArrayData, RecordBatchOptions};
use arrow::datatypes::DataType;
use std::sync::Arc;

/// A column is copied when it holds more than this many times its rows' bytes.
pub const BLOAT: usize = 2;

/// A batch is compacted only when that frees at least this many bytes.
pub const MIN_SAVED: usize = 2 << 20;

/// Memory a column holds and the bytes of its rows. Arrow's slice size of a string or binary
/// view array counts its views only; the bytes those views point at are added.
fn sizes(a: &ArrayRef) -> (usize, usize) {
    let held = a.get_array_memory_size();
    let pointed = match a.data_type() {
        DataType::Utf8View => a.as_string_view().total_buffer_bytes_used(),
        DataType::BinaryView => a.as_binary_view().total_buffer_bytes_used(),
        _ => 0,
    };
    let rows = a.to_data().get_slice_memory_size().unwrap_or(held) + pointed;
    (held, rows)
}

/// `batch` with its bloated columns copied down to their rows (the same batch, untouched,
/// when copying would free less than [`MIN_SAVED`]).
pub fn compact(batch: RecordBatch) -> RecordBatch {
    // Most batches (a stream buffer's worth) hold less than a copy could free: no more work.
    let held: usize = batch
        .columns()
        .iter()
        .map(|c| c.get_array_memory_size())
        .sum();
    if held < MIN_SAVED {
        return batch;
    }
    let sizes: Vec<(usize, usize)> = batch.columns().iter().map(sizes).collect();
    let saved: usize = sizes
        .iter()
        .filter(|(held, rows)| *held > BLOAT * rows)
        .map(|(held, rows)| held - rows)
        .sum();
    if saved < MIN_SAVED {
        return batch;
    }
    let columns = batch
        .columns()
        .iter()
        .zip(&sizes)
        .map(|(c, (held, rows))| match *held > BLOAT * rows {
            true => copy(c),
            false => c.clone(),
        })
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    // Same schema, same lengths, same types: cannot fail; keep the original if it somehow does.
    RecordBatch::try_new_with_options(batch.schema(), columns, &options).unwrap_or(batch)
}

/// A copy of `a` holding only its rows: string and binary views keep only the bytes their
/// rows point at.
fn copy(a: &ArrayRef) -> ArrayRef {
    match a.data_type() {
        DataType::Utf8View => Arc::new(a.as_string_view().gc()),
        DataType::BinaryView => Arc::new(a.as_binary_view().gc()),
        _ => {
            let data = a.to_data();
            let mut m = MutableArrayData::new(vec![&data], false, data.len());
            match m.try_extend(0, 0, data.len()) {
                Ok(()) => make_array(m.freeze()),
                Err(_) => a.clone(), // offsets past their type's range: keep it as it is
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringViewArray};
    use arrow::datatypes::{Field, Schema};

    fn held(b: &RecordBatch) -> usize {
        b.columns().iter().map(|c| c.get_array_memory_size()).sum()
    }

    fn big() -> RecordBatch {
        let n = 1_000_000;
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8View, false),
        ]));
        let k = Int64Array::from_iter((0..n).map(|i| (i % 7 != 0).then_some(i)));
        let s = StringViewArray::from_iter_values((0..n).map(|i| format!("customer#{i:012}")));
        RecordBatch::try_new(schema, vec![Arc::new(k), Arc::new(s)]).unwrap()
    }

    /// A slice of a large batch is copied down to its rows, values and nulls unchanged.
    #[test]
    fn a_slice_of_a_large_batch_is_copied_to_its_rows() {
        let whole = big();
        let slice = whole.slice(500_000, 8192);
        assert!(held(&slice) > 20 << 20, "{}", held(&slice));
        let c = compact(slice.clone());
        assert_eq!(c, slice);
        assert!(held(&c) < 1 << 20, "{}", held(&c));
        let rows: usize = c.columns().iter().map(|a| sizes(a).1).sum();
        assert!(held(&c) <= BLOAT * rows, "{} {rows}", held(&c));
        assert_eq!(c.column(0).null_count(), slice.column(0).null_count());
    }

    /// A batch that holds about what its rows need passes untouched (no copy).
    #[test]
    fn a_compact_batch_is_not_copied() {
        let whole = big();
        let c = compact(whole.clone());
        assert!(Arc::ptr_eq(c.column(0), whole.column(0)));
        assert!(Arc::ptr_eq(c.column(1), whole.column(1)));
        // A slice of a slice (still holding the whole arrays) keeps its values either way.
        let small = whole.slice(0, 100_000).slice(0, 50_000);
        let s = compact(small.clone());
        assert_eq!(s, small);
    }

    /// A batch read back from Arrow IPC, whose columns may share the message's buffer, holds
    /// at most about twice its rows once compacted.
    #[test]
    fn a_batch_decoded_from_ipc_holds_about_its_rows() {
        use arrow::ipc::reader::StreamReader;
        use arrow::ipc::writer::StreamWriter;
        let b = big().slice(0, 200_000);
        let mut buf = Vec::new();
        let mut w = StreamWriter::try_new(&mut buf, &b.schema()).unwrap();
        w.write(&b).unwrap();
        w.finish().unwrap();
        drop(w);
        let read = StreamReader::try_new(std::io::Cursor::new(buf), None)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let c = compact(read.clone());
        assert_eq!(c, read);
        let rows = adisk_core::stats::batch_bytes(&c) as usize;
        assert!(held(&c) <= BLOAT * rows + MIN_SAVED, "{} {rows}", held(&c));
    }
}
