//! `datacube`: the data cube by PipeHash (acharya §4, uysal §5). The kernel is plain Rust; the
//! disk-side adapters and host orchestration come next.
pub mod generator;
pub mod kernel;
