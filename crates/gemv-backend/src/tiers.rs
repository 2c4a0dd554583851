//! The resolved tier table: each width's handle on one backend, resolved once.
//!
//! Resolving never fails: a kernel the backend lacks is a zero handle. Width 8 resolves
//! `batch8_rt2` unless `GEMV_NO_BATCH8_RT` (then, or when rt2 is missing, classic `batch8`). The
//! decision itself lives in gemv-core ([`select_tier`], [`dispatch_plan`], [`select_family`]);
//! this only binds it. The fast family's tiers ([`FAST_TIERS`]) resolve where the backend has
//! them (CUDA sm_80+, the emulator) and are zero handles elsewhere.
//!
//! On a device the tuned table knows ([`gemv_core::device_tuning`], by compute capability), a
//! width may resolve the table's kernel instead of the tier's own, a call's plan is the table's
//! where it has one for that M, and `Auto` takes the table's family; each falls back to the rule
//! where the table's choice is absent on the device or turned off by a kill switch.

use crate::{GpuBackend, KernelHandle};
use gemv_core::{
    BATCH4_TO_8, DeviceTuning, FAST_TIERS, Family, FamilyChoice, GemvCall, KERNELS, KillSwitches, Launch, MODULE_NAME,
    TIERS, TierMask, WIDEST_TIER, device_tuning, dispatch_plan, fast_dispatch_plan, kernel_spec, select_family,
    select_tier,
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
    tuning: Option<&'static DeviceTuning>,
}

impl ResolvedTiers {
    /// Looks every tier up on `backend` under `switches`, tuned for its compute capability.
    pub fn resolve(backend: &dyn GpuBackend, switches: KillSwitches) -> Self {
        Self::resolve_with(
            backend.name(),
            |module, name| backend.lookup_kernel(module, name),
            switches,
            backend.compute_capability(),
        )
    }

    /// Looks every tier up with `lookup` (module, kernel name -> handle) under `switches`, tuned
    /// for a device of `capability` (`None`: no tuning): for an engine path that holds its kernels
    /// without a [`GpuBackend`] (CUDA's `CudaKernels`).
    pub fn resolve_with(
        backend: &str,
        lookup: impl Fn(&str, &str) -> KernelHandle,
        switches: KillSwitches,
        capability: Option<(i32, i32)>,
    ) -> Self {
        let tuning = device_tuning(capability, switches);
        let handles = std::array::from_fn(|index| {
            let tier = TIERS[index];
            let tuned = tuning.and_then(|t| t.kernel_for_width(tier.width)).map(|name| lookup(MODULE_NAME, name));
            let preferred =
                tuned.filter(|h| h.is_resolved()).unwrap_or_else(|| lookup(MODULE_NAME, tier.kernel_name(switches)));
            if preferred.is_resolved() { preferred } else { lookup(MODULE_NAME, tier.kernel) }
        });
        let fast = std::array::from_fn(|index| {
            kernel_spec(FAST_TIERS[index].kernel).map_or(KernelHandle::NONE, |spec| lookup(spec.module, spec.name))
        });
        let resolved = Self { handles, fast, switches, tuning };
        tracing::debug!(
            backend,
            present = resolved.present().bits(),
            tuned = tuning.map(|t| t.device),
            "tiers resolved"
        );
        resolved
    }

