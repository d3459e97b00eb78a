//! The cluster client: connections to the disks, the catalog, status and shutdown
//! ([`cluster`]); running job specs on the disks and merging their result streams ([`jobs`]);
//! loading tables ([`load`]); the links' measured figures ([`links`], measured by [`probe`],
//! kept between processes by [`link_memory`]);
//! the host's relay and router for disk-to-disk streams ([`relay`]); the host link's token
//! bucket ([`throttle`]).
//!
//! It depends on no planner module (`sql`, `run`, `disklet`, `exchange`): the planner makes
//! job specs with `adisk_core::builder::JobBuilder` and hands them to this client
//! (`crates/adisk-core/tests/structure.rs` checks the direction).

pub mod cluster;
pub mod jobs;
pub mod link_memory;
pub mod links;
pub mod load;
pub mod probe;
pub mod relay;
pub mod runs;
pub mod throttle;
