//! The Flight service of a disk node.
use adisk_core::protocol::{
    GenerateTpch, JobSpec, LoadCommit, LoadProgress, PutCommand, Sink, Source, action,
};
use adisk_diskos::DiskOs;
use adisk_diskos::exchange::PipeMessage;
use adisk_diskos::job::RunningJob;
use adisk_storage::StorageError;
use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tonic::{Request, Response, Status, Streaming};

use crate::pipes::{EndMark, FlightPipeConnector};
use crate::status::{json_result, status_of, storage_status};

pub use adisk_core::protocol::MAX_SPEC_FRACTION;

/// The Flight service of one disk.
pub struct DiskService {
    os: Arc<DiskOs>,
    shutdown: Arc<Notify>,
    disklets: Option<Arc<adisk_wasm::DiskletRegistry>>,
    /// How this disk reaches its peers (repair); None: it cannot repair.
    peers: Option<Arc<FlightPipeConnector>>,
    /// The cluster key, to open endpoint tickets with; None: none are served.
    auth: Option<Arc<adisk_core::auth::Verifier>>,
}

impl DiskService {
    /// One sender's pipe stream into exchange `id`'s inbox (waiting until a job claims it).
    /// The sender finished only if its stream ends with [`EndMark::End`]: one that ends with
    /// [`EndMark::Abort`] failed at its sender; one that fails, or ends without a mark, lost
    /// its link (the receiving job then fails Unavailable, naming the sender's disk).
    async fn receive_pipe(
        &self,
        id: &str,
        (sender, whose): (u32, &str),
        mut batches: BoxStream<'static, Result<RecordBatch, FlightError>>,
        mark: Arc<std::sync::Mutex<Option<EndMark>>>,
    ) -> Result<(), Status> {
        let mut inbox = self
            .os
            .exchanges()
            .sender(id)
            .map_err(Status::resource_exhausted)?;
        // Declared after the sender, so dropped before it: if this call ends (or its
        // sender resets it) before a job claimed the inbox, the inbox goes too.
        let mut forget = ForgetUnclaimed {
            os: self.os.clone(),
            id: id.to_string(),
            armed: true,
        };
        let terms = inbox
            .claimed(adisk_diskos::exchange::INBOX_CLAIM_TIMEOUT)
            .await
            .map_err(|e| Status::deadline_exceeded(format!("exchange {id}: {e}")))?;
        forget.armed = false;
        // (why, whether the link failed); None: the receiving job went away.
        let mut failure: Option<(String, bool)> = None;
        while let Some(b) = batches.next().await {
            match b {
                Ok(batch) => {
                    if let Err(why) = inbox.send_batch(batch, &terms).await {
                        failure = Some((why, false));
                        break;
                    }
                }
                Err(e) => {
                    failure = Some((format!("{whose}: its stream failed: {e}"), true));
                    break;
                }
            }
        }
        let failure = failure.or_else(|| match mark.lock().expect("mark lock").take() {
            Some(EndMark::End) => None,
            Some(EndMark::Abort(why)) => Some((format!("{whose} failed: {why}"), false)),
            None => Some((
                format!("{whose}: its stream ended without its end mark (its link was cut)"),
                true,
            )),
        });
        match failure {
            None => {
                let _ = inbox.send(PipeMessage::SenderDone(sender)).await;
                Ok(())
            }
            Some((why, link)) => {
                let _ = inbox
                    .send(PipeMessage::SenderFailed(sender, why.clone(), link))
                    .await;
                Err(Status::aborted(format!("exchange {id}: {why}")))
            }
        }
    }

