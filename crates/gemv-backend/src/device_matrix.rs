//! Weights uploaded once, then any M run through the dispatch plan: what an inference engine's
//! layer does every decode step.

use crate::{BufferRange, DeviceBuffer, GemvArgs, GpuBackend, KernelHandle, ResolvedTiers, Result};
use gemv_core::{GemvShape, Launch, Nvfp4View, TIERS};

/// An NVFP4 matrix resident on a backend. Frees its buffers on drop.
pub struct DeviceMatrix<'b> {
    backend: &'b dyn GpuBackend,
    packed: DeviceBuffer,
    scales: DeviceBuffer,
    global_scale: f32,
    n: usize,
    k: usize,
}

impl<'b> DeviceMatrix<'b> {
    /// Uploads a validated matrix.
    pub fn upload(backend: &'b dyn GpuBackend, weights: &Nvfp4View<'_>) -> Result<Self> {
        let packed = backend.alloc(weights.packed().len())?;
        let scales = match backend.alloc(weights.scales().len()) {
            Ok(buffer) => buffer,
            Err(error) => {
                let _ = backend.free(packed);
                return Err(error);
            }
        };
        let matrix =
            Self { backend, packed, scales, global_scale: weights.global_scale(), n: weights.n(), k: weights.k() };
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
        GemvArgs {
            x: BufferRange { buffer: x, offset: 2 * row_offset * k, len: 2 * rows * k },
            packed: self.packed.whole(),
            scales: self.scales.whole(),
            y: BufferRange { buffer: y, offset: 2 * row_offset * n, len: 2 * rows * n },
            global_scale: self.global_scale,
            m: rows,
            n,
            k,
        }
    }

    /// Enqueues every launch of `plan` over device X and Y.
    pub fn launch_plan(&self, tiers: &ResolvedTiers, plan: &[Launch], x: DeviceBuffer, y: DeviceBuffer) -> Result<()> {
        for launch in plan {
            let kernel = tiers.handle(launch.tier);
            tracing::trace!(width = TIERS[launch.tier].width, rows = launch.rows, "launch");
            self.backend.launch_gemv(kernel, &self.args(x, y, launch.row_offset, launch.rows))?;
        }
        Ok(())
    }

    /// `Y = W X` for host `x: [m][K]` bf16 bits, split by the dispatch plan (cap `width_cap`).
    pub fn gemv(&self, tiers: &ResolvedTiers, x: &[u16], m: usize, width_cap: usize) -> Result<Vec<u16>> {
        let plan = tiers.plan(m, width_cap)?;
        self.run(x, m, |x_buf, y_buf| self.launch_plan(tiers, &plan, x_buf, y_buf))
    }

    /// `Y = W X` with one launch of `kernel` (m <= its width).
    pub fn gemv_with(&self, kernel: KernelHandle, x: &[u16], m: usize) -> Result<Vec<u16>> {
        self.run(x, m, |x_buf, y_buf| self.backend.launch_gemv(kernel, &self.args(x_buf, y_buf, 0, m)))
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
        let x_buf = self.backend.alloc(2 * shape.m * shape.k)?;
        let result = self.backend.alloc(2 * shape.m * shape.n).and_then(|y_buf| {
            let outcome = (|| {
                self.backend.upload(x_buf.whole(), bytemuck::cast_slice(x))?;
                launch(x_buf, y_buf)?;
                self.backend.synchronize()?;
                let mut y = vec![0u16; shape.m * shape.n];
                self.backend.download(y_buf.whole(), bytemuck::cast_slice_mut(&mut y))?;
                Ok(y)
            })();
            let _ = self.backend.free(y_buf);
            outcome
        });
        let _ = self.backend.free(x_buf);
        result
    }
}

impl Drop for DeviceMatrix<'_> {
    fn drop(&mut self) {
        let _ = self.backend.free(self.packed);
        let _ = self.backend.free(self.scales);
    }
}
