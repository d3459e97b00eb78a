//! `adisk run DISKLET`: the built-in disklets as requests to the one planner.
//!
//! A request's parameters are SQL *expressions* (`predicate=l_quantity < 24`,
//! `aggs=sum(l_quantity) AS q, count(*) AS n`). Each is parsed on its own with sqlparser and
//! resolved against the table's schema by DataFusion; the request becomes a logical plan built
//! with DataFusion's DataFrame API — never SQL text glued together — and that plan goes through
//! the SQL engine ([`crate::sql::SqlEngine`]): the same optimizer, the same offload rules, the
//! same job builder. The disklet name picks the offload level:
//!
//! | disklet | plan | offload level |
//! |---|---|---|
//! | `scan` | columns, limit | `none`: the disks serve whole rows |
//! | `select` | filter, projection, limit | `select` |
//! | `aggregate`, `groupby` | filter, aggregation | `aggregate`: partial at the disks |
//! | `bloom_probe` | filter, semi-join with a build table | `semijoin`: Bloom filter at the disks |
//! | `sort` | filter, ORDER BY, projection | `select`: each disk sorts its part, the host merges |
//! | `partition` | filter, key | job graph: hash exchange across all disks, counted at the receivers |
//!
//! `groupby` with `exchange=true` and `partition` are job graphs: their disk stages are cut
//! from the physical plan the engine made (the scan bundle, the final aggregation), and the
//! partial results move disk to disk by hash of the key.
use crate::client::cluster::Cluster;
use crate::client::jobs::{self, JobOutput};
use crate::sql::{Offload, QueryOutput, SqlEngine, SqlOptions};
use crate::{HostError, Result};
use adisk_core::builder::{JobBuilder, Sizes, exchange, fitted_buffer_kib, new_id};
use adisk_core::limits::{LimitExceeded, MAX_SQL_BYTES};
use adisk_core::protocol::{DiskletSpec, ExprBytes, FragmentKind, JobSpec, Route, Sink, Source};
use adisk_core::stats::JobStats;
use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, JoinType};
use datafusion::functions_aggregate::expr_fn::{count, max, min};
use datafusion::logical_expr::{Expr, SortExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::prelude::{DataFrame, col, lit};
use datafusion::sql::sqlparser::ast::{ExprWithAlias, OrderByExpr, Visit, VisitMut};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// The built-in disklets `adisk run` accepts.
pub const DISKLETS: [&str; 7] = [
    "scan",
    "select",
    "aggregate",
    "groupby",
    "bloom_probe",
    "partition",
    "sort",
];

/// Nesting allowed in one parameter expression (sqlparser's recursion limit).
const PARSE_DEPTH: usize = 64;

/// A request to run a built-in disklet over a table.
#[derive(Clone, Debug, Default)]
pub struct JobRequest {
    /// Disklet name (see [`DISKLETS`]).
    pub disklet: String,
    /// Table.
    pub table: String,
    /// Columns the request may read (empty: all of the table's).
    pub columns: Vec<String>,
    /// Parameters (`predicate`, `project`, `group_by`, `aggs`, `key`, `order_by`, `limit`,
    /// `exchange`, `build_table`, `build_key`, `build_predicate`, `bloom_kib`).
    pub params: BTreeMap<String, String>,
    /// Scratch per stage in KiB (0: the disk's default).
    pub scratch_kib: u64,
    /// Temporary disk space per disk job in KiB, for sorts and aggregations that spill (0: none).
    pub temp_kib: u64,
    /// Stream buffer size in KiB, fitted to the disks' memory as for SQL (0: the disks' own
    /// size; None: [`default_buffer_kib`]).
    pub buffer_kib: Option<u64>,
}

impl JobRequest {
    fn param(&self, key: &str) -> Option<&str> {
        self.params
            .get(key)
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
    }

    fn require(&self, key: &str) -> Result<&str> {
        self.param(key).ok_or_else(|| {
            HostError::Invalid(format!("disklet `{}` needs --param {key}=…", self.disklet))
        })
    }

    fn check_params(&self, allowed: &[&str]) -> Result<()> {
        match self.params.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(HostError::Invalid(format!(
                "disklet `{}` has no parameter `{k}` (allowed: {})",
                self.disklet,
                allowed.join(", ")
            ))),
            None => Ok(()),
        }
    }

    fn flag(&self, key: &str) -> Result<bool> {
        match self.param(key) {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(HostError::Invalid(format!(
                "{key} must be true or false, not `{other}`"
            ))),
        }
    }

    fn number(&self, key: &str) -> Result<Option<u64>> {
        self.param(key)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| HostError::Invalid(format!("{key} `{v}` is not a whole number")))
            })
            .transpose()
    }
}

