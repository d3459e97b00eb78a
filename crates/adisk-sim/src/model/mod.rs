//! Component models: drives, SSDs, processors and OS costs, links, memory behaviour.
//! Each is a pure function of its parameters plus a small mutable state; none knows about
//! architectures or workloads.

pub mod cpu;
pub mod disk;
pub mod link;
pub mod memory;
pub mod ssd;
