//! The streams of `dmine`: their schemas, reading transactions out of a batch, and building
//! the small result batches (counts, tid-lists, itemsets).
use arrow::array::{
    Array, ArrayRef, ListArray, ListBuilder, RecordBatch, UInt32Array, UInt32Builder, UInt64Array,
    UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

/// Tids per row of a shipped tid-list (a longer list is shipped as several rows, which the
/// receiver merges: partial lists of one pair are unions).
pub const TID_CHUNK: usize = 1024;

fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, false)))
}

/// The transactions table: `tid: UInt64`, `items: List<UInt32>` (sorted, distinct).
pub fn transactions_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("tid", DataType::UInt64, false),
        Field::new("items", list_of(DataType::UInt32), false),
    ]))
}

/// Partial item counts (pass 1): `item`, `count`.
pub fn item_counts_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("item", DataType::UInt32, false),
        Field::new("count", DataType::UInt64, false),
    ]))
}

/// Partial pair counts (pass 2): `a < b`, `count`.
pub fn pair_counts_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("a", DataType::UInt32, false),
        Field::new("b", DataType::UInt32, false),
        Field::new("count", DataType::UInt64, false),
    ]))
}

/// Partial candidate counts (pass k ≥ 3): the candidate's `index` in the list the disk was
/// given, `count` (nonzero only).
pub fn candidate_counts_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("index", DataType::UInt32, false),
        Field::new("count", DataType::UInt64, false),
    ]))
}

/// Partial tid-lists of frequent pairs `(prefix, item)` on their way to the disk `target`
/// that owns the class `prefix`.
pub fn tid_lists_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("target", DataType::UInt32, false),
        Field::new("prefix", DataType::UInt32, false),
        Field::new("item", DataType::UInt32, false),
        Field::new("tids", list_of(DataType::UInt64), false),
    ]))
}

/// Frequent itemsets: `items` (sorted), `count`.
pub fn itemsets_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("items", list_of(DataType::UInt32), false),
        Field::new("count", DataType::UInt64, false),
    ]))
}

/// The generator's parameters as stored next to the transactions (table `T_gen`).
pub fn gen_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("transactions", DataType::UInt64, false),
        Field::new("avg_len", DataType::Float64, false),
        Field::new("pattern_len", DataType::Float64, false),
        Field::new("patterns", DataType::UInt64, false),
        Field::new("items", DataType::UInt32, false),
        Field::new("seed", DataType::UInt64, false),
    ]))
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T, String> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| format!("dmine: the stream has no column `{name}` of the expected type"))
}

/// A batch of transactions, read in place.
pub struct Transactions<'a> {
    tids: &'a UInt64Array,
    items: &'a ListArray,
    values: &'a UInt32Array,
}

impl<'a> Transactions<'a> {
    /// The transactions of `batch` (`tid: UInt64`, `items: List<UInt32>`).
    ///
    /// # Errors
    /// Other columns.
    pub fn new(batch: &'a RecordBatch) -> Result<Self, String> {
        let items: &ListArray = column(batch, "items")?;
        let values = items
            .values()
            .as_any()
            .downcast_ref::<UInt32Array>()
            .ok_or("dmine: `items` must be a list of UInt32")?;
        Ok(Transactions {
            tids: column(batch, "tid")?,
            items,
            values,
        })
    }

    /// Transactions in the batch.
    pub fn len(&self) -> usize {
        self.tids.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.tids.is_empty()
    }

    /// Transaction `row`: its id and items (a null list is empty).
    pub fn get(&self, row: usize) -> (u64, &'a [u32]) {
        if self.items.is_null(row) {
            return (self.tids.value(row), &[]);
        }
        let offsets = self.items.value_offsets();
        let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
        (self.tids.value(row), &self.values.values()[start..end])
    }
}

