//! What a backend reports about the device it runs on.

/// The kind of device, for choosing a default backend and reading numbers right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A real GPU.
    Gpu,
    /// A software rasteriser posing as a GPU (lavapipe, WARP).
    SoftwareGpu,
    /// The host reference: the numeric contract itself, executed element by element on the CPU.
    /// Gates that compare with the contract prove nothing about it (they check plumbing).
    Reference,
    /// A CPU backend computing the contract its own way (threads, SIMD).
    Cpu,
    /// An emulator running GPU kernels on the CPU (correctness only).
    Emulator,
}

/// How `time_launches` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKind {
    /// Device events or timestamp queries.
    DeviceEvents,
    /// The host clock around a synchronised span.
    HostClock,
}

/// Whether a backend's multiply-adds round once, as the contract's `fma` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiplyAdd {
    /// Always fused: bit-exact with the contract everywhere.
    Fused,
    /// Fused or not as the driver decides (WGSL's `fma`): bit-exact except where a product
    /// overflows f32, where an unfused device gives infinity.
    DriverChoice,
}

/// The device behind a backend.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// The backend's name (`host`, `cuda-emu`, `cuda`, `wgpu`).
    pub backend: &'static str,
    /// The device's own name.
    pub name: String,
    /// Architecture (e.g. `sm_90`, `x86_64`, `vulkan/llvmpipe`).
    pub architecture: String,
    /// What it is.
    pub kind: DeviceKind,
    /// Nominal peak memory bandwidth in GB/s, when known.
    pub peak_bandwidth_gbps: Option<f64>,
    /// How timing is measured.
    pub timer: TimerKind,
    /// Whether its multiply-adds are fused.
    pub multiply_add: MultiplyAdd,
}
