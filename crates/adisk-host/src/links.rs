//! The links the host plans with, measured rather than assumed (issue 34).
//!
//! The host link's rate is what the host receives from all live disks at once through the
//! same stack its queries use (Arrow Flight over HTTP/2, TLS when the cluster has it): each
//! disk streams filler replies ([`action::LINK_PROBE`]) for a quarter of a second and the
//! host counts what arrived between the first reply and the last. The round trip is the
//! quickest of a few one-byte probes. `auto`'s cost model ([`crate::sql::cost`]) prices plans
//! with these figures; EXPLAIN prints them and where they came from. They are measured again
//! when older than [`LINK_REFRESH`] and [`REFRESH_PLANS`] plans have used them, or when older
//! than [`LINK_MAX_AGE`] (a link re-shaped mid-run is noticed within a few queries, and queries
//! that come seldom do not each pay a probe), and a configured throttle (`host_link_mbps`) is
//! taken as it is, not measured.
use crate::cluster::Cluster;
use adisk_core::protocol::{LINK_PROBE_CHUNK, LinkProbe, PeerProbe, PeerProbeReport, action};
use futures::StreamExt;
use std::time::{Duration, Instant};

/// Figures younger than this are used as they are.
pub const LINK_REFRESH: Duration = Duration::from_secs(30);

/// Figures older than [`LINK_REFRESH`] are measured again once this many plans have used them.
pub const REFRESH_PLANS: u32 = 4;

/// Figures older than this are measured again before the next plan, however few used them.
pub const LINK_MAX_AGE: Duration = Duration::from_secs(600);

/// Bytes each disk sends at most in one probe.
pub const PROBE_BYTES: u64 = 32 << 20;

/// How long one probe streams at most.
pub const PROBE_TIME: Duration = Duration::from_millis(250);

/// Once a link has a measured figure, later probes send about this long's worth of it (so a
/// probe of a slow link moves little: at 100 Mbit/s a full probe costs half a second of the
/// link, with what HTTP/2 lets into flight after the disks stop).
pub const PROBE_AIM: Duration = Duration::from_millis(100);

/// The least a probe stream sends.
pub const MIN_PROBE_BYTES: u64 = 256 << 10;

/// Where a link figure came from.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkSource {
    /// `host_link_mbps` of `cluster.toml`: a throttle the host applies, taken as the rate.
    Throttle {
        /// Its Mbit/s.
        mbps: u64,
    },
    /// Measured by probing the live disks.
    Probe {
        /// Disks that answered the probe.
        disks: usize,
        /// Bytes received.
        bytes: u64,
        /// How long the probe took.
        took: Duration,
    },
    /// Nothing could be measured (no live disk answered): loopback-class, said as assumed.
    Assumed,
    /// Not measured: the offload level in use does not choose by cost.
    Unmeasured,
    /// Raised above the probe's figure by a query that moved more (its bytes and time).
    Observed {
        /// Bytes the query received from the disks.
        bytes: u64,
        /// Its wall time.
        elapsed: Duration,
    },
}

/// A query must move at least this much to say something about the link's rate.
pub const OBSERVED_MIN_BYTES: u64 = 4 << 20;

/// The links between disks as the planner sees them.
#[derive(Debug, Clone, PartialEq)]
pub enum DiskLinks {
    /// Measured: every live disk probed the next one (a ring, all pairs at once, as an
    /// exchange loads them); the median pair's rate.
    Measured {
        /// Bytes per second.
        bytes_per_sec: f64,
        /// Pairs that answered.
        pairs: usize,
    },
    /// Exchanges pass the host (`exchange = via-host`): the disks' own links carry none.
    ThroughHost,
    /// Not measured (fewer than two live disks, no pair answered, or a level that does not
    /// plan by cost): loopback-class, said as assumed.
    Assumed,
}

impl DiskLinks {
    /// The rate a disk's link carries, bytes/s.
    pub fn bytes_per_sec(&self) -> f64 {
        match self {
            DiskLinks::Measured { bytes_per_sec, .. } => *bytes_per_sec,
            _ => ASSUMED_BYTES_PER_SEC,
        }
    }

