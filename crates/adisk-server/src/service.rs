//! The Flight SQL service: statement queries, prepared statements with bound parameters, the
//! metadata calls clients make on connect, behind basic-auth → bearer-token authentication.
//!
//! Every query is planned and run by an [`SqlEngine`] over the server's [`Cluster`] (one path
//! for every request: the same planner and job builder as `adisk sql`) that serves no other
//! query meanwhile — idle engines over the current catalog view are lent again — so concurrent
//! queries keep their own statistics; queries run on a runtime of their own. A statement handle is bound to the user who made it and
//! expires after [`HANDLE_TTL`]; at most [`MAX_HANDLES`] are open at once.
use crate::auth::{AuthError, Tokens, Users};
use adisk_core::protocol::InstallDisklet;
use adisk_host::sql::{ClusterView, Offload, Planned, SqlEngine, SqlOptions};
use adisk_host::{Cluster, HostError};
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandPreparedStatementQuery, CommandStatementQuery, DoPutPreparedStatementResult,
    ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse,
    IpcMessage, SchemaAsIpc, Ticket,
};
use base64::Engine as _;
use datafusion::common::ScalarValue;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status, Streaming};

/// The Flight action installing a disklet on every disk ([`InstallDisklet`] as its body).
pub const DISKLET_INSTALL: &str = "adisk.disklet_install";

/// The catalog and schema every table is in (DataFusion's defaults, as `adisk sql` sees them).
pub const CATALOG: &str = "datafusion";
/// See [`CATALOG`].
pub const SCHEMA: &str = "public";
/// How long a statement or prepared-statement handle stays valid.
pub const HANDLE_TTL: Duration = Duration::from_secs(600);
/// Most statement and prepared-statement handles open at once.
pub const MAX_HANDLES: usize = 4096;
/// Most parameters a prepared statement may bind.
pub const MAX_PARAMETERS: usize = 1024;

/// How many queries run at once, and how many may wait for a turn.
#[derive(Clone, Copy, Debug)]
pub struct Admission {
    /// Queries running at once.
    pub running: usize,
    /// Queries waiting for a turn; one more is refused as `busy`.
    pub queued: usize,
}

/// Who may connect.
pub enum Access {
    /// Users of a users file log in with a password.
    Users(Users),
    /// Anyone who reaches the port (`--auth none`: the local demo only).
    Open,
}

/// A query to run when its ticket is read, or a prepared statement with its parameters.
struct Handle {
    user: String,
    sql: String,
    params: Vec<ScalarValue>,
    expires: Instant,
    /// The engine that planned a statement at `GetFlightInfo` and its plan, run as it is at
    /// `DoGet` (planned once).
    planned: Option<(Leased, Planned)>,
    /// `sql` is `EXPLAIN [ANALYZE] …`: ActiveDisk's report as rows.
    explain: bool,
}

/// `sql` as `EXPLAIN [ANALYZE] query`: whether it analyzes, and the query.
fn explain_of(sql: &str) -> Option<(bool, &str)> {
    let rest = leading_word(sql, "EXPLAIN")?;
    Some(match leading_word(rest, "ANALYZE") {
        Some(query) => (true, query),
        None => (false, rest),
    })
}

/// What follows word `w` (any case) at the start of `s`, if `s` starts with it.
fn leading_word<'a>(s: &'a str, w: &str) -> Option<&'a str> {
    let s = s.trim_start();
    let head = s.get(..w.len())?;
    let rest = &s[w.len()..];
    (head.eq_ignore_ascii_case(w) && rest.starts_with(char::is_whitespace)).then_some(rest)
}

/// The schema of an explain result: one line of the report per row.
fn explain_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("plan", DataType::Utf8, false)]))
}

/// Per-disk endpoints: whether results made entirely at the disks are read from them, and
/// how long their tickets stay valid.
#[derive(Clone, Copy, Debug)]
pub struct Endpoints {
    /// Serve such results as one endpoint per disk (else one endpoint at this service).
    pub per_disk: bool,
    /// How long a ticket stays valid.
    pub ttl: Duration,
}

impl Default for Endpoints {
    fn default() -> Self {
        Endpoints {
            per_disk: true,
            ttl: adisk_core::endpoint::DEFAULT_TTL,
        }
    }
}

/// The service (one per server; cheap to clone).
#[derive(Clone)]
pub struct SqlService {
    inner: Arc<Inner>,
}

