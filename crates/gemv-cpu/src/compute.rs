//! One launch on the CPU: transpose X once, split the rows over the pool's threads in tiles, run
//! the row kernel for each tile and the shared tree for each batch of tiles, write Y.

use crate::activations::TransposedX;
use crate::kernels::{TILE_ROWS, finish_outputs, finish_width, row_tile, tile_rows};
use crate::lines::Lines;
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

/// Tiles whose outputs are finished together: the fewest whose `tile * m` outputs fill whole
/// vectors of the finish (at M = 1 on AVX-512, four tiles of four rows).
fn tiles_per_batch(path: SimdPath, tile: usize, m: usize) -> usize {
    let (mut a, mut b) = (tile * m, finish_width(path));
    let width = b;
    while b != 0 {
        (a, b) = (b, a % b);
    }
    // a = gcd(tile * m, width) (tile * m >= 1).
    width / a
}

/// Computes `Y [m][n]` bf16 bits on `pool` (whose workers run with exact float modes).
pub(crate) fn gemv(path: SimdPath, pool: &rayon::ThreadPool, launch: &Launch<'_>) -> Vec<u16> {
    let (m, n, k) = (launch.m, launch.n, launch.k);
    let xt = TransposedX::new(launch.x, m, k, path.width());
    let threads = pool.current_num_threads().clamp(1, n.div_ceil(ROWS_PER_THREAD_MIN).max(1));
    let tile = tile_rows(path);
    let batch_rows = tile * tiles_per_batch(path, tile, m);
    let chunks = if threads == 1 { 1 } else { threads * CHUNKS_PER_THREAD };
    let rows_per_thread = n.div_ceil(chunks).max(ROWS_PER_THREAD_MIN).next_multiple_of(batch_rows);
    let (row_bytes, row_groups) = (k / 2, k / GROUP_SIZE);
    let mut y = vec![0u16; m * n];
    // Each run of rows writes its columns of every token's row of Y.
    let mut runs: Vec<Vec<&mut [u16]>> = (0..n.div_ceil(rows_per_thread)).map(|_| Vec::with_capacity(m)).collect();
    for token_row in y.chunks_mut(n) {
        for (run, columns) in runs.iter_mut().zip(token_row.chunks_mut(rows_per_thread)) {
            run.push(columns);
        }
    }
    pool.scope(|scope| {
        for (chunk, mut columns) in runs.into_iter().enumerate() {
            let xt = &xt;
            scope.spawn(move |_| {
                let mut partials = Lines::zeroed(batch_rows * m * PARTIALS);
                let mut finished = vec![0u16; batch_rows * m];
                let first_row = chunk * rows_per_thread;
                let chunk_rows = columns.first().map_or(0, |token| token.len());
                for batch_first in (0..chunk_rows).step_by(batch_rows) {
                    let batch = batch_rows.min(chunk_rows - batch_first);
                    partials.fill(0.0);
                    for (index, tile_first) in (batch_first..batch_first + batch).step_by(tile).enumerate() {
                        let (first, rows) = (first_row + tile_first, tile.min(batch_first + batch - tile_first));
                        row_tile(
                            path,
                            &launch.packed[first * row_bytes..(first + rows) * row_bytes],
                            &launch.scales[first * row_groups..(first + rows) * row_groups],
                            rows,
                            xt,
                            &mut partials[index * tile * m * PARTIALS..(index + 1) * tile * m * PARTIALS],
                        );
                    }
                    // By row then token, as the partials are.
                    let finished = &mut finished[..batch * m];
                    finish_outputs(path, &mut partials, launch.global_scale, finished);
                    for (row, values) in finished.chunks_exact(m).enumerate() {
                        for (t, &value) in values.iter().enumerate() {
                            columns[t][batch_first + row] = value;
                        }
                    }
                }
            });
        }
    });
    y
}
