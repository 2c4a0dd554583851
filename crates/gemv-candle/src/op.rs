//! The layer as a candle [`CustomOp1`] over `[m, k]` rows: gemv's CPU backend on the CPU, gemv's
//! CUDA kernels on candle's stream.

use crate::linear::{Nvfp4Linear, Placement};
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
        placed.forward(self, storage, m, offset)
    }
}

#[cfg(feature = "cuda")]
pub(crate) use cuda::CudaPlacement;

#[cfg(feature = "cuda")]
mod cuda {
    use super::Nvfp4Linear;
    use candle_core::backend::{BackendDevice, BackendStorage};
    use candle_core::cuda_backend::cudarc::driver::CudaSlice;
    use candle_core::{CudaDevice, CudaStorage, Result, Shape, bail};
    use gemv_core::Nvfp4View;
    use gemv_cuda::{CudaKernels, CudaWeights};
    use half::bf16;

    /// The weights on one CUDA device, uploaded on candle's stream, and gemv's kernels loaded
    /// into its context.
    pub(crate) struct CudaPlacement {
        device: CudaDevice,
        kernels: CudaKernels,
        packed: CudaSlice<u8>,
        scales: CudaSlice<u8>,
    }

    impl CudaPlacement {
        pub(crate) fn upload(view: &Nvfp4View<'_>, device: &CudaDevice) -> Result<Self> {
            let stream = device.cuda_stream();
            let kernels = CudaKernels::load(stream.context()).map_err(candle_core::Error::wrap)?;
            let packed = stream.clone_htod(view.packed()).map_err(candle_core::Error::wrap)?;
            let scales = stream.clone_htod(view.scales()).map_err(candle_core::Error::wrap)?;
            Ok(Self { device: device.clone(), kernels, packed, scales })
        }

        /// Enqueues the plan for `m` rows of X (from element `offset` of `storage`) on candle's
        /// stream; Y is a new buffer candle owns. Nothing is synchronised.
        pub(crate) fn forward(
            &self,
            layer: &Nvfp4Linear,
            storage: &CudaStorage,
            m: usize,
            offset: usize,
        ) -> Result<(CudaStorage, Shape)> {
            let cuda = storage.device();
            if !cuda.same_device(&self.device) {
                bail!("gemv-candle: x is on another CUDA device than the layer's weights");
            }
            let (n, k) = (layer.n, layer.k);
            let stream = cuda.cuda_stream();
            let x = storage.as_cuda_slice::<bf16>()?.slice(offset..offset + m * k);
            let mut y = stream.alloc_zeros::<bf16>(m * n).map_err(candle_core::Error::wrap)?;
            let weights = CudaWeights {
                packed: self.packed.as_view(),
                scales: self.scales.as_view(),
                global_scale: layer.global_scale,
                n,
                k,
            };
            self.kernels
                .launch_plan(&stream, &weights, &x, k, &mut y.slice_mut(..), n, m, layer.family)
                .map_err(candle_core::Error::wrap)?;
            Ok((CudaStorage::wrap_cuda_slice(y, cuda.clone()), Shape::from((m, n))))
        }
    }
}