/// The parameters each disklet takes.
fn allowed(disklet: &str) -> Result<&'static [&'static str]> {
    Ok(match disklet {
        "scan" => &["limit"],
        "select" => &["predicate", "project", "limit"],
        "aggregate" | "groupby" => &["predicate", "group_by", "aggs", "exchange"],
        "bloom_probe" => &[
            "key",
            "predicate",
            "project",
            "build_table",
            "build_key",
            "build_predicate",
            "bloom_kib",
        ],
        "partition" => &["key", "predicate"],
        "sort" => &["order_by", "predicate", "project", "limit"],
        other => {
            return Err(HostError::Invalid(format!(
                "unknown disklet `{other}` (built-in: {})",
                DISKLETS.join(", ")
            )));
        }
    })
}

fn level(disklet: &str) -> Offload {
    match disklet {
        "scan" => Offload::None,
        "aggregate" | "groupby" => Offload::Aggregate,
        "bloom_probe" => Offload::Semijoin,
        _ => Offload::Select,
    }
}

/// Runs a built-in disklet over every disk holding the table and combines the results.
///
/// # Errors
/// Unknown disklet, table, column or parameter; a malformed expression; a disk refusing
/// (grant) or failing the job.
pub async fn run(cluster: &Arc<Cluster>, req: &JobRequest) -> Result<JobOutput> {
    let started = Instant::now();
    req.check_params(allowed(&req.disklet)?)?;
    let relayed = cluster.relay_stats().bytes;
    let bloom_kib = req.number("bloom_kib")?.unwrap_or(1024);
    // Stream buffers as SQL sizes them: the largest that lets the job's streams fit half of
    // the smallest disk's memory (per-buffer costs are paid per buffer).
    let opts = SqlOptions {
        offload: level(&req.disklet),
        bloom_kib,
        scratch_kib: req.scratch_kib,
        temp_kib: req.temp_kib,
        buffer_kib: req.buffer_kib.unwrap_or(default_buffer_kib(req)),
        ..SqlOptions::default()
    };
    let engine = SqlEngine::new(cluster.clone(), opts).await?;
    let analyze = req.disklet == "bloom_probe";
    let table = frame(&engine, &req.table, &req.columns, analyze).await?;
    let mut out = match req.disklet.as_str() {
        "partition" => partition(cluster, &engine, req, table).await?,
        "aggregate" | "groupby" if req.flag("exchange")? => {
            // Failover: rerun the whole exchange (senders read the partitions assigned among
            // the live copies when planned; receivers are the live disks) without a disk that
            // stopped answering; the failed run's rows were never handed out.
            let mut reruns = 0;
            loop {
                match exchange_groupby(cluster, &engine, req, table.clone()).await {
                    Err(e)
                        if reruns < cluster.disk_count()
                            && !matches!(e, HostError::LostPartitions { .. })
                            && !cluster.probe().await.is_empty() =>
                    {
                        tracing::warn!("exchange failed ({e}); rerunning without the dead disks");
                        reruns += 1;
                    }
                    result => break result?,
                }
            }
        }
        _ => {
            let df = build(&engine, req, table).await?;
            let q = engine.run_frame(df, analyze).await?;
            from_query(req, q)
        }
    };
    out.stats.wall_ns = started.elapsed().as_nanos() as u64;
    out.stats.result_rows = out.rows() as u64;
    if cluster.exchange_mode() == adisk_core::config::ExchangeMode::ViaHost {
        out.stats.notes.insert(
            "bytes_via_host".into(),
            (cluster.relay_stats().bytes - relayed).to_string(),
        );
    }
    Ok(out)
}

/// The table as a DataFrame, narrowed to `columns` when given.
async fn frame(
    engine: &SqlEngine,
    table: &str,
    columns: &[String],
    analyze: bool,
) -> Result<DataFrame> {
    let df = engine.table(table, analyze).await?;
    if columns.is_empty() {
        return Ok(df);
    }
    let names: Vec<&str> = df
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    if let Some(c) = columns.iter().find(|c| !names.contains(&c.as_str())) {
        return Err(HostError::Invalid(format!(
            "table `{table}` has no column `{c}` (columns: {})",
            names.join(", ")
        )));
    }
    let cols: Vec<&str> = columns.iter().map(String::as_str).collect();
    df.select_columns(&cols)
        .map_err(df_err("selecting columns"))
}