struct Inner {
    cluster: Arc<Cluster>,
    options: SqlOptions,
    access: Access,
    tokens: Tokens,
    statements: Mutex<HashMap<Vec<u8>, Handle>>,
    prepared: Mutex<HashMap<Vec<u8>, Handle>>,
    info: SqlInfoData,
    admission: Admission,
    metrics: Arc<crate::metrics::Metrics>,
    running: Arc<tokio::sync::Semaphore>,
    waiting: std::sync::atomic::AtomicUsize,
    endpoints: Endpoints,
    /// Statements being run (their ticket was read), by handle: who runs it, and how to stop
    /// it (`CancelFlightInfo`).
    running_now: Mutex<HashMap<Vec<u8>, (String, Arc<tokio::sync::Notify>)>>,
    /// The catalog queries are planned over, fetched again when older than [`VIEW_TTL`].
    view: tokio::sync::Mutex<Option<(Arc<ClusterView>, Instant)>>,
    /// Idle engines over the current view, lent to one query at a time: a query does not pay
    /// for building an engine (its DataFusion session) when one is idle.
    pool: Mutex<Vec<Leased>>,
    /// Where queries run (DataFusion's operators and the disks' streams), apart from the
    /// runtime that answers calls: a CPU-heavy query at the host cannot starve logins,
    /// catalog fetches and the disks' health checks into timeouts.
    queries: QueryRuntime,
    /// The last queries' traces ([`crate::traces`]).
    traces: Arc<crate::traces::TraceStore>,
}

/// The service's query runtime; shut down in the background when the service ends (a runtime
/// may not be dropped where it would block).
struct QueryRuntime(Option<tokio::runtime::Runtime>);

impl Drop for QueryRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl QueryRuntime {
    fn new() -> Self {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("adisk-query")
            .enable_all()
            .build()
            .ok();
        if rt.is_none() {
            tracing::warn!("no separate query runtime: queries share the service's");
        }
        QueryRuntime(rt)
    }

    /// Runs `work` on the query runtime (or here, without one); dropping the returned future
    /// aborts it (a cancelled or abandoned query stops, and with it its disk jobs).
    async fn run<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, Status> {
        let Some(rt) = &self.0 else {
            return Ok(work.await);
        };
        struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
        impl<T> Drop for AbortOnDrop<T> {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let mut task = AbortOnDrop(rt.spawn(work));
        (&mut task.0)
            .await
            .map_err(|e| Status::internal(format!("the query's task ended: {e}")))
    }
}

/// How long the service plans over one fetch of the catalog: a table loaded (or dropped) by
/// another process is seen within this long; a failover fetches it again at once.
pub const VIEW_TTL: Duration = Duration::from_secs(1);

/// A statement handle's SQL, parameters and plan.
type Found = (String, Vec<ScalarValue>, Option<(Leased, Planned)>, bool);

/// An engine lent to one query at a time, and the catalog view it was built over
/// ([`SqlService::engine`], [`SqlService::give_back`]).
#[derive(Clone)]
struct Leased {
    view: Arc<ClusterView>,
    engine: Arc<SqlEngine>,
}

impl std::ops::Deref for Leased {
    type Target = SqlEngine;
    fn deref(&self) -> &SqlEngine {
        &self.engine
    }
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

fn status(e: HostError) -> Status {
    let msg = e.to_string();
    match e {
        HostError::Unreachable { .. } | HostError::LostPartitions { .. } => {
            Status::unavailable(msg)
        }
        HostError::IncompleteTable { .. } => Status::unavailable(msg),
        HostError::Disk { code, .. } => disk_status(&code, msg),
        HostError::ResultTooLarge { .. } => Status::resource_exhausted(msg),
        HostError::UnknownTable(_)
        | HostError::Invalid(_)
        | HostError::Plan { .. }
        | HostError::Limit(_) => Status::invalid_argument(msg),
        _ => Status::internal(msg),
    }
}

/// A disk's failure with the code the disk gave it (named as [`tonic::Code`]'s `Debug`).
fn disk_status(code: &str, msg: String) -> Status {
    use tonic::Code as C;
    let code = [
        C::Cancelled,
        C::InvalidArgument,
        C::DeadlineExceeded,
        C::NotFound,
        C::PermissionDenied,
        C::ResourceExhausted,
        C::FailedPrecondition,
        C::Aborted,
        C::Unavailable,
        C::DataLoss,
        C::Unauthenticated,
    ]
    .into_iter()
    .find(|c| format!("{c:?}") == code)
    .unwrap_or(C::Internal);
    Status::new(code, msg)
}

fn new_handle() -> Vec<u8> {
    let mut h = vec![0u8; 16];
    getrandom::fill(&mut h).expect("the OS gives random bytes");
    h
}

fn schema_bytes(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let message: IpcMessage =
        SchemaAsIpc::new(schema, &arrow::ipc::writer::IpcWriteOptions::default())
            .try_into()
            .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?;
    Ok(message.0)
}

/// A result as a Flight data stream.
fn encode(schema: SchemaRef, batches: Vec<RecordBatch>) -> Response<DoGetStream> {
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .map_err(Status::from);
    Response::new(Box::pin(stream))
}

/// A FlightInfo whose one endpoint's ticket is `ticket`.
fn info(
    schema: &Schema,
    ticket: Vec<u8>,
    descriptor: FlightDescriptor,
) -> Result<FlightInfo, Status> {
    Ok(FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
        .with_descriptor(descriptor))
}

impl SqlService {
    /// A service over `cluster` running queries with `options`.
    pub fn new(
        cluster: Arc<Cluster>,
        options: SqlOptions,
        access: Access,
        admission: Admission,
        endpoints: Endpoints,
    ) -> Self {
        let mut b = SqlInfoDataBuilder::new();
        b.append(SqlInfo::FlightSqlServerName, "ActiveDisk");
        b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        b.append(SqlInfo::FlightSqlServerArrowVersion, "59");
        b.append(SqlInfo::FlightSqlServerReadOnly, true);
        b.append(SqlInfo::FlightSqlServerSql, true);
        b.append(SqlInfo::FlightSqlServerSubstrait, false);
        b.append(SqlInfo::FlightSqlServerTransaction, 0i32);
        b.append(SqlInfo::FlightSqlServerCancel, true);
        b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        SqlService {
            inner: Arc::new(Inner {
                cluster,
                options,
                access,
                tokens: Tokens::default(),
                statements: Mutex::new(HashMap::new()),
                prepared: Mutex::new(HashMap::new()),
                info: b.build().expect("static SQL info builds"),
                admission,
                metrics: Arc::default(),
                running: Arc::new(tokio::sync::Semaphore::new(admission.running.max(1))),
                waiting: std::sync::atomic::AtomicUsize::new(0),
                endpoints,
                running_now: Mutex::new(HashMap::new()),
                view: tokio::sync::Mutex::new(None),
                pool: Mutex::new(Vec::new()),
                queries: QueryRuntime::new(),
                traces: Arc::new(crate::traces::TraceStore::new(
                    crate::traces::DEFAULT_KEEP,
                    crate::traces::MAX_BYTES,
                )),
            }),
        }
    }