/// A list column of `lists`.
fn u32_lists<'a>(lists: impl Iterator<Item = &'a [u32]>) -> ArrayRef {
    let mut b = ListBuilder::new(UInt32Builder::new()).with_field(Field::new(
        "item",
        DataType::UInt32,
        false,
    ));
    for l in lists {
        b.values().append_slice(l);
        b.append(true);
    }
    Arc::new(b.finish())
}

/// A batch of transactions (load, tests).
pub fn transactions_batch(first_tid: u64, transactions: &[Vec<u32>]) -> RecordBatch {
    let tids = UInt64Array::from_iter_values(first_tid..first_tid + transactions.len() as u64);
    let items = u32_lists(transactions.iter().map(Vec::as_slice));
    RecordBatch::try_new(transactions_schema(), vec![Arc::new(tids), items])
        .expect("columns match the schema")
}

/// Item counts as a batch.
pub fn item_counts_batch(rows: &[(u32, u64)]) -> RecordBatch {
    let items = UInt32Array::from_iter_values(rows.iter().map(|r| r.0));
    let counts = UInt64Array::from_iter_values(rows.iter().map(|r| r.1));
    RecordBatch::try_new(
        item_counts_schema(),
        vec![Arc::new(items), Arc::new(counts)],
    )
    .expect("columns match the schema")
}

/// Pair counts as a batch.
pub fn pair_counts_batch(rows: &[((u32, u32), u64)]) -> RecordBatch {
    let a = UInt32Array::from_iter_values(rows.iter().map(|r| r.0.0));
    let b = UInt32Array::from_iter_values(rows.iter().map(|r| r.0.1));
    let counts = UInt64Array::from_iter_values(rows.iter().map(|r| r.1));
    RecordBatch::try_new(
        pair_counts_schema(),
        vec![Arc::new(a), Arc::new(b), Arc::new(counts)],
    )
    .expect("columns match the schema")
}

/// Candidate counts as a batch.
pub fn candidate_counts_batch(rows: &[(u32, u64)]) -> RecordBatch {
    let index = UInt32Array::from_iter_values(rows.iter().map(|r| r.0));
    let counts = UInt64Array::from_iter_values(rows.iter().map(|r| r.1));
    RecordBatch::try_new(
        candidate_counts_schema(),
        vec![Arc::new(index), Arc::new(counts)],
    )
    .expect("columns match the schema")
}

/// One shipped piece of a tid-list: `(target, prefix, item, tids)`.
pub type TidRow<'a> = (u32, u32, u32, &'a [u64]);

