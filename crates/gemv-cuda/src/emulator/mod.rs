//! [`CudaEmulator`]: the CUDA kernels executed on the CPU (docs/emulator.md).
//!
//! Buffers live in host memory. A launch copies the argument ranges out, runs the kernel under
//! the SIMT emulator with exactly those ranges as the only memory it may touch (reads of x,
//! packed, scales; writes of the first m rows of y), and copies y back.

mod ffi;

use crate::error::CudaError;
use crate::launch::{THREADS_PER_BLOCK, grid_size, kernel_int};
use gemv_backend::{
    DeviceInfo, DeviceKind, Error, GemvArgs, GpuBackend, HostMemory, KernelHandle, Result, TimerKind, resolved_spec,
};
use gemv_core::{MODULE_NAME, host_threads};
use std::ffi::{CStr, CString, c_int};

const NAME: &str = "cuda-emu";

/// The CUDA kernels on the CPU under the SIMT emulator.
#[derive(Debug)]
pub struct CudaEmulator {
    memory: HostMemory,
    workers: usize,
}

impl Default for CudaEmulator {
    fn default() -> Self {
        Self::new()
    }
}

/// One raw launch on host slices, for kernels outside the registry (the emulator's own tests).
#[derive(Debug)]
pub struct HostLaunch<'a> {
    /// Kernel entry point name.
    pub kernel: &'a str,
    /// Blocks.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
    /// X.
    pub x: &'a [u16],
    /// Packed weights.
    pub packed: &'a [u8],
    /// Scales.
    pub scales: &'a [u8],
    /// Y (the only writable region).
    pub y: &'a mut [u16],
    /// Global scale.
    pub global_scale: f32,
    /// Rows.
    pub m: usize,
    /// Weight rows.
    pub n: usize,
    /// Weight columns.
    pub k: usize,
}

impl CudaEmulator {
    /// An emulator using every host thread for blocks.
    pub fn new() -> Self {
        Self { memory: HostMemory::new(NAME), workers: host_threads() }
    }

    /// Runs blocks on `workers` OS threads (results are identical for any count).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Whether the emulator library has a kernel of this name.
    pub fn has_kernel(name: &str) -> bool {
        let Ok(c_name) = CString::new(name) else { return false };
        // SAFETY: `c_name` is a valid NUL-terminated string for the duration of the call; the
        // function only reads it and returns a pointer into a static table (or null).
        !unsafe { ffi::gemv_emu_find(c_name.as_ptr()) }.is_null()
    }

    /// Runs `launch` on host slices: exactly those slices are the memory the kernel may touch.
    /// Faults (out-of-bounds, misaligned vector access, divergent barrier, bad shuffle mask,
    /// deadlock) come back as [`Error::KernelFault`].
    pub fn launch_on_host(&self, launch: HostLaunch<'_>) -> Result<()> {
        let fault = |message: String| Error::from(CudaError::Fault { kernel: launch.kernel.to_string(), message });
        let c_name = CString::new(launch.kernel).map_err(|_| fault("kernel name contains NUL".into()))?;
        // SAFETY: as in `has_kernel`.
        let kernel = unsafe { ffi::gemv_emu_find(c_name.as_ptr()) };
        if kernel.is_null() {
            return Err(fault("no such kernel in the emulator library".into()));
        }
        let args = ffi::EmuArgs {
            x: launch.x.as_ptr(),
            packed: launch.packed.as_ptr(),
            scales: launch.scales.as_ptr(),
            y: launch.y.as_mut_ptr(),
            global_scale: launch.global_scale,
            m: kernel_int(NAME, "M", launch.m)?,
            n: kernel_int(NAME, "N", launch.n)?,
            k: kernel_int(NAME, "K", launch.k)?,
        };
        let region = |name: &'static CStr, base: *const u8, len: usize, writable: bool| ffi::EmuRegion {
            name: name.as_ptr(),
            base: base.cast(),
            len,
            writable: c_int::from(writable),
        };
        let regions = [
            region(c"x", launch.x.as_ptr().cast(), 2 * launch.x.len(), false),
            region(c"packed", launch.packed.as_ptr(), launch.packed.len(), false),
            region(c"scales", launch.scales.as_ptr(), launch.scales.len(), false),
            region(c"y", launch.y.as_ptr().cast(), 2 * launch.y.len(), true),
        ];
        let mut message = vec![0u8; 1024];
        // SAFETY: every pointer in `args` and `regions` points into a slice borrowed for this
        // call (y mutably, the rest shared) and the lengths are those slices' lengths; the
        // emulator checks every kernel access against `regions` before touching memory, and
        // returns only after every worker thread has joined. `message` has `message.len()` bytes.
        let status = unsafe {
            ffi::gemv_emu_launch(
                kernel,
                launch.grid,
                launch.block,
                &args,
                regions.as_ptr(),
                regions.len() as c_int,
                c_int::try_from(self.workers).unwrap_or(1),
                message.as_mut_ptr().cast(),
                message.len(),
            )
        };
        if status == 0 {
            return Ok(());
        }
        let end = message.iter().position(|&b| b == 0).unwrap_or(message.len());
        Err(fault(String::from_utf8_lossy(&message[..end]).into_owned()))
    }
}

impl GpuBackend for CudaEmulator {
    fn name(&self) -> &'static str {
        NAME
    }

    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: NAME,
            name: format!("CUDA SIMT emulator ({} worker threads)", self.workers),
            architecture: format!("emulated on {}", std::env::consts::ARCH),
            kind: DeviceKind::Emulator,
            peak_bandwidth_gbps: None,
            timer: TimerKind::HostClock,
        }
    }

    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
        if module != MODULE_NAME || !Self::has_kernel(name) {
            return KernelHandle::NONE;
        }
        KernelHandle::for_name(name)
    }

    gemv_backend::delegate_buffers_to_host_memory!(memory);

    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let spec = resolved_spec(NAME, kernel)?;
        let shape = args.validate(spec)?;
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let mut y = vec![0u16; m * n];
        self.memory.with_launch_inputs(args, |inputs| {
            self.launch_on_host(HostLaunch {
                kernel: spec.name,
                grid: grid_size(spec, n),
                block: THREADS_PER_BLOCK,
                x: &inputs.x,
                packed: inputs.packed,
                scales: inputs.scales,
                y: &mut y,
                global_scale: args.global_scale,
                m,
                n,
                k,
            })
        })??;
        self.memory.write_with("y", args.y_written(), |out| out.copy_from_slice(bytemuck::cast_slice(&y)))?;
        tracing::trace!(kernel = spec.name, m, n, k, "emulated launch");
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
