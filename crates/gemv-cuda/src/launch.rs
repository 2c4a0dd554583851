//! Launch geometry, shared by the real driver and the emulator: 256 threads (8 warps) per block,
//! `KernelSpec::rows` weight rows per warp (1 to 4, by tier), which the kernels read from the
//! same registry (kernels/cuda/kernel_table.h is generated from it). The block size must equal the kernels' declared
//! launch bound (`.maxntid` in the PTX); tests compare the two.

use gemv_core::KernelSpec;

/// Threads per block (`gemv::kThreadsPerBlock` in the kernel source): gemv-core's warps per block.
pub const THREADS_PER_BLOCK: u32 = WARPS_PER_BLOCK * 32;
const WARPS_PER_BLOCK: u32 = gemv_core::WARPS_PER_BLOCK as u32;
/// The most blocks a one-dimensional CUDA grid may have (`gridDim.x <= 2^31 - 1`).
pub const MAX_GRID_BLOCKS: u64 = (1 << 31) - 1;

/// Weight rows one warp computes (the registry's `rows`).
pub fn rows_per_warp(kernel: &KernelSpec) -> u32 {
    kernel.rows as u32
}

/// Blocks for `n` weight rows on a device of `multiprocessors` SMs, or
/// [`gemv_backend::Error::LimitExceeded`] past the grid limit: one block per 8 warps' rows, and for
/// a persistent kernel ([`KernelSpec::persistent`]) at most `cuda_min_blocks` per SM, which its
/// warps walk the rows from (every resident block streams to the end).
pub fn grid_size(
    backend: &'static str,
    kernel: &KernelSpec,
    n: usize,
    multiprocessors: u32,
) -> gemv_backend::Result<u32> {
    let rows_per_block = u64::from(WARPS_PER_BLOCK * rows_per_warp(kernel));
    let mut blocks = (n as u64).div_ceil(rows_per_block);
    if kernel.persistent {
        blocks = blocks.min(u64::from(multiprocessors.max(1)) * kernel.cuda_min_blocks as u64);
    }
    if blocks > MAX_GRID_BLOCKS {
        return Err(gemv_backend::Error::LimitExceeded {
            backend,
            what: format!("the grid for N = {n} rows of {}", kernel.name),
            requested: blocks,
            limit: MAX_GRID_BLOCKS,
            unit: "blocks",
        });
    }
    Ok(blocks as u32)
}

/// Blocks of a grouped launch of `pairs` (token, slot) pairs over experts of `n` rows: one row
/// block (8 warps' rows) of every pair (only the blocks of the pairs that start a chunk of their
/// expert's pairs compute; the others return at once), or
/// [`gemv_backend::Error::LimitExceeded`] past the grid limit or past
/// [`gemv_core::MAX_GROUPED_PAIRS`] pairs.
pub fn grouped_grid_size(
    backend: &'static str,
    kernel: &gemv_core::GroupedKernelSpec,
    pairs: usize,
    n: usize,
) -> gemv_backend::Result<u32> {
    if pairs > gemv_core::MAX_GROUPED_PAIRS {
        return Err(gemv_backend::Error::LimitExceeded {
            backend,
            what: "a grouped launch's (token, slot) pairs".to_string(),
            requested: pairs as u64,
            limit: gemv_core::MAX_GROUPED_PAIRS as u64,
            unit: "pairs",
        });
    }
    let row_blocks = (n as u64).div_ceil(u64::from(WARPS_PER_BLOCK) * kernel.rows as u64);
    let blocks = row_blocks * pairs as u64;
    if blocks > MAX_GRID_BLOCKS {
        return Err(gemv_backend::Error::LimitExceeded {
            backend,
            what: format!("the grid for {pairs} pairs of N = {n} rows of {}", kernel.name),
            requested: blocks,
            limit: MAX_GRID_BLOCKS,
            unit: "blocks",
        });
    }
    Ok(blocks as u32)
}

/// A size as the kernels' 32-bit `int` parameter, or [`gemv_backend::Error::LimitExceeded`].
pub fn kernel_int(backend: &'static str, what: &str, value: usize) -> gemv_backend::Result<i32> {
    i32::try_from(value).map_err(|_| gemv_backend::Error::LimitExceeded {
        backend,
        what: format!("{what} (a 32-bit kernel parameter)"),
        requested: value as u64,
        limit: i32::MAX as u64,
        unit: "elements",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemv_core::kernel_spec;

    #[test]
    fn grids_cover_every_row_and_refuse_to_overflow() {
        let single = kernel_spec("w4a16_gemv").expect("registry");
        let tiled = kernel_spec("w4a16_gemv_batch8_rt2").expect("registry");
        let per_block = |spec: &gemv_core::KernelSpec| (THREADS_PER_BLOCK / 32) as usize * spec.rows;
        for spec in [single, tiled] {
            let rows = per_block(spec);
            assert_eq!(grid_size("t", spec, 1, 132).ok(), Some(1));
            assert_eq!(grid_size("t", spec, rows, 132).ok(), Some(1));
            assert_eq!(grid_size("t", spec, rows + 1, 132).ok(), Some(2));
        }
        // The largest N the 32-bit kernel parameter allows fits the grid comfortably.
        assert!(grid_size("t", single, i32::MAX as usize, 132).is_ok());
        let rows = (MAX_GRID_BLOCKS as usize + 1) * per_block(single);
        match grid_size("t", single, rows, 132) {
            Err(error @ gemv_backend::Error::LimitExceeded { requested, limit, unit: "blocks", .. }) => {
                assert_eq!((requested, limit), (MAX_GRID_BLOCKS + 1, MAX_GRID_BLOCKS));
                assert!(
                    error.to_string().ends_with(&format!("needs {requested} blocks, over the limit of {limit} blocks"))
                );
            }
            other => panic!("expected LimitExceeded, got {other:?}"),
        }
    }

    #[test]
    fn a_grouped_grid_has_a_row_block_of_every_pair_and_a_pair_limit() {
        let spec = &gemv_core::GROUPED_KERNELS[0];
        let per_block = (THREADS_PER_BLOCK / 32) as usize * spec.rows;
        assert_eq!(grouped_grid_size("t", spec, 8, per_block).ok(), Some(8));
        assert_eq!(grouped_grid_size("t", spec, 8, per_block + 1).ok(), Some(16));
        let over = grouped_grid_size("t", spec, gemv_core::MAX_GROUPED_PAIRS + 1, 1);
        assert!(matches!(over, Err(gemv_backend::Error::LimitExceeded { unit: "pairs", .. })), "{over:?}");
    }

    #[test]
    fn a_persistent_grid_is_capped_by_the_device_and_never_exceeds_the_rows() {
        let persistent = gemv_core::KERNELS.iter().find(|spec| spec.persistent).expect("a persistent kernel");
        let per_block = (THREADS_PER_BLOCK / 32) as usize * persistent.rows;
        let resident = 132 * persistent.cuda_min_blocks as u32;
        assert_eq!(grid_size("t", persistent, 1, 132).ok(), Some(1));
        assert_eq!(grid_size("t", persistent, per_block * 10 + 1, 132).ok(), Some(11));
        assert_eq!(grid_size("t", persistent, 17408, 132).ok(), Some(resident));
        assert_eq!(grid_size("t", persistent, i32::MAX as usize, 132).ok(), Some(resident));
        // An SM count of zero (an unknown device) still launches.
        assert_eq!(grid_size("t", persistent, 17408, 0).ok(), Some(persistent.cuda_min_blocks as u32));
    }
}