    /// The tuned table's entry this table follows (`None`: the rule everywhere).
    pub fn tuning(&self) -> Option<&'static DeviceTuning> {
        self.tuning
    }

    /// The name of the kernel `TIERS[index]` (`family` exact) or `FAST_TIERS[index]` (fast)
    /// resolved to, `None` when absent.
    pub fn kernel_name(&self, family: Family, index: usize) -> Option<&'static str> {
        let handle = match family {
            Family::Exact => self.handle(index),
            Family::Fast => self.fast_handle(index),
        };
        handle.registry_index().map(|i| KERNELS[i].name)
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

    /// A dispatch plan for any `m` within `width_cap` over the present tiers: the tuned table's
    /// where it has a usable one, else the rule's.
    pub fn plan(&self, m: usize, width_cap: usize) -> gemv_core::Result<Vec<Launch>> {
        if let Some(plan) = self.tuning.and_then(|t| t.plan(Family::Exact, m, width_cap, self.present(), self.switches))
        {
            return Ok(plan);
        }
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

    /// A fast-family dispatch plan for any `m` (indices into [`FAST_TIERS`]): the tuned table's
    /// where it has a usable one, else the rule's.
    pub fn fast_plan(&self, m: usize) -> gemv_core::Result<Vec<Launch>> {
        let widest = FAST_TIERS[FAST_TIERS.len() - 1].width;
        if let Some(plan) =
            self.tuning.and_then(|t| t.plan(Family::Fast, m, widest, self.fast_present(), self.switches))
        {
            return Ok(plan);
        }
        fast_dispatch_plan(m, self.fast_present())
    }

    /// Every launch of `call` on this backend: the family its policy picks here, then that
    /// family's dispatch plan for its M (the exact family's tiers up to [`WIDEST_TIER`]), each
    /// launch with its kernel. The one place an engine path turns a call into kernels.
    pub fn plan_call(&self, call: &GemvCall) -> gemv_core::Result<Vec<PlannedLaunch>> {
        let m = call.m();
        let (plan, handles) = match self.family(call.family())? {
            Family::Exact => (self.plan(m, WIDEST_TIER)?, &self.handles[..]),
            Family::Fast => (self.fast_plan(m)?, &self.fast[..]),
        };
        Ok(plan.into_iter().map(|launch| PlannedLaunch { kernel: handles[launch.tier], launch }).collect())
    }

    /// The family that serves a call on this backend for `choice` (the policy of
    /// [`select_family`], with the fast family available where every fast tier resolved and
    /// `Auto` preferring the tuned table's family).
    pub fn family(&self, choice: FamilyChoice) -> gemv_core::Result<Family> {
        let available = self.fast.iter().all(|h| h.is_resolved());
        let preferred = self.tuning.map_or(Family::Exact, |t| t.auto_family);
        select_family(choice, available, self.switches, preferred)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resolves every registry kernel by name, as a backend holding the whole table does.
    fn everything(capability: Option<(i32, i32)>) -> ResolvedTiers {
        ResolvedTiers::resolve_with("test", |_, name| KernelHandle::for_name(name), KillSwitches::default(), capability)
    }

    #[test]
    fn kernel_names_are_those_of_the_resolved_handles() {
        let untuned = everything(None);
        assert!(untuned.tuning().is_none());
        for (index, tier) in TIERS.iter().enumerate() {
            assert_eq!(untuned.kernel_name(Family::Exact, index), Some(tier.kernel_name(KillSwitches::default())));
        }
        for (index, tier) in FAST_TIERS.iter().enumerate() {
            let spec = kernel_spec(tier.kernel).expect("every fast tier is in the registry");
            assert_eq!(untuned.fast_handle(index), KernelHandle::for_name(spec.name));
            assert_eq!(untuned.kernel_name(Family::Fast, index), Some(spec.name));
        }
        assert_eq!(untuned.fast_handle(FAST_TIERS.len()), KernelHandle::NONE);
        assert_eq!(untuned.kernel_name(Family::Fast, FAST_TIERS.len()), None);
        assert_eq!(untuned.kernel_name(Family::Exact, TIERS.len()), None);

        let nothing = ResolvedTiers::resolve_with("empty", |_, _| KernelHandle::NONE, KillSwitches::default(), None);
        assert_eq!(nothing.kernel_name(Family::Exact, 0), None);
        assert_eq!(nothing.kernel_name(Family::Fast, 0), None);
    }

    #[test]
    fn a_tuned_device_names_the_tables_kernels_and_family() {
        let tuning = device_tuning(Some((9, 0)), KillSwitches::default()).expect("sm_90 has a tuned entry");
        let tuned = everything(Some((9, 0)));
        assert_eq!(tuned.tuning().map(|t| t.capability), Some((9, 0)));
        let mut replaced = 0;
        for (index, tier) in TIERS.iter().enumerate() {
            let expected = tuning.kernel_for_width(tier.width).unwrap_or(tier.kernel_name(KillSwitches::default()));
            replaced += usize::from(expected != tier.kernel_name(KillSwitches::default()));
            assert_eq!(tuned.kernel_name(Family::Exact, index), Some(expected), "width {}", tier.width);
        }
        assert!(replaced > 0, "the sm_90 entry replaces at least one width's kernel");
        assert_eq!(tuned.family(FamilyChoice::Auto).ok(), Some(tuning.auto_family));
        assert_eq!(everything(None).family(FamilyChoice::Auto).ok(), Some(Family::Exact));
    }
}
