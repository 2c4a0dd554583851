//! The engine-facing CUDA path: the kernels launched on the caller's stream, over the caller's
//! device memory, with nothing allocated, copied or synchronised per launch, so that an engine's
//! decode step (launches included) can be captured into a CUDA graph and replayed.
//!
//! [`CudaKernels::load`] puts the embedded PTX into the engine's context once and looks every
//! kernel up. Weights are whatever device memory the engine filled ([`CudaWeights`]: a whole
//! matrix, or a row range of a bigger one, a tensor-parallel shard, as views). Each step,
//! [`CudaKernels::gemv`] takes a [`GemvCall`] (M, row strides, family policy), validates it and
//! the views once and enqueues the dispatch plan of the family the policy picks;
//! [`CudaKernels::launch_kernel`] enqueues one chosen kernel instead; [`CudaKernels::grouped`]
//! enqueues a routed mixture-of-experts layer ([`CudaExperts`]) in one launch. The tier table is resolved
//! once at load, under the kill switches of the environment or given as a value
//! ([`CudaKernels::load_with`]); [`CudaKernels::load_ordered`] also makes every launch a
//! programmatic dependent of the kernel before it on the stream (sm_90 and newer). Row strides (X's and Y's rows as rows of wider buffers, e.g. one
//! head's slice of a fused activation) leave the elements between rows unread and unwritten.

use super::driver_error;
use super::enqueue::{GroupedOperands, GroupedShape, Operands, enqueue, enqueue_grouped};
use crate::LaunchOrder;
use crate::error::CudaError;
use crate::ptx;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use gemv_backend::{Error, KernelHandle, ResolvedTiers, Result};
use gemv_core::{
    Bf16Element, GROUPED_KERNELS, GemvCall, GroupedCall, KERNELS, KernelSpec, KillSwitches, LaunchShape, Operand,
    YElement,
};
use std::sync::Arc;

use super::NAME;

/// An NVFP4 matrix in device memory the engine owns: `packed` `[n][k/2]` E2M1 codes, `scales`
/// `[n][k/16]` E4M3 codes (views: a row range of a bigger matrix is used in place).
#[derive(Debug)]
pub struct CudaWeights<'a> {
    /// Packed codes, at least `n * k / 2` bytes.
    pub packed: CudaView<'a, u8>,
    /// Scale codes, at least `n * k / 16` bytes.
    pub scales: CudaView<'a, u8>,
    /// The global scale.
    pub global_scale: f32,
    /// Rows.
    pub n: usize,
    /// Columns (a multiple of 16).
    pub k: usize,
}

/// A mixture-of-experts layer's weights in device memory the engine owns: E matrices of one
/// shape stacked (`[E][n][k/2]` codes, `[E][n][k/16]` scale codes), with one global scale for all
/// or one per expert.
#[derive(Debug)]
pub struct CudaExperts<'a> {
    /// Packed codes, at least `experts * n * k / 2` bytes.
    pub packed: CudaView<'a, u8>,
    /// Scale codes, at least `experts * n * k / 16` bytes.
    pub scales: CudaView<'a, u8>,
    /// Exactly one global scale, or one per expert.
    pub global_scales: CudaView<'a, f32>,
    /// Experts.
    pub experts: usize,
    /// Rows of each expert.
    pub n: usize,
    /// Columns of each expert (a multiple of 16).
    pub k: usize,
}

/// The gemv kernels loaded into one CUDA context.
pub struct CudaKernels {
    /// One function per registry kernel, in [`KERNELS`] order; `None` for a family the device
    /// cannot run (the fast family below sm_80).
    functions: Vec<Option<CudaFunction>>,
    /// One function per grouped kernel, in [`GROUPED_KERNELS`] order; None where the device did
    /// not load its module.
    grouped: Vec<Option<CudaFunction>>,
    /// The tier table over those functions, resolved once under the kill switches.
    tiers: ResolvedTiers,
    /// SMs of the context's device: a persistent kernel's grid.
    multiprocessors: u32,
    /// How every launch is enqueued; the functions come from the builds for it.
    order: LaunchOrder,
}

