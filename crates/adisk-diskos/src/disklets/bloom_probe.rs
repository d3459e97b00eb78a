//! `bloom_probe`: the probe side of a Bloom-filter semi-join.
use crate::disklet::{Disklet, Emitter, InputBuffer};
use crate::expr::ExprPlanner;
use crate::expr::evaluate_all;
use crate::{DiskOsError, Result};
use adisk_core::bloom::BloomFilter;
use adisk_core::hash::hash_columns;
use adisk_core::protocol::ExprBytes;
use arrow::array::BooleanArray;
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// The `bloom_probe` disklet. The filter lives in its scratch.
pub struct BloomProbe {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    filter: BloomFilter,
    schema: SchemaRef,
}

impl BloomProbe {
    /// Checks the filter against the scratch grant and plans the key expressions.
    pub fn new(
        keys: &[ExprBytes],
        filter: BloomFilter,
        input: &SchemaRef,
        scratch_bytes: u64,
        planner: &ExprPlanner,
    ) -> Result<Self> {
        filter.validate().map_err(DiskOsError::InvalidJob)?;
        if filter.size_bytes() as u64 > scratch_bytes {
            return Err(DiskOsError::ScratchExceeded {
                disklet: "bloom_probe",
                granted_bytes: scratch_bytes,
                detail: format!("the Bloom filter has {} bytes", filter.size_bytes()),
            });
        }
        if keys.is_empty() {
            return Err(DiskOsError::InvalidJob(
                "bloom_probe needs at least one key".into(),
            ));
        }
        let keys = keys
            .iter()
            .map(|k| planner.physical(k, input))
            .collect::<Result<_>>()?;
        Ok(BloomProbe {
            keys,
            filter,
            schema: input.clone(),
        })
    }
}

impl Disklet for BloomProbe {
    fn name(&self) -> &'static str {
        "bloom_probe"
    }
    fn row_subset_of_input(&self) -> Option<Vec<String>> {
        Some(
            self.output_schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        )
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let batch = input.batch;
        let keys = evaluate_all(&self.keys, batch)?;
        let hashes = hash_columns(&keys, batch.num_rows())
            .map_err(|e| DiskOsError::InvalidJob(e.to_string()))?;
        // Rows with a NULL key can never join; the stable hash maps NULL to a constant that is
        // treated like any value here and filtered by the join at the host.
        let mask = BooleanArray::new(self.filter.probe(&hashes), None);
        let kept = filter_record_batch(batch, &mask).map_err(|e| DiskOsError::Decode {
            context: "bloom filtering".into(),
            message: e.to_string(),
        })?;
        out.emit(0, kept);
        Ok(())
    }
    fn finish(&mut self, _out: &mut Emitter) -> Result<()> {
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.filter.size_bytes() as u64
    }
}
