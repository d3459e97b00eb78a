//! Exchange streams from this disk to other disks over Flight `DoPut` ([`FlightPipeConnector`]),
//! each ended by its mark so a receiver knows a finished sender from a cut one ([`EndMark`]).
use crate::pool::ChannelPool;
use adisk_core::protocol::PutCommand;
use adisk_diskos::DiskOsError;
use adisk_diskos::job::{Intact, PipeConnector, PipeRoute};
use adisk_diskos::stream::StreamRx;
use arrow::datatypes::SchemaRef;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightClient, FlightData, FlightDescriptor};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tonic::transport::Channel;
/// Sends exchange outputs to other disks over Flight `DoPut`.
///
/// With the cluster's secret, every stream carries a token, a target must be a disk named in
/// the cluster's `cluster.toml` (never just an address a job names), and a relay must prove
/// it holds the secret before it is sent any row.
#[derive(Default)]
pub struct FlightPipeConnector {
    /// The cluster's secret (None: no tokens, no proofs).
    pub auth: Option<Arc<adisk_core::auth::Verifier>>,
    /// The cluster's `cluster.toml` (None: any target).
    pub members: Option<std::path::PathBuf>,
    /// TLS to the peers (this disk's certificate shown, theirs checked against the CA).
    pub tls: Option<adisk_core::tls::TlsMaterial>,
    /// Idle connections to the other disks, one stream at a time each (never to a relay:
    /// each relay proves its holder again).
    pub pool: Arc<ChannelPool>,
    /// `members` as last read.
    pub roster: Arc<Roster>,
}

/// `cluster.toml` as last read, read again whenever the file changed (its length, modification
/// time or inode): a disk removed from it is refused from the next stream on, and a stream
/// does not pay for parsing the file.
#[derive(Default)]
pub struct Roster(std::sync::Mutex<Option<(Stamp, Arc<adisk_core::config::ClusterConfig>)>>);

/// A file's length, modification time and inode.
type Stamp = (u64, Option<std::time::SystemTime>, u64);

impl Roster {
    /// The cluster file at `path`, read again only when it changed.
    ///
    /// # Errors
    /// The file unreadable or invalid (as [`adisk_core::config::ClusterConfig::load`]).
    pub fn load(
        &self,
        path: &std::path::Path,
    ) -> Result<Arc<adisk_core::config::ClusterConfig>, adisk_core::config::ConfigError> {
        use std::os::unix::fs::MetadataExt;
        let stamp = std::fs::metadata(path)
            .ok()
            .map(|m| (m.len(), m.modified().ok(), m.ino()));
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some(now), Some((then, config))) = (stamp, kept.as_ref())
            && now == *then
        {
            return Ok(config.clone());
        }
        let config = Arc::new(adisk_core::config::ClusterConfig::load(path)?);
        *kept = stamp.map(|s| (s, config.clone()));
        Ok(config)
    }
}

impl FlightPipeConnector {
    /// Refuses a target that is not a disk of the cluster.
    fn check_member(&self, target: &str) -> adisk_diskos::Result<()> {
        let Some(path) = &self.members else {
            return Ok(());
        };
        let config = self.roster.load(path).map_err(|e| {
            DiskOsError::Pipe(format!(
                "refused to send to {target}: cannot read the cluster's members: {e}"
            ))
        })?;
        if config.is_member(target) {
            return Ok(());
        }
        Err(DiskOsError::Pipe(format!(
            "refused to send to {target}: not a disk of this cluster ({})",
            path.display()
        )))
    }

    /// A client for one call to `address`, carrying a fresh token; `relay`: the peer must first
    /// prove it holds the cluster's secret.
    pub(crate) async fn client(
        &self,
        address: &str,
        peer: &str,
        relay: bool,
    ) -> adisk_diskos::Result<FlightClient> {
        let channel = self.connect(address, peer, relay).await?;
        self.with_token(channel)
    }

    /// A client for one stream to the disk at `address` over a kept connection that answered
    /// its round trip, else a new one; and the connection, to give back to the pool when the
    /// stream ended cleanly.
    async fn pooled(
        &self,
        address: &str,
        peer: &str,
    ) -> adisk_diskos::Result<(FlightClient, Channel)> {
        while let Some(channel) = self.pool.take(address) {
            if crate::pool::alive(&mut self.with_token(channel.clone())?).await {
                return Ok((self.with_token(channel.clone())?, channel));
            }
        }
        let channel = self.connect(address, peer, false).await?;
        Ok((self.with_token(channel.clone())?, channel))
    }

