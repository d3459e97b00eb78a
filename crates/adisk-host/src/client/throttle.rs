//! Throttled links: a token bucket paces every stream over one link the host takes part in:
//! the host link (`host_link_mbps` in `cluster.toml`: the disks' scan results, the top stage's
//! streams at the `disks` level, the relay of `exchange = "via-host"`) and the router between
//! disk groups (`router_mbps`).
//!
//! A module of its own so that the cluster client (`cluster`, `relay`) and the planner (`sql`)
//! both use it without reaching into each other (issue 35).

use std::time::{Duration, Instant};

/// Seconds of its rate a [`TokenBucket`] lets pass at once (at least 64 KiB).
pub const BURST_S: f64 = 0.05;

/// A token bucket shared by every stream from the disks to the host (`host_link_mbps`).
#[derive(Debug)]
pub struct TokenBucket {
    bytes_per_sec: f64,
    state: tokio::sync::Mutex<(f64, Instant)>,
    burst: f64,
    busy_ns: std::sync::atomic::AtomicU64,
}

impl TokenBucket {
    /// A bucket of `mbps` megabits per second.
    pub fn new(mbps: u64) -> Self {
        let bytes_per_sec = mbps as f64 * 1e6 / 8.0;
        TokenBucket {
            bytes_per_sec,
            state: tokio::sync::Mutex::new((0.0, Instant::now())),
            burst: (bytes_per_sec * BURST_S).max(64.0 * 1024.0),
            busy_ns: Default::default(),
        }
    }
    /// Rate in bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes_per_sec
    }
    /// Waits until `bytes` may pass. Callers are served in order (the lock is fair).
    pub async fn acquire(&self, bytes: u64) {
        let mut s = self.state.lock().await;
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * self.bytes_per_sec;
        s.0 = (s.0 + refill).min(self.burst);
        s.1 = now;
        s.0 -= bytes as f64;
        let cost = Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec);
        self.busy_ns
            .fetch_add(cost.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
        if s.0 < 0.0 {
            let wait = Duration::from_secs_f64(-s.0 / self.bytes_per_sec);
            tokio::time::sleep(wait).await;
        }
    }
    /// Time the link was busy so far (bytes ÷ rate).
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy_ns.load(std::sync::atomic::Ordering::Relaxed))
    }
}
