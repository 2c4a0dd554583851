//! [`CudaBackend`]: the kernels on an NVIDIA GPU through cudarc (driver API, loaded at run time).
//!
//! Nothing here touches CUDA before `is_culib_present()` says libcuda can be loaded: a machine
//! with no driver, or no device, gets [`Error::Unavailable`], never a panic.

#[cfg(feature = "bench")]
mod bench_timers;
#[cfg(feature = "cublas-peer")]
mod cublas_peer;
mod engine;
mod enqueue;
mod programmatic;

#[cfg(feature = "cublas-peer")]
pub use cublas_peer::cublas_present;

pub use engine::{CudaExperts, CudaKernels, CudaWeights, engine_context};

use crate::LaunchOrder;
use crate::error::CudaError;
use crate::ptx;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr};
use enqueue::{GroupedOperands, Operands, enqueue, enqueue_grouped};
use gemv_backend::{
    BufferGuard, BufferRange, BufferTable, DeviceBuffer, DeviceInfo, DeviceKind, Error, GemvArgs, GpuBackend,
    GroupedArgs, KernelHandle, Result, TimerKind, resolved_spec,
};
use gemv_core::KernelSpec;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The locked buffer table a launch holds while it is enqueued.
type Buffers<'a> = BufferGuard<'a, CudaSlice<u8>>;

const NAME: &str = "cuda";

/// A failed driver call as the public error.
fn driver_error(call: impl Into<String>) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
    let convert = CudaError::driver(call);
    move |source| convert(source).into()
}

/// The gemv kernels on one CUDA device.
pub struct CudaBackend {
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    capability: (i32, i32),
    /// SMs of the device: a persistent kernel's grid.
    multiprocessors: u32,
    /// How launches are enqueued; the modules are the builds for it.
    order: LaunchOrder,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
    buffers: BufferTable<CudaSlice<u8>>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend").field("device", &self.info.name).field("arch", &self.info.architecture).finish()
    }
}

/// Whether libcuda can be loaded on this machine (no CUDA call is made).
#[cfg(feature = "dynamic-loading")]
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the driver library by its well-known names with libloading;
    // no CUDA function is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether libcuda can be loaded on this machine: without the `dynamic-loading` feature the
/// final binary's cudarc links libcuda, so a running program has it.
#[cfg(not(feature = "dynamic-loading"))]
pub fn driver_present() -> bool {
    true
}

impl CudaBackend {
    /// Opens device `ordinal`. No driver or no such device is [`Error::Unavailable`].
    pub fn new(ordinal: usize) -> Result<Self> {
        let context = engine_context(ordinal)?;
        let stream = context.default_stream();
        let info = device_info(&context)?;
        let capability = context.compute_capability().map_err(driver_error("compute capability"))?;
        let multiprocessors = multiprocessors(&context)?;
        tracing::info!(device = %info.name, arch = %info.architecture, multiprocessors, "cuda backend opened");
        Ok(Self {
            context,
            stream,
            info,
            capability,
            multiprocessors,
            order: LaunchOrder::Serialized,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            buffers: BufferTable::new(NAME),
        })
    }

    /// The backend launching in `order`: [`LaunchOrder::ProgrammaticDependent`] makes every
    /// launch a programmatic dependent of the kernel before it on the stream, running the
    /// modules' builds for such launches ([`Error::Unsupported`] below sm_90). Kernel handles
    /// stay valid (they name registry kernels); the functions behind them are loaded again, from
    /// the builds for `order`, on first use.
    pub fn with_launch_order(mut self, order: LaunchOrder) -> Result<Self> {
        order.check(self.capability)?;
        if order != self.order {
            self.order = order;
            self.modules.get_mut().unwrap_or_else(|p| p.into_inner()).clear();
            self.functions.get_mut().unwrap_or_else(|p| p.into_inner()).clear();
        }
        Ok(self)
    }

    /// How this backend enqueues its launches.
    pub fn launch_order(&self) -> LaunchOrder {
        self.order
    }