fn df_err(context: &str) -> impl FnOnce(datafusion::error::DataFusionError) -> HostError + '_ {
    move |source| HostError::Plan {
        context: context.to_string(),
        source,
    }
}

/// Parses a comma-separated list with `item`, refusing anything left over.
fn parse_list<T>(
    text: &str,
    what: &str,
    item: impl for<'a> FnMut(&mut Parser<'a>) -> std::result::Result<T, ParserError>,
) -> Result<Vec<T>>
where
    T: Visit + VisitMut,
{
    if text.len() > MAX_SQL_BYTES {
        return Err(LimitExceeded {
            limit: "MAX_SQL_BYTES",
            what: format!("the length in bytes of {what}"),
            max: MAX_SQL_BYTES,
            found: text.len(),
            at_least: false,
        }
        .into());
    }
    let sql_err = |e: ParserError| HostError::Plan {
        context: format!("parsing {what} `{text}`"),
        source: datafusion::error::DataFusionError::SQL(Box::new(e), None),
    };
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect)
        .with_recursion_limit(PARSE_DEPTH)
        .try_with_sql(text)
        .map_err(sql_err)?;
    let mut items = parser.parse_comma_separated(item).map_err(sql_err)?;
    for item in &mut items {
        crate::sql::limits::check_node(item, what)?;
    }
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(sql_err(ParserError::ParserError(format!(
            "unexpected `{next}` after the {what}"
        ))));
    }
    Ok(items)
}

/// Expressions (with optional `AS alias`) resolved against `df`'s schema.
fn exprs(df: &DataFrame, text: &str, what: &str) -> Result<Vec<Expr>> {
    let state = df.clone().into_parts().0;
    parse_list(text, what, |p| p.parse_expr_with_alias())?
        .into_iter()
        .map(|e: ExprWithAlias| {
            state
                .create_logical_expr_from_sql_expr(e, df.schema())
                .map_err(df_err(what))
        })
        .collect()
}

fn one_expr(df: &DataFrame, text: &str, what: &str) -> Result<Expr> {
    let mut list = exprs(df, text, what)?;
    match list.len() {
        1 => Ok(list.remove(0)),
        n => Err(HostError::Invalid(format!(
            "{what} must be one expression, got {n}"
        ))),
    }
}

/// `ORDER BY` items resolved against `schema`.
fn sort_exprs(df: &DataFrame, text: &str) -> Result<Vec<SortExpr>> {
    let state = df.clone().into_parts().0;
    let schema: &DFSchema = df.schema();
    parse_list(text, "order_by", |p| p.parse_order_by_expr())?
        .into_iter()
        .map(|o: OrderByExpr| {
            let asc = o.options.asc.unwrap_or(true);
            let e = state
                .create_logical_expr_from_sql_expr(
                    ExprWithAlias {
                        expr: o.expr,
                        alias: None,
                    },
                    schema,
                )
                .map_err(df_err("order_by"))?;
            Ok(e.sort(asc, o.options.nulls_first.unwrap_or(!asc)))
        })
        .collect()
}

fn filtered(df: DataFrame, req: &JobRequest) -> Result<DataFrame> {
    match req.param("predicate") {
        Some(p) => {
            let e = one_expr(&df, p, "predicate")?;
            df.filter(e).map_err(df_err("predicate"))
        }
        None => Ok(df),
    }
}

fn projected(df: DataFrame, req: &JobRequest) -> Result<DataFrame> {
    match req.param("project") {
        Some(p) => {
            let list = exprs(&df, p, "project")?;
            if list.iter().any(has_aggregate) {
                return Err(HostError::Invalid(format!(
                    "`{}` cannot aggregate; use `aggregate` or `groupby`",
                    req.disklet
                )));
            }
            df.select(list).map_err(df_err("project"))
        }
        None => Ok(df),
    }
}

fn limited(df: DataFrame, req: &JobRequest) -> Result<DataFrame> {
    match req.number("limit")? {
        Some(n) => df.limit(0, Some(n as usize)).map_err(df_err("limit")),
        None => Ok(df),
    }
}

