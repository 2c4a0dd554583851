//! The layer as a candle [`CustomOp1`] over `[m, k]` rows: gemv's CPU backend on the CPU, gemv's
//! CUDA kernels on candle's stream. Private: users call [`crate::Nvfp4Linear::forward`] or
//! [`candle_core::Module::forward`].

use crate::placement::{LayerDims, Placement};
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CudaStorage, CustomOp1, Layout, Result, Shape, bail};
use gemv_core::{FamilyChoice, GemvCall};
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

/// One layer's GEMV as candle's op: its weights where they are placed, and its dimensions.
pub(crate) struct LinearOp<'a> {
    pub(crate) placement: &'a Placement,
    pub(crate) dims: LayerDims,
}

impl LinearOp<'_> {
    /// M and the first element of the rows `layout` describes (contiguous `[m, k]`).
    fn rows(&self, layout: &Layout) -> Result<(usize, usize)> {
        let k = self.dims.k;
        let (m, columns) = layout.shape().dims2()?;
        if columns != k || !layout.is_contiguous() {
            bail!("gemv-candle: expected contiguous [m, {k}] rows, found {:?}", layout.shape());
        }
        Ok((m, layout.start_offset()))
    }
}

impl CustomOp1 for LinearOp<'_> {
    fn name(&self) -> &'static str {
        "gemv-nvfp4-linear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (m, offset) = self.rows(layout)?;
        let (n, k) = (self.dims.n, self.dims.k);
        let Placement::Cpu(weights) = self.placement else {
            bail!("gemv-candle: the layer's weights are on a CUDA device and x on the CPU");
        };
        let CpuStorage::BF16(x) = storage else {
            bail!("gemv-candle: x must be bf16, found {:?}", storage.dtype());
        };
        let mut y = vec![bf16::ZERO; m * n];
        // The CPU computes the exact contract whatever family the CUDA path was given.
        let call = GemvCall::new(m).with_family(FamilyChoice::Exact);
        cpu_backend()?.gemv(weights, &x[offset..offset + m * k], &mut y, &call).map_err(candle_core::Error::wrap)?;
        Ok((CpuStorage::BF16(y), Shape::from((m, n))))
    }

    fn cuda_fwd(&self, storage: &CudaStorage, layout: &Layout) -> Result<(CudaStorage, Shape)> {
        let (m, offset) = self.rows(layout)?;
        let Placement::Cuda(placed) = self.placement else {
            bail!("gemv-candle: the layer's weights are on the CPU and x on a CUDA device");
        };
        placed.forward(self.dims, storage, m, offset)
    }
}
