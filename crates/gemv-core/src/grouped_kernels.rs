//! The grouped kernels (a routed mixture-of-experts layer in one launch, docs/kernels.md) and the
//! one decision of which serves a launch. The exact family's kernels run its ring pipeline (the
//! exact module and builds; wgpu specialises its shader from them), the fast family's its
//! tensor-core tile (the fast module, sm_80+).

use crate::{FAST_MODULE_NAME, Family, MODULE_NAME};

/// One grouped kernel: its family's pipeline over every pair routed to an expert, its pairs
/// computed `max_m` at a time. The fields mean what [`crate::KernelSpec`]'s do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupedKernelSpec {
    /// Entry point name, in [`Self::module`].
    pub name: &'static str,
    /// The module that holds it ([`MODULE_NAME`] or [`FAST_MODULE_NAME`]).
    pub module: &'static str,
    /// What it computes: each pair's output is its expert's single launch's in this family.
    pub family: Family,
    /// Pairs of one expert computed at once (an expert with more runs several chunks).
    pub max_m: usize,
    /// Weight rows one warp computes.
    pub rows: usize,
    /// Resident 256-thread blocks per SM the registers must allow.
    pub cuda_min_blocks: usize,
    /// Passes of weights in the exact family's ring (at least 2); 0 for the fast family.
    pub ring_depth: usize,
}

const fn grouped(
    name: &'static str,
    max_m: usize,
    rows: usize,
    cuda_min_blocks: usize,
    ring_depth: usize,
) -> GroupedKernelSpec {
    GroupedKernelSpec { name, module: MODULE_NAME, family: Family::Exact, max_m, rows, cuda_min_blocks, ring_depth }
}

/// A fast grouped kernel: `tiles` 8-token mma tiles, the block's 16 rows over its 8 warps (2 a
/// warp), as the fast family's single kernels.
const fn fast_grouped(name: &'static str, tiles: usize, cuda_min_blocks: usize) -> GroupedKernelSpec {
    GroupedKernelSpec {
        name,
        module: FAST_MODULE_NAME,
        family: Family::Fast,
        max_m: 8 * tiles,
        rows: 2,
        cuda_min_blocks,
        ring_depth: 0,
    }
}

/// Every grouped kernel, each family's narrowest first. The CUDA sources' lists
/// (`GEMV_GROUPED_KERNELS` and `GEMV_FAST_GROUPED_KERNELS` in kernels/cuda/kernel_table.h) are
/// generated from it by `cargo xtask kernels`.
pub const GROUPED_KERNELS: [GroupedKernelSpec; 6] = [
    grouped("w4a16_grouped_ring3_r2_b2", 1, 2, 2, 3),
    grouped("w4a16_grouped_batch2_ring3_r2_b2", 2, 2, 2, 3),
    grouped("w4a16_grouped_batch4_ring2_r2_b1", 4, 2, 1, 2),
    grouped("w4a16_grouped_batch8_ring2_r2_b1", 8, 2, 1, 2),
    fast_grouped("w4a16_fast_grouped_m8", 1, 2),
    // Two tiles beside the grouped bookkeeping need more than 128 registers (4 to 72 bytes
    // spilled at 2 blocks per SM, sm_80 to sm_121): one block per SM.
    fast_grouped("w4a16_fast_grouped_m16", 2, 1),
];

/// The most (token, slot) pairs one grouped launch may carry (the kernels list an expert's pairs
/// in shared memory).
pub const MAX_GROUPED_PAIRS: usize = 1024;

/// The grouped kernel of `family` for `m` tokens routed to `top_k` of `experts` each: the
/// family's narrowest whose width covers the pairs a touched expert has on average under a
/// uniform routing ([`crate::expected_pairs_per_expert`], rounded up), else its widest. An expert
/// with more pairs than the width runs them in several chunks, so every routing is served and a
/// family's kernels give the same bits; the width decides only speed. It follows the pairs, not
/// M: sixteen tokens on 8 of 256 experts give a touched expert 1.25 pairs, which a 2-wide kernel
/// streams in one chunk at its two blocks per SM, where an 8-wide one would keep one block per SM
/// of lanes mostly idle (docs/model.md compares every width).
pub fn grouped_kernel(family: Family, m: usize, top_k: usize, experts: usize) -> &'static GroupedKernelSpec {
    let pairs = crate::expected_pairs_per_expert(experts, top_k, m);
    let mut chosen = &GROUPED_KERNELS[0];
    // The family's kernels, narrowest first: the first that covers `pairs`, else the last.
    for spec in GROUPED_KERNELS.iter().filter(|spec| spec.family == family) {
        chosen = spec;
        if spec.max_m as f64 >= pairs - 1e-9 {
            break;
        }
    }
    chosen
}

/// Looks a grouped kernel up by name.
pub fn grouped_kernel_spec(name: &str) -> Option<&'static GroupedKernelSpec> {
    GROUPED_KERNELS.iter().find(|spec| spec.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_narrowest_kernel_covering_an_experts_pairs_serves_a_launch_and_the_widest_the_rest() {
        // Every token on every expert (top-k = E): M pairs each.
        let exact = |m| grouped_kernel(Family::Exact, m, 4, 4).max_m;
        assert_eq!([1, 2, 3, 8, 16].map(exact), [1, 2, 4, 8, 8]);
        let fast = |m| grouped_kernel(Family::Fast, m, 4, 4).max_m;
        assert_eq!([1, 8, 9, 16, 40].map(fast), [8, 8, 16, 16, 16]);
        // Routed layers: DeepSeek-V3 (8 of 256) gives at most 1.25 pairs an expert up to M = 16,
        // eight experts of top 2 four pairs at M = 16.
        let deepseek = |m| grouped_kernel(Family::Exact, m, 8, 256).max_m;
        assert_eq!([1, 2, 4, 8, 16].map(deepseek), [1, 2, 2, 2, 2]);
        assert_eq!(grouped_kernel(Family::Exact, 16, 2, 8).max_m, 8);
        assert_eq!(grouped_kernel(Family::Exact, 3, 2, 8).max_m, 2);
        assert_eq!(grouped_kernel(Family::Fast, 16, 8, 256).max_m, 8);
        for family in [Family::Exact, Family::Fast] {
            let widths: Vec<usize> =
                GROUPED_KERNELS.iter().filter(|spec| spec.family == family).map(|spec| spec.max_m).collect();
            assert!(widths.windows(2).all(|pair| pair[0] < pair[1]), "{family:?}: {widths:?}");
            assert!((1..=64).all(|m| grouped_kernel(family, m, 2, 8).family == family));
        }
        for spec in GROUPED_KERNELS {
            assert!(crate::kernel_spec(spec.name).is_none(), "{} is also a single kernel", spec.name);
            match spec.family {
                Family::Exact => assert!(spec.ring_depth >= 2 && spec.module == MODULE_NAME),
                Family::Fast => assert!(spec.ring_depth == 0 && spec.module == FAST_MODULE_NAME && spec.rows == 2),
            }
        }
        assert_eq!(grouped_kernel_spec("w4a16_grouped_ring3_r2_b2"), Some(&GROUPED_KERNELS[0]));
    }
}
