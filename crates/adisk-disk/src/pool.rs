//! Idle connections to the other disks ([`ChannelPool`]), kept so that an exchange stream is
//! not one more TCP and TLS handshake.
//!
//! A connection carries **one stream at a time**, as a fresh one did: a stream takes an idle
//! connection to its peer (or the sender connects), and gives it back only when the stream
//! ended cleanly. Streams never share a connection's HTTP/2 flow-control window, so a stream
//! its receiver reads later (a join's probe side, waiting for its build side) cannot starve
//! another one to the same peer. A connection is checked with a one-byte round trip before
//! it is used again ([`alive`]); one that does not answer within [`ALIVE_WITHIN`] is dropped
//! and the sender connects afresh, so a peer cut off while its connection sat idle is found
//! by the connect, as before, not by a stalled stream. Idle connections are bounded per peer
//! ([`IDLE_PER_PEER`]) and closed after [`IDLE_FOR`] unused.
use adisk_core::protocol::{LinkProbe, action};
use arrow_flight::FlightClient;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Most idle connections kept to one peer (one per stream that was open to it at once).
pub const IDLE_PER_PEER: usize = 8;
/// How long an idle connection is kept.
pub const IDLE_FOR: Duration = Duration::from_secs(30);
/// How long a kept connection has to answer its one-byte round trip before it is dropped.
pub const ALIVE_WITHIN: Duration = Duration::from_secs(1);

/// Idle connections by peer address; see the module documentation.
#[derive(Default)]
pub struct ChannelPool {
    inner: Arc<Mutex<Idle>>,
}

#[derive(Default)]
struct Idle {
    by_peer: HashMap<String, Vec<(Channel, Instant)>>,
    /// A task closes expired connections while any are kept.
    reaper: bool,
}

impl Idle {
    fn expire(&mut self, now: Instant) {
        for kept in self.by_peer.values_mut() {
            kept.retain(|(_, at)| now.duration_since(*at) < IDLE_FOR);
        }
        self.by_peer.retain(|_, kept| !kept.is_empty());
    }
}

impl ChannelPool {
    /// The most recently kept idle connection to `address`, if any.
    pub fn take(&self, address: &str) -> Option<Channel> {
        let mut idle = self.inner.lock().expect("pool lock");
        idle.expire(Instant::now());
        let kept = idle.by_peer.get_mut(address)?;
        let channel = kept.pop().map(|(c, _)| c);
        if kept.is_empty() {
            idle.by_peer.remove(address);
        }
        channel
    }

    /// Keeps `channel` to `address` (its stream ended cleanly); beyond [`IDLE_PER_PEER`] the
    /// oldest is closed.
    pub fn put(&self, address: &str, channel: Channel) {
        let mut idle = self.inner.lock().expect("pool lock");
        let kept = idle.by_peer.entry(address.to_string()).or_default();
        kept.push((channel, Instant::now()));
        if kept.len() > IDLE_PER_PEER {
            kept.remove(0);
        }
        if !idle.reaper && tokio::runtime::Handle::try_current().is_ok() {
            idle.reaper = true;
            tokio::spawn(reap(Arc::downgrade(&self.inner)));
        }
    }

    /// Idle connections kept now, to all peers.
    pub fn idle(&self) -> usize {
        let idle = self.inner.lock().expect("pool lock");
        idle.by_peer.values().map(Vec::len).sum()
    }
}

/// Closes expired connections until none is kept (or the pool is gone).
async fn reap(pool: Weak<Mutex<Idle>>) {
    loop {
        tokio::time::sleep(IDLE_FOR / 2).await;
        let Some(pool) = pool.upgrade() else { return };
        let mut idle = pool.lock().expect("pool lock");
        idle.expire(Instant::now());
        if idle.by_peer.is_empty() {
            idle.reaper = false;
            return;
        }
    }
}

/// True when `client`'s connection answers a one-byte link probe within [`ALIVE_WITHIN`].
pub async fn alive(client: &mut FlightClient) -> bool {
    let probe = LinkProbe {
        bytes: 1,
        max_ms: 1,
    };
    let Ok(body) = serde_json::to_vec(&probe) else {
        return false;
    };
    let check = async {
        let mut replies = client
            .do_action(arrow_flight::Action::new(action::LINK_PROBE, body))
            .await
            .ok()?;
        while let Some(reply) = replies.next().await {
            reply.ok()?;
        }
        Some(())
    };
    matches!(
        tokio::time::timeout(ALIVE_WITHIN, check).await,
        Ok(Some(()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel() -> Channel {
        tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy()
    }

    #[tokio::test]
    async fn kept_connections_are_bounded_per_peer_and_taken_newest_first() {
        let pool = ChannelPool::default();
        assert!(pool.take("a:1").is_none());
        for _ in 0..IDLE_PER_PEER + 3 {
            pool.put("a:1", channel());
        }
        pool.put("b:1", channel());
        assert_eq!(pool.idle(), IDLE_PER_PEER + 1);
        assert!(pool.take("b:1").is_some());
        assert!(pool.take("b:1").is_none(), "one stream, one connection");
        let mut taken = 0;
        while pool.take("a:1").is_some() {
            taken += 1;
        }
        assert_eq!(taken, IDLE_PER_PEER);
        assert_eq!(pool.idle(), 0);
    }

    #[tokio::test]
    async fn expired_connections_are_closed() {
        let pool = ChannelPool::default();
        pool.put("a:1", channel());
        let old = Instant::now() - IDLE_FOR - Duration::from_millis(1);
        pool.inner.lock().unwrap().by_peer.get_mut("a:1").unwrap()[0].1 = old;
        assert!(pool.take("a:1").is_none());
        assert_eq!(pool.idle(), 0);
    }

    #[tokio::test]
    async fn a_connection_that_does_not_answer_is_not_alive() {
        // Nothing listens on the discard port: the round trip fails, within the bound.
        let mut client = FlightClient::new(channel());
        let started = Instant::now();
        assert!(!alive(&mut client).await);
        assert!(started.elapsed() < ALIVE_WITHIN + Duration::from_millis(500));
    }
}
