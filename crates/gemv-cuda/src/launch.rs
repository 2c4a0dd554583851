//! Launch geometry, shared by the real driver and the emulator: 128 threads (4 warps) per block,
//! `KernelSpec::rows` weight rows per warp (2 for the register-tiled `batch8_rt2`). The rows
//! column of `GEMV_KERNELS` in kernels/cuda/w4a16_gemv.cu must agree with the registry; the
//! conformance suite would miss rows otherwise.

use gemv_core::KernelSpec;

/// Threads per block (`gemv::kThreadsPerBlock` in the kernel source).
pub const THREADS_PER_BLOCK: u32 = 128;
const WARPS_PER_BLOCK: u32 = THREADS_PER_BLOCK / 32;

/// Weight rows one warp computes (the registry's `rows`).
pub fn rows_per_warp(kernel: &KernelSpec) -> u32 {
    kernel.rows as u32
}

/// Blocks for `n` weight rows.
pub fn grid_size(kernel: &KernelSpec, n: usize) -> u32 {
    let rows_per_block = (WARPS_PER_BLOCK * rows_per_warp(kernel)) as usize;
    u32::try_from(n.div_ceil(rows_per_block)).unwrap_or(u32::MAX)
}

/// A size as the kernels' 32-bit `int` parameter, or [`gemv_backend::Error::LimitExceeded`].
pub fn kernel_int(backend: &'static str, what: &str, value: usize) -> gemv_backend::Result<i32> {
    i32::try_from(value).map_err(|_| gemv_backend::Error::LimitExceeded {
        backend,
        what: format!("{what} = {value} (kernel parameters are 32-bit)"),
        requested: value as u64,
        limit: i32::MAX as u64,
    })
}