    fn describe(&self) -> String {
        match self {
            DiskLinks::Measured {
                bytes_per_sec,
                pairs,
            } => format!(
                "disk to disk {:.0} Mbit/s (measured: the median of {pairs} pairs probing at once)",
                bytes_per_sec * 8.0 / 1e6
            ),
            DiskLinks::ThroughHost => "disk to disk through the host".into(),
            DiskLinks::Assumed => format!(
                "disk to disk {:.0} Mbit/s (assumed)",
                ASSUMED_BYTES_PER_SEC * 8.0 / 1e6
            ),
        }
    }
}

/// The host link as the planner sees it.
#[derive(Debug, Clone)]
pub struct LinkFigures {
    /// Bytes per second the host receives from all live disks at once.
    pub host_bytes_per_sec: f64,
    /// The quickest round trip to a disk (None when not measured).
    pub rtt: Option<Duration>,
    /// Where the rate came from.
    pub source: LinkSource,
    /// When it was measured.
    pub at: Instant,
    /// The links between disks.
    pub disks: DiskLinks,
}

/// The rate assumed when nothing could be measured, bytes/s (loopback class).
pub const ASSUMED_BYTES_PER_SEC: f64 = 4.0e9;

impl LinkFigures {
    /// One line for EXPLAIN: the rate, the round trip and where they came from.
    pub fn describe(&self) -> String {
        let rate = format!("{:.0} Mbit/s", self.host_bytes_per_sec * 8.0 / 1e6);
        let rtt = self
            .rtt
            .map(|r| format!(", round trip {:.2} ms", r.as_secs_f64() * 1e3))
            .unwrap_or_default();
        let source = match &self.source {
            LinkSource::Throttle { mbps } => format!("host_link_mbps = {mbps} (a throttle)"),
            LinkSource::Probe { disks, bytes, took } => format!(
                "measured {:.1} s ago: {} from {disks} disks in {:.0} ms",
                self.at.elapsed().as_secs_f64(),
                adisk_core::stats::human_bytes(*bytes),
                took.as_secs_f64() * 1e3
            ),
            LinkSource::Assumed => "assumed: no disk answered the probe".into(),
            LinkSource::Unmeasured => "assumed: not measured, only auto plans by cost".into(),
            LinkSource::Observed { bytes, elapsed } => format!(
                "seen {:.1} s ago: a query received {} in {:.0} ms, more than the probe",
                self.at.elapsed().as_secs_f64(),
                adisk_core::stats::human_bytes(*bytes),
                elapsed.as_secs_f64() * 1e3
            ),
        };
        format!(
            "host link {rate}{rtt} ({source}); {}",
            self.disks.describe()
        )
    }

    /// The figures of a level that does not plan by cost: the throttle if there is one,
    /// else the loopback-class rate, said as assumed.
    pub fn unmeasured(cluster: &Cluster) -> Self {
        let mbps = cluster.config().cluster.host_link_mbps;
        LinkFigures {
            host_bytes_per_sec: match mbps {
                0 => ASSUMED_BYTES_PER_SEC,
                m => m as f64 * 1e6 / 8.0,
            },
            rtt: None,
            source: match mbps {
                0 => LinkSource::Unmeasured,
                mbps => LinkSource::Throttle { mbps },
            },
            at: Instant::now(),
            disks: DiskLinks::Assumed,
        }
    }

    /// Nothing measured: the loopback-class rate, said as assumed.
    fn assumed() -> Self {
        LinkFigures {
            host_bytes_per_sec: ASSUMED_BYTES_PER_SEC,
            rtt: None,
            source: LinkSource::Assumed,
            at: Instant::now(),
            disks: DiskLinks::Assumed,
        }
    }

    /// The same rates and round trip (where they came from aside).
    pub fn same_figures(&self, other: &LinkFigures) -> bool {
        self.host_bytes_per_sec == other.host_bytes_per_sec
            && self.rtt == other.rtt
            && self.disks.bytes_per_sec() == other.disks.bytes_per_sec()
    }