    /// A service over a DiskOS.
    pub fn new(os: Arc<DiskOs>) -> Self {
        DiskService {
            os,
            shutdown: Arc::new(Notify::new()),
            disklets: None,
            peers: None,
            auth: None,
        }
    }
    /// A service whose DiskOS also runs the user disklets of `registry`.
    pub fn with_disklets(os: Arc<DiskOs>, registry: Arc<adisk_wasm::DiskletRegistry>) -> Self {
        os.set_user_disklets(registry.clone());
        DiskService {
            os,
            shutdown: Arc::new(Notify::new()),
            disklets: Some(registry),
            peers: None,
            auth: None,
        }
    }
    /// Refuses a job spec whose expressions, plans and parameters (everything but its Bloom
    /// filters, which its grant pays for) take more than [`MAX_SPEC_FRACTION`] of the memory
    /// budget (at least 1 MiB): building a job from them makes several copies (expressions,
    /// literals, plans) outside any grant, so their size is bounded by the budget instead. The
    /// check runs on the parsed spec, before any expression or plan is decoded.
    #[allow(clippy::result_large_err)]
    fn check_spec_size(&self, len: usize, spec: &JobSpec) -> Result<(), Status> {
        let max = adisk_core::protocol::max_spec_bytes(self.os.config().memory_bytes);
        // A filter travels as base64: 4 bytes for every 3.
        let filters: u64 = spec
            .stages
            .iter()
            .filter_map(|s| match &s.disklet {
                adisk_core::protocol::DiskletSpec::BloomProbe { filter, .. } => {
                    Some(filter.size_bytes() as u64 * 4 / 3)
                }
                _ => None,
            })
            .sum();
        let rest = (len as u64).saturating_sub(filters);
        if rest > max {
            return Err(Status::invalid_argument(format!(
                "a job spec with {rest} bytes besides its Bloom filters exceeds this disk's limit of {max} bytes (1/{MAX_SPEC_FRACTION} of its memory budget)"
            )));
        }
        Ok(())
    }

    /// Lets the disk repair itself from its peers, reached through `connector`.
    pub fn with_peers(mut self, connector: Arc<FlightPipeConnector>) -> Self {
        self.peers = Some(connector);
        self
    }

    /// Serves endpoint tickets sealed with this cluster key ([`adisk_core::endpoint`]).
    pub fn with_auth(mut self, auth: Option<Arc<adisk_core::auth::Verifier>>) -> Self {
        self.auth = auth;
        self
    }

    /// Opens an endpoint ticket: the sealed job, when it may run here now.
    #[allow(clippy::result_large_err)]
    fn endpoint_job(&self, ticket: &[u8]) -> Result<adisk_core::endpoint::EndpointClaim, Status> {
        let verifier = self.auth.as_ref().ok_or_else(|| {
            Status::failed_precondition(
                "this disk runs without the cluster key (--insecure): it cannot check endpoint tickets",
            )
        })?;
        let claim = adisk_core::endpoint::open(
            verifier,
            ticket,
            self.os.config().disk_id,
            adisk_core::auth::now_ms(),
        )
        .map_err(|e| Status::permission_denied(e.to_string()))?;
        self.check_spec_size(ticket.len(), &claim.job)?;
        let only_scans = claim.job.outputs.iter().all(|o| o.sink == Sink::Host)
            && claim
                .job
                .inputs
                .iter()
                .all(|i| matches!(i, Source::Table { .. }));
        if !only_scans {
            return Err(Status::permission_denied(
                "endpoint ticket refused: its job writes elsewhere than to the reader",
            ));
        }
        Ok(claim)
    }

    /// The DiskOS.
    pub fn os(&self) -> &Arc<DiskOs> {
        &self.os
    }

    /// How this disk reaches its peers, if it can.
    pub(crate) fn peers(&self) -> Option<&Arc<FlightPipeConnector>> {
        self.peers.as_ref()
    }

    /// Notified by the `shutdown` action.
    pub fn shutdown_signal(&self) -> Arc<Notify> {
        self.shutdown.clone()
    }
}

/// Streams a running job's output as Flight data; ends with the job's error, if any.
/// `columns`: names to give the output's columns (an endpoint's result schema).
fn job_response(
    job: RunningJob,
    columns: Option<Vec<String>>,
    os: Arc<DiskOs>,
) -> BoxStream<'static, Result<FlightData, Status>> {
    let RunningJob {
        schema,
        output,
        state,
        done,
    } = job;
    // Dropping the response (the host went away) cancels the job. The guard lives in the
    // tail, which waits for the job's end: a job whose outputs all go elsewhere (other disks,
    // results) sends the host nothing, yet runs until it is done.
    let guard = CancelOnDrop {
        state: state.clone(),
        ended: false,
    };
    let schema = match &columns {
        Some(names) => renamed(&schema, names),
        None => schema,
    };
    let named = schema.clone();
    let batches = tokio_stream::wrappers::ReceiverStream::new(output).map(move |b| {
        let batch = adisk_diskos::disklets::compact_views(b.batch.clone());
        match &columns {
            Some(_) => RecordBatch::try_new(named.clone(), batch.columns().to_vec())
                .map_err(FlightError::Arrow),
            None => Ok(batch),
        }
    });
    let counting = state.clone();
    let encoded = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(batches)
        .map(move |r| {
            r.map(|fd| {
                let bytes = (fd.data_body.len() + fd.data_header.len()) as u64;
                counting
                    .shipped_host_bytes
                    .fetch_add(bytes, Ordering::Relaxed);
                // Into the disk's totals at once: the job may be retired before its last
                // batch is encoded here.
                os.count_host_bytes(bytes);
                fd
            })
            .map_err(|e| Status::internal(format!("encoding results: {e}")))
        });
    let tail = stream::once(async move {
        let mut guard = guard; // the whole guard, not only its field
        let outcome = done.await;
        guard.ended = true;
        state.finish_wall();
        match outcome {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(Err(status_of(&e))),
            Err(_) => Some(Err(Status::internal("job supervisor vanished"))),
        }
    })
    .filter_map(|x| async move { x });
    encoded.chain(tail).boxed()
}

