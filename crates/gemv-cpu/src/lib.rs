//! gemv-cpu: the exact numeric contract on the CPU at the speed of memory.
//!
//! The host reference (`gemv-mock`) computes the contract element by element, for clarity; this
//! backend computes the same bits fast. The 64 partial sums of an output are independent chains,
//! so 8 (AVX2, portable) or 16 (AVX-512) consecutive groups advance together, element j of each
//! group at a time, with hardware fused multiply-adds; X is transposed once per launch into that
//! lane layout; rows are split over threads. See docs/cpu.md.
//!
//! - [`CpuBackend`]: the [`GpuBackend`](gemv_backend::GpuBackend) implementation.
//! - [`SimdPath`]: which instruction set runs, detected at run time or forced.
#![warn(missing_docs)]

mod activations;
mod arrangements;
mod backend;
mod compute;
mod kernels;
mod layout;
mod lines;
mod simd;
mod team;
mod weights;

pub use backend::CpuBackend;
pub use simd::{SIMD_VARIABLE, SimdPath};
pub use weights::CpuWeights;
