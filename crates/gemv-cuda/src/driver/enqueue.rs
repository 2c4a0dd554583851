//! The one place a gemv kernel is enqueued on a CUDA stream: the arguments marshalled in the
//! kernels' order, the grid, and the launch with its SAFETY argument. The backend's trait path
//! and the engine path ([`super::CudaKernels`]) both call it after validating their memory.

use super::NAME;
use crate::error::CudaError;
use crate::launch::{THREADS_PER_BLOCK, grid_size, kernel_int};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use gemv_backend::Result;
use gemv_core::{GemvShape, KernelSpec, LaunchShape};

/// Device addresses of a launch's operands.
#[derive(Debug, Clone, Copy)]
pub(super) struct Operands {
    /// X's first row.
    pub x: u64,
    /// The packed weights.
    pub packed: u64,
    /// The block scales.
    pub scales: u64,
    /// Y's first row.
    pub y: u64,
}

/// Enqueues `function` (the kernel `spec`) on `stream` over `operands`, on a device of
/// `multiprocessors` SMs: nothing allocated, copied or synchronised, so a graph capture of the
/// stream records it.
///
/// # Safety
/// Each address lies in device memory of `stream`'s context that holds at least
/// `launch.bytes(operand)` bytes from it, stays alive until the kernel has run, and Y's bytes are
/// written by nothing else meanwhile; `launch` is within `spec`'s width.
pub(super) unsafe fn enqueue(
    stream: &CudaStream,
    function: &CudaFunction,
    spec: &KernelSpec,
    operands: Operands,
    global_scale: f32,
    launch: &LaunchShape,
    multiprocessors: u32,
) -> Result<()> {
    let GemvShape { m, n, k } = launch.shape();
    let (m32, n32, k32) = (kernel_int(NAME, "M", m)?, kernel_int(NAME, "N", n)?, kernel_int(NAME, "K", k)?);
    let x_stride = kernel_int(NAME, "X row stride", launch.x_row_stride())?;
    let y_stride = kernel_int(NAME, "Y row stride", launch.y_row_stride())?;
    let config = LaunchConfig {
        grid_dim: (grid_size(NAME, spec, n, multiprocessors)?, 1, 1),
        block_dim: (THREADS_PER_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut builder = stream.launch_builder(function);
    builder.arg(&operands.x).arg(&operands.packed).arg(&operands.scales).arg(&operands.y);
    builder.arg(&global_scale).arg(&m32).arg(&n32).arg(&k32).arg(&x_stride).arg(&y_stride);
    // SAFETY: the argument list matches the kernels' signature (four device pointers, f32, five
    // i32). By this function's contract every operand holds the bytes M, N, K and the strides
    // need; the kernels read only those and write only Y's m rows.
    unsafe { builder.launch(config) }
        .map_err(|source| CudaError::Driver { call: format!("launching {}", spec.name), source })?;
    Ok(())
}