    /// A registry module, JIT-loaded from the embedded PTX of the build the launch order runs on
    /// first use and cached.
    fn module(&self, name: &'static str) -> Result<Arc<CudaModule>> {
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(loaded) = modules.get(name) {
            return Ok(loaded.clone());
        }
        let text = self
            .order
            .module_build(name, self.capability)
            .and_then(ptx::text)
            .ok_or(Error::UnresolvedKernel { raw: 0, backend: NAME })?;
        let loaded = self
            .context
            .load_module(cudarc::nvrtc::Ptx::from_src(text))
            .map_err(driver_error(format!("loading module {name} from PTX")))?;
        modules.insert(name, loaded.clone());
        Ok(loaded)
    }

    fn function(&self, spec: &'static KernelSpec) -> Result<CudaFunction> {
        self.function_named(spec.module, spec.name)
    }

    /// Entry point `name` of registry module `module`, looked up once and cached.
    fn function_named(&self, module: &'static str, name: &'static str) -> Result<CudaFunction> {
        let mut functions = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(function) = functions.get(name) {
            return Ok(function.clone());
        }
        let function =
            self.module(module)?.load_function(name).map_err(driver_error(format!("looking up kernel {name}")))?;
        functions.insert(name, function.clone());
        Ok(function)
    }

    /// The device address of `range`'s first byte, after checking the buffer and the bounds.
    fn address(&self, buffers: &Buffers<'_>, what: &'static str, range: BufferRange) -> Result<u64> {
        let (base, _sync) = buffers.get(what, range)?.device_ptr(&self.stream);
        Ok(base + range.offset as u64)
    }

    fn launch_locked(&self, buffers: &Buffers<'_>, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let prepared = self.prepare(buffers, kernel, args)?;
        // SAFETY: `prepare` validated the launch against live buffers, which the `buffers` lock
        // keeps alive while it is enqueued; the stream is this backend's, in its context.
        unsafe { self.enqueue_prepared(&self.stream, &prepared) }
    }

    /// Resolves and validates one launch: its function, and the device addresses of its operands
    /// (taken here, so that enqueuing it does nothing else: a graph capture records the launch
    /// alone).
    fn prepare(&self, buffers: &Buffers<'_>, kernel: KernelHandle, args: &GemvArgs) -> Result<PreparedLaunch> {
        let spec = resolved_spec(NAME, kernel)?;
        args.validate(spec)?;
        let operands = Operands {
            x: self.address(buffers, "x", args.x)?,
            packed: self.address(buffers, "packed", args.packed)?,
            scales: self.address(buffers, "scales", args.scales)?,
            y: self.address(buffers, "y", args.y)?,
        };
        Ok(PreparedLaunch {
            function: self.function(spec)?,
            spec,
            operands,
            global_scale: args.global_scale,
            launch: args.launch_shape()?,
        })
    }

    /// Enqueues a prepared launch on `stream`.
    ///
    /// # Safety
    /// `stream` belongs to this backend's context, and the buffers `prepared` addresses stay
    /// alive, Y written by nothing else, until the launch has run (or, captured into a graph,
    /// until every replay has).
    unsafe fn enqueue_prepared(&self, stream: &CudaStream, prepared: &PreparedLaunch) -> Result<()> {
        let PreparedLaunch { function, spec, operands, global_scale, launch } = prepared;
        // SAFETY: `prepare` proved every range lies inside a live buffer of this backend, holds
        // what the launch needs, fits the kernel's width, and Y overlaps no input; the caller
        // keeps them alive (this function's contract).
        unsafe { enqueue(stream, function, spec, *operands, *global_scale, launch, self.multiprocessors, self.order) }
    }
}

/// One gemv launch resolved and validated against the buffer table, ready to enqueue.
struct PreparedLaunch {
    function: CudaFunction,
    spec: &'static KernelSpec,
    operands: Operands,
    global_scale: f32,
    launch: gemv_core::LaunchShape,
}

/// The device's SM count (a persistent kernel's grid is sized from it).
fn multiprocessors(context: &Arc<CudaContext>) -> Result<u32> {
    let count = context
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(driver_error("multiprocessor count"))?;
    Ok(u32::try_from(count).unwrap_or(1).max(1))
}