/// `schema` with its fields named `names` (when there are as many).
fn renamed(schema: &SchemaRef, names: &[String]) -> SchemaRef {
    if names.len() != schema.fields().len() {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(names)
        .map(|(f, n)| f.as_ref().clone().with_name(n))
        .collect();
    Arc::new(Schema::new(fields))
}

/// Forgets an exchange's inbox that no job claimed when the sending call that opened it ends.
struct ForgetUnclaimed {
    os: Arc<adisk_diskos::job::DiskOs>,
    id: String,
    armed: bool,
}

impl Drop for ForgetUnclaimed {
    fn drop(&mut self) {
        if self.armed {
            self.os.exchanges().forget_unclaimed(&self.id, 1);
        }
    }
}

/// Abandons the job if its response is dropped before the job ended (its host went away).
struct CancelOnDrop {
    state: Arc<adisk_diskos::job::JobState>,
    ended: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.ended {
            self.state.abandon();
        }
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(bytes)
        .map_err(|e| Status::invalid_argument(format!("malformed {what}: {e}")))
}

/// Filler replies for [`action::LINK_PROBE`]: one shared chunk sent again and again (no
/// memory beyond it), until the probe's bytes or time run out; HTTP/2 flow control paces them
/// to what the link takes.
fn link_probe(
    probe: adisk_core::protocol::LinkProbe,
) -> BoxStream<'static, Result<arrow_flight::Result, Status>> {
    use adisk_core::protocol::{LINK_PROBE_CHUNK, LINK_PROBE_MAX_BYTES, LINK_PROBE_MAX_MS};
    let bytes = probe.bytes.min(LINK_PROBE_MAX_BYTES);
    let until =
        std::time::Instant::now() + Duration::from_millis(probe.max_ms.clamp(1, LINK_PROBE_MAX_MS));
    let chunk = Bytes::from(vec![0x5a_u8; LINK_PROBE_CHUNK]);
    stream::unfold(0u64, move |sent| {
        let chunk = chunk.clone();
        async move {
            let more = sent < bytes && (sent == 0 || std::time::Instant::now() < until);
            more.then(|| {
                let len = (bytes - sent).min(LINK_PROBE_CHUNK as u64);
                let reply = arrow_flight::Result {
                    body: chunk.slice(..len as usize),
                };
                (Ok(reply), sent + len)
            })
        }
    })
    .boxed()
}

impl DiskService {
    /// The actions on the disk's store: its catalog, scrub, dropping a table, committing or
    /// aborting a load; `None` if `name` is not one of them.
    async fn store_action(
        &self,
        name: &str,
        body: &[u8],
    ) -> Result<Option<arrow_flight::Result>, Status> {
        let result = match name {
            action::CATALOG => json_result(&match body.is_empty() {
                true => self.os.store().catalog(),
                false => self
                    .os
                    .store()
                    .catalog_for(&parse_json("catalog request", body)?),
            }),
            action::SCRUB => {
                let store = self.os.store().clone();
                let report = tokio::task::spawn_blocking(move || store.scrub())
                    .await
                    .map_err(|e| Status::internal(format!("scrub: {e}")))?;
                json_result(&report)
            }
            action::DROP_TABLE => {
                let table = String::from_utf8_lossy(body).to_string();
                let dropped = self.os.store().drop_table(&table).map_err(storage_status)?;
                json_result(&dropped)
            }
            action::LOAD_COMMIT => {
                let commit: LoadCommit = parse_json("load_commit request", body)?;
                let store = self.os.store().clone();
                let tables = tokio::task::spawn_blocking(move || {
                    store.commit_load(&commit.load_id, &commit.tables)
                })
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(storage_status)?;
                json_result(&tables)
            }
            action::LOAD_ABORT => {
                let load_id = String::from_utf8_lossy(body).to_string();
                json_result(
                    &self
                        .os
                        .store()
                        .abort_load(&load_id)
                        .map_err(storage_status)?,
                )
            }
            _ => return Ok(None),
        };
        Ok(Some(result))
    }
}

