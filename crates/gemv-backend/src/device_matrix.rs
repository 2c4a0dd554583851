//! Weights uploaded once, then any M run through the dispatch plan: what an inference engine's
//! layer does every decode step.
//!
//! The matrix holds its backend however the caller does: a borrow (`&dyn GpuBackend`, for tests
//! and short-lived tools) or shared ownership (`Arc<dyn GpuBackend>`), so that a model struct can
//! own its layers' weights with no lifetime tying it to a backend variable. Either way the
//! buffers are freed when the matrix drops.

use crate::{BufferRange, DeviceBuffer, GemvArgs, GpuBackend, KernelHandle, ResolvedTiers, Result};
use gemv_core::{GemvCall, GemvShape, Launch, LaunchShape, Nvfp4View, Operand, TIERS, YElement};
use std::sync::Arc;

/// How a [`DeviceMatrix`] reaches its backend: a borrow, an `Arc` or a `Box` of any backend
/// (`dyn GpuBackend` included).
pub trait BackendRef {
    /// The backend.
    fn backend(&self) -> &dyn GpuBackend;
}

impl<'a> BackendRef for &'a (dyn GpuBackend + 'a) {
    fn backend(&self) -> &dyn GpuBackend {
        *self
    }
}

impl<T: GpuBackend> BackendRef for &T {
    fn backend(&self) -> &dyn GpuBackend {
        *self
    }
}

impl BackendRef for Arc<dyn GpuBackend> {
    fn backend(&self) -> &dyn GpuBackend {
        &**self
    }
}

impl<T: GpuBackend> BackendRef for Arc<T> {
    fn backend(&self) -> &dyn GpuBackend {
        &**self
    }
}

impl BackendRef for Box<dyn GpuBackend> {
    fn backend(&self) -> &dyn GpuBackend {
        &**self
    }
}

impl<T: GpuBackend> BackendRef for Box<T> {
    fn backend(&self) -> &dyn GpuBackend {
        &**self
    }
}

/// An NVFP4 matrix resident on a backend. Frees its buffers on drop. `B` is how it reaches the
/// backend: `&dyn GpuBackend`, `Arc<dyn GpuBackend>`, `Box<dyn GpuBackend>`, ...
pub struct DeviceMatrix<B: BackendRef> {
    backend: B,
    packed: DeviceBuffer,
    scales: DeviceBuffer,
    global_scale: f32,
    n: usize,
    k: usize,
}

impl<B: BackendRef> DeviceMatrix<B> {
    /// Uploads a validated matrix.
    pub fn upload(holder: B, weights: &Nvfp4View<'_>) -> Result<Self> {
        let backend = holder.backend();
        let packed = backend.alloc(weights.packed().len())?;
        let scales = match backend.alloc(weights.scales().len()) {
            Ok(buffer) => buffer,
            Err(error) => {
                let _ = backend.free(packed);
                return Err(error);
            }
        };
        // From here the matrix owns both buffers: an upload error drops it, which frees them.
        let matrix = Self {
            backend: holder,
            packed,
            scales,
            global_scale: weights.global_scale(),
            n: weights.n(),
            k: weights.k(),
        };
        let backend = matrix.backend.backend();
        backend.upload(packed.whole(), weights.packed())?;
        backend.upload(scales.whole(), weights.scales())?;
        Ok(matrix)
    }

    /// Weight rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Weight columns.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The launch arguments for rows `[row_offset, row_offset + rows)` of X and Y buffers laid
    /// out `[M][K]` and `[M][N]`.
    pub fn args(&self, x: DeviceBuffer, y: DeviceBuffer, row_offset: usize, rows: usize) -> GemvArgs {
        let (n, k) = (self.n, self.k);
        GemvArgs::contiguous(
            BufferRange { buffer: x, offset: 2 * row_offset * k, len: 2 * rows * k },
            self.packed.whole(),
            self.scales.whole(),
            BufferRange { buffer: y, offset: 2 * row_offset * n, len: 2 * rows * n },
            self.global_scale,
            rows,
            n,
            k,
        )
    }

    /// Enqueues every launch of `plan` over device X and Y.
    pub fn launch_plan(&self, tiers: &ResolvedTiers, plan: &[Launch], x: DeviceBuffer, y: DeviceBuffer) -> Result<()> {
        for launch in plan {
            let kernel = tiers.handle(launch.tier);
            tracing::trace!(width = TIERS[launch.tier].width, rows = launch.rows, "launch");
            self.backend.backend().launch_gemv(kernel, &self.args(x, y, launch.row_offset, launch.rows))?;
        }
        Ok(())
    }

    /// `Y = W X` for `call` over host X bf16 bits laid out as the call says (token t's row at
    /// element `t * x_row_stride`, K values each): the launches [`ResolvedTiers::plan_call`] gives
    /// (the family the call's policy picks here, then that family's dispatch plan; the one
    /// planning step of every engine path), each through [`GpuBackend::launch_gemv`]. Returns Y
    /// as the call lays it out (rows `y_row_stride` apart, N values each, zeros between). The
    /// conformance gates run every backend through this.
    pub fn call(&self, tiers: &ResolvedTiers, x: &[u16], call: &GemvCall) -> Result<Vec<u16>> {
        self.call_as(tiers, x, call)
    }

