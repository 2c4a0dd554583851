//! gemv-kernels: the kernel sources every gemv backend loads, in one place.
//!
//! - `cuda/`: the CUDA kernels (`w4a16_gemv.cu` with its `w4a16_gemv_*.cuh` fragments, the
//!   exact family; `w4a16_fast.cu`, the fast tensor-core family; `gemv_portable.cuh`, the one
//!   platform header, which lets the same sources compile for the host under gemv-cuda's SIMT
//!   emulator and whose inline PTX the emulator executes).
//! - `ptx/`: their PTX, built by `cargo xtask kernels` with a pinned NVRTC and committed, so that
//!   building a backend needs no CUDA toolkit ([`ptx`]).
//! - `wgsl/`: the WGSL template every wgpu tier is generated from ([`wgsl`]).
//!
//! Dependents' build scripts find the CUDA sources in `DEP_GEMV_KERNELS_CUDA_DIR`.

pub mod ptx;
pub mod wgsl;
