//! SQL over the disks: DataFusion plans the query on the host; our table provider and
//! optimizer rules move as much of it to the disks as the offload level allows.
//!
//! ```text
//! SQL ─► DataFusion (parse, analyze, optimize; filters pushed into DiskTable scans)
//!     ─► physical plan ─► OffloadRule: partial aggregates into the scans (sql_aggregate
//!                          fragments), Bloom semi-joins (BloomBuildExec ► bloom_probe)
//!     ─► execute: every DiskScanExec partition is a disk job; the rest runs at the host
//! ```
//!
//! Offload levels are cumulative: `none` (whole rows leave the disks; the conventional
//! baseline) < `project` (column elimination) < `select` (qualification) < `aggregate`
//! (partial aggregation and group-by) < `semijoin` (Bloom filters). `auto` chooses per scan
//! and per operator with the cost model in [`cost`].
mod broadcast;
pub mod bundling;
mod central;
mod colocate;
pub mod cost;
pub mod disks_exec;
pub mod distribute;
mod eager;
mod error;
pub mod feedback;
mod grandtotal;
mod groups;
pub mod joinorder;
pub mod limits;
pub mod metrics;
pub mod offload;
pub mod oracle;
pub mod output;
mod perkey;
pub mod placeholders;
mod reduce;
mod relation;
pub mod report;
pub mod rules;
mod scalars;
pub mod scan;
pub mod selectivity;
pub mod settings;
mod sortmerge;
pub mod tpch;
pub mod trace;
pub(crate) mod tree;
pub mod winmagic;

pub use broadcast::{BROADCAST_BYTES, BROADCAST_ROWS};
pub use metrics::{QueryMetrics, ScanReport};
pub use offload::Offload;
pub use output::QueryOutput;
pub use settings::SqlSettings;

use crate::client::cluster::{Cluster, TableEntry};
use crate::{HostError, Result};
use adisk_core::protocol::JobSpec;
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use error::{corrupt_partition, plan_err};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Options of [`SqlEngine::new`].
#[derive(Debug, Clone)]
pub struct SqlOptions {
    /// Offload level.
    pub offload: Offload,
    /// Bloom filter size, KiB.
    pub bloom_kib: u64,
    /// Scratch per disk stage, KiB (0: the disk's default).
    pub scratch_kib: u64,
    /// Temporary disk space per disk job for spilling, KiB (0: none).
    pub temp_kib: u64,
    /// Host threads for DataFusion (0: all cores).
    pub host_threads: usize,
    /// Stream buffer size of the disk jobs, KiB (0: the disk's default).
    pub buffer_kib: u64,
    /// The host program the disk jobs belong to (the unit of fair sharing at the disks;
    /// None: `host-<pid>`, one program per host process).
    pub program: Option<String>,
    /// At `disks` (and when `auto` chooses it): the disk that does the host's combining work
    /// — merging the disks' sorted streams, global limits, aggregations over all rows — so
    /// the host only submits the plan and receives the result (memik's central unit).
    pub central_unit: Option<u32>,
    /// Most bytes of Arrow a query's result may hold at the host (None: no cap). Past it the
    /// query fails with [`HostError::ResultTooLarge`] instead of growing the host's memory
    /// (the Flight SQL service sets it; results read from the disks' endpoints never pass
    /// the host).
    pub result_cap_bytes: Option<u64>,
    /// At `disks`: plan every partitioned join as a sort-merge join and broadcast no build
    /// side ([`SqlSettings::spill_joins`]). A `disks` plan that runs a disk out of memory is
    /// rerun this way once by itself.
    pub spill_joins: bool,
    /// At `disks`: each stage's operations run as memik's bundles under this relation
    /// ([`SqlSettings::bundling`]).
    pub bundling: Option<bundling::Bundling>,
}

/// Stream buffer size SQL jobs ask the disks for, KiB. Measured on TPC-H SF 1 with 4 disks
/// (`adisk bench tpch --buffer-kib`): 1 MiB buffers (about 10 000 rows of a typical scan)
/// ran 13 % faster in total than the disks' default of 256 KiB; larger ones gained nothing.
pub const SQL_BUFFER_KIB: u64 = 1024;

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            offload: Offload::Auto,
            bloom_kib: 1024,
            scratch_kib: 0,
            temp_kib: 0,
            host_threads: 0,
            buffer_kib: SQL_BUFFER_KIB,
            program: None,
            central_unit: None,
            result_cap_bytes: None,
            spill_joins: false,
            bundling: None,
        }
    }
}

/// Planner settings of the `disks` level: one partition per disk (partition `i` of a hash
/// exchange is disk `i`); a join's build side is broadcast to the disks only when small (memik's
/// replication), otherwise both sides are hashed disk to disk (chiu); no dynamic filters (a
/// disk cannot receive them mid-query).
fn disks_config(config: &mut SessionConfig, disks: u32) {
    config.options_mut().execution.target_partitions = disks.max(1) as usize;
    config
        .options_mut()
        .optimizer
        .hash_join_single_partition_threshold = BROADCAST_BYTES;
    config
        .options_mut()
        .optimizer
        .hash_join_single_partition_threshold_rows = BROADCAST_ROWS;
    config
        .options_mut()
        .optimizer
        .enable_dynamic_filter_pushdown = false;
    config
        .options_mut()
        .optimizer
        .enable_join_dynamic_filter_pushdown = false;
    config
        .options_mut()
        .optimizer
        .enable_topk_dynamic_filter_pushdown = false;
    config
        .options_mut()
        .optimizer
        .enable_aggregate_dynamic_filter_pushdown = false;
}

/// The same limits in the plan a query falls back to when a disk ran out of memory
/// ([`SqlOptions::spill_joins`]).
pub const SPILL_BROADCAST_BYTES: usize = 64 << 10;
/// See [`SPILL_BROADCAST_BYTES`].
pub const SPILL_BROADCAST_ROWS: usize = 1024;

/// SQL over a connected cluster.
///
/// # Failover
/// A query whose run fails is rerun from scratch, at every offload level, when a disk that
/// was live stops answering ([`Cluster::probe`]): the failed disk is taken as dead, the
/// sessions are rebuilt over the live disks (the `disks` level hashes to them only), every
/// scan assigns the dead disk's partitions to their other copies, and the whole plan runs
/// again with new job and exchange ids. Nothing of the failed run is kept: rows reach the
/// caller only when the whole plan completed (`collect`), and the failed run's jobs are
/// cancelled, so the dead disk's output is never counted twice. Each rerun is noted in
/// [`QueryOutput::failover`]; at most one rerun per disk.
pub struct SqlEngine {
    cluster: Arc<Cluster>,
    opts: SqlOptions,
    sessions: Mutex<Arc<Sessions>>,
    settings: Arc<SqlSettings>,
    tables: Vec<String>,
}

