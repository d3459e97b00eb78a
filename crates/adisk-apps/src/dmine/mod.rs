//! `dmine`: frequent itemsets (uysal §5; chiu §4.2): count distribution, eclat, hybrid
//! distribution. The kernel is plain Rust; the disk-side adapters and host orchestration come next.
pub mod generator;
pub mod kernel;
