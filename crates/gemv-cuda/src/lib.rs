//! gemv-cuda: the CUDA kernels of `kernels/cuda/`.
//!
//! - [`CudaEmulator`] (feature `emulator`): the same `.cu` sources compiled by g++ and run on the
//!   CPU by a SIMT emulator with a memory checker, so CI proves the kernels without a GPU.
#![warn(missing_docs)]

pub mod launch;

#[cfg(feature = "emulator")]
mod emulator;

#[cfg(feature = "emulator")]
pub use emulator::{CudaEmulator, HostLaunch};
