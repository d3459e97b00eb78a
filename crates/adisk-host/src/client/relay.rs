//! The host's exchange relay (`exchange = "via-host"`): disk-to-disk streams pass through the
//! host instead of going straight between disks — uysal's communication restricted to the
//! front-end, chiu's partially distributed smart disks.
//!
//! A sending disk opens a Flight `DoPut` to the relay with [`PutCommand::Relay`]; the relay
//! opens a `DoPut` to the target disk with [`PutCommand::Exchange`] and forwards the Flight
//! messages unchanged (no decoding), paying the host link's token bucket for every byte. So
//! results are those of a direct exchange, and the bytes show up on the host link.
//!
//! Failures travel both ways: a target that refuses or fails fails the sender's call; a sender
//! that fails or disappears mid-stream makes the relay *reset* its call to the target (never
//! end it cleanly), so the receiving job sees a failed sender, not a short stream.
use crate::client::throttle::TokenBucket;
use adisk_core::auth::Verifier;
use adisk_core::protocol::PutCommand;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::stream::{self, BoxStream, StreamExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

/// Flight messages in flight between a sender and its target, per relayed stream.
const RELAY_DEPTH: usize = 2;

/// What the relay moved since it started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RelayStats {
    /// Streams relayed (ended cleanly or not).
    pub streams: u64,
    /// Streams that failed (sender or target).
    pub streams_failed: u64,
    /// Arrow IPC bytes (Flight message headers and bodies) forwarded.
    pub bytes: u64,
}

#[derive(Default, Debug)]
struct Counters {
    streams: AtomicU64,
    streams_failed: AtomicU64,
    bytes: AtomicU64,
}

/// A running relay; stops when dropped.
#[derive(Debug)]
pub struct Relay {
    address: String,
    counters: Arc<Counters>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Relay {
    /// Starts a relay listening on `listen` (port 0: any free port); forwarded bytes pay
    /// `link`, the host link's bucket, if any.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn start(
        listen: &str,
        link: Option<Arc<TokenBucket>>,
        auth: Option<Arc<Verifier>>,
        tls: Option<adisk_core::tls::TlsMaterial>,
        members: Vec<String>,
    ) -> std::io::Result<Relay> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let address = listener.local_addr()?.to_string();
        let counters = Arc::new(Counters::default());
        let authenticator = authenticator(auth.clone());
        let service = RelayService {
            counters: counters.clone(),
            link,
            auth,
            tls: tls.clone(),
            members,
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
            s.inspect(|stream| {
                let _ = adisk_core::net::tune(stream);
            })
        });
        let deadlines = adisk_core::config::Deadlines::default();
        let mut builder = adisk_core::net::server_windows(tonic::transport::Server::builder());
        if let Some(t) = &tls {
            builder = builder
                .tls_config(t.server())
                .map_err(|e| std::io::Error::other(format!("the relay's TLS: {e}")))?;
        }
        let server = builder
            .http2_keepalive_interval(Some(deadlines.ping_interval()))
            .http2_keepalive_timeout(Some(deadlines.ping_timeout()))
            .add_service(InterceptedService::new(
                FlightServiceServer::new(service)
                    .max_decoding_message_size(64 << 20)
                    .max_encoding_message_size(64 << 20),
                authenticator,
            ))
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stop_rx.await;
            });
        tokio::spawn(async move {
            if let Err(e) = server.await {
                tracing::warn!("the exchange relay stopped: {e}");
            }
        });
        Ok(Relay {
            address,
            counters,
            stop: Some(stop_tx),
        })
    }

    /// The address disks send to (`host:port`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// What the relay moved so far.
    pub fn stats(&self) -> RelayStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RelayStats {
            streams: l(&self.counters.streams),
            streams_failed: l(&self.counters.streams_failed),
            bytes: l(&self.counters.bytes),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct RelayService {
    counters: Arc<Counters>,
    link: Option<Arc<TokenBucket>>,
    auth: Option<Arc<Verifier>>,
    /// TLS to the disks it forwards to.
    tls: Option<adisk_core::tls::TlsMaterial>,
    /// Addresses of the cluster's disks: the only targets the relay forwards to.
    members: Vec<String>,
}

fn message_bytes(fd: &FlightData) -> u64 {
    (fd.data_header.len() + fd.data_body.len()) as u64
}

impl RelayService {
    /// Forwards one stream from a sender to `target`.
    async fn relay(
        &self,
        mut incoming: Streaming<FlightData>,
        mut first: FlightData,
        target: String,
        command: PutCommand,
    ) -> Result<(), Status> {
        let deadlines = adisk_core::config::Deadlines::default();
        if !self.members.iter().any(|m| *m == target) {
            return Err(Status::permission_denied(format!(
                "the relay forwards only to disks of this cluster, not to {target}"
            )));
        }
        let endpoint = adisk_core::net::member_endpoint(
            &target,
            deadlines,
            Duration::from_secs(5),
            self.tls.as_ref(),
        )
        .map_err(|e| Status::invalid_argument(format!("bad target address {target}: {e}")))?;
        let channel = endpoint
            .connect_with_connector(adisk_core::net::connector())
            .await
            .map_err(|e| {
                Status::unavailable(format!("the relay cannot reach disk {target}: {e}"))
            })?;
        let mut client = FlightServiceClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        first.flight_descriptor = Some(FlightDescriptor::new_cmd(
            serde_json::to_vec(&command).expect("command serializes"),
        ));
        let header = match &self.auth {
            Some(a) => Some(
                a.key()
                    .header()
                    .parse()
                    .map_err(|_| Status::internal("token header"))?,
            ),
            None => None,
        };
        let (tx, rx) = mpsc::channel::<FlightData>(RELAY_DEPTH);
        // The call to the target runs beside the forwarding loop; aborting it resets the stream.
        let mut call = tokio::spawn(async move {
            let mut request = Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
            if let Some(header) = header {
                request
                    .metadata_mut()
                    .insert(adisk_core::auth::HEADER, header);
            }
            let mut results = client.do_put(request).await?.into_inner();
            while results.message().await?.is_some() {}
            Ok::<(), Status>(())
        });
        let mut next = Some(first);
        while let Some(fd) = next.take() {
            let bytes = message_bytes(&fd);
            if let Some(link) = &self.link {
                link.acquire(bytes).await;
            }
            self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
            if tx.send(fd).await.is_err() {
                break; // the call to the target ended early: its result says why
            }
            next = tokio::select! {
                m = incoming.message() => match m {
                    Ok(m) => m,
                    Err(e) => {
                        call.abort();
                        return Err(Status::aborted(format!("the sender's stream to {target} failed at the relay: {e}")));
                    }
                },
                r = &mut call => return relay_outcome(&target, r).and(Err(Status::aborted(format!("disk {target} ended the stream before the sender did")))),
            };
        }
        drop(tx);
        relay_outcome(&target, call.await)
    }
}

/// Refuses every call without a fresh token made with the cluster's secret (none to check
/// without one), as the disks do.
#[allow(clippy::result_large_err)]
fn authenticator(
    auth: Option<Arc<Verifier>>,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |request: Request<()>| {
        if let Some(verifier) = &auth {
            let header = request
                .metadata()
                .get(adisk_core::auth::HEADER)
                .and_then(|v| v.to_str().ok());
            verifier
                .verify(header)
                .map_err(|e| Status::unauthenticated(e.to_string()))?;
        }
        Ok(request)
    }
}

fn relay_outcome(
    target: &str,
    r: Result<Result<(), Status>, tokio::task::JoinError>,
) -> Result<(), Status> {
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(s)) => Err(Status::new(
            s.code(),
            format!("disk {target} (via the host's relay): {}", s.message()),
        )),
        Err(e) => Err(Status::internal(format!(
            "the relay's call to {target} failed: {e}"
        ))),
    }
}

