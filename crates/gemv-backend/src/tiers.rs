//! The resolved tier table: each width's handle on one backend, resolved once.
//!
//! Resolving never fails: a kernel the backend lacks is a zero handle. Width 8 resolves
//! `batch8_rt2` unless `GEMV_NO_BATCH8_RT` (then, or when rt2 is missing, classic `batch8`). The
//! decision itself lives in gemv-core ([`select_tier`], [`dispatch_plan`], [`select_family`]);
//! this only binds it. The fast family's tiers ([`FAST_TIERS`]) resolve where the backend has
//! them (CUDA sm_80+, the emulator) and are zero handles elsewhere.

use crate::{GpuBackend, KernelHandle};
use gemv_core::{
    BATCH4_TO_8, FAST_TIERS, Family, FamilyChoice, GemvCall, KillSwitches, Launch, MODULE_NAME, TIERS, TierMask,
    WIDEST_TIER, dispatch_plan, fast_dispatch_plan, kernel_spec, select_family, select_tier,
};

/// One launch of a call's plan, bound to this backend: the kernel that runs it and the rows of
/// X and Y it covers ([`Launch`]; its `tier` indexes the family's tier table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedLaunch {
    /// The kernel (resolved: a plan only uses present tiers).
    pub kernel: KernelHandle,
    /// Its rows.
    pub launch: Launch,
}

/// One backend's handles for every width of [`TIERS`] and of [`FAST_TIERS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedTiers {
    handles: [KernelHandle; TIERS.len()],
    fast: [KernelHandle; FAST_TIERS.len()],
    switches: KillSwitches,
}

impl ResolvedTiers {
    /// Looks every tier up on `backend` under `switches`.
    pub fn resolve(backend: &dyn GpuBackend, switches: KillSwitches) -> Self {
        Self::resolve_with(backend.name(), |module, name| backend.lookup_kernel(module, name), switches)
    }

    /// Looks every tier up with `lookup` (module, kernel name -> handle) under `switches`: for an
    /// engine path that holds its kernels without a [`GpuBackend`] (CUDA's `CudaKernels`).
    pub fn resolve_with(backend: &str, lookup: impl Fn(&str, &str) -> KernelHandle, switches: KillSwitches) -> Self {
        let handles = std::array::from_fn(|index| {
            let tier = TIERS[index];
            let preferred = lookup(MODULE_NAME, tier.kernel_name(switches));
            if preferred.is_resolved() { preferred } else { lookup(MODULE_NAME, tier.kernel) }
        });
        let fast = std::array::from_fn(|index| {
            kernel_spec(FAST_TIERS[index].kernel).map_or(KernelHandle::NONE, |spec| lookup(spec.module, spec.name))
        });
        let resolved = Self { handles, fast, switches };
        tracing::debug!(backend, present = resolved.present().bits(), "tiers resolved");
        resolved
    }

    /// The switches it was resolved under.
    pub fn switches(&self) -> KillSwitches {
        self.switches
    }

    /// The handle of `TIERS[index]` (NONE when absent or out of range).
    pub fn handle(&self, index: usize) -> KernelHandle {
        self.handles.get(index).copied().unwrap_or(KernelHandle::NONE)
    }

    /// Which tiers resolved.
    pub fn present(&self) -> TierMask {
        (0..TIERS.len()).filter(|&i| self.handles[i].is_resolved()).fold(TierMask::NONE, TierMask::with)
    }

    fn batch_tier_index(&self, m: usize) -> Option<usize> {
        let present: Vec<bool> = self.handles[BATCH4_TO_8].iter().map(|h| h.is_resolved()).collect();
        select_tier(m, &present, self.switches.exact_m_tiers).map(|i| BATCH4_TO_8.start + i)
    }

    /// The batch kernel (widths 4 to 8) for `m` (zero handle when nothing covers m).
    pub fn kernel(&self, m: usize) -> KernelHandle {
        self.batch_tier_index(m).map_or(KernelHandle::NONE, |index| self.handles[index])
    }

    /// The width (4 to 8) the batch tiers dispatch `m` on.
    pub fn width(&self, m: usize) -> Option<usize> {
        let width = self.batch_tier_index(m).map(|index| TIERS[index].width);
        tracing::trace!(m, ?width, "tier chosen");
        width
    }

    /// Whether batch4 resolved: can this build do NVFP4 batched decode at all.
    pub fn has_batch4(&self) -> bool {
        self.handles[BATCH4_TO_8.start].is_resolved()
    }

    /// A dispatch plan for any `m` within `width_cap` over the present tiers.
    pub fn plan(&self, m: usize, width_cap: usize) -> gemv_core::Result<Vec<Launch>> {
        dispatch_plan(m, width_cap, self.present(), self.switches.exact_m_tiers)
    }

    /// The handle of `FAST_TIERS[index]` (NONE when absent or out of range).
    pub fn fast_handle(&self, index: usize) -> KernelHandle {
        self.fast.get(index).copied().unwrap_or(KernelHandle::NONE)
    }

    /// Which fast tiers resolved (bit i = `FAST_TIERS[i]`).
    pub fn fast_present(&self) -> TierMask {
        (0..FAST_TIERS.len()).filter(|&i| self.fast[i].is_resolved()).fold(TierMask::NONE, TierMask::with)
    }

    /// A fast-family dispatch plan for any `m` (indices into [`FAST_TIERS`]).
    pub fn fast_plan(&self, m: usize) -> gemv_core::Result<Vec<Launch>> {
        fast_dispatch_plan(m, self.fast_present())
    }

    /// Every launch of `call` on this backend: the family its policy picks here, then that
    /// family's dispatch plan for its M (the exact family's tiers up to [`WIDEST_TIER`]), each
    /// launch with its kernel. The one place an engine path turns a call into kernels.
    pub fn plan_call(&self, call: &GemvCall) -> gemv_core::Result<Vec<PlannedLaunch>> {
        let m = call.m();
        let (plan, handles) = match self.family(m, call.family())? {
            Family::Exact => (self.plan(m, WIDEST_TIER)?, &self.handles[..]),
            Family::Fast => (self.fast_plan(m)?, &self.fast[..]),
        };
        Ok(plan.into_iter().map(|launch| PlannedLaunch { kernel: handles[launch.tier], launch }).collect())
    }

    /// The family that serves `m` on this backend for `choice` (the policy of
    /// [`select_family`], with the fast family available where every fast tier resolved).
    pub fn family(&self, m: usize, choice: FamilyChoice) -> gemv_core::Result<Family> {
        let available = self.fast.iter().all(|h| h.is_resolved());
        select_family(m, choice, available, self.switches)
    }
}
