//! The kernel registry and tier tables (docs/tiers.md), as data.
//!
//! Widths 5, 6 and 7 exist because a batch kernel skips a row beyond M but still issues its
//! instructions: M = 5 on the 8-wide tier would pay for three absent rows, so the selector takes
//! the narrowest tier that covers M (docs/tiers.md has the measurements behind this).

use crate::Family;

/// The module every backend registers the exact family's kernels under.
pub const MODULE_NAME: &str = "w4a16_gemv";
/// The module of the fast (tensor-core) family: CUDA only, a second PTX module targeting sm_80.
pub const FAST_MODULE_NAME: &str = "w4a16_fast";

/// One kernel of the registry: its name (the same on every backend) and the rows it handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSpec {
    /// Entry point name.
    pub name: &'static str,
    /// The module that holds it ([`MODULE_NAME`] or [`FAST_MODULE_NAME`]).
    pub module: &'static str,
    /// What it computes, hence what it promises.
    pub family: Family,
    /// Largest M one launch may carry.
    pub max_m: usize,
    /// Weight rows one warp (CUDA) or workgroup (WGSL) computes, each activation load reused for
    /// all of them: as many as the accumulators (rows x 2 x M per lane) leave registers for. The
    /// register-tiled `batch8_rt2` carries 4 rows where the classic `batch8` carries 2. A fast
    /// kernel's block computes 16 rows with its 8 warps splitting K: 2 rows per warp's share.
    pub rows: usize,
    /// Resident 256-thread blocks per SM the CUDA kernel's registers must allow (the second
    /// argument of its `__launch_bounds__`): 1 allows 255 registers a thread, 2 128, 3 80, 4 64.
    pub cuda_min_blocks: usize,
    /// The CUDA exact kernel's weight pipeline: 0 for the classic one (X staged per pass, the next
    /// pass's weights in registers, the one after prefetched into L2); `d >= 2` for the ring
    /// pipeline, `d` passes of weights in a register ring and X staged once per segment of passes
    /// (docs/kernels.md). Ring kernels compute the same bits and are in no tier: candidates the
    /// tuned table may put on a width of a device ([`crate::DeviceTuning::kernels`]). 0 for the
    /// fast family.
    pub ring_depth: usize,
    /// Whether the CUDA grid is persistent: sized from the device (SMs times `cuda_min_blocks`,
    /// capped by the work) rather than from N, its warps walking groups of `rows` rows so that
    /// every SM streams the same bytes, give or take one group. Ring kernels only.
    pub persistent: bool,
}

const fn exact(name: &'static str, max_m: usize, rows: usize, cuda_min_blocks: usize) -> KernelSpec {
    ring(name, (max_m, rows, cuda_min_blocks), 0, false)
}

/// An exact kernel of the ring pipeline: `(max_m, rows, cuda_min_blocks)` as for [`exact`], the
/// ring's depth (0: the classic pipeline, which [`exact`] builds) and whether its grid is
/// persistent.
const fn ring(name: &'static str, geometry: (usize, usize, usize), depth: usize, persistent: bool) -> KernelSpec {
    let (max_m, rows, cuda_min_blocks) = geometry;
    KernelSpec {
        name,
        module: MODULE_NAME,
        family: Family::Exact,
        max_m,
        rows,
        cuda_min_blocks,
        ring_depth: depth,
        persistent,
    }
}

const fn fast(name: &'static str, max_m: usize) -> KernelSpec {
    KernelSpec {
        name,
        module: FAST_MODULE_NAME,
        family: Family::Fast,
        max_m,
        rows: 2,
        cuda_min_blocks: 2,
        ring_depth: 0,
        persistent: false,
    }
}

/// Every kernel, the same names on every backend that has its family. The CUDA sources' entry
/// list (kernels/cuda/kernel_table.h) is generated from it by `cargo xtask kernels`.
///
/// Up to 8 tokens four rows per warp share each activation load and staging (`batch8` keeps two;
/// `batch16` and `batch32`, whose accumulators fill the registers, one). At 1 token four rows fit
/// 128 registers (two blocks per SM); from 2 tokens the tiers take one block per SM (255
/// registers) to keep four rows (docs/kernels.md).
///
/// The ring kernels (`*_ring{depth}_r{rows}_b{blocks}`, `_p` for a persistent grid) are the ring
/// pipeline's variants of the 1-, 2- and 4-token kernels, in no tier; the tuned table may serve a
/// width with one on a device where it is faster ([`crate::device_tuning`]).
pub const KERNELS: [KernelSpec; 21] = [
    exact("w4a16_gemv", 1, 4, 2),
    exact("w4a16_gemv_batch2", 2, 4, 1),
    exact("w4a16_gemv_batch3", 3, 4, 1),
    exact("w4a16_gemv_batch4", 4, 4, 1),
    exact("w4a16_gemv_batch5", 5, 4, 1),
    exact("w4a16_gemv_batch6", 6, 4, 1),
    exact("w4a16_gemv_batch7", 7, 4, 1),
    exact("w4a16_gemv_batch8", 8, 2, 1),
    exact("w4a16_gemv_batch8_rt2", 8, 4, 1),
    exact("w4a16_gemv_batch16", 16, 1, 2),
    exact("w4a16_gemv_batch32", 32, 1, 1),
    ring("w4a16_gemv_ring3_r4_b2", (1, 4, 2), 3, false),
    ring("w4a16_gemv_ring2_r4_b2", (1, 4, 2), 2, false),
    ring("w4a16_gemv_ring2_r2_b3", (1, 2, 3), 2, false),
    ring("w4a16_gemv_batch2_ring3_r2_b2", (2, 2, 2), 3, false),
    ring("w4a16_gemv_batch4_ring2_r2_b2", (4, 2, 2), 2, false),
    ring("w4a16_gemv_ring3_r4_b2_p", (1, 4, 2), 3, true),
    ring("w4a16_gemv_batch2_ring3_r2_b2_p", (2, 2, 2), 3, true),
    ring("w4a16_gemv_batch4_ring2_r2_b2_p", (4, 2, 2), 2, true),
    fast("w4a16_fast_m8", 8),
    fast("w4a16_fast_m16", 16),
];

