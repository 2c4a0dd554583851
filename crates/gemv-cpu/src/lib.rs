//! gemv-cpu: the exact numeric contract on the CPU at the speed of memory.
//!
//! The host reference (`gemv-mock`) computes the contract element by element, for clarity; this
//! backend computes the same bits fast. The weights are arranged once for streaming (16 rows a
//! tile, a vector lane per row); a tile kernel runs the contract's chains of several groups and
//! tokens at once, element after element, with hardware fused multiply-adds (on AVX-512 BF16, two
//! elements per `vdpbf16ps`, which rounds after each product: the same bits); X is put in the
//! blocks' order once per launch; runs of tiles are split over threads. See docs/cpu.md.
//!
//! - [`CpuBackend`]: the [`GpuBackend`](gemv_backend::GpuBackend) implementation; its engine
//!   paths [`CpuBackend::gemv`] over [`CpuWeights`] and [`CpuBackend::grouped`] (a routed
//!   mixture-of-experts layer) over [`CpuExperts`].
//! - [`SimdPath`]: which instruction set runs: the fastest on this CPU for each M ([`Calibration`]),
//!   or forced ([`PathSelection`]).
#![warn(missing_docs)]

mod activations;
mod arrangements;
mod backend;
mod calibration;
mod compute;
#[cfg(target_arch = "x86_64")]
mod dpbf16_probe;
mod experts;
mod kernels;
mod layout;
mod lines;
mod sequence;
mod simd;
mod team;
mod weights;

pub use backend::CpuBackend;
pub use calibration::{CALIBRATED_TOKENS, Calibration, ForcedBy, PathSelection};
pub use experts::CpuExperts;
pub use simd::{SIMD_VARIABLE, SimdPath};
pub use weights::CpuWeights;
// What an engine's call names beside this crate's own types, so one `use` line suffices.
pub use gemv_backend::Error;
pub use gemv_core::{FamilyChoice, GemvCall, GroupedCall, Nvfp4Experts, Nvfp4ExpertsView, Nvfp4Matrix, Nvfp4View};
