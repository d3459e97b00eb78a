//! Planning and running built-in disklet jobs (`adisk run DISKLET …`).
//!
//! Parameters are SQL fragments. The host turns them into a query over the table's schema
//! (`SELECT {project} FROM t WHERE {predicate} GROUP BY {group_by}`), lets DataFusion parse,
//! resolve and type-check it, and takes the resolved expressions out of the analyzed plan; they
//! ship to the disks as `datafusion-proto` bytes. Only the columns the expressions reference are
//! read at the disks (column elimination), and the predicate doubles as the zone-map filter.
use crate::cluster::{Cluster, TableEntry};
use crate::{HostError, Result};
use adisk_core::bloom::BloomFilter;
use adisk_core::hash::hash_columns;
use adisk_core::protocol::{AggregateMode, DiskletSpec, ExprBytes, JobSpec, NamedExpr, Route, Sink, SortKey, Source};
use adisk_core::stats::{DiskJobStats, JobStats};
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer};
use adisk_diskos::disklets::aggregate::Aggregate;
use adisk_diskos::expr::ExprPlanner;
use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{SortColumn, SortOptions, concat_batches, lexsort_to_indices, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::catalog::memory::MemTable;
use datafusion::common::Column;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion_proto::bytes::Serializeable;
use futures::StreamExt;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The built-in disklets `adisk run` accepts.
pub const DISKLETS: [&str; 7] = ["scan", "select", "aggregate", "groupby", "bloom_probe", "partition", "sort_runs"];

/// A request to run a built-in disklet over a table.
#[derive(Clone, Debug, Default)]
pub struct JobRequest {
    /// Disklet name (see [`DISKLETS`]).
    pub disklet: String,
    /// Table.
    pub table: String,
    /// Columns to read (empty: those the expressions reference).
    pub columns: Vec<String>,
    /// Parameters (`predicate`, `project`, `group_by`, `aggs`, `key`, `order_by`, `limit`,
    /// `exchange`, `build_table`, `build_key`, `build_predicate`, `bloom_kib`).
    pub params: BTreeMap<String, String>,
    /// Scratch per stage in KiB (0: the disk's default).
    pub scratch_kib: u64,
}

/// What a job produced.
#[derive(Debug)]
pub struct JobOutput {
    /// Result schema.
    pub schema: SchemaRef,
    /// Result rows.
    pub batches: Vec<RecordBatch>,
    /// Statistics.
    pub stats: JobStats,
}

impl JobOutput {
    /// Rows in the result.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

static NEXT_JOB: AtomicU64 = AtomicU64::new(0);

pub(crate) fn new_id(kind: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{kind}-{}-{}-{nanos:x}", std::process::id(), NEXT_JOB.fetch_add(1, Ordering::Relaxed))
}

pub(crate) fn program_id() -> String {
    format!("host-{}", std::process::id())
}

fn unqualify(e: Expr) -> Expr {
    e.transform(|e| {
        Ok(match e {
            Expr::Column(c) => Transformed::yes(Expr::Column(Column::new_unqualified(c.name))),
            other => Transformed::no(other),
        })
    })
    .map(|t| t.data)
    .expect("rewriting columns cannot fail")
}

fn name_of(e: &Expr) -> String {
    match e {
        Expr::Alias(a) => a.name.clone(),
        other => unqualify(other.clone()).schema_name().to_string(),
    }
}

fn strip_alias(e: &Expr) -> Expr {
    match e {
        Expr::Alias(a) => (*a.expr).clone(),
        other => other.clone(),
    }
}

pub(crate) fn encode_expr(e: &Expr) -> Result<ExprBytes> {
    encode(e)
}

fn encode(e: &Expr) -> Result<ExprBytes> {
    let bytes = unqualify(strip_alias(e)).to_bytes().map_err(|source| HostError::Plan { context: format!("encoding `{e}`"), source })?;
    Ok(ExprBytes(bytes.to_vec()))
}

fn named(e: &Expr) -> Result<NamedExpr> {
    Ok(NamedExpr { name: name_of(e), expr: encode(e)? })
}

fn column_expr(name: &str) -> Expr {
    Expr::Column(Column::new_unqualified(name))
}

/// Parses and analyzes `sql` over an empty table with `table`'s schema.
async fn analyze(table: &TableEntry, sql: &str) -> Result<LogicalPlan> {
    let ctx = SessionContext::new();
    let mem = MemTable::try_new(table.schema.clone(), vec![vec![]]).map_err(|source| HostError::Plan { context: "catalog".into(), source })?;
    ctx.register_table(table.name.as_str(), Arc::new(mem)).map_err(|source| HostError::Plan { context: "catalog".into(), source })?;
    let state = ctx.state();
    let plan = state.create_logical_plan(sql).await.map_err(|source| HostError::Plan { context: format!("planning `{sql}`"), source })?;
    state
        .analyzer()
        .execute_and_check(plan, state.config_options(), |_, _| {})
        .map_err(|source| HostError::Plan { context: format!("checking `{sql}`"), source })
}

/// The pieces of `SELECT … FROM t WHERE … GROUP BY … ORDER BY …` after analysis.
#[derive(Default)]
struct Pieces {
    predicate: Option<Expr>,
    projection: Vec<Expr>,
    group_by: Vec<Expr>,
    aggregates: Vec<Expr>,
    order_by: Vec<(Expr, SortOptions)>,
}

fn take_pieces(plan: &LogicalPlan) -> Result<Pieces> {
    let mut p = Pieces::default();
    let mut node = plan;
    loop {
        match node {
            LogicalPlan::Projection(proj) => {
                if p.projection.is_empty() {
                    p.projection = proj.expr.clone();
                }
                node = proj.input.as_ref();
            }
            LogicalPlan::Sort(sort) => {
                p.order_by = sort.expr.iter().map(|s| (s.expr.clone(), SortOptions { descending: !s.asc, nulls_first: s.nulls_first })).collect();
                node = sort.input.as_ref();
            }
            LogicalPlan::Aggregate(agg) => {
                p.group_by = agg.group_expr.clone();
                p.aggregates = agg.aggr_expr.clone();
                node = agg.input.as_ref();
            }
            LogicalPlan::Filter(f) => {
                p.predicate = Some(f.predicate.clone());
                node = f.input.as_ref();
            }
            LogicalPlan::TableScan(_) => return Ok(p),
            LogicalPlan::SubqueryAlias(s) => node = s.input.as_ref(),
            other => return Err(HostError::Invalid(format!("parameters produce a `{}` node, which a single disklet job cannot run", other.display()))),
        }
    }
}

fn referenced_columns(exprs: &[&Expr], schema: &Schema) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for e in exprs {
        for c in e.column_refs() {
            if !names.contains(&c.name) {
                names.push(c.name.clone());
            }
        }
    }
    // Keep table order so projections are stable.
    let mut ordered: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).filter(|n| names.contains(n)).collect();
    if ordered.is_empty() {
        // count(*) and friends: read the narrowest column.
        let narrowest = schema.fields().iter().min_by_key(|f| f.data_type().primitive_width().unwrap_or(16)).map(|f| f.name().clone());
        ordered.extend(narrowest);
    }
    ordered
}

