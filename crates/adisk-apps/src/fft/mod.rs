//! `fft`: out-of-core 2-D FFT on the disks (chiu §4.4). The kernel is plain Rust; the disk-side
//! adapters and host orchestration come next.
pub mod kernel;
