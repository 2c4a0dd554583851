//! The engine-facing CUDA path: the kernels launched on the caller's stream, over the caller's
//! device memory, with nothing allocated, copied or synchronised per launch, so that an engine's
//! decode step (launches included) can be captured into a CUDA graph and replayed.
//!
//! [`CudaKernels::load`] puts the embedded PTX into the engine's context once and looks every
//! kernel up. Weights are whatever device memory the engine filled ([`CudaWeights`]: a whole
//! matrix, or a row range of a bigger one, a tensor-parallel shard, as views). Each step,
//! [`CudaKernels::launch`] validates the lengths once and enqueues one kernel;
//! [`CudaKernels::launch_m`] enqueues the exact family's dispatch plan for any M, and
//! [`CudaKernels::launch_plan`] the plan of the family the policy picks (the fast, tensor-core
//! family where asked for and loaded). The tier table is resolved once at load, under the kill
//! switches of the environment or given as a value ([`CudaKernels::load_with`]). X is `[m][k]` and Y `[m][n]`,
//! contiguous; the `_strided` forms take row strides instead (X's and Y's rows as rows of wider
//! buffers, e.g. one head's slice of a fused activation: elements between rows are neither read
//! nor written).

use super::driver_error;
use super::enqueue::{Operands, enqueue};
use crate::error::CudaError;
use crate::ptx;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use gemv_backend::{Error, KernelHandle, ResolvedTiers, Result};
use gemv_core::{
    Bf16Element, Family, FamilyChoice, KERNELS, KernelSpec, KillSwitches, Launch, LaunchShape, Operand, WIDEST_TIER,
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

/// The gemv kernels loaded into one CUDA context.
pub struct CudaKernels {
    /// One function per registry kernel, in [`KERNELS`] order; `None` for a family the device
    /// cannot run (the fast family below sm_80).
    functions: Vec<Option<CudaFunction>>,
    /// The tier table over those functions, resolved once under the kill switches.
    tiers: ResolvedTiers,
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
        let capability = context.compute_capability().map_err(driver_error("compute capability"))?;
        let mut modules = Vec::new();
        for name in ptx::MODULE_BUILDS.map(|build| build.module) {
            if modules.iter().any(|(loaded, _)| *loaded == name) {
                continue;
            }
            if let Some(text) = ptx::module_build(name, capability).and_then(ptx::text) {
                let module = context
                    .load_module(cudarc::nvrtc::Ptx::from_src(text))
                    .map_err(driver_error(format!("loading module {name} from PTX")))?;
                modules.push((name, module));
            }
        }
        let functions = KERNELS
            .iter()
            .map(|spec| match modules.iter().find(|(name, _)| *name == spec.module) {
                Some((_, module)) => module
                    .load_function(spec.name)
                    .map(Some)
                    .map_err(driver_error(format!("looking up kernel {}", spec.name))),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let present = |module: &str, name: &str| match gemv_core::kernel_in_module(module, name) {
            Some(index) if functions[index].is_some() => KernelHandle::for_name(name),
            _ => KernelHandle::NONE,
        };
        let tiers = ResolvedTiers::resolve_with(NAME, present, switches);
        Ok(Self { functions, tiers })
    }

    /// The tier table these kernels resolve (which tiers and families the device has).
    pub fn tiers(&self) -> &ResolvedTiers {
        &self.tiers
    }

    /// Enqueues one launch of `kernel` on `stream`: `y[..m] = W x[..m]`. Validates the shape, the
    /// kernel's width and every view's length; then one driver call, nothing else (no
    /// allocation, copy or synchronisation), so a graph capture of the stream records it.
    pub fn launch<T: Bf16Element>(
        &self,
        stream: &CudaStream,
        kernel: &'static KernelSpec,
        weights: &CudaWeights<'_>,
        x: &CudaView<'_, T>,
        y: &mut CudaViewMut<'_, T>,
        m: usize,
    ) -> Result<()> {
        self.launch_strided(stream, kernel, weights, x, weights.k, y, weights.n, m)
    }

    /// [`launch`](Self::launch) with X's rows `x_row_stride` elements apart (at least K) and Y's
    /// `y_row_stride` (at least N); the views start at row 0 and span
    /// `(m - 1) * stride + width` elements.
    #[allow(clippy::too_many_arguments)]
    pub fn launch_strided<T: Bf16Element>(
        &self,
        stream: &CudaStream,
        kernel: &'static KernelSpec,
        weights: &CudaWeights<'_>,
        x: &CudaView<'_, T>,
        x_row_stride: usize,
        y: &mut CudaViewMut<'_, T>,
        y_row_stride: usize,
        m: usize,
    ) -> Result<()> {
        let launch = LaunchShape::new(m, weights.n, weights.k, x_row_stride, y_row_stride)?;
        launch.check_width(kernel)?;
        // Lengths in bytes; views are element-aligned.
        let lens = [2 * x.len(), weights.packed.len(), weights.scales.len(), 2 * y.len()];
        for (operand, len) in Operand::ALL.into_iter().zip(lens) {
            launch.check_operand(operand, 0, len)?;
        }
        // By name, not by address: KERNELS is a `const`, so each use may be its own copy (in an
        // optimised build the plan's specs and this table's did not compare equal).
        let handle = KernelHandle::for_name(kernel.name);
        let index = handle.registry_index().ok_or(Error::UnresolvedKernel { raw: 0, backend: NAME })?;
        let function =
            self.functions[index].as_ref().ok_or(Error::UnresolvedKernel { raw: handle.raw(), backend: NAME })?;
        let (x_ptr, _x_sync) = x.device_ptr(stream);
        let (packed_ptr, _packed_sync) = weights.packed.device_ptr(stream);
        let (scales_ptr, _scales_sync) = weights.scales.device_ptr(stream);
        let (y_ptr, _y_sync) = y.device_ptr_mut(stream);
        let operands = Operands { x: x_ptr, packed: packed_ptr, scales: scales_ptr, y: y_ptr };
        // SAFETY: the views' lengths were checked against the launch above and M against the
        // kernel's width; the borrows keep the memory alive and y unaliased while the launch is
        // enqueued, and the sync guards order it on `stream`.
        unsafe { enqueue(stream, function, kernel, operands, weights.global_scale, &launch) }?;
        Ok(())
    }

    /// Enqueues the dispatch plan for any `m` (the narrowest tiers that cover it, at most
    /// `width_cap` rows per launch): X and Y views of `m` rows.
    pub fn launch_m<T: Bf16Element>(
        &self,
        stream: &CudaStream,
        weights: &CudaWeights<'_>,
        x: &CudaView<'_, T>,
        y: &mut CudaViewMut<'_, T>,
        m: usize,
        width_cap: usize,
    ) -> Result<()> {
        self.launch_m_strided(stream, weights, x, weights.k, y, weights.n, m, width_cap)
    }

    /// [`launch_m`](Self::launch_m) with row strides (see [`launch_strided`](Self::launch_strided)).
    #[allow(clippy::too_many_arguments)]
    pub fn launch_m_strided<T: Bf16Element>(
        &self,
        stream: &CudaStream,
        weights: &CudaWeights<'_>,
        x: &CudaView<'_, T>,
        x_row_stride: usize,
        y: &mut CudaViewMut<'_, T>,
        y_row_stride: usize,
        m: usize,
        width_cap: usize,
    ) -> Result<()> {
        let plan = self.tiers.plan(m, width_cap)?;
        self.launch_parts(stream, weights, (x, x_row_stride), (y, y_row_stride), m, &plan, |tier| {
            self.tiers.handle(tier)
        })
    }

    /// Enqueues the dispatch plan for any `m` in the family `family` picks on this device (the
    /// policy of `gemv_core::select_family`: `Fast` where every fast tier loaded, sm_80+), X's and
    /// Y's rows at their strides.
    #[allow(clippy::too_many_arguments)]
    pub fn launch_plan<T: Bf16Element>(
        &self,
        stream: &CudaStream,
        weights: &CudaWeights<'_>,
        x: &CudaView<'_, T>,
        x_row_stride: usize,
        y: &mut CudaViewMut<'_, T>,
        y_row_stride: usize,
        m: usize,
        family: FamilyChoice,
    ) -> Result<()> {
        let rows = ((x, x_row_stride), (y, y_row_stride));
        match self.tiers.family(m, family)? {
            Family::Exact => {
                let plan = self.tiers.plan(m, WIDEST_TIER)?;
                self.launch_parts(stream, weights, rows.0, rows.1, m, &plan, |tier| self.tiers.handle(tier))
            }
            Family::Fast => {
                let plan = self.tiers.fast_plan(m)?;
                self.launch_parts(stream, weights, rows.0, rows.1, m, &plan, |tier| self.tiers.fast_handle(tier))
            }
        }
    }

    /// Enqueues each launch of `plan` (tier indices resolved by `handle`) over its rows of X and Y.
    #[allow(clippy::too_many_arguments)]
    fn launch_parts<T: Bf16Element>(
        &self,
        stream: &CudaStream,
        weights: &CudaWeights<'_>,
        (x, x_row_stride): (&CudaView<'_, T>, usize),
        (y, y_row_stride): (&mut CudaViewMut<'_, T>, usize),
        m: usize,
        plan: &[Launch],
        handle: impl Fn(usize) -> KernelHandle,
    ) -> Result<()> {
        let launch = LaunchShape::new(m, weights.n, weights.k, x_row_stride, y_row_stride)?;
        launch.check_operand(Operand::X, 0, 2 * x.len())?;
        launch.check_operand(Operand::Y, 0, 2 * y.len())?;
        for step in plan {
            let kernel = gemv_backend::resolved_spec(NAME, handle(step.tier))?;
            let (part, x_start, y_start) = launch.part(step)?;
            let x_rows = x.slice(x_start..x_start + part.bytes(Operand::X) / 2);
            let mut y_rows = y.slice_mut(y_start..y_start + part.bytes(Operand::Y) / 2);
            self.launch_strided(stream, kernel, weights, &x_rows, x_row_stride, &mut y_rows, y_row_stride, step.rows)?;
        }
        Ok(())
    }
}
