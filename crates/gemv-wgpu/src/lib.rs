//! gemv-wgpu: the gemv tiers in WGSL on wgpu (Vulkan, Metal, DX12; lavapipe in CI).
//!
//! Every tier is generated from one template (gemv-kernels' `wgsl/w4a16_gemv.wgsl`) and
//! implements the exact numeric contract, so its output is bit-identical to the host reference on
//! any driver. A routed mixture-of-experts layer runs as one grouped launch
//! (`GpuBackend::launch_grouped`) from the same template with its grouped entry point.
#![warn(missing_docs)]

mod adapter;
mod backend;
mod engine;
mod error;
mod launch;
mod shader;

pub use adapter::{ADAPTER_ENV, AdapterChoice};
pub use backend::WgpuBackend;
pub use error::WgpuError;
pub use launch::{WgpuExperts, WgpuRange, WgpuWeights};
pub use shader::{grouped_shader_source, rows_per_workgroup, shader_source};
// What an engine's call names beside this crate's own types, so one `use` line suffices.
pub use gemv_backend::Error;
pub use gemv_core::{FamilyChoice, GemvCall, GroupedCall, Nvfp4Experts, Nvfp4ExpertsView, Nvfp4Matrix, Nvfp4View};
