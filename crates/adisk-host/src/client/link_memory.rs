//! Link figures kept between processes (`DIR/links.json`), so that a query run from the
//! command line shortly after another does not probe the links again: each `adisk sql`
//! is a process of its own, and a probe costs it ~0.1–0.4 s of the link (a full probe of
//! every disk at once, then a ring of disk-to-disk probes). `adisk up` measures the links
//! once the cluster is up and keeps them here, so the first query does not pay the probe.
//!
//! The file keeps, beside the figures, how many plans used them, so that processes that
//! come one after another follow the rule one long-lived process follows
//! ([`super::links::LinkFigures::fresh`]): figures are measured again when older than
//! [`super::links::LINK_REFRESH`] once [`REFRESH_PLANS`] plans used them, and when older
//! than [`LINK_MAX_AGE`] whatever the count. They are taken from the file only if they were
//! measured from the same place (host name and network namespace: the same cluster directory
//! seen from another namespace or machine has other links), for the same disks (their
//! addresses), and only measured ones (a probe, or a query that moved more). Anything else —
//! no file, a file that does not parse, other disks — means measuring, as before; a file that
//! cannot be written is left out silently (the figures still serve this process).
use super::links::{DiskLinks, LINK_MAX_AGE, LinkFigures, LinkSource, REFRESH_PLANS};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The file's name in the cluster directory.
pub const FILE: &str = "links.json";

/// What the file holds.
#[derive(Debug, Serialize, Deserialize)]
struct Remembered {
    /// When measured, ms since the Unix epoch.
    at_ms: u64,
    host_bytes_per_sec: f64,
    rtt: Option<Duration>,
    source: LinkSource,
    disks: DiskLinks,
    /// Where from: [`this_place`].
    from: String,
    /// The disks' addresses, in id order.
    members: Vec<String>,
    /// Plans that used the figures since they were measured (a file from before this
    /// count was kept: as many as a refresh waits for).
    #[serde(default = "refresh_plans")]
    plans: u32,
}

fn refresh_plans() -> u32 {
    REFRESH_PLANS
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// This process's place in the network: host name and network namespace.
pub fn this_place() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!("{} {netns}", host.trim())
}

/// Keeps `figures`, used by `plans` plans so far, in `path` for the next process (measured
/// figures only).
pub fn remember(path: &Path, figures: &LinkFigures, members: &[String], plans: u32) {
    if !matches!(
        figures.source,
        LinkSource::Probe { .. } | LinkSource::Observed { .. }
    ) {
        return;
    }
    let age = figures.at.elapsed().as_millis() as u64;
    let kept = Remembered {
        at_ms: now_ms().saturating_sub(age),
        host_bytes_per_sec: figures.host_bytes_per_sec,
        rtt: figures.rtt,
        source: figures.source.clone(),
        disks: figures.disks.clone(),
        from: this_place(),
        members: members.to_vec(),
        plans,
    };
    let Ok(text) = serde_json::to_vec(&kept) else {
        return;
    };
    let tmp = path.with_extension(format!("json.{}", std::process::id()));
    if std::fs::write(&tmp, text).is_err() || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
        tracing::debug!("links: could not keep the figures in {}", path.display());
    }
}

/// The figures kept in `path` and the plans that used them, if they are younger than
/// [`LINK_MAX_AGE`], from here and of these disks.
pub fn recall(path: &Path, members: &[String]) -> Option<(LinkFigures, u32)> {
    let text = std::fs::read(path).ok()?;
    let kept: Remembered = serde_json::from_slice(&text).ok()?;
    let age = Duration::from_millis(now_ms().checked_sub(kept.at_ms)?);
    let usable = age < LINK_MAX_AGE
        && kept.from == this_place()
        && kept.members == members
        && kept.host_bytes_per_sec.is_finite()
        && kept.host_bytes_per_sec > 0.0
        && matches!(
            kept.source,
            LinkSource::Probe { .. } | LinkSource::Observed { .. }
        );
    if !usable {
        return None;
    }
    let figures = LinkFigures {
        host_bytes_per_sec: kept.host_bytes_per_sec,
        rtt: kept.rtt,
        source: kept.source,
        at: Instant::now().checked_sub(age)?,
        disks: kept.disks,
    };
    Some((figures, kept.plans))
}

