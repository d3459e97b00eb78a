//! The built-in (native Rust) disklets, and [`build`], which instantiates one from its spec.
pub mod bloom_probe;
pub mod fragment;
pub mod hash_join;
pub mod merge;
pub mod partition;
pub mod select;
pub mod view_sort;

use crate::disklet::Disklet;
use crate::expr::ExprPlanner;
use crate::{DiskOsError, Result};
use adisk_core::protocol::DiskletSpec;
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use std::sync::Arc;

/// Instantiates a disklet ("init"): parameters from `spec`, the schemas of its inputs,
/// scratch grant.
///
/// # Errors
/// Parameters that do not plan over the inputs, or as many inputs as the disklet takes.
pub fn build(
    spec: &DiskletSpec,
    inputs: &[SchemaRef],
    sorted: &[Vec<String>],
    scratch_bytes: u64,
    planner: &ExprPlanner,
    spill: Option<&fragment::Spill>,
) -> Result<Box<dyn Disklet>> {
    let one = || match inputs {
        [input] => Ok(input),
        _ => Err(DiskOsError::InvalidJob(format!(
            "`{}` takes one input, got {}",
            spec.name(),
            inputs.len()
        ))),
    };
    Ok(match spec {
        DiskletSpec::Select {
            predicate,
            projection,
            limit,
        } => Box::new(select::Select::new(
            predicate.as_ref(),
            projection,
            *limit,
            one()?,
            planner,
        )?),
        DiskletSpec::BloomProbe { keys, filter } => Box::new(bloom_probe::BloomProbe::new(
            keys,
            filter.clone(),
            one()?,
            scratch_bytes,
            planner,
        )?),
        DiskletSpec::Partition { keys, partitions } => Box::new(partition::Partition::new(
            keys,
            *partitions,
            one()?,
            planner,
        )?),
        DiskletSpec::Fragment { kind, plan } => Box::new(fragment::Fragment::new(
            *kind,
            &plan.0,
            inputs,
            sorted,
            scratch_bytes,
            spill,
        )?),
        DiskletSpec::Merge { keys } => {
            Box::new(merge::Merge::new(keys, inputs, scratch_bytes, planner)?)
        }
        DiskletSpec::HashJoin {
            build_keys,
            probe_keys,
        } => Box::new(hash_join::HashJoin::new(
            build_keys,
            probe_keys,
            inputs,
            scratch_bytes,
            planner,
        )?),
        DiskletSpec::Wasm { name, .. } => {
            return Err(DiskOsError::InvalidJob(format!(
                "user disklet `{name}` needs the disk's registry (DiskOs::build_stage)"
            )));
        }
        DiskletSpec::App { app, name, .. } => {
            return Err(DiskOsError::InvalidJob(format!(
                "application disklet `{app}.{name}` needs the disk's registry (DiskOs::build_stage)"
            )));
        }
    })
}

/// Copies string/binary view columns whose data buffers are mostly unreferenced (after a
/// filter or a limit, views keep pointing into the whole input buffers) into compact buffers,
/// so that shipping them sends only the bytes the rows use. Other columns are untouched. A
/// column is copied when its buffers hold more than twice the bytes its views use plus 1 KiB
/// (with 8 KiB, a two-row result of supplier's four text columns shipped 18 KiB).
pub fn compact_views(batch: RecordBatch) -> RecordBatch {
    use arrow::array::AsArray;
    use arrow::datatypes::DataType;
    fn wasteful(buffers: &[arrow::buffer::Buffer], views: &[u128]) -> bool {
        let held: usize = buffers.iter().map(|b| b.len()).sum();
        let used: usize = views
            .iter()
            .map(|v| *v as u32 as usize)
            .filter(|l| *l > 12)
            .sum();
        held > 2 * used + 1024
    }
    let mut changed = false;
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Utf8View => {
                let a = c.as_string_view();
                if wasteful(a.data_buffers(), a.views()) {
                    changed = true;
                    Arc::new(a.gc()) as ArrayRef
                } else {
                    c.clone()
                }
            }
            DataType::BinaryView => {
                let a = c.as_binary_view();
                if wasteful(a.data_buffers(), a.views()) {
                    changed = true;
                    Arc::new(a.gc()) as ArrayRef
                } else {
                    c.clone()
                }
            }
            _ => c.clone(),
        })
        .collect();
    if !changed {
        return batch;
    }
    RecordBatch::try_new(batch.schema(), columns).unwrap_or(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, StringViewArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn held(b: &RecordBatch) -> usize {
        let a = b
            .column(0)
            .as_any()
            .downcast_ref::<StringViewArray>()
            .unwrap();
        a.data_buffers().iter().map(|b| b.len()).sum()
    }

    #[test]
    fn views_into_a_mostly_unused_buffer_are_copied_to_their_rows() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Utf8View,
            false,
        )]));
        let long = |i: usize| format!("a supplier's comment, long enough for the buffer {i:04}");
        let all = StringViewArray::from_iter_values((0..100).map(long));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(all)]).unwrap();
        // Two rows of 100 left by a filter still hold the whole buffer (~5 KB).
        let two = batch.slice(10, 2);
        assert!(held(&two) > 4_000);
        let compact = compact_views(two.clone());
        assert!(held(&compact) < 200, "{}", held(&compact));
        assert_eq!(compact.column(0).as_ref(), two.column(0).as_ref());
        // A buffer the rows mostly use stays as it is.
        let most = batch.slice(0, 80);
        assert_eq!(held(&compact_views(most.clone())), held(&most));
    }
}
