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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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

    /// Nothing measured: the loopback-class rate, said as assumed.
    pub(crate) fn assumed() -> Self {
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
    pub(crate) fn fresh(&self, plans: u32) -> bool {
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
    pub(crate) figures: tokio::sync::Mutex<Option<LinkFigures>>,
    /// Plans that used the figures since they were measured.
    pub(crate) plans: std::sync::atomic::AtomicU32,
}

impl Links {
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

    /// The figures as they stand, measuring nothing and counting no plan (None: none yet, or
    /// a probe is measuring right now).
    pub fn known(&self) -> Option<LinkFigures> {
        self.figures.try_lock().ok()?.clone()
    }

    /// Forgets the figures: the next plan measures again.
    pub async fn forget(&self) {
        *self.figures.lock().await = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::probe::{Delivered, aggregate_rate, probe_bytes};

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