    /// A client over `channel` whose calls carry a fresh token (a token is good for one call).
    fn with_token(&self, channel: Channel) -> adisk_diskos::Result<FlightClient> {
        let mut client = FlightClient::new(channel);
        if let Some(auth) = &self.auth {
            client
                .add_header(adisk_core::auth::HEADER, &auth.key().header())
                .map_err(|e| DiskOsError::Pipe(e.to_string()))?;
        }
        Ok(client)
    }

    /// A new connection to `address`; to a relay (`relay`), only once it proved it holds the
    /// cluster's secret.
    async fn connect(
        &self,
        address: &str,
        peer: &str,
        relay: bool,
    ) -> adisk_diskos::Result<Channel> {
        let deadlines = adisk_core::config::Deadlines::default();
        let endpoint = adisk_core::net::member_endpoint(
            address,
            deadlines,
            Duration::from_secs(5),
            self.tls.as_ref(),
        )
        .map_err(|e| DiskOsError::Pipe(format!("bad address {address}: {e}")))?;
        let silent = || {
            DiskOsError::Pipe(format!(
                "{peer} unreachable: no answer within {} ms",
                deadlines.timeout.as_millis()
            ))
        };
        let channel = tokio::time::timeout(
            deadlines.timeout,
            endpoint.connect_with_connector(adisk_core::net::connector()),
        )
        .await
        .map_err(|_| silent())?
        .map_err(|e| DiskOsError::Pipe(format!("{peer} unreachable: {e}")))?;
        let Some(auth) = &self.auth else {
            return Ok(channel);
        };
        if relay {
            let challenge = adisk_core::auth::challenge();
            let mut probe = FlightClient::new(channel.clone());
            probe
                .add_header(adisk_core::auth::HEADER, &auth.key().header())
                .map_err(|e| DiskOsError::Pipe(e.to_string()))?;
            let proof = tokio::time::timeout(deadlines.timeout, probe.handshake(challenge.clone()))
                .await
                .map_err(|_| silent())?
                .map_err(|e| {
                    DiskOsError::Pipe(format!(
                        "{peer} did not prove it belongs to the cluster: {e}"
                    ))
                })?;
            if !auth.key().check_proof(&challenge, &proof) {
                return Err(DiskOsError::Pipe(format!(
                    "refused to send to {peer}: it does not hold the cluster's key"
                )));
            }
        }
        Ok(channel)
    }
}

/// The app metadata of the message that ends every pipe stream a sender finished: a stream
/// that ends without it failed (its link was cut and the call closed), however cleanly the
/// transport ended it.
const PIPE_END: &[u8] = b"adisk:pipe-end";
/// The app metadata prefix (then why) of the message that ends the pipe stream of a sender
/// whose job failed.
const PIPE_ABORT: &[u8] = b"adisk:pipe-abort:";

/// `data` followed by its end mark: [`EndMark::End`] if `data` had no error and the sending
/// job is `intact` when it ends, else [`EndMark::Abort`] (in `ended`).
fn with_end_mark(
    data: impl Stream<Item = Result<FlightData, FlightError>> + Send + 'static,
    intact: Intact,
    ended: Arc<std::sync::Mutex<Option<EndMark>>>,
) -> BoxStream<'static, Result<FlightData, FlightError>> {
    let failed = Arc::new(std::sync::Mutex::new(None::<String>));
    let f2 = failed.clone();
    data.take_while(move |r| {
        if let Err(e) = r {
            *f2.lock().expect("failed lock") = Some(format!("encoding its stream: {e}"));
        }
        futures::future::ready(r.is_ok())
    })
    .chain(stream::once(async move {
        let failed = failed.lock().expect("failed lock").take();
        let mark = match failed.map_or_else(|| intact(), Err) {
            Ok(()) => EndMark::End,
            Err(why) => EndMark::Abort(why),
        };
        let message = mark.message();
        *ended.lock().expect("ended lock") = Some(mark);
        Ok(message)
    }))
    .boxed()
}

/// How a pipe stream said it ended: finished, or failed at its sender (why).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum EndMark {
    End,
    Abort(String),
}

impl EndMark {
    /// The mark `fd` is, if it is one.
    pub(crate) fn of(fd: &FlightData) -> Option<EndMark> {
        if !fd.data_header.is_empty() || !fd.data_body.is_empty() {
            return None;
        }
        if fd.app_metadata == PIPE_END {
            return Some(EndMark::End);
        }
        let why = fd.app_metadata.strip_prefix(PIPE_ABORT)?;
        Some(EndMark::Abort(String::from_utf8_lossy(why).into_owned()))
    }

    fn message(&self) -> FlightData {
        let meta = match self {
            EndMark::End => Bytes::from_static(PIPE_END),
            EndMark::Abort(why) => Bytes::from([PIPE_ABORT, why.as_bytes()].concat()),
        };
        FlightData {
            app_metadata: meta,
            ..Default::default()
        }
    }
}