    /// The last queries' traces: how many are kept can be changed
    /// ([`crate::traces::TraceStore::set_keep`]).
    pub fn traces(&self) -> Arc<crate::traces::TraceStore> {
        self.inner.traces.clone()
    }

    /// The service's metrics (`/metrics`).
    pub fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        self.inner.metrics.clone()
    }

    /// The cluster it serves.
    pub fn cluster(&self) -> Arc<Cluster> {
        self.inner.cluster.clone()
    }

    /// The user a request comes from: its bearer token's (or anyone, with open access).
    fn user<T>(&self, req: &Request<T>) -> Result<String, Status> {
        if matches!(self.inner.access, Access::Open) {
            return Ok("anonymous".into());
        }
        let header = req.metadata().get("authorization").ok_or_else(|| {
            Status::unauthenticated("no credentials: log in with a user name and password")
        })?;
        let text = header
            .to_str()
            .map_err(|_| Status::unauthenticated("the authorization header is not text"))?;
        let token = text.strip_prefix("Bearer ").ok_or_else(|| {
            Status::unauthenticated("expected a bearer token (log in with basic auth first)")
        })?;
        self.inner.tokens.user(token).map_err(|e| {
            let refused = Status::unauthenticated(e.to_string());
            self.inner.metrics.failed(&refused);
            refused
        })
    }

    /// A turn to run a query: at once when fewer than `running` run, after waiting when fewer
    /// than `queued` wait, else `busy`.
    async fn turn(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        use std::sync::atomic::Ordering;
        if let Ok(p) = self.inner.running.clone().try_acquire_owned() {
            return Ok(p);
        }
        let a = self.inner.admission;
        if self.inner.waiting.fetch_add(1, Ordering::SeqCst) >= a.queued {
            self.inner.waiting.fetch_sub(1, Ordering::SeqCst);
            self.inner
                .metrics
                .queries
                .with_label_values(&["busy"])
                .inc();
            return Err(Status::resource_exhausted(format!(
                "busy: {} queries running and {} waiting; retry later",
                a.running, a.queued
            )));
        }
        self.inner.metrics.queued.inc();
        let permit = self.inner.running.clone().acquire_owned().await;
        self.inner.metrics.queued.dec();
        self.inner.waiting.fetch_sub(1, Ordering::SeqCst);
        permit.map_err(|_| Status::unavailable("the server is shutting down"))
    }

    /// An engine for one query. Unless `--program` names one, each engine is a program of its
    /// own at the disks, so concurrent queries share a disk's processing fairly, query by
    /// query (DiskOS schedules by program).
    ///
    /// An idle engine over the current catalog view is lent when there is one (each engine is
    /// its own program and serves one query at a time, so concurrent queries still share the
    /// disks query by query); [`SqlService::give_back`] returns it.
    async fn engine(&self) -> Result<Leased, Status> {
        let view = self.view().await?;
        {
            let mut pool = lock(&self.inner.pool);
            pool.retain(|l| Arc::ptr_eq(&l.view, &view));
            if let Some(idle) = pool.pop() {
                return Ok(idle);
            }
        }
        let mut options = self.inner.options.clone();
        if options.program.is_none() {
            options.program = Some(format!("serve-{}", hex::encode(&new_handle()[..6])));
        }
        let engine = SqlEngine::with_view(self.inner.cluster.clone(), options, &view);
        Ok(Leased {
            view,
            engine: Arc::new(engine.map_err(status)?),
        })
    }