fn has_aggregate(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::AggregateFunction(_))))
        .unwrap_or(false)
}

fn aggregated(df: DataFrame, req: &JobRequest) -> Result<DataFrame> {
    let aggs_text = req.require("aggs")?;
    let group_by = match req.param("group_by") {
        Some(g) => exprs(&df, g, "group_by")?,
        None if req.disklet == "groupby" => {
            return Err(HostError::Invalid(
                "disklet `groupby` needs --param group_by=…".into(),
            ));
        }
        None => vec![],
    };
    let aggs = exprs(&df, aggs_text, "aggs")?;
    if let Some(a) = aggs.iter().find(|a| !has_aggregate(a)) {
        return Err(HostError::Invalid(format!(
            "`{a}` in aggs contains no aggregate function"
        )));
    }
    df.aggregate(group_by, aggs).map_err(df_err("aggregation"))
}

/// The logical plan of a request that runs as one query.
async fn build(engine: &SqlEngine, req: &JobRequest, df: DataFrame) -> Result<DataFrame> {
    match req.disklet.as_str() {
        "scan" => limited(df, req),
        "select" => limited(projected(filtered(df, req)?, req)?, req),
        "aggregate" | "groupby" => aggregated(filtered(df, req)?, req),
        "sort" => {
            let df = filtered(df, req)?;
            let order = sort_exprs(&df, req.require("order_by")?)?;
            let df = df.sort(order).map_err(df_err("order_by"))?;
            limited(projected(df, req)?, req)
        }
        "bloom_probe" => semi_join(engine, req, df).await,
        other => Err(HostError::Invalid(format!(
            "disklet `{other}` is not a single query"
        ))),
    }
}

/// `probe ⋉ build` on `key = build_key`, the probe side filtered and projected.
async fn semi_join(engine: &SqlEngine, req: &JobRequest, probe: DataFrame) -> Result<DataFrame> {
    let build = engine.table(req.require("build_table")?, true).await?;
    let build = filtered_by(build, req.param("build_predicate"), "build_predicate")?;
    let build_key = one_expr(&build, req.require("build_key")?, "build_key")?;
    let build = build
        .select(vec![build_key.alias("__adisk_build_key")])
        .map_err(df_err("build_key"))?;
    let probe = filtered(probe, req)?;
    let key = one_expr(&probe, req.require("key")?, "key")?;
    let joined = probe
        .join_on(
            build,
            JoinType::LeftSemi,
            [key.eq(col("__adisk_build_key"))],
        )
        .map_err(df_err("semi-join"))?;
    projected(joined, req)
}

fn filtered_by(df: DataFrame, predicate: Option<&str>, what: &str) -> Result<DataFrame> {
    match predicate {
        Some(p) => {
            let e = one_expr(&df, p, what)?;
            df.filter(e).map_err(df_err("build_predicate"))
        }
        None => Ok(df),
    }
}

/// Statistics of a query run as a job: every disk's job, and what the plan did with them.
fn from_query(req: &JobRequest, q: QueryOutput) -> JobOutput {
    let mut stats = JobStats {
        description: format!("{} on {}", req.disklet, req.table),
        ..Default::default()
    };
    let host_ns = q.wall.as_nanos() as u64;
    let slowest = q.scans.iter().map(|s| s.wall_ns).max().unwrap_or(0);
    stats.host_combine_ns = host_ns.saturating_sub(slowest);
    stats.disks = q.scans.iter().filter_map(|s| s.stats.clone()).collect();
    let stage_sum = |name: &str, f: fn(&adisk_core::stats::StageStats) -> u64| -> u64 {
        stats
            .disks
            .iter()
            .flat_map(|d| d.stages.iter())
            .filter(|s| s.disklet == name)
            .map(f)
            .sum()
    };
    match req.disklet.as_str() {
        "aggregate" | "groupby" => {
            let flushes = stage_sum("sql_aggregate", |s| s.flushes);
            stats
                .notes
                .insert("partial flushes at the disks".into(), flushes.to_string());
        }
        "sort" => {
            let sorted = stage_sum("sql_sort", |s| s.rows_out);
            stats
                .notes
                .insert("rows sorted at the disks".into(), sorted.to_string());
            stats.notes.insert(
                "merged at the host".into(),
                format!("{} sorted streams", q.scans.len()),
            );
        }
        "bloom_probe" => bloom_notes(&mut stats, &q),
        _ => {}
    }
    JobOutput {
        schema: q.schema,
        batches: q.batches,
        stats,
    }
}

