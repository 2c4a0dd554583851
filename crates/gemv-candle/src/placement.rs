//! Where a layer's weights live: arranged for gemv's CPU kernels, or on one CUDA device with
//! gemv's kernels (loaded once per CUDA context and shared by every layer on it). Without the
//! `cuda` feature the CUDA placement is a type with no values, so the code that matches on a
//! placement is the same in both builds.

use candle_core::{Device, Result};
use gemv_core::{FamilyChoice, Nvfp4ExpertsView, Nvfp4View};
use gemv_cpu::{CpuExperts, CpuWeights};

#[cfg(feature = "cuda")]
pub use cuda::cuda_kernel_loads;
pub(crate) use cuda::{CudaExpertsPlacement, CudaPlacement};

/// A layer's shape, global scale and CUDA family: what a launch needs besides its weights.
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
    Cuda(Box<CudaPlacement>),
}

impl Placement {
    /// Places `view` on `device`: arranged for the CPU kernels, or uploaded on the CUDA device's
    /// stream (feature `cuda`).
    pub(crate) fn new(view: &Nvfp4View<'_>, device: &Device) -> Result<Self> {
        Ok(match device {
            Device::Cpu => Placement::Cpu(CpuWeights::new(view)),
            Device::Cuda(cuda) => Placement::Cuda(Box::new(CudaPlacement::upload(view, cuda)?)),
            other => candle_core::bail!("gemv-candle: no NVFP4 kernels for {other:?}"),
        })
    }

    /// The device kind, for messages.
    pub(crate) fn device_name(&self) -> &'static str {
        match self {
            Placement::Cpu(_) => "cpu",
            Placement::Cuda(_) => "cuda",
        }
    }
}

/// A routed layer's shape: what its launches need besides the weights.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpertsDims {
    /// Experts (E).
    pub(crate) experts: usize,
    /// Out features of each expert (N).
    pub(crate) n: usize,
    /// In features (K).
    pub(crate) k: usize,
    /// The CUDA kernel family.
    pub(crate) family: FamilyChoice,
}

/// A routed layer's experts: each arranged for the CPU kernels, or the stack on one CUDA device.
pub(crate) enum ExpertsPlacement {
    Cpu(CpuExperts),
    Cuda(Box<CudaExpertsPlacement>),
}

impl ExpertsPlacement {
    /// Places `view` on `device` (see [`Placement::new`]).
    pub(crate) fn new(view: &Nvfp4ExpertsView<'_>, device: &Device) -> Result<Self> {
        Ok(match device {
            Device::Cpu => ExpertsPlacement::Cpu(CpuExperts::new(view).map_err(candle_core::Error::wrap)?),
            Device::Cuda(cuda) => ExpertsPlacement::Cuda(Box::new(CudaExpertsPlacement::upload(view, cuda)?)),
            other => candle_core::bail!("gemv-candle: no NVFP4 kernels for {other:?}"),
        })
    }

    /// The device kind, for messages.
    pub(crate) fn device_name(&self) -> &'static str {
        match self {
            ExpertsPlacement::Cpu(_) => "cpu",
            ExpertsPlacement::Cuda(_) => "cuda",
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::{ExpertsDims, LayerDims};
    use candle_core::backend::{BackendDevice, BackendStorage};
    use candle_core::cuda_backend::cudarc::driver::{CudaContext, CudaSlice};
    use candle_core::{CudaDevice, CudaStorage, Result, Shape, bail};
    use gemv_core::{GroupedCall, Nvfp4ExpertsView, Nvfp4View};
    use gemv_cuda::{CudaExperts, CudaKernels, CudaWeights};
    use half::bf16;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, PoisonError, Weak};

    static KERNEL_LOADS: AtomicUsize = AtomicUsize::new(0);

    /// How many times this process has loaded gemv's CUDA kernels into a context: once per
    /// context, however many layers are placed on it.
    pub fn cuda_kernel_loads() -> usize {
        KERNEL_LOADS.load(Ordering::Relaxed)
    }

    /// gemv's kernels in `context`: the ones a layer on it already holds, else loaded now. The
    /// table holds neither strongly, so the kernels go with the last layer that uses them and the
    /// context with candle's last handle.
    fn kernels_in(context: &Arc<CudaContext>) -> Result<Arc<CudaKernels>> {
        type Loaded = Vec<(Weak<CudaContext>, Weak<CudaKernels>)>;
        static LOADED: Mutex<Loaded> = Mutex::new(Vec::new());
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        loaded.retain(|(context, kernels)| context.strong_count() > 0 && kernels.strong_count() > 0);
        let same =
            |(held, _): &&(Weak<CudaContext>, Weak<CudaKernels>)| std::ptr::eq(held.as_ptr(), Arc::as_ptr(context));
        if let Some(kernels) = loaded.iter().find(same).and_then(|(_, kernels)| kernels.upgrade()) {
            return Ok(kernels);
        }
        let kernels = Arc::new(CudaKernels::load(context).map_err(candle_core::Error::wrap)?);
        KERNEL_LOADS.fetch_add(1, Ordering::Relaxed);
        loaded.push((Arc::downgrade(context), Arc::downgrade(&kernels)));
        Ok(kernels)
    }

    /// The weights on one CUDA device, uploaded on candle's stream, and gemv's kernels in its
    /// context.
    pub(crate) struct CudaPlacement {
        device: CudaDevice,
        kernels: Arc<CudaKernels>,
        packed: CudaSlice<u8>,
        scales: CudaSlice<u8>,
    }

