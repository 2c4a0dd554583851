//! [`CpuBackend`]: buffers in host memory, launches computed by the tile kernels over the
//! weights' CPU arrangement.

use crate::arrangements::{Arranged, Arrangements, Source};
use crate::calibration::{Calibration, ForcedBy, PathSelection, calibrated_path, calibration, calibrations};
use crate::compute::{Threads, gemv};
use crate::simd::{SIMD_VARIABLE, SimdPath, exact_float_mode};
use crate::weights::CpuWeights;
use gemv_backend::{
    BufferRange, DeviceBuffer, DeviceInfo, DeviceKind, Error, GemvArgs, GpuBackend, GroupedArgs, HostMemory,
    KernelHandle, Result, TimerKind, bf16_y_only, resolved_spec,
};
use gemv_core::{
    Bf16Element, GemvCall, KillSwitches, MODULE_NAME, Operand, bf16_bits, bf16_bits_mut, host_threads, select_family,
};
use std::sync::{Mutex, OnceLock};

#[cfg(feature = "bench")]
mod bench_timers;
mod grouped;

const NAME: &str = "cpu";

/// The exact contract on the CPU with SIMD and threads. Every kernel of the registry is present
/// (the CPU has no tiers: one code path serves any M, the tiers only split M as they do on a GPU).
///
/// Weights run from the CPU's own arrangement of them: an engine makes it once with
/// [`CpuWeights::new`] and launches with [`CpuBackend::gemv`]; a launch through
/// [`GpuBackend::launch_gemv`] names raw buffer ranges, and the backend arranges each range at
/// its first launch and keeps that (beside the raw bytes) until the range is written or its
/// buffer freed.
///
/// Launches run on the calling thread and `threads - 1` workers of the backend's own, started at
/// the first launch and stopped when the backend is dropped; between launches the workers spin
/// for half a millisecond, then sleep (docs/cpu.md).
pub struct CpuBackend {
    memory: HostMemory,
    selection: PathSelection,
    threads: usize,
    /// The team launches run on, started at the first.
    team: OnceLock<Threads>,
    /// Held by every write and every launch, so an arrangement is never made from bytes a write
    /// is changing, nor used after they changed.
    arrangements: Mutex<Arrangements>,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("selection", &self.selection)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl CpuBackend {
    /// The path `GEMV_CPU_SIMD` names, or else each token count on the path found fastest on
    /// this CPU ([`CpuBackend::calibrated`]); all host threads. A named path the CPU lacks, or an
    /// unknown name, is [`Error::Unavailable`].
    pub fn new() -> Result<Self> {
        match std::env::var(SIMD_VARIABLE) {
            Ok(name) => {
                let path = SimdPath::from_name(&name).ok_or_else(|| Error::Unavailable {
                    backend: NAME,
                    reason: format!("{SIMD_VARIABLE}={name:?} is not a SIMD path ({})", SimdPath::names()),
                })?;
                Self::forced(path, ForcedBy::Environment)
            }
            Err(_) => Ok(Self::calibrated()),
        }
    }

    /// Each token count M on the path that was fastest on this CPU: the first launch of M in
    /// the process times every path the CPU supports on a slice of its own weights (of a sample
    /// matrix where they are too small to say much; a few milliseconds, on the calling thread)
    /// and keeps the fastest for the process; launches of
    /// more than [`CALIBRATED_TOKENS`](crate::CALIBRATED_TOKENS) tokens use that count's choice.
    /// Every path writes the same bits, so the choice changes only the time. Ignores
    /// `GEMV_CPU_SIMD`.
    pub fn calibrated() -> Self {
        Self::with_selection(PathSelection::Calibrated)
    }

    /// Runs every launch on `path`; [`Error::Unavailable`] when this CPU lacks its instructions.
    pub fn with_path(path: SimdPath) -> Result<Self> {
        Self::forced(path, ForcedBy::Caller)
    }

    fn forced(path: SimdPath, by: ForcedBy) -> Result<Self> {
        if let Some(reason) = path.unsupported_reason() {
            return Err(Error::Unavailable { backend: NAME, reason });
        }
        Ok(Self::with_selection(PathSelection::Forced { path, by }))
    }

    fn with_selection(selection: PathSelection) -> Self {
        tracing::debug!(%selection, "cpu backend");
        Self {
            memory: HostMemory::new(NAME),
            selection,
            threads: host_threads(),
            team: OnceLock::new(),
            arrangements: Mutex::new(Arrangements::default()),
        }
    }

    /// Uses `threads` threads, the caller included (results are identical for any count).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self.team = OnceLock::new();
        self
    }

    /// The team, started on first use; every worker first clears the flush-to-zero modes (the
    /// caller's share runs with them cleared too, and restored after).
    fn team(&self) -> Result<&Threads> {
        if let Some(threads) = self.team.get() {
            return Ok(threads);
        }
        let threads = Threads::new(self.threads, exact_float_mode).map_err(|error| Error::Unavailable {
            backend: NAME,
            reason: format!("starting {} worker threads: {error}", self.threads - 1),
        })?;
        Ok(self.team.get_or_init(|| threads))
    }