    /// Still good for a plan, after `plans` plans used them.
    fn fresh(&self, plans: u32) -> bool {
        let age = self.at.elapsed();
        matches!(self.source, LinkSource::Throttle { .. })
            || age < LINK_REFRESH
            || (plans < REFRESH_PLANS && age < LINK_MAX_AGE)
    }
}

/// The host's figures, measured again when stale ([`LinkFigures::fresh`]; one probe at a
/// time: queries planned meanwhile wait for it rather than probing too).
#[derive(Debug, Default)]
pub struct Links {
    figures: tokio::sync::Mutex<Option<LinkFigures>>,
    /// Plans that used the figures since they were measured.
    plans: std::sync::atomic::AtomicU32,
}

impl Links {
    /// The current figures of `cluster`'s host link, measured first if they are missing or
    /// stale.
    pub async fn current(&self, cluster: &Cluster) -> LinkFigures {
        use std::sync::atomic::Ordering::SeqCst;
        let mut figures = self.figures.lock().await;
        if let Some(f) = figures
            .as_ref()
            .filter(|f| f.fresh(self.plans.load(SeqCst)))
        {
            self.plans.fetch_add(1, SeqCst);
            return f.clone();
        }
        self.plans.store(1, SeqCst);
        // One deadline for the whole measurement: a disk that stopped answering (not yet taken
        // as dead) must not hold every `auto` plan for several of its timeouts.
        let limit = cluster.config().deadlines().timeout + 2 * PROBE_TIME;
        let previous = figures.clone();
        let measured = match tokio::time::timeout(limit, measure(cluster, previous.as_ref())).await
        {
            Ok(m) => m,
            Err(_) => match figures.as_ref() {
                Some(previous) => LinkFigures {
                    at: Instant::now(),
                    ..previous.clone()
                },
                None => LinkFigures::assumed(),
            },
        };
        tracing::debug!("links: {}", measured.describe());
        *figures = Some(measured.clone());
        measured
    }

    /// A query received `bytes` from the disks in `elapsed`: at least that rate crossed the
    /// link, so a measured figure below it (a probe that shared the link with queries, or a
    /// link made faster since) is raised to it. Transfers under [`OBSERVED_MIN_BYTES`] say
    /// more about round trips than about the rate and are ignored; so is a throttle.
    pub fn observe(&self, bytes: u64, elapsed: Duration) {
        if bytes < OBSERVED_MIN_BYTES || elapsed.is_zero() {
            return;
        }
        let Ok(mut figures) = self.figures.try_lock() else {
            return; // a probe is measuring right now
        };
        let seen = bytes as f64 / elapsed.as_secs_f64();
        if let Some(f) = figures.as_mut()
            && matches!(
                f.source,
                LinkSource::Probe { .. } | LinkSource::Observed { .. }
            )
            && seen > f.host_bytes_per_sec
        {
            f.host_bytes_per_sec = seen;
            f.source = LinkSource::Observed { bytes, elapsed };
            f.at = Instant::now();
        }
    }

    /// Forgets the figures: the next plan measures again.
    pub async fn forget(&self) {
        *self.figures.lock().await = None;
    }
}

/// What one disk's probe delivered: bytes after its first reply, and when its first and last
/// replies arrived.
struct Delivered {
    bytes: u64,
    first: Instant,
    last: Instant,
}

/// Measures the links of `cluster`: the host's (or takes its throttle), then the disks'; with
/// `previous` figures, each probe sends [`PROBE_AIM`]'s worth of what they said.
pub async fn measure(cluster: &Cluster, previous: Option<&LinkFigures>) -> LinkFigures {
    let dead = cluster.dead_disks();
    let live: Vec<u32> = (0..cluster.disk_count())
        .filter(|d| !dead.contains(d))
        .collect();
    let host_rate = previous
        .filter(|p| {
            matches!(
                p.source,
                LinkSource::Probe { .. } | LinkSource::Observed { .. }
            )
        })
        .map(|p| p.host_bytes_per_sec);
    let disk_rate = previous.and_then(|p| match p.disks {
        DiskLinks::Measured { bytes_per_sec, .. } => Some(bytes_per_sec),
        _ => None,
    });
    let mut figures = host_link(cluster, &live, probe_bytes(host_rate, live.len())).await;
    figures.disks = disk_links(cluster, &live, probe_bytes(disk_rate, 1)).await;
    figures
}

