//! `cluster`: adaptive-grid subspace clustering, pMAFIA (chiu §4.3). The kernel is plain Rust;
//! the disk-side adapters and host orchestration come next.
pub mod kernel;