/// What the Bloom filter did: its size, the rows it dropped, its measured false positives.
fn bloom_notes(stats: &mut JobStats, q: &QueryOutput) {
    let probe: Vec<_> = q.scans.iter().filter(|s| s.bloom_keys.is_some()).collect();
    let Some(first) = probe.first() else {
        stats.notes.insert(
            "bloom filter".into(),
            "none (the planner kept the semi-join at the host)".into(),
        );
        return;
    };
    let (mut rows_in, mut passed, mut matches) = (0u64, 0u64, 0u64);
    for s in &probe {
        let st = s
            .stats
            .as_ref()
            .and_then(|d| d.stages.iter().find(|st| st.disklet == "bloom_probe"));
        rows_in += st.map(|st| st.rows_in).unwrap_or(0);
        passed += st.map(|st| st.rows_out).unwrap_or(0);
        matches += s.bloom_true_matches.unwrap_or(0);
    }
    stats.notes.insert(
        "bloom filter".into(),
        format!(
            "{} bytes, {} build keys",
            first.bloom_bytes.unwrap_or(0),
            first.bloom_keys.unwrap_or(0)
        ),
    );
    stats.notes.insert(
        "rows dropped at the disks".into(),
        rows_in.saturating_sub(passed).to_string(),
    );
    let negatives = rows_in.saturating_sub(matches);
    let false_positives = passed.saturating_sub(matches);
    stats.notes.insert(
        "measured false-positive rate".into(),
        if negatives == 0 {
            "n/a".into()
        } else {
            format!(
                "{:.4} ({false_positives} of {negatives} non-matching rows passed)",
                false_positives as f64 / negatives as f64
            )
        },
    );
}

/// The scan bundle at the bottom of `plan` (through plumbing), with what it ships.
fn scan_below(plan: &Arc<dyn ExecutionPlan>) -> Option<&crate::sql::scan::DiskScanExec> {
    if let Some(s) = plan.downcast_ref::<crate::sql::scan::DiskScanExec>() {
        return Some(s);
    }
    match plan.children().as_slice() {
        [child] => scan_below(child),
        _ => None,
    }
}

/// The first aggregation below `plan` that finishes partial results, and its input's scan.
fn final_aggregate(plan: &Arc<dyn ExecutionPlan>) -> Option<&Arc<dyn ExecutionPlan>> {
    let is_final = plan.downcast_ref::<AggregateExec>().is_some_and(|a| {
        matches!(
            a.mode(),
            AggregateMode::Final | AggregateMode::FinalPartitioned
        )
    });
    if is_final {
        return Some(plan);
    }
    match plan.children().as_slice() {
        [child] => final_aggregate(child),
        _ => None,
    }
}

/// One sender job per disk holding the table, `scan`'s bundle routed by `route`.
fn senders(
    cluster: &Cluster,
    engine: &SqlEngine,
    scan: &crate::sql::scan::DiskScanExec,
    exchange_id: &str,
    route: Route,
) -> Result<Vec<(u32, JobBuilder)>> {
    let (source, stages) = scan.disk_stages()?;
    let targets: Vec<String> = cluster
        .live_disks()
        .into_iter()
        .map(|d| cluster.address(d).to_string())
        .collect();
    let settings = engine.settings();
    let sizes = Sizes {
        scratch_kib: settings.scratch_kib,
        buffer_kib: settings.buffer_kib,
        temp_kib: settings.temp_kib,
    };
    Ok(scan
        .disks
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let sink = exchange(exchange_id, targets.clone(), i as u32, route.clone());
            // Replicas: each sender reads only the partitions assigned to it.
            let job = JobBuilder::chain("send", source.clone(), stages.clone(), sink)
                .program(&settings.program)
                .sizes(sizes)
                .reading(scan.partitions_at(*d));
            (*d, job)
        })
        .collect())
}

/// The buffer size of a request that names none: SQL's for the one-job disklets, whose
/// streams are what their grant holds; the disks' own for a `sort`, whose scratch holds whole
/// batches (a `--scratch-kib` of 256 could not hold one of SQL's), and for exchanges, whose
/// sender and receiver jobs share each disk's memory.
pub fn default_buffer_kib(req: &JobRequest) -> u64 {
    let exchange = req.disklet == "partition" || req.flag("exchange").unwrap_or(false);
    if req.disklet == "sort" || exchange {
        0
    } else {
        crate::sql::SQL_BUFFER_KIB
    }
}