/// Bytes each of `streams` probe streams sends: [`PROBE_AIM`]'s worth of a link measured at
/// `rate` shared by them, within [`MIN_PROBE_BYTES`] and [`PROBE_BYTES`]; all of
/// [`PROBE_BYTES`] for a link not measured before.
fn probe_bytes(rate: Option<f64>, streams: usize) -> u64 {
    rate.map_or(PROBE_BYTES, |r| {
        let aim = (r * PROBE_AIM.as_secs_f64()) as u64 / streams.max(1) as u64;
        aim.clamp(MIN_PROBE_BYTES, PROBE_BYTES)
    })
}

/// The host link: its throttle, or what all `live` disks deliver at once (`bytes` each).
async fn host_link(cluster: &Cluster, live: &[u32], bytes: u64) -> LinkFigures {
    let mbps = cluster.config().cluster.host_link_mbps;
    if mbps > 0 {
        return LinkFigures {
            host_bytes_per_sec: mbps as f64 * 1e6 / 8.0,
            rtt: None,
            source: LinkSource::Throttle { mbps },
            at: Instant::now(),
            disks: DiskLinks::Assumed,
        };
    }
    let rtt = round_trip(cluster, live).await;
    let start = Instant::now();
    let probes = live.iter().map(|&d| stream_probe(cluster, d, bytes));
    let delivered: Vec<Delivered> = futures::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect();
    let took = start.elapsed();
    aggregate_rate(&delivered).map_or_else(
        || LinkFigures {
            rtt,
            ..LinkFigures::assumed()
        },
        |(rate, bytes)| LinkFigures {
            host_bytes_per_sec: rate,
            rtt,
            source: LinkSource::Probe {
                disks: delivered.len(),
                bytes,
                took,
            },
            at: Instant::now(),
            disks: DiskLinks::Assumed,
        },
    )
}

/// The links between disks: each live disk probes the next, all at once (a ring), and the
/// median pair's rate is taken (one slow pair does not set every disk's figure); `bytes` per
/// pair.
async fn disk_links(cluster: &Cluster, live: &[u32], bytes: u64) -> DiskLinks {
    if cluster.config().cluster.exchange == adisk_core::config::ExchangeMode::ViaHost {
        return DiskLinks::ThroughHost;
    }
    if live.len() < 2 {
        return DiskLinks::Assumed;
    }
    let ring = live.iter().zip(live.iter().cycle().skip(1));
    let probes = ring.map(|(&from, &to)| peer_probe(cluster, from, to, bytes));
    let mut rates: Vec<f64> = futures::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect();
    rates.sort_by(f64::total_cmp);
    match rates.get(rates.len() / 2) {
        Some(&median) => DiskLinks::Measured {
            bytes_per_sec: median,
            pairs: rates.len(),
        },
        None => DiskLinks::Assumed,
    }
}

/// Disk `from` probes disk `to` ([`action::PEER_PROBE`]): the rate, or None if it failed.
async fn peer_probe(cluster: &Cluster, from: u32, to: u32, bytes: u64) -> Option<f64> {
    let probe = PeerProbe {
        peer: to,
        bytes,
        max_ms: PROBE_TIME.as_millis() as u64,
    };
    let body = serde_json::to_vec(&probe).ok()?;
    let deadline = cluster.config().deadlines().timeout * 2 + PROBE_TIME;
    let run = async {
        let mut client = cluster.client(from);
        let mut replies = client
            .do_action(arrow_flight::Action::new(action::PEER_PROBE, body))
            .await
            .ok()?;
        let reply = replies.next().await?.ok()?;
        serde_json::from_slice::<PeerProbeReport>(&reply)
            .ok()?
            .rate()
    };
    tokio::time::timeout(deadline, run).await.ok().flatten()
}

