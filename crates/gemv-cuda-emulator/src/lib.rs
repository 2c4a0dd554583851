//! gemv-cuda-emulator: the CUDA kernels of gemv-kernels compiled by g++ and run on the CPU by a
//! SIMT emulator with a memory checker ([`CudaEmulator`], a [`gemv_backend::GpuBackend`]), so
//! tests prove the kernels without a GPU. A test tool: engines use gemv-cuda.
//!
//! Buffers live in device-aligned host memory. A launch hands the kernel the arguments' own
//! addresses (no copies, so the kernel sees the alignment a GPU would), with exactly the argument
//! ranges as the only memory it may touch: reads of x, packed and scales, writes of the first m
//! rows of y.

#![warn(missing_docs)]

mod accesses;
mod ffi;

// The build script's asm rewriter, compiled here for its unit tests.
#[cfg(test)]
#[path = "../build/asm_rewrite.rs"]
#[allow(dead_code)]
mod asm_rewrite;

pub use accesses::{AccessWidths, GlobalAccesses};

use gemv_backend::{
    DeviceInfo, DeviceKind, Error, GemvArgs, GpuBackend, GroupedArgs, HostMemory, KernelHandle, Result, TimerKind,
    resolved_spec,
};
use gemv_core::{YFormat, host_threads};
use gemv_cuda::launch::{THREADS_PER_BLOCK, grid_size, grouped_grid_size, kernel_int};
use std::ffi::{CStr, CString, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

const NAME: &str = "cuda-emu";

/// The order in which the emulator runs blocks and resumes the threads of a block. Results must
/// not depend on it: the conformance suite runs in the first two, tests of orders in the third.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThreadOrder {
    /// Blocks in index order; in each round, thread 0 first.
    #[default]
    Forward,
    /// Blocks in index order; in each round, the last thread first.
    Reversed,
    /// Blocks in an order drawn from the seed, and in each round the threads of a block in a
    /// fresh order drawn from it: reproducible, and a different interleaving for every seed.
    Seeded(u64),
}

/// The compute capability an emulator emulates unless told otherwise: an H100/H200's (sm_90),
/// so the exact family runs its sm_89 build and the fast family is available.
pub const DEFAULT_EMULATED_CAPABILITY: (i32, i32) = (9, 0);

/// SMs of the emulated device unless [`CudaEmulator::with_multiprocessors`] says otherwise: few,
/// so that a persistent kernel's warps walk several rounds on the gates' shapes (a GPU's count
/// gives the same bits).
pub const DEFAULT_MULTIPROCESSORS: u32 = 3;

/// The g++ sanitizers the emulator and its kernels were built under (`GEMV_EMU_SANITIZE` when
/// this crate was built, e.g. `address,undefined`), empty for none. Set by the build script, so
/// a test asks what was built rather than reading the variable again.
pub const EMULATOR_SANITIZERS: &str = env!("GEMV_EMU_SANITIZERS");

/// The CUDA kernels on the CPU under the SIMT emulator.
#[derive(Debug)]
pub struct CudaEmulator {
    memory: HostMemory,
    workers: usize,
    order: ThreadOrder,
    dependent: bool,
    grid_ends: u32,
    capability: (i32, i32),
    multiprocessors: u32,
    fallback_blocks: AtomicU64,
    accesses: Mutex<GlobalAccesses>,
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

/// A memory region of a launch, as the emulator's checker sees it.
struct Region {
    name: &'static CStr,
    base: *const u8,
    len: usize,
    writable: bool,
}

fn find(name: &str) -> Option<*const ffi::EmuKernel> {
    let c_name = CString::new(name).ok()?;
    // SAFETY: `c_name` is a valid NUL-terminated string for the duration of the call; the
    // function only reads it and returns a pointer into a static table (or null).
    let kernel = unsafe { ffi::gemv_emu_find(c_name.as_ptr()) };
    (!kernel.is_null()).then_some(kernel)
}

impl CudaEmulator {
    /// An emulator using every host thread for blocks, threads resumed in forward order.
    pub fn new() -> Self {
        Self {
            memory: HostMemory::new(NAME),
            workers: host_threads(),
            order: ThreadOrder::Forward,
            dependent: false,
            grid_ends: 0,
            capability: DEFAULT_EMULATED_CAPABILITY,
            multiprocessors: DEFAULT_MULTIPROCESSORS,
            fallback_blocks: AtomicU64::new(0),
            accesses: Mutex::new(GlobalAccesses::default()),
        }
    }

