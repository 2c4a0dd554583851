//! The one trait every backend implements. Object-safe: callers hold `&dyn GpuBackend`.

use crate::{BufferRange, DeviceBuffer, DeviceInfo, Error, GemvArgs, GroupedArgs, KernelHandle, Result};

/// A device that can run the gemv kernels of the registry.
pub trait GpuBackend: Send + Sync {
    /// Short name: `host`, `cuda-emu`, `cuda`, `wgpu`.
    fn name(&self) -> &'static str;

    /// The device behind it.
    fn device_info(&self) -> DeviceInfo;

    /// The CUDA compute capability it runs or emulates, `None` for every other kind of device:
    /// the key of the tuned table ([`gemv_core::device_tuning`]).
    fn compute_capability(&self) -> Option<(i32, i32)> {
        None
    }

    /// Looks a kernel up by module and name; [`KernelHandle::NONE`] when this backend lacks it.
    /// Never fails.
    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle;

    /// Allocates `bytes` (zero-filled).
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer>;

    /// Frees a buffer; later use of it is [`Error::UnknownBuffer`].
    fn free(&self, buffer: DeviceBuffer) -> Result<()>;

    /// Copies `data` into `dst` (lengths must match).
    fn upload(&self, dst: BufferRange, data: &[u8]) -> Result<()>;

    /// Copies `src` into `out` (lengths must match).
    fn download(&self, src: BufferRange, out: &mut [u8]) -> Result<()>;

    /// Enqueues one launch; validates `args` against the kernel first ([`GemvArgs::validate`]).
    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()>;

    /// Enqueues one grouped launch: a routed mixture-of-experts layer, every output its expert's
    /// exact contract, the routing read from device memory. Validates `args` first
    /// ([`GroupedArgs::validate`]); an expert id past the experts is an error
    /// ([`gemv_core::CoreError::ExpertOutOfRange`]) where the backend can report one, and never
    /// a read past the weights. A backend without a grouped launch returns
    /// [`Error::Unsupported`].
    fn launch_grouped(&self, args: &GroupedArgs) -> Result<()> {
        let _ = args;
        Err(Error::Unsupported { backend: self.name(), what: "grouped (mixture-of-experts) launches" })
    }

    /// Waits for all enqueued work.
    fn synchronize(&self) -> Result<()>;
}

/// The registry entry of `kernel` or [`Error::UnresolvedKernel`]; for backends' launch paths.
pub fn resolved_spec(backend: &'static str, kernel: KernelHandle) -> Result<&'static gemv_core::KernelSpec> {
    kernel.spec().ok_or(Error::UnresolvedKernel { raw: kernel.raw(), backend })
}

/// A shared reference is a backend too (tests share one device through a `static`).
impl<T: GpuBackend + ?Sized> GpuBackend for &T {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn device_info(&self) -> DeviceInfo {
        (**self).device_info()
    }
    fn compute_capability(&self) -> Option<(i32, i32)> {
        (**self).compute_capability()
    }
    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
        (**self).lookup_kernel(module, name)
    }
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        (**self).alloc(bytes)
    }
    fn free(&self, buffer: DeviceBuffer) -> Result<()> {
        (**self).free(buffer)
    }
    fn upload(&self, dst: BufferRange, data: &[u8]) -> Result<()> {
        (**self).upload(dst, data)
    }
    fn download(&self, src: BufferRange, out: &mut [u8]) -> Result<()> {
        (**self).download(src, out)
    }
    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        (**self).launch_gemv(kernel, args)
    }
    fn launch_grouped(&self, args: &GroupedArgs) -> Result<()> {
        (**self).launch_grouped(args)
    }
    fn synchronize(&self) -> Result<()> {
        (**self).synchronize()
    }
}
