//! Which backends this build has and how to open one by name. The one place the CLI knows them.

use clap::ValueEnum;
use gemv_backend::{BenchTimers, DeviceKind};
use std::sync::OnceLock;

/// `--device N`, set once before any backend opens.
static DEVICE: OnceLock<usize> = OnceLock::new();

/// Which device [`open`] uses where a backend has several (`--device N`): the CUDA device
/// ordinal, or the N-th wgpu adapter in the order the system lists them. Without it: CUDA device
/// 0, and the best wgpu adapter (or `GEMV_WGPU_ADAPTER`). The first call wins.
pub fn set_device(index: usize) {
    let _ = DEVICE.set(index);
}

/// `--emulate MAJOR.MINOR`, set once before any backend opens.
static EMULATED: OnceLock<(i32, i32)> = OnceLock::new();

/// The compute capability the `cuda-emu` backend emulates (`--emulate`; default
/// [`gemv_cuda_emulator::DEFAULT_EMULATED_CAPABILITY`]). The first call wins.
pub fn set_emulated_capability(capability: (i32, i32)) {
    let _ = EMULATED.set(capability);
}

/// A backend name on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// The best one found: CUDA, then wgpu on a real GPU, then the CPU backend.
    Auto,
    /// The CPU backend: the exact contract with SIMD and threads (GEMV_CPU_SIMD forces a path).
    Cpu,
    /// The host reference: the contract element by element, the oracle of the tests.
    Host,
    /// The CUDA kernels compiled for the CPU under the SIMT emulator (in builds with the
    /// `emulator` feature).
    CudaEmu,
    /// CUDA on an NVIDIA GPU.
    Cuda,
    /// wgpu (Vulkan, Metal, DX12; lavapipe as a software fallback).
    Wgpu,
}

impl BackendChoice {
    /// Every concrete backend, in the order `auto` prefers them.
    pub const CONCRETE: [BackendChoice; 5] =
        [BackendChoice::Cuda, BackendChoice::Wgpu, BackendChoice::Cpu, BackendChoice::Host, BackendChoice::CudaEmu];

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Cpu => "cpu",
            BackendChoice::Host => "host",
            BackendChoice::CudaEmu => "cuda-emu",
            BackendChoice::Cuda => "cuda",
            BackendChoice::Wgpu => "wgpu",
        }
    }
}

/// Opens a concrete backend, or says in one line why it cannot be opened here.
pub fn open(choice: BackendChoice) -> Result<Box<dyn BenchTimers>, String> {
    match choice {
        BackendChoice::Auto => open_auto(),
        BackendChoice::Host => Ok(Box::new(gemv_mock::MockBackend::new())),
        BackendChoice::Cpu => gemv_cpu::CpuBackend::new()
            .map(|backend| Box::new(backend) as Box<dyn BenchTimers>)
            .map_err(|error| error.to_string()),
        BackendChoice::CudaEmu => open_emulator(),
        BackendChoice::Cuda => gemv_cuda::CudaBackend::new(DEVICE.get().copied().unwrap_or(0))
            .map(|backend| Box::new(backend) as Box<dyn BenchTimers>)
            .map_err(|error| error.to_string()),
        BackendChoice::Wgpu => open_wgpu(gemv_wgpu::AdapterChoice::FromEnvironment),
    }
}

/// The backend named `name` (as opened by [`open`]) with every launch a programmatic dependent
/// of the kernel before it: CUDA on sm_90 and newer, the emulator emulating 9.0 or newer (its
/// checks then fault a kernel that reads X before it waits). Otherwise why there is none.
pub fn open_dependent(name: &str) -> Result<Box<dyn BenchTimers>, String> {
    match name {
        "cuda" => gemv_cuda::CudaBackend::new(DEVICE.get().copied().unwrap_or(0))
            .and_then(|backend| backend.with_launch_order(gemv_cuda::LaunchOrder::ProgrammaticDependent))
            .map(|backend| Box::new(backend) as Box<dyn BenchTimers>)
            .map_err(|error| error.to_string()),
        "cuda-emu" => open_dependent_emulator(),
        other => Err(format!("{other} has no programmatic dependent launches (CUDA sm_90 and newer)")),
    }
}