/// Tid-list pieces as a batch.
pub fn tid_lists_batch(rows: &[TidRow<'_>]) -> RecordBatch {
    let u32s = |f: fn(&TidRow<'_>) -> u32| UInt32Array::from_iter_values(rows.iter().map(f));
    let mut tids = ListBuilder::new(UInt64Builder::new()).with_field(Field::new(
        "item",
        DataType::UInt64,
        false,
    ));
    for r in rows {
        tids.values().append_slice(r.3);
        tids.append(true);
    }
    RecordBatch::try_new(
        tid_lists_schema(),
        vec![
            Arc::new(u32s(|r| r.0)),
            Arc::new(u32s(|r| r.1)),
            Arc::new(u32s(|r| r.2)),
            Arc::new(tids.finish()),
        ],
    )
    .expect("columns match the schema")
}

/// Frequent itemsets as a batch.
pub fn itemsets_batch(rows: &[(Vec<u32>, u64)]) -> RecordBatch {
    let items = u32_lists(rows.iter().map(|r| r.0.as_slice()));
    let counts = UInt64Array::from_iter_values(rows.iter().map(|r| r.1));
    RecordBatch::try_new(itemsets_schema(), vec![items, Arc::new(counts)])
        .expect("columns match the schema")
}

/// Reads `(u32 key, count)` rows (item counts, candidate counts).
///
/// # Errors
/// Other columns.
pub fn read_keyed_counts(batch: &RecordBatch, key: &str) -> Result<Vec<(u32, u64)>, String> {
    let keys: &UInt32Array = column(batch, key)?;
    let counts: &UInt64Array = column(batch, "count")?;
    Ok(keys
        .values()
        .iter()
        .copied()
        .zip(counts.values().iter().copied())
        .collect())
}

/// Reads pair counts.
///
/// # Errors
/// Other columns.
pub fn read_pair_counts(batch: &RecordBatch) -> Result<Vec<((u32, u32), u64)>, String> {
    let a: &UInt32Array = column(batch, "a")?;
    let b: &UInt32Array = column(batch, "b")?;
    let counts: &UInt64Array = column(batch, "count")?;
    Ok((0..batch.num_rows())
        .map(|i| ((a.value(i), b.value(i)), counts.value(i)))
        .collect())
}

/// Reads tid-list pieces as `(prefix, item, tids)`.
///
/// # Errors
/// Other columns.
pub fn read_tid_lists(batch: &RecordBatch) -> Result<Vec<(u32, u32, Vec<u64>)>, String> {
    let prefix: &UInt32Array = column(batch, "prefix")?;
    let item: &UInt32Array = column(batch, "item")?;
    let tids: &ListArray = column(batch, "tids")?;
    let values = tids
        .values()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .ok_or("dmine: `tids` must be a list of UInt64")?;
    let offsets = tids.value_offsets();
    Ok((0..batch.num_rows())
        .map(|i| {
            let (s, e) = (offsets[i] as usize, offsets[i + 1] as usize);
            (
                prefix.value(i),
                item.value(i),
                values.values()[s..e].to_vec(),
            )
        })
        .collect())
}

/// Reads frequent itemsets.
///
/// # Errors
/// Other columns.
pub fn read_itemsets(batch: &RecordBatch) -> Result<Vec<(Vec<u32>, u64)>, String> {
    let t = Transactions {
        tids: column(batch, "count")?,
        items: column(batch, "items")?,
        values: column::<ListArray>(batch, "items")?
            .values()
            .as_any()
            .downcast_ref::<UInt32Array>()
            .ok_or("dmine: `items` must be a list of UInt32")?,
    };
    Ok((0..t.len())
        .map(|i| {
            let (count, items) = t.get(i);
            (items.to_vec(), count)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip() {
        let txs = vec![vec![1, 4], vec![], vec![2, 3, 9]];
        let b = transactions_batch(10, &txs);
        let t = Transactions::new(&b).unwrap();
        let back: Vec<(u64, Vec<u32>)> = (0..t.len())
            .map(|i| (t.get(i).0, t.get(i).1.to_vec()))
            .collect();
        assert_eq!(
            back,
            vec![(10, vec![1, 4]), (11, vec![]), (12, vec![2, 3, 9])]
        );
        let sets = vec![(vec![1, 2], 5), (vec![3], 9)];
        assert_eq!(read_itemsets(&itemsets_batch(&sets)).unwrap(), sets);
        let rows = [(1, 2, 3, &[4u64, 5][..])];
        assert_eq!(
            read_tid_lists(&tid_lists_batch(&rows)).unwrap(),
            vec![(2, 3, vec![4, 5])]
        );
        let pairs = vec![((1, 2), 3)];
        assert_eq!(read_pair_counts(&pair_counts_batch(&pairs)).unwrap(), pairs);
        assert!(Transactions::new(&item_counts_batch(&[(1, 1)])).is_err());
    }

    #[test]
    fn list_slices_weigh_their_own_rows_so_batches_cut() {
        let txs: Vec<Vec<u32>> = (0..4000).map(|i| (i..i + 10).collect()).collect();
        let b = transactions_batch(0, &txs);
        let whole = adisk_core::stats::batch_bytes(&b);
        let one = adisk_core::stats::batch_bytes(&b.slice(100, 1));
        assert!(one < 64 && whole > 4000 * 48, "{one} {whole}");
        let pieces = adisk_diskos::stream::cut(&b, 8192).unwrap();
        assert!(pieces.len() >= whole as usize / 8192, "{}", pieces.len());
        let rows: usize = pieces.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, 4000);
    }
}