    /// Returns a lent engine to the pool (at most as many as queries may run at once).
    fn give_back(&self, leased: Leased) {
        if Arc::strong_count(&leased.engine) > 1 {
            return;
        }
        let mut pool = lock(&self.inner.pool);
        if pool.len() < self.inner.admission.running.max(1) {
            pool.push(leased);
        }
    }

    /// The cluster's catalog as of at most [`VIEW_TTL`] ago (one fetch for all the queries
    /// that start meanwhile). A fetch that finds the view unchanged (the disks answer that
    /// their catalogs are the versions it holds, and the dead disks, memory and link figures
    /// are the same) keeps it, and with it the idle engines built over it.
    async fn view(&self) -> Result<Arc<ClusterView>, Status> {
        let mut slot = self.inner.view.lock().await;
        if let Some((v, _)) = slot.as_ref().filter(|(_, at)| at.elapsed() < VIEW_TTL) {
            return Ok(v.clone());
        }
        let fetched = ClusterView::fetch(
            &self.inner.cluster,
            self.inner.options.offload == Offload::Auto,
        )
        .await
        .map_err(status)?;
        let view = match slot.take() {
            Some((held, _)) if held.same_as(&fetched) => held,
            _ => Arc::new(fetched),
        };
        *slot = Some((view.clone(), Instant::now()));
        Ok(view)
    }

    /// Stores a handle in `map` (statements or prepared statements), within [`MAX_HANDLES`].
    fn keep(map: &Mutex<HashMap<Vec<u8>, Handle>>, handle: Handle) -> Result<Vec<u8>, Status> {
        let mut map = map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        map.retain(|_, h| h.expires > now);
        if map.len() >= MAX_HANDLES {
            return Err(Status::resource_exhausted(format!(
                "busy: {MAX_HANDLES} statements are open; close some or retry later"
            )));
        }
        let id = new_handle();
        map.insert(id.clone(), handle);
        Ok(id)
    }

    /// The handle `id` of `user` in `map` (removed when `take`).
    fn find(
        map: &Mutex<HashMap<Vec<u8>, Handle>>,
        id: &[u8],
        user: &str,
        take: bool,
    ) -> Result<Found, Status> {
        let mut map = map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let gone = || Status::not_found("no such statement (closed, expired or never made)");
        let h = map.get(id).ok_or_else(gone)?;
        if h.user != user || h.expires <= Instant::now() {
            return Err(gone());
        }
        if take {
            let h = map.remove(id).ok_or_else(gone)?;
            return Ok((h.sql, h.params, h.planned, h.explain));
        }
        Ok((
            h.sql.clone(),
            h.params.clone(),
            h.planned.clone(),
            h.explain,
        ))
    }

