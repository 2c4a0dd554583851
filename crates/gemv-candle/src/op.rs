//! The layer as a candle [`CustomOp1`] over `[m, k]` rows: gemv's CPU backend on the CPU, gemv's
//! CUDA kernels on candle's stream.

use crate::linear::Nvfp4Linear;
use crate::placement::Placement;
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, bail};
use gemv_cpu::CpuBackend;
use half::bf16;
use std::sync::OnceLock;

/// The process's CPU backend (one team of threads for every layer).
fn cpu_backend() -> Result<&'static CpuBackend> {
    static CPU: OnceLock<std::result::Result<CpuBackend, String>> = OnceLock::new();
    CPU.get_or_init(|| CpuBackend::new().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| candle_core::Error::Msg(format!("gemv-candle: the CPU backend: {e}")))
}

impl Nvfp4Linear {
    /// M and the first element of the rows `layout` describes (contiguous `[m, k]`).
    fn rows(&self, layout: &Layout) -> Result<(usize, usize)> {
        let (m, k) = layout.shape().dims2()?;
        if k != self.k || !layout.is_contiguous() {
            bail!("gemv-candle: expected contiguous [m, {}] rows, found {:?}", self.k, layout.shape());
        }
        Ok((m, layout.start_offset()))
    }
}

impl CustomOp1 for Nvfp4Linear {
    fn name(&self) -> &'static str {
        "gemv-nvfp4-linear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (m, offset) = self.rows(layout)?;
        // One arm without the `cuda` feature.
        #[cfg_attr(not(feature = "cuda"), allow(clippy::infallible_destructuring_match))]
        let weights = match &self.placement {
            Placement::Cpu(weights) => weights,
            #[cfg(feature = "cuda")]
            Placement::Cuda(_) => bail!("gemv-candle: the layer's weights are on a CUDA device and x on the CPU"),
        };
        let CpuStorage::BF16(x) = storage else {
            bail!("gemv-candle: x must be bf16, found {:?}", storage.dtype());
        };
        let mut y = vec![bf16::ZERO; m * self.n];
        cpu_backend()?
            .gemv(weights, &x[offset..offset + m * self.k], self.k, &mut y, self.n, m)
            .map_err(candle_core::Error::wrap)?;
        Ok((CpuStorage::BF16(y), Shape::from((m, self.n))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (m, offset) = self.rows(layout)?;
        let Placement::Cuda(placed) = &self.placement else {
            bail!("gemv-candle: the layer's weights are on the CPU and x on a CUDA device");
        };
        placed.forward(self.dims(), storage, m, offset)
    }
}
