//! The sort benchmark's records: 100 bytes, a 10-byte key and a 90-byte payload (Gray's sort
//! benchmark, gensort), generated deterministically from a seed and the record number, and the
//! valsort-style summary of a stream of them (order, count, an order-independent checksum).
use crate::rng::SplitMix64;
use arrow::array::{Array, ArrayRef, FixedSizeBinaryArray, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

/// Key bytes.
pub const KEY_BYTES: usize = 10;
/// Payload bytes.
pub const PAYLOAD_BYTES: usize = 90;
/// Record bytes.
pub const RECORD_BYTES: u64 = (KEY_BYTES + PAYLOAD_BYTES) as u64;

/// Schema of a table of records: `key` (10 bytes), `payload` (90 bytes).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::FixedSizeBinary(KEY_BYTES as i32), false),
        Field::new(
            "payload",
            DataType::FixedSizeBinary(PAYLOAD_BYTES as i32),
            false,
        ),
    ]))
}

/// Record `index` of stream `seed`: a random binary key; the payload is the record number
/// in 32 hexadecimal digits followed by 58 filler bytes derived from it (as gensort's).
pub fn record(seed: u64, index: u64) -> ([u8; KEY_BYTES], [u8; PAYLOAD_BYTES]) {
    let mut rng = SplitMix64::for_index(seed, index);
    let mut key = [0u8; KEY_BYTES];
    let (a, b) = (rng.next_u64().to_be_bytes(), rng.next_u64().to_be_bytes());
    key[..8].copy_from_slice(&a);
    key[8..].copy_from_slice(&b[..2]);
    let mut payload = [0u8; PAYLOAD_BYTES];
    let hex = format!("{index:032X}");
    payload[..32].copy_from_slice(hex.as_bytes());
    for (i, byte) in payload[32..].iter_mut().enumerate() {
        *byte = b"0123456789ABCDEF"[((index >> ((i % 16) * 4)) & 0xf) as usize] ^ (i as u8 & 0x10);
    }
    (key, payload)
}

/// Records `range` of stream `seed` as one batch.
pub fn batch(seed: u64, range: std::ops::Range<u64>) -> RecordBatch {
    let (mut keys, mut payloads) = (Vec::new(), Vec::new());
    for i in range {
        let (k, p) = record(seed, i);
        keys.push(k);
        payloads.push(p);
    }
    let keys = FixedSizeBinaryArray::try_from_iter(keys.iter()).expect("10-byte keys");
    let payloads = FixedSizeBinaryArray::try_from_iter(payloads.iter()).expect("90-byte payloads");
    RecordBatch::try_new(schema(), vec![Arc::new(keys), Arc::new(payloads)])
        .expect("columns match the schema")
}

/// Checksum of one record: its CRC-32 (valsort sums these, so the sum is order-independent).
pub fn record_checksum(key: &[u8], payload: &[u8]) -> u64 {
    let mut h = crc32fast::Hasher::new();
    h.update(key);
    h.update(payload);
    u64::from(h.finalize())
}

/// The valsort-style summary of a stream of records, built batch by batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records seen.
    pub records: u64,
    /// First key.
    pub first: Option<Vec<u8>>,
    /// Last key.
    pub last: Option<Vec<u8>>,
    /// Records whose key is smaller than the previous record's.
    pub unordered: u64,
    /// Records whose key equals the previous record's.
    pub duplicates: u64,
    /// Sum of the records' CRC-32s (wrapping).
    pub checksum: u64,
}

