//! The inputs of a user disklet: each has an input area in guest memory and a queue of the
//! buffers (or what is left of them) still to be handed to the guest, one input-area-sized chunk
//! at a time: ADT1 tables split by rows, file bytes split by bytes.
use crate::abi;
use crate::error::{Result, WasmError};
use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{SchemaRef, UInt64Type};
use std::collections::VecDeque;

/// One input of a disklet.
pub(crate) struct Input {
    /// Address of its input area in guest memory.
    pub area: u32,
    /// Its schema (tables: the column order `_columns` announced).
    pub schema: SchemaRef,
    /// File bytes (`offset`, `bytes` rows) handed over raw rather than as ADT1.
    pub raw: bool,
    /// Buffers not yet wholly handed to the guest.
    pub queue: VecDeque<Pending>,
    /// DiskOS said the input ended.
    pub ended: bool,
    /// The guest was told it ended.
    pub told_ended: bool,
}

impl Input {
    pub fn new(area: u32, schema: SchemaRef, raw: bool) -> Self {
        Input {
            area,
            schema,
            raw,
            queue: VecDeque::new(),
            ended: false,
            told_ended: false,
        }
    }

    /// True if the guest can be handed something now: a chunk, or the end of the input.
    pub fn ready(&self) -> bool {
        !self.queue.is_empty() || (self.ended && !self.told_ended)
    }

    /// Queues a buffer (nothing for an empty one).
    ///
    /// # Errors
    /// A table buffer lacking one of the input's columns.
    pub fn push(&mut self, batch: &RecordBatch, position: u64) -> Result<()> {
        let mut pending = if self.raw {
            Pending::new(batch.clone(), position)
        } else {
            Pending::new(reorder(batch, &self.schema)?, position)
        };
        if !pending.is_empty(self.raw) {
            self.queue.push_back(pending);
        }
        Ok(())
    }

    /// Writes the next chunk of the oldest queued buffer into `out` (ADT1, or raw bytes) and
    /// returns its stream position.
    ///
    /// # Errors
    /// One row larger than the input area.
    pub fn next_chunk(&mut self, capacity: usize, out: &mut Vec<u8>) -> Result<u64> {
        let raw = self.raw;
        let front = self
            .queue
            .front_mut()
            .expect("next_chunk is called on a non-empty queue");
        let position = if raw {
            front.bytes_chunk(capacity, out)
        } else {
            front.table_chunk(capacity, out)?
        };
        if front.is_empty(raw) {
            self.queue.pop_front();
        }
        Ok(position)
    }
}

/// Hands the columns over in the order `_columns` announced (a scan may deliver them in file order).
fn reorder(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.clone());
    }
    let mut columns = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let c = batch.column_by_name(f.name()).ok_or_else(|| {
            WasmError::InvalidJob(format!("input buffer lacks column `{}`", f.name()))
        })?;
        columns.push(c.clone());
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| {
        WasmError::InvalidJob(format!("input buffer does not match the input schema: {e}"))
    })
}

/// A buffer, and how far it was handed over: the next row and, for file bytes, the next byte
/// of that row.
pub(crate) struct Pending {
    batch: RecordBatch,
    position: u64,
    row: usize,
    byte: usize,
}

impl Pending {
    fn new(batch: RecordBatch, position: u64) -> Self {
        Pending {
            batch,
            position,
            row: 0,
            byte: 0,
        }
    }

    fn is_empty(&mut self, raw: bool) -> bool {
        if raw {
            // Empty byte rows are never handed over.
            while self.row < self.batch.num_rows()
                && self
                    .batch
                    .column(1)
                    .as_binary::<i32>()
                    .value(self.row)
                    .is_empty()
            {
                self.row += 1;
            }
        }
        self.row >= self.batch.num_rows()
    }

    /// The next rows that fit `capacity` as ADT1 (halving until they do).
    fn table_chunk(&mut self, capacity: usize, out: &mut Vec<u8>) -> Result<u64> {
        let start = self.row;
        let mut len = self.batch.num_rows() - start;
        while abi::encoded_len(&self.batch, start, len) > capacity {
            if len == 1 {
                return Err(WasmError::InvalidJob(format!(
                    "row {} takes more than the {capacity}-byte input area",
                    self.position + start as u64
                )));
            }
            len = len.div_ceil(2);
        }
        abi::encode(&self.batch, start, len, out)?;
        self.row += len;
        Ok(self.position + start as u64)
    }

    /// The next at most `capacity` bytes of the current byte row; its position is the file
    /// offset of its first byte.
    fn bytes_chunk(&mut self, capacity: usize, out: &mut Vec<u8>) -> u64 {
        let offset = self
            .batch
            .column(0)
            .as_primitive::<UInt64Type>()
            .value(self.row);
        let value = self.batch.column(1).as_binary::<i32>().value(self.row);
        let end = (self.byte + capacity).min(value.len());
        out.clear();
        out.extend_from_slice(&value[self.byte..end]);
        let position = offset + self.byte as u64;
        self.byte = end;
        if self.byte == value.len() {
            (self.row, self.byte) = (self.row + 1, 0);
        }
        position
    }
}