#[cfg(feature = "emulator")]
fn open_dependent_emulator() -> Result<Box<dyn BenchTimers>, String> {
    let capability = EMULATED.get().copied().unwrap_or(gemv_cuda_emulator::DEFAULT_EMULATED_CAPABILITY);
    if gemv_cuda::LaunchOrder::ProgrammaticDependent.check(capability).is_err() {
        return Err(format!(
            "cuda-emu emulating {}.{} has no programmatic dependent launches (sm_90 and newer)",
            capability.0, capability.1
        ));
    }
    Ok(Box::new(gemv_cuda_emulator::CudaEmulator::new().with_capability(capability).with_dependent_launch(true)))
}

#[cfg(not(feature = "emulator"))]
fn open_dependent_emulator() -> Result<Box<dyn BenchTimers>, String> {
    open_emulator()
}

/// wgpu on `--device N`'s adapter where given, else on `choice`.
fn open_wgpu(choice: gemv_wgpu::AdapterChoice) -> Result<Box<dyn BenchTimers>, String> {
    gemv_wgpu::WgpuBackend::with_adapter(DEVICE.get().map_or(choice, |&i| gemv_wgpu::AdapterChoice::Index(i)))
        .map(|backend| Box::new(backend) as Box<dyn BenchTimers>)
        .map_err(|error| error.to_string())
}

/// Whether a GPU may be present for wgpu: on Linux, a DRM render node or an NVIDIA device node
/// (every Vulkan driver of a real GPU opens one of them); elsewhere assumed.
fn gpu_device_nodes() -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let named = |dir: &str, prefix: &str| {
        std::fs::read_dir(dir)
            .is_ok_and(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(prefix)))
    };
    named("/dev/dri", "renderD") || named("/dev", "nvidia")
}

/// The CUDA kernels under the SIMT emulator, emulating `--emulate`'s capability.
#[cfg(feature = "emulator")]
fn open_emulator() -> Result<Box<dyn BenchTimers>, String> {
    let capability = EMULATED.get().copied().unwrap_or(gemv_cuda_emulator::DEFAULT_EMULATED_CAPABILITY);
    Ok(Box::new(gemv_cuda_emulator::CudaEmulator::new().with_capability(capability)))
}

/// This build has no emulator (it needs a C++ compiler to build).
#[cfg(not(feature = "emulator"))]
fn open_emulator() -> Result<Box<dyn BenchTimers>, String> {
    let _ = EMULATED.get();
    Err("cuda-emu: this gemv was built without the CUDA emulator (build it with `--features emulator`, which \
         needs a C++ compiler)"
        .into())
}

/// CUDA first, then wgpu on a real GPU, then the CPU backend (the host reference if even that
/// cannot open, which only a bad GEMV_CPU_SIMD causes).
fn open_auto() -> Result<Box<dyn BenchTimers>, String> {
    for choice in [BackendChoice::Cuda, BackendChoice::Wgpu] {
        if choice == BackendChoice::Wgpu && !gpu_device_nodes() {
            // Enumerating adapters loads every Vulkan driver, a software one included (lavapipe:
            // tens of MB resident), only to skip it: not worth it where no GPU can be there.
            tracing::debug!("auto skipped wgpu: no GPU device node (/dev/dri/renderD*, /dev/nvidia*)");
            continue;
        }
        // wgpu on real GPUs only: a software adapter is skipped before a device is created on it.
        let opened = match choice {
            BackendChoice::Wgpu => open_wgpu(gemv_wgpu::AdapterChoice::Hardware),
            other => open(other),
        };
        match opened {
            Ok(backend) if backend.device_info().kind == DeviceKind::Gpu => {
                tracing::info!(backend = backend.name(), "auto picked a GPU backend");
                return Ok(backend);
            }
            Ok(backend) => tracing::debug!(backend = backend.name(), "auto skipped: not a real GPU"),
            Err(reason) => tracing::debug!(backend = choice.name(), %reason, "auto skipped"),
        }
    }
    match open(BackendChoice::Cpu) {
        Ok(backend) => {
            tracing::info!(backend = "cpu", "auto picked the CPU backend");
            Ok(backend)
        }
        Err(reason) => {
            tracing::warn!(%reason, "auto: the CPU backend cannot open; using the host reference");
            open(BackendChoice::Host)
        }
    }
}