    /// [`Self::call`] with Y as f32 ([`gemv_core::YFormat::F32`]: the values the bf16 result
    /// rounds, for a tensor-parallel all-reduce), on a backend that writes it.
    pub fn call_f32(&self, tiers: &ResolvedTiers, x: &[u16], call: &GemvCall) -> Result<Vec<f32>> {
        self.call_as(tiers, x, call)
    }

    /// [`Self::call`] with Y's elements as `T` (Y's format is `T`'s).
    fn call_as<T: YElement>(&self, tiers: &ResolvedTiers, x: &[u16], call: &GemvCall) -> Result<Vec<T>> {
        let shape = call.shape(self.n, self.k)?.with_y_format(T::FORMAT);
        let plan = tiers.plan_call(call)?;
        self.run(x, shape, |x_buf, y_buf| {
            for planned in &plan {
                let (part, x_at, y_at) = shape.part(&planned.launch)?;
                self.backend.backend().launch_gemv(planned.kernel, &self.part_args(x_buf, y_buf, &part, x_at, y_at))?;
            }
            Ok(())
        })
    }

    /// `Y = W X` for host `x: [m][K]` bf16 bits on the exact family's dispatch plan with the
    /// widest tier capped at `width_cap` (a caller that must not run wider kernels; [`Self::call`]
    /// otherwise).
    pub fn gemv(&self, tiers: &ResolvedTiers, x: &[u16], m: usize, width_cap: usize) -> Result<Vec<u16>> {
        let plan = tiers.plan(m, width_cap)?;
        let shape = LaunchShape::contiguous(m, self.n, self.k)?;
        self.run(x, shape, |x_buf, y_buf| self.launch_plan(tiers, &plan, x_buf, y_buf))
    }

    /// `Y = W X` with one launch of `kernel` (m <= its width).
    pub fn gemv_with(&self, kernel: KernelHandle, x: &[u16], m: usize) -> Result<Vec<u16>> {
        let shape = LaunchShape::contiguous(m, self.n, self.k)?;
        self.run(x, shape, |x_buf, y_buf| self.backend.backend().launch_gemv(kernel, &self.args(x_buf, y_buf, 0, m)))
    }

    /// The arguments of one launch of a plan over `shape`: its part (`part`, from
    /// [`LaunchShape::part`]) whose first X and Y rows start at elements `x_at` and `y_at`.
    fn part_args(&self, x: DeviceBuffer, y: DeviceBuffer, part: &LaunchShape, x_at: usize, y_at: usize) -> GemvArgs {
        GemvArgs {
            x: BufferRange { buffer: x, offset: 2 * x_at, len: part.bytes(Operand::X) },
            y: BufferRange { buffer: y, offset: part.y_format().element_bytes() * y_at, len: part.bytes(Operand::Y) },
            m: part.shape().m,
            x_row_stride: part.x_row_stride(),
            y_row_stride: part.y_row_stride(),
            y_format: part.y_format(),
            ..self.args(x, y, 0, part.shape().m)
        }
    }

    /// Uploads `x` (exactly the elements `shape`'s X spans), runs `launch` over X and a Y of the
    /// elements `shape`'s Y spans (of `T`, the size of its format's elements), and returns Y. Y is
    /// zeroed first only where its rows leave gaps: a launch writes every element of its rows,
    /// and a backend's fresh buffer is left as it comes (a backend may poison it, so an element a
    /// kernel forgets shows).
    fn run<T: bytemuck::Pod>(
        &self,
        x: &[u16],
        shape: LaunchShape,
        launch: impl FnOnce(DeviceBuffer, DeviceBuffer) -> Result<()>,
    ) -> Result<Vec<T>> {
        let GemvShape { m, n, k } = shape.shape();
        debug_assert_eq!(shape.y_format().element_bytes(), std::mem::size_of::<T>());
        let (x_len, y_len) = (shape.bytes(Operand::X) / 2, shape.bytes(Operand::Y) / std::mem::size_of::<T>());
        if x.len() != x_len {
            return Err(
                gemv_core::CoreError::LengthMismatch { what: "x", expected: x_len, found: x.len(), m, n, k }.into()
            );
        }
        let x_buf = self.backend.backend().alloc(2 * x_len)?;
        let result = self.backend.backend().alloc(shape.bytes(Operand::Y)).and_then(|y_buf| {
            let outcome = (|| {
                self.backend.backend().upload(x_buf.whole(), bytemuck::cast_slice(x))?;
                let mut y = vec![T::zeroed(); y_len];
                if y_len > m * n {
                    self.backend.backend().upload(y_buf.whole(), bytemuck::cast_slice(&y))?;
                }
                launch(x_buf, y_buf)?;
                self.backend.backend().synchronize()?;
                self.backend.backend().download(y_buf.whole(), bytemuck::cast_slice_mut(&mut y))?;
                Ok(y)
            })();
            let _ = self.backend.backend().free(y_buf);
            outcome
        });
        let _ = self.backend.backend().free(x_buf);
        result
    }
}

impl<B: BackendRef> Drop for DeviceMatrix<B> {
    fn drop(&mut self) {
        let _ = self.backend.backend().free(self.packed);
        let _ = self.backend.backend().free(self.scales);
    }
}
