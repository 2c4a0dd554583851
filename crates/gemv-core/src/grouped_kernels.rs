//! The grouped kernels (a routed mixture-of-experts layer in one launch, docs/kernels.md) and the
//! one decision of which serves a launch. CUDA only, the exact family's module and builds.

/// One grouped kernel: the exact family's ring pipeline over every pair routed to an expert, its
/// pairs computed `max_m` at a time. The fields mean what [`crate::KernelSpec`]'s do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupedKernelSpec {
    /// Entry point name, in module [`crate::MODULE_NAME`].
    pub name: &'static str,
    /// Pairs of one expert computed at once (an expert with more runs several chunks).
    pub max_m: usize,
    /// Weight rows one warp computes.
    pub rows: usize,
    /// Resident 256-thread blocks per SM the registers must allow.
    pub cuda_min_blocks: usize,
    /// Passes of weights in the ring (at least 2).
    pub ring_depth: usize,
}

const fn grouped(
    name: &'static str,
    max_m: usize,
    rows: usize,
    cuda_min_blocks: usize,
    ring_depth: usize,
) -> GroupedKernelSpec {
    GroupedKernelSpec { name, max_m, rows, cuda_min_blocks, ring_depth }
}

/// Every grouped kernel, narrowest first. The CUDA sources' list (`GEMV_GROUPED_KERNELS` in
/// kernels/cuda/kernel_table.h) is generated from it by `cargo xtask kernels`.
pub const GROUPED_KERNELS: [GroupedKernelSpec; 4] = [
    grouped("w4a16_grouped_ring3_r2_b2", 1, 2, 2, 3),
    grouped("w4a16_grouped_batch2_ring3_r2_b2", 2, 2, 2, 3),
    grouped("w4a16_grouped_batch4_ring2_r2_b1", 4, 2, 1, 2),
    grouped("w4a16_grouped_batch8_ring2_r2_b1", 8, 2, 1, 2),
];

/// The most (token, slot) pairs one grouped launch may carry (the kernels list an expert's pairs
/// in shared memory).
pub const MAX_GROUPED_PAIRS: usize = 1024;

/// The grouped kernel for a launch of `m` tokens: the narrowest whose width covers `m` (an expert
/// computes at most M pairs where no token repeats an id), else the widest, whose experts with
/// more pairs run them in several chunks. Every kernel gives the same bits.
pub fn grouped_kernel(m: usize) -> &'static GroupedKernelSpec {
    GROUPED_KERNELS.iter().find(|spec| spec.max_m >= m).unwrap_or(&GROUPED_KERNELS[GROUPED_KERNELS.len() - 1])
}

/// Looks a grouped kernel up by name.
pub fn grouped_kernel_spec(name: &str) -> Option<&'static GroupedKernelSpec> {
    GROUPED_KERNELS.iter().find(|spec| spec.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_narrowest_covering_kernel_serves_a_launch_and_the_widest_serves_the_rest() {
        assert_eq!(grouped_kernel(1).max_m, 1);
        assert_eq!(grouped_kernel(2).max_m, 2);
        assert_eq!(grouped_kernel(3).max_m, 4);
        assert_eq!(grouped_kernel(8).max_m, 8);
        assert_eq!(grouped_kernel(16).max_m, 8);
        assert!(GROUPED_KERNELS.windows(2).all(|pair| pair[0].max_m < pair[1].max_m));
        assert!(GROUPED_KERNELS.iter().all(|spec| spec.ring_depth >= 2 && crate::kernel_spec(spec.name).is_none()));
        assert_eq!(grouped_kernel_spec("w4a16_grouped_ring3_r2_b2"), Some(&GROUPED_KERNELS[0]));
    }
}