impl PipeConnector for FlightPipeConnector {
    fn send(
        &self,
        route: PipeRoute,
        schema: SchemaRef,
        rx: StreamRx,
        intact: Intact,
    ) -> futures::future::BoxFuture<'static, adisk_diskos::Result<(u64, u64)>> {
        let connector = FlightPipeConnector {
            auth: self.auth.clone(),
            members: self.members.clone(),
            tls: self.tls.clone(),
            pool: self.pool.clone(),
            roster: self.roster.clone(),
        };
        async move {
            connector.check_member(&route.target)?;
            let (peer, via_relay, address, command) = destination(route);
            let (mut client, kept) = if via_relay {
                (connector.client(&address, &peer, true).await?, None)
            } else {
                let (client, channel) = connector.pooled(&address, &peer).await?;
                (client, Some(channel))
            };
            let cmd = serde_json::to_vec(&command).expect("command serializes");
            let counters = Arc::new((
                std::sync::atomic::AtomicU64::new(0),
                std::sync::atomic::AtomicU64::new(0),
            ));
            let c2 = counters.clone();
            let batches = tokio_stream::wrappers::ReceiverStream::new(rx).map(move |b| {
                c2.1.fetch_add(b.batch.num_rows() as u64, Ordering::Relaxed);
                Ok(adisk_diskos::disklets::compact_views(b.batch.clone()))
            });
            let c3 = counters.clone();
            let data = FlightDataEncoderBuilder::new()
                .with_schema(schema)
                .with_flight_descriptor(Some(FlightDescriptor::new_cmd(cmd)))
                .build(batches)
                .map(move |r| {
                    if let Ok(fd) = &r {
                        c3.0.fetch_add(
                            (fd.data_body.len() + fd.data_header.len()) as u64,
                            Ordering::Relaxed,
                        );
                    }
                    r
                });
            let ended = Arc::new(std::sync::Mutex::new(None));
            let data = with_end_mark(data, intact, ended.clone());
            let link = |e: FlightError| DiskOsError::Link(format!("sending to {peer}: {e}"));
            let results = client.do_put(data).await.map_err(link)?;
            results.try_collect::<Vec<_>>().await.map_err(link)?;
            // The stream ended cleanly (with either mark): its connection is free again.
            if let Some(channel) = kept {
                connector.pool.put(&address, channel);
            }
            if let Some(EndMark::Abort(why)) = ended.lock().expect("ended lock").take() {
                return Err(DiskOsError::Pipe(format!(
                    "the stream to {peer} ended with this job's failure: {why}"
                )));
            }
            Ok((
                counters.0.load(Ordering::Relaxed),
                counters.1.load(Ordering::Relaxed),
            ))
        }
        .boxed()
    }
}

/// Where a pipe stream goes: the peer's name, whether through the host's relay (which names
/// the target), the address to connect to and the `DoPut` command.
fn destination(route: PipeRoute) -> (String, bool, String, PutCommand) {
    let PipeRoute {
        target,
        relay,
        exchange_id,
        sender,
        from,
    } = route;
    match relay {
        Some(relay) => (
            format!("the host's relay {relay}"),
            true,
            relay,
            PutCommand::Relay {
                target,
                exchange_id,
                sender,
                from: Some(from),
            },
        ),
        None => (
            format!("disk {target}"),
            false,
            target,
            PutCommand::Exchange {
                exchange_id,
                sender,
                from: Some(from),
            },
        ),
    }
}

#[cfg(test)]
mod roster_tests {
    use super::*;

    /// The file is parsed once while unchanged, and again as soon as it changes: a disk taken
    /// out of it is no longer a member; an unreadable file is an error, not the old roster.
    #[test]
    fn the_roster_is_read_again_when_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        let two = "[cluster]\nname='x'\n[[disk]]\nid=0\naddress='127.0.0.1:1'\n[[disk]]\nid=1\naddress='127.0.0.1:2'\n";
        std::fs::write(&path, two).unwrap();
        let roster = Roster::default();
        let first = roster.load(&path).unwrap();
        assert!(first.is_member("127.0.0.1:2"));
        assert!(
            Arc::ptr_eq(&first, &roster.load(&path).unwrap()),
            "parsed once"
        );
        let one = "[cluster]\nname='x'\n[[disk]]\nid=0\naddress='127.0.0.1:1'\n";
        std::fs::write(&path, one).unwrap();
        assert!(!roster.load(&path).unwrap().is_member("127.0.0.1:2"));
        std::fs::remove_file(&path).unwrap();
        assert!(roster.load(&path).is_err());
    }
}
