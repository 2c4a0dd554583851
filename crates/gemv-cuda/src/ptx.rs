//! The committed PTX of this crate's kernels/, built by `cargo xtask kernels` with the pinned nvcc
//! 13.0.88 for compute_75 (PTX ISA 9.0, which CUDA 13.0 drivers, 580 and later, JIT). Embedded
//! so that building this crate needs no CUDA toolkit; `cargo xtask kernels --check` keeps it fresh.

/// PTX of module `w4a16_gemv` (every kernel of the registry).
pub const W4A16_GEMV: &str = include_str!("../ptx/w4a16_gemv.ptx");