fn device_info(context: &Arc<CudaContext>) -> Result<DeviceInfo> {
    let name = context.name().map_err(driver_error("device name"))?;
    let (major, minor) = context.compute_capability().map_err(driver_error("compute capability"))?;
    let attribute = |a| context.attribute(a).ok().filter(|&v| v > 0).map(f64::from);
    // DDR: two transfers per memory clock; clock in kHz, bus width in bits.
    let peak = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
        .zip(attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH))
        .map(|(khz, bits)| 2.0 * khz * 1e3 * bits / 8.0 / 1e9);
    Ok(DeviceInfo {
        backend: NAME,
        name,
        architecture: format!("sm_{major}{minor}"),
        kind: DeviceKind::Gpu,
        peak_bandwidth_gbps: peak,
        timer: TimerKind::DeviceEvents,
        multiply_add: gemv_backend::MultiplyAdd::Fused,
    })
}

impl GpuBackend for CudaBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn device_info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn compute_capability(&self) -> Option<(i32, i32)> {
        Some(self.capability)
    }

    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
        let Some(index) = gemv_core::kernel_in_module(module, name) else { return KernelHandle::NONE };
        let spec = &gemv_core::KERNELS[index];
        // A module the device cannot run (the fast family below sm_80) resolves nothing.
        if self.order.module_build(spec.module, self.capability).is_none() {
            return KernelHandle::NONE;
        }
        match self.function(spec) {
            Ok(_) => KernelHandle::for_name(name),
            Err(error) => {
                tracing::warn!(kernel = name, %error, "kernel not resolved");
                KernelHandle::NONE
            }
        }
    }

    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        let slice =
            self.stream.alloc_zeros::<u8>(bytes.max(1)).map_err(driver_error(format!("allocating {bytes} bytes")))?;
        Ok(self.buffers.insert(bytes.max(1), slice))
    }

    fn free(&self, buffer: DeviceBuffer) -> Result<()> {
        self.buffers.remove(buffer).map(drop)
    }

    fn upload(&self, dst: BufferRange, data: &[u8]) -> Result<()> {
        dst.check_host_len("upload", data.len())?;
        let mut buffers = self.buffers.lock();
        let slice = buffers.get_mut("upload", dst)?;
        if data.is_empty() {
            return Ok(());
        }
        let mut view = slice.slice_mut(dst.offset..dst.offset + dst.len);
        self.stream.memcpy_htod(data, &mut view).map_err(driver_error("upload"))?;
        self.stream.synchronize().map_err(driver_error("upload"))
    }

    fn download(&self, src: BufferRange, out: &mut [u8]) -> Result<()> {
        src.check_host_len("download", out.len())?;
        let buffers = self.buffers.lock();
        let slice = buffers.get("download", src)?;
        if out.is_empty() {
            return Ok(());
        }
        let view = slice.slice(src.offset..src.offset + src.len);
        self.stream.memcpy_dtoh(&view, out).map_err(driver_error("download"))?;
        self.stream.synchronize().map_err(driver_error("download"))
    }

    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let buffers = self.buffers.lock();
        self.launch_locked(&buffers, kernel, args)
    }

    fn launch_grouped(&self, args: &GroupedArgs) -> Result<()> {
        let buffers = self.buffers.lock();
        self.launch_grouped_locked(&buffers, args)
    }

    fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(driver_error("synchronize"))
    }
}

impl CudaBackend {
    fn launch_grouped_locked(&self, buffers: &Buffers<'_>, args: &GroupedArgs) -> Result<()> {
        args.validate()?;
        let spec = args.kernel(self.order.module_build(gemv_core::FAST_MODULE_NAME, self.capability).is_some())?;
        if self.order.module_build(spec.module, self.capability).is_none() {
            return Err(Error::Unsupported { backend: NAME, what: "grouped launches below sm_75" });
        }
        let operands = GroupedOperands {
            x: self.address(buffers, "x", args.x)?,
            packed: self.address(buffers, "packed", args.packed)?,
            scales: self.address(buffers, "scales", args.scales)?,
            global_scales: self.address(buffers, "global_scales", args.global_scales)?,
            routing: self.address(buffers, "routing", args.routing)?,
            y: self.address(buffers, "y", args.y)?,
        };
        let function = self.function_named(spec.module, spec.name)?;
        // SAFETY: `validate` proved every range lies inside a live buffer of this backend (held
        // alive by the `buffers` lock for the enqueue) and holds what the launch needs, and Y
        // overlaps no input.
        unsafe { enqueue_grouped(&self.stream, &function, spec, operands, args.into(), self.order) }
    }
}