fn param<'a>(req: &'a JobRequest, key: &str) -> Option<&'a str> {
    req.params.get(key).map(|s| s.trim()).filter(|s| !s.is_empty())
}

fn require<'a>(req: &'a JobRequest, key: &str) -> Result<&'a str> {
    param(req, key).ok_or_else(|| HostError::Invalid(format!("disklet `{}` needs --param {key}=…", req.disklet)))
}

fn check_params(req: &JobRequest, allowed: &[&str]) -> Result<()> {
    for k in req.params.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(HostError::Invalid(format!("disklet `{}` has no parameter `{k}` (allowed: {})", req.disklet, allowed.join(", "))));
        }
    }
    Ok(())
}

fn source_for(req: &JobRequest, table: &TableEntry, referenced: Vec<String>, prune: Option<&Expr>) -> Result<(Source, SchemaRef)> {
    let columns = if req.columns.is_empty() { referenced } else { req.columns.clone() };
    let mut fields = Vec::with_capacity(columns.len());
    for c in &columns {
        let f = table.schema.field_with_name(c).map_err(|_| {
            HostError::Invalid(format!(
                "table `{}` has no column `{c}` (columns: {})",
                table.name,
                table.schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
            ))
        })?;
        fields.push(f.clone());
    }
    let prune = prune.map(encode).transpose()?;
    Ok((Source::Table { table: table.name.clone(), columns, prune }, Arc::new(Schema::new(fields))))
}

/// `SELECT {list} FROM t [WHERE predicate] [ORDER BY …]`, planned for one `select` stage.
struct SelectPlan {
    pieces: Pieces,
    source: Source,
    /// Schema of the source stream (the columns read).
    input: SchemaRef,
    projection: Vec<NamedExpr>,
    predicate: Option<ExprBytes>,
}

async fn plan_select(table: &TableEntry, req: &JobRequest, list: &str, order_by: Option<&str>) -> Result<SelectPlan> {
    let mut sql = format!("SELECT {list} FROM {}", table.name);
    if let Some(p) = param(req, "predicate") {
        sql.push_str(&format!(" WHERE {p}"));
    }
    if let Some(o) = order_by {
        sql.push_str(&format!(" ORDER BY {o}"));
    }
    let pieces = take_pieces(&analyze(table, &sql).await?)?;
    let mut refs: Vec<&Expr> = pieces.projection.iter().chain(pieces.predicate.iter()).collect();
    refs.extend(pieces.order_by.iter().map(|(e, _)| e));
    let (source, input) = source_for(req, table, referenced_columns(&refs, &table.schema), pieces.predicate.as_ref())?;
    let projection = pieces.projection.iter().map(named).collect::<Result<Vec<_>>>()?;
    let predicate = pieces.predicate.as_ref().map(encode).transpose()?;
    Ok(SelectPlan { pieces, source, input, projection, predicate })
}

