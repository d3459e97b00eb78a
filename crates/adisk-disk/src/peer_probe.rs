//! Serves [`action::PEER_PROBE`]: this disk measures its link to another disk of the cluster
//! with the same filler stream the host uses for its own link ([`action::LINK_PROBE`]), over
//! the same connections its exchanges and repairs use (TLS and tokens included), and reports
//! what arrived between the peer's first reply and its last.
use crate::pipes::FlightPipeConnector;
use adisk_core::config::{ClusterConfig, Deadlines};
use adisk_core::protocol::{LINK_PROBE_MAX_MS, LinkProbe, PeerProbe, PeerProbeReport, action};
use arrow_flight::Action;
use bytes::Bytes;
use futures::StreamExt;
use std::time::{Duration, Instant};
use tonic::Status;

/// Probes `req.peer` from this disk (`me`).
///
/// # Errors
/// `FailedPrecondition` without the cluster's members, `InvalidArgument` for a peer that is
/// not a member or is this disk, `Unavailable` when the peer cannot be reached, and
/// `DeadlineExceeded` when its probe does not end within the deadline plus the probe's time.
pub(crate) async fn peer_probe(
    connector: &FlightPipeConnector,
    me: u32,
    req: PeerProbe,
) -> Result<PeerProbeReport, Status> {
    let members = connector.members.as_ref().ok_or_else(|| {
        Status::failed_precondition(
            "this disk does not know its cluster (start it with --members cluster.toml), so it cannot probe its peers",
        )
    })?;
    let config = ClusterConfig::load(members).map_err(|e| {
        Status::failed_precondition(format!("cannot read the cluster's members: {e}"))
    })?;
    if req.peer == me {
        return Err(Status::invalid_argument("a disk does not probe itself"));
    }
    let address = config
        .disks
        .iter()
        .find(|d| d.id == req.peer)
        .map(|d| d.address.clone())
        .ok_or_else(|| Status::invalid_argument(format!("disk {} is not a member", req.peer)))?;
    let peer = format!("disk {}", req.peer);
    let probe = LinkProbe {
        bytes: req.bytes,
        max_ms: req.max_ms.min(LINK_PROBE_MAX_MS),
    };
    let deadline = Deadlines::default().timeout + Duration::from_millis(probe.max_ms);
    let run = async {
        let mut client = connector
            .client(&address, &peer, false)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let body = Bytes::from(serde_json::to_vec(&probe).unwrap_or_default());
        let mut replies = client
            .do_action(Action::new(action::LINK_PROBE, body))
            .await
            .map_err(|e| Status::unavailable(format!("{peer}: {e}")))?;
        receive(&mut replies, &peer).await
    };
    tokio::time::timeout(deadline, run)
        .await
        .map_err(|_| Status::deadline_exceeded(format!("{peer} did not finish its probe")))?
}

/// Counts the probe's replies after the first.
async fn receive<S, E>(replies: &mut S, peer: &str) -> Result<PeerProbeReport, Status>
where
    S: futures::Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let failed = |e: E| Status::unavailable(format!("{peer}: {e}"));
    match replies.next().await {
        Some(first) => first.map_err(failed)?,
        None => return Ok(PeerProbeReport::default()),
    };
    let first = Instant::now();
    let (mut bytes, mut last) = (0u64, first);
    while let Some(reply) = replies.next().await {
        bytes += reply.map_err(failed)?.len() as u64;
        last = Instant::now();
    }
    Ok(PeerProbeReport {
        bytes,
        micros: last.duration_since(first).as_micros() as u64,
    })
}
