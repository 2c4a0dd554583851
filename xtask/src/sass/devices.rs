//! The GPUs the report models: per-SM resources, occupancy, and each device's bandwidth, clock
//! and assumed latency.

use super::listing::KernelStats;

/// The architectures the report covers.
pub const ARCHS: [&str; 7] = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120", "sm_121"];
/// Threads per block of both families' kernels, in warps.
pub const WARPS_PER_BLOCK: usize = 8;
/// One NVFP4 weight: half a byte of code plus a sixteenth of a scale byte.
pub const BYTES_PER_WEIGHT: f64 = 0.5625;
/// Shapes whose bytes in flight the report states.
pub const MODEL_N: [usize; 3] = [1024, 5120, 17408];

/// An architecture's per-SM resources (CUDA programming guide, compute capability tables).
struct Sm {
    arch: &'static str,
    max_warps: usize,
    max_blocks: usize,
    shared_bytes: usize,
}

const SMS: [Sm; 7] = [
    Sm { arch: "sm_80", max_warps: 64, max_blocks: 32, shared_bytes: 164 << 10 },
    Sm { arch: "sm_86", max_warps: 48, max_blocks: 16, shared_bytes: 100 << 10 },
    Sm { arch: "sm_89", max_warps: 48, max_blocks: 24, shared_bytes: 100 << 10 },
    Sm { arch: "sm_90", max_warps: 64, max_blocks: 32, shared_bytes: 228 << 10 },
    Sm { arch: "sm_100", max_warps: 64, max_blocks: 32, shared_bytes: 228 << 10 },
    Sm { arch: "sm_120", max_warps: 48, max_blocks: 32, shared_bytes: 100 << 10 },
    Sm { arch: "sm_121", max_warps: 48, max_blocks: 32, shared_bytes: 100 << 10 },
];

/// Resident blocks per SM: the tightest of registers (65,536 per SM, allocated in units of 8 per
/// thread), shared memory (1 KB reserved per block), warps and the block limit.
pub fn occupancy(arch: &str, stats: &KernelStats) -> usize {
    let Some(sm) = SMS.iter().find(|sm| sm.arch == arch) else { return 0 };
    let threads = WARPS_PER_BLOCK * 32;
    let registers = (stats.registers as usize).div_ceil(8).max(1) * 8 * threads;
    let by_registers = 65536 / registers;
    let by_shared = sm.shared_bytes / (stats.shared_bytes as usize + 1024);
    let by_warps = sm.max_warps / WARPS_PER_BLOCK;
    by_registers.min(by_shared).min(by_warps).min(sm.max_blocks)
}

pub struct Device {
    pub name: &'static str,
    pub arch: &'static str,
    pub sms: f64,
    pub clock_ghz: f64,
    pub bandwidth_gbs: f64,
    pub latency_ns: f64,
    pub source: &'static str,
}

pub const DEVICES: [Device; 3] = [
    Device {
        name: "H200",
        arch: "sm_90",
        sms: 132.0,
        clock_ghz: 1.98,
        bandwidth_gbs: 4800.0,
        latency_ns: 700.0,
        source: "132 SMs at 1.98 GHz boost (the H100 SXM configuration), 4.8 TB/s HBM3e; 700 ns loaded memory latency \
                 assumed (600-800 ns is typical of HBM under load)",
    },
    Device {
        name: "B200",
        arch: "sm_100",
        sms: 148.0,
        clock_ghz: 1.965,
        bandwidth_gbs: 8000.0,
        latency_ns: 700.0,
        source: "148 SMs at 1.965 GHz, 8 TB/s HBM3e; 700 ns loaded latency assumed, as for H200",
    },
    Device {
        name: "GB10",
        arch: "sm_121",
        sms: 48.0,
        clock_ghz: 2.52,
        bandwidth_gbs: 273.0,
        latency_ns: 600.0,
        source: "48 SMs (6144 CUDA cores / 128) at 2.52 GHz, 273 GB/s LPDDR5x; 600 ns loaded latency assumed",
    },
];
