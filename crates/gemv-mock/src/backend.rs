//! [`MockBackend`]: buffers in host memory, launches run the host contract synchronously.

use gemv_backend::{
    DeviceInfo, DeviceKind, GemvArgs, GpuBackend, GroupedArgs, HostMemory, KernelHandle, Result, TimerKind,
    resolved_spec,
};
use gemv_core::{
    ExpertRouting, KERNELS, MODULE_NAME, Nvfp4ExpertsView, Nvfp4View, YFormat, gemv_contract, gemv_contract_f32,
    grouped_contract, host_threads,
};
use std::sync::{Arc, Mutex};

const NAME: &str = "host";

/// The kernel name [`LaunchRecord`] gives a grouped launch.
pub const GROUPED: &str = "grouped";

/// One launch the mock executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchRecord {
    /// The kernel's name ([`GROUPED`] for a grouped launch).
    pub kernel: &'static str,
    /// Rows (tokens) it computed.
    pub m: usize,
}

/// A kernel name outside the registry, given to [`MockBackend::with_present`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown kernel {0:?}: not in the gemv kernel registry")]
pub struct UnknownKernel(pub String);

/// A test's hook around every launch: it receives the backend, the kernel and the arguments and
/// decides what happens: run [`MockBackend::launch_unhooked`] (with the arguments as given or
/// changed), skip it, or corrupt memory afterwards. It is how tests plant faults. A hooked
/// backend reports [`DeviceKind::Cpu`], not the reference: it stands in for another backend.
pub type LaunchHook = dyn Fn(&MockBackend, KernelHandle, &GemvArgs) -> Result<()> + Send + Sync;

/// A test's hook around every grouped launch, as [`LaunchHook`] is around single launches: it
/// decides what happens, [`MockBackend::launch_grouped_unhooked`] being the launch itself.
pub type GroupedHook = dyn Fn(&MockBackend, &GroupedArgs) -> Result<()> + Send + Sync;

/// The host reference backend.
pub struct MockBackend {
    present: [bool; KERNELS.len()],
    memory: HostMemory,
    log: Mutex<Vec<LaunchRecord>>,
    threads: usize,
    hook: Option<Arc<LaunchHook>>,
    grouped_hook: Option<Arc<GroupedHook>>,
}