/// The DataFusion sessions of an engine over the disks live when they were built.
struct Sessions {
    /// The session queries plan in.
    plain: Session,
    /// The session that counts exact Bloom matches (EXPLAIN ANALYZE), made when first asked.
    analyze: std::sync::OnceLock<Session>,
    /// At `auto`: the same at the `disks` level, whose plan runs when the cost model expects
    /// it to be faster ([`SqlEngine::chosen`]); made when first asked.
    disks: Option<std::sync::OnceLock<Box<Sessions>>>,
    offload: Offload,
    make: SessionMaker,
    /// At `auto`, with feedback on: the context its queries' runs are kept in
    /// ([`feedback::Key`]: the catalog, the host link's class, the engine's options).
    feedback: Option<String>,
}

/// Makes a session at an offload level, counting exact Bloom matches or not. Sessions are
/// made when first needed: most queries plan in one session of the four an `auto` engine
/// may use (a fresh engine per query, as the Flight SQL service makes, then costs one).
type SessionMaker = Arc<dyn Fn(Offload, bool) -> Result<Session> + Send + Sync>;

/// A session and the metrics its scans report to.
type Session = (SessionContext, Arc<QueryMetrics>);

/// What an engine is planned over: the cluster's catalog and the smallest memory budget of
/// its live disks, as fetched at one moment ([`ClusterView::fetch`]).
#[derive(Clone, Debug)]
pub struct ClusterView {
    catalog: crate::client::cluster::Catalog,
    min_memory: u64,
    /// Every live disk runs on the host's machine (the same kernel): they share its cores.
    same_machine: bool,
    links: crate::client::links::LinkFigures,
    fetched: Instant,
}

impl ClusterView {
    /// Asks every disk for its catalog and status; with `links`, the host link's figures too
    /// (measured when stale: only `auto` plans by cost, so only it needs them).
    ///
    /// # Errors
    /// Unreachable disks (a live disk that does not answer its status).
    pub async fn fetch(cluster: &Cluster, links: bool) -> Result<Self> {
        // Both at once; a disk the catalog finds unreachable is dead by the time the statuses
        // are read, so its failed status is skipped.
        let (catalog, statuses) = tokio::join!(cluster.catalog(), cluster.status());
        let catalog = catalog?;
        let dead = cluster.dead_disks();
        let mut min_memory = u64::MAX;
        let here = adisk_core::net::machine_id();
        let mut same_machine = here.is_some();
        for (d, s) in statuses.into_iter().enumerate() {
            if !dead.contains(&(d as u32)) {
                let s = s?;
                min_memory = min_memory.min(s.memory_bytes);
                same_machine &= s.machine == here;
            }
        }
        Ok(ClusterView {
            catalog,
            min_memory,
            same_machine,
            links: match links {
                true => cluster.link_figures().await,
                false => crate::client::links::LinkFigures::unmeasured(cluster),
            },
            fetched: Instant::now(),
        })
    }

    /// How long ago it was fetched.
    pub fn age(&self) -> Duration {
        self.fetched.elapsed()
    }

    /// Plans over `other` are the plans over this view: the same catalog (the same versions
    /// from the same live disks, the same corrupt copies), memory, machine and link figures.
    pub fn same_as(&self, other: &ClusterView) -> bool {
        self.catalog.key.is_some()
            && self.catalog.key == other.catalog.key
            && self.min_memory == other.min_memory
            && self.same_machine == other.same_machine
            && self.links.same_figures(&other.links)
    }
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> AbortOnDrop<Result<T>> {
    /// The task's result (a task that panicked or was aborted, as an error).
    async fn join(mut self) -> Result<T> {
        (&mut self.0)
            .await
            .map_err(|e| datafusion::error::DataFusionError::Execution(e.to_string()))
            .map_err(plan_err("planning the query's `disks` plan"))?
    }
}

/// A statement planned once ([`SqlEngine::prepare`]), to run later or to read from the disks.
#[derive(Clone)]
pub struct Planned {
    chosen: Chosen,
    source: PlannedFrom,
    analyze: bool,
    started: Instant,
    /// How long planning took (at `auto`, both levels' plans and the choice).
    planning: Duration,
}

impl Planned {
    /// The schema of its result.
    pub fn schema(&self) -> SchemaRef {
        self.chosen.plan.schema()
    }

    /// The physical plan.
    pub fn plan(&self) -> &Arc<dyn ExecutionPlan> {
        &self.chosen.plan
    }
}

/// What a planned statement is planned again from, after a failover.
#[derive(Clone)]
enum PlannedFrom {
    Sql(String),
    Frame(datafusion::logical_expr::LogicalPlan),
}

/// The plan a query runs, in its session.
#[derive(Clone)]
struct Chosen {
    plan: Arc<dyn ExecutionPlan>,
    session: Session,
    note: Option<String>,
    estimate: Option<cost::Estimate>,
    /// At `auto`: the query and the plan whose run is kept ([`feedback`]).
    feedback: Option<(feedback::Key, feedback::Level)>,
    /// Its scalar subqueries, run before it was planned ([`scalars`]).
    first: Option<scalars::First>,
}

impl Chosen {
    /// `auto`'s note and the scalar subqueries' values, a line each.
    fn notes(&self) -> Option<String> {
        let first = self.first.as_ref().and_then(|f| f.note.clone());
        match (self.note.clone(), first) {
            (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
            (a, b) => a.or(b),
        }
    }
}

impl Sessions {
    fn new(offload: Offload, make: SessionMaker, feedback: Option<String>) -> Result<Self> {
        Ok(Sessions {
            plain: make(offload, false)?,
            analyze: std::sync::OnceLock::new(),
            disks: (offload == Offload::Auto).then(std::sync::OnceLock::new),
            offload,
            make,
            feedback: feedback.filter(|_| offload == Offload::Auto),
        })
    }

    fn pick(&self, analyze: bool) -> Result<Session> {
        if !analyze {
            return Ok(self.plain.clone());
        }
        once(&self.analyze, || (self.make)(self.offload, true))
    }

