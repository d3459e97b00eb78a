//! The table provider and the scan operator that runs a table's part of a query at the disks.
//!
//! [`DiskTable`] is a DataFusion `TableProvider` over a table spread across the disks. Its scan
//! is a [`DiskScanExec`] with one output partition per disk holding the table; each partition
//! starts one disk job (a relational bundle) whose stages depend on the offload level and on
//! what the optimizer rules ([`super::rules`]) moved into it:
//!
//! ```text
//! table source (columns, zone-map predicate)
//!   → select      (qualification + projection; pushed filters)
//!   → bloom_probe (semi-join filtering; the filter arrives from the host's join build side)
//!   → sql_aggregate / sql_select (a DataFusion plan fragment: projections + partial aggregation)
//!   → host
//! ```
use super::selectivity::{TableSample, estimate_selectivity};
use super::{Offload, QueryMetrics, ScanReport, SqlSettings};
use crate::client::cluster::{Cluster, TableEntry};
use crate::client::jobs::encode_expr;
use crate::{HostError, Result};
use adisk_core::bloom::BloomFilter;
use adisk_core::builder::{JobBuilder, Sizes, fitted_buffer_kib};
use adisk_core::hash::hash_columns;
use adisk_core::protocol::{
    DiskletSpec, ExprBytes, FragmentKind, JobSpec, NamedExpr, Sink, Source,
};
use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{Statistics, plan_err};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, utils::conjunction};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use futures::StreamExt;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a probe-side scan waits for its Bloom filter before running without one.
const BLOOM_WAIT: Duration = Duration::from_secs(600);

static NEXT_SCAN: AtomicUsize = AtomicUsize::new(0);

/// A table stored on the disks, as DataFusion sees it.
#[derive(Debug)]
pub struct DiskTable {
    pub(super) entry: Arc<TableEntry>,
    /// Distinct values per column (merged sketches), computed once.
    pub(super) ndv: Arc<Vec<Option<u64>>>,
    /// Sampled rows, for what filters keep (`None`: a partition has no sample).
    pub(super) sample: Option<Arc<TableSample>>,
    pub(super) cluster: Arc<Cluster>,
    pub(super) settings: Arc<SqlSettings>,
    pub(super) metrics: Arc<QueryMetrics>,
}

/// True if `e` can be evaluated at a disk: no subqueries, outer references, placeholders or
/// volatile functions, and it encodes with `datafusion-proto`.
fn disk_evaluable(e: &Expr) -> bool {
    let mut ok = true;
    let _ = e.apply(|n| {
        if matches!(
            n,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::OuterReferenceColumn(..)
                | Expr::Placeholder(_)
        ) {
            ok = false;
            return Ok(datafusion::common::tree_node::TreeNodeRecursion::Stop);
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    ok && !e.is_volatile() && encode_expr(e).is_ok()
}

/// A table the catalog found incomplete: registered so that a query naming it fails with
/// [`HostError::IncompleteTable`] (not "table not found"), and never reads any of it.
#[derive(Debug)]
pub struct IncompleteTable {
    /// Name.
    pub name: String,
    /// Schema (as one of its disks holds it).
    pub schema: SchemaRef,
    /// Why it is incomplete.
    pub why: crate::client::cluster::Incomplete,
}

#[async_trait]
impl TableProvider for IncompleteTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::External(Box::new(
            crate::client::cluster::incomplete_error(&self.name, &self.why),
        )))
    }
}

impl DiskTable {
    /// The estimated fraction of the table's rows that pass `filters` (conjuncts over its
    /// columns), from its distinct values and sample ([`estimate_selectivity`]).
    pub(super) fn selectivity(&self, filters: &[Expr]) -> f64 {
        let schema = &self.entry.schema;
        let ndv = |name: &str| {
            schema
                .index_of(name)
                .ok()
                .and_then(|i| self.ndv.get(i).copied().flatten())
        };
        estimate_selectivity(filters, &ndv, self.sample.as_deref())
    }
}