/// The kernels of one family, in registry order.
pub fn family_kernels(family: Family) -> impl Iterator<Item = &'static KernelSpec> {
    KERNELS.iter().filter(move |spec| spec.family == family)
}

/// Looks a kernel up by name: the one lookup every backend uses.
pub fn kernel_spec(name: &str) -> Option<&'static KernelSpec> {
    kernel_index(name).map(|index| &KERNELS[index])
}

/// The position of a kernel in [`KERNELS`], by name.
pub fn kernel_index(name: &str) -> Option<usize> {
    KERNELS.iter().position(|spec| spec.name == name)
}

/// The position of a kernel in [`KERNELS`] if it lives in `module`: what a backend's
/// `lookup_kernel(module, name)` resolves (a name under the wrong module resolves nothing).
pub fn kernel_in_module(module: &str, name: &str) -> Option<usize> {
    kernel_index(name).filter(|&index| KERNELS[index].module == module)
}

/// One dispatch width: the kernel that serves it and when it may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tier {
    /// Rows one launch covers.
    pub width: usize,
    /// The classic kernel.
    pub kernel: &'static str,
    /// A bit-identical register-tiled variant preferred unless its kill switch is set.
    pub register_tiled: Option<&'static str>,
    /// Only dispatched when exact-M tiers are enabled.
    pub exact_m_only: bool,
}

impl Tier {
    /// The kernel this tier resolves to under `switches`.
    pub fn kernel_name(&self, switches: crate::KillSwitches) -> &'static str {
        match self.register_tiled {
            Some(variant) if switches.batch8_register_tiled => variant,
            _ => self.kernel,
        }
    }

    /// Whether this tier may be dispatched under `exact_m`.
    pub fn allowed(&self, exact_m: bool) -> bool {
        exact_m || !self.exact_m_only
    }
}

const fn tier(width: usize, kernel: &'static str, register_tiled: Option<&'static str>, exact_m_only: bool) -> Tier {
    Tier { width, kernel, register_tiled, exact_m_only }
}

/// Every dispatch width, narrowest first. The dispatch plan draws from all of them.
pub const TIERS: [Tier; 10] = [
    tier(1, "w4a16_gemv", None, false),
    tier(2, "w4a16_gemv_batch2", None, false),
    tier(3, "w4a16_gemv_batch3", None, false),
    tier(4, "w4a16_gemv_batch4", None, false),
    tier(5, "w4a16_gemv_batch5", None, true),
    tier(6, "w4a16_gemv_batch6", None, true),
    tier(7, "w4a16_gemv_batch7", None, true),
    tier(8, "w4a16_gemv_batch8", Some("w4a16_gemv_batch8_rt2"), false),
    tier(16, "w4a16_gemv_batch16", None, false),
    tier(32, "w4a16_gemv_batch32", None, false),
];

/// The fast family's dispatch widths, narrowest first: one or two 8-token mma tiles.
pub const FAST_TIERS: [Tier; 2] = [tier(8, "w4a16_fast_m8", None, false), tier(16, "w4a16_fast_m16", None, false)];

/// The tier table of `family`: [`TIERS`] or [`FAST_TIERS`] (a [`crate::Launch`]'s `tier` indexes it).
pub fn family_tiers(family: Family) -> &'static [Tier] {
    match family {
        Family::Exact => &TIERS,
        Family::Fast => &FAST_TIERS,
    }
}

/// The widest tier. A dispatch plan capped at this width may use every tier; callers that accept
/// any width pass it rather than a literal.
pub const WIDEST_TIER: usize = TIERS[TIERS.len() - 1].width;

/// The batch tiers of widths 4 to 8 as a range of [`TIERS`]. The wide tiers 16 and 32 are
/// deliberately outside it, so call sites capped at 8 are never widened silently.
pub const BATCH4_TO_8: std::ops::Range<usize> = 3..8;

/// The batch tiers of widths 4 to 8, narrowest first.
pub fn batch4_to_8() -> &'static [Tier] {
    &TIERS[BATCH4_TO_8]
}

/// The one tier decision: the narrowest of `tiers` (narrowest first) that covers `m`, is allowed
/// (widths 5, 6, 7 only when `exact_m`) and is `available` (by index). `None` for `m == 0` and
/// when no such tier exists. [`select_tier`] and the dispatch plan both decide through it.
pub fn narrowest_tier(tiers: &[Tier], m: usize, available: impl Fn(usize) -> bool, exact_m: bool) -> Option<usize> {
    if m == 0 {
        return None;
    }
    tiers.iter().enumerate().position(|(index, tier)| tier.width >= m && tier.allowed(exact_m) && available(index))
}

/// Picks the narrowest batch tier of widths 4 to 8 (index into [`batch4_to_8`]) that covers `m`, whose
/// kernel is `present[index]`, and that is allowed (widths 5, 6, 7 only when `exact_m`).
///
/// `None` for `m == 0`, for `m` beyond every present allowed width, and when nothing is present:
/// the caller then falls back. A missing tier falls to the next wider one (bit-identical, slower).
pub fn select_tier(m: usize, present: &[bool], exact_m: bool) -> Option<usize> {
    narrowest_tier(batch4_to_8(), m, |index| present.get(index).copied().unwrap_or(false), exact_m)
}