    /// At `auto`: the `disks` level's sessions.
    fn disks(&self) -> Result<Option<&Sessions>> {
        let Some(cell) = &self.disks else {
            return Ok(None);
        };
        if let Some(d) = cell.get() {
            return Ok(Some(d));
        }
        let made = Box::new(Sessions::new(Offload::Disks, self.make.clone(), None)?);
        Ok(Some(cell.get_or_init(|| made)))
    }
}

/// The engine options that do not fit the cluster: a stream buffer size out of range, a
/// central unit without the level that uses it or that is not a live disk.
fn check_options(
    cluster: &Cluster,
    opts: &SqlOptions,
    dead: &std::collections::BTreeSet<u32>,
) -> Result<()> {
    if opts.buffer_kib > adisk_core::protocol::MAX_JOB_BUFFER_KIB
        || (opts.buffer_kib > 0 && opts.buffer_kib < 16)
    {
        return Err(HostError::Invalid(format!(
            "stream buffers of {} KiB: allowed are 16 to {} KiB (0: the disks' default)",
            opts.buffer_kib,
            adisk_core::protocol::MAX_JOB_BUFFER_KIB
        )));
    }
    if let Some(c) = opts.central_unit {
        if !matches!(opts.offload, Offload::Disks | Offload::Auto) {
            return Err(HostError::Invalid(format!(
                "--central-unit runs the host's combining work at a disk: it needs --offload disks or auto, not {}",
                opts.offload
            )));
        }
        if c >= cluster.disk_count() || dead.contains(&c) {
            return Err(HostError::Invalid(format!(
                "--central-unit {c}: not a live disk of this cluster (disks 0..{}, dead {:?})",
                cluster.disk_count(),
                dead
            )));
        }
    }
    Ok(())
}

/// The context `auto` keeps an engine's query runs in ([`feedback`]): the catalog (None when
/// it has no key, or feedback is off), the host link's class, how exchanges travel and the
/// engine's options.
fn feedback_context(
    opts: &SqlOptions,
    view: &ClusterView,
    cost: &cost::CostModel,
) -> Option<String> {
    let catalog = view.catalog.key.as_ref().filter(|_| feedback::enabled())?;
    Some(format!(
        "{catalog}|link class {}|via host {}|{opts:?}",
        feedback::link_class(cost.link),
        cost.via_host
    ))
}

/// The value of `cell`, made by `make` when it has none yet.
fn once<T: Clone>(cell: &std::sync::OnceLock<T>, make: impl FnOnce() -> Result<T>) -> Result<T> {
    if let Some(v) = cell.get() {
        return Ok(v.clone());
    }
    let v = make()?;
    Ok(cell.get_or_init(|| v).clone())
}

/// Runs `plan` to the end, holding at most `cap` bytes of its result.
async fn collect_capped(
    plan: Arc<dyn ExecutionPlan>,
    ctx: Arc<datafusion::execution::TaskContext>,
    cap: Option<u64>,
) -> Result<Vec<RecordBatch>> {
    use futures::StreamExt;
    let Some(cap) = cap else {
        return collect(plan, ctx)
            .await
            .map_err(plan_err("running the query"));
    };
    let mut stream = datafusion::physical_plan::execute_stream(plan, ctx)
        .map_err(plan_err("running the query"))?;
    let (mut batches, mut held) = (Vec::new(), 0u64);
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(plan_err("running the query"))?;
        held += batch.get_array_memory_size() as u64;
        if held > cap {
            return Err(HostError::ResultTooLarge { cap });
        }
        batches.push(batch);
    }
    Ok(batches)
}

/// A table of the catalog and what the planner knows of its values, computed once per catalog.
#[derive(Clone)]
struct TableFacts {
    entry: Arc<TableEntry>,
    /// Distinct values per column (merged sketches).
    ndv: Arc<Vec<Option<u64>>>,
    /// Sampled rows (`None`: some partition has none).
    sample: Option<Arc<selectivity::TableSample>>,
}

impl SqlEngine {
    /// Registers every table of the cluster's catalog.
    ///
    /// # Errors
    /// Unreachable disks; a Bloom filter larger than what a disk can grant.
    pub async fn new(cluster: Arc<Cluster>, opts: SqlOptions) -> Result<Self> {
        let view = ClusterView::fetch(&cluster, opts.offload == Offload::Auto).await?;
        Self::with_view(cluster, opts, &view)
    }

    /// Like [`SqlEngine::new`], from a view of the cluster fetched before (a long-running
    /// service builds one engine per query from a view it refreshes now and then, rather
    /// than asking every disk for its catalog per query).
    ///
    /// # Errors
    /// A Bloom filter larger than what a disk can grant; bad options.
    pub fn with_view(cluster: Arc<Cluster>, opts: SqlOptions, view: &ClusterView) -> Result<Self> {
        let (sessions, settings, tables) = Self::build_from(&cluster, &opts, view)?;
        Ok(SqlEngine {
            cluster,
            opts,
            sessions: Mutex::new(Arc::new(sessions)),
            settings,
            tables,
        })
    }

    /// The sessions over the catalog of the live disks.
    async fn build(
        cluster: &Arc<Cluster>,
        opts: &SqlOptions,
    ) -> Result<(Sessions, Arc<SqlSettings>, Vec<String>)> {
        let view = ClusterView::fetch(cluster, opts.offload == Offload::Auto).await?;
        Self::build_from(cluster, opts, &view)
    }

    fn build_from(
        cluster: &Arc<Cluster>,
        opts: &SqlOptions,
        view: &ClusterView,
    ) -> Result<(Sessions, Arc<SqlSettings>, Vec<String>)> {
        let (catalog, min_memory) = (&view.catalog, view.min_memory);
        let dead = cluster.dead_disks();
        let bloom_bytes = (opts.bloom_kib * 1024) as usize;
        // A bloom_probe stage needs its filter in scratch next to the job's stream buffers.
        let mut cost = cost::CostModel::from_cluster(cluster, &view.links, min_memory)?;
        cost.shared_cores |= view.same_machine;
        let feedback = feedback_context(opts, view, &cost);
        if bloom_bytes as u64 > cost.max_scratch_bytes {
            return Err(HostError::Invalid(format!(
                "--bloom-kib {} does not fit a disk's memory grant: at most {} KiB of scratch is available per stage",
                opts.bloom_kib,
                cost.max_scratch_bytes / 1024
            )));
        }
        check_options(cluster, opts, &dead)?;
        if bloom_bytes < 64 {
            return Err(HostError::Invalid("--bloom-kib must be at least 1".into()));
        }
        let link = cluster.host_link().cloned();
        let tables: Vec<TableFacts> = catalog
            .tables
            .values()
            .map(|t| TableFacts {
                entry: Arc::new(t.clone()),
                ndv: Arc::new(t.distinct_values()),
                sample: selectivity::TableSample::of(t).map(Arc::new),
            })
            .collect();
        let program = opts
            .program
            .clone()
            .unwrap_or_else(adisk_core::builder::program_id);
        let (scratch_kib, temp_kib, buffer_kib, central_unit, spill_joins, bundling) = (
            opts.scratch_kib,
            opts.temp_kib,
            opts.buffer_kib,
            opts.central_unit,
            opts.spill_joins,
            opts.bundling,
        );
        let settings_for = move |offload, analyze| {
            Arc::new(SqlSettings {
                offload,
                bloom_bytes,
                scratch_kib,
                temp_kib,
                buffer_kib,
                analyze,
                host_link: link.clone(),
                cost: cost.clone(),
                program: program.clone(),
                central_unit,
                spill_joins,
                bundling,
            })
        };
        let settings = settings_for(opts.offload, false);
        let incomplete: Vec<Arc<scan::IncompleteTable>> = catalog
            .incomplete
            .iter()
            .map(|(name, why)| {
                Arc::new(scan::IncompleteTable {
                    name: name.clone(),
                    schema: why.schema.clone(),
                    why: why.clone(),
                })
            })
            .collect();
        let (cluster2, tables2, threads) = (cluster.clone(), tables.clone(), opts.host_threads);
        let make: SessionMaker = Arc::new(move |offload, analyze| {
            let session =
                Self::session(&cluster2, &tables2, settings_for(offload, analyze), threads)?;
            for provider in &incomplete {
                session
                    .0
                    .register_table(provider.name.as_str(), provider.clone())
                    .map_err(plan_err("registering a table"))?;
            }
            Ok(session)
        });
        let sessions = Sessions::new(opts.offload, make, feedback)?;
        let tables = tables.iter().map(|t| t.entry.name.clone()).collect();
        Ok((sessions, settings, tables))
    }

