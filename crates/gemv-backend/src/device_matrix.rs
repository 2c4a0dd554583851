//! Weights uploaded once, then any M run through the dispatch plan: what an inference engine's
//! layer does every decode step.
//!
//! The matrix holds its backend however the caller does: a borrow (`&dyn GpuBackend`, for tests
//! and short-lived tools) or shared ownership (`Arc<dyn GpuBackend>`), so that a model struct can
//! own its layers' weights with no lifetime tying it to a backend variable. Either way the
//! buffers are freed when the matrix drops.

use crate::{BufferRange, DeviceBuffer, GemvArgs, GpuBackend, KernelHandle, ResolvedTiers, Result};
use gemv_core::{GemvShape, Launch, Nvfp4View, TIERS};
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

    /// `Y = W X` for host `x: [m][K]` bf16 bits, split by the dispatch plan (cap `width_cap`).
    pub fn gemv(&self, tiers: &ResolvedTiers, x: &[u16], m: usize, width_cap: usize) -> Result<Vec<u16>> {
        let plan = tiers.plan(m, width_cap)?;
        self.run(x, m, |x_buf, y_buf| self.launch_plan(tiers, &plan, x_buf, y_buf))
    }

    /// `Y = W X` for host `x: [m][K]` on the fast family's plan (tensor cores; its own contract).
    pub fn gemv_fast(&self, tiers: &ResolvedTiers, x: &[u16], m: usize) -> Result<Vec<u16>> {
        let plan = tiers.fast_plan(m)?;
        self.run(x, m, |x_buf, y_buf| {
            for launch in &plan {
                let args = self.args(x_buf, y_buf, launch.row_offset, launch.rows);
                self.backend.backend().launch_gemv(tiers.fast_handle(launch.tier), &args)?;
            }
            Ok(())
        })
    }

    /// `Y = W X` with one launch of `kernel` (m <= its width).
    pub fn gemv_with(&self, kernel: KernelHandle, x: &[u16], m: usize) -> Result<Vec<u16>> {
        self.run(x, m, |x_buf, y_buf| self.backend.backend().launch_gemv(kernel, &self.args(x_buf, y_buf, 0, m)))
    }

    fn run(
        &self,
        x: &[u16],
        m: usize,
        launch: impl FnOnce(DeviceBuffer, DeviceBuffer) -> Result<()>,
    ) -> Result<Vec<u16>> {
        let shape = GemvShape::new(m, self.n, self.k)?;
        if x.len() != m * self.k {
            return Err(gemv_core::CoreError::LengthMismatch {
                what: "x",
                expected: m * self.k,
                found: x.len(),
                m,
                n: self.n,
                k: self.k,
            }
            .into());
        }
        let x_buf = self.backend.backend().alloc(2 * shape.m * shape.k)?;
        let result = self.backend.backend().alloc(2 * shape.m * shape.n).and_then(|y_buf| {
            let outcome = (|| {
                self.backend.backend().upload(x_buf.whole(), bytemuck::cast_slice(x))?;
                launch(x_buf, y_buf)?;
                self.backend.backend().synchronize()?;
                let mut y = vec![0u16; shape.m * shape.n];
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
