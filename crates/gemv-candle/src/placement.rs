//! Where a layer's weights live: arranged for gemv's CPU kernels, or on one CUDA device with
//! gemv's kernels loaded into its context, and what a launch needs of the layer besides them.

use candle_core::{Device, Result, bail};
#[cfg(feature = "cuda")]
use gemv_core::FamilyChoice;
use gemv_core::Nvfp4View;
use gemv_cpu::CpuWeights;

/// What a CUDA launch needs of a layer besides its weights.
#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerDims {
    /// Out features (N).
    pub(crate) n: usize,
    /// In features (K).
    pub(crate) k: usize,
    /// The global scale.
    pub(crate) global_scale: f32,
    /// The CUDA kernel family.
    pub(crate) family: FamilyChoice,
}

/// A layer's weights: arranged for the CPU kernels, or on one CUDA device.
pub(crate) enum Placement {
    Cpu(CpuWeights),
    #[cfg(feature = "cuda")]
    Cuda(Box<cuda::CudaPlacement>),
}

impl Placement {
    /// Places `view` on `device`: arranged for the CPU kernels, or uploaded on the CUDA device's
    /// stream (feature `cuda`).
    pub(crate) fn new(view: &Nvfp4View<'_>, device: &Device) -> Result<Self> {
        Ok(match device {
            Device::Cpu => Placement::Cpu(CpuWeights::new(view)),
            #[cfg(feature = "cuda")]
            Device::Cuda(cuda) => Placement::Cuda(Box::new(cuda::CudaPlacement::upload(view, cuda)?)),
            other => bail!("gemv-candle: no NVFP4 kernels for {other:?} in this build (CUDA needs the `cuda` feature)"),
        })
    }

    /// The device kind, for messages.
    pub(crate) fn device_name(&self) -> &'static str {
        match self {
            Placement::Cpu(_) => "cpu",
            #[cfg(feature = "cuda")]
            Placement::Cuda(_) => "cuda",
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::LayerDims;
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
            layer: LayerDims,
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