    /// Blocks that left their kernel's fast path for its fallback (the exact family's plain path,
    /// taken where a block's staged activations overflowed or an output is infinite or NaN),
    /// over every launch of this emulator so far. A GPU gives the same bits either way; this count
    /// is how a test proves the fast path served ordinary inputs.
    pub fn fallback_blocks(&self) -> u64 {
        self.fallback_blocks.load(Ordering::Relaxed)
    }

    /// The global-memory loads and stores of every successful launch of this emulator so far,
    /// per argument and width: how a test proves a kernel reads its inputs with the widest loads
    /// their alignment allows (narrower ones give the same bits, slower).
    pub fn global_accesses(&self) -> GlobalAccesses {
        *self.accesses.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Emulates a device of compute capability `(major, minor)`: its kernels are those of the
    /// module builds such a device loads ([`gemv_cuda::ptx::module_build`]), e.g. the exact family's
    /// sm_75 build below 8.9 and no fast family below 8.0.
    pub fn with_capability(mut self, capability: (i32, i32)) -> Self {
        self.capability = capability;
        self
    }

    /// Emulates a device of `count` SMs (at least 1; default [`DEFAULT_MULTIPROCESSORS`]): what a
    /// persistent kernel's grid is sized from. A small count makes its warps walk many rounds.
    pub fn with_multiprocessors(mut self, count: u32) -> Self {
        self.multiprocessors = count.max(1);
        self
    }

    /// The emulator library's name for a registry kernel on this emulated device, if its module
    /// has a build the device loads.
    fn emulated_name(&self, spec: &gemv_core::KernelSpec) -> Option<String> {
        self.emulated_entry(spec.module, spec.name)
    }

    /// The emulator library's name for entry `name` of module `module` on this emulated device
    /// (registry and grouped kernels alike), if the module has a build the device loads.
    fn emulated_entry(&self, module: &str, name: &str) -> Option<String> {
        self.module_build(module).map(|build| format!("{name}{}", build.emulator_suffix))
    }

    /// The build of `module` this emulator's launches run: the device's
    /// ([`gemv_cuda::ptx::module_build`]), or in a programmatic dependent launch the build for
    /// it ([`gemv_cuda::ptx::dependent_module_build`], none below sm_90).
    fn module_build(&self, module: &str) -> Option<&'static gemv_cuda::ptx::ModuleBuild> {
        if self.dependent {
            gemv_cuda::ptx::dependent_module_build(module, self.capability)
        } else {
            gemv_cuda::ptx::module_build(module, self.capability)
        }
    }

    /// Runs blocks on `workers` OS threads (results are identical for any count).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Resumes the threads of each block in `order`.
    pub fn with_thread_order(mut self, order: ThreadOrder) -> Self {
        self.order = order;
        self
    }

    /// Launches as a programmatic dependent of the previous kernel (CUDA's programmatic
    /// dependent launch): that kernel may still be writing X and the routing and reading Y, so a
    /// thread that reads X or the routing or writes Y before its `griddepcontrol.wait` is a
    /// fault. Weights may be read before it. Registry kernels run their module's build for such
    /// launches ([`gemv_cuda::ptx::dependent_module_build`]; none below sm_90).
    pub fn with_dependent_launch(mut self, dependent: bool) -> Self {
        self.dependent = dependent;
        self
    }

    /// Runs only the first and last `blocks` blocks of every launch; the others are skipped and
    /// their outputs keep what the buffer held. For tests that check the ends of a grid too large
    /// to emulate whole (weights past 2^31 bytes); 0 runs every block. Results of the blocks that
    /// run are unchanged: no block of these kernels reads another block's output.
    pub fn with_grid_ends(mut self, blocks: u32) -> Self {
        self.grid_ends = blocks;
        self
    }

    /// Whether the emulator library has a kernel of this name.
    pub fn has_kernel(name: &str) -> bool {
        find(name).is_some()
    }