    /// After a failed run: takes the disks that stopped answering as dead and rebuilds the
    /// sessions over the live ones. Returns the note of the rerun, or the error itself when
    /// no disk newly failed (or too many reruns happened).
    async fn failover(&self, error: HostError, reruns: &mut Vec<String>) -> Result<()> {
        if reruns.len() >= self.cluster.disk_count() as usize
            || matches!(error, HostError::LostPartitions { .. })
        {
            return Err(error);
        }
        if let Some(note) = self.avoid_corrupt_copy(&error).await {
            tracing::warn!("query failed ({error}); {note}");
            reruns.push(format!("{note} (it failed: {error})"));
            let (sessions, _, _) = Self::build(&self.cluster, &self.opts).await?;
            *self.sessions.lock().expect("sessions lock") = Arc::new(sessions);
            return Ok(());
        }
        let newly = self.cluster.probe().await;
        if newly.is_empty() {
            // Every disk answers again: a link between them failed for a while (cut and
            // mended). The failed run is discarded whole; run again on the same disks.
            if !error.is_unreachable() {
                return Err(error);
            }
            tracing::warn!("query failed ({error}); rerunning (every disk answers)");
            reruns.push(format!(
                "rerun: a link failed and every disk answers again (it failed: {error})"
            ));
            let (sessions, _, _) = Self::build(&self.cluster, &self.opts).await?;
            *self.sessions.lock().expect("sessions lock") = Arc::new(sessions);
            return Ok(());
        }
        let disks = newly
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        tracing::warn!("query failed ({error}); rerunning without disk {disks}");
        reruns.push(format!("rerun without disk {disks} (it failed: {error})"));
        let (sessions, _, _) = Self::build(&self.cluster, &self.opts).await?;
        *self.sessions.lock().expect("sessions lock") = Arc::new(sessions);
        Ok(())
    }

    /// After a data-loss error naming a corrupt partition file at a disk: if another live disk
    /// holds a copy of that partition, takes this copy as corrupt (it is never read again by
    /// this host) and returns the note of the rerun.
    async fn avoid_corrupt_copy(&self, error: &HostError) -> Option<String> {
        let HostError::Disk {
            disk,
            code,
            message,
        } = error
        else {
            return None;
        };
        let (table, partition) = corrupt_partition(message).filter(|_| code == "DataLoss")?;
        let catalog = self.cluster.catalog().await.ok()?;
        let copies = catalog.tables.get(&table)?.copies.get(&partition)?.clone();
        let dead = self.cluster.dead_disks();
        copies.iter().find(|d| **d != *disk && !dead.contains(d))?;
        self.cluster.mark_corrupt(&table, partition, *disk);
        Some(format!(
            "rerun without disk {disk}'s corrupt copy of {table} partition {partition} (read from disks {copies:?}; `adisk scrub` repairs it)"
        ))
    }

    /// A DataFusion session with the offload rule for `settings` and every table registered.
    fn session(
        cluster: &Arc<Cluster>,
        tables: &[TableFacts],
        settings: Arc<SqlSettings>,
        host_threads: usize,
    ) -> Result<(SessionContext, Arc<QueryMetrics>)> {
        let metrics = Arc::new(QueryMetrics::default());
        let mut config = SessionConfig::new().with_information_schema(false);
        if host_threads > 0 {
            config = config.with_target_partitions(host_threads);
        }
        // Prefer joins that collect the (small) build side once: their Bloom filter is
        // complete before the probe side starts.
        config
            .options_mut()
            .optimizer
            .hash_join_single_partition_threshold = 64 << 20;
        config
            .options_mut()
            .optimizer
            .hash_join_single_partition_threshold_rows = 4 << 20;
        if settings.offload == Offload::Disks {
            disks_config(&mut config, cluster.live_disks().len() as u32);
            if settings.spill_joins {
                // Only tiny build sides (a scalar subquery's row) are still broadcast.
                let optimizer = &mut config.options_mut().optimizer;
                optimizer.hash_join_single_partition_threshold = SPILL_BROADCAST_BYTES;
                optimizer.hash_join_single_partition_threshold_rows = SPILL_BROADCAST_ROWS;
            }
        }
        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features();
        if winmagic::enabled() {
            state = state.with_optimizer_rule(Arc::new(winmagic::WinMagic));
        }
        if joinorder::enabled() {
            // Each pass's `eliminate_cross_join` flattens a bushy tree back into a left-deep
            // one, which the join order rebuilds: the columns its joins no longer need are
            // pruned right after it, or the last pass would keep them.
            state = state
                .with_optimizer_rule(Arc::new(joinorder::JoinOrder))
                .with_optimizer_rule(Arc::new(
                    datafusion::optimizer::optimize_projections::OptimizeProjections::new(),
                ));
        }
        if eager::enabled() {
            state = state.with_optimizer_rule(Arc::new(eager::EagerAggregation));
        }
        let state = state
            .with_physical_optimizer_rule(Arc::new(rules::OffloadRule::new(settings.clone())))
            .with_physical_optimizer_rule(Arc::new(distribute::DistributeRule::new(
                settings.clone(),
                cluster.clone(),
                metrics.clone(),
            )))
            .build();
        let ctx = SessionContext::new_with_state(state);
        for t in tables {
            let entry = &t.entry;
            let provider = scan::DiskTable {
                entry: entry.clone(),
                ndv: t.ndv.clone(),
                sample: t.sample.clone(),
                cluster: cluster.clone(),
                settings: settings.clone(),
                metrics: metrics.clone(),
            };
            ctx.register_table(entry.name.as_str(), Arc::new(provider))
                .map_err(plan_err("registering a table"))?;
        }
        Ok((ctx, metrics))
    }