    /// How this backend picks a launch's SIMD path.
    pub fn selection(&self) -> PathSelection {
        self.selection
    }

    /// The path a launch of `m` tokens over `weights` runs on: the forced one, or the calibrated
    /// one (calibrated now, as a launch would, if M has not been yet). A launch whose activations the
    /// pair kernel cannot take runs the AVX-512F kernel instead (docs/cpu.md).
    pub fn path_for(&self, weights: &CpuWeights, m: usize) -> SimdPath {
        self.launch_path(weights.arranged(), m)
    }

    /// The calibration launches of `m` tokens use, made now (on a sample matrix) where the
    /// process has none yet; `None` for a forced backend.
    pub fn calibrate(&self, m: usize) -> Option<Calibration> {
        match self.selection {
            PathSelection::Calibrated => Some(calibration(m)),
            PathSelection::Forced { .. } => None,
        }
    }

    /// The calibrations this process has made (empty for a forced backend), by token count.
    pub fn calibrations(&self) -> Vec<Calibration> {
        match self.selection {
            PathSelection::Calibrated => calibrations(),
            PathSelection::Forced { .. } => Vec::new(),
        }
    }

    fn launch_path(&self, weights: &Arranged, m: usize) -> SimdPath {
        match self.selection {
            PathSelection::Forced { path, .. } => path,
            PathSelection::Calibrated => calibrated_path(weights, m),
        }
    }

    /// `call` over caller-owned slices of bf16 (`half::bf16` or `u16` bits): `y[t] = W x[t]` for
    /// its M tokens, `x` row t at element `t * x_row_stride` (K each), `y` row t at
    /// `t * y_row_stride` (N each; nothing else is written). This backend computes the exact
    /// family: `FamilyChoice::Fast` is refused, `Auto` is exact. Validated first (the call against
    /// the weights, both slices' lengths, the family): on an error nothing is written.
    pub fn gemv<T: Bf16Element>(&self, weights: &CpuWeights, x: &[T], y: &mut [T], call: &GemvCall) -> Result<()> {
        let (x, y) = (bf16_bits(x), bf16_bits_mut(y));
        let launch = call.shape(weights.n(), weights.k())?;
        launch.check_operand(Operand::X, 0, 2 * x.len())?;
        launch.check_operand(Operand::Y, 0, 2 * y.len())?;
        let m = call.m();
        select_family(call.family(), false, KillSwitches::process(), gemv_core::Family::Exact)?;
        let threads = self.team()?;
        let path = self.launch_path(weights.arranged(), m);
        let (x_stride, y_stride) = (launch.x_row_stride(), launch.y_row_stride());
        gemv(path, threads, weights.arranged(), weights.global_scale(), (x, x_stride), (y, y_stride), m);
        Ok(())
    }

    fn arrangements(&self) -> std::sync::MutexGuard<'_, Arrangements> {
        // A panic while the lock was held left no arrangement half made (entries are inserted
        // whole), so the map is still sound.
        self.arrangements.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl GpuBackend for CpuBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: NAME,
            name: format!("host CPU ({}, {} threads)", self.selection, self.threads),
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

    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.memory.alloc(bytes)
    }

    fn free(&self, buffer: DeviceBuffer) -> Result<()> {
        let mut arrangements = self.arrangements();
        self.memory.free(buffer)?;
        arrangements.forget_buffer(buffer.id());
        Ok(())
    }

    fn upload(&self, dst: BufferRange, data: &[u8]) -> Result<()> {
        let mut arrangements = self.arrangements();
        self.memory.upload(dst, data)?;
        arrangements.forget_overlapping(&dst);
        Ok(())
    }

    fn download(&self, src: BufferRange, out: &mut [u8]) -> Result<()> {
        self.memory.download(src, out)
    }

    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let spec = resolved_spec(NAME, kernel)?;
        let shape = args.validate(spec)?;
        bf16_y_only(NAME, args.y_format)?;
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let mut arrangements = self.arrangements();
        let source = Source { packed: args.packed_read(), scales: args.scales_read(), n, k };
        let (arranged, x) = self.memory.with_launch_inputs(args, |inputs| {
            let arranged = arrangements.get_or_make(source, || Arranged::new(inputs.packed, inputs.scales, n, k));
            (arranged, inputs.x)
        })?;
        // The engine path, over the staged rows: every gate through the trait exercises it.
        let mut y = vec![0u16; m * n];
        self.gemv(&CpuWeights::shared(arranged, args.global_scale), &x, &mut y, &GemvCall::new(m))?;
        self.memory.write_y_rows(args, &y)?;
        arrangements.forget_overlapping(&args.y_written());
        tracing::trace!(kernel = spec.name, m, n, k, selection = %self.selection, "cpu launch");
        Ok(())
    }

    fn launch_grouped(&self, args: &GroupedArgs) -> Result<()> {
        self.launch_grouped_from_memory(args)
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