#[tonic::async_trait]
impl FlightService for DiskService {
    type HandshakeStream = BoxStream<'static, Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, Result<FlightInfo, Status>>;
    type DoGetStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoPutStream = BoxStream<'static, Result<PutResult, Status>>;
    type DoExchangeStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoActionStream = BoxStream<'static, Result<arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, Result<ActionType, Status>>;

    /// Members need no handshake. A client's driver may make one before it reads an endpoint
    /// (JDBC does, with the user's password, which a disk cannot check): it gets a bearer
    /// value that grants nothing, since a disk serves a client only what an endpoint ticket
    /// sealed by the host says.
    async fn handshake(
        &self,
        _r: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        let mut response = Response::new(stream::empty().boxed());
        response.metadata_mut().insert(
            "authorization",
            tonic::metadata::MetadataValue::from_static("Bearer endpoint-tickets-only"),
        );
        Ok(response)
    }

    async fn list_flights(
        &self,
        _r: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented(
            "list_flights: use the `catalog` action",
        ))
    }

    async fn get_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented(
            "get_flight_info: a disk serves jobs through DoGet tickets",
        ))
    }

    async fn poll_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("poll_flight_info"))
    }

    async fn get_schema(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented(
            "get_schema: use the `catalog` action",
        ))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let not_member = request
            .extensions()
            .get::<crate::status::NotAMember>()
            .cloned();
        let ticket = request.into_inner().ticket;
        if adisk_core::endpoint::is_endpoint_ticket(&ticket) {
            let claim = self.endpoint_job(&ticket)?;
            tracing::debug!(job = %claim.job.job_id, query = %claim.query, "endpoint ticket");
            let job = self
                .os
                .start_job(claim.job, None)
                .await
                .map_err(|e| status_of(&e))?;
            return Ok(Response::new(job_response(
                job,
                Some(claim.columns),
                self.os.clone(),
            )));
        }
        if let Some(crate::status::NotAMember(why)) = not_member {
            return Err(Status::unauthenticated(format!(
                "{why}; a client may only read a result part with an endpoint ticket from the host"
            )));
        }
        let spec = JobSpec::from_bytes(&ticket)
            .map_err(|e| Status::invalid_argument(format!("malformed job ticket: {e}")))?;
        self.check_spec_size(ticket.len(), &spec)?;
        tracing::debug!(job = %spec.job_id, stages = spec.stages.len(), "job");
        let job = self
            .os
            .start_job(spec, None)
            .await
            .map_err(|e| status_of(&e))?;
        Ok(Response::new(job_response(job, None, self.os.clone())))
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        let mut incoming = request.into_inner();
        let first = incoming
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("empty DoExchange"))?;
        let descriptor = first.flight_descriptor.clone().ok_or_else(|| {
            Status::invalid_argument("DoExchange needs a descriptor with a JobSpec")
        })?;
        let spec = JobSpec::from_bytes(&descriptor.cmd)
            .map_err(|e| Status::invalid_argument(format!("malformed job spec: {e}")))?;
        self.check_spec_size(descriptor.cmd.len(), &spec)?;
        let (tx, rx) = mpsc::channel(self.os.config().buffers_per_stream.max(1) as usize);
        let job = self
            .os
            .start_job(spec, Some(rx))
            .await
            .map_err(|e| status_of(&e))?;
        let all = stream::once(async move { Ok(first) })
            .chain(incoming)
            .map_err(|e: Status| FlightError::Tonic(Box::new(e)));
        let mut batches =
            adisk_core::ipc::checked(FlightRecordBatchStream::new_from_flight_data(all));
        tokio::spawn(async move {
            while let Some(b) = batches.next().await {
                match b {
                    Ok(batch) => {
                        if tx.send(batch).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!("host stream failed: {e}");
                        break;
                    }
                }
            }
        });
        Ok(Response::new(job_response(job, None, self.os.clone())))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let mut incoming = request.into_inner();
        let first = incoming
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("empty DoPut"))?;
        let descriptor = first
            .flight_descriptor
            .clone()
            .ok_or_else(|| Status::invalid_argument("DoPut needs a descriptor"))?;
        let command: PutCommand = parse_json("put command", &descriptor.cmd)?;
        let mark = Arc::new(std::sync::Mutex::new(None::<EndMark>));
        let m2 = mark.clone();
        let all = stream::once(async move { Ok(first) })
            .chain(incoming)
            .try_filter(move |fd| {
                let end = EndMark::of(fd);
                let keep = end.is_none();
                if end.is_some() {
                    *m2.lock().expect("mark lock") = end;
                }
                futures::future::ready(keep)
            })
            .map_err(|e: Status| FlightError::Tonic(Box::new(e)));
        let mut batches = FlightRecordBatchStream::new_from_flight_data(all);
        match command {
            PutCommand::Exchange {
                exchange_id,
                sender,
                from,
            } => {
                let whose = match from {
                    Some(d) => format!("(disk {d})"),
                    None => "(disk unknown)".to_string(),
                };
                let batches = adisk_core::ipc::checked(batches);
                self.receive_pipe(&exchange_id, (sender, &whose), batches, mark)
                    .await
                    .map(|()| Response::new(stream::empty().boxed()))
            }
            PutCommand::Relay { target, .. } => Err(Status::invalid_argument(format!(
                "this is a disk, not the host's relay: send the stream to {target} directly"
            ))),
            PutCommand::Load {
                table,
                partition,
                row_group_rows,
                load_id,
            } => {
                let store = self.os.store().clone();
                store
                    .begin_staging(&load_id, &table)
                    .map_err(storage_status)?;
                let create = |schema| {
                    store
                        .create_staged_partition(
                            &load_id,
                            &table,
                            partition,
                            schema,
                            row_group_rows,
                        )
                        .map_err(storage_status)
                };
                let mut writer = None;
                while let Some(b) = batches.next().await {
                    let batch = b.map_err(|e| Status::aborted(format!("load stream: {e}")))?;
                    if writer.is_none() {
                        writer = Some(create(batch.schema())?);
                    }
                    let w = writer.as_mut().expect("created above");
                    w.write(&batch).map_err(storage_status)?;
                }
                // Partition 0 is staged even without rows, so that a load of nothing (an
                // empty file, a join with no match) still makes its table, empty.
                if writer.is_none()
                    && partition == 0
                    && let Some(schema) = batches.schema().cloned()
                {
                    writer = Some(create(schema)?);
                }
                let Some(w) = writer else {
                    return Ok(Response::new(stream::empty().boxed()));
                };
                let info = tokio::task::spawn_blocking(move || store.finish_staged(&load_id, w))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?
                    .map_err(storage_status)?;
                let reply = PutResult {
                    app_metadata: Bytes::from(
                        serde_json::to_vec(&info).expect("partition info serializes"),
                    ),
                };
                Ok(Response::new(
                    stream::once(async move { Ok(reply) }).boxed(),
                ))
            }
        }
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let Action { r#type, body } = request.into_inner();
        let reply = |r: arrow_flight::Result| -> Result<Response<Self::DoActionStream>, Status> {
            Ok(Response::new(stream::once(async move { Ok(r) }).boxed()))
        };
        match r#type.as_str() {
            action::STATUS => reply(json_result(&self.os.status())),
            action::PARTITION_READ => {
                let req: adisk_core::protocol::PartitionRead =
                    parse_json("partition_read request", &body)?;
                Ok(Response::new(
                    crate::repair::read_copy(self.os.clone(), req).await?,
                ))
            }
            action::REPAIR => {
                let req: adisk_core::protocol::RepairRequest = parse_json("repair request", &body)?;
                let peers = self.peers.clone().ok_or_else(|| Status::failed_precondition("this disk does not know its cluster (start it with --members cluster.toml), so it cannot repair from its peers"))?;
                reply(json_result(
                    &crate::repair::repair(self.os.clone(), peers, req).await?,
                ))
            }
            action::JOB_STATS => {
                let id = String::from_utf8_lossy(&body).to_string();
                let stats = self
                    .os
                    .job_stats(&id)
                    .ok_or_else(|| Status::not_found(format!("no job `{id}` on this disk")))?;
                reply(json_result(&stats))
            }
            action::SHUTDOWN => {
                let notify = self.shutdown.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    notify.notify_one();
                });
                reply(json_result(&true))
            }
            action::GENERATE_TPCH => {
                let req: GenerateTpch = parse_json("generate_tpch request", &body)?;
                Ok(Response::new(generate_tpch(self.os.clone(), req)))
            }
            action::LINK_PROBE => {
                let probe: adisk_core::protocol::LinkProbe =
                    parse_json("link_probe request", &body)?;
                Ok(Response::new(link_probe(probe)))
            }
            action::PEER_PROBE => {
                let req: adisk_core::protocol::PeerProbe = parse_json("peer_probe request", &body)?;
                let peers = self.peers.clone().ok_or_else(|| {
                    Status::failed_precondition("this disk cannot reach its peers")
                })?;
                let me = self.os.config().disk_id;
                reply(json_result(
                    &crate::peer_probe::peer_probe(&peers, me, req).await?,
                ))
            }
            other => {
                if let Some(result) = self.store_action(other, &body).await? {
                    return reply(result);
                }
                match crate::user_actions::handle(&self.os, self.disklets.as_ref(), other, &body)
                    .await
                {
                    Some(result) => reply(json_result(&result?)),
                    None => Err(Status::invalid_argument(format!(
                        "unknown action `{other}`"
                    ))),
                }
            }
        }
    }

    async fn list_actions(
        &self,
        _r: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        let names = [
            action::STATUS,
            action::CATALOG,
            action::JOB_STATS,
            action::GENERATE_TPCH,
            action::DROP_TABLE,
            action::LOAD_COMMIT,
            action::LOAD_ABORT,
            action::SCRUB,
            action::PARTITION_READ,
            action::REPAIR,
            action::LINK_PROBE,
            action::PEER_PROBE,
            action::SHUTDOWN,
            action::DISKLET_INSTALL,
            action::DISKLET_LIST,
            action::DISKLET_REMOVE,
            action::GENERATE_IMAGES,
            action::LIST_FILES,
        ];
        let list: Vec<Result<ActionType, Status>> = names
            .iter()
            .map(|n| {
                Ok(ActionType {
                    r#type: n.to_string(),
                    description: String::new(),
                })
            })
            .collect();
        Ok(Response::new(stream::iter(list).boxed()))
    }
}

