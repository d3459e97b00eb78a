//! How much of a query may run at the disks: the offload levels.

use crate::{HostError, Result};

/// How much of a query may run at the disks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Offload {
    /// Conventional: the disks serve whole rows; the host does everything.
    None,
    /// + column elimination.
    Project,
    /// + qualification (filters).
    Select,
    /// + partial aggregation and group-by.
    Aggregate,
    /// + Bloom-filter semi-joins.
    Semijoin,
    /// Whole query stages at the disks: joins (build sides broadcast or both sides hashed
    /// disk to disk), final aggregations and sorts; the host receives the last stage's rows.
    Disks,
    /// Decided per scan and operator by the cost model.
    Auto,
}

impl Offload {
    /// All levels, in order.
    pub const ALL: [Offload; 7] = [
        Offload::None,
        Offload::Project,
        Offload::Select,
        Offload::Aggregate,
        Offload::Semijoin,
        Offload::Disks,
        Offload::Auto,
    ];
}

impl std::fmt::Display for Offload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Offload::None => "none",
            Offload::Project => "project",
            Offload::Select => "select",
            Offload::Aggregate => "aggregate",
            Offload::Semijoin => "semijoin",
            Offload::Disks => "disks",
            Offload::Auto => "auto",
        })
    }
}

impl std::str::FromStr for Offload {
    type Err = HostError;
    fn from_str(s: &str) -> Result<Self> {
        Offload::ALL
            .into_iter()
            .find(|o| o.to_string() == s)
            .ok_or_else(|| HostError::Invalid(format!("unknown offload level `{s}` (none, project, select, aggregate, semijoin, disks, auto)")))
    }
}