/// Runs a built-in disklet job on every disk holding the table and combines the results.
pub async fn run(cluster: &Cluster, req: &JobRequest) -> Result<JobOutput> {
    let started = Instant::now();
    let relayed = cluster.relay_stats().bytes;
    let catalog = cluster.catalog().await?;
    let table = catalog.table(&req.table)?.clone();
    let mut output = match req.disklet.as_str() {
        "scan" => run_select(cluster, &table, req, true).await?,
        "select" => run_select(cluster, &table, req, false).await?,
        "aggregate" | "groupby" => run_aggregate(cluster, &table, req).await?,
        "bloom_probe" => run_bloom(cluster, &catalog, &table, req).await?,
        "partition" => run_partition(cluster, &table, req).await?,
        "sort_runs" => run_sort(cluster, &table, req).await?,
        other => return Err(HostError::Invalid(format!("unknown disklet `{other}` (built-in: {})", DISKLETS.join(", ")))),
    };
    output.stats.wall_ns = started.elapsed().as_nanos() as u64;
    output.stats.result_rows = output.rows() as u64;
    if cluster.exchange_mode() == adisk_core::config::ExchangeMode::ViaHost {
        output.stats.notes.insert("bytes_via_host".into(), (cluster.relay_stats().bytes - relayed).to_string());
    }
    Ok(output)
}

fn spec(source: Source, stages: Vec<DiskletSpec>, sink: Sink, scratch_kib: u64) -> JobSpec {
    JobSpec { scratch_kib, ..JobSpec::chain(new_id("job"), program_id(), source, stages, sink) }
}

/// Starts every spec, feeds each result batch (with its disk) to `on_batch` as it arrives,
/// and returns every disk's statistics. The first error cancels the rest.
pub async fn run_phase(cluster: &Cluster, specs: Vec<(u32, JobSpec)>, mut on_batch: impl FnMut(u32, RecordBatch) -> Result<()>) -> Result<Vec<DiskJobStats>> {
    let starts = futures::future::try_join_all(specs.iter().map(|(d, s)| async move { cluster.start(*d, s).await.map(|st| st.map(move |r| (*d, r))) })).await?;
    let mut merged = futures::stream::select_all(starts);
    while let Some((d, item)) = merged.next().await {
        on_batch(d, item?)?;
    }
    drop(merged);
    futures::future::try_join_all(specs.iter().map(|(d, s)| cluster.job_stats(*d, &s.job_id))).await
}

async fn run_select(cluster: &Cluster, table: &TableEntry, req: &JobRequest, plain_scan: bool) -> Result<JobOutput> {
    if plain_scan {
        check_params(req, &["limit"])?;
    } else {
        check_params(req, &["predicate", "project", "limit"])?;
    }
    let limit = param(req, "limit").map(|l| l.parse::<u64>().map_err(|_| HostError::Invalid(format!("limit `{l}` is not a row count")))).transpose()?;
    let (stages, source) = if plain_scan {
        // Conventional mode: the disk serves whole rows of the requested columns.
        let cols: Vec<String> = if req.columns.is_empty() { table.schema.fields().iter().map(|f| f.name().clone()).collect() } else { req.columns.clone() };
        let (source, _) = source_for(req, table, cols, None)?;
        let stages = match limit {
            Some(_) => vec![DiskletSpec::Select { predicate: None, projection: vec![], limit }],
            None => vec![],
        };
        (stages, source)
    } else {
        let plan = plan_select(table, req, param(req, "project").unwrap_or("*"), None).await?;
        if !plan.pieces.aggregates.is_empty() {
            return Err(HostError::Invalid("`select` cannot aggregate; use `aggregate` or `groupby`".into()));
        }
        let (source, predicate, projection) = (plan.source, plan.predicate, plan.projection);
        (vec![DiskletSpec::Select { predicate, projection, limit }], source)
    };
    let specs: Vec<(u32, JobSpec)> = table.disks().into_iter().map(|d| (d, spec(source.clone(), stages.clone(), Sink::Host, req.scratch_kib))).collect();
    let mut batches = Vec::new();
    let mut rows = 0u64;
    let disks = run_phase(cluster, specs, |_, b| {
        if limit.is_none_or(|l| rows < l) {
            rows += b.num_rows() as u64;
            batches.push(b);
        }
        Ok(())
    })
    .await?;
    let combine = Instant::now();
    if let Some(l) = limit {
        truncate(&mut batches, l as usize);
    }
    let schema = batches.first().map(|b| b.schema()).unwrap_or_else(crate::cluster::empty_schema);
    let stats = JobStats { description: format!("{} on {}", req.disklet, table.name), disks, host_combine_ns: combine.elapsed().as_nanos() as u64, ..Default::default() };
    Ok(JobOutput { schema, batches, stats })
}