impl Summary {
    /// Adds the records of `batch` (`key`, `payload` columns), in order.
    ///
    /// # Errors
    /// A batch without the record columns.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), String> {
        let column = |name: &str, width: usize| {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<FixedSizeBinaryArray>())
                .filter(|c| c.value_length() as usize == width)
                .ok_or_else(|| format!("no {width}-byte column `{name}`"))
        };
        let (keys, payloads) = (column("key", KEY_BYTES)?, column("payload", PAYLOAD_BYTES)?);
        for i in 0..keys.len() {
            let key = keys.value(i);
            if let Some(last) = &self.last {
                match key.cmp(last.as_slice()) {
                    std::cmp::Ordering::Less => self.unordered += 1,
                    std::cmp::Ordering::Equal => self.duplicates += 1,
                    std::cmp::Ordering::Greater => {}
                }
            }
            if self.first.is_none() {
                self.first = Some(key.to_vec());
            }
            self.last = Some(key.to_vec());
            self.checksum = self
                .checksum
                .wrapping_add(record_checksum(key, payloads.value(i)));
        }
        self.records += keys.len() as u64;
        Ok(())
    }

    /// Schema of [`Summary::to_batch`].
    pub fn schema() -> SchemaRef {
        let key = || DataType::FixedSizeBinary(KEY_BYTES as i32);
        Arc::new(Schema::new(vec![
            Field::new("records", DataType::UInt64, false),
            Field::new("first", key(), true),
            Field::new("last", key(), true),
            Field::new("unordered", DataType::UInt64, false),
            Field::new("duplicates", DataType::UInt64, false),
            Field::new("checksum", DataType::UInt64, false),
        ]))
    }

    /// As a one-row batch.
    pub fn to_batch(&self) -> RecordBatch {
        let key = |k: &Option<Vec<u8>>| -> ArrayRef {
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    std::iter::once(k.as_deref()),
                    KEY_BYTES as i32,
                )
                .expect("10-byte key"),
            )
        };
        let n = |v: u64| -> ArrayRef { Arc::new(UInt64Array::from(vec![v])) };
        RecordBatch::try_new(
            Self::schema(),
            vec![
                n(self.records),
                key(&self.first),
                key(&self.last),
                n(self.unordered),
                n(self.duplicates),
                n(self.checksum),
            ],
        )
        .expect("columns match the schema")
    }

    /// Reads the rows of [`Summary::to_batch`] batches.
    ///
    /// # Errors
    /// Batches of another schema.
    pub fn from_batch(batch: &RecordBatch) -> Result<Vec<Summary>, String> {
        let u = |i: usize| {
            batch
                .column(i)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| "not a summary".to_string())
        };
        let k = |i: usize| {
            batch
                .column(i)
                .as_any()
                .downcast_ref::<FixedSizeBinaryArray>()
                .ok_or_else(|| "not a summary".to_string())
        };
        if batch.num_columns() != 6 {
            return Err("not a summary".into());
        }
        let (records, first, last) = (u(0)?, k(1)?, k(2)?);
        let (unordered, duplicates, checksum) = (u(3)?, u(4)?, u(5)?);
        let key = |a: &FixedSizeBinaryArray, i| (!a.is_null(i)).then(|| a.value(i).to_vec());
        Ok((0..batch.num_rows())
            .map(|i| Summary {
                records: records.value(i),
                first: key(first, i),
                last: key(last, i),
                unordered: unordered.value(i),
                duplicates: duplicates.value(i),
                checksum: checksum.value(i),
            })
            .collect())
    }

    /// The summary of partitions read one after another (`self`, then `next`): counts and
    /// checksums add, a boundary where `next` starts below `self`'s last key is unordered.
    pub fn then(&self, next: &Summary) -> Summary {
        let boundary = match (&self.last, &next.first) {
            (Some(a), Some(b)) if b < a => (1, 0),
            (Some(a), Some(b)) if b == a => (0, 1),
            _ => (0, 0),
        };
        Summary {
            records: self.records + next.records,
            first: self.first.clone().or_else(|| next.first.clone()),
            last: next.last.clone().or_else(|| self.last.clone()),
            unordered: self.unordered + next.unordered + boundary.0,
            duplicates: self.duplicates + next.duplicates + boundary.1,
            checksum: self.checksum.wrapping_add(next.checksum),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_deterministic_and_summaries_compose() {
        assert_eq!(record(1, 5), record(1, 5));
        assert_ne!(record(1, 5).0, record(1, 6).0);
        let all = batch(3, 0..1000);
        let mut whole = Summary::default();
        whole.add(&all).unwrap();
        let (mut a, mut b) = (Summary::default(), Summary::default());
        a.add(&all.slice(0, 400)).unwrap();
        b.add(&all.slice(400, 600)).unwrap();
        assert_eq!(a.then(&b), whole);
        assert!(whole.unordered > 300, "random keys are mostly unordered");
        // Sorted by a plain sort of the keys: no unordered record, same checksum.
        let keys = all
            .column(0)
            .as_any()
            .downcast_ref::<FixedSizeBinaryArray>()
            .unwrap();
        let mut order: Vec<usize> = (0..1000).collect();
        order.sort_by(|x, y| keys.value(*x).cmp(keys.value(*y)));
        let idx = arrow::array::UInt32Array::from_iter_values(order.iter().map(|i| *i as u32));
        let sorted = arrow::compute::take_record_batch(&all, &idx).unwrap();
        let mut s = Summary::default();
        s.add(&sorted).unwrap();
        assert_eq!(
            (s.unordered, s.records, s.checksum),
            (0, 1000, whole.checksum)
        );
        assert_eq!(Summary::from_batch(&s.to_batch()).unwrap(), vec![s]);
    }
}