#[tonic::async_trait]
impl FlightService for RelayService {
    type HandshakeStream = BoxStream<'static, Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, Result<FlightInfo, Status>>;
    type DoGetStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoPutStream = BoxStream<'static, Result<PutResult, Status>>;
    type DoExchangeStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoActionStream = BoxStream<'static, Result<arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, Result<ActionType, Status>>;

    /// Proves to a disk that this relay holds the cluster's secret: the answer to its
    /// challenge ([`adisk_core::auth::ClusterKey::prove`]).
    async fn handshake(
        &self,
        r: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        let Some(auth) = &self.auth else {
            return Err(Status::unimplemented(
                "this relay has no cluster key to prove",
            ));
        };
        let challenge = r
            .into_inner()
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no challenge"))?;
        let payload = auth.key().prove(&challenge.payload).into();
        let answer = HandshakeResponse {
            protocol_version: 0,
            payload,
        };
        Ok(Response::new(
            stream::once(async move { Ok(answer) }).boxed(),
        ))
    }
    async fn list_flights(
        &self,
        _r: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("the exchange relay only takes DoPut"))
    }
    async fn get_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented("the exchange relay only takes DoPut"))
    }
    async fn poll_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("the exchange relay only takes DoPut"))
    }
    async fn get_schema(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented("the exchange relay only takes DoPut"))
    }
    async fn do_get(&self, _r: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        Err(Status::unimplemented("the exchange relay only takes DoPut"))
    }
    async fn do_exchange(
        &self,
        _r: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("the exchange relay only takes DoPut"))
    }
    async fn do_action(
        &self,
        _r: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("the exchange relay only takes DoPut"))
    }
    async fn list_actions(
        &self,
        _r: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::unimplemented("the exchange relay only takes DoPut"))
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
        let command: PutCommand = serde_json::from_slice(&descriptor.cmd)
            .map_err(|e| Status::invalid_argument(format!("malformed put command: {e}")))?;
        let PutCommand::Relay {
            target,
            exchange_id,
            sender,
            from,
        } = command
        else {
            return Err(Status::invalid_argument(
                "the exchange relay only forwards `relay` streams",
            ));
        };
        self.counters.streams.fetch_add(1, Ordering::Relaxed);
        let result = self
            .relay(
                incoming,
                first,
                target,
                PutCommand::Exchange {
                    exchange_id,
                    sender,
                    from,
                },
            )
            .await;
        if result.is_err() {
            self.counters.streams_failed.fetch_add(1, Ordering::Relaxed);
        }
        result.map(|()| Response::new(stream::empty().boxed()))
    }
}