fn truncate(batches: &mut Vec<RecordBatch>, limit: usize) {
    let mut left = limit;
    let mut out = Vec::with_capacity(batches.len());
    for b in batches.drain(..) {
        if left == 0 {
            break;
        }
        let n = b.num_rows().min(left);
        left -= n;
        out.push(b.slice(0, n));
    }
    *batches = out;
}

struct AggregatePlan {
    source: Source,
    raw_input: SchemaRef,
    prefix: Vec<DiskletSpec>,
    group_by: Vec<NamedExpr>,
    aggregates: Vec<NamedExpr>,
}

async fn plan_aggregate(table: &TableEntry, req: &JobRequest) -> Result<AggregatePlan> {
    let aggs = require(req, "aggs")?;
    let group_by = param(req, "group_by");
    if req.disklet == "groupby" && group_by.is_none() {
        return Err(HostError::Invalid("disklet `groupby` needs --param group_by=…".into()));
    }
    let mut sql = match group_by {
        Some(g) => format!("SELECT {g}, {aggs} FROM {}", table.name),
        None => format!("SELECT {aggs} FROM {}", table.name),
    };
    if let Some(p) = param(req, "predicate") {
        sql.push_str(&format!(" WHERE {p}"));
    }
    if let Some(g) = group_by {
        sql.push_str(&format!(" GROUP BY {g}"));
    }
    let analyzed = analyze(table, &sql).await?;
    let pieces = take_pieces(&analyzed)?;
    if pieces.aggregates.is_empty() {
        return Err(HostError::Invalid(format!("`{aggs}` contains no aggregate function")));
    }
    let mut refs: Vec<&Expr> = pieces.group_by.iter().chain(pieces.aggregates.iter()).collect();
    refs.extend(pieces.predicate.iter());
    let (source, mut raw_input) = source_for(req, table, referenced_columns(&refs, &table.schema), pieces.predicate.as_ref())?;
    // Common subexpressions (Q1's `l_extendedprice * (1 - l_discount)`) are computed once, by
    // the select stage's projection, as DataFusion's CommonSubexprEliminate rewrites them.
    let cse = common_subexpressions(&analyzed, pieces.group_by.len(), pieces.aggregates.len())?;
    let projection = match &cse {
        Some((projection, _, _)) => projection.iter().map(named).collect::<Result<Vec<_>>>()?,
        None => vec![],
    };
    let prefix = if pieces.predicate.is_some() || !projection.is_empty() {
        let select = DiskletSpec::Select { predicate: pieces.predicate.as_ref().map(encode).transpose()?, projection, limit: None };
        raw_input = adisk_diskos::disklets::build(&select, std::slice::from_ref(&raw_input), 0, &ExprPlanner::default())?.output_schema();
        vec![select]
    } else {
        vec![]
    };
    let (group_exprs, agg_exprs) = match cse {
        Some((_, g, a)) => (g, a),
        None => (pieces.group_by.clone(), pieces.aggregates.clone()),
    };
    // Output names: the projection's aliases where given.
    let n_groups = pieces.group_by.len();
    let defaults: Vec<String> = pieces.group_by.iter().chain(pieces.aggregates.iter()).map(name_of).collect();
    let names: Vec<String> = if pieces.projection.len() == defaults.len() {
        pieces.projection.iter().zip(&defaults).map(|(p, d)| if matches!(p, Expr::Alias(_)) { name_of(p) } else { d.clone() }).collect()
    } else {
        defaults
    };
    let group_by = group_exprs.iter().zip(&names).map(|(e, n)| Ok(NamedExpr { name: n.clone(), expr: encode(e)? })).collect::<Result<Vec<_>>>()?;
    let aggregates = agg_exprs.iter().zip(&names[n_groups..]).map(|(e, n)| Ok(NamedExpr { name: n.clone(), expr: encode(e)? })).collect::<Result<Vec<_>>>()?;
    Ok(AggregatePlan { source, raw_input, prefix, group_by, aggregates })
}

