//! gemv-cuda: the CUDA kernels of gemv-kernels on NVIDIA GPUs, and under a SIMT emulator.
//!
//! - [`CudaKernels`]: the engine-facing path: the kernels on the caller's CUDA stream over the
//!   caller's device memory ([`CudaWeights`], cudarc views), nothing allocated or synchronised
//!   per launch, so a decode step can be captured into a CUDA graph.
//! - [`CudaBackend`]: the kernels on an NVIDIA GPU through cudarc, from the committed PTX
//!   ([`ptx`]), behind the common [`gemv_backend::GpuBackend`] trait; builds and fails cleanly
//!   (a typed error) on machines with no CUDA.
//! - [`CudaEmulator`] (feature `emulator`): the same `.cu` sources compiled by g++ and run on the
//!   CPU by a SIMT emulator with a memory checker, so CI proves the kernels without a GPU.
#![warn(missing_docs)]

mod driver;
mod error;
pub mod launch;
pub mod ptx;

#[cfg(feature = "cublas-peer")]
pub use driver::cublas_present;
pub use driver::{CudaBackend, CudaKernels, CudaWeights, driver_present, engine_context};
pub use error::CudaError;

#[cfg(feature = "emulator")]
mod emulator;

// The emulator build's asm rewriter (build.rs runs it), compiled here for its unit tests.
#[cfg(test)]
#[path = "../build/asm_rewrite.rs"]
#[allow(dead_code)]
mod asm_rewrite;

#[cfg(feature = "emulator")]
pub use emulator::{
    AccessWidths, CudaEmulator, DEFAULT_EMULATED_CAPABILITY, EMULATOR_SANITIZERS, GlobalAccesses, HostLaunch,
    ThreadOrder,
};