impl std::fmt::Debug for MockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockBackend")
            .field("present", &self.present)
            .field("threads", &self.threads)
            .field("hooked", &(self.hook.is_some() || self.grouped_hook.is_some()))
            .finish()
    }
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
            hook: None,
            grouped_hook: None,
        }
    }

    /// Routes every launch through `hook` (to plant faults in tests).
    pub fn with_launch_hook(
        mut self,
        hook: impl Fn(&MockBackend, KernelHandle, &GemvArgs) -> Result<()> + Send + Sync + 'static,
    ) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Routes every grouped launch through `hook` (to plant faults in tests).
    pub fn with_grouped_hook(
        mut self,
        hook: impl Fn(&MockBackend, &GroupedArgs) -> Result<()> + Send + Sync + 'static,
    ) -> Self {
        self.grouped_hook = Some(Arc::new(hook));
        self
    }

    /// Only the named kernels present.
    pub fn with_present(names: &[&str]) -> std::result::Result<Self, UnknownKernel> {
        let mut present = [false; KERNELS.len()];
        for name in names {
            let index = gemv_core::kernel_index(name).ok_or_else(|| UnknownKernel(name.to_string()))?;
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

/// The host clock times its launches; it has no device copy and no peer.
impl gemv_backend::BenchTimers for MockBackend {}

impl GpuBackend for MockBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: NAME,
            name: format!("host CPU ({} threads)", self.threads),
            architecture: std::env::consts::ARCH.to_string(),
            // With a hook it is a test's stand-in for some other backend, no longer the contract.
            kind: if self.hook.is_some() || self.grouped_hook.is_some() {
                DeviceKind::Cpu
            } else {
                DeviceKind::Reference
            },
            peak_bandwidth_gbps: None,
            timer: TimerKind::HostClock,
            multiply_add: gemv_backend::MultiplyAdd::Fused,
        }
    }

    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
        // The exact family only: the mock computes the exact contract.
        if module != MODULE_NAME {
            return KernelHandle::NONE;
        }
        match gemv_core::kernel_in_module(module, name) {
            Some(index) if self.present[index] => KernelHandle::for_registry_index(index),
            _ => KernelHandle::NONE,
        }
    }

    gemv_backend::delegate_buffers_to_host_memory!(memory);

    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        match &self.hook {
            Some(hook) => hook(self, kernel, args),
            None => self.launch_unhooked(kernel, args),
        }
    }

    fn launch_grouped(&self, args: &GroupedArgs) -> Result<()> {
        match &self.grouped_hook {
            Some(hook) => hook(self, args),
            None => self.launch_grouped_unhooked(args),
        }
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// The host contract writing Y's elements as `T` (`gemv_contract`, `gemv_contract_f32`).
type HostContract<T> = fn(&Nvfp4View<'_>, &[u16], usize, &mut [T], usize) -> gemv_core::Result<()>;

impl MockBackend {
    /// The grouped launch itself (the host contract of every pair), bypassing any hook.
    pub fn launch_grouped_unhooked(&self, args: &GroupedArgs) -> Result<()> {
        args.validate()?;
        args.kernel(false)?;
        let (m, top_k, n, k) = (args.m, args.top_k, args.n, args.k);
        let y = self.memory.with_grouped_inputs(args, |inputs| -> Result<Vec<u16>> {
            let experts =
                Nvfp4ExpertsView::new(inputs.packed, inputs.scales, &inputs.global_scales, args.experts, n, k)?;
            let routing = ExpertRouting::new(&inputs.routing, m, top_k, args.experts)?;
            let mut y = vec![0u16; m * top_k * n];
            grouped_contract(&experts, &inputs.x, &routing, &mut y, self.threads)?;
            Ok(y)
        })??;
        self.memory.write_grouped_y(args, &y)?;
        self.log.lock().unwrap_or_else(|p| p.into_inner()).push(LaunchRecord { kernel: GROUPED, m });
        tracing::trace!(m, top_k, n, k, experts = args.experts, "host grouped launch");
        Ok(())
    }

    /// Computes a validated launch's Y with `contract` (the host contract writing Y's format) and
    /// writes it.
    fn host_contract<T: bytemuck::Pod>(
        &self,
        args: &GemvArgs,
        (m, n, k): (usize, usize, usize),
        contract: HostContract<T>,
    ) -> Result<()> {
        let y = self.memory.with_launch_inputs(args, |inputs| -> Result<Vec<T>> {
            let weights = Nvfp4View::new(inputs.packed, inputs.scales, args.global_scale, n, k)?;
            let mut y = vec![T::zeroed(); m * n];
            contract(&weights, &inputs.x, m, &mut y, self.threads)?;
            Ok(y)
        })??;
        self.memory.write_y_rows(args, &y)
    }

    /// The launch itself, bypassing any hook.
    pub fn launch_unhooked(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let spec = resolved_spec(NAME, kernel)?;
        let present = kernel.registry_index().is_some_and(|index| self.present[index]);
        if !present {
            return Err(gemv_backend::Error::UnresolvedKernel { raw: kernel.raw(), backend: NAME });
        }
        let shape = args.validate(spec)?;
        let (m, n, k) = (shape.m, shape.n, shape.k);
        match args.y_format {
            YFormat::F32 => self.host_contract(args, (m, n, k), gemv_contract_f32)?,
            _ => self.host_contract(args, (m, n, k), gemv_contract)?,
        }
        self.log.lock().unwrap_or_else(|p| p.into_inner()).push(LaunchRecord { kernel: spec.name, m });
        tracing::trace!(kernel = spec.name, m, n, k, "host launch");
        Ok(())
    }
}