impl std::fmt::Debug for CudaKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaKernels").field("kernels", &self.functions.len()).finish()
    }
}

/// Opens CUDA device `ordinal`'s primary context for an engine that has none yet; no driver or
/// no such device is a typed [`Error::Unavailable`], never a panic.
pub fn engine_context(ordinal: usize) -> Result<Arc<CudaContext>> {
    if !super::driver_present() {
        return Err(CudaError::NoDriver.into());
    }
    let count = CudaContext::device_count().map_err(|source| CudaError::Open { ordinal, source })?;
    if count <= 0 || ordinal >= count as usize {
        return Err(CudaError::NoDevice { ordinal, count }.into());
    }
    Ok(CudaContext::new(ordinal).map_err(|source| CudaError::Open { ordinal, source })?)
}

impl CudaKernels {
    /// Loads the embedded PTX of every module the device can run into `context` (the driver
    /// compiles it for the context's device) and looks every kernel up, under the process's kill
    /// switches (the environment). Once per context.
    pub fn load(context: &Arc<CudaContext>) -> Result<Self> {
        Self::load_with(context, KillSwitches::process())
    }

    /// [`Self::load`] under the kill switches `switches`, given as a value.
    pub fn load_with(context: &Arc<CudaContext>, switches: KillSwitches) -> Result<Self> {
        Self::load_ordered(context, switches, LaunchOrder::Serialized)
    }

    /// [`Self::load_with`], every launch enqueued in `order`. With
    /// [`LaunchOrder::ProgrammaticDependent`] (sm_90 and newer, else [`Error::Unsupported`]) each
    /// launch may start while the kernel before it on the stream finishes: it streams its first
    /// weights, then waits for that kernel before reading X or the routing or writing Y, so the
    /// bits are unchanged and the previous kernel may be the engine's own. Capturing such launches
    /// into a graph needs a driver that records programmatic edges (recent drivers do).
    pub fn load_ordered(context: &Arc<CudaContext>, switches: KillSwitches, order: LaunchOrder) -> Result<Self> {
        let capability = context.compute_capability().map_err(driver_error("compute capability"))?;
        order.check(capability)?;
        let mut modules = Vec::new();
        for name in ptx::MODULE_BUILDS.map(|build| build.module) {
            if modules.iter().any(|(loaded, _)| *loaded == name) {
                continue;
            }
            if let Some(text) = order.module_build(name, capability).and_then(ptx::text) {
                let module = context
                    .load_module(cudarc::nvrtc::Ptx::from_src(text))
                    .map_err(driver_error(format!("loading module {name} from PTX")))?;
                modules.push((name, module));
            }
        }
        // Entry `name` of module `module`, None where the device did not load the module.
        let function = |module: &str, name: &str| match modules.iter().find(|(loaded, _)| *loaded == module) {
            Some((_, loaded)) => {
                loaded.load_function(name).map(Some).map_err(driver_error(format!("looking up kernel {name}")))
            }
            None => Ok(None),
        };
        let functions = KERNELS.iter().map(|spec| function(spec.module, spec.name)).collect::<Result<Vec<_>>>()?;
        let present = |module: &str, name: &str| match gemv_core::kernel_in_module(module, name) {
            Some(index) if functions[index].is_some() => KernelHandle::for_name(name),
            _ => KernelHandle::NONE,
        };
        let tiers = ResolvedTiers::resolve_with(NAME, present, switches, Some(capability));
        let grouped =
            GROUPED_KERNELS.iter().map(|spec| function(spec.module, spec.name)).collect::<Result<Vec<_>>>()?;
        Ok(Self { functions, grouped, tiers, multiprocessors: super::multiprocessors(context)?, order })
    }

    /// How these kernels' launches are enqueued.
    pub fn launch_order(&self) -> LaunchOrder {
        self.order
    }