    impl CudaPlacement {
        pub(crate) fn upload(view: &Nvfp4View<'_>, device: &CudaDevice) -> Result<Self> {
            let stream = device.cuda_stream();
            let kernels = kernels_in(stream.context())?;
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
            // SAFETY: the plan writes every element of Y ([m, n], rows n apart) before anything
            // on the stream reads it, so no memset is needed; candle reads Y only through the
            // same stream.
            let mut y = unsafe { stream.alloc::<bf16>(m * n) }.map_err(candle_core::Error::wrap)?;
            let weights = CudaWeights {
                packed: self.packed.as_view(),
                scales: self.scales.as_view(),
                global_scale: layer.global_scale,
                n,
                k,
            };
            let call = gemv_core::GemvCall::new(m).with_family(layer.family);
            self.kernels.gemv(&stream, &weights, &x, &mut y.slice_mut(..), &call).map_err(candle_core::Error::wrap)?;
            Ok((CudaStorage::wrap_cuda_slice(y, cuda.clone()), Shape::from((m, n))))
        }
    }

    /// A routed layer's stack on one CUDA device, uploaded on candle's stream, and gemv's
    /// kernels in its context.
    pub(crate) struct CudaExpertsPlacement {
        device: CudaDevice,
        kernels: Arc<CudaKernels>,
        packed: CudaSlice<u8>,
        scales: CudaSlice<u8>,
        global_scales: CudaSlice<f32>,
    }

    impl CudaExpertsPlacement {
        pub(crate) fn upload(view: &Nvfp4ExpertsView<'_>, device: &CudaDevice) -> Result<Self> {
            let stream = device.cuda_stream();
            let kernels = kernels_in(stream.context())?;
            let packed = stream.clone_htod(view.packed()).map_err(candle_core::Error::wrap)?;
            let scales = stream.clone_htod(view.scales()).map_err(candle_core::Error::wrap)?;
            let global_scales = stream.clone_htod(view.global_scales()).map_err(candle_core::Error::wrap)?;
            Ok(Self { device: device.clone(), kernels, packed, scales, global_scales })
        }

        /// Enqueues the grouped launch for `m` rows of X and of the ids (each from its element
        /// offset of its storage) on candle's stream; Y `[m, top_k, n]` is a new buffer candle
        /// owns. The GPU reads the ids; nothing is synchronised.
        pub(crate) fn forward(
            &self,
            layer: ExpertsDims,
            (x, x_offset): (&CudaStorage, usize),
            (ids, ids_offset): (&CudaStorage, usize),
            m: usize,
            top_k: usize,
        ) -> Result<(CudaStorage, Shape)> {
            let cuda = x.device();
            if !cuda.same_device(&self.device) || !ids.device().same_device(&self.device) {
                bail!("gemv-candle: x or ids is on another CUDA device than the experts");
            }
            let ExpertsDims { experts, n, k, family } = layer;
            let stream = cuda.cuda_stream();
            let x = x.as_cuda_slice::<bf16>()?.slice(x_offset..x_offset + m * k);
            let ids = ids.as_cuda_slice::<u32>()?.slice(ids_offset..ids_offset + m * top_k);
            // SAFETY: the grouped launch writes every element of Y ([m, top_k, n]; a slot whose
            // id is past the experts gets NaN rows) before anything on the stream reads it, so no
            // memset is needed; candle reads Y only through the same stream.
            let mut y = unsafe { stream.alloc::<bf16>(m * top_k * n) }.map_err(candle_core::Error::wrap)?;
            let stack = CudaExperts {
                packed: self.packed.as_view(),
                scales: self.scales.as_view(),
                global_scales: self.global_scales.as_view(),
                experts,
                n,
                k,
            };
            let call = GroupedCall::new(m, top_k).with_family(family);
            self.kernels
                .grouped(&stream, &stack, &x, &ids, &mut y.slice_mut(..), &call)
                .map_err(candle_core::Error::wrap)?;
            Ok((CudaStorage::wrap_cuda_slice(y, cuda.clone()), Shape::from((m, top_k, n))))
        }
    }
}

/// Without the `cuda` feature: a CUDA placement cannot be made, so none exists.
#[cfg(not(feature = "cuda"))]
mod cuda {
    use super::{ExpertsDims, LayerDims};
    use candle_core::{CudaDevice, CudaStorage, Result, Shape};
    use gemv_core::{Nvfp4ExpertsView, Nvfp4View};

    pub(crate) enum CudaPlacement {}

    pub(crate) enum CudaExpertsPlacement {}

    impl CudaExpertsPlacement {
        pub(crate) fn upload(_view: &Nvfp4ExpertsView<'_>, _device: &CudaDevice) -> Result<Self> {
            candle_core::bail!("gemv-candle: built without the `cuda` feature: no NVFP4 kernels for CUDA devices")
        }

        pub(crate) fn forward(
            &self,
            _layer: ExpertsDims,
            _x: (&CudaStorage, usize),
            _ids: (&CudaStorage, usize),
            _m: usize,
            _top_k: usize,
        ) -> Result<(CudaStorage, Shape)> {
            match *self {}
        }
    }

    impl CudaPlacement {
        pub(crate) fn upload(_view: &Nvfp4View<'_>, _device: &CudaDevice) -> Result<Self> {
            candle_core::bail!("gemv-candle: built without the `cuda` feature: no NVFP4 kernels for CUDA devices")
        }

        pub(crate) fn forward(
            &self,
            _layer: LayerDims,
            _storage: &CudaStorage,
            _m: usize,
            _offset: usize,
        ) -> Result<(CudaStorage, Shape)> {
            match *self {}
        }
    }
}
