//! A stable hash of Arrow column values.
//!
//! The same value hashes to the same `u64` on every machine, process and build: the host
//! builds Bloom filters with it and the disks probe them; `partition` routes rows with it and
//! the receiving disks rely on every sender agreeing. Integers of every width hash by value
//! (so an `Int32` key and an `Int64` key of equal value agree), strings by their UTF-8 bytes.
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Float32Type, Float64Type, Int8Type,
    Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};

/// Hash of a NULL value.
const NULL_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64 finalizer: a cheap, well-mixing bijection on u64.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a over bytes, finished with [`mix64`].
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

/// Hash of an integer value (any width).
#[inline]
pub fn hash_i128(v: i128) -> u64 {
    mix64((v as u64) ^ mix64((v >> 64) as u64))
}

/// Error for a column type that has no stable hash.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot hash a column of type {0}: supported are integers, dates, decimals, floats, booleans, strings and binary"
)]
pub struct UnhashableType(pub DataType);

/// Hashes one column into `out` (which must have the column's length), combining with what
/// `out` already holds when `combine` is true (multi-column keys).
pub fn hash_column(array: &ArrayRef, out: &mut [u64], combine: bool) -> Result<(), UnhashableType> {
    assert_eq!(
        array.len(),
        out.len(),
        "hash output length must equal the column length"
    );
    macro_rules! prim {
        ($t:ty, $conv:expr) => {{
            let a = array.as_primitive::<$t>();
            for (i, slot) in out.iter_mut().enumerate() {
                let h = if a.is_null(i) {
                    NULL_HASH
                } else {
                    $conv(a.value(i))
                };
                *slot = if combine {
                    mix64(slot.rotate_left(5) ^ h)
                } else {
                    h
                };
            }
        }};
    }
    macro_rules! bytes {
        ($a:expr) => {{
            let a = $a;
            for (i, slot) in out.iter_mut().enumerate() {
                let h = if a.is_null(i) {
                    NULL_HASH
                } else {
                    hash_bytes(a.value(i).as_ref())
                };
                *slot = if combine {
                    mix64(slot.rotate_left(5) ^ h)
                } else {
                    h
                };
            }
        }};
    }
    match array.data_type() {
        DataType::Int8 => prim!(Int8Type, |v: i8| hash_i128(v.into())),
        DataType::Int16 => prim!(Int16Type, |v: i16| hash_i128(v.into())),
        DataType::Int32 => prim!(Int32Type, |v: i32| hash_i128(v.into())),
        DataType::Int64 => prim!(Int64Type, |v: i64| hash_i128(v.into())),
        DataType::UInt8 => prim!(UInt8Type, |v: u8| hash_i128(v.into())),
        DataType::UInt16 => prim!(UInt16Type, |v: u16| hash_i128(v.into())),
        DataType::UInt32 => prim!(UInt32Type, |v: u32| hash_i128(v.into())),
        DataType::UInt64 => prim!(UInt64Type, |v: u64| hash_i128(v.into())),
        DataType::Date32 => prim!(Date32Type, |v: i32| hash_i128(v.into())),
        DataType::Date64 => prim!(Date64Type, |v: i64| hash_i128(v.into())),
        DataType::Decimal128(_, _) => prim!(Decimal128Type, hash_i128),
        DataType::Float32 => prim!(Float32Type, |v: f32| mix64(f64::from(v).to_bits())),
        DataType::Float64 => prim!(Float64Type, |v: f64| mix64(v.to_bits())),
        DataType::Boolean => {
            let a = array.as_boolean();
            for (i, slot) in out.iter_mut().enumerate() {
                let h = if a.is_null(i) {
                    NULL_HASH
                } else {
                    hash_i128(i128::from(a.value(i)))
                };
                *slot = if combine {
                    mix64(slot.rotate_left(5) ^ h)
                } else {
                    h
                };
            }
        }
        DataType::Utf8 => bytes!(array.as_string::<i32>()),
        DataType::LargeUtf8 => bytes!(array.as_string::<i64>()),
        DataType::Utf8View => bytes!(array.as_string_view()),
        DataType::Binary => bytes!(array.as_binary::<i32>()),
        DataType::LargeBinary => bytes!(array.as_binary::<i64>()),
        DataType::BinaryView => bytes!(array.as_binary_view()),
        other => return Err(UnhashableType(other.clone())),
    }
    Ok(())
}

/// Hashes several key columns row by row.
pub fn hash_columns(columns: &[ArrayRef], num_rows: usize) -> Result<Vec<u64>, UnhashableType> {
    let mut out = vec![0u64; num_rows];
    for (i, c) in columns.iter().enumerate() {
        hash_column(c, &mut out, i > 0)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array, StringArray, StringViewArray};
    use std::sync::Arc;

    #[test]
    fn widths_and_string_kinds_agree() {
        let a: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, -3]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, -3]));
        assert_eq!(
            hash_columns(&[a], 3).unwrap(),
            hash_columns(&[b], 3).unwrap()
        );
        let s: ArrayRef = Arc::new(StringArray::from(vec!["x", "yy"]));
        let v: ArrayRef = Arc::new(StringViewArray::from(vec!["x", "yy"]));
        let hs = hash_columns(&[s], 2).unwrap();
        assert_eq!(hs, hash_columns(&[v], 2).unwrap());
        assert_ne!(hs[0], hs[1]);
    }

    /// Pinned values: the hash must never change between builds, because Bloom filters and
    /// exchange routing cross processes. The literals were computed outside this crate (a
    /// Python transcription of splitmix64's finalizer and FNV-1a), not by this code.
    #[test]
    fn pinned_literal_values() {
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
        assert_eq!(hash_i128(0), 0);
        assert_eq!(hash_i128(1), 0x5692_161d_100b_05e5);
        assert_eq!(hash_i128(-3), 0x8a89_9642_6649_7ac1);
        assert_eq!(hash_i128(1 << 40), 0x00ab_4daf_7c26_73f8);
        assert_eq!(hash_i128(-(1 << 70)), 0x309c_6f9d_09ae_3678);
        assert_eq!(hash_bytes(b""), 0xf52a_15e9_a9b5_e89b);
        assert_eq!(hash_bytes(b"x"), 0x2c78_2ac2_2891_188e);
        assert_eq!(hash_bytes(b"yy"), 0xda4b_4918_da4d_4e0b);
        assert_eq!(hash_bytes(b"ActiveDisk"), 0x911c_b90d_34ac_1e8e);
        let k: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        let s: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        assert_eq!(
            hash_columns(&[k, s], 1).unwrap(),
            vec![0xbd65_672d_eac5_8ecd]
        );
    }
}
