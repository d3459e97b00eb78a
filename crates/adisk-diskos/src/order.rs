//! Streams a disk knows to be sorted: a table stored in key order (TPC-H's `lineitem` and
//! `orders` are generated in order-key order) is scanned in that order, so the sorts a plan
//! fragment puts before a sort-merge join are needless, and an aggregation grouping on that key
//! streams its groups instead of hashing them all.
//!
//! Nothing is assumed from how a table was loaded. The writer checks every row of a partition
//! ([`PartitionInfo::sorted`]: an integer or date column whose values never decrease, with no
//! NULL); a scan is sorted on such a column when every partition it reads is, and it reads them
//! in the order of their bounds ([`scan_sorted`]). A fragment's leaf declares the orders of its
//! input ([`input_properties`]), DataFusion's equivalence rules carry them through filters,
//! projections and joins, and the fragment reports the columns still sorted at its output
//! ([`sorted_columns`]) for the stage it feeds. Exchanges and every other disklet report none.
//!
//! [`PartitionInfo::sorted`]: adisk_core::protocol::PartitionInfo::sorted
use adisk_core::protocol::TableInfo;
use arrow::compute::SortOptions;
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalSortExpr};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use std::sync::Arc;

/// The columns of `projection` (indices into `info`'s schema) that a scan of `info`'s
/// partitions, read in their listed order, returns in ascending order.
pub fn scan_sorted(info: &TableInfo, projection: &[usize]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if !enabled() {
        return out;
    }
    for &c in projection {
        let Some(field) = info.schema.fields().get(c) else {
            continue;
        };
        if column_sorted(info, c) && !out.contains(field.name()) {
            out.push(field.name().clone());
        }
    }
    out
}

/// Whether scans declare their order: yes unless the disk's environment sets
/// `ADISK_SORTED_SCANS=off` (for measuring what it gains).
pub fn enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var("ADISK_SORTED_SCANS").map_or(true, |v| v != "off"))
}

/// Whether column `c` is sorted in every partition and each partition's values start at or
/// after the last one's end.
fn column_sorted(info: &TableInfo, c: usize) -> bool {
    let mut last: Option<i64> = None;
    for p in &info.partitions {
        if !p.sorted.get(c).copied().unwrap_or(false) {
            return false;
        }
        match p.bounds.get(c).copied().flatten() {
            Some([lo, hi]) => {
                if last.is_some_and(|l| lo < l) {
                    return false;
                }
                last = Some(hi);
            }
            None if p.rows == 0 => {}
            None => return false,
        }
    }
    !info.partitions.is_empty()
}

/// The ascending order of column `name` of `schema` as a sort-merge join asks for it (Arrow's
/// default options: NULLs first; the columns declared sorted hold no NULL, but DataFusion's
/// equivalence classes keep one of two orders differing only there); none if the name is not
/// one column of the schema.
fn ascending(schema: &SchemaRef, name: &str) -> Option<PhysicalSortExpr> {
    let mut found = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| f.name() == name);
    let (Some((i, _)), None) = (found.next(), found.next()) else {
        return None;
    };
    Some(PhysicalSortExpr::new(
        Arc::new(Column::new(name, i)),
        SortOptions::default(),
    ))
}

/// The equivalence properties of a fragment's leaf whose input is sorted on `sorted`.
pub fn input_properties(schema: &SchemaRef, sorted: &[String]) -> EquivalenceProperties {
    let orderings: Vec<_> = sorted
        .iter()
        .filter_map(|n| ascending(schema, n))
        .map(|o| vec![o])
        .collect();
    EquivalenceProperties::new_with_orderings(schema.clone(), orderings)
}

/// The output columns of `plan` that its equivalence properties say are ascending.
pub fn sorted_columns(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let schema = plan.schema();
    let eq = plan.equivalence_properties();
    let mut out: Vec<String> = Vec::new();
    for f in schema.fields() {
        let holds = ascending(&schema, f.name())
            .is_some_and(|o| eq.ordering_satisfy(vec![o]).unwrap_or(false));
        if holds && !out.contains(f.name()) {
            out.push(f.name().clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use adisk_core::protocol::PartitionInfo;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_plan::empty::EmptyExec;

    fn part(partition: u32, rows: u64, bounds: Option<[i64; 2]>, sorted: bool) -> PartitionInfo {
        let mut p: PartitionInfo = serde_json::from_value(serde_json::json!({
            "partition": partition, "file": "f", "rows": rows, "bytes": 1, "crc32": 0,
            "row_groups": 1
        }))
        .unwrap();
        p.bounds = vec![bounds, None];
        p.sorted = vec![sorted, false];
        p
    }

    fn table(partitions: Vec<PartitionInfo>) -> TableInfo {
        TableInfo {
            name: "t".into(),
            schema: Schema::new(vec![
                Field::new("k", DataType::Int64, true),
                Field::new("v", DataType::Utf8, true),
            ]),
            partitions,
            load: None,
        }
    }

    #[test]
    fn a_scan_is_sorted_only_where_every_partition_is_and_they_come_in_key_order() {
        let t = table(vec![
            part(0, 10, Some([1, 5]), true),
            part(1, 10, Some([5, 9]), true),
        ]);
        assert_eq!(scan_sorted(&t, &[1, 0]), vec!["k".to_string()]);
        // Read out of key order.
        let t = table(vec![
            part(1, 10, Some([5, 9]), true),
            part(0, 10, Some([1, 5]), true),
        ]);
        assert!(scan_sorted(&t, &[0]).is_empty());
        // One partition not sorted, or written before the flag existed.
        let t = table(vec![
            part(0, 10, Some([1, 5]), true),
            part(1, 10, Some([6, 9]), false),
        ]);
        assert!(scan_sorted(&t, &[0]).is_empty());
        let mut old = part(0, 10, Some([1, 5]), true);
        old.sorted.clear();
        assert!(scan_sorted(&table(vec![old]), &[0]).is_empty());
        // An empty partition breaks nothing; no partition at all says nothing.
        let t = table(vec![
            part(0, 10, Some([1, 5]), true),
            part(1, 0, None, true),
        ]);
        assert_eq!(scan_sorted(&t, &[0]), vec!["k".to_string()]);
        assert!(scan_sorted(&table(vec![]), &[0]).is_empty());
    }

    #[test]
    fn a_leaf_declares_its_orders_and_a_plan_reports_what_is_still_sorted() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let eq = input_properties(&schema, &["k".to_string(), "missing".to_string()]);
        let k = PhysicalSortExpr::new(Arc::new(Column::new("k", 0)), SortOptions::default());
        assert!(eq.ordering_satisfy(vec![k]).unwrap());
        let v = PhysicalSortExpr::new(Arc::new(Column::new("v", 1)), SortOptions::default());
        assert!(!eq.ordering_satisfy(vec![v]).unwrap());
        // A plain leaf says nothing is sorted.
        let plain: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema));
        assert!(sorted_columns(&plain).is_empty());
    }
}