/// The aggregate rate of `delivered`: every byte after each disk's first reply, over the time
/// from the earliest first reply to the latest last one. None when too little arrived.
fn aggregate_rate(delivered: &[Delivered]) -> Option<(f64, u64)> {
    let bytes: u64 = delivered.iter().map(|d| d.bytes).sum();
    let first = delivered.iter().map(|d| d.first).min()?;
    let last = delivered.iter().map(|d| d.last).max()?;
    let secs = last.duration_since(first).as_secs_f64();
    (bytes > 0 && secs > 0.0).then(|| (bytes as f64 / secs, bytes))
}

/// The quickest of three one-byte probes to each of two of `live`, at once (the first may
/// open a connection).
async fn round_trip(cluster: &Cluster, live: &[u32]) -> Option<Duration> {
    let tiny = LinkProbe {
        bytes: 1,
        max_ms: 1,
    };
    let three = |d: u32| async move {
        let mut best: Option<Duration> = None;
        for _ in 0..3 {
            let t = Instant::now();
            if probe_stream(cluster, d, tiny).await.is_some() {
                let took = t.elapsed();
                best = Some(best.map_or(took, |b| b.min(took)));
            }
        }
        best
    };
    let each = futures::future::join_all(live.iter().take(2).map(|&d| three(d))).await;
    each.into_iter().flatten().min()
}

/// Disk `d` streams `bytes` of filler, for [`PROBE_TIME`] at most: what arrived after its
/// first reply.
async fn stream_probe(cluster: &Cluster, d: u32, bytes: u64) -> Option<Delivered> {
    let probe = LinkProbe {
        bytes,
        max_ms: PROBE_TIME.as_millis() as u64,
    };
    probe_stream(cluster, d, probe).await
}