/// Runs DataFusion's common-subexpression elimination on an analyzed aggregate plan. Returns
/// (projection below the aggregate, group exprs, aggregate exprs) when it found something.
fn common_subexpressions(analyzed: &LogicalPlan, groups: usize, aggregates: usize) -> Result<Option<(Vec<Expr>, Vec<Expr>, Vec<Expr>)>> {
    use datafusion::optimizer::common_subexpr_eliminate::CommonSubexprEliminate;
    use datafusion::optimizer::simplify_expressions::SimplifyExpressions;
    use datafusion::optimizer::{Optimizer, OptimizerContext};
    // Constant folding first (the analyzer leaves `CAST(1 AS DECIMAL)`), then CSE.
    let optimizer = Optimizer::with_rules(vec![Arc::new(SimplifyExpressions::new()), Arc::new(CommonSubexprEliminate::new())]);
    let optimized = optimizer
        .optimize(analyzed.clone(), &OptimizerContext::new(), |_, _| {})
        .map_err(|source| HostError::Plan { context: "eliminating common subexpressions".into(), source })?;
    let mut node = &optimized;
    while let LogicalPlan::Projection(p) = node {
        node = p.input.as_ref();
        if matches!(node, LogicalPlan::Aggregate(_)) {
            break;
        }
    }
    let LogicalPlan::Aggregate(agg) = node else { return Ok(None) };
    let LogicalPlan::Projection(below) = agg.input.as_ref() else { return Ok(None) };
    // Only the simple shape: projection directly over the filter/scan of the original plan.
    if !matches!(below.input.as_ref(), LogicalPlan::Filter(_) | LogicalPlan::TableScan(_)) {
        return Ok(None);
    }
    if agg.group_expr.len() != groups || agg.aggr_expr.len() != aggregates {
        return Ok(None);
    }
    // CSE passes every input column through; keep only what the aggregate reads.
    let used: std::collections::HashSet<String> = agg.group_expr.iter().chain(agg.aggr_expr.iter()).flat_map(|e| e.column_refs().into_iter().map(|c| c.name.clone())).collect();
    let projection: Vec<Expr> = below.expr.iter().filter(|e| used.contains(&name_of(e))).cloned().collect();
    Ok(Some((projection, agg.group_expr.clone(), agg.aggr_expr.clone())))
}

async fn run_aggregate(cluster: &Cluster, table: &TableEntry, req: &JobRequest) -> Result<JobOutput> {
    check_params(req, &["predicate", "group_by", "aggs", "exchange"])?;
    let exchange = match param(req, "exchange") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(HostError::Invalid(format!("exchange must be true or false, not `{other}`"))),
    };
    let plan = plan_aggregate(table, req).await?;
    let planner = ExprPlanner::default();
    // The partial schema, as the disks will produce it.
    let partial = Aggregate::new(&plan.group_by, &plan.aggregates, AggregateMode::Partial, None, &plan.raw_input, u64::MAX / 4, &planner)?;
    let partial_schema = partial.output_schema();
    let mut stages = plan.prefix.clone();
    stages.push(DiskletSpec::Aggregate { group_by: plan.group_by.clone(), aggregates: plan.aggregates.clone(), mode: AggregateMode::Partial, raw_input: None });
    let final_spec = DiskletSpec::Aggregate {
        group_by: plan.group_by.iter().map(|g| NamedExpr { name: g.name.clone(), expr: g.expr.clone() }).collect(),
        aggregates: plan.aggregates.clone(),
        mode: AggregateMode::Final,
        raw_input: Some(plan.raw_input.as_ref().clone()),
    };
    let holders = table.disks();
    let description = format!("{} on {}{}", req.disklet, table.name, if exchange { " (disk-to-disk exchange)" } else { "" });
    if exchange {
        if plan.group_by.is_empty() {
            return Err(HostError::Invalid("exchange=true needs group_by".into()));
        }
        let n = cluster.disk_count();
        let exchange_id = new_id("exchange");
        let keys = plan.group_by.iter().map(|g| encode(&column_expr(&g.name))).collect::<Result<Vec<_>>>()?;
        stages.push(DiskletSpec::Partition { keys, partitions: n });
        let targets: Vec<String> = (0..n).map(|d| cluster.address(d).to_string()).collect();
        let mut specs: Vec<(u32, JobSpec)> = holders
            .iter()
            .enumerate()
            .map(|(i, d)| (*d, spec(plan.source.clone(), stages.clone(), Sink::Exchange { exchange_id: exchange_id.clone(), targets: targets.clone(), sender: i as u32, route: Route::Broadcast, relay: None }, req.scratch_kib)))
            .collect();
        let receive = Source::Pipe { exchange_id: exchange_id.clone(), senders: holders.len() as u32, schema: partial_schema.as_ref().clone() };
        specs.extend((0..n).map(|d| (d, spec(receive.clone(), vec![final_spec.clone()], Sink::Host, req.scratch_kib))));
        let mut batches = Vec::new();
        let disks = run_phase(cluster, specs, |_, b| {
            batches.push(b);
            Ok(())
        })
        .await?;
        let schema = batches.first().map(|b| b.schema()).unwrap_or_else(crate::cluster::empty_schema);
        let stats = JobStats { description, disks, ..Default::default() };
        return Ok(JobOutput { schema, batches, stats });
    }
    // Partial at the disks, final at the host, combined as partial batches arrive.
    let mut host_final = adisk_diskos::disklets::build(&final_spec, std::slice::from_ref(&partial_schema), u64::MAX / 4, &planner)?;
    let mut emitter = Emitter::new(1);
    let mut combine_ns = 0u64;
    let specs: Vec<(u32, JobSpec)> = holders.iter().map(|d| (*d, spec(plan.source.clone(), stages.clone(), Sink::Host, req.scratch_kib))).collect();
    let disks = run_phase(cluster, specs, |_, b| {
        let t = Instant::now();
        host_final.process(&InputBuffer { batch: &b, position: 0, input: 0 }, &mut emitter)?;
        combine_ns += t.elapsed().as_nanos() as u64;
        Ok(())
    })
    .await?;
    let t = Instant::now();
    host_final.finish(&mut emitter)?;
    combine_ns += t.elapsed().as_nanos() as u64;
    let batches: Vec<RecordBatch> = emitter.take_outputs().into_iter().flatten().collect();
    let mut stats = JobStats { description, disks, host_combine_ns: combine_ns, ..Default::default() };
    let flushes: u64 = stats.disks.iter().flat_map(|d| d.stages.iter()).filter(|s| s.disklet == "aggregate").map(|s| s.flushes).sum();
    stats.notes.insert("partial flushes at the disks".into(), flushes.to_string());
    Ok(JobOutput { schema: host_final.output_schema(), batches, stats })
}

