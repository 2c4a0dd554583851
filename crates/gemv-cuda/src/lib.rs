//! gemv-cuda: the CUDA kernels of this crate's `kernels/`.
//!
//! - [`CudaBackend`]: the kernels on an NVIDIA GPU through cudarc, from the committed PTX
//!   ([`ptx`]); builds and fails cleanly (a typed error) on machines with no CUDA.
//! - [`CudaEmulator`] (feature `emulator`): the same `.cu` sources compiled by g++ and run on the
//!   CPU by a SIMT emulator with a memory checker, so CI proves the kernels without a GPU.
#![warn(missing_docs)]

mod driver;
mod error;
pub mod launch;
pub mod ptx;

pub use driver::{CudaBackend, driver_present};
pub use error::CudaError;

#[cfg(feature = "emulator")]
mod emulator;

#[cfg(feature = "emulator")]
pub use emulator::{CudaEmulator, HostLaunch, ThreadOrder};
