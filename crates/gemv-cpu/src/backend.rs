//! [`CpuBackend`]: buffers in host memory, launches computed by the SIMD row kernels.

use crate::compute::{Launch, gemv};
use crate::simd::{SIMD_VARIABLE, SimdPath, exact_float_mode};
use gemv_backend::{
    AlignedBytes, DeviceInfo, DeviceKind, Error, GemvArgs, GpuBackend, HostMemory, KernelHandle, Result, TimerKind,
    resolved_spec,
};
use gemv_core::{MODULE_NAME, host_threads};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const NAME: &str = "cpu";

/// The exact contract on the CPU with SIMD and threads. Every kernel of the registry is present
/// (the CPU has no tiers: one code path serves any M, the tiers only split M as they do on a GPU).
///
/// Launches run on the backend's own pool of `threads` worker threads, started at the first
/// launch and kept until the backend is dropped: starting threads per launch cost about 30 us each
/// on the 2-core CI machine, a tenth of a small launch.
#[derive(Debug)]
pub struct CpuBackend {
    memory: HostMemory,
    path: SimdPath,
    threads: usize,
    pool: OnceLock<rayon::ThreadPool>,
}

impl CpuBackend {
    /// The fastest path this CPU supports, or the one `GEMV_CPU_SIMD` names; all host threads.
    /// A named path the CPU lacks, or an unknown name, is [`Error::Unavailable`].
    pub fn new() -> Result<Self> {
        match std::env::var(SIMD_VARIABLE) {
            Ok(name) => {
                let path = SimdPath::from_name(&name).ok_or_else(|| Error::Unavailable {
                    backend: NAME,
                    reason: format!("{SIMD_VARIABLE}={name:?} is not a SIMD path (portable, avx2, avx512)"),
                })?;
                Self::with_path(path)
            }
            Err(_) => Self::with_path(SimdPath::best()),
        }
    }

    /// Runs on `path`; [`Error::Unavailable`] when this CPU lacks its instructions.
    pub fn with_path(path: SimdPath) -> Result<Self> {
        if !path.is_supported() {
            return Err(Error::Unavailable {
                backend: NAME,
                reason: format!("this CPU does not support the {} path", path.name()),
            });
        }
        tracing::debug!(path = path.name(), "cpu backend");
        Ok(Self { memory: HostMemory::new(NAME), path, threads: host_threads(), pool: OnceLock::new() })
    }

    /// Uses `threads` worker threads (results are identical for any count).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self.pool = OnceLock::new();
        self
    }

    /// The worker pool, started on first use; every worker first clears the flush-to-zero modes.
    fn pool(&self) -> Result<&rayon::ThreadPool> {
        if let Some(pool) = self.pool.get() {
            return Ok(pool);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.threads)
            .thread_name(|index| format!("gemv-cpu-{index}"))
            .start_handler(|_| exact_float_mode())
            .build()
            .map_err(|error| Error::Unavailable {
                backend: NAME,
                reason: format!("starting {} worker threads: {error}", self.threads),
            })?;
        Ok(self.pool.get_or_init(|| pool))
    }

    /// The SIMD path the row kernels run on.
    pub fn path(&self) -> SimdPath {
        self.path
    }
}

impl GpuBackend for CpuBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: NAME,
            name: format!("host CPU ({}, {} threads)", self.path.name(), self.threads),
            architecture: std::env::consts::ARCH.to_string(),
            kind: DeviceKind::Cpu,
            peak_bandwidth_gbps: None,
            timer: TimerKind::HostClock,
            multiply_add: gemv_backend::MultiplyAdd::Fused,
        }
    }

    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
        // The exact family only: this backend computes the exact contract.
        match gemv_core::kernel_in_module(module, name) {
            Some(_) if module == MODULE_NAME => KernelHandle::for_name(name),
            _ => KernelHandle::NONE,
        }
    }

    gemv_backend::delegate_buffers_to_host_memory!(memory);

    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let spec = resolved_spec(NAME, kernel)?;
        let shape = args.validate(spec)?;
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let pool = self.pool()?;
        let y = self.memory.with_launch_inputs(args, |inputs| {
            let launch = Launch {
                packed: inputs.packed,
                scales: inputs.scales,
                x: &inputs.x,
                global_scale: args.global_scale,
                m,
                n,
                k,
            };
            gemv(self.path, pool, &launch)
        })?;
        self.memory.write_y_rows(args, &y)?;
        tracing::trace!(kernel = spec.name, m, n, k, path = self.path.name(), "cpu launch");
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    /// A host memory copy on the backend's threads, through buffers of at least 128 MB so the
    /// copy streams memory rather than cache (the reference `gemv bench`'s "% copy" is read
    /// against); the median of at least five timed passes, scaled to `bytes * repeats`. (One
    /// average over all passes moved by tens of percent between runs on a shared machine.)
    fn time_device_copy(&self, bytes: usize, repeats: usize) -> Result<Option<Duration>> {
        const COLD_BYTES: usize = 256 << 20;
        const PASSES_MIN: usize = 5;
        let size = bytes.max(COLD_BYTES / 2);
        // Allocated like the weights (huge pages where the system offers them), so the two
        // streams meet the same page-table costs.
        let mut source = AlignedBytes::zeroed(size);
        source.fill(1);
        let mut target = AlignedBytes::zeroed(size);
        let chunk = size.div_ceil(self.threads);
        let copy = |target: &mut [u8]| {
            std::thread::scope(|scope| {
                for (from, to) in source.chunks(chunk).zip(target.chunks_mut(chunk)) {
                    scope.spawn(move || to.copy_from_slice(from));
                }
            })
        };
        copy(&mut target);
        let passes = (bytes * repeats.max(1)).div_ceil(size).max(PASSES_MIN);
        let mut times: Vec<f64> = (0..passes)
            .map(|_| {
                let start = Instant::now();
                copy(&mut target);
                start.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let per_byte = times[passes / 2] / size as f64;
        std::hint::black_box(&target);
        Ok(Some(Duration::from_secs_f64(per_byte * (bytes * repeats) as f64)))
    }
}
