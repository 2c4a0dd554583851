//! gemv-cuda: the CUDA kernels of gemv-kernels on NVIDIA GPUs.
//!
//! - [`CudaKernels`]: the engine-facing path: the kernels on the caller's CUDA stream over the
//!   caller's device memory ([`CudaWeights`], cudarc views), nothing allocated or synchronised
//!   per launch, so a decode step can be captured into a CUDA graph.
//! - [`CudaBackend`]: the kernels on an NVIDIA GPU through cudarc, from the committed PTX
//!   ([`ptx`]), behind the common [`gemv_backend::GpuBackend`] trait; builds and fails cleanly
//!   (a typed error) on machines with no CUDA.
//!
//! The same `.cu` sources run on the CPU under a SIMT emulator in the gemv-cuda-emulator crate,
//! which tests use to prove the kernels without a GPU; [`launch`] and [`ptx`] are what it shares
//! with this crate (launch geometry, module builds).
#![warn(missing_docs)]

mod driver;
mod error;
pub mod launch;
mod launch_order;
pub mod ptx;

#[cfg(feature = "cublas-peer")]
pub use driver::cublas_present;
pub use driver::{CudaBackend, CudaExperts, CudaKernels, CudaWeights, driver_present, engine_context};
pub use error::CudaError;
pub use launch_order::LaunchOrder;
// What an engine's call names beside this crate's own types, so one `use` line suffices.
pub use gemv_backend::Error;
pub use gemv_core::{FamilyChoice, GemvCall, GroupedCall, Nvfp4Experts, Nvfp4ExpertsView, Nvfp4Matrix, Nvfp4View};
