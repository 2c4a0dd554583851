//! The kernel registry and tier tables (docs/tiers.md), as data.
//!
//! Why exact-M tiers: on the seed's sm_121 part (273 GB/s, N = K = 5120, cold weights) the batch
//! kernels are issue-bound, and a dead row (`t >= M`) skips its work but not its instructions
//! (~80 SASS instructions per row):
//!
//! | tier   | M | time     | eff BW      | % peak |
//! |--------|---|----------|-------------|--------|
//! | batch4 | 4 | 70.5 us  | 209.2 GB/s  | 76.6%  |
//! | batch8 | 4 | 74.8 us  | 197.3 GB/s  | 72.3%  |
//! | batch8 | 5 | 89.0 us  | 165.7 GB/s  | 60.7%  |
//! | batch8 | 6 | 91.5 us  | 161.2 GB/s  | 59.0%  |
//! | batch8 | 8 | 106.4 us | 138.5 GB/s  | 50.7%  |
//!
//! So M = 5 on the 8-wide tier pays for three absent rows; widths 5, 6, 7 remove that cost and
//! the selector always takes the narrowest tier that covers M.

/// The module every backend registers its kernels under.
pub const MODULE_NAME: &str = "w4a16_gemv";

/// One kernel of the registry: its name (the same on every backend) and the rows it handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSpec {
    /// Entry point name.
    pub name: &'static str,
    /// Largest M one launch may carry.
    pub max_m: usize,
    /// Weight rows one warp (CUDA) or workgroup (WGSL) computes, each activation load reused for
    /// all of them: as many as the accumulators (rows x 2 x M per lane) leave registers for. The
    /// register-tiled `batch8_rt2` carries 4 rows where the classic `batch8` carries 2.
    pub rows: usize,
}

/// Every kernel, the same names on every backend.
pub const KERNELS: [KernelSpec; 11] = [
    KernelSpec { name: "w4a16_gemv", max_m: 1, rows: 4 },
    KernelSpec { name: "w4a16_gemv_batch2", max_m: 2, rows: 3 },
    KernelSpec { name: "w4a16_gemv_batch3", max_m: 3, rows: 2 },
    KernelSpec { name: "w4a16_gemv_batch4", max_m: 4, rows: 2 },
    KernelSpec { name: "w4a16_gemv_batch5", max_m: 5, rows: 2 },
    KernelSpec { name: "w4a16_gemv_batch6", max_m: 6, rows: 2 },
    KernelSpec { name: "w4a16_gemv_batch7", max_m: 7, rows: 2 },
    KernelSpec { name: "w4a16_gemv_batch8", max_m: 8, rows: 2 },
    KernelSpec { name: "w4a16_gemv_batch8_rt2", max_m: 8, rows: 4 },
    KernelSpec { name: "w4a16_gemv_batch16", max_m: 16, rows: 1 },
    KernelSpec { name: "w4a16_gemv_batch32", max_m: 32, rows: 1 },
];

/// Looks a kernel up by name: the one lookup every backend uses.
pub fn kernel_spec(name: &str) -> Option<&'static KernelSpec> {
    kernel_index(name).map(|index| &KERNELS[index])
}

/// The position of a kernel in [`KERNELS`], by name.
pub fn kernel_index(name: &str) -> Option<usize> {
    KERNELS.iter().position(|spec| spec.name == name)
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

/// The widest tier. A dispatch plan capped at this width may use every tier; callers that accept
/// any width pass it rather than a literal.
pub const WIDEST_TIER: usize = TIERS[TIERS.len() - 1].width;

/// The batchm family (widths 4, 5, 6, 7, 8) as a range of [`TIERS`]. The wide tiers 16 and 32 are
/// deliberately outside it, so call sites capped at 8 are never widened silently.
pub const BATCHM_FAMILY: std::ops::Range<usize> = 3..8;

/// The batchm family's tiers, narrowest first.
pub fn batchm_family() -> &'static [Tier] {
    &TIERS[BATCHM_FAMILY]
}

/// Picks the narrowest batchm-family tier (index into [`batchm_family`]) that covers `m`, whose
/// kernel is `present[index]`, and that is allowed (widths 5, 6, 7 only when `exact_m`).
///
/// `None` for `m == 0`, for `m` beyond every present allowed width, and when nothing is present:
/// the caller then falls back. A missing tier falls to the next wider one (bit-identical, slower).
pub fn select_tier(m: usize, present: &[bool], exact_m: bool) -> Option<usize> {
    if m == 0 {
        return None;
    }
    batchm_family()
        .iter()
        .enumerate()
        .find(|(index, tier)| tier.width >= m && tier.allowed(exact_m) && present.get(*index).copied().unwrap_or(false))
        .map(|(index, _)| index)
}
