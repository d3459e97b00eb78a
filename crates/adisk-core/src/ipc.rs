//! Arrow IPC streams decoded from Flight with every check arrow makes, the string views'
//! checked faster.
//!
//! arrow's IPC reader checks each decoded array in full. For a string view column it calls
//! `from_utf8` once per value: on a disk receiving an exchange of `lineitem`'s comments that
//! was 17 % of the receiver's CPU (`perf`, `adisk bench exchange`). Here the reader builds the
//! arrays unchecked, and [`check_batch`] then makes the same checks before anyone sees the
//! batch: every column but the top-level views through arrow's own `validate_full`; a view
//! column through arrow's layout and null checks, then its views one by one as arrow does (the
//! inline ones' padding, buffer indexes, bounds and prefixes), with UTF-8 checked once per
//! data buffer instead of once per value — a value cut from a valid UTF-8 buffer at two
//! character boundaries is valid UTF-8. A buffer that is not valid UTF-8 as a whole (bytes no
//! view points at) falls back to checking each of its values.
use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::buffer::Buffer;
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use arrow_flight::decode::{FlightDataDecoder, FlightRecordBatchStream};
use arrow_flight::error::FlightError;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};

/// The record batches of `stream`, each checked by [`check_batch`] before it is handed on.
pub fn checked(
    stream: FlightRecordBatchStream,
) -> BoxStream<'static, Result<RecordBatch, FlightError>> {
    // SAFETY: the decoder skips arrow's checks of the arrays it builds; no batch leaves this
    // stream before `check_batch` made every one of those checks on it.
    let decoder: FlightDataDecoder = unsafe { stream.into_inner().with_skip_validation() };
    FlightRecordBatchStream::new(decoder)
        .and_then(|b| futures::future::ready(check_batch(b).map_err(FlightError::Arrow)))
        .boxed()
}

/// Checks every column of `batch` as arrow's `ArrayData::validate_full` does.
///
/// # Errors
/// The first column that arrow would refuse, with arrow's kind of message.
pub fn check_batch(batch: RecordBatch) -> Result<RecordBatch, ArrowError> {
    for column in batch.columns() {
        check_array(column)?;
    }
    Ok(batch)
}

fn check_array(array: &ArrayRef) -> Result<(), ArrowError> {
    let data = array.to_data();
    let utf8 = match data.data_type() {
        DataType::Utf8View => true,
        DataType::BinaryView => false,
        _ => return data.validate_full(),
    };
    data.validate()?;
    data.validate_nulls()?;
    let views = data.buffers()[0].typed_data::<u128>();
    let views = &views[data.offset()..data.offset() + data.len()];
    check_views(views, &data.buffers()[1..], utf8)
}

/// Strings up to this length are stored in their view.
const INLINE: u32 = 12;

/// The checks of arrow's `validate_string_view` (`utf8`) or `validate_binary_view`.
pub fn check_views(views: &[u128], buffers: &[Buffer], utf8: bool) -> Result<(), ArrowError> {
    let whole: Vec<bool> = buffers
        .iter()
        .map(|b| utf8 && std::str::from_utf8(b.as_slice()).is_ok())
        .collect();
    for (idx, v) in views.iter().enumerate() {
        let len = *v as u32;
        if len <= INLINE {
            if len < INLINE && (v >> (32 + len * 8)) != 0 {
                return Err(invalid(format!(
                    "View at index {idx} contained non-zero padding for string of length {len}"
                )));
            }
            // Inline bytes with no high bit set are ASCII.
            if utf8 && (v >> 32) & 0x8080_8080_8080_8080_8080_8080 != 0 {
                utf8_of(idx, &v.to_le_bytes()[4..4 + len as usize])?;
            }
            continue;
        }
        let (prefix, index, offset) = ((v >> 32) as u32, (v >> 64) as u32, (v >> 96) as u32);
        let data = buffers.get(index as usize).ok_or_else(|| {
            invalid(format!(
                "Invalid buffer index at {idx}: got index {index} but only has {} buffers",
                buffers.len()
            ))
        })?;
        let (start, end) = (offset as usize, offset as usize + len as usize);
        let bytes = data.get(start..end).ok_or_else(|| {
            invalid(format!(
                "Invalid buffer slice at {idx}: got {start}..{end} but buffer {index} has length {}",
                data.len()
            ))
        })?;
        if !bytes.starts_with(&prefix.to_le_bytes()) {
            return Err(invalid("Mismatch between embedded prefix and data".into()));
        }
        if utf8 && !(whole[index as usize] && boundary(data, start) && boundary(data, end)) {
            utf8_of(idx, bytes)?;
        }
    }
    Ok(())
}

/// Whether `at` is a character boundary of the valid UTF-8 `data` (as `str::is_char_boundary`).
fn boundary(data: &[u8], at: usize) -> bool {
    // Continuation bytes are 0b10xx_xxxx.
    data.get(at).is_none_or(|b| (*b as i8) >= -0x40)
}

fn utf8_of(idx: usize, bytes: &[u8]) -> Result<(), ArrowError> {
    std::str::from_utf8(bytes)
        .map(|_| ())
        .map_err(|e| invalid(format!("Encountered non-UTF-8 data at index {idx}: {e}")))
}

