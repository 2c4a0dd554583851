//! The layers as candle custom ops over `[m, k]` rows (and, for a routed layer, `[m, top_k]`
//! expert ids): gemv's CPU backend on the CPU, gemv's CUDA kernels on candle's stream. Private:
//! users call [`crate::Nvfp4Linear::forward`], [`candle_core::Module::forward`] or
//! [`crate::Nvfp4RoutedExperts::forward`].

use crate::placement::{ExpertsDims, ExpertsPlacement, LayerDims, Placement};
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CudaStorage, CustomOp1, CustomOp2, Layout, Result, Shape, bail};
use gemv_core::{FamilyChoice, GemvCall, GroupedCall};
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

/// The rows and the first element `layout` describes (contiguous `[rows, columns]`).
fn rows(layout: &Layout, columns: usize) -> Result<(usize, usize)> {
    let (rows, found) = layout.shape().dims2()?;
    if found != columns || !layout.is_contiguous() {
        bail!("gemv-candle: expected contiguous [m, {columns}] rows, found {:?}", layout.shape());
    }
    Ok((rows, layout.start_offset()))
}

impl LinearOp<'_> {
    /// M and the first element of the rows `layout` describes (contiguous `[m, k]`).
    fn rows(&self, layout: &Layout) -> Result<(usize, usize)> {
        rows(layout, self.dims.k)
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

/// A routed layer's grouped launch as candle's op: X `[m, k]` and the ids `[m, top_k]`.
pub(crate) struct GroupedOp<'a> {
    pub(crate) placement: &'a ExpertsPlacement,
    pub(crate) dims: ExpertsDims,
}

impl GroupedOp<'_> {
    /// (M, X's first element), (top_k, the ids' first element), checked against each other.
    fn operands(&self, x: &Layout, ids: &Layout) -> Result<((usize, usize), (usize, usize))> {
        let (m, x_offset) = rows(x, self.dims.k)?;
        let top_k = ids.shape().dims2()?.1;
        let (id_rows, ids_offset) = rows(ids, top_k)?;
        if id_rows != m {
            bail!("gemv-candle: {id_rows} rows of ids for {m} rows of x");
        }
        Ok(((m, x_offset), (top_k, ids_offset)))
    }
}

impl CustomOp2 for GroupedOp<'_> {
    fn name(&self) -> &'static str {
        "gemv-nvfp4-routed-experts"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        ids: &CpuStorage,
        ids_layout: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let ((m, x_offset), (top_k, ids_offset)) = self.operands(x_layout, ids_layout)?;
        let ExpertsDims { n, k, .. } = self.dims;
        let ExpertsPlacement::Cpu(experts) = self.placement else {
            bail!("gemv-candle: the experts are on a CUDA device and x on the CPU");
        };
        let (CpuStorage::BF16(x), CpuStorage::U32(ids)) = (x, ids) else {
            bail!("gemv-candle: x must be bf16 and ids u32, found {:?} and {:?}", x.dtype(), ids.dtype());
        };
        let mut y = vec![bf16::ZERO; m * top_k * n];
        let call = GroupedCall::new(m, top_k);
        let (x, ids) = (&x[x_offset..x_offset + m * k], &ids[ids_offset..ids_offset + m * top_k]);
        cpu_backend()?.grouped(experts, x, ids, &mut y, &call).map_err(candle_core::Error::wrap)?;
        Ok((CpuStorage::BF16(y), Shape::from((m, top_k, n))))
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        x_layout: &Layout,
        ids: &CudaStorage,
        ids_layout: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let ((m, x_offset), (top_k, ids_offset)) = self.operands(x_layout, ids_layout)?;
        let ExpertsPlacement::Cuda(placed) = self.placement else {
            bail!("gemv-candle: the experts are on the CPU and x on a CUDA device");
        };
        placed.forward(self.dims, (x, x_offset), (ids, ids_offset), m, top_k)
    }
}
