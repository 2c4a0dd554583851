//! The one place a gemv kernel is enqueued on a CUDA stream: the arguments marshalled in the
//! kernels' order, the grid, and the launch with its SAFETY argument. The backend's trait path
//! and the engine path ([`super::CudaKernels`]) both call it after validating their memory.

use super::NAME;
use super::programmatic::launch_dependent;
use crate::LaunchOrder;
use crate::error::CudaError;
use crate::launch::{THREADS_PER_BLOCK, grid_size, grouped_grid_size, kernel_int};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use gemv_backend::{GroupedArgs, Result};
use gemv_core::{GemvShape, GroupedKernelSpec, KernelSpec, LaunchShape, YFormat};
use std::ffi::c_void;

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

/// A pointer to one kernel argument's value, as `cuLaunchKernelEx` takes it.
fn param<T>(value: &mut T) -> *mut c_void {
    (value as *mut T).cast()
}

/// Enqueues `function` (the kernel `spec`, from the module build `order` runs) on `stream` over
/// `operands`, on a device of `multiprocessors` SMs: nothing allocated, copied or synchronised,
/// so a graph capture of the stream records it.
///
/// # Safety
/// Each address lies in device memory of `stream`'s context that holds at least
/// `launch.bytes(operand)` bytes from it, stays alive until the kernel has run, and Y's bytes are
/// written by nothing else meanwhile; `launch` is within `spec`'s width; `function` comes from
/// the module build `order` runs ([`LaunchOrder::module_build`]).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn enqueue(
    stream: &CudaStream,
    function: &CudaFunction,
    spec: &KernelSpec,
    operands: Operands,
    global_scale: f32,
    launch: &LaunchShape,
    multiprocessors: u32,
    order: LaunchOrder,
) -> Result<()> {
    let GemvShape { m, n, k } = launch.shape();
    let (m32, n32, k32) = (kernel_int(NAME, "M", m)?, kernel_int(NAME, "N", n)?, kernel_int(NAME, "K", k)?);
    let x_stride = kernel_int(NAME, "X row stride", launch.x_row_stride())?;
    let y_stride = kernel_int(NAME, "Y row stride", launch.y_row_stride())?;
    let y_f32 = i32::from(launch.y_format() == YFormat::F32);
    let config = LaunchConfig {
        grid_dim: (grid_size(NAME, spec, n, multiprocessors)?, 1, 1),
        block_dim: (THREADS_PER_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    let launched = match order {
        LaunchOrder::Serialized => {
            let mut builder = stream.launch_builder(function);
            builder.arg(&operands.x).arg(&operands.packed).arg(&operands.scales).arg(&operands.y);
            builder.arg(&global_scale).arg(&m32).arg(&n32).arg(&k32).arg(&x_stride).arg(&y_stride).arg(&y_f32);
            // SAFETY: the argument list matches the kernels' signature (four device pointers,
            // f32, six i32). By this function's contract every operand holds the bytes M, N, K,
            // the strides and Y's format need; the kernels read only those and write only Y's m
            // rows.
            unsafe { builder.launch(config) }.map(drop)
        }
        LaunchOrder::ProgrammaticDependent => {
            let Operands { mut x, mut packed, mut scales, mut y } = operands;
            let (mut scale, mut m32, mut n32, mut k32, mut x_stride, mut y_stride, mut y_f32) =
                (global_scale, m32, n32, k32, x_stride, y_stride, y_f32);
            let mut params = [
                param(&mut x),
                param(&mut packed),
                param(&mut scales),
                param(&mut y),
                param(&mut scale),
                param(&mut m32),
                param(&mut n32),
                param(&mut k32),
                param(&mut x_stride),
                param(&mut y_stride),
                param(&mut y_f32),
            ];
            // SAFETY: as above, the parameters in the kernels' order and sizes (u64 addresses,
            // f32, i32), each a local alive for the call; `function` comes from the dependent
            // build (this function's contract), whose kernels wait before X and Y.
            unsafe { launch_dependent(stream, function, config, &mut params) }
        }
    };
    launched.map_err(|source| CudaError::Driver { call: format!("launching {}", spec.name), source })?;
    Ok(())
}

/// Device addresses of a grouped launch's operands.
#[derive(Debug, Clone, Copy)]
pub(super) struct GroupedOperands {
    /// X `[m][K]`.
    pub x: u64,
    /// The stacked packed weights.
    pub packed: u64,
    /// The stacked block scales.
    pub scales: u64,
    /// One or E f32 global scales.
    pub global_scales: u64,
    /// The u32 expert ids `[m][top_k]`.
    pub routing: u64,
    /// Y `[m][top_k][N]`.
    pub y: u64,
}

/// The shape of a grouped launch: E experts of N x K, M tokens, top-k slots each, one global
/// scale or one per expert.
#[derive(Debug, Clone, Copy)]
pub(super) struct GroupedShape {
    pub experts: usize,
    pub m: usize,
    pub top_k: usize,
    pub n: usize,
    pub k: usize,
    pub per_expert_scales: bool,
}

impl From<&GroupedArgs> for GroupedShape {
    fn from(args: &GroupedArgs) -> Self {
        Self {
            experts: args.experts,
            m: args.m,
            top_k: args.top_k,
            n: args.n,
            k: args.k,
            per_expert_scales: args.per_expert_global_scales(),
        }
    }
}

/// Enqueues the grouped kernel `spec` (`function`, from the module build `order` runs) on
/// `stream` over `operands`, shaped by `shape`: nothing allocated, copied or synchronised
/// (graph-capturable).
///
/// # Safety
/// Each operand's address is the first byte of device memory of `stream`'s context holding what
/// `shape` needs ([`GroupedArgs::validate`]'s sizes), alive until the kernel has run, Y's bytes
/// written by nothing else meanwhile and overlapping no input; `function` comes from the module
/// build `order` runs.
pub(super) unsafe fn enqueue_grouped(
    stream: &CudaStream,
    function: &CudaFunction,
    spec: &GroupedKernelSpec,
    operands: GroupedOperands,
    shape: GroupedShape,
    order: LaunchOrder,
) -> Result<()> {
    let pairs = shape.m * shape.top_k;
    let config = LaunchConfig {
        grid_dim: (grouped_grid_size(NAME, spec, pairs, shape.n)?, 1, 1),
        block_dim: (THREADS_PER_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    let per_expert = i32::from(shape.per_expert_scales);
    let experts = kernel_int(NAME, "experts", shape.experts)?;
    let (pairs, top_k) = (kernel_int(NAME, "pairs", pairs)?, kernel_int(NAME, "top-k", shape.top_k)?);
    let (n, k) = (kernel_int(NAME, "N", shape.n)?, kernel_int(NAME, "K", shape.k)?);
    let launched = match order {
        LaunchOrder::Serialized => {
            let mut builder = stream.launch_builder(function);
            builder.arg(&operands.x).arg(&operands.packed).arg(&operands.scales).arg(&operands.y);
            builder.arg(&operands.global_scales).arg(&per_expert).arg(&operands.routing);
            builder.arg(&experts).arg(&pairs).arg(&top_k).arg(&n).arg(&k);
            // SAFETY: the argument list matches the grouped kernels' signature (four device
            // pointers, a pointer, i32, a pointer, five i32). By this function's contract every
            // operand holds what the launch needs; the kernel reads only those (an expert id past
            // E reads no weights) and writes only Y.
            unsafe { builder.launch(config) }.map(drop)
        }
        LaunchOrder::ProgrammaticDependent => {
            let GroupedOperands { mut x, mut packed, mut scales, mut global_scales, mut routing, mut y } = operands;
            let (mut per_expert, mut experts, mut pairs, mut top_k, mut n, mut k) =
                (per_expert, experts, pairs, top_k, n, k);
            let mut params = [
                param(&mut x),
                param(&mut packed),
                param(&mut scales),
                param(&mut y),
                param(&mut global_scales),
                param(&mut per_expert),
                param(&mut routing),
                param(&mut experts),
                param(&mut pairs),
                param(&mut top_k),
                param(&mut n),
                param(&mut k),
            ];
            // SAFETY: as above, the parameters in the grouped kernels' order and sizes, each a
            // local alive for the call; `function` comes from the dependent build (this
            // function's contract), whose kernels wait before the routing, X and Y.
            unsafe { launch_dependent(stream, function, config, &mut params) }
        }
    };
    launched.map_err(|source| CudaError::Driver { call: format!("launching {}", spec.name), source })?;
    Ok(())
}
