//! One launch on the CPU: transpose X once, split the rows over the pool's threads in tiles, run
//! the row kernel and the shared tree for each tile, write Y.

use crate::activations::TransposedX;
use crate::kernels::{TILE_ROWS, finish, row_tile, tile_rows};
use crate::simd::SimdPath;
use gemv_core::{GROUP_SIZE, PARTIALS};

/// The weights and activations of one launch, borrowed in place.
pub(crate) struct Launch<'a> {
    pub packed: &'a [u8],
    pub scales: &'a [u8],
    pub x: &'a [u16],
    pub global_scale: f32,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

/// Rows below which one thread does the whole launch (thread start-up would dominate).
const ROWS_PER_THREAD_MIN: usize = 4 * TILE_ROWS;

/// Runs of rows per thread: the pool hands them out as threads come free, so a thread slowed by
/// the rest of the machine does not hold up the launch.
const CHUNKS_PER_THREAD: usize = 8;

/// Computes `Y [m][n]` bf16 bits on `pool` (whose workers run with exact float modes).
pub(crate) fn gemv(path: SimdPath, pool: &rayon::ThreadPool, launch: &Launch<'_>) -> Vec<u16> {
    let (m, n, k) = (launch.m, launch.n, launch.k);
    let xt = TransposedX::new(launch.x, m, k, path.width());
    let threads = pool.current_num_threads().clamp(1, n.div_ceil(ROWS_PER_THREAD_MIN).max(1));
    let tile = tile_rows(path);
    let chunks = if threads == 1 { 1 } else { threads * CHUNKS_PER_THREAD };
    let rows_per_thread = n.div_ceil(chunks).max(ROWS_PER_THREAD_MIN).next_multiple_of(tile);
    let (row_bytes, row_groups) = (k / 2, k / GROUP_SIZE);
    // [n][m]: each thread owns a contiguous run of rows.
    let mut by_row = vec![0u16; n * m];
    pool.scope(|scope| {
        for (chunk, out) in by_row.chunks_mut(rows_per_thread * m).enumerate() {
            let xt = &xt;
            scope.spawn(move |_| {
                let mut partials = vec![0f32; tile * m * PARTIALS];
                let first_row = chunk * rows_per_thread;
                for (index, out) in out.chunks_mut(tile * m).enumerate() {
                    let (first, rows) = (first_row + index * tile, out.len() / m);
                    partials.fill(0.0);
                    row_tile(
                        path,
                        &launch.packed[first * row_bytes..(first + rows) * row_bytes],
                        &launch.scales[first * row_groups..(first + rows) * row_groups],
                        rows,
                        xt,
                        &mut partials,
                    );
                    for (value, partials) in out.iter_mut().zip(partials.chunks_mut(PARTIALS)) {
                        *value = finish(partials, launch.global_scale);
                    }
                }
            });
        }
    });
    let mut y = vec![0u16; m * n];
    for (r, values) in by_row.chunks(m).enumerate() {
        for (t, &v) in values.iter().enumerate() {
            y[t * n + r] = v;
        }
    }
    y
}