    /// The tier table these kernels resolve (which tiers and families the device has).
    pub fn tiers(&self) -> &ResolvedTiers {
        &self.tiers
    }

    /// Enqueues `call` on `stream`: `y[t] = W x[t]` for its M tokens, X's and Y's rows at its
    /// strides, in the family its policy picks on this device (the fast, tensor-core family only
    /// where asked for and loaded), as many launches as the dispatch plan needs for that M. The
    /// call, the matrix and both views are validated once, before anything is enqueued; then one
    /// driver call per launch, nothing else (no allocation, copy or synchronisation), so a graph
    /// capture of the stream records it. The views start at row 0 of X and Y and span
    /// `(m - 1) * stride + width` elements at least. Y's element type names what is written: the
    /// bf16 result (`u16`, `half::bf16`), or (`f32`, [`gemv_core::YFormat::F32`]) the values it
    /// rounds, for a row-parallel tensor-parallel shard whose all-reduce sums f32 and rounds once.
    pub fn gemv<T: Bf16Element, Y: YElement>(
        &self,
        stream: &CudaStream,
        weights: &CudaWeights<'_>,
        x: &CudaView<'_, T>,
        y: &mut CudaViewMut<'_, Y>,
        call: &GemvCall,
    ) -> Result<()> {
        let shape = self.checked(weights, x, y, call)?;
        for planned in self.tiers.plan_call(call)? {
            let (part, x_start, y_start) = shape.part(&planned.launch)?;
            let x_rows = x.slice(x_start..x_start + part.bytes(Operand::X) / 2);
            let mut y_rows = y.slice_mut(y_start..y_start + part.bytes(Operand::Y) / std::mem::size_of::<Y>());
            self.enqueue_checked(stream, planned.kernel, weights, &x_rows, &mut y_rows, &part)?;
        }
        Ok(())
    }

    /// Enqueues one launch of `kernel` (any kernel the device loaded, whatever the plan would
    /// pick: a benchmark's or a test's choice) for `call`, whose M must be within the kernel's
    /// width; the call's family policy does not apply. Validated like [`Self::gemv`].
    pub fn launch_kernel<T: Bf16Element, Y: YElement>(
        &self,
        stream: &CudaStream,
        kernel: &'static KernelSpec,
        weights: &CudaWeights<'_>,
        x: &CudaView<'_, T>,
        y: &mut CudaViewMut<'_, Y>,
        call: &GemvCall,
    ) -> Result<()> {
        let shape = self.checked(weights, x, y, call)?;
        shape.check_width(kernel)?;
        self.enqueue_checked(stream, KernelHandle::for_name(kernel.name), weights, x, y, &shape)
    }