    /// The settings.
    pub fn settings(&self) -> &SqlSettings {
        &self.settings
    }

    /// The trace of `out`, this engine's answer to `text` ([`trace::trace`]).
    pub async fn trace(&self, out: &QueryOutput, text: &str) -> adisk_core::trace::Trace {
        trace::trace(out, text, &self.cluster).await
    }

    /// Table names.
    pub fn tables(&self) -> &[String] {
        &self.tables
    }

    /// `sql` as a DataFrame of `ctx` (its logical plan unoptimized), after the checks every
    /// query passes.
    async fn logical(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
        let sql = sql.trim().trim_end_matches(';');
        if sql.is_empty() {
            return Err(HostError::Invalid("empty query".into()));
        }
        limits::check(sql)?;
        placeholders::plan(ctx, sql, Some(0)).await
    }

    /// `sql`'s physical plan in `ctx`, with `values` (its scalar subqueries', run first:
    /// [`scalars`]) in place of those subqueries.
    async fn physical(
        ctx: &SessionContext,
        sql: &str,
        values: Vec<(String, ScalarValue)>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let df = Self::logical(ctx, sql).await?;
        if values.is_empty() {
            return df
                .create_physical_plan()
                .await
                .map_err(plan_err("planning the query"));
        }
        let state = ctx.state();
        let plan = state
            .optimize(df.logical_plan())
            .and_then(|p| scalars::substitute(p, &values))
            .map_err(plan_err("planning the query with its subqueries' values"))?;
        state
            .create_physical_plan(&plan)
            .await
            .map_err(plan_err("planning the query"))
    }

    /// The physical plan of a logical plan `ctx` has optimized already.
    async fn physical_optimized(
        ctx: &SessionContext,
        plan: &datafusion::logical_expr::LogicalPlan,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let state = ctx.state();
        state
            .query_planner()
            .create_physical_plan(plan, &state)
            .await
            .map_err(plan_err("planning the query"))
    }

