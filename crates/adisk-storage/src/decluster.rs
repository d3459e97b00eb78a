//! Declustering: which disk a row (or a generated part) goes to.
//!
//! * `range` (default for TPC-H): contiguous ranges of the primary key; for TPC-H the
//!   generator's parts are such ranges, so part `k` goes to disk `k·N/parts`.
//!   `range:COL` for user data: equal-width ranges of integer/date column `COL` between its
//!   minimum and maximum (two passes over the input).
//! * `hash:COL`: disk = stable hash of `COL` mod N ([`adisk_core::hash`]).
//! * `roundrobin`: row `i` goes to disk `i mod N`.
use crate::{Result, StorageError};
use adisk_core::hash::hash_columns;
use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{cast, take_record_batch};
use arrow::datatypes::DataType;

/// A declustering rule.
#[derive(Clone, Debug, PartialEq)]
pub enum Decluster {
    /// Ranges of a key (the primary key for TPC-H when `column` is None).
    Range {
        /// Key column (user data).
        column: Option<String>,
    },
    /// Hash of a column.
    Hash {
        /// Key column.
        column: String,
    },
    /// Row round-robin.
    RoundRobin,
}

impl std::str::FromStr for Decluster {
    type Err = StorageError;
    fn from_str(s: &str) -> Result<Self> {
        match s.split_once(':') {
            None if s == "range" => Ok(Decluster::Range { column: None }),
            None if s == "roundrobin" => Ok(Decluster::RoundRobin),
            Some(("range", c)) if !c.is_empty() => Ok(Decluster::Range {
                column: Some(c.to_string()),
            }),
            Some(("hash", c)) if !c.is_empty() => Ok(Decluster::Hash {
                column: c.to_string(),
            }),
            _ => Err(StorageError::Invalid(format!(
                "unknown declustering rule `{s}`: use range, range:COL, hash:COL or roundrobin"
            ))),
        }
    }
}

impl std::fmt::Display for Decluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decluster::Range { column: None } => write!(f, "range"),
            Decluster::Range { column: Some(c) } => write!(f, "range:{c}"),
            Decluster::Hash { column } => write!(f, "hash:{column}"),
            Decluster::RoundRobin => write!(f, "roundrobin"),
        }
    }
}

/// Routes the rows of batches to `disks` disks.
pub struct Router {
    rule: Decluster,
    disks: u32,
    next_row: u64,
    /// For `range:COL`: (min, max) of the column.
    bounds: Option<(i64, i64)>,
}