    /// Runs `EXPLAIN [ANALYZE]` of `sql` in its turn: the report `adisk explain` prints, a line
    /// per row.
    async fn run_explain(&self, sql: &str) -> Result<adisk_host::sql::QueryOutput, Status> {
        let Some((analyze, query)) = explain_of(sql) else {
            return Err(Status::internal("not an EXPLAIN statement"));
        };
        let _turn = self.turn().await?;
        self.inner.metrics.running.inc();
        let text = match self.engine().await {
            Ok(e) => {
                let query = query.to_string();
                let ran = self
                    .inner
                    .queries
                    .run(async move {
                        let text = match analyze {
                            true => e.explain_analyze(&query).await.map(|r| r.0),
                            false => e.explain(&query).await,
                        };
                        (e, text)
                    })
                    .await;
                match ran {
                    Ok((e, text)) => {
                        self.give_back(e);
                        text.map_err(status)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        self.inner.metrics.running.dec();
        let text = text?;
        let lines: Vec<&str> = text.lines().collect();
        let batch = RecordBatch::try_new(
            explain_schema(),
            vec![Arc::new(arrow::array::StringArray::from(lines))],
        )
        .map_err(|e| Status::internal(e.to_string()))?;
        Ok(adisk_host::sql::QueryOutput::of_rows(
            explain_schema(),
            vec![batch],
        ))
    }

    /// Runs a statement in its turn.
    async fn run_statement(
        &self,
        sql: &str,
        params: Vec<ScalarValue>,
        planned: Option<(Leased, Planned)>,
    ) -> Result<adisk_host::sql::QueryOutput, Status> {
        let _turn = self.turn().await?;
        self.inner.metrics.running.inc();
        let out = match planned {
            Some((engine, planned)) => self.run_on_queries(engine, planned).await,
            None => self.plan_and_run(sql, params).await,
        };
        self.inner.metrics.running.dec();
        out
    }

    async fn plan_and_run(
        &self,
        sql: &str,
        params: Vec<ScalarValue>,
    ) -> Result<adisk_host::sql::QueryOutput, Status> {
        let engine = self.engine().await?;
        match Self::prepare(&engine, sql, params).await {
            Ok(planned) => self.run_on_queries(engine, planned).await,
            Err(e) => {
                self.give_back(engine);
                Err(e)
            }
        }
    }

    /// Runs a planned statement on the query runtime; gives its engine back when it ends.
    async fn run_on_queries(
        &self,
        engine: Leased,
        planned: Planned,
    ) -> Result<adisk_host::sql::QueryOutput, Status> {
        let ran = self
            .inner
            .queries
            .run(async move {
                let out = engine.run_planned(planned).await;
                (engine, out)
            })
            .await?;
        let (engine, out) = ran;
        self.give_back(engine);
        out.map_err(status)
    }

    /// Plans `sql`, with `params` bound to its placeholders when there are any.
    async fn prepare(
        engine: &SqlEngine,
        sql: &str,
        params: Vec<ScalarValue>,
    ) -> Result<Planned, Status> {
        if params.is_empty() {
            return engine.prepare(sql).await.map_err(status);
        }
        let df = engine.bound(sql, params).await.map_err(status)?;
        engine.prepare_frame(df, false).await.map_err(status)
    }

    /// Installs the disklet of `body` (an [`InstallDisklet`], as the disks take it) on every
    /// disk, for a user with the privilege (`adisk user add --allow-disklet-install`).
    async fn install_disklet(
        &self,
        user: &str,
        body: &[u8],
    ) -> Result<Vec<(u32, adisk_core::protocol::DiskletInfo)>, Status> {
        let allowed = match &self.inner.access {
            Access::Users(users) => users.may_install_disklets(user),
            Access::Open => false,
        };
        if !allowed {
            return Err(Status::permission_denied(format!(
                "user `{user}` may not install disklets (`adisk user add {user} --allow-disklet-install` grants it)"
            )));
        }
        let request: InstallDisklet = serde_json::from_slice(body)
            .map_err(|e| Status::invalid_argument(format!("malformed disklet install: {e}")))?;
        tracing::info!(user, name = %request.name, "disklet install");
        adisk_host::disklet::install(
            &self.inner.cluster,
            &request.name,
            request.module.0,
            request.scratch_kib,
        )
        .await
        .map_err(status)
    }

    /// Cancels statement `id` of `user`: forgotten when not yet read, stopped when running.
    fn cancel(&self, id: &[u8], user: &str) -> arrow_flight::CancelStatus {
        let mut waiting = lock(&self.inner.statements);
        if waiting.get(id).is_some_and(|h| h.user == user) {
            waiting.remove(id);
            return arrow_flight::CancelStatus::Cancelled;
        }
        drop(waiting);
        match lock(&self.inner.running_now).get(id) {
            Some((owner, stop)) if owner == user => {
                stop.notify_one();
                arrow_flight::CancelStatus::Cancelled
            }
            _ => arrow_flight::CancelStatus::NotCancellable,
        }
    }

    /// The FlightInfo of a result made entirely at the disks: one endpoint per disk, at its
    /// address, with a ticket sealed for that disk (None: not such a result, per-disk
    /// endpoints are off, or the cluster has no key to seal with).
    fn disk_endpoints(
        &self,
        engine: &SqlEngine,
        planned: &Planned,
        descriptor: &FlightDescriptor,
    ) -> Result<Option<FlightInfo>, Status> {
        let e = self.inner.endpoints;
        let Some(jobs) = e.per_disk.then(|| engine.endpoint_jobs(planned)).flatten() else {
            return Ok(None);
        };
        let schema = planned.schema();
        let query = hex::encode(new_handle());
        let expires_ms = adisk_core::auth::now_ms() + e.ttl.as_millis() as u64;
        let cluster = &self.inner.cluster;
        let mut info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?
            .with_descriptor(descriptor.clone());
        for (disk, job) in jobs {
            let claim = adisk_core::endpoint::EndpointClaim {
                query: query.clone(),
                disk,
                expires_ms,
                nonce: adisk_core::endpoint::nonce(),
                columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
                job,
            };
            let Some(ticket) = cluster.seal_endpoint(&claim) else {
                return Ok(None);
            };
            info = info.with_endpoint(
                FlightEndpoint::new()
                    .with_ticket(Ticket::new(ticket))
                    .with_location(format!(
                        "{}://{}",
                        if cluster.tls().is_some() {
                            "grpc+tls"
                        } else {
                            "grpc+tcp"
                        },
                        cluster.address(disk)
                    )),
            );
        }
        self.inner.metrics.endpoint_queries.inc();
        Ok(Some(info))
    }

    /// Plans `sql` with `params` and returns the FlightInfo of a one-shot ticket that runs it.
    async fn statement_info(
        &self,
        user: String,
        sql: String,
        params: Vec<ScalarValue>,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        if let Some((_, query)) = explain_of(&sql) {
            // Checked now, so that a bad query fails at GetFlightInfo like any other.
            let engine = self.engine().await?;
            let checked = engine.plan(query).await;
            self.give_back(engine);
            checked.map_err(status)?;
            let handle = Handle {
                user,
                sql,
                params,
                expires: Instant::now() + HANDLE_TTL,
                planned: None,
                explain: true,
            };
            return self.ticket_info(handle, &explain_schema(), descriptor);
        }
        let engine = self.engine().await?;
        let planned = Self::prepare(&engine, &sql, params.clone()).await?;
        if let Some(info) = self.disk_endpoints(&engine, &planned, &descriptor)? {
            self.give_back(engine);
            tracing::info!(
                user,
                endpoints = info.endpoint.len(),
                "flight sql query read from the disks"
            );
            return Ok(Response::new(info));
        }
        let schema = planned.schema();
        let handle = Handle {
            user,
            sql,
            params,
            expires: Instant::now() + HANDLE_TTL,
            planned: Some((engine, planned)),
            explain: false,
        };
        self.ticket_info(handle, &schema, descriptor)
    }

    /// Keeps `handle` and answers the FlightInfo of its one-shot ticket.
    fn ticket_info(
        &self,
        handle: Handle,
        schema: &Schema,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let id = Self::keep(&self.inner.statements, handle)?;
        let ticket = TicketStatementQuery {
            statement_handle: id.into(),
        };
        Ok(Response::new(info(
            schema,
            ticket.as_any().encode_to_vec(),
            descriptor,
        )?))
    }

    /// A metadata result: a FlightInfo whose ticket is the command itself.
    fn command_info(
        cmd: impl ProstMessageExt,
        schema: &Schema,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(info(
            schema,
            cmd.as_any().encode_to_vec(),
            descriptor,
        )?))
    }

    /// The answer to a trace action ([`crate::traces`]) of `user`; None for another action.
    async fn trace_action(&self, user: &str, action: &Action) -> Result<Option<Vec<u8>>, Status> {
        let json = |e: serde_json::Error| Status::internal(e.to_string());
        match action.r#type.as_str() {
            crate::traces::LIST_ACTION => {
                let list = self.inner.traces.list(user);
                Ok(Some(serde_json::to_vec(&list).map_err(json)?))
            }
            crate::traces::GET_ACTION => {
                let req: crate::traces::TraceRequest = serde_json::from_slice(&action.body)
                    .map_err(|e| Status::invalid_argument(format!("adisk.trace: {e}")))?;
                let trace = self.inner.traces.get(user, &req).await?;
                Ok(Some(trace.as_ref().clone()))
            }
            _ => Ok(None),
        }
    }

    fn verify_basic(&self, header: Option<&str>) -> Result<String, Status> {
        let Access::Users(users) = &self.inner.access else {
            return Ok("anonymous".into());
        };
        let basic = header
            .and_then(|h| h.strip_prefix("Basic "))
            .ok_or_else(|| {
                Status::unauthenticated("log in with basic auth (user name and password)")
            })?;
        // Padded (RFC 7617) or not (the Go Flight client's raw encoding).
        let decoded = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(basic.trim().trim_end_matches('='))
            .map_err(|_| Status::unauthenticated("basic auth: not base64"))?;
        let text = String::from_utf8(decoded)
            .map_err(|_| Status::unauthenticated("basic auth: not UTF-8"))?;
        let (name, password) = text
            .split_once(':')
            .ok_or_else(|| Status::unauthenticated("basic auth: expected user:password"))?;
        users.verify(name, password).map_err(|e| match e {
            AuthError::WrongCredentials => Status::unauthenticated(e.to_string()),
            other => Status::internal(other.to_string()),
        })?;
        Ok(name.to_string())
    }
}

/// The result schema of `GetPrimaryKeys` (Flight SQL's `CommandGetPrimaryKeys`).
fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The statement handle a FlightInfo's first endpoint's ticket names.
/// The statement handle in `info`'s ticket (None for a ticket of another kind, such as a
/// disk's endpoint).
pub(crate) fn statement_handle(info: &FlightInfo) -> Option<Vec<u8>> {
    let ticket = info.endpoint.first()?.ticket.as_ref()?;
    let any = Any::decode(ticket.ticket.clone()).ok()?;
    let t: TicketStatementQuery = any.unpack().ok()??;
    Some(t.statement_handle.to_vec())
}

/// The type a parameter is announced with in a prepared statement's parameter schema: string
/// and binary views (what DataFusion infers from the Parquet columns) as plain strings and
/// binaries, which every client can bind (the Flight SQL JDBC driver 18.3 refuses to prepare a
/// statement whose parameter schema holds `Utf8View`); a plain value binds to a view-typed
/// placeholder as it is.
fn parameter_type(inferred: &DataType) -> DataType {
    match inferred {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        other => other.clone(),
    }
}

/// The first row of a parameter batch, one value per column.
fn parameter_row(batches: &[RecordBatch]) -> Result<Vec<ScalarValue>, Status> {
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else {
        return Ok(vec![]);
    };
    if batch.num_columns() > MAX_PARAMETERS {
        return Err(Status::invalid_argument(format!(
            "{} parameters: at most {MAX_PARAMETERS}",
            batch.num_columns()
        )));
    }
    if batches.iter().map(RecordBatch::num_rows).sum::<usize>() > 1 {
        return Err(Status::invalid_argument(
            "one row of parameters per execution (batches of parameter rows are not supported)",
        ));
    }
    batch
        .columns()
        .iter()
        .map(|c| ScalarValue::try_from_array(c, 0))
        .collect::<Result<_, _>>()
        .map_err(|e| Status::invalid_argument(format!("a parameter value: {e}")))
}

#[tonic::async_trait]
impl FlightSqlService for SqlService {
    type FlightService = SqlService;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|h| h.to_str().ok())
            .map(str::to_string);
        // argon2 takes tens of milliseconds of CPU: off the async workers.
        let this = self.clone();
        let user = tokio::task::spawn_blocking(move || this.verify_basic(header.as_deref()))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let logins = &self.inner.metrics.logins;
        logins
            .with_label_values(&[if user.is_ok() { "ok" } else { "refused" }])
            .inc();
        let user = user?;
        let token = self.inner.tokens.issue(&user);
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into(),
        };
        let mut response: Response<Pin<Box<dyn Stream<Item = _> + Send>>> =
            Response::new(Box::pin(futures::stream::iter([Ok(reply)])));
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| Status::internal("a token that is not a header value"))?;
        response.metadata_mut().insert("authorization", value);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let user = self.user(&request)?;
        let info = self
            .statement_info(user, query.query, vec![], request.into_inner())
            .await;
        if let Err(e) = &info {
            self.inner.metrics.failed(e);
            self.inner
                .metrics
                .queries
                .with_label_values(&["error"])
                .inc();
        }
        info
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let user = self.user(&request)?;
        let (sql, params, planned, explain) = Self::find(
            &self.inner.statements,
            &ticket.statement_handle,
            &user,
            true,
        )?;
        let metrics = &self.inner.metrics;
        let id = ticket.statement_handle.to_vec();
        let stop = Arc::new(tokio::sync::Notify::new());
        lock(&self.inner.running_now).insert(id.clone(), (user.clone(), stop.clone()));
        let run = async {
            match explain {
                true => self.run_explain(&sql).await,
                false => self.run_statement(&sql, params, planned).await,
            }
        };
        // Cancelling drops the run: its plan's streams, and so its jobs at the disks.
        let run = tokio::select! {
            r = run => r,
            () = stop.notified() => Err(Status::cancelled("the query was cancelled (CancelFlightInfo)")),
        };
        lock(&self.inner.running_now).remove(&id);
        let out = match run {
            Ok(out) => out,
            Err(e) => {
                metrics.failed(&e);
                if e.code() != tonic::Code::ResourceExhausted {
                    metrics.queries.with_label_values(&["error"]).inc();
                }
                return Err(e);
            }
        };
        metrics.answered(&out);
        // A query's scan reports are copied only when its trace is kept.
        let trace = match explain || !self.inner.traces.enabled() {
            true => 0,
            false => self.inner.traces.record(
                crate::traces::Finished {
                    handle: &id,
                    user: &user,
                    text: &sql,
                    scans: out.scans.clone(),
                    wall: out.wall,
                    host_cpu_ns: out.host_cpu_ns,
                    rows: out.rows() as u64,
                },
                self.inner.cluster.clone(),
            ),
        };
        tracing::info!(
            user,
            trace,
            rows = out.rows(),
            wall_ms = out.wall.as_millis() as u64,
            "flight sql query"
        );
        Ok(encode(out.schema.clone(), out.batches))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let user = self.user(&request)?;
        let engine = self.engine().await?;
        let typed = engine.parameters(&query.query).await;
        self.give_back(engine);
        let (schema, types) = typed.map_err(status)?;
        let parameters = Schema::new(
            types
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    Field::new(
                        format!("${}", i + 1),
                        t.as_ref().map_or(DataType::Null, parameter_type),
                        true,
                    )
                })
                .collect::<Vec<_>>(),
        );
        let id = Self::keep(
            &self.inner.prepared,
            Handle {
                user,
                sql: query.query,
                params: vec![],
                expires: Instant::now() + HANDLE_TTL,
                planned: None,
                explain: false,
            },
        )?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: id.into(),
            dataset_schema: schema_bytes(&schema)?,
            parameter_schema: schema_bytes(&parameters)?,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let user = self.user(&request)?;
        let id = query.prepared_statement_handle.to_vec();
        Self::find(&self.inner.prepared, &id, &user, false)?;
        let batches: Vec<RecordBatch> =
            arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(
                request
                    .into_inner()
                    .map_err(arrow_flight::error::FlightError::from),
            )
            .take(2)
            .try_collect()
            .await
            .map_err(|e| Status::invalid_argument(format!("reading the parameters: {e}")))?;
        let params = parameter_row(&batches)?;
        let mut map = self
            .inner
            .prepared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(h) = map.get_mut(&id) {
            h.params = params;
        }
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(id.into()),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let user = self.user(&request)?;
        let (sql, params, _, _) = Self::find(
            &self.inner.prepared,
            &cmd.prepared_statement_handle,
            &user,
            false,
        )?;
        self.statement_info(user, sql, params, request.into_inner())
            .await
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let user = self.user(&request)?;
        Self::find(
            &self.inner.prepared,
            &query.prepared_statement_handle,
            &user,
            true,
        )?;
        Ok(())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user(&request)?;
        let schema = query.clone().into_builder().schema();
        Self::command_info(query, &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.user(&request)?;
        let mut b = query.into_builder();
        b.append(CATALOG);
        let batch = b.build().map_err(|e| Status::internal(e.to_string()))?;
        Ok(encode(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user(&request)?;
        let schema = query.clone().into_builder().schema();
        Self::command_info(query, &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.user(&request)?;
        let mut b = query.into_builder();
        b.append(CATALOG, SCHEMA);
        let batch = b.build().map_err(|e| Status::internal(e.to_string()))?;
        Ok(encode(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user(&request)?;
        let schema = query.clone().into_builder().schema();
        Self::command_info(query, &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.user(&request)?;
        let engine = self.engine().await?;
        let mut b = query.into_builder();
        for name in engine.tables() {
            let df = engine.table(name, false).await.map_err(status)?;
            b.append(CATALOG, SCHEMA, name, "TABLE", df.schema().as_arrow())
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        self.give_back(engine);
        let batch = b.build().map_err(|e| Status::internal(e.to_string()))?;
        Ok(encode(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user(&request)?;
        let schema = query.clone().into_builder().schema();
        Self::command_info(query, &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.user(&request)?;
        let mut b = query.into_builder();
        b.append("TABLE");
        let batch = b.build().map_err(|e| Status::internal(e.to_string()))?;
        Ok(encode(batch.schema(), vec![batch]))
    }

    /// Primary keys: none are declared (tables are Parquet partitions with no constraints), so
    /// the answer is the empty table of the standard schema, not an error.
    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user(&request)?;
        Self::command_info(query, &primary_keys_schema(), request.into_inner())
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.user(&request)?;
        let schema = primary_keys_schema();
        Ok(encode(schema.clone(), vec![RecordBatch::new_empty(schema)]))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user(&request)?;
        let schema = query.clone().into_builder(&self.inner.info).schema();
        Self::command_info(query, &schema, request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.user(&request)?;
        let batch = query
            .into_builder(&self.inner.info)
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(encode(batch.schema(), vec![batch]))
    }

    async fn do_get_fallback(
        &self,
        request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.user(&request)?;
        Err(Status::unimplemented(format!(
            "not supported by this server: {}",
            message.type_url
        )))
    }

    /// `CancelFlightInfo`: a statement not yet read is forgotten, a running one is stopped
    /// (its `DoGet` ends with `Cancelled`, its disk jobs are cancelled). Results read from
    /// per-disk endpoints are cancelled by the reader dropping its reads.
    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let user = self.user(&request)?;
        let action = request.into_inner();
        if action.r#type == crate::status::ACTION {
            let report = crate::status::report(&self.inner.cluster).await;
            let body = arrow_flight::Result {
                body: serde_json::to_vec(&report)
                    .map_err(|e| Status::internal(e.to_string()))?
                    .into(),
            };
            return Ok(Response::new(Box::pin(futures::stream::iter([Ok(body)]))));
        }
        if let Some(body) = self.trace_action(&user, &action).await? {
            let body = arrow_flight::Result { body: body.into() };
            return Ok(Response::new(Box::pin(futures::stream::iter([Ok(body)]))));
        }
        if action.r#type == DISKLET_INSTALL {
            let infos = self.install_disklet(&user, &action.body).await?;
            let body = arrow_flight::Result {
                body: serde_json::to_vec(&infos)
                    .map_err(|e| Status::internal(e.to_string()))?
                    .into(),
            };
            return Ok(Response::new(Box::pin(futures::stream::iter([Ok(body)]))));
        }
        if action.r#type != "CancelFlightInfo" {
            return Err(Status::unimplemented(format!(
                "not supported by this server: action {}",
                action.r#type
            )));
        }
        let cancel = arrow_flight::CancelFlightInfoRequest::decode(action.body)
            .map_err(|e| Status::invalid_argument(format!("CancelFlightInfo: {e}")))?;
        let state = match cancel.info.as_ref().and_then(statement_handle) {
            Some(id) => self.cancel(&id, &user),
            None => arrow_flight::CancelStatus::NotCancellable,
        };
        let result = arrow_flight::CancelFlightInfoResult::new(state);
        let body = arrow_flight::Result {
            body: result.encode_to_vec().into(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(body)]))))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_types_are_announced_without_views() {
        assert_eq!(parameter_type(&DataType::Utf8View), DataType::Utf8);
        assert_eq!(parameter_type(&DataType::BinaryView), DataType::Binary);
        assert_eq!(parameter_type(&DataType::Int64), DataType::Int64);
    }
}
