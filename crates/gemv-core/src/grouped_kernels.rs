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
    /// Whether [`grouped_kernel`] may choose it. The exact family's 4- and 8-wide kernels serve
    /// only where a caller forces them (`GroupedArgs::with_kernel`, the bench's
    /// `--grouped-kernel`): the time model fitted to the measurements predicts them slower than
    /// the 2-wide kernel's chunks on every preset layer (docs/model.md, modelled), so they stay as
    /// the device sweep's arms until a measurement says otherwise.
    pub selectable: bool,
}

/// An exact grouped kernel: `(max_m, rows, cuda_min_blocks, ring_depth)` as the fields mean.
const fn grouped(name: &'static str, geometry: (usize, usize, usize, usize), selectable: bool) -> GroupedKernelSpec {
    let (max_m, rows, cuda_min_blocks, ring_depth) = geometry;
    let family = Family::Exact;
    GroupedKernelSpec { name, module: MODULE_NAME, family, max_m, rows, cuda_min_blocks, ring_depth, selectable }
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
        selectable: true,
    }
}

/// Every grouped kernel, each family's narrowest first. The CUDA sources' lists
/// (`GEMV_GROUPED_KERNELS` and `GEMV_FAST_GROUPED_KERNELS` in kernels/cuda/kernel_table.h) are
/// generated from it by `cargo xtask kernels`.
pub const GROUPED_KERNELS: [GroupedKernelSpec; 6] = [
    grouped("w4a16_grouped_ring3_r2_b2", (1, 2, 2, 3), true),
    grouped("w4a16_grouped_batch2_ring3_r2_b2", (2, 2, 2, 3), true),
    // One row a warp at two blocks per SM: a four-pass ring (48 rows in flight) fits in 128
    // registers, where two rows at depth 3 spill.
    grouped("w4a16_grouped_batch4_ring4_r1_b2", (4, 1, 2, 4), false),
    // No 8-wide ring at two blocks per SM fits in 128 registers (12 to 136 bytes spilled at depth
    // 3, one row, sm_80 to sm_121): one block per SM.
    grouped("w4a16_grouped_batch8_ring2_r2_b1", (8, 2, 1, 2), false),
    fast_grouped("w4a16_fast_grouped_m8", 1, 2),
    // Two tiles fit in 128 registers beside the grouped bookkeeping of one chunk a block (127 on
    // sm_90, no spills, sm_80 to sm_121): two blocks per SM.
    fast_grouped("w4a16_fast_grouped_m16", 2, 2),
];

/// The most (token, slot) pairs one grouped launch may carry: every block of a CUDA grouped
/// kernel ranks its pair by reading the routing before it (at most four loads a thread here).
pub const MAX_GROUPED_PAIRS: usize = 1024;

impl GroupedKernelSpec {
    /// Weight rows an SM of the exact family keeps in flight, each one pass of 1,024 weights:
    /// the rows a warp streams x the passes its ring holds ahead (depth - 1) x the warps of the
    /// resident blocks. The grouped kernels are latency-bound, so a chunk of an expert's pairs
    /// streams in a time inversely proportional to it. 0 in the fast family (no ring).
    pub const fn rows_in_flight_per_sm(&self) -> usize {
        self.rows * self.ring_depth.saturating_sub(1) * self.cuda_min_blocks * WARPS_PER_BLOCK
    }
}

/// Warps in a block of every CUDA kernel (256 threads): the launchers' block size and the
/// kernels' row geometry both follow from it.
pub const WARPS_PER_BLOCK: usize = 8;

/// The grouped kernel of `family` for `m` tokens routed to `top_k` of `experts` each, given the
/// pairs a touched expert has on average under a uniform routing
/// ([`crate::expected_pairs_per_expert`], `p`). An expert with more pairs than a kernel's width
/// runs them in several chunks, so every kernel serves every routing and a family's kernels give
/// the same bits; the choice decides only speed:
/// - exact family: the kernel that streams an expert's ceil(p / width) chunks soonest, chunks
///   over [`GroupedKernelSpec::rows_in_flight_per_sm`] (the narrowest on a tie), among its
///   [`GroupedKernelSpec::selectable`] kernels (the 1- and 2-wide, 64 rows in flight each; the
///   4-wide keeps 48 and the 8-wide 16, and both are predicted slower, docs/model.md);
/// - fast family: the narrowest whose width covers `p`, else the widest.
pub fn grouped_kernel(family: Family, m: usize, top_k: usize, experts: usize) -> &'static GroupedKernelSpec {
    let pairs = crate::expected_pairs_per_expert(experts, top_k, m);
    choose(&GROUPED_KERNELS, family, pairs).unwrap_or(&GROUPED_KERNELS[0])
}

