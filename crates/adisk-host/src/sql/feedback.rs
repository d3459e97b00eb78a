//! What `auto` learns from the queries it ran (query feedback, after DB2's learning optimizer,
//! Stillger et al., VLDB 2001): the cost model picks the plan of a query it has not run yet;
//! the wall time of every run is kept, per query, next to the plan it ran; and once a query
//! ran, measured times decide.
//!
//! * **Nothing measured yet:** the cost model's choice.
//! * **One plan measured:** the other is tried once, unless the model expects it to need more
//!   beyond the scans than [`EXPLORE_FACTOR`] times what the measured plan took in all. The
//!   model prices only what the two plans do differently, so an estimate near or below a
//!   measured wall is the sign that the measured plan may have been the wrong one (its own
//!   estimate missed the host's joins, say).
//! * **Both measured:** the one with the lower median of its last [`RUNS_KEPT`] runs.
//!
//! A query is its text in a context: the catalog it ran over (every disk's catalog version,
//! the dead disks and corrupt copies: a load, a restart or a failover starts afresh), the
//! class of the host link (a link re-shaped by a decade is another query) and the engine's
//! options. Runs that failed over to other disks are not kept. `ADISK_AUTO_FEEDBACK=off`
//! turns it off (the model alone decides), for measuring the model.
pub use crate::client::runs::{Feedback, Key, Level, RUNS_KEPT, Walls};
/// The other plan is tried once when the model expects it to need less than this many times
/// what the measured plan took: the model prices only the work beyond the scans, and its
/// estimates miss by about this much in both directions (TPC-H SF 1, 4 disks: Q11's
/// host-centric plan was estimated at 52 ms beyond the scans; the `disks` plan took 45–70 ms
/// in all, the host-centric one 37–47 ms).
pub const EXPLORE_FACTOR: f64 = 2.0;

/// Whether feedback is on (`ADISK_AUTO_FEEDBACK` is not `off`).
pub fn enabled() -> bool {
    std::env::var("ADISK_AUTO_FEEDBACK").map_or(true, |v| v != "off")
}

/// The class of a host link of `bytes_per_sec`: its rate in Mbit/s to the nearest power of
/// ten, 10 Gbit/s and faster (loopback) one class.
pub fn link_class(bytes_per_sec: f64) -> i32 {
    let mbit = (bytes_per_sec * 8.0 / 1e6).max(1.0);
    (mbit.log10().round() as i32).min(4)
}

/// What `auto` runs, and why when measurements decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The plan to run.
    pub level: Level,
    /// Why, when it is not the cost model's choice alone.
    pub why: Option<String>,
}