#[cfg(test)]
mod tests {
    use super::super::links::LINK_REFRESH;
    use super::*;

    fn probed(age: Duration) -> LinkFigures {
        LinkFigures {
            host_bytes_per_sec: 12.5e6,
            rtt: Some(Duration::from_micros(210)),
            source: LinkSource::Probe {
                disks: 4,
                bytes: 6 << 20,
                took: Duration::from_millis(546),
            },
            at: Instant::now() - age,
            disks: DiskLinks::Measured {
                bytes_per_sec: 400e6,
                pairs: 4,
            },
        }
    }

    #[test]
    fn young_measured_figures_of_the_same_disks_come_back_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let members = vec!["10.0.0.1:7000".to_string(), "10.0.0.2:7000".to_string()];
        assert!(recall(&path, &members).is_none(), "no file");
        remember(&path, &probed(Duration::from_secs(2)), &members, 3);
        let (back, plans) = recall(&path, &members).expect("kept");
        assert!(back.same_figures(&probed(Duration::ZERO)));
        assert_eq!(back.source, probed(Duration::ZERO).source);
        assert_eq!(plans, 3, "the plans that used them come back with them");
        let age = back.at.elapsed();
        assert!(
            age >= Duration::from_secs(2) && age < Duration::from_secs(5),
            "{age:?}"
        );
        // Other disks, or figures as old as the longest age: measured again. Figures older
        // than a refresh come back with their count, which decides (`LinkFigures::fresh`).
        assert!(recall(&path, &members[..1]).is_none());
        remember(&path, &probed(LINK_MAX_AGE), &members, 0);
        assert!(recall(&path, &members).is_none());
        remember(&path, &probed(LINK_REFRESH), &members, 1);
        let (old, plans) = recall(&path, &members).expect("older than a refresh, kept");
        assert!(old.fresh(plans), "one plan used them: still good");
        assert!(
            !old.fresh(REFRESH_PLANS),
            "as many as a refresh waits for: stale"
        );
        // Assumed figures are not kept (the file keeps what it had); a broken file is none.
        remember(&path, &probed(Duration::ZERO), &members, 1);
        remember(&path, &LinkFigures::assumed(), &members, 1);
        assert!(recall(&path, &members).is_some());
        std::fs::write(&path, b"{ not json").unwrap();
        assert!(recall(&path, &members).is_none());
        // A file from before the count was kept: as many plans as a refresh waits for.
        let mut text = serde_json::to_value(Remembered {
            at_ms: now_ms(),
            host_bytes_per_sec: 1e6,
            rtt: None,
            source: probed(Duration::ZERO).source,
            disks: DiskLinks::Assumed,
            from: this_place(),
            members: members.clone(),
            plans: 0,
        })
        .unwrap();
        text.as_object_mut().unwrap().remove("plans");
        std::fs::write(&path, serde_json::to_vec(&text).unwrap()).unwrap();
        assert_eq!(recall(&path, &members).map(|r| r.1), Some(REFRESH_PLANS));
        // Measured from another place (namespace or machine): not these links.
        let mut other: serde_json::Value = serde_json::from_slice(
            &serde_json::to_vec(&Remembered {
                at_ms: now_ms(),
                host_bytes_per_sec: 1e6,
                rtt: None,
                source: probed(Duration::ZERO).source,
                disks: DiskLinks::Assumed,
                from: "elsewhere net:[1]".into(),
                members: members.clone(),
                plans: 0,
            })
            .unwrap(),
        )
        .unwrap();
        std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
        assert!(recall(&path, &members).is_none());
        other["from"] = this_place().into();
        std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
        assert!(recall(&path, &members).is_some());
    }
}
