//! `partition`: route rows to N output streams by a stable hash of a key.
use crate::disklet::{Disklet, Emitter, InputBuffer};
use crate::expr::ExprPlanner;
use crate::expr::evaluate_all;
use crate::{DiskOsError, Result};
use adisk_core::hash::hash_columns;
use adisk_core::protocol::ExprBytes;
use arrow::array::UInt32Array;
use arrow::compute::take_record_batch;
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// Upper bound on outputs of one `partition` disklet.
pub const MAX_PARTITIONS: u32 = 1024;

/// The `partition` disklet.
pub struct Partition {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    partitions: u32,
    schema: SchemaRef,
    indices: Vec<Vec<u32>>,
}

impl Partition {
    /// Plans the key expressions.
    pub fn new(
        keys: &[ExprBytes],
        partitions: u32,
        input: &SchemaRef,
        planner: &ExprPlanner,
    ) -> Result<Self> {
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(DiskOsError::InvalidJob(format!(
                "partition count {partitions} outside 1..={MAX_PARTITIONS}"
            )));
        }
        if keys.is_empty() {
            return Err(DiskOsError::InvalidJob(
                "partition needs at least one key".into(),
            ));
        }
        let keys = keys
            .iter()
            .map(|k| planner.physical(k, input))
            .collect::<Result<_>>()?;
        Ok(Partition {
            keys,
            partitions,
            schema: input.clone(),
            indices: (0..partitions).map(|_| Vec::new()).collect(),
        })
    }
}

impl Disklet for Partition {
    fn name(&self) -> &'static str {
        "partition"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn output_ports(&self) -> usize {
        self.partitions as usize
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let batch = input.batch;
        let keys = evaluate_all(&self.keys, batch)?;
        let hashes = hash_columns(&keys, batch.num_rows())
            .map_err(|e| DiskOsError::InvalidJob(e.to_string()))?;
        for idx in &mut self.indices {
            idx.clear();
        }
        for (row, h) in hashes.iter().enumerate() {
            self.indices[(h % u64::from(self.partitions)) as usize].push(row as u32);
        }
        for (port, idx) in self.indices.iter().enumerate() {
            if idx.is_empty() {
                continue;
            }
            let taken = take_record_batch(batch, &UInt32Array::from(idx.clone())).map_err(|e| {
                DiskOsError::Decode {
                    context: "partitioning".into(),
                    message: e.to_string(),
                }
            })?;
            out.emit(port, taken);
        }
        Ok(())
    }
    fn finish(&mut self, _out: &mut Emitter) -> Result<()> {
        Ok(())
    }
}