#[async_trait]
impl TableProvider for DiskTable {
    fn schema(&self) -> SchemaRef {
        self.entry.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::error::Result<Vec<TableProviderFilterPushDown>> {
        let push = self.settings.filters_at_disks(&self.entry);
        Ok(filters
            .iter()
            .map(|f| {
                if push && disk_evaluable(f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }
    fn statistics(&self) -> Option<Statistics> {
        let mut s = Statistics::new_unknown(&self.entry.schema);
        s.num_rows = Precision::Exact(self.entry.rows() as usize);
        s.total_byte_size = Precision::Inexact(self.entry.bytes() as usize);
        for (c, n) in s.column_statistics.iter_mut().zip(self.ndv.iter()) {
            if let Some(n) = *n {
                c.distinct_count = Precision::Inexact(n as usize);
            }
        }
        Some(s)
    }
    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        // Partitions with no live copy: a typed error before anything runs.
        self.entry
            .assign(&self.cluster.dead_disks())
            .map_err(to_df)?;
        let schema = &self.entry.schema;
        let projection: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..schema.fields().len()).collect());
        let output = Arc::new(schema.project(&projection)?);
        let predicate = conjunction(filters.iter().cloned());
        if predicate.is_some() && !self.settings.filters_at_disks(&self.entry) {
            return plan_err!(
                "internal: filters pushed to a scan of `{}` at offload level {}",
                self.entry.name,
                self.settings.offload
            );
        }
        let names: Vec<String> = projection
            .iter()
            .map(|i| schema.field(*i).name().clone())
            .collect();
        let read: Vec<String> = if self.settings.offload == Offload::None {
            // Conventional: whole rows leave the disks.
            schema.fields().iter().map(|f| f.name().clone()).collect()
        } else {
            let mut cols: BTreeSet<String> = names.iter().cloned().collect();
            if let Some(p) = &predicate {
                for c in p.column_refs() {
                    cols.insert(c.name.clone());
                }
            }
            if cols.is_empty() {
                // count(*)-style scans still need the row count: read the narrowest column.
                let narrow = schema
                    .fields()
                    .iter()
                    .min_by_key(|f| f.data_type().primitive_width().unwrap_or(16))
                    .map(|f| f.name().clone());
                cols.extend(narrow);
            }
            // Keep table order, so the stream's schema is a projection of the table's.
            schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .filter(|n| cols.contains(n))
                .collect()
        };
        let est_rows = (self.entry.rows() as f64 * self.selectivity(filters))
            .max(1.0_f64.min(self.entry.rows() as f64));
        Ok(Arc::new(
            DiskScanExec::new(
                self.entry.clone(),
                self.ndv.clone(),
                self.cluster.clone(),
                self.settings.clone(),
                self.metrics.clone(),
                ScanPlan {
                    read,
                    predicate,
                    output_names: names,
                    base_schema: output,
                    est_rows,
                    limit: limit.map(|l| l as u64),
                    fragment: None,
                    bloom: None,
                    extra_blooms: vec![],
                },
            )
            .with_sample(self.sample.clone()),
        ))
    }
}

/// A Bloom filter built at the host from a join's build side.
#[derive(Debug)]
pub struct BuiltBloom {
    /// The filter.
    pub filter: BloomFilter,
    /// Keys inserted.
    pub keys: u64,
    /// Exact key hashes (kept when analyzing, to measure the false-positive rate).
    pub exact: Option<HashSet<u64>>,
}

/// State of a Bloom filter a scan waits for.
#[derive(Debug, Clone)]
pub enum BloomState {
    /// The build side is still running.
    Pending,
    /// Built, or `None` if the build side went away without finishing.
    Ready(Option<Arc<BuiltBloom>>),
}

/// What a probe-side scan needs to apply a Bloom semi-join.
#[derive(Debug, Clone)]
pub struct BloomProbeSpec {
    /// Key columns of the scan's base output, in join-key order.
    pub keys: Vec<String>,
    /// Where the filter appears.
    pub slot: watch::Receiver<BloomState>,
    /// Filter size in bytes.
    pub bytes: usize,
    /// Estimated fraction of the scan's rows the filter passes: the build side's distinct keys
    /// over the key column's distinct values here (None: not known, taken as 1).
    pub est_pass: Option<f64>,
}

/// Rows `disks` partial aggregations of `rows` rows (spread evenly) into at most `groups`
/// groups emit: each disk the groups its share of the rows is expected to hit, as if the rows
/// fell into the groups at random, `G·(1 − e^(−r/G))`; never more than the rows, and with no
/// grouping (`groups` 1) a row per disk.
pub(crate) fn partial_groups(groups: f64, rows: f64, disks: usize) -> f64 {
    let n = disks.max(1) as f64;
    let g = groups.max(1.0);
    let hit = n * g * (1.0 - (-(rows / n) / g).exp());
    hit.min(rows).max(n.min(rows.ceil()))
}

/// A plan fragment moved into the scan.
#[derive(Debug, Clone)]
pub struct ScanFragment {
    /// Kind.
    pub kind: FragmentKind,
    /// The fragment (leaf: `EmptyExec` with the base schema), kept for EXPLAIN.
    pub plan: Arc<dyn ExecutionPlan>,
    /// Its `datafusion-proto` encoding.
    pub bytes: Vec<u8>,
    /// Estimated output rows (all disks), before the Bloom semi-joins attached later.
    pub est_rows: Option<f64>,
    /// An aggregation's groups: the scan columns its grouping keys are computed from (empty:
    /// no grouping); None for other fragments or where they could not be followed.
    pub group_columns: Option<Vec<String>>,
}

/// What one scan asks of the disks.
#[derive(Debug, Clone)]
pub struct ScanPlan {
    /// Columns read at the disks.
    pub read: Vec<String>,
    /// Pushed filters (qualification at the disks, and zone maps).
    pub predicate: Option<Expr>,
    /// Columns of the base output.
    pub output_names: Vec<String>,
    /// Base output schema (before a fragment).
    pub base_schema: SchemaRef,
    /// Estimated rows of the base output.
    pub est_rows: f64,
    /// Rows the plan needs at most (DataFusion pushes a LIMIT only when every filter runs
    /// here); each disk stops early once it has sent that many.
    pub limit: Option<u64>,
    /// A fragment run after the select (and Bloom) stage.
    pub fragment: Option<ScanFragment>,
    /// Bloom semi-join.
    pub bloom: Option<BloomProbeSpec>,
    /// Further Bloom filters from semi-joins higher in the plan whose keys trace back to this
    /// scan (through inner joins); applied after the first.
    pub extra_blooms: Vec<BloomProbeSpec>,
}

/// Distinct values of `column` among the rows that pass `predicate`, of `ndv` in the table:
/// its conjuncts `column = literal` leave 1, `column IN (k literals)` at most k, `column <>
/// literal` one fewer and `column NOT IN (k literals)` k fewer (at least 1); other conjuncts
/// leave it (the rows they drop may hold any value).
pub(super) fn filtered_ndv(predicate: &Expr, column: &str, ndv: u64) -> u64 {
    use datafusion::logical_expr::{BinaryExpr, Operator, expr::InList};
    let is_col = |e: &Expr| matches!(e, Expr::Column(c) if c.name == column);
    let is_lit = |e: &Expr| matches!(e, Expr::Literal(..));
    let mut n = ndv;
    for c in datafusion::logical_expr::utils::split_conjunction(predicate) {
        n = match c {
            Expr::BinaryExpr(BinaryExpr { left, op, right })
                if (is_col(left) && is_lit(right)) || (is_lit(left) && is_col(right)) =>
            {
                match op {
                    Operator::Eq => n.min(1),
                    Operator::NotEq => n.saturating_sub(1),
                    _ => n,
                }
            }
            Expr::InList(InList {
                expr,
                list,
                negated,
            }) if is_col(expr) && list.iter().all(is_lit) => match negated {
                false => n.min(list.len() as u64),
                true => n.saturating_sub(list.len() as u64),
            },
            _ => n,
        }
        .max(1);
    }
    n
}

/// The part of a query that runs at the disks for one table.
#[derive(Debug)]
pub struct DiskScanExec {
    pub(super) entry: Arc<TableEntry>,
    ndv: Arc<Vec<Option<u64>>>,
    cluster: Arc<Cluster>,
    settings: Arc<SqlSettings>,
    metrics: Arc<QueryMetrics>,
    pub(crate) plan: ScanPlan,
    pub(crate) disks: Vec<u32>,
    /// The partitions `disks[i]` reads (None: all its local ones), chosen among the live
    /// copies when the scan was planned ([`TableEntry::assign`]).
    pub(crate) reads: Vec<Option<Vec<u32>>>,
    pub(super) id: usize,
    properties: Arc<PlanProperties>,
    /// The table's sampled rows (the widths of its variable-width columns).
    sample: Option<Arc<TableSample>>,
}

impl DiskScanExec {
    /// The scan's Bloom semi-joins.
    fn blooms(&self) -> impl Iterator<Item = &BloomProbeSpec> {
        std::iter::once(&self.plan.bloom)
            .flatten()
            .chain(&self.plan.extra_blooms)
    }

    /// What the scan's Bloom semi-joins cost the disks: the rows probed (the selection's rows
    /// by the first filter, what it passes by the next, …) and the filters' bytes shipped to
    /// its disks.
    pub(crate) fn bloom_work(&self) -> (f64, u64) {
        let (mut rows, mut probed, mut bytes) = (self.plan.est_rows, 0.0, 0u64);
        for b in self.blooms() {
            probed += rows;
            rows *= b.est_pass.unwrap_or(1.0);
            bytes = bytes.saturating_add(b.bytes as u64 * self.disks.len() as u64);
        }
        (probed, bytes)
    }

    /// The share of column `name`'s distinct values a Bloom semi-join on it alone passes (1
    /// without one).
    fn thinning(&self, name: &str) -> f64 {
        self.blooms()
            .find(|b| b.keys.len() == 1 && b.keys[0] == name)
            .and_then(|b| b.est_pass)
            .unwrap_or(1.0)
    }

    /// The rows all disks together are expected to ship: the selection's estimate, less what
    /// the Bloom semi-joins drop (they run before any fragment), at most the fragment's
    /// estimate. None when the fragment's is unknown.
    fn expected_rows(&self) -> Option<f64> {
        let pass: f64 = self.blooms().filter_map(|b| b.est_pass).product();
        let filtered = self.plan.est_rows * pass;
        let Some(f) = &self.plan.fragment else {
            return Some(filtered);
        };
        let Some(columns) = &f.group_columns else {
            return f.est_rows.map(|r| r.min(filtered));
        };
        // Groups: the combinations of the grouping columns' distinct values, each column's
        // thinned by a Bloom semi-join on it alone (it passes that share of its keys).
        let mut groups = 1.0f64;
        for c in columns {
            let ndv = self.column_ndv(c)? as f64;
            groups *= (ndv * self.thinning(c)).max(1.0);
        }
        Some(partial_groups(groups, filtered, self.disks.len()))
    }

    /// Rough bytes of one output row: a column of variable width is as wide as the table's
    /// sampled values of it are on average (24 where there is none: a computed column, or
    /// no sample).
    fn row_width(&self) -> usize {
        let width: f64 = self
            .schema()
            .fields()
            .iter()
            .map(|f| match f.data_type().primitive_width() {
                Some(w) => w as f64,
                None => (self.sample.as_ref())
                    .and_then(|s| s.width_of(f.name()))
                    .unwrap_or(24.0),
            })
            .sum();
        (width.round() as usize).max(1)
    }

    /// What the scan is expected to ship, all disks together: rows and bytes (as the cost
    /// model counts them), for EXPLAIN ANALYZE to set beside what it shipped.
    pub(crate) fn expected(&self) -> Option<(u64, u64)> {
        let rows = self.expected_rows()? as u64;
        Some((rows, rows.saturating_mul(self.row_width() as u64)))
    }

    /// At most how many distinct combinations output columns `cols` hold: the product of
    /// their table columns' distinct values (unknown: as many as rows), each thinned by a
    /// Bloom semi-join on it alone, at most the rows expected. None with a fragment (its
    /// columns are computed).
    pub(crate) fn expected_distinct(&self, cols: &[usize]) -> Option<f64> {
        if self.plan.fragment.is_some() {
            return None;
        }
        let schema = self.schema();
        let mut product = 1.0f64;
        for col in cols {
            let name = schema.fields().get(*col)?.name();
            // A column whose distinct values are unknown has at most as many as rows.
            let ndv = self.column_ndv(name).map_or(f64::INFINITY, |n| n as f64);
            product *= (ndv * self.thinning(name)).max(1.0);
        }
        Some(product.min(self.expected_rows()?).max(1.0))
    }

    /// Distinct values of table column `name` (written at load), if known.
    /// Distinct values of column `name` in the scan's output: the table's count, as the
    /// scan's predicate leaves it ([`filtered_ndv`]).
    pub(super) fn column_ndv(&self, name: &str) -> Option<u64> {
        let i = self.entry.schema.index_of(name).ok()?;
        let n = (*self.ndv.get(i)?)?;
        Some(match &self.plan.predicate {
            Some(p) => filtered_ndv(p, name, n),
            None => n,
        })
    }

    fn new(
        entry: Arc<TableEntry>,
        ndv: Arc<Vec<Option<u64>>>,
        cluster: Arc<Cluster>,
        settings: Arc<SqlSettings>,
        metrics: Arc<QueryMetrics>,
        plan: ScanPlan,
    ) -> Self {
        // Lost partitions leave the scan without disks; planning failed already (`scan`).
        let (disks, reads): (Vec<u32>, Vec<Option<Vec<u32>>>) = entry
            .assign(&cluster.dead_disks())
            .unwrap_or_default()
            .into_iter()
            .unzip();
        // A sorting fragment makes each disk's stream sorted: say so, for the host's merge.
        let equivalences = match &plan.fragment {
            Some(f) if f.kind == FragmentKind::Sort => f.plan.equivalence_properties().clone(),
            Some(f) => EquivalenceProperties::new(f.plan.schema()),
            None => EquivalenceProperties::new(plan.base_schema.clone()),
        };
        let properties = Arc::new(PlanProperties::new(
            equivalences,
            Partitioning::UnknownPartitioning(disks.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        DiskScanExec {
            entry,
            ndv,
            cluster,
            settings,
            metrics,
            plan,
            disks,
            reads,
            id: NEXT_SCAN.fetch_add(1, Ordering::Relaxed),
            properties,
            sample: None,
        }
    }

    /// The same scan, knowing its table's sampled rows.
    pub(super) fn with_sample(mut self, sample: Option<Arc<TableSample>>) -> Self {
        self.sample = sample;
        self
    }

    /// The same scan with a different plan.
    pub(super) fn with_plan(&self, plan: ScanPlan) -> Self {
        let mut s = DiskScanExec::new(
            self.entry.clone(),
            self.ndv.clone(),
            self.cluster.clone(),
            self.settings.clone(),
            self.metrics.clone(),
            plan,
        )
        .with_sample(self.sample.clone());
        s.id = self.id;
        s
    }

    /// Table name.
    pub fn table(&self) -> &str {
        &self.entry.name
    }

    /// The partitions disk `d` reads for this scan (None: all its local ones).
    pub(crate) fn partitions_at(&self, d: u32) -> Option<Vec<u32>> {
        self.disks
            .iter()
            .position(|x| *x == d)
            .and_then(|i| self.reads[i].clone())
    }

    /// Who reads what, e.g. `lineitem: disk 0 [0], disk 1 [1, 2]` (None for tables read
    /// whole at each disk).
    pub fn describe_reads(&self) -> Option<String> {
        let parts: Vec<String> = self
            .disks
            .iter()
            .zip(&self.reads)
            .filter_map(|(d, r)| r.as_ref().map(|r| format!("disk {d} {r:?}")))
            .collect();
        (!parts.is_empty()).then(|| format!("{}: {}", self.entry.name, parts.join(", ")))
    }

    /// The job shipped to a disk reading `partitions` of the table (None: all it holds), given
    /// the Bloom filter (if any).
    fn job(
        &self,
        bloom: Option<&BuiltBloom>,
        extras: &[(Vec<String>, Arc<BuiltBloom>)],
        partitions: Option<Vec<u32>>,
    ) -> Result<JobSpec> {
        let (source, stages) = self.stages(bloom, extras)?;
        let sizes = Sizes {
            scratch_kib: self.settings.scratch_kib,
            buffer_kib: self.settings.buffer_kib,
            temp_kib: self.settings.temp_kib,
        };
        let job = JobBuilder::chain("sql", source, stages, Sink::Host)
            .program(&self.settings.program)
            .sizes(sizes);
        let buffer_kib = match sizes.buffer_kib {
            0 => 0,
            largest => {
                let cost = &self.settings.cost;
                fitted_buffer_kib(
                    std::iter::once(job.spec()),
                    largest,
                    cost.disk_memory_bytes,
                    cost.buffers_per_stream,
                )
            }
        };
        job.buffer_kib(buffer_kib)
            .reading(partitions)
            .build()
            .map_err(|e| HostError::Invalid(format!("a scan's job: {e}")))
    }

    /// The source and stages of a bundle without Bloom filters, for job graphs that route its
    /// output elsewhere than to the host.
    ///
    /// # Errors
    /// Expressions that cannot be encoded; a bundle that waits for a Bloom filter.
    pub(crate) fn disk_stages(&self) -> Result<(Source, Vec<DiskletSpec>)> {
        if self.plan.bloom.is_some() || !self.plan.extra_blooms.is_empty() {
            return Err(HostError::Invalid(
                "a bundle with a Bloom semi-join cannot feed an exchange".into(),
            ));
        }
        self.stages(None, &[])
    }

    fn stages(
        &self,
        bloom: Option<&BuiltBloom>,
        extras: &[(Vec<String>, Arc<BuiltBloom>)],
    ) -> Result<(Source, Vec<DiskletSpec>)> {
        let p = &self.plan;
        let prune = p.predicate.as_ref().map(encode_expr).transpose()?;
        let source = Source::Table {
            table: self.entry.name.clone(),
            columns: p.read.clone(),
            prune: prune.clone(),
            partitions: None,
        };
        let mut stages = Vec::new();
        let read_is_output = p.read == p.output_names;
        let limit = if p.fragment.is_none()
            && p.bloom.is_none()
            && self.settings.offload != Offload::None
        {
            p.limit
        } else {
            None
        };
        if p.predicate.is_some()
            || limit.is_some()
            || (!read_is_output
                && self.settings.offload != Offload::None
                && !p.output_names.is_empty())
        {
            let projection = p
                .output_names
                .iter()
                .map(|n| {
                    Ok(NamedExpr {
                        name: n.clone(),
                        expr: encode_expr(&Expr::Column(
                            datafusion::common::Column::new_unqualified(n),
                        ))?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            // An empty projection means "all input columns" to the select disklet; the host
            // then keeps only the row count.
            stages.push(DiskletSpec::Select {
                predicate: prune,
                projection,
                limit,
            });
        }
        let probes = p
            .bloom
            .iter()
            .filter_map(|spec| bloom.map(|b| (&spec.keys, b)))
            .chain(extras.iter().map(|(k, b)| (k, b.as_ref())));
        for (names, b) in probes {
            let keys = names
                .iter()
                .map(|k| {
                    encode_expr(&Expr::Column(datafusion::common::Column::new_unqualified(
                        k,
                    )))
                })
                .collect::<Result<Vec<ExprBytes>>>()?;
            stages.push(DiskletSpec::BloomProbe {
                keys,
                filter: b.filter.clone(),
            });
        }
        if let Some(f) = &p.fragment {
            stages.push(DiskletSpec::Fragment {
                kind: f.kind,
                plan: ExprBytes(f.bytes.clone()),
            });
        }
        Ok((source, stages))
    }

    /// One-line description of the bundle, for EXPLAIN.
    pub fn describe_stages(&self) -> Vec<String> {
        let p = &self.plan;
        let mut out = vec![format!(
            "scan {} columns [{}]{}",
            self.entry.name,
            p.read.join(", "),
            p.predicate
                .as_ref()
                .map(|e| format!(" zone maps: {e}"))
                .unwrap_or_default()
        )];
        let limit = p.limit.filter(|_| {
            p.fragment.is_none() && p.bloom.is_none() && self.settings.offload != Offload::None
        });
        let limit_text = limit
            .map(|l| format!(", stop after {l} rows"))
            .unwrap_or_default();
        if p.predicate.is_some() || limit.is_some() {
            out.push(format!(
                "select {} → [{}]{limit_text}",
                p.predicate
                    .as_ref()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "all rows".into()),
                p.output_names.join(", ")
            ));
        } else if p.read != p.output_names
            && self.settings.offload != Offload::None
            && !p.output_names.is_empty()
        {
            out.push(format!("project [{}]", p.output_names.join(", ")));
        }
        for b in p.bloom.iter().chain(&p.extra_blooms) {
            out.push(format!(
                "bloom_probe keys [{}], filter {} KiB (from a join's build side)",
                b.keys.join(", "),
                b.bytes / 1024
            ));
        }
        if let Some(f) = &p.fragment {
            let text = datafusion::physical_plan::displayable(f.plan.as_ref())
                .indent(false)
                .to_string();
            for line in text.lines() {
                if !line.trim_start().starts_with("EmptyExec") {
                    out.push(format!("{}: {}", f.kind.disklet_name(), line.trim()));
                }
            }
        }
        out
    }
}

impl DisplayAs for DiskScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DiskScanExec: table={} disks={} bundle=[{}]",
            self.entry.name,
            self.disks.len(),
            self.describe_stages().join(" | ")
        )
    }
}

/// `source` reading only `partitions` when it is a table.
pub(crate) fn reading_source(mut source: Source, partitions: Option<Vec<u32>>) -> Source {
    if let Source::Table { partitions: p, .. } = &mut source {
        *p = partitions;
    }
    source
}

fn to_df(e: HostError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Reshapes a batch the disk sent into the scan's output schema.
fn conform(
    batch: RecordBatch,
    schema: &SchemaRef,
    host_projection: Option<&[usize]>,
) -> datafusion::error::Result<RecordBatch> {
    let batch = match host_projection {
        Some(idx) => batch.project(idx)?,
        None => batch,
    };
    if schema.fields().is_empty() {
        let opts = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        return Ok(RecordBatch::try_new_with_options(
            schema.clone(),
            vec![],
            &opts,
        )?);
    }
    if batch.num_columns() != schema.fields().len() {
        let picked = schema
            .fields()
            .iter()
            .map(|f| {
                batch.column_by_name(f.name()).cloned().ok_or_else(|| {
                    DataFusionError::Internal(format!("disk result lacks column {}", f.name()))
                })
            })
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        return Ok(RecordBatch::try_new(schema.clone(), picked)?);
    }
    Ok(RecordBatch::try_new(
        schema.clone(),
        batch.columns().to_vec(),
    )?)
}

impl ExecutionPlan for DiskScanExec {
    fn name(&self) -> &str {
        "DiskScanExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> datafusion::error::Result<
            datafusion::common::tree_node::TreeNodeRecursion,
        >,
    ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }
    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn statistics_from_inputs(
        &self,
        _inputs: &[Arc<Statistics>],
        args: &datafusion::physical_plan::statistics::StatisticsArgs,
    ) -> datafusion::error::Result<Arc<Statistics>> {
        let mut s = Statistics::new_unknown(&self.schema());
        let share = if args.partition().is_some() {
            1.0 / self.disks.len().max(1) as f64
        } else {
            1.0
        };
        let rows = self.expected_rows();
        let est_rows = rows.map(|r| r * share);
        if let Some(rows) = est_rows {
            s.num_rows = Precision::Inexact(rows as usize);
            s.total_byte_size =
                Precision::Inexact((rows as usize).saturating_mul(self.row_width()));
        }
        if self.plan.fragment.is_none() {
            // Distinct values of the output columns (DataFusion caps them at the row count).
            let ndv = &self.ndv;
            for (c, f) in s.column_statistics.iter_mut().zip(self.schema().fields()) {
                if let Ok(i) = self.entry.schema.index_of(f.name())
                    && let Some(Some(_)) = ndv.get(i)
                    && let Some(n) = self.column_ndv(f.name())
                {
                    // A filtered scan has at most as many distinct values as rows.
                    let d = ((n as f64) * share)
                        .min(est_rows.unwrap_or(f64::MAX))
                        .max(1.0);
                    c.distinct_count = Precision::Inexact(d as usize);
                }
            }
        }
        Ok(Arc::new(s))
    }
    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> datafusion::error::Result<SendableRecordBatchStream> {
        let disk = *self.disks.get(partition).ok_or_else(|| {
            DataFusionError::Internal(format!(
                "scan partition {partition} of {}",
                self.disks.len()
            ))
        })?;
        let reads = self.reads[partition].clone();
        let schema = self.schema();
        let cluster = self.cluster.clone();
        let metrics = self.metrics.clone();
        let settings = self.settings.clone();
        let bloom_spec = self.plan.bloom.clone();
        let extra_specs = self.plan.extra_blooms.clone();
        let host_projection: Option<Vec<usize>> =
            if self.settings.offload == Offload::None && self.plan.fragment.is_none() {
                let table = &self.entry.schema;
                Some(
                    self.plan
                        .output_names
                        .iter()
                        .map(|n| table.index_of(n))
                        .collect::<std::result::Result<_, _>>()?,
                )
            } else if self.plan.predicate.is_none()
                && self.plan.output_names.is_empty()
                && self.plan.fragment.is_none()
            {
                Some(vec![])
            } else {
                None
            };
        let this = ScanIdentity {
            id: self.id,
            table: self.entry.name.clone(),
            stages: self.describe_stages(),
            expected: self.expected(),
        };
        // The job is built when the stream is first polled: a probe-side scan waits there for
        // the filter its join's build side is making.
        let job_for = {
            let plan = self.plan.clone();
            let scan = self.with_plan(plan);
            move |b: Option<&BuiltBloom>, extras: &[(Vec<String>, Arc<BuiltBloom>)]| {
                scan.job(b, extras, reads.clone())
            }
        };
        let stream = async_stream(
            disk,
            cluster,
            metrics,
            settings,
            (bloom_spec, extra_specs),
            job_for,
            schema.clone(),
            host_projection,
            this,
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

struct ScanIdentity {
    id: usize,
    table: String,
    stages: Vec<String>,
    /// Rows and bytes the whole scan is expected to ship ([`DiskScanExec::expected`]).
    expected: Option<(u64, u64)>,
}

/// What a finished (or abandoned) disk job reports into the query's metrics.
struct Reporter {
    cluster: Arc<Cluster>,
    metrics: Arc<QueryMetrics>,
    ident: ScanIdentity,
    disk: u32,
    job_id: String,
    spec_bytes: usize,
}

impl Reporter {
    async fn report(self, received: Received) {
        let stats = self.cluster.job_stats(self.disk, &self.job_id).await.ok();
        let control_bytes =
            super::metrics::control_bytes(self.spec_bytes, &self.job_id, stats.as_ref());
        self.metrics.record(ScanReport {
            control_bytes,
            scan_id: self.ident.id,
            table: self.ident.table,
            stages: self.ident.stages,
            disk: self.disk,
            stats,
            rows_received: received.rows,
            bytes_received: received.bytes,
            wall_ns: received.started.elapsed().as_nanos() as u64,
            started_ns: self.metrics.since_origin_ns(received.started),
            bloom_keys: received.bloom.as_ref().map(|b| b.keys),
            bloom_bytes: received
                .bloom
                .as_ref()
                .map(|b| b.filter.size_bytes() as u64),
            bloom_true_matches: received.true_matches,
            expected: self.ident.expected,
        });
    }
}

struct Received {
    started: Instant,
    rows: u64,
    bytes: u64,
    bloom: Option<Arc<BuiltBloom>>,
    true_matches: Option<u64>,
}

/// One disk job's result stream, as the scan partition sees it.
struct JobStream {
    inner: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    reporter: Option<Reporter>,
    started: Instant,
    bloom: Option<Arc<BuiltBloom>>,
    key_idx: Vec<usize>,
    true_matches: u64,
    rows: u64,
    bytes: u64,
    analyze: bool,
}

impl JobStream {
    /// The next batch from the disk, through the host link's throttle and conformed to the
    /// scan's schema, and the stream to go on with (None once it ended or failed; at its
    /// end, what it received is reported).
    async fn next_batch(
        mut self,
        link: Option<Arc<crate::client::throttle::TokenBucket>>,
        schema: &SchemaRef,
        host_projection: Option<Vec<usize>>,
    ) -> Option<(datafusion::error::Result<RecordBatch>, Option<JobStream>)> {
        match self.inner.next().await {
            Some(Ok(batch)) => {
                let bytes = adisk_core::stats::batch_bytes(&batch);
                if let Some(l) = &link {
                    l.acquire(bytes).await;
                }
                self.rows += batch.num_rows() as u64;
                self.bytes += bytes;
                self.count_true_matches(&batch);
                let batch = conform(batch, schema, host_projection.as_deref());
                Some((batch, Some(self)))
            }
            Some(Err(e)) => Some((Err(to_df(e)), None)),
            None => {
                let received = self.received();
                if let Some(r) = self.reporter.take() {
                    r.report(received).await;
                }
                None
            }
        }
    }

    /// Under EXPLAIN ANALYZE, counts the rows of `batch` whose key the Bloom filter's build
    /// side really holds (its false-positive rate is measured from them).
    fn count_true_matches(&mut self, batch: &RecordBatch) {
        if self.analyze
            && let Some(b) = &self.bloom
            && let Some(exact) = &b.exact
            && !self.key_idx.is_empty()
        {
            let cols: Option<Vec<_>> = self
                .key_idx
                .iter()
                .map(|i| batch.columns().get(*i).cloned())
                .collect();
            if let Some(cols) = cols
                && let Ok(h) = hash_columns(&cols, batch.num_rows())
            {
                self.true_matches += h.iter().filter(|x| exact.contains(x)).count() as u64;
            }
        }
    }

    fn received(&self) -> Received {
        Received {
            started: self.started,
            rows: self.rows,
            bytes: self.bytes,
            bloom: self.bloom.clone(),
            true_matches: (self.bloom.is_some() && self.analyze && !self.key_idx.is_empty())
                .then_some(self.true_matches),
        }
    }
}

impl Drop for JobStream {
    fn drop(&mut self) {
        // Dropped before its end (a LIMIT above, an error elsewhere): report what the disk did
        // anyway; the query waits for outstanding reports before it returns.
        if let Some(r) = self.reporter.take()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let received = self.received();
            handle.spawn(r.report(received));
        }
    }
}

/// Waits for a join's build side to publish its filter (None: it went away, or timed out).
async fn wait_for_bloom(spec: &BloomProbeSpec) -> Option<Arc<BuiltBloom>> {
    let mut rx = spec.slot.clone();
    let waited = tokio::time::timeout(
        BLOOM_WAIT,
        rx.wait_for(|s| matches!(s, BloomState::Ready(_))),
    )
    .await;
    match waited {
        Ok(Ok(state)) => match &*state {
            BloomState::Ready(Some(b)) => Some(b.clone()),
            _ => None,
        },
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
fn async_stream(
    disk: u32,
    cluster: Arc<Cluster>,
    metrics: Arc<QueryMetrics>,
    settings: Arc<SqlSettings>,
    (bloom_spec, extra_specs): (Option<BloomProbeSpec>, Vec<BloomProbeSpec>),
    job_for: impl FnOnce(Option<&BuiltBloom>, &[(Vec<String>, Arc<BuiltBloom>)]) -> Result<JobSpec>
    + Send
    + 'static,
    schema: SchemaRef,
    host_projection: Option<Vec<usize>>,
    ident: ScanIdentity,
) -> impl futures::Stream<Item = datafusion::error::Result<RecordBatch>> + Send + 'static {
    let link = settings.host_link.clone();
    let analyze = settings.analyze;
    let init = async move {
        let mut bloom = None;
        if let Some(spec) = &bloom_spec {
            bloom = wait_for_bloom(spec).await;
        }
        let mut extras = Vec::new();
        for spec in &extra_specs {
            if let Some(b) = wait_for_bloom(spec).await {
                extras.push((spec.keys.clone(), b));
            }
        }
        let job = job_for(bloom.as_deref(), &extras).map_err(to_df)?;
        let key_idx = measured_keys(
            bloom_spec.as_ref(),
            bloom.is_some(),
            extras.is_empty(),
            &job,
        );
        // The job's time counts from its submission (the disk admits and builds it then).
        let submitted = Instant::now();
        let inner = cluster.start(disk, &job).await.map_err(to_df)?;
        metrics.started();
        let reporter = Reporter {
            cluster,
            metrics,
            ident,
            disk,
            spec_bytes: job.to_bytes().len(),
            job_id: job.job_id,
        };
        Ok::<_, DataFusionError>(JobStream {
            inner,
            reporter: Some(reporter),
            started: submitted,
            bloom,
            key_idx,
            true_matches: 0,
            rows: 0,
            bytes: 0,
            analyze,
        })
    };
    futures::stream::once(init).flat_map(move |st| {
        let link = link.clone();
        let schema = schema.clone();
        let host_projection = host_projection.clone();
        match st {
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            Ok(job) => futures::stream::unfold(Some(job), move |state| {
                let link = link.clone();
                let schema = schema.clone();
                let host_projection = host_projection.clone();
                async move { state?.next_batch(link, &schema, host_projection).await }
            })
            .boxed(),
        }
    })
}

/// The columns of `job`'s output holding its Bloom filter's keys, where its false-positive
/// rate is measured: for a scan with a single filter (`spec`, `built`, no `extras`) and no
/// fragment; else none.
fn measured_keys(
    spec: Option<&BloomProbeSpec>,
    built: bool,
    no_extras: bool,
    job: &JobSpec,
) -> Vec<usize> {
    let fragment = job
        .disklets()
        .any(|s| matches!(s, DiskletSpec::Fragment { .. }));
    match spec {
        Some(spec) if built && no_extras && !fragment => {
            spec.keys.iter().map(|k| schema_index(job, k)).collect()
        }
        _ => vec![],
    }
}

/// Index of column `name` in the output of `job`'s last stage before any fragment (the
/// Bloom stage's output has the select stage's columns).
fn schema_index(job: &JobSpec, name: &str) -> usize {
    for st in job.disklets() {
        if let DiskletSpec::Select { projection, .. } = st {
            return projection.iter().position(|p| p.name == name).unwrap_or(0);
        }
    }
    match job.inputs.first() {
        Some(Source::Table { columns, .. }) => columns.iter().position(|c| c == name).unwrap_or(0),
        _ => 0,
    }
}

/// An empty schema helper for fragments.
pub fn schema_of(names: &[String], table: &Schema) -> Result<SchemaRef> {
    let idx = names
        .iter()
        .map(|n| {
            table
                .index_of(n)
                .map_err(|e| HostError::Invalid(e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(
        table
            .project(&idx)
            .map_err(|e| HostError::Invalid(e.to_string()))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    /// TPC-H Q16's part filter: 8 sizes, every brand but one, any type the LIKE leaves.
    #[test]
    fn a_predicate_thins_the_distinct_values_of_the_columns_it_pins() {
        let sizes = [49, 14, 23, 45, 19, 3, 36, 9].map(lit).to_vec();
        let p = col("p_brand")
            .not_eq(lit("Brand#45"))
            .and(col("p_type").not_like(lit("MEDIUM POLISHED%")))
            .and(col("p_size").in_list(sizes, false));
        assert_eq!(filtered_ndv(&p, "p_size", 50), 8);
        assert_eq!(filtered_ndv(&p, "p_brand", 25), 24);
        assert_eq!(filtered_ndv(&p, "p_type", 150), 150);
        assert_eq!(filtered_ndv(&p, "p_partkey", 200_000), 200_000);
        // Equality pins one value; NOT IN takes its values out; never below one.
        assert_eq!(filtered_ndv(&lit(3).eq(col("a")), "a", 40), 1);
        let out = col("a").in_list(vec![lit(1), lit(2)], true);
        assert_eq!(filtered_ndv(&out, "a", 40), 38);
        assert_eq!(filtered_ndv(&out, "a", 2), 1);
        // A disjunction pins nothing.
        let or = col("a").eq(lit(1)).or(col("b").eq(lit(2)));
        assert_eq!(filtered_ndv(&or, "a", 40), 40);
    }

    #[test]
    fn partial_aggregations_ship_the_groups_their_rows_hit() {
        // TPC-H Q1: 6 groups, 6 million rows on 4 disks: every disk sees every group.
        assert!((partial_groups(6.0, 6e6, 4) - 24.0).abs() < 1e-9);
        // No grouping: a row per disk.
        assert!((partial_groups(1.0, 6e6, 4) - 4.0).abs() < 1e-9);
        // Far more groups than rows: about one group per row, never more than the rows.
        let sparse = partial_groups(1e9, 1000.0, 4);
        assert!(sparse <= 1000.0 && sparse > 999.0, "{sparse}");
        // As many groups as rows per disk: 1 - 1/e of them hit on each disk.
        let even = partial_groups(1000.0, 4000.0, 4);
        let want = 4000.0 * (1.0 - (-1.0f64).exp());
        assert!((even - want).abs() < 1e-6, "{even} {want}");
        // Fewer rows than disks: never more rows than came in, at least one.
        assert!((partial_groups(10.0, 2.0, 4) - 2.0).abs() < 1e-9);
        assert!((partial_groups(10.0, 0.0, 4)).abs() < 1e-9);
    }
}

/// The disk parts of `plan` when its result is made entirely at the disks: one job per disk
/// whose output is that disk's rows of the result, which the host would only pass on (a
/// filtered projection of one table, no Bloom filter to wait for). None when the host adds
/// anything: a join, an aggregation, an order, a limit, a projection of its own.
pub(crate) fn endpoint_jobs(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<(u32, JobSpec)>> {
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::coop::CooperativeExec;
    let mut node = plan;
    loop {
        let passes = node
            .downcast_ref::<CoalescePartitionsExec>()
            .is_some_and(|c| c.fetch().is_none())
            || node.downcast_ref::<CooperativeExec>().is_some();
        if !passes {
            break;
        }
        let [child] = node.children()[..] else {
            return None;
        };
        node = child;
    }
    let scan = node.downcast_ref::<DiskScanExec>()?;
    let p = &scan.plan;
    let host_shapes = scan.settings.offload == Offload::None
        || (p.predicate.is_none() && p.output_names.is_empty() && p.fragment.is_none());
    if host_shapes || p.bloom.is_some() || !p.extra_blooms.is_empty() {
        return None;
    }
    let types =
        |s: SchemaRef| -> Vec<_> { s.fields().iter().map(|f| f.data_type().clone()).collect() };
    if types(scan.schema()) != types(plan.schema()) {
        return None;
    }
    scan.disks
        .iter()
        .zip(&scan.reads)
        .map(|(d, reads)| Some((*d, scan.job(None, &[], reads.clone()).ok()?)))
        .collect()
}