fn invalid(message: String) -> ArrowError {
    ArrowError::InvalidArgumentError(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BinaryViewArray, Int32Array, StringViewArray};
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn view(len: u32, prefix: [u8; 4], index: u32, offset: u32) -> u128 {
        len as u128
            | (u32::from_le_bytes(prefix) as u128) << 32
            | (index as u128) << 64
            | (offset as u128) << 96
    }

    fn inline(bytes: &[u8]) -> u128 {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        b[4..4 + bytes.len()].copy_from_slice(bytes);
        u128::from_le_bytes(b)
    }

    /// arrow's own check (`validate_full`) of `views` over `buffers` as a column of `ty`.
    fn arrows(ty: DataType, views: &[u128], buffers: &[Buffer]) -> bool {
        let mut builder = arrow::array::ArrayData::builder(ty)
            .len(views.len())
            .add_buffer(Buffer::from_vec(views.to_vec()));
        for b in buffers {
            builder = builder.add_buffer(b.clone());
        }
        // SAFETY: checked right away, never used otherwise.
        unsafe { builder.build_unchecked() }.validate_full().is_ok()
    }

    /// Both checks, arrow's and this one, agree on `views` over `buffers` (as strings and as
    /// binaries); whether the strings pass.
    fn agree(views: &[u128], buffers: &[Buffer]) -> bool {
        let ours = check_views(views, buffers, true).is_ok();
        assert_eq!(
            ours,
            arrows(DataType::Utf8View, views, buffers),
            "views {views:x?}"
        );
        assert_eq!(
            check_views(views, buffers, false).is_ok(),
            arrows(DataType::BinaryView, views, buffers),
            "views {views:x?} as binaries"
        );
        ours
    }

    #[test]
    fn views_are_refused_exactly_when_arrow_refuses_them() {
        let text = "a long enough string, ünïcode ok, 日本語 too".as_bytes();
        let ok = Buffer::from(text);
        let p = |o: usize| [text[o], text[o + 1], text[o + 2], text[o + 3]];
        // Valid: the whole buffer, a part between boundaries, inline ASCII and non-ASCII.
        assert!(agree(&[view(text.len() as u32, p(0), 0, 0)], &[ok.clone()]));
        assert!(agree(&[view(13, p(2), 0, 2)], &[ok.clone()]));
        assert!(agree(&[inline(b"short"), inline("ünï".as_bytes())], &[]));
        // The thresholds: no views, an empty value, 12 bytes (the longest inline), 13 (the
        // shortest in a buffer, above), an inline value ending inside a character.
        assert!(agree(&[], &[]) && agree(&[inline(b"")], &[]));
        assert!(agree(
            &[inline(b"exactly12byt"), inline("ünïcödé".as_bytes())],
            &[]
        ));
        assert!(!agree(&[inline(&"ünïcödé".as_bytes()[..10])], &[]));
        // Cut inside a character: starting on a continuation byte, or ending inside one.
        let u = text.iter().position(|b| *b == 0xC3).unwrap();
        assert!(!agree(
            &[view(13, p(u + 1), 0, u as u32 + 1)],
            &[ok.clone()]
        ));
        assert!(!agree(
            &[view((u + 1 - 2) as u32, p(2), 0, 2)],
            &[ok.clone()]
        ));
        // Inline: bad UTF-8, non-zero padding.
        assert!(!agree(&[inline(&[0xFF, b'a'])], &[]));
        let mut padded = inline(b"ab");
        padded |= 1u128 << 100;
        assert!(!agree(&[padded], &[]));
        // Out of line: unknown buffer, out of bounds, wrong prefix.
        assert!(!agree(&[view(13, p(0), 1, 0)], &[ok.clone()]));
        assert!(!agree(
            &[view(13, p(0), 0, text.len() as u32 - 5)],
            &[ok.clone()]
        ));
        assert!(!agree(&[view(13, *b"zzzz", 0, 0)], &[ok.clone()]));
        // A buffer with bytes that are not UTF-8 outside the values: each value checked.
        let mut mixed = text.to_vec();
        mixed.extend_from_slice(&[0xFF, 0xFE]);
        mixed.extend_from_slice(text);
        let mixed = Buffer::from(mixed);
        let second = text.len() as u32 + 2;
        assert!(agree(&[view(20, p(0), 0, second)], &[mixed.clone()]));
        assert!(!agree(
            &[view(20, [text[38], text[39], 0xFF, 0xFE], 0, 38)],
            &[mixed]
        ));
    }

    #[test]
    fn a_batch_is_checked_column_by_column() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", arrow::datatypes::DataType::Int32, true),
            Field::new("s", arrow::datatypes::DataType::Utf8View, true),
            Field::new("b", arrow::datatypes::DataType::BinaryView, true),
        ]));
        let s = StringViewArray::from(vec![Some("x"), None, Some("a string over twelve")]);
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![Some(1), None])),
                Arc::new(s.slice(1, 2)),
                Arc::new(BinaryViewArray::from(vec![&b"\xff"[..], b"", b"yy"]).slice(0, 2)),
            ],
        )
        .unwrap();
        assert!(check_batch(batch.slice(0, 2)).is_ok());
        // A view pointing past its buffer, built unchecked as the decoder would.
        let bad = unsafe {
            arrow::array::ArrayData::builder(arrow::datatypes::DataType::Utf8View)
                .len(1)
                .add_buffer(Buffer::from_vec(vec![view(20, *b"abcd", 0, 0)]))
                .add_buffer(Buffer::from(&b"abcd"[..]))
                .build_unchecked()
        };
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "s",
                arrow::datatypes::DataType::Utf8View,
                false,
            )])),
            vec![arrow::array::make_array(bad)],
        )
        .unwrap();
        let e = check_batch(batch).unwrap_err().to_string();
        assert!(e.contains("Invalid buffer slice"), "{e}");
    }
}