/// The jobs of an exchange, built with one buffer size (a pipe message may be at most two of
/// the receiver's buffers): the largest at which each job's streams fit half of a disk's
/// memory.
fn fitted(engine: &SqlEngine, jobs: Vec<(u32, JobBuilder)>) -> Result<Vec<(u32, JobSpec)>> {
    let largest = engine.settings().buffer_kib;
    let cost = &engine.settings().cost;
    let kib = match largest {
        0 => 0,
        largest => fitted_buffer_kib(
            jobs.iter().map(|(_, j)| j.spec()),
            largest,
            cost.disk_memory_bytes,
            cost.buffers_per_stream,
        ),
    };
    jobs.into_iter()
        .map(|(d, j)| Ok((d, j.buffer_kib(kib).build()?)))
        .collect()
}

/// One receiver job per disk: the senders' streams merged, then `fragment`.
fn receivers(
    cluster: &Cluster,
    engine: &SqlEngine,
    exchange_id: &str,
    senders: u32,
    schema: &Schema,
    stage: DiskletSpec,
) -> Vec<(u32, JobBuilder)> {
    let settings = engine.settings();
    let sizes = Sizes {
        scratch_kib: settings.scratch_kib,
        buffer_kib: settings.buffer_kib,
        temp_kib: settings.temp_kib,
    };
    let source = Source::Pipe {
        exchange_id: exchange_id.to_string(),
        senders,
        schema: schema.clone(),
    };
    cluster
        .live_disks()
        .into_iter()
        .map(|d| {
            let job = JobBuilder::chain("receive", source.clone(), vec![stage.clone()], Sink::Host)
                .program(&settings.program)
                .sizes(sizes);
            (d, job)
        })
        .collect()
}

/// `plan` with its one leaf chain replaced by an `EmptyExec` of `input`'s schema, encoded.
fn fragment_over(plan: &Arc<dyn ExecutionPlan>, input: Arc<dyn ExecutionPlan>) -> Result<Vec<u8>> {
    let leaf: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(input.schema()));
    let frag =
        crate::sql::tree::rewire(plan.clone(), vec![leaf]).map_err(df_err("cutting a fragment"))?;
    Ok(datafusion_proto::bytes::physical_plan_to_bytes(frag)
        .map_err(df_err("encoding a fragment"))?
        .to_vec())
}

/// `groupby … exchange=true`: partial aggregation at the disks holding the table, partial
/// groups hashed by key to every disk, final aggregation there; the host only gathers.
async fn exchange_groupby(
    cluster: &Arc<Cluster>,
    engine: &SqlEngine,
    req: &JobRequest,
    df: DataFrame,
) -> Result<JobOutput> {
    if req.param("group_by").is_none() {
        return Err(HostError::Invalid("exchange=true needs group_by".into()));
    }
    let plan = engine
        .plan_frame(aggregated(filtered(df, req)?, req)?)
        .await?;
    let unsupported = || {
        HostError::Invalid(format!(
            "exchange=true: the plan does not end in a partial aggregation at the disks and a final one above it:\n{}",
            datafusion::physical_plan::displayable(plan.as_ref()).indent(false)
        ))
    };
    if !Arc::ptr_eq(final_aggregate(&plan).ok_or_else(unsupported)?, &plan) {
        return Err(unsupported());
    }
    let scan = scan_below(&plan)
        .filter(|s| {
            s.plan
                .fragment
                .as_ref()
                .is_some_and(|f| f.kind == FragmentKind::Aggregate)
        })
        .ok_or_else(unsupported)?;
    let partial = scan.schema();
    let groups = plan
        .downcast_ref::<AggregateExec>()
        .map(|a| a.group_expr().expr().len())
        .unwrap_or(0);
    let keys = partial
        .fields()
        .iter()
        .take(groups)
        .map(|f| jobs::encode_expr(&col(f.name())))
        .collect::<Result<Vec<_>>>()?;
    let id = new_id("exchange");
    let mut specs = senders(cluster, engine, scan, &id, Route::Hash { keys })?;
    let input: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(partial.clone()));
    let bytes = fragment_over(&plan, input)?;
    specs.extend(receivers(
        cluster,
        engine,
        &id,
        scan.disks.len() as u32,
        &partial,
        DiskletSpec::Fragment {
            kind: FragmentKind::Aggregate,
            plan: ExprBytes(bytes),
        },
    ));
    let specs = fitted(engine, specs)?;
    let mut batches = Vec::new();
    let disks = jobs::run_phase(cluster, specs, |_, b| {
        batches.push(b);
        Ok(())
    })
    .await?;
    let stats = JobStats {
        description: format!(
            "{} on {} (final aggregation at the disks after a hash exchange)",
            req.disklet, req.table
        ),
        disks,
        ..Default::default()
    };
    Ok(JobOutput {
        schema: plan.schema(),
        batches,
        stats,
    })
}