fn key_as_i64(batch: &RecordBatch, column: &str) -> Result<ArrayRef> {
    let idx = batch
        .schema()
        .index_of(column)
        .map_err(|_| StorageError::UnknownColumn {
            table: "input".into(),
            column: column.to_string(),
            available: batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let col = batch.column(idx);
    let as_int = match col.data_type() {
        DataType::Date32 => cast(
            &cast(col, &DataType::Int32).map_err(arrow_err)?,
            &DataType::Int64,
        ),
        d if d.is_integer() => cast(col, &DataType::Int64),
        other => {
            return Err(StorageError::Invalid(format!(
                "range declustering needs an integer or date column; `{column}` is {other}"
            )));
        }
    }
    .map_err(arrow_err)?;
    Ok(as_int)
}

fn arrow_err(source: arrow::error::ArrowError) -> StorageError {
    StorageError::Arrow {
        context: "declustering".into(),
        source,
    }
}

impl Router {
    /// A router for `disks` disks. `range:COL` needs [`Router::observe`] over all input first.
    pub fn new(rule: Decluster, disks: u32) -> Self {
        Router {
            rule,
            disks: disks.max(1),
            next_row: 0,
            bounds: None,
        }
    }

    /// True if the rule needs a first pass ([`Router::observe`]).
    pub fn needs_first_pass(&self) -> bool {
        matches!(self.rule, Decluster::Range { column: Some(_) })
    }

    /// First pass for `range:COL`: widen the key bounds with this batch.
    pub fn observe(&mut self, batch: &RecordBatch) -> Result<()> {
        let Decluster::Range {
            column: Some(column),
        } = &self.rule
        else {
            return Ok(());
        };
        let keys = key_as_i64(batch, column)?;
        let keys = keys
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .expect("cast to Int64");
        for v in keys.iter().flatten() {
            self.bounds = Some(match self.bounds {
                None => (v, v),
                Some((lo, hi)) => (lo.min(v), hi.max(v)),
            });
        }
        Ok(())
    }

    /// Splits a batch into one batch per disk (some may be empty).
    pub fn route(&mut self, batch: &RecordBatch) -> Result<Vec<RecordBatch>> {
        let n = batch.num_rows();
        let disks = self.disks as u64;
        let targets: Vec<u32> =
            match &self.rule {
                Decluster::RoundRobin | Decluster::Range { column: None } => {
                    let start = self.next_row;
                    (0..n as u64)
                        .map(|i| ((start + i) % disks) as u32)
                        .collect()
                }
                Decluster::Hash { column } => {
                    let idx = batch.schema().index_of(column).map_err(|_| {
                        StorageError::UnknownColumn {
                            table: "input".into(),
                            column: column.clone(),
                            available: batch
                                .schema()
                                .fields()
                                .iter()
                                .map(|f| f.name().clone())
                                .collect::<Vec<_>>()
                                .join(", "),
                        }
                    })?;
                    let hashes = hash_columns(&[batch.column(idx).clone()], n)
                        .map_err(|e| StorageError::Invalid(e.to_string()))?;
                    hashes.iter().map(|h| (h % disks) as u32).collect()
                }
                Decluster::Range {
                    column: Some(column),
                } => {
                    let (lo, hi) = self.bounds.unwrap_or((0, 0));
                    let width = ((hi as i128 - lo as i128) / disks as i128 + 1).max(1);
                    let keys = key_as_i64(batch, column)?;
                    let keys = keys
                        .as_any()
                        .downcast_ref::<arrow::array::Int64Array>()
                        .expect("cast to Int64");
                    (0..n)
                        .map(|i| {
                            if keys.is_null(i) {
                                0
                            } else {
                                (((keys.value(i) as i128 - lo as i128) / width) as u64)
                                    .min(disks - 1) as u32
                            }
                        })
                        .collect()
                }
            };
        self.next_row += n as u64;
        let mut out = Vec::with_capacity(self.disks as usize);
        for d in 0..self.disks {
            let idx: UInt32Array = targets
                .iter()
                .enumerate()
                .filter(|(_, t)| **t == d)
                .map(|(i, _)| i as u32)
                .collect();
            out.push(take_record_batch(batch, &idx).map_err(arrow_err)?);
        }
        Ok(out)
    }
}

/// Disk that owns TPC-H part `part` (1-based) of `part_count` under range declustering.
pub fn disk_of_part(part: u32, part_count: u32, disks: u32) -> u32 {
    ((u64::from(part - 1) * u64::from(disks)) / u64::from(part_count)) as u32
}

/// Chained declustering: the disks holding a copy of a partition whose primary is disk
/// `primary`, primary first: `primary, primary + 1, …, primary + replicas − 1` (mod `disks`).
/// When one disk fails, its partitions' next copies are on its successor, and every disk
/// still holds a copy of some partitions of each neighbour (Hsiao & DeWitt, 1990).
///
/// # Panics
/// If `replicas` is 0 or more than `disks` (callers check: one copy per disk at most).
pub fn replica_disks(primary: u32, replicas: u32, disks: u32) -> Vec<u32> {
    assert!(
        replicas >= 1 && replicas <= disks,
        "{replicas} replicas on {disks} disks"
    );
    (0..replicas).map(|r| (primary + r) % disks).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn chained_replicas() {
        assert_eq!(replica_disks(0, 1, 4), vec![0]);
        assert_eq!(replica_disks(2, 2, 4), vec![2, 3]);
        assert_eq!(replica_disks(3, 2, 4), vec![3, 0]);
        assert_eq!(replica_disks(3, 4, 4), vec![3, 0, 1, 2]);
        // Every disk holds exactly `replicas` partitions' copies when there is one per disk.
        let mut held = [0; 4];
        for p in 0..4 {
            for d in replica_disks(p, 3, 4) {
                held[d as usize] += 1;
            }
        }
        assert_eq!(held, [3; 4]);
    }
    #[test]
    fn parse_and_parts() {
        assert_eq!(
            "hash:a".parse::<Decluster>().unwrap(),
            Decluster::Hash { column: "a".into() }
        );
        assert!("hash:".parse::<Decluster>().is_err());
        assert!("zigzag".parse::<Decluster>().is_err());
        let owners: Vec<u32> = (1..=8).map(|p| disk_of_part(p, 8, 4)).collect();
        assert_eq!(owners, vec![0, 0, 1, 1, 2, 2, 3, 3]);
    }
}