    /// The kernel's declared launch bound (most threads per block), as the emulator enforces it.
    pub fn launch_bound(name: &str) -> Option<u32> {
        // SAFETY: `find` returned a pointer into the emulator's static kernel table.
        find(name).map(|kernel| unsafe { ffi::gemv_emu_launch_bound(kernel) })
    }

    /// Parses every inline-PTX statement of the kernel sources with the emulator's PTX executor
    /// (which runs them when a kernel executes) and returns how many there are, or the
    /// statements it cannot run, each with its file, line and reason.
    pub fn check_inline_ptx() -> std::result::Result<usize, String> {
        let mut error = vec![0u8; 16 * 1024];
        // SAFETY: `error` is writable for its whole length, which is passed with it; the function
        // writes a NUL-terminated message into it and reads nothing else of ours.
        let count = unsafe { ffi::gemv_emu_check_asm(error.as_mut_ptr().cast(), error.len()) };
        match usize::try_from(count) {
            Ok(count) => Ok(count),
            Err(_) => {
                let end = error.iter().position(|&b| b == 0).unwrap_or(error.len());
                Err(String::from_utf8_lossy(&error[..end]).into_owned())
            }
        }
    }

    /// Runs `launch` on host slices: exactly those slices are the memory the kernel may touch.
    /// Faults (out-of-bounds, misaligned or read-only-path violations, shared-memory races and
    /// bounds, divergent barriers, shuffle disagreements, deadlock, launch bounds) come back as
    /// [`Error::KernelFault`].
    pub fn launch_on_host(&self, launch: HostLaunch<'_>) -> Result<()> {
        let regions = [
            Region { name: c"x", base: launch.x.as_ptr().cast(), len: 2 * launch.x.len(), writable: false },
            Region { name: c"packed", base: launch.packed.as_ptr(), len: launch.packed.len(), writable: false },
            Region { name: c"scales", base: launch.scales.as_ptr(), len: launch.scales.len(), writable: false },
            Region { name: c"y", base: launch.y.as_mut_ptr().cast(), len: 2 * launch.y.len(), writable: true },
        ];
        // SAFETY: the regions are exactly the borrowed slices (y mutably borrowed for the call),
        // alive until `run` returns.
        unsafe {
            self.run(
                launch.kernel,
                launch.grid,
                launch.block,
                &regions,
                launch.global_scale,
                launch.m,
                launch.n,
                launch.k,
                (launch.k, launch.n, YFormat::Bf16),
            )
        }
    }

    /// Runs `kernel` with `regions` as x, packed, scales and y (in that order), X's and Y's rows
    /// `strides` elements apart, Y's elements of the format that follows them.
    ///
    /// # Safety
    /// Each region must be valid for its length for the whole call: readable, and for y also
    /// writable with no other access to it meanwhile.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run(
        &self,
        kernel_name: &str,
        grid: u32,
        block: u32,
        regions: &[Region; 4],
        global_scale: f32,
        m: usize,
        n: usize,
        k: usize,
        (x_stride, y_stride, y_format): (usize, usize, YFormat),
    ) -> Result<()> {
        let args = ffi::EmuArgs {
            x: regions[0].base.cast(),
            packed: regions[1].base,
            scales: regions[2].base,
            y: regions[3].base.cast_mut().cast(),
            global_scale,
            m: kernel_int(NAME, "M", m)?,
            n: kernel_int(NAME, "N", n)?,
            k: kernel_int(NAME, "K", k)?,
            x_stride: kernel_int(NAME, "X row stride", x_stride)?,
            y_stride: kernel_int(NAME, "Y row stride", y_stride)?,
            y_f32: c_int::from(y_format == YFormat::F32),
            global_scales: std::ptr::null(),
            per_expert_scales: 0,
            routing: std::ptr::null(),
            experts: 0,
            pairs: 0,
            top_k: 0,
        };
        // SAFETY: the caller's contract, passed on.
        unsafe { self.run_args(kernel_name, grid, block, regions, &args) }
    }