/// `partition`: the key (after the predicate) hashed across every disk; each receiver counts
/// what arrived and its key range, so the exchange can be checked.
async fn partition(
    cluster: &Arc<Cluster>,
    engine: &SqlEngine,
    req: &JobRequest,
    df: DataFrame,
) -> Result<JobOutput> {
    let df = filtered(df, req)?;
    let key = one_expr(&df, req.require("key")?, "key")?;
    let df = df
        .select(vec![key.alias("__adisk_key")])
        .map_err(df_err("key"))?;
    let plan = engine.plan_frame(df.clone()).await?;
    let scan = scan_below(&plan)
        .filter(|s| s.schema().fields().len() == 1)
        .ok_or_else(|| {
            HostError::Invalid(format!(
                "the key `{}` cannot be computed at the disks",
                req.require("key").unwrap_or_default()
            ))
        })?;
    let key_schema = scan.schema();
    let keys = vec![jobs::encode_expr(&col(key_schema.field(0).name()))?];
    let id = new_id("exchange");
    let mut specs = senders(cluster, engine, scan, &id, Route::Hash { keys })?;
    // Receivers count what arrived and its key range (the key column keeps the scan's name).
    let key = col(key_schema.field(0).name());
    let aggs = vec![
        count(lit(1)).alias("rows"),
        min(key.clone()).alias("min_key"),
        max(key).alias("max_key"),
    ];
    let stage = jobs::aggregate_stage(&key_schema, vec![], aggs, false).await?;
    specs.extend(receivers(
        cluster,
        engine,
        &id,
        scan.disks.len() as u32,
        &key_schema,
        stage,
    ));
    let specs = fitted(engine, specs)?;
    let mut per_disk: Vec<(u32, RecordBatch)> = Vec::new();
    let disks = jobs::run_phase(cluster, specs, |d, b| {
        per_disk.push((d, b));
        Ok(())
    })
    .await?;
    per_disk.sort_by_key(|(d, _)| *d);
    let batches = per_disk
        .into_iter()
        .map(|(d, b)| with_disk(d, &b))
        .collect::<Result<Vec<_>>>()?;
    let schema = batches
        .first()
        .map(|b| b.schema())
        .unwrap_or_else(crate::client::cluster::empty_schema);
    let key_text = req.require("key")?;
    let stats = JobStats {
        description: format!(
            "partition {} by {key_text} across {} disks",
            req.table,
            cluster.disk_count()
        ),
        disks,
        ..Default::default()
    };
    Ok(JobOutput {
        schema,
        batches,
        stats,
    })
}

/// `batch` with a leading `disk` column.
fn with_disk(d: u32, b: &RecordBatch) -> Result<RecordBatch> {
    let mut fields: Vec<Field> = vec![Field::new("disk", DataType::UInt32, false)];
    fields.extend(b.schema().fields().iter().map(|f| f.as_ref().clone()));
    let mut cols: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(vec![d; b.num_rows()]))];
    cols.extend(b.columns().iter().cloned());
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| HostError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_and_exchanges_keep_the_disks_buffer_size() {
        let req = |disklet: &str, params: &[(&str, &str)]| JobRequest {
            disklet: disklet.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        let sql = crate::sql::SQL_BUFFER_KIB;
        assert_eq!(default_buffer_kib(&req("aggregate", &[])), sql);
        assert_eq!(
            default_buffer_kib(&req("groupby", &[("exchange", "false")])),
            sql
        );
        assert_eq!(
            default_buffer_kib(&req("groupby", &[("exchange", "true")])),
            0
        );
        assert_eq!(default_buffer_kib(&req("partition", &[])), 0);
        assert_eq!(default_buffer_kib(&req("sort", &[])), 0);
    }
}
