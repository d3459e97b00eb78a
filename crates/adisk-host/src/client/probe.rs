//! Measuring the links ([`super::links`]): the host link's rate by streaming probes from all
//! live disks at once, its round trip by one-byte probes, and the disk-to-disk links by each
//! disk probing a peer.
use super::links::{
    ASSUMED_BYTES_PER_SEC, DiskLinks, LinkFigures, LinkSource, Links, MIN_PROBE_BYTES, PROBE_AIM,
    PROBE_BYTES, PROBE_TIME,
};
use crate::client::cluster::Cluster;
use adisk_core::protocol::{LINK_PROBE_CHUNK, LinkProbe, PeerProbe, PeerProbeReport, action};
use futures::StreamExt;
use std::time::{Duration, Instant};

impl Links {
    /// The current figures of `cluster`'s host link, measured first if they are missing or
    /// stale.
    pub async fn current(&self, cluster: &Cluster) -> LinkFigures {
        use std::sync::atomic::Ordering::SeqCst;
        let mut figures = self.figures.lock().await;
        let memory = cluster.link_memory();
        if figures.is_none()
            && let Some((kept, used)) = memory
                .as_ref()
                .and_then(|(path, members)| super::link_memory::recall(path, members))
        {
            // Another process's figures, with the plans that used them: they go stale as if
            // this process had measured them and made those plans.
            *figures = Some(kept);
            self.plans.store(used, SeqCst);
        }
        if let Some(f) = figures
            .as_ref()
            .filter(|f| f.fresh(self.plans.load(SeqCst)))
        {
            let used = self.plans.fetch_add(1, SeqCst) + 1;
            // The count matters to the next process only until it reaches a refresh's.
            if used <= super::links::REFRESH_PLANS
                && let Some((path, members)) = &memory
            {
                super::link_memory::remember(path, f, members, used);
            }
            return f.clone();
        }
        self.plans.store(1, SeqCst);
        let measured = measure_within_deadline(cluster, figures.as_ref()).await;
        if let Some((path, members)) = &memory {
            super::link_memory::remember(path, &measured, members, 1);
        }
        *figures = Some(measured.clone());
        measured
    }

    /// Measures `cluster`'s links now, whatever the figures' age, and keeps them with no
    /// plan counted (`adisk up`: the first queries plan with them instead of probing).
    pub async fn measure_now(&self, cluster: &Cluster) -> LinkFigures {
        let mut figures = self.figures.lock().await;
        let measured = measure_within_deadline(cluster, None).await;
        if let Some((path, members)) = cluster.link_memory() {
            super::link_memory::remember(path, &measured, &members, 0);
        }
        self.plans.store(0, std::sync::atomic::Ordering::SeqCst);
        *figures = Some(measured.clone());
        measured
    }
}

/// [`measure`] within one deadline for the whole measurement: a disk that stopped answering
/// (not yet taken as dead) must not hold every `auto` plan for several of its timeouts. Past
/// it, the `previous` figures measured again now, or assumed ones.
async fn measure_within_deadline(cluster: &Cluster, previous: Option<&LinkFigures>) -> LinkFigures {
    let limit = cluster.config().deadlines().timeout + 2 * PROBE_TIME;
    let measured = match tokio::time::timeout(limit, measure(cluster, previous)).await {
        Ok(m) => m,
        Err(_) => match previous {
            Some(previous) => LinkFigures {
                at: Instant::now(),
                ..previous.clone()
            },
            None => LinkFigures::assumed(),
        },
    };
    tracing::debug!("links: {}", measured.describe());
    measured
}

impl LinkFigures {
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
}

/// What one disk's probe delivered: bytes after its first reply, and when its first and last
/// replies arrived.
pub(crate) struct Delivered {
    pub(crate) bytes: u64,
    pub(crate) first: Instant,
    pub(crate) last: Instant,
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
pub(crate) fn probe_bytes(rate: Option<f64>, streams: usize) -> u64 {
    rate.map_or(PROBE_BYTES, |r| {
        let aim = (r * PROBE_AIM.as_secs_f64()) as u64 / streams.max(1) as u64;
        aim.clamp(MIN_PROBE_BYTES, PROBE_BYTES)
    })
}

/// The host link: its throttle, or what all `live` disks deliver at once (`bytes` each).
pub(crate) async fn host_link(cluster: &Cluster, live: &[u32], bytes: u64) -> LinkFigures {
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
pub(crate) async fn disk_links(cluster: &Cluster, live: &[u32], bytes: u64) -> DiskLinks {
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
pub(crate) async fn peer_probe(cluster: &Cluster, from: u32, to: u32, bytes: u64) -> Option<f64> {
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
pub(crate) fn aggregate_rate(delivered: &[Delivered]) -> Option<(f64, u64)> {
    let bytes: u64 = delivered.iter().map(|d| d.bytes).sum();
    let first = delivered.iter().map(|d| d.first).min()?;
    let last = delivered.iter().map(|d| d.last).max()?;
    let secs = last.duration_since(first).as_secs_f64();
    (bytes > 0 && secs > 0.0).then(|| (bytes as f64 / secs, bytes))
}

/// The quickest of three one-byte probes to each of two of `live`, at once (the first may
/// open a connection).
pub(crate) async fn round_trip(cluster: &Cluster, live: &[u32]) -> Option<Duration> {
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
pub(crate) async fn stream_probe(cluster: &Cluster, d: u32, bytes: u64) -> Option<Delivered> {
    let probe = LinkProbe {
        bytes,
        max_ms: PROBE_TIME.as_millis() as u64,
    };
    probe_stream(cluster, d, probe).await
}

/// Runs one probe on disk `d` within the cluster's deadline; None if it failed.
pub(crate) async fn probe_stream(cluster: &Cluster, d: u32, probe: LinkProbe) -> Option<Delivered> {
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
