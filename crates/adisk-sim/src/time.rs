//! Simulated time: an integer number of nanoseconds since the start of a run.
//!
//! There is no wall clock anywhere in the simulator; every duration is derived from
//! model parameters, so a seed and the commit reproduce a run exactly.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in simulated time, in nanoseconds since the start of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

/// A span of simulated time, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimDuration(pub u64);

impl SimTime {
    /// The start of every run.
    pub const ZERO: SimTime = SimTime(0);
    /// Seconds as a float (for reports only; never fed back into the model).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
    /// The later of two times.
    pub fn max(self, other: SimTime) -> SimTime {
        if self.0 >= other.0 { self } else { other }
    }
    /// Time elapsed since `earlier` (saturating at zero).
    pub fn since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl SimDuration {
    /// Zero length.
    pub const ZERO: SimDuration = SimDuration(0);
    /// A duration from (non-negative, finite) seconds, rounded to the nearest nanosecond.
    /// Negative or non-finite inputs are clamped to zero; configuration validation rejects
    /// them before they can reach a model.
    pub fn from_secs_f64(secs: f64) -> SimDuration {
        if !(secs.is_finite()) || secs <= 0.0 {
            return SimDuration(0);
        }
        SimDuration((secs * 1e9).round() as u64)
    }
    /// A duration from microseconds.
    pub fn from_us_f64(us: f64) -> SimDuration {
        SimDuration::from_secs_f64(us * 1e-6)
    }
    /// A duration from milliseconds.
    pub fn from_ms_f64(ms: f64) -> SimDuration {
        SimDuration::from_secs_f64(ms * 1e-3)
    }
    /// Seconds as a float.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, d: SimDuration) -> SimTime {
        // Saturating: absurd inputs (e.g. 1e30 cycles) end the run at u64::MAX ns instead of wrapping.
        SimTime(self.0.saturating_add(d.0))
    }
}
impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, d: SimDuration) {
        self.0 = self.0.saturating_add(d.0);
    }
}
impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, d: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(d.0))
    }
}
impl AddAssign for SimDuration {
    fn add_assign(&mut self, d: SimDuration) {
        self.0 = self.0.saturating_add(d.0);
    }
}
impl Sub for SimTime {
    type Output = SimDuration;
    fn sub(self, o: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(o.0))
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6} s", self.as_secs_f64())
    }
}