    /// The optimized physical plan of `sql` (at `auto`, the one the cost model chose).
    pub async fn plan(&self, sql: &str) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self.chosen(sql, false).await?.plan)
    }

    /// The plan `sql` runs with: at `auto`, the host-centric plan (scans, qualification,
    /// partial aggregation and Bloom semi-joins at the disks) or the `disks` level's (whole
    /// stages at the disks), whichever [`cost::CostModel::traffic_time`] expects to be faster
    /// given what each moves. A query the `disks` level cannot plan, or whose estimates are
    /// missing, runs host-centric.
    async fn chosen(&self, sql: &str, analyze: bool) -> Result<Chosen> {
        let session = self.session_for(analyze)?;
        let (mut first, host_df) = self.first_of(&session, sql, analyze).await?;
        let values = first.as_ref().map(|f| f.values.clone()).unwrap_or_default();
        // At `auto` the `disks` level's plan is made on another task meanwhile (planning is
        // CPU work: on two cores it halves the wait); dropped with this call.
        let alt = self.disks_session_for(analyze)?;
        let alt_plan = alt.as_ref().map(|a| {
            let (ctx, sql) = (a.0.clone(), sql.to_string());
            AbortOnDrop(tokio::spawn(async move {
                Self::physical(&ctx, &sql, values).await
            }))
        });
        let plan = match (first.as_mut().and_then(|f| f.plan.take()), host_df) {
            (Some(logical), _) => Self::physical_optimized(&session.0, &logical).await?,
            (None, Some(df)) => df
                .create_physical_plan()
                .await
                .map_err(plan_err("planning the query"))?,
            (None, None) => Self::physical(&session.0, sql, Vec::new()).await?,
        };
        let host = Chosen {
            plan,
            session,
            note: None,
            estimate: None,
            feedback: None,
            first: first.filter(|f| !f.values.is_empty()),
        };
        let (Some(alt), Some(alt_plan)) = (alt, alt_plan) else {
            // One level: the cost model's estimate of its plan, for EXPLAIN ANALYZE to set
            // beside the run.
            let estimate = self.estimate_of(&host.plan);
            return Ok(Chosen { estimate, ..host });
        };
        let why = |reason: &str| Chosen {
            note: Some(format!("auto: host-centric ({reason})")),
            ..host.clone()
        };
        let Some(h) = disks_exec::plan_traffic(&host.plan) else {
            return Ok(why("no estimate of what the host-centric plan moves"));
        };
        let cost = &self.settings.cost;
        let th = cost.traffic_time(h, h.to_host, false);
        let bound = if cost.link_bound(h, h.to_host) {
            "the host link"
        } else {
            "processing"
        };
        let disks = match alt_plan.join().await {
            Ok(disks) => disks,
            Err(e) => return Ok(why(&format!("the disks level cannot plan it: {e}"))),
        };
        let distributed = datafusion::common::tree_node::TreeNode::exists(&disks, |n| {
            Ok(n.downcast_ref::<disks_exec::DisksExec>().is_some())
        })
        .unwrap_or(false);
        if !distributed {
            return Ok(why("the disks level runs no stage of it at the disks"));
        }
        let Some(d) = disks_exec::plan_traffic(&disks) else {
            return Ok(why("no estimate of what the disks plan moves"));
        };
        // The disks plan's joins and aggregations take in whole scans (no Bloom filter prunes
        // them first); the host-centric plan's, what it ships.
        let work = disks_exec::plan_work(&disks).unwrap_or(h.to_host);
        let td = cost.traffic_time(d, work, true);
        tracing::debug!(
            host_centric = ?h,
            disks = ?d,
            disks_work_bytes = work,
            th,
            td,
            "auto: what each plan moves and its time"
        );
        let (key, decision) = self.decide(sql, th, td);
        let note = Some(format!(
            "auto: {} ({}cost model: host-centric {th:.3} s moving {} to the host, bound by {bound}; disks {td:.3} s moving {} to the host and {} between disks; {}; {})",
            decision.level.name(),
            decision.why.map(|w| format!("{w}; ")).unwrap_or_default(),
            adisk_core::stats::human_bytes(h.to_host),
            adisk_core::stats::human_bytes(d.to_host),
            adisk_core::stats::human_bytes(d.disk_to_disk),
            cost.links,
            cost.rates.source,
        ));
        let feedback = key.map(|k| (k, decision.level));
        Ok(match decision.level {
            feedback::Level::Disks => Chosen {
                plan: disks,
                session: alt,
                note,
                estimate: Some(cost::Estimate::of("disks", td, d)),
                feedback,
                first: host.first,
            },
            feedback::Level::HostCentric => Chosen {
                note,
                estimate: Some(cost::Estimate::of("host-centric", th, h)),
                feedback,
                ..host
            },
        })
    }

    /// At `auto`, the plan `sql` runs with: the cost model's (`th`, `td`: its estimates of the
    /// host-centric and the `disks` plan), or what the query's measured runs say
    /// ([`feedback`]); and the key its run is kept under (None: feedback is off).
    fn decide(&self, sql: &str, th: f64, td: f64) -> (Option<feedback::Key>, feedback::Decision) {
        let estimated = if td < th {
            feedback::Level::Disks
        } else {
            feedback::Level::HostCentric
        };
        let key = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .feedback
            .as_ref()
            .map(|context| feedback::Key::new(sql, context));
        let walls = key.as_ref().and_then(|k| self.cluster.feedback().walls(k));
        (key, feedback::decide(estimated, (th, td), walls.as_ref()))
    }

    /// The cost model's estimate of a plan of this engine's level (not `auto`): the `disks`
    /// level's plans run stages at the disks, every other level's are host-centric.
    fn estimate_of(&self, plan: &Arc<dyn ExecutionPlan>) -> Option<cost::Estimate> {
        let t = disks_exec::plan_traffic(plan)?;
        let cost = &self.settings.cost;
        Some(if self.settings.offload == Offload::Disks {
            let work = disks_exec::plan_work(plan).unwrap_or(t.to_host);
            cost::Estimate::of("disks", cost.traffic_time(t, work, true), t)
        } else {
            cost::Estimate::of("host-centric", cost.traffic_time(t, t.to_host, false), t)
        })
    }

    /// `sql` as a DataFrame of this engine's host-centric session with its `$1`, `$2`, …
    /// placeholders bound to `params` — as values in the plan, never spliced into the text —
    /// ready for [`SqlEngine::run_frame`] (prepared statements of the Flight SQL service).
    ///
    /// # Errors
    /// Empty or oversized SQL; planning errors; parameters that do not fit the placeholders.
    pub async fn bound(&self, sql: &str, params: Vec<ScalarValue>) -> Result<DataFrame> {
        let df = self.unbound(sql, Some(params.len())).await?;
        df.with_param_values(params)
            .map_err(plan_err("binding the parameters"))
    }

    /// `sql` planned with its placeholders unbound: the schema of its result and the types
    /// of its parameters (`$1` first; `None` where DataFusion cannot infer one).
    ///
    /// # Errors
    /// Empty or oversized SQL; planning errors.
    pub async fn parameters(&self, sql: &str) -> Result<(SchemaRef, Vec<Option<DataType>>)> {
        let df = self.unbound(sql, None).await?;
        let types = df
            .logical_plan()
            .get_parameter_types()
            .map_err(plan_err("typing the parameters"))?;
        let mut numbered: Vec<(usize, Option<DataType>)> = types
            .into_iter()
            .filter_map(|(name, t)| Some((name.strip_prefix('$')?.parse().ok()?, t)))
            .collect();
        numbered.sort_by_key(|(n, _)| *n);
        let schema = Arc::new(df.schema().as_arrow().clone());
        Ok((schema, numbered.into_iter().map(|(_, t)| t).collect()))
    }

    async fn unbound(&self, sql: &str, values: Option<usize>) -> Result<DataFrame> {
        let sql = sql.trim().trim_end_matches(';');
        if sql.is_empty() {
            return Err(HostError::Invalid("empty query".into()));
        }
        limits::check(sql)?;
        placeholders::plan(&self.session_for(false)?.0, sql, values).await
    }

    /// Runs `sql`.
    pub async fn query(&self, sql: &str) -> Result<QueryOutput> {
        self.run(sql, false).await
    }

    /// Runs `sql` collecting what EXPLAIN ANALYZE prints (exact Bloom match counts).
    pub async fn query_analyzed(&self, sql: &str) -> Result<QueryOutput> {
        self.run(sql, true).await
    }

    async fn run(&self, sql: &str, analyze: bool) -> Result<QueryOutput> {
        // Planning asks the disks too (statistics): a disk lost meanwhile fails over as a run
        // does, and planning starts again over the live disks.
        let mut reruns = Vec::new();
        let planned = loop {
            match self.prepare_analyzed(sql, analyze).await {
                Ok(planned) => break planned,
                Err(e) if e.is_unreachable() => self.failover(e, &mut reruns).await?,
                Err(e) => return Err(e),
            }
        };
        let mut out = self.run_planned(planned).await?;
        reruns.append(&mut out.failover);
        out.failover = reruns;
        Ok(out)
    }

    /// Plans `sql` once (at `auto`, the plan the cost model chose): run it later with
    /// [`SqlEngine::run_planned`], or hand its disk parts to readers
    /// ([`SqlEngine::endpoint_jobs`]).
    ///
    /// # Errors
    /// Empty, oversized or malformed SQL; unknown tables; planning errors.
    pub async fn prepare(&self, sql: &str) -> Result<Planned> {
        self.prepare_analyzed(sql, false).await
    }

    async fn prepare_analyzed(&self, sql: &str, analyze: bool) -> Result<Planned> {
        let started = Instant::now();
        let chosen = self.chosen(sql, analyze).await?;
        Ok(Planned {
            chosen,
            source: PlannedFrom::Sql(sql.to_string()),
            analyze,
            started,
            planning: started.elapsed(),
        })
    }

    /// The disk parts of a planned statement whose result is made entirely at the disks (a
    /// filtered projection of one table): one job per disk, whose rows are that disk's part
    /// of the result, to be read straight from the disk by a client (the Flight SQL service's
    /// per-disk endpoints). None when the host would add anything to the disks' rows.
    pub fn endpoint_jobs(&self, planned: &Planned) -> Option<Vec<(u32, JobSpec)>> {
        scan::endpoint_jobs(&planned.chosen.plan)
    }

    /// Plans a DataFrame of this engine's session (e.g. [`SqlEngine::bound`]) once.
    ///
    /// # Errors
    /// Planning errors.
    pub async fn prepare_frame(&self, df: DataFrame, analyze: bool) -> Result<Planned> {
        let logical = df.logical_plan().clone();
        let started = Instant::now();
        let plan = self.plan_frame(df).await?;
        Ok(Planned {
            chosen: Chosen {
                plan,
                session: self.session_for(analyze)?,
                note: None,
                estimate: None,
                feedback: None,
                first: None,
            },
            source: PlannedFrom::Frame(logical),
            analyze,
            started,
            planning: started.elapsed(),
        })
    }

    /// Runs a planned statement. When a disk fails, the statement is planned again among the
    /// live disks and rerun (failover), as [`SqlEngine::query`] does.
    ///
    /// # Errors
    /// Planning errors of a rerun; a disk failing with no copy left to read.
    pub async fn run_planned(&self, planned: Planned) -> Result<QueryOutput> {
        let Planned {
            chosen,
            source,
            analyze,
            started,
            planning,
        } = planned;
        // What this run teaches `auto`: the wall of the plan it chose, including a rerun with
        // sort-merge joins (that is what choosing it cost), not a failover to other disks.
        let mut kept = chosen.feedback.clone();
        let mut next = Some(chosen);
        let mut reruns = Vec::new();
        let mut spilled = false;
        loop {
            // A rerun plans again in the rebuilt session: its scans assign partitions among
            // the live disks.
            let chosen = match next.take() {
                Some(c) => c,
                None => self.replan(&source, analyze).await?,
            };
            let (notes, first) = (chosen.notes(), chosen.first);
            match self.execute(chosen.plan, chosen.session, started).await {
                Ok(mut out) => {
                    if let Some(first) = first {
                        out.scans.splice(0..0, first.scans);
                    }
                    out.failover = reruns;
                    out.disks = self.cluster.usage();
                    out.choice = notes;
                    out.estimate = chosen.estimate;
                    out.planning = planning;
                    if let Some((key, level)) = kept {
                        let wall = out.wall.saturating_sub(planning).as_secs_f64();
                        self.cluster.feedback().record(key, level, wall);
                    }
                    return Ok(out);
                }
                Err(e) if out_of_memory(&e) && !self.opts.spill_joins && !spilled => {
                    spilled = true;
                    let note = format!(
                        "rerun with sort-merge joins and no broadcast build sides (a disk ran out of memory: {e})"
                    );
                    tracing::warn!("{note}");
                    reruns.push(note);
                    next = Some(self.spilling(&source, analyze).await?);
                }
                Err(e) => {
                    kept = None;
                    self.failover(e, &mut reruns).await?
                }
            }
        }
    }

    /// The query planned again with [`SqlOptions::spill_joins`], in sessions of its own (this
    /// engine's stay as they are for its next queries).
    async fn spilling(&self, source: &PlannedFrom, analyze: bool) -> Result<Chosen> {
        let opts = SqlOptions {
            spill_joins: true,
            ..self.opts.clone()
        };
        let engine = SqlEngine::new(self.cluster.clone(), opts).await?;
        engine.replan(source, analyze).await
    }

    async fn replan(&self, source: &PlannedFrom, analyze: bool) -> Result<Chosen> {
        match source {
            PlannedFrom::Sql(sql) => self.chosen(sql, analyze).await,
            PlannedFrom::Frame(logical) => {
                let session = self.session_for(analyze)?;
                let df = session
                    .0
                    .execute_logical_plan(logical.clone())
                    .await
                    .map_err(plan_err("planning the request"))?;
                let plan = self.plan_frame(df).await?;
                Ok(Chosen {
                    plan,
                    session,
                    note: None,
                    estimate: None,
                    feedback: None,
                    first: None,
                })
            }
        }
    }

    fn session_for(&self, analyze: bool) -> Result<Session> {
        let s = self.sessions.lock().expect("sessions lock").clone();
        s.pick(analyze)
    }

    /// At `auto`: the `disks` level's session.
    fn disks_session_for(&self, analyze: bool) -> Result<Option<Session>> {
        let s = self.sessions.lock().expect("sessions lock").clone();
        s.disks()?.map(|d| d.pick(analyze)).transpose()
    }

    /// A table as a DataFrame of this engine's session (`analyze`: the session that counts
    /// exact Bloom matches), for requests built with DataFusion's DataFrame API rather than
    /// SQL text: they are planned and offloaded exactly like SQL.
    ///
    /// # Errors
    /// Unknown table.
    pub async fn table(&self, name: &str, analyze: bool) -> Result<DataFrame> {
        if !self.tables.iter().any(|t| t == name) {
            return Err(HostError::UnknownTable(name.to_string()));
        }
        self.session_for(analyze)?
            .0
            .table(name)
            .await
            .map_err(plan_err("opening a table"))
    }

    /// The optimized physical plan of a DataFrame built from [`SqlEngine::table`].
    ///
    /// # Errors
    /// Planning errors.
    pub async fn plan_frame(&self, df: DataFrame) -> Result<Arc<dyn ExecutionPlan>> {
        df.create_physical_plan()
            .await
            .map_err(plan_err("planning the request"))
    }

    /// Runs a DataFrame built from [`SqlEngine::table`] (with the same `analyze`).
    ///
    /// # Errors
    /// Planning errors; a disk failing.
    pub async fn run_frame(&self, df: DataFrame, analyze: bool) -> Result<QueryOutput> {
        let planned = self.prepare_frame(df, analyze).await?;
        self.run_planned(planned).await
    }

    async fn execute(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        (ctx, metrics): Session,
        started: Instant,
    ) -> Result<QueryOutput> {
        let busy0 = self.settings.host_link.as_ref().map(|l| l.busy());
        let routed0 = self.cluster.router_stats().bytes;
        metrics.take();
        metrics.begin(started);
        let cpu0 = adisk_core::stats::process_cpu_ns();
        let batches =
            collect_capped(plan.clone(), ctx.task_ctx(), self.opts.result_cap_bytes).await;
        // A failed run's statistics are dropped with it: do not wait for streams of a dead disk
        // that will never report (a failover would wait up to the whole settle time).
        let batches = batches?;
        // Streams dropped early (LIMIT) report from a spawned task.
        metrics.settle(Duration::from_secs(2)).await;
        let scans = metrics.take();
        let link_busy = match (&self.settings.host_link, busy0) {
            (Some(l), Some(b0)) => Some(l.busy().saturating_sub(b0)),
            _ => None,
        };
        let shipped: u64 = scans
            .iter()
            .filter_map(|r| r.stats.as_ref())
            .map(|s| s.bytes_shipped_host)
            .sum();
        self.cluster.observe_transfer(shipped, started.elapsed());
        Ok(QueryOutput {
            schema: plan.schema(),
            batches,
            scans,
            wall: started.elapsed(),
            planning: Duration::ZERO,
            host_cpu_ns: adisk_core::stats::process_cpu_ns().saturating_sub(cpu0),
            plan,
            link_busy,
            failover: vec![],
            disks: vec![],
            choice: None,
            estimate: None,
            inter_group_bytes: self
                .cluster
                .config()
                .grouped()
                .then(|| self.cluster.router_stats().bytes.saturating_sub(routed0)),
        })
    }

    /// EXPLAIN: the plan with each operator marked disk or host, the bundles and the expected
    /// data reduction.
    pub async fn explain(&self, sql: &str) -> Result<String> {
        let (plan, choice) = self.plan_with_choice(sql).await?;
        let mut text = report::explain(&plan, &self.settings);
        if let Some(c) = choice {
            text.push_str(&format!("\n{c}\n"));
        }
        Ok(text)
    }

    /// The plan `sql` would run with, and at `auto` the cost model's choice between the
    /// host-centric and the `disks` plan, with its estimates.
    pub async fn plan_with_choice(
        &self,
        sql: &str,
    ) -> Result<(Arc<dyn ExecutionPlan>, Option<String>)> {
        let c = self.chosen(sql, false).await?;
        Ok((c.plan.clone(), c.notes()))
    }

    /// EXPLAIN ANALYZE: runs the query and reports bytes at every stage per disk and in total.
    pub async fn explain_analyze(&self, sql: &str) -> Result<(String, QueryOutput)> {
        let out = self.query_analyzed(sql).await?;
        Ok((report::explain_analyze(&out, &self.settings), out))
    }
}

