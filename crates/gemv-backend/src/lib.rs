//! gemv-backend: what every gemv backend implements and proves.
//!
//! - [`GpuBackend`]: object-safe; kernels by (module, name) into [`KernelHandle`]s (0 = not
//!   resolved), buffers, launches, synchronisation, device info; `BenchTimers` (feature
//!   `bench`): what the benchmark times beyond that (device events, the device's copy, a peer
//!   GEMM), for `gemv bench` rather than engines.
//! - [`GemvArgs::validate`]: the one boundary check every launch goes through.
//! - [`ResolvedTiers`]: the tier table bound to one backend; [`DeviceMatrix`]: weights uploaded
//!   once, any M run through the dispatch plan; [`DeviceExperts`]: a mixture-of-experts layer's
//!   weights, routed tokens run in one grouped launch ([`GroupedArgs`]).
//! - The verification gates every backend runs live in their own crate, gemv-conformance.
//! - `HostMemory` and `AlignedBytes` (feature `host-memory`): device-aligned buffers for the
//!   backends that execute on the CPU, handing kernels raw addresses; not for engines.
#![warn(missing_docs)]

#[cfg(feature = "host-memory")]
mod aligned_bytes;
mod args;
mod backend;
#[cfg(feature = "bench")]
mod bench_timers;
mod buffer;
mod buffer_table;
mod device;
mod device_experts;
mod device_matrix;
mod error;
mod grouped_args;
mod handle;
#[cfg(feature = "host-memory")]
mod host_memory;
mod tiers;

#[cfg(feature = "host-memory")]
pub use aligned_bytes::{AlignedBytes, DEVICE_ALIGNMENT};
pub use args::{GemvArgs, bf16_y_only};
pub use backend::{GpuBackend, resolved_spec};
#[cfg(feature = "bench")]
pub use bench_timers::{BenchTimers, PeerTiming, time_with_host_clock};
pub use buffer::{BufferRange, DeviceBuffer};
pub use buffer_table::{BufferGuard, BufferTable};
pub use device::{DeviceInfo, DeviceKind, MultiplyAdd, TimerKind};
pub use device_experts::DeviceExperts;
pub use device_matrix::{BackendRef, DeviceMatrix};
pub use error::{Error, Result};
pub use grouped_args::GroupedArgs;
pub use handle::KernelHandle;
#[cfg(feature = "host-memory")]
pub use host_memory::{HostGroupedAddresses, HostGroupedInputs, HostLaunchAddresses, HostLaunchInputs, HostMemory};
pub use tiers::{PlannedLaunch, ResolvedTiers};
