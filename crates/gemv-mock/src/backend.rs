//! [`MockBackend`]: buffers in host memory, launches run the host contract synchronously.

use gemv_backend::{
    DeviceInfo, DeviceKind, GemvArgs, GpuBackend, HostMemory, KernelHandle, Result, TimerKind, resolved_spec,
};
use gemv_core::{KERNELS, MODULE_NAME, Nvfp4View, gemv_contract, host_threads};
use std::sync::Mutex;

const NAME: &str = "host";

/// One launch the mock executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchRecord {
    /// The kernel's name.
    pub kernel: &'static str,
    /// Rows it computed.
    pub m: usize,
}

/// A kernel name outside the registry, given to [`MockBackend::with_present`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown kernel {0:?}: not in the gemv kernel registry")]
pub struct UnknownKernel(pub String);

/// The host reference backend.
#[derive(Debug)]
pub struct MockBackend {
    present: [bool; KERNELS.len()],
    memory: HostMemory,
    log: Mutex<Vec<LaunchRecord>>,
    threads: usize,
}

impl Default for MockBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MockBackend {
    /// Every kernel present, using all host threads.
    pub fn new() -> Self {
        Self {
            present: [true; KERNELS.len()],
            memory: HostMemory::new(NAME),
            log: Mutex::new(Vec::new()),
            threads: host_threads(),
        }
    }

    /// Only the named kernels present.
    pub fn with_present(names: &[&str]) -> std::result::Result<Self, UnknownKernel> {
        let mut present = [false; KERNELS.len()];
        for name in names {
            let index =
                KERNELS.iter().position(|spec| spec.name == *name).ok_or_else(|| UnknownKernel(name.to_string()))?;
            present[index] = true;
        }
        Ok(Self { present, ..Self::new() })
    }

    /// Uses `threads` worker threads (results are identical for any count).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The launches run so far, in order.
    pub fn launches(&self) -> Vec<LaunchRecord> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Empties the launch log.
    pub fn clear_launches(&self) {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

impl GpuBackend for MockBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: NAME,
            name: format!("host CPU ({} threads)", self.threads),
            architecture: std::env::consts::ARCH.to_string(),
            kind: DeviceKind::Cpu,
            peak_bandwidth_gbps: None,
            timer: TimerKind::HostClock,
        }
    }

    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
        if module != MODULE_NAME {
            return KernelHandle::NONE;
        }
        match KERNELS.iter().position(|spec| spec.name == name) {
            Some(index) if self.present[index] => KernelHandle::for_registry_index(index),
            _ => KernelHandle::NONE,
        }
    }

    gemv_backend::delegate_buffers_to_host_memory!(memory);

    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let spec = resolved_spec(NAME, kernel)?;
        let present = kernel.registry_index().is_some_and(|index| self.present[index]);
        if !present {
            return Err(gemv_backend::Error::UnresolvedKernel { raw: kernel.raw(), backend: NAME });
        }
        let shape = args.validate(spec)?;
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let y = self.memory.with_launch_inputs(args, |inputs| -> Result<Vec<u16>> {
            let weights = Nvfp4View::new(inputs.packed, inputs.scales, args.global_scale, n, k)?;
            let mut y = vec![0u16; m * n];
            gemv_contract(&weights, &inputs.x, m, &mut y, self.threads)?;
            Ok(y)
        })??;
        self.memory.write_with("y", args.y_written(), |out| out.copy_from_slice(bytemuck::cast_slice(&y)))?;
        self.log.lock().unwrap_or_else(|p| p.into_inner()).push(LaunchRecord { kernel: spec.name, m });
        tracing::trace!(kernel = spec.name, m, n, k, "host launch");
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
