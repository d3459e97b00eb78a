//! TPC-H data straight from `tpchgen-arrow`, part `k` of `n` (1-based, as dbgen).
//!
//! Parts of the keyed tables are contiguous ranges of their primary key (part `k` of
//! `orders` holds exactly the orders whose `lineitem`s are in part `k` of `lineitem`), so
//! generating part `k` at the disk that owns it gives range declustering on the primary key
//! with `orders` and `lineitem` co-partitioned by `orderkey`, without moving a byte.
use crate::{Result, StorageError};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

/// The eight TPC-H tables, small first.
pub const TABLES: [&str; 8] = ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"];

/// Smallest and largest accepted scale factors.
pub const SF_RANGE: (f64, f64) = (0.001, 1000.0);

/// Rows per generated batch.
pub const GENERATE_BATCH_ROWS: usize = 8192;

/// A stream of generated batches.
pub type BatchIter = Box<dyn Iterator<Item = std::result::Result<RecordBatch, ArrowError>> + Send>;

/// True for tables too small to split (one part, placed on disk 0).
pub fn is_unsplit(table: &str) -> bool {
    matches!(table, "region" | "nation")
}

/// The primary-key column a table's parts are ranges of.
pub fn range_key(table: &str) -> Option<&'static str> {
    Some(match table {
        "region" => "r_regionkey",
        "nation" => "n_nationkey",
        "supplier" => "s_suppkey",
        "customer" => "c_custkey",
        "part" => "p_partkey",
        "partsupp" => "ps_partkey",
        "orders" => "o_orderkey",
        "lineitem" => "l_orderkey",
        _ => return None,
    })
}

/// Approximate total rows of a table at `sf` (for progress bars).
pub fn approx_rows(table: &str, sf: f64) -> u64 {
    let base: f64 = match table {
        "region" => return 5,
        "nation" => return 25,
        "supplier" => 10_000.0,
        "customer" => 150_000.0,
        "part" => 200_000.0,
        "partsupp" => 800_000.0,
        "orders" => 1_500_000.0,
        "lineitem" => 6_001_215.0,
        _ => 0.0,
    };
    (base * sf) as u64
}

/// Checks a scale factor.
pub fn validate_sf(sf: f64) -> Result<()> {
    if !(SF_RANGE.0..=SF_RANGE.1).contains(&sf) || !sf.is_finite() {
        return Err(StorageError::Invalid(format!("scale factor {sf} outside {}..={}", SF_RANGE.0, SF_RANGE.1)));
    }
    Ok(())
}

/// Arrow schema of a TPC-H table.
pub fn schema(table: &str) -> Result<SchemaRef> {
    Ok(match table {
        "region" => RegionArrow::schema_ref(),
        "nation" => NationArrow::schema_ref(),
        "supplier" => SupplierArrow::schema_ref(),
        "customer" => CustomerArrow::schema_ref(),
        "part" => PartArrow::schema_ref(),
        "partsupp" => PartSuppArrow::schema_ref(),
        "orders" => OrderArrow::schema_ref(),
        "lineitem" => LineItemArrow::schema_ref(),
        other => return Err(StorageError::Invalid(format!("`{other}` is not a TPC-H table ({})", TABLES.join(", ")))),
    })
}

/// Generator for part `part` (1-based) of `part_count` of `table` at scale factor `sf`.
pub fn generate(table: &str, sf: f64, part: u32, part_count: u32) -> Result<BatchIter> {
    validate_sf(sf)?;
    if part == 0 || part > part_count {
        return Err(StorageError::Invalid(format!("part {part} outside 1..={part_count}")));
    }
    let (p, n) = (part as i32, part_count as i32);
    let b = GENERATE_BATCH_ROWS;
    Ok(match table {
        "region" => Box::new(RegionArrow::new(RegionGenerator::new(sf, p, n)).with_batch_size(b)),
        "nation" => Box::new(NationArrow::new(NationGenerator::new(sf, p, n)).with_batch_size(b)),
        "supplier" => Box::new(SupplierArrow::new(SupplierGenerator::new(sf, p, n)).with_batch_size(b)),
        "customer" => Box::new(CustomerArrow::new(CustomerGenerator::new(sf, p, n)).with_batch_size(b)),
        "part" => Box::new(PartArrow::new(PartGenerator::new(sf, p, n)).with_batch_size(b)),
        "partsupp" => Box::new(PartSuppArrow::new(PartSuppGenerator::new(sf, p, n)).with_batch_size(b)),
        "orders" => Box::new(OrderArrow::new(OrderGenerator::new(sf, p, n)).with_batch_size(b)),
        "lineitem" => Box::new(LineItemArrow::new(LineItemGenerator::new(sf, p, n)).with_batch_size(b)),
        other => return Err(StorageError::Invalid(format!("`{other}` is not a TPC-H table ({})", TABLES.join(", ")))),
    })
}