/// The plan to run: the model picked `estimated`, expecting `host_secs` and `disks_secs`
/// beyond the scans; `walls` are the query's measured runs (see the module).
pub fn decide(
    estimated: Level,
    (host_secs, disks_secs): (f64, f64),
    walls: Option<&Walls>,
) -> Decision {
    let model = Decision {
        level: estimated,
        why: None,
    };
    let Some(w) = walls else { return model };
    let est = |l: Level| match l {
        Level::HostCentric => host_secs,
        Level::Disks => disks_secs,
    };
    match (w.median(Level::HostCentric), w.median(Level::Disks)) {
        (None, None) => model,
        (Some(h), Some(d)) => Decision {
            level: if d < h {
                Level::Disks
            } else {
                Level::HostCentric
            },
            why: Some(format!(
                "measured runs: {}, {}",
                w.describe(Level::HostCentric),
                w.describe(Level::Disks)
            )),
        },
        (h, _) => {
            let (ran, took) = match h {
                Some(h) => (Level::HostCentric, h),
                None => (Level::Disks, w.median(Level::Disks).unwrap_or(0.0)),
            };
            let other = ran.other();
            if est(other) < EXPLORE_FACTOR * took {
                Decision {
                    level: other,
                    why: Some(format!(
                        "trying {}: {}; the model expects {:.3} s beyond the scans for {}",
                        other.name(),
                        w.describe(ran),
                        est(other),
                        other.name()
                    )),
                }
            } else {
                Decision {
                    level: ran,
                    why: Some(format!(
                        "measured runs: {}; the model expects {} to need {:.3} s beyond the scans alone",
                        w.describe(ran),
                        other.name(),
                        est(other)
                    )),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_measured_keeps_the_models_choice() {
        let d = decide(Level::HostCentric, (0.1, 0.2), None);
        assert_eq!(d.level, Level::HostCentric);
        assert!(d.why.is_none());
        let d = decide(Level::Disks, (0.3, 0.2), Some(&Walls::default()));
        assert_eq!(d.level, Level::Disks);
        assert!(d.why.is_none());
    }

    #[test]
    fn one_plan_measured_tries_the_other_when_its_estimate_is_below_the_wall() {
        // Q10 at SF 10: host-centric estimated 0.667 s, took 3.39 s; disks estimated 1.975 s.
        let w = Walls::of(&[3.39], &[]);
        let d = decide(Level::HostCentric, (0.667, 1.975), Some(&w));
        assert_eq!(d.level, Level::Disks);
        assert!(d.why.unwrap().starts_with("trying disks"));
        // The other way round.
        let w = Walls::of(&[], &[0.5]);
        let d = decide(Level::Disks, (0.2, 0.1), Some(&w));
        assert_eq!(d.level, Level::HostCentric);
    }

    #[test]
    fn one_plan_measured_stays_when_the_other_is_expected_to_take_longer() {
        // A slow host link: the host-centric plan's link time alone exceeds the disks' wall.
        let w = Walls::of(&[], &[0.3]);
        let d = decide(Level::Disks, (5.0, 0.1), Some(&w));
        assert_eq!(d.level, Level::Disks);
        assert!(d.why.unwrap().starts_with("measured runs: disks 0.300 s"));
        // The boundary: an estimate of the factor times the wall is not below it; just under
        // it is (TPC-H Q11 at SF 1: host-centric estimated at 52 ms, the disks plan took 45).
        let d = decide(Level::Disks, (EXPLORE_FACTOR * 0.3, 0.1), Some(&w));
        assert_eq!(d.level, Level::Disks);
        let w = Walls::of(&[], &[0.045]);
        let d = decide(Level::Disks, (0.052, 0.018), Some(&w));
        assert_eq!(d.level, Level::HostCentric);
    }

    #[test]
    fn both_measured_the_lower_median_wins() {
        let w = Walls::of(&[0.30, 0.37, 0.32], &[0.29, 0.24, 0.9]);
        assert_eq!(w.median(Level::HostCentric), Some(0.32));
        assert_eq!(w.median(Level::Disks), Some(0.29));
        let d = decide(Level::HostCentric, (0.1, 0.5), Some(&w));
        assert_eq!(d.level, Level::Disks);
        let w = Walls::of(&[0.2, 0.2], &[0.3]);
        assert_eq!(w.median(Level::HostCentric), Some(0.2));
        let d = decide(Level::Disks, (0.5, 0.1), Some(&w));
        assert_eq!(d.level, Level::HostCentric);
        // A tie keeps the host-centric plan (it asks less of the disks).
        let w = Walls::of(&[0.2], &[0.2]);
        assert_eq!(
            decide(Level::Disks, (1.0, 0.0), Some(&w)).level,
            Level::HostCentric
        );
    }

    #[test]
    fn link_classes_are_decades_up_to_ten_gigabit() {
        let class = |mbit: f64| link_class(mbit * 1e6 / 8.0);
        assert_eq!(class(95.0), 2);
        assert_eq!(class(100.0), 2);
        assert_eq!(class(940.0), 3);
        assert_eq!(class(9_400.0), 4);
        assert_eq!(class(32_000.0), 4);
        assert_eq!(class(0.0), 0);
    }
}