/// Uncorrelated scalar subqueries run before their query is planned ([`scalars`]).
impl SqlEngine {
    /// Plans `sql` in `session` and runs its uncorrelated scalar subqueries (one after the
    /// other, each through this engine); the plan with their values in place.
    ///
    /// # Errors
    /// Planning errors; a subquery's run failing or giving more than one row.
    /// A query with an uncorrelated scalar subquery runs it first ([`SqlEngine::scalars_first`]);
    /// another keeps the logical plan made to find out (None if its text holds no subquery).
    async fn first_of(
        &self,
        session: &Session,
        sql: &str,
        analyze: bool,
    ) -> Result<(Option<scalars::First>, Option<DataFrame>)> {
        if !scalars::may_hold(sql) {
            return Ok((None, None));
        }
        let df = Self::logical(&session.0, sql).await?;
        Ok(match scalars::any(df.logical_plan()) {
            true => (Some(self.scalars_first(session, df, analyze).await?), None),
            false => (None, Some(df)),
        })
    }

    async fn scalars_first(
        &self,
        session: &Session,
        df: DataFrame,
        analyze: bool,
    ) -> Result<scalars::First> {
        let ctx = &session.0;
        let state = ctx.state();
        let optimized = state
            .optimize(df.logical_plan())
            .map_err(plan_err("planning the query"))?;
        let found = scalars::find(&optimized);
        if found.is_empty() {
            return Ok(scalars::First {
                plan: Some(optimized),
                ..scalars::First::default()
            });
        }
        let started = Instant::now();
        let mut first = scalars::First::default();
        for s in &found {
            let text = scalars::sql_of(s);
            let out = self
                .run_subquery(session, s, text.as_deref(), analyze)
                .await?;
            let value = scalars::value_of(&out.schema, &out.batches)
                .map_err(|e| crate::HostError::Invalid(e.strip_backtrace()))?;
            let key = text.unwrap_or_else(|| scalars::key(s));
            first.values.push((key, value));
            first.scans.extend(out.scans);
        }
        let shown: Vec<String> = first.values.iter().map(|(_, v)| v.to_string()).collect();
        first.note = Some(format!(
            "scalar subqueries run first, their values planned in ({:.1} ms): {}",
            started.elapsed().as_secs_f64() * 1e3,
            shown.join(", ")
        ));
        let planned = scalars::substitute(optimized, &first.values)
            .and_then(|p| state.optimize(&p))
            .map_err(plan_err("planning the query with its subqueries' values"))?;
        first.plan = Some(planned);
        Ok(first)
    }

