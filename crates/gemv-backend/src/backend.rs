//! The one trait every backend implements. Object-safe: callers hold `&dyn GpuBackend`.

use crate::{BufferRange, DeviceBuffer, DeviceInfo, Error, GemvArgs, KernelHandle, Result};
use gemv_core::GemvShape;
use std::time::{Duration, Instant};

/// A device that can run the gemv kernels of the registry.
pub trait GpuBackend: Send + Sync {
    /// Short name: `host`, `cuda-emu`, `cuda`, `wgpu`.
    fn name(&self) -> &'static str;

    /// The device behind it.
    fn device_info(&self) -> DeviceInfo;

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

    /// Waits for all enqueued work.
    fn synchronize(&self) -> Result<()>;

    /// Runs `launches` in order, `repeats` times, and returns the device time of the whole span.
    /// The default uses the host clock around a synchronised span; backends with events override.
    fn time_launches(&self, launches: &[(KernelHandle, GemvArgs)], repeats: usize) -> Result<Duration> {
        time_with_host_clock(self, launches, repeats)
    }

    /// Device time of `repeats` device-to-device copies of `bytes` (the bandwidth reference of
    /// the performance protocol), or None when the backend has no such copy.
    fn time_device_copy(&self, bytes: usize, repeats: usize) -> Result<Option<Duration>> {
        let _ = (bytes, repeats);
        Ok(None)
    }

    /// The platform's own dense BF16 GEMM on `shape` (BF16 weights, N x K, rotated through
    /// copies that fill at least `cold_bytes`), timed `rounds` times over `repeats` runs each:
    /// the peer the bench prints beside the kernels (cuBLAS on CUDA). `Ok(None)`: this backend
    /// has no peer; an error says why a peer it would have cannot run here (e.g. no libcublas).
    fn time_peer_gemm(
        &self,
        shape: GemvShape,
        cold_bytes: usize,
        repeats: usize,
        rounds: usize,
    ) -> Result<Option<PeerTiming>> {
        let _ = (shape, cold_bytes, repeats, rounds);
        Ok(None)
    }
}

/// A peer GEMM's timing ([`GpuBackend::time_peer_gemm`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerTiming {
    /// What ran, e.g. `cuBLAS BF16 GEMM`.
    pub name: &'static str,
    /// Device time of each round's repeats together.
    pub rounds: Vec<Duration>,
}

impl PeerTiming {
    /// Bytes a dense BF16 GEMM on `shape` moves at least: its weights, X and Y, two bytes each.
    pub fn bytes_moved(shape: GemvShape) -> u64 {
        let (m, n, k) = (shape.m as u64, shape.n as u64, shape.k as u64);
        2 * (n * k + m * k + m * n)
    }
}

/// Runs `launches` `repeats` times between two synchronisations and returns the host-clock span:
/// the timing of backends without device events.
pub fn time_with_host_clock<B: GpuBackend + ?Sized>(
    backend: &B,
    launches: &[(KernelHandle, GemvArgs)],
    repeats: usize,
) -> Result<Duration> {
    backend.synchronize()?;
    let start = Instant::now();
    for _ in 0..repeats {
        for (kernel, args) in launches {
            backend.launch_gemv(*kernel, args)?;
        }
    }
    backend.synchronize()?;
    Ok(start.elapsed())
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
    fn synchronize(&self) -> Result<()> {
        (**self).synchronize()
    }
    fn time_launches(&self, launches: &[(KernelHandle, GemvArgs)], repeats: usize) -> Result<Duration> {
        (**self).time_launches(launches, repeats)
    }
    fn time_device_copy(&self, bytes: usize, repeats: usize) -> Result<Option<Duration>> {
        (**self).time_device_copy(bytes, repeats)
    }
    fn time_peer_gemm(
        &self,
        shape: GemvShape,
        cold_bytes: usize,
        repeats: usize,
        rounds: usize,
    ) -> Result<Option<PeerTiming>> {
        (**self).time_peer_gemm(shape, cold_bytes, repeats, rounds)
    }
}