/// [`grouped_kernel`]'s rule over `kernels` (each family's narrowest first) for `pairs` pairs an
/// expert; `None` where `family` has none.
fn choose(kernels: &[GroupedKernelSpec], family: Family, pairs: f64) -> Option<&GroupedKernelSpec> {
    let chunks = |spec: &GroupedKernelSpec| (pairs / spec.max_m as f64 - 1e-9).ceil().max(1.0);
    let better = |spec: &GroupedKernelSpec, chosen: &GroupedKernelSpec| match family {
        Family::Exact => {
            chunks(spec) * (chosen.rows_in_flight_per_sm() as f64)
                < chunks(chosen) * (spec.rows_in_flight_per_sm() as f64) - 1e-9
        }
        // Move on while the narrower one falls short of the pairs.
        Family::Fast => (chosen.max_m as f64) < pairs - 1e-9,
    };
    kernels
        .iter()
        .filter(|spec| spec.family == family && spec.selectable)
        .reduce(|chosen, spec| if better(spec, chosen) { spec } else { chosen })
}

/// Looks a grouped kernel up by name.
pub fn grouped_kernel_spec(name: &str) -> Option<&'static GroupedKernelSpec> {
    GROUPED_KERNELS.iter().find(|spec| spec.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_kernel_streaming_an_experts_chunks_soonest_serves_and_the_fast_family_the_narrowest_covering() {
        // Every token on every expert (top-k = E): M pairs each. The 4- and 8-wide exact kernels
        // are not selectable, so the 2-wide one serves from two pairs on.
        let exact = |m| grouped_kernel(Family::Exact, m, 4, 4).max_m;
        assert_eq!([1, 2, 3, 8, 16].map(exact), [1, 2, 2, 2, 2]);
        let fast = |m| grouped_kernel(Family::Fast, m, 4, 4).max_m;
        assert_eq!([1, 8, 9, 16, 40].map(fast), [8, 8, 16, 16, 16]);
        // Routed layers: DeepSeek-V3 (8 of 256) gives at most 1.25 pairs an expert up to M = 16,
        // Mixtral (2 of 8) four at M = 16.
        let deepseek = |m| grouped_kernel(Family::Exact, m, 8, 256).max_m;
        assert_eq!([1, 2, 4, 8, 16].map(deepseek), [1, 2, 2, 2, 2]);
        let mixtral = |m| grouped_kernel(Family::Exact, m, 2, 8).max_m;
        assert_eq!([1, 2, 4, 8, 16].map(mixtral), [1, 2, 2, 2, 2]);
        assert_eq!(grouped_kernel(Family::Fast, 16, 2, 8).max_m, 8);
        assert_eq!(grouped_kernel(Family::Fast, 16, 8, 256).max_m, 8);
        // A 4-wide kernel keeping as many rows in flight as the 2-wide one would serve four pairs
        // in one chunk where the 2-wide needs two; at two pairs it would not.
        let [one, two, ..] = GROUPED_KERNELS;
        let four = GroupedKernelSpec { name: "four", max_m: 4, ..two };
        let table = [one, two, four];
        assert_eq!(choose(&table, Family::Exact, 4.0).map(|s| s.max_m), Some(4));
        let unselectable = [one, two, GroupedKernelSpec { selectable: false, ..four }];
        assert_eq!(choose(&unselectable, Family::Exact, 4.0).map(|s| s.max_m), Some(2));
        // The registry's 4-wide kernel, were it selectable, would serve three and four pairs.
        let registry_four = GroupedKernelSpec { selectable: true, ..GROUPED_KERNELS[2] };
        assert_eq!(choose(&[one, two, registry_four], Family::Exact, 3.0).map(|s| s.max_m), Some(4));
        assert_eq!(choose(&table, Family::Exact, 2.0).map(|s| s.max_m), Some(2));
        assert_eq!(choose(&table, Family::Exact, 1.0).map(|s| s.max_m), Some(1));
        assert_eq!(choose(&table, Family::Fast, 1.0), None);
        let in_flight = GROUPED_KERNELS.map(|spec| spec.rows_in_flight_per_sm());
        assert_eq!(in_flight, [64, 64, 48, 16, 0, 0]);
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