    /// Runs a scalar subquery as a query of its own: as `text`, its SQL, so that it takes the
    /// same way as any (`auto`'s choice and what it measured, failover); where it has no SQL
    /// or that does not plan, as DataFusion planned it, in `session`.
    async fn run_subquery(
        &self,
        session: &Session,
        s: &datafusion::logical_expr::Subquery,
        text: Option<&str>,
        analyze: bool,
    ) -> Result<QueryOutput> {
        if let Some(text) = text {
            match Box::pin(self.run(text, analyze)).await {
                Ok(out) => {
                    tracing::debug!(%text, choice = ?out.choice, "a scalar subquery ran first");
                    return Ok(out);
                }
                Err(crate::HostError::Plan { context, source }) => {
                    tracing::debug!(%text, %context, %source, "a scalar subquery as SQL does not plan");
                }
                done => return done,
            }
        }
        let df = session
            .0
            .execute_logical_plan(s.subquery.as_ref().clone())
            .await
            .map_err(plan_err("planning a scalar subquery"))?;
        let plan = self.plan_frame(df).await?;
        self.execute(plan, session.clone(), Instant::now()).await
    }
}

#[cfg(test)]
mod tests {
    use super::corrupt_partition;

    /// An unreachable disk stays one however DataFusion wrapped it (a repartition shares its
    /// input's error; context; an Arrow error): failover must see it (a link cut at `auto`
    /// ended a query with `running the query: External error: disk 2 … unreachable`).
    #[test]
    fn a_disk_error_is_found_through_datafusions_wrappers() {
        use datafusion::error::DataFusionError as E;
        let lost = || {
            Box::new(crate::HostError::Unreachable {
                disk: 2,
                address: "10.0.0.13:7000".into(),
                message: "h2 protocol error".into(),
            })
        };
        let wrapped = [
            E::External(lost()),
            E::Shared(std::sync::Arc::new(E::External(lost()))),
            E::Context(
                "hash join".into(),
                Box::new(E::Shared(std::sync::Arc::new(E::External(lost())))),
            ),
            E::ArrowError(
                Box::new(arrow::error::ArrowError::ExternalError(lost())),
                None,
            ),
        ];
        for e in wrapped {
            let text = e.to_string();
            let h = super::error::plan_err("running the query")(e);
            assert!(h.is_unreachable(), "{text} became {h}");
        }
        let plain = super::error::plan_err("planning")(E::Plan("no such column".into()));
        assert!(!plain.is_unreachable());
    }

    #[test]
    fn a_disks_data_loss_names_the_table_and_partition() {
        let m = "job q7-2 failed: corrupt partition /d/disk-3/tables/line_item/g-00ab-1f/part-00002.parquet: column chunk 3 of row group 1 (bytes 10..20) has CRC-32 1 but the manifest says 2";
        assert_eq!(corrupt_partition(m), Some(("line_item".into(), 2)));
        assert_eq!(
            corrupt_partition(
                "corrupt partition tables/t/part-00011.parquet: size 1 but the manifest says 2"
            ),
            Some(("t".into(), 11))
        );
        assert_eq!(corrupt_partition("disk full"), None);
        assert_eq!(
            corrupt_partition("corrupt partition /d/tables/t/notes.txt: x"),
            None
        );
    }
}

/// Whether a query failed because a disk stage ran out of its memory (DataFusion's
/// "Resources exhausted" inside a stage fragment): a plan that spills may still answer.
fn out_of_memory(e: &HostError) -> bool {
    let text = e.to_string();
    text.contains("Resources exhausted") && text.contains("sql_stage")
}