async fn run_bloom(cluster: &Cluster, catalog: &crate::cluster::Catalog, table: &TableEntry, req: &JobRequest) -> Result<JobOutput> {
    check_params(req, &["key", "predicate", "project", "build_table", "build_key", "build_predicate", "bloom_kib"])?;
    let build_table = catalog.table(require(req, "build_table")?)?.clone();
    let build_req = JobRequest {
        disklet: "select".into(),
        table: build_table.name.clone(),
        columns: vec![],
        params: [("project".to_string(), require(req, "build_key")?.to_string())]
            .into_iter()
            .chain(param(req, "build_predicate").map(|p| ("predicate".to_string(), p.to_string())))
            .collect(),
        scratch_kib: req.scratch_kib,
    };
    let build = run_select(cluster, &build_table, &build_req, false).await?;
    if build.schema.fields().len() != 1 {
        return Err(HostError::Invalid("build_key must be one expression".into()));
    }
    let build_key_type = build.schema.field(0).data_type().clone();
    let bloom_kib: usize = param(req, "bloom_kib").map(|v| v.parse().map_err(|_| HostError::Invalid(format!("bloom_kib `{v}` is not a number")))).transpose()?.unwrap_or(1024);
    let build_rows = build.rows() as u64;
    let mut filter = BloomFilter::with_size(bloom_kib * 1024, build_rows);
    let converter = RowConverter::new(vec![SortField::new(build_key_type.clone())]).map_err(|e| HostError::Invalid(e.to_string()))?;
    let mut exact: HashSet<OwnedRow> = HashSet::with_capacity(build_rows as usize);
    for b in &build.batches {
        for h in hash_columns(&[b.column(0).clone()], b.num_rows()).map_err(|e| HostError::Invalid(e.to_string()))? {
            filter.insert(h);
        }
        let rows = converter.convert_columns(&[b.column(0).clone()]).map_err(|e| HostError::Invalid(e.to_string()))?;
        exact.extend(rows.iter().map(|r| r.owned()));
    }
    // Probe side: [select] → bloom_probe at the disks; exact semi-join at the host.
    let key = require(req, "key")?;
    let list = format!("{}, {key} AS __adisk_key", param(req, "project").unwrap_or("*"));
    let plan = plan_select(table, req, &list, None).await?;
    let source = plan.source.clone();
    let stages = vec![
        DiskletSpec::Select { predicate: plan.predicate, projection: plan.projection, limit: None },
        DiskletSpec::BloomProbe { keys: vec![encode(&column_expr("__adisk_key"))?], filter: filter.clone() },
    ];
    let specs: Vec<(u32, JobSpec)> = table.disks().into_iter().map(|d| (d, spec(source.clone(), stages.clone(), Sink::Host, req.scratch_kib))).collect();
    let mut batches = Vec::new();
    let mut combine_ns = 0u64;
    let mut passed_bloom = 0u64;
    let disks = run_phase(cluster, specs, |_, b| {
        let t = Instant::now();
        passed_bloom += b.num_rows() as u64;
        let key_col = b.column(b.num_columns() - 1);
        let key_col = arrow::compute::cast(key_col, &build_key_type).map_err(|e| HostError::Invalid(format!("key types differ: {e}")))?;
        let rows = converter.convert_columns(&[key_col]).map_err(|e| HostError::Invalid(e.to_string()))?;
        let keep: arrow::array::BooleanArray = rows.iter().map(|r| Some(exact.contains(&r.owned()))).collect();
        let kept = arrow::compute::filter_record_batch(&b, &keep).map_err(|e| HostError::Invalid(e.to_string()))?;
        let without_key = kept.project(&(0..kept.num_columns() - 1).collect::<Vec<_>>()).map_err(|e| HostError::Invalid(e.to_string()))?;
        batches.push(without_key);
        combine_ns += t.elapsed().as_nanos() as u64;
        Ok(())
    })
    .await?;
    let result_rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    let probed: u64 = disks.iter().flat_map(|d| d.stages.iter()).filter(|s| s.disklet == "bloom_probe").map(|s| s.rows_in).sum();
    let negatives = probed.saturating_sub(result_rows);
    let false_positives = passed_bloom.saturating_sub(result_rows);
    let schema = batches.first().map(|b| b.schema()).unwrap_or_else(crate::cluster::empty_schema);
    let mut stats = JobStats { description: format!("bloom_probe on {} with keys of {}", table.name, build_table.name), disks, host_combine_ns: combine_ns, ..Default::default() };
    stats.notes.insert("bloom filter".into(), format!("{} bytes (split-block, {} bits set per key), {} keys, expected fpr {:.4}", filter.size_bytes(), filter.hashes, filter.inserted, filter.expected_fpr()));
    stats.notes.insert("rows dropped at the disks".into(), (probed - passed_bloom.min(probed)).to_string());
    stats.notes.insert(
        "measured false-positive rate".into(),
        if negatives == 0 { "n/a".into() } else { format!("{:.4} ({false_positives} of {negatives} non-matching rows passed)", false_positives as f64 / negatives as f64) },
    );
    stats.notes.insert("build side".into(), format!("{} rows of {} ({} bytes shipped)", build_rows, build_table.name, build.stats.totals().bytes_shipped_host));
    Ok(JobOutput { schema, batches, stats })
}