/// Generates TPC-H parts at this disk on a blocking thread, staged under the request's load,
/// streaming progress; the last message has `done` (anything else is a failed generation).
fn generate_tpch(
    os: Arc<DiskOs>,
    req: GenerateTpch,
) -> BoxStream<'static, Result<arrow_flight::Result, Status>> {
    let (tx, rx) = mpsc::channel::<Result<LoadProgress, Status>>(16);
    tokio::task::spawn_blocking(move || {
        let result = stage_tpch(&os, &req, &tx);
        let _ = tx.blocking_send(result.map_err(storage_status));
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
        .map(|r| r.map(|p| json_result(&p)))
        .boxed()
}

fn stage_tpch(
    os: &DiskOs,
    req: &GenerateTpch,
    tx: &mpsc::Sender<Result<LoadProgress, Status>>,
) -> Result<LoadProgress, StorageError> {
    let store = os.store();
    let schema = adisk_storage::tpch::schema(&req.table)?;
    store.begin_staging(&req.load_id, &req.table)?;
    let mut progress = LoadProgress {
        table: req.table.clone(),
        ..Default::default()
    };
    for part in &req.parts {
        let mut writer = store.create_staged_partition(
            &req.load_id,
            &req.table,
            part - 1,
            schema.clone(),
            req.row_group_rows,
        )?;
        for batch in
            adisk_storage::tpch::generate_isolated(&req.table, req.sf, *part, req.part_count)?
        {
            let batch = batch.map_err(|source| StorageError::Arrow {
                context: "generating TPC-H".into(),
                source,
            })?;
            writer.write(&batch)?;
            progress.rows += batch.num_rows() as u64;
            if progress.rows % (64 * 1024) < batch.num_rows() as u64 {
                progress.bytes = writer.bytes_written();
                if tx.blocking_send(Ok(progress.clone())).is_err() {
                    return Err(StorageError::Invalid("load cancelled by the host".into()));
                }
            }
        }
        let info = store.finish_staged(&req.load_id, writer)?;
        progress.bytes += info.bytes;
    }
    progress.done = true;
    Ok(progress)
}