    /// Runs `kernel` over `args`, whose pointers lie in `regions` (x, packed, scales and y first,
    /// the counted ones; any further region read-only).
    ///
    /// # Safety
    /// As for [`Self::run`], for every region.
    unsafe fn run_args(
        &self,
        kernel_name: &str,
        grid: u32,
        block: u32,
        regions: &[Region],
        args: &ffi::EmuArgs,
    ) -> Result<()> {
        let fault = |message: String| Error::KernelFault { kernel: kernel_name.to_string(), message };
        let kernel = find(kernel_name).ok_or_else(|| fault("no such kernel in the emulator library".into()))?;
        let regions: Vec<ffi::EmuRegion> = regions
            .iter()
            .map(|r| ffi::EmuRegion {
                name: r.name.as_ptr(),
                base: r.base.cast(),
                len: r.len,
                writable: c_int::from(r.writable),
            })
            .collect();
        let mut message = vec![0u8; 1024];
        let mut counts = ffi::EmuCounts::default();
        // SAFETY: `kernel` points into the static kernel table; every pointer in `args` and
        // `regions` is valid for its region's length (the caller's contract); the emulator checks
        // every kernel access against `regions` before touching memory and returns only after
        // every worker thread has joined. `message` has `message.len()` bytes; `counts` is a
        // valid, writable local of the C layout.
        let status = unsafe {
            ffi::gemv_emu_launch(
                kernel,
                grid,
                block,
                args,
                regions.as_ptr(),
                regions.len() as c_int,
                c_int::try_from(self.workers).unwrap_or(1),
                c_int::from(self.order == ThreadOrder::Reversed),
                match self.order {
                    ThreadOrder::Seeded(seed) => seed,
                    ThreadOrder::Forward | ThreadOrder::Reversed => 0,
                },
                c_int::from(self.dependent),
                self.grid_ends,
                &mut counts,
                message.as_mut_ptr().cast(),
                message.len(),
            )
        };
        if status == 0 {
            let fallback_blocks = counts.fallback_blocks;
            if fallback_blocks > 0 {
                tracing::debug!(kernel = kernel_name, fallback_blocks, "blocks took the fallback path");
            }
            self.fallback_blocks.fetch_add(fallback_blocks, Ordering::Relaxed);
            // Regions 0..4 are x, packed, scales and y (`run`'s order).
            let launch = GlobalAccesses {
                x_loads: AccessWidths::from_counts(counts.loads[0]),
                packed_loads: AccessWidths::from_counts(counts.loads[1]),
                scales_loads: AccessWidths::from_counts(counts.loads[2]),
                y_stores: AccessWidths::from_counts(counts.stores[3]),
            };
            self.accesses.lock().unwrap_or_else(PoisonError::into_inner).add(&launch);
            return Ok(());
        }
        let end = message.iter().position(|&b| b == 0).unwrap_or(message.len());
        Err(fault(String::from_utf8_lossy(&message[..end]).into_owned()))
    }
}