async fn run_partition(cluster: &Cluster, table: &TableEntry, req: &JobRequest) -> Result<JobOutput> {
    check_params(req, &["key", "predicate"])?;
    let key = require(req, "key")?;
    let plan = plan_select(table, req, &format!("{key} AS __adisk_key"), None).await?;
    let source = plan.source.clone();
    let select = DiskletSpec::Select { predicate: plan.predicate.clone(), projection: plan.projection.clone(), limit: None };
    let n = cluster.disk_count();
    let exchange_id = new_id("exchange");
    let targets: Vec<String> = (0..n).map(|d| cluster.address(d).to_string()).collect();
    let holders = table.disks();
    let stages = vec![select, DiskletSpec::Partition { keys: vec![encode(&column_expr("__adisk_key"))?], partitions: n }];
    let mut specs: Vec<(u32, JobSpec)> = holders
        .iter()
        .enumerate()
        .map(|(i, d)| (*d, spec(source.clone(), stages.clone(), Sink::Exchange { exchange_id: exchange_id.clone(), targets: targets.clone(), sender: i as u32, route: Route::Broadcast, relay: None }, req.scratch_kib)))
        .collect();
    // Receivers count what arrived and the key range, so the exchange can be checked.
    let key_schema = adisk_diskos::disklets::build(&specs[0].1.stages[0].disklet, std::slice::from_ref(&plan.input), 0, &ExprPlanner::default())?.output_schema();
    let aggs = analyze_aggregates(&key_schema, "count(*) AS rows, min(__adisk_key) AS min_key, max(__adisk_key) AS max_key").await?;
    let receive = Source::Pipe { exchange_id: exchange_id.clone(), senders: holders.len() as u32, schema: key_schema.as_ref().clone() };
    let final_stage = DiskletSpec::Aggregate { group_by: vec![], aggregates: aggs, mode: AggregateMode::Single, raw_input: None };
    specs.extend((0..n).map(|d| (d, spec(receive.clone(), vec![final_stage.clone()], Sink::Host, req.scratch_kib))));
    let mut per_disk: Vec<(u32, RecordBatch)> = Vec::new();
    let disks = run_phase(cluster, specs, |d, b| {
        per_disk.push((d, b));
        Ok(())
    })
    .await?;
    per_disk.sort_by_key(|(d, _)| *d);
    let mut batches = Vec::new();
    for (d, b) in per_disk {
        let mut fields: Vec<Field> = vec![Field::new("disk", DataType::UInt32, false)];
        fields.extend(b.schema().fields().iter().map(|f| f.as_ref().clone()));
        let mut cols: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(vec![d; b.num_rows()]))];
        cols.extend(b.columns().iter().cloned());
        batches.push(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(|e| HostError::Invalid(e.to_string()))?);
    }
    let schema = batches.first().map(|b| b.schema()).unwrap_or_else(crate::cluster::empty_schema);
    let stats = JobStats { description: format!("partition {} by {key} across {n} disks", table.name), disks, ..Default::default() };
    Ok(JobOutput { schema, batches, stats })
}

/// Plans keyless aggregates over `schema` (for receivers of an exchange).
async fn analyze_aggregates(schema: &SchemaRef, aggs: &str) -> Result<Vec<NamedExpr>> {
    let table = TableEntry { name: "piped".into(), schema: schema.clone(), placements: vec![] };
    let pieces = take_pieces(&analyze(&table, &format!("SELECT {aggs} FROM piped")).await?)?;
    let names: Vec<String> = pieces.projection.iter().map(name_of).collect();
    let planner = ExprPlanner::default();
    let out = pieces.aggregates.iter().zip(names).map(|(e, n)| Ok(NamedExpr { name: n, expr: encode(e)? })).collect::<Result<Vec<_>>>()?;
    // Fails here, at the host, if a disk could not run them (e.g. DISTINCT).
    Aggregate::new(&[], &out, AggregateMode::Single, None, schema, u64::MAX / 4, &planner)?;
    Ok(out)
}