/// Runs one probe on disk `d` within the cluster's deadline; None if it failed.
async fn probe_stream(cluster: &Cluster, d: u32, probe: LinkProbe) -> Option<Delivered> {
    let body = serde_json::to_vec(&probe).ok()?;
    let deadline = cluster.config().deadlines().timeout + PROBE_TIME;
    let run = async {
        let mut client = cluster.client(d);
        let mut replies = client
            .do_action(arrow_flight::Action::new(action::LINK_PROBE, body))
            .await
            .ok()?;
        let first_reply = replies.next().await?.ok()?;
        let first = Instant::now();
        let (mut bytes, mut last) = (0u64, first);
        while let Some(reply) = replies.next().await {
            bytes += reply.ok()?.len() as u64;
            last = Instant::now();
        }
        debug_assert!(first_reply.len() <= LINK_PROBE_CHUNK);
        Some(Delivered { bytes, first, last })
    };
    tokio::time::timeout(deadline, run).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_spans_all_disks_from_the_first_reply_to_the_last() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let delivered = [
            Delivered {
                bytes: 1_000_000,
                first: at(10),
                last: at(110),
            },
            Delivered {
                bytes: 3_000_000,
                first: at(20),
                last: at(210),
            },
        ];
        let (rate, bytes) = aggregate_rate(&delivered).unwrap();
        assert_eq!(bytes, 4_000_000);
        assert!((rate - 20e6).abs() < 1.0, "{rate}");
        assert!(aggregate_rate(&[]).is_none());
        let nothing = [Delivered {
            bytes: 0,
            first: at(1),
            last: at(1),
        }];
        assert!(aggregate_rate(&nothing).is_none());
    }

    #[test]
    fn a_query_that_moved_more_raises_the_probed_figure_and_only_it() {
        let links = Links::default();
        let probed = LinkFigures {
            host_bytes_per_sec: 10e6,
            rtt: None,
            source: LinkSource::Probe {
                disks: 2,
                bytes: 1 << 20,
                took: Duration::from_millis(250),
            },
            at: Instant::now(),
            disks: DiskLinks::Assumed,
        };
        *links.figures.try_lock().unwrap() = Some(probed.clone());
        let second = Duration::from_secs(1);
        links.observe(1 << 20, Duration::from_millis(10)); // too small to count
        links.observe(8_000_000, second); // slower than the probe: says nothing
        assert_eq!(
            links
                .figures
                .try_lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .host_bytes_per_sec,
            10e6
        );
        links.observe(50_000_000, second);
        let raised = links.figures.try_lock().unwrap().clone().unwrap();
        assert_eq!(raised.host_bytes_per_sec, 50e6);
        assert!(
            raised.describe().contains("a query received"),
            "{}",
            raised.describe()
        );
        // A throttle is what it is.
        let throttle = LinkFigures {
            source: LinkSource::Throttle { mbps: 80 },
            ..probed
        };
        *links.figures.try_lock().unwrap() = Some(throttle);
        links.observe(50_000_000, second);
        assert_eq!(
            links
                .figures
                .try_lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .host_bytes_per_sec,
            10e6
        );
    }

    #[test]
    fn a_measured_link_is_probed_with_a_tenth_of_a_seconds_worth() {
        assert_eq!(probe_bytes(None, 4), PROBE_BYTES);
        // 100 Mbit/s over 4 disks: 1.25 MB in all.
        assert_eq!(probe_bytes(Some(12.5e6), 4), 312_500);
        assert_eq!(probe_bytes(Some(1e6), 4), MIN_PROBE_BYTES);
        assert_eq!(probe_bytes(Some(40e9), 1), PROBE_BYTES);
    }

    #[test]
    fn explain_says_where_the_figure_came_from() {
        let f = LinkFigures {
            host_bytes_per_sec: 12.5e6,
            rtt: Some(Duration::from_micros(1500)),
            source: LinkSource::Probe {
                disks: 4,
                bytes: 3 << 20,
                took: Duration::from_millis(260),
            },
            at: Instant::now(),
            disks: DiskLinks::Measured {
                bytes_per_sec: 0.5e6,
                pairs: 4,
            },
        };
        let line = f.describe();
        assert!(
            line.starts_with("host link 100 Mbit/s, round trip 1.50 ms (measured"),
            "{line}"
        );
        assert!(line.contains("from 4 disks in 260 ms"), "{line}");
        assert!(
            line.ends_with(
                "; disk to disk 4 Mbit/s (measured: the median of 4 pairs probing at once)"
            ),
            "{line}"
        );
        let t = LinkFigures {
            source: LinkSource::Throttle { mbps: 100 },
            rtt: None,
            ..f
        };
        assert!(t.describe().contains("host_link_mbps = 100 (a throttle)"));
        let through = LinkFigures {
            disks: DiskLinks::ThroughHost,
            ..t.clone()
        };
        assert!(
            through
                .describe()
                .ends_with("disk to disk through the host")
        );
        assert_eq!(DiskLinks::Assumed.bytes_per_sec(), ASSUMED_BYTES_PER_SEC);
        assert!(t.fresh(u32::MAX));
    }

    #[test]
    fn figures_go_stale_by_age_and_by_the_plans_that_used_them() {
        let Some(long_ago) = Instant::now().checked_sub(Duration::from_secs(700)) else {
            return; // a machine up for less than 700 s cannot date figures that far back
        };
        let at = |secs: u64| LinkFigures {
            at: long_ago + Duration::from_secs(700 - secs),
            ..LinkFigures::assumed()
        };
        assert!(at(0).fresh(1000), "young figures serve any number of plans");
        assert!(at(31).fresh(REFRESH_PLANS - 1));
        assert!(!at(31).fresh(REFRESH_PLANS), "old and used: measured again");
        assert!(!at(601).fresh(0), "too old, however little used");
        let throttle = LinkFigures {
            source: LinkSource::Throttle { mbps: 100 },
            ..at(700)
        };
        assert!(throttle.fresh(u32::MAX));
    }
}