/// The host clock times its launches; it has no device copy and no peer.
impl gemv_backend::BenchTimers for CudaEmulator {
    /// A graph as the emulator runs one: every launch checked up front (a capture records only
    /// launches that enqueue), then the launches in order once per replay; host-clock time of
    /// the timed replays.
    fn time_launches_as_graph(
        &self,
        launches: &[(KernelHandle, GemvArgs)],
        repeats: usize,
    ) -> Result<Option<std::time::Duration>> {
        for (kernel, args) in launches {
            args.validate(resolved_spec(NAME, *kernel)?)?;
        }
        let replay = || launches.iter().try_for_each(|(kernel, args)| self.launch_gemv(*kernel, args));
        replay()?;
        let start = std::time::Instant::now();
        for _ in 0..repeats {
            replay()?;
        }
        Ok(Some(start.elapsed()))
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
            architecture: format!(
                "sm_{}{} emulated on {}",
                self.capability.0,
                self.capability.1,
                std::env::consts::ARCH
            ),
            kind: DeviceKind::Emulator,
            peak_bandwidth_gbps: None,
            timer: TimerKind::HostClock,
            multiply_add: gemv_backend::MultiplyAdd::Fused,
        }
    }

    fn compute_capability(&self) -> Option<(i32, i32)> {
        Some(self.capability)
    }

    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
        let Some(index) = gemv_core::kernel_in_module(module, name) else { return KernelHandle::NONE };
        match self.emulated_name(&gemv_core::KERNELS[index]) {
            Some(emulated) if Self::has_kernel(&emulated) => KernelHandle::for_name(name),
            _ => KernelHandle::NONE,
        }
    }

    gemv_backend::delegate_buffers_to_host_memory!(memory);

    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let spec = resolved_spec(NAME, kernel)?;
        let shape = args.validate(spec)?;
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let grid = grid_size(NAME, spec, n, self.multiprocessors)?;
        let emulated = self.emulated_name(spec).ok_or(Error::UnresolvedKernel { raw: 0, backend: NAME })?;
        self.memory.with_launch_addresses(args, |at| {
            let regions = [
                Region { name: c"x", base: at.x, len: args.x_read().len, writable: false },
                Region { name: c"packed", base: at.packed, len: n * k / 2, writable: false },
                Region { name: c"scales", base: at.scales, len: n * k / 16, writable: false },
                Region { name: c"y", base: at.y, len: args.y_written().len, writable: true },
            ];
            // SAFETY: `with_launch_addresses` checked each range against its live buffer and holds
            // the memory locked while this runs, so each region is valid for its length; `validate`
            // proved y's written rows overlap no input.
            unsafe {
                self.run(
                    &emulated,
                    grid,
                    THREADS_PER_BLOCK,
                    &regions,
                    args.global_scale,
                    m,
                    n,
                    k,
                    (args.x_row_stride, args.y_row_stride, args.y_format),
                )
            }
        })??;
        tracing::trace!(kernel = emulated, m, n, k, "emulated launch");
        Ok(())
    }

    fn launch_grouped(&self, args: &GroupedArgs) -> Result<()> {
        args.validate()?;
        let fast_available = self.emulated_entry(gemv_core::FAST_MODULE_NAME, "").is_some();
        let spec = args.kernel(fast_available)?;
        let pairs = args.m * args.top_k;
        let grid = grouped_grid_size(NAME, spec, pairs, args.n)?;
        let emulated = self
            .emulated_entry(spec.module, spec.name)
            .ok_or(Error::Unsupported { backend: NAME, what: "grouped launches below sm_75" })?;
        let (experts, n, k) = (args.experts, args.n, args.k);
        self.memory.with_grouped_addresses(args, |at| {
            let regions = [
                Region { name: c"x", base: at.x, len: args.x_read().len, writable: false },
                Region { name: c"packed", base: at.packed, len: experts * n * k / 2, writable: false },
                Region { name: c"scales", base: at.scales, len: experts * n * k / 16, writable: false },
                Region { name: c"y", base: at.y, len: args.y_written().len, writable: true },
                Region { name: c"global_scales", base: at.global_scales, len: args.global_scales.len, writable: false },
                Region { name: c"routing", base: at.routing, len: args.routing_read().len, writable: false },
            ];
            let launch = ffi::EmuArgs {
                x: at.x.cast(),
                packed: at.packed,
                scales: at.scales,
                y: at.y.cast(),
                global_scale: 0.0,
                m: kernel_int(NAME, "M", args.m)?,
                n: kernel_int(NAME, "N", n)?,
                k: kernel_int(NAME, "K", k)?,
                x_stride: kernel_int(NAME, "K", k)?,
                y_stride: kernel_int(NAME, "N", n)?,
                y_f32: 0,
                global_scales: at.global_scales.cast(),
                per_expert_scales: c_int::from(args.per_expert_global_scales()),
                routing: at.routing.cast(),
                experts: kernel_int(NAME, "experts", experts)?,
                pairs: kernel_int(NAME, "pairs", pairs)?,
                top_k: kernel_int(NAME, "top-k", args.top_k)?,
            };
            // SAFETY: `with_grouped_addresses` checked each range against its live buffer and
            // holds the memory locked while this runs, so each region is valid for its length;
            // `validate` proved Y overlaps no input.
            unsafe { self.run_args(&emulated, grid, THREADS_PER_BLOCK, &regions, &launch) }
        })??;
        tracing::trace!(kernel = emulated, m = args.m, top_k = args.top_k, n, k, experts, "emulated grouped launch");
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