async fn run_sort(cluster: &Cluster, table: &TableEntry, req: &JobRequest) -> Result<JobOutput> {
    check_params(req, &["order_by", "predicate", "project"])?;
    let order_by = require(req, "order_by")?;
    let plan = plan_select(table, req, param(req, "project").unwrap_or("*"), Some(order_by)).await?;
    let (pieces, source) = (&plan.pieces, plan.source.clone());
    // Sort keys must be computable from the projected output: project them too.
    let mut projection = plan.projection.clone();
    let mut keys = Vec::new();
    for (i, (e, o)) in pieces.order_by.iter().enumerate() {
        let name = format!("__adisk_sort_{i}");
        projection.push(NamedExpr { name: name.clone(), expr: encode(e)? });
        keys.push(SortKey { expr: encode(&column_expr(&name))?, descending: o.descending, nulls_first: o.nulls_first });
    }
    let stages = vec![
        DiskletSpec::Select { predicate: plan.predicate.clone(), projection, limit: None },
        DiskletSpec::SortRuns { keys: keys.clone() },
    ];
    let specs: Vec<(u32, JobSpec)> = table.disks().into_iter().map(|d| (d, spec(source.clone(), stages.clone(), Sink::Host, req.scratch_kib))).collect();
    let mut batches = Vec::new();
    let disks = run_phase(cluster, specs, |_, b| {
        batches.push(b);
        Ok(())
    })
    .await?;
    // Host: merge the runs (a full sort of what arrived) and drop helper columns.
    let t = Instant::now();
    let Some(first) = batches.first() else {
        return Ok(JobOutput { schema: crate::cluster::empty_schema(), batches, stats: JobStats { disks, ..Default::default() } });
    };
    let schema = first.schema();
    let all = concat_batches(&schema, &batches).map_err(|e| HostError::Invalid(e.to_string()))?;
    let n_keys = keys.len();
    let key_start = all.num_columns() - 1 - n_keys;
    let sort_columns: Vec<SortColumn> = (0..n_keys)
        .map(|i| SortColumn { values: all.column(key_start + i).clone(), options: Some(SortOptions { descending: keys[i].descending, nulls_first: keys[i].nulls_first }) })
        .collect();
    let order = lexsort_to_indices(&sort_columns, None).map_err(|e| HostError::Invalid(e.to_string()))?;
    let sorted = take_record_batch(&all, &order).map_err(|e| HostError::Invalid(e.to_string()))?;
    let result = sorted.project(&(0..key_start).collect::<Vec<_>>()).map_err(|e| HostError::Invalid(e.to_string()))?;
    let runs: u64 = disks.iter().flat_map(|d| d.stages.iter()).filter(|s| s.disklet == "sort_runs").map(|s| s.flushes).sum();
    let mut stats = JobStats { description: format!("sort_runs on {}", table.name), disks, host_combine_ns: t.elapsed().as_nanos() as u64, ..Default::default() };
    stats.notes.insert("runs formed at the disks".into(), runs.to_string());
    Ok(JobOutput { schema: result.schema(), batches: vec![result], stats })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};

    #[tokio::test]
    async fn common_subexpressions_are_found() {
        let schema = Arc::new(Schema::new(vec![Field::new("p", DataType::Decimal128(15, 2), false), Field::new("d", DataType::Decimal128(15, 2), false), Field::new("g", DataType::Utf8, false)]));
        let table = TableEntry { name: "t".into(), schema, placements: vec![] };
        let plan = analyze(&table, "SELECT g, sum(p * (1 - d)), sum(p * (1 - d) * 2) FROM t GROUP BY g").await.unwrap();
        let found = common_subexpressions(&plan, 1, 2).unwrap();
        assert!(found.is_some(), "{}", plan.display_indent());
        let lineitem = TableEntry { name: "lineitem".into(), schema: adisk_storage::tpch::schema("lineitem").unwrap(), placements: vec![] };
        let sql = "SELECT l_returnflag, sum(l_extendedprice * (1 - l_discount)), sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) FROM lineitem GROUP BY l_returnflag";
        let plan = analyze(&lineitem, sql).await.unwrap();
        let (projection, _, _) = common_subexpressions(&plan, 1, 2).unwrap().expect("CSE on the lineitem query");
        let names: Vec<String> = projection.iter().map(name_of).collect();
        assert!(!names.contains(&"l_orderkey".to_string()) && names.contains(&"l_tax".to_string()), "{names:?}");
        let (projection, _, aggs) = found.unwrap();
        assert!(projection.iter().any(|e| name_of(e).starts_with("__common_expr")), "{projection:?}");
        assert!(aggs.iter().all(|a| a.to_string().contains("__common_expr")), "{aggs:?}");
    }
}

/// Arrow bytes of a batch (slice-aware).
pub(crate) fn batch_bytes(batch: &RecordBatch) -> u64 {
    adisk_diskos::disklets::batch_bytes(batch)
}