    /// Enqueues a routed mixture-of-experts layer on `stream` in one launch: `y[t][s] =
    /// W[routing[t][s]] x[t]` for the call's M tokens and top-k slots, x `[M][K]`, routing
    /// `[M][top_k]` expert ids (read by the kernel: no host round trip), y `[M][top_k][N]`, each
    /// output its expert's single launch's in the family the call's policy picks: the exact
    /// contract, or (`FamilyChoice::Fast`, sm_80+) the fast family's bits, batch-invariant.
    /// Validated once before anything is enqueued; then one driver call, nothing allocated,
    /// copied or synchronised, so a graph capture records it. A pair whose id is not below E
    /// reads no weights and gets a NaN row.
    pub fn grouped<T: Bf16Element>(
        &self,
        stream: &CudaStream,
        experts: &CudaExperts<'_>,
        x: &CudaView<'_, T>,
        routing: &CudaView<'_, u32>,
        y: &mut CudaViewMut<'_, T>,
        call: &GroupedCall,
    ) -> Result<()> {
        let lens = [
            2 * x.len(),
            experts.packed.len(),
            experts.scales.len(),
            4 * experts.global_scales.len(),
            4 * routing.len(),
            2 * y.len(),
        ];
        call.check_operands(experts.experts, experts.n, experts.k, lens)?;
        let family = self.tiers.family(call.family())?;
        let spec = gemv_core::grouped_kernel(family, call.m(), call.top_k(), experts.experts);
        let function = GROUPED_KERNELS
            .iter()
            .position(|candidate| candidate.name == spec.name)
            .and_then(|index| self.grouped.get(index)?.as_ref())
            .ok_or(Error::Unsupported { backend: NAME, what: "grouped launches below sm_75" })?;
        let shape = GroupedShape {
            experts: experts.experts,
            m: call.m(),
            top_k: call.top_k(),
            n: experts.n,
            k: experts.k,
            per_expert_scales: experts.global_scales.len() != 1,
        };
        let (x_ptr, _x_sync) = x.device_ptr(stream);
        let (packed_ptr, _packed_sync) = experts.packed.device_ptr(stream);
        let (scales_ptr, _scales_sync) = experts.scales.device_ptr(stream);
        let (global_ptr, _global_sync) = experts.global_scales.device_ptr(stream);
        let (routing_ptr, _routing_sync) = routing.device_ptr(stream);
        let (y_ptr, _y_sync) = y.device_ptr_mut(stream);
        let operands = GroupedOperands {
            x: x_ptr,
            packed: packed_ptr,
            scales: scales_ptr,
            global_scales: global_ptr,
            routing: routing_ptr,
            y: y_ptr,
        };
        // SAFETY: `check_operands` proved every view holds what the launch needs; the borrows keep
        // the memory alive while the launch is enqueued, y is a unique borrow (so it overlaps no
        // input view), and the sync guards order the launch on `stream`.
        unsafe { enqueue_grouped(stream, function, spec, operands, shape, self.order) }
    }

    /// The call's shape over `weights`, with the weights' and the views' lengths checked against it.
    fn checked<T: Bf16Element, Y: YElement>(
        &self,
        weights: &CudaWeights<'_>,
        x: &CudaView<'_, T>,
        y: &CudaViewMut<'_, Y>,
        call: &GemvCall,
    ) -> Result<LaunchShape> {
        let shape = call.shape(weights.n, weights.k)?.with_y_format(Y::FORMAT);
        // Lengths in bytes; views are element-aligned.
        let lens = [2 * x.len(), weights.packed.len(), weights.scales.len(), std::mem::size_of::<Y>() * y.len()];
        for (operand, len) in Operand::ALL.into_iter().zip(lens) {
            shape.check_operand(operand, 0, len)?;
        }
        Ok(shape)
    }

    /// Enqueues the kernel `handle` names over views already checked against `shape`.
    fn enqueue_checked<T: Bf16Element, Y: YElement>(
        &self,
        stream: &CudaStream,
        handle: KernelHandle,
        weights: &CudaWeights<'_>,
        x: &CudaView<'_, T>,
        y: &mut CudaViewMut<'_, Y>,
        shape: &LaunchShape,
    ) -> Result<()> {
        let kernel = gemv_backend::resolved_spec(NAME, handle)?;
        let function = handle
            .registry_index()
            .and_then(|index| self.functions[index].as_ref())
            .ok_or(Error::UnresolvedKernel { raw: handle.raw(), backend: NAME })?;
        let (x_ptr, _x_sync) = x.device_ptr(stream);
        let (packed_ptr, _packed_sync) = weights.packed.device_ptr(stream);
        let (scales_ptr, _scales_sync) = weights.scales.device_ptr(stream);
        let (y_ptr, _y_sync) = y.device_ptr_mut(stream);
        let operands = Operands { x: x_ptr, packed: packed_ptr, scales: scales_ptr, y: y_ptr };
        // SAFETY: the callers checked the views' lengths against `shape` and M against the
        // kernel's width (the plan's kernels cover their launch's rows); the borrows keep the
        // memory alive and y unaliased while the launch is enqueued, and the sync guards order it
        // on `stream`.
        unsafe {
            enqueue(stream, function, kernel, operands, weights.global_scale, shape, self.multiprocessors, self.order)
        }
    }
}
