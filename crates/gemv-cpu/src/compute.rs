//! One launch on the CPU: widen X once, hand runs of tiles to the team's threads, run each tile's
//! passes (a few tokens each) and finish its outputs straight away, writing Y in place.

use crate::activations::Activations;
use crate::arrangements::Arranged;
use crate::kernels::{finish, tile_partials, tokens_per_pass};
use crate::layout::TILE_ROWS;
use crate::lines::Lines;
use crate::simd::{SimdPath, with_exact_float_mode};
use crate::team::Team;
use gemv_core::PARTIALS;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Tiles below which one thread does the whole launch (handing out work would dominate).
const TILES_PER_THREAD_MIN: usize = 4;

/// Runs of tiles per thread: threads take runs as they come free, so a thread slowed by the rest
/// of the machine does not hold up the launch.
const RUNS_PER_THREAD: usize = 8;

/// The most tokens a pass serves on any path.
const MOST_TOKENS: usize = 8;

/// Bytes ahead of the block being read that a kernel prefetches.
const PREFETCH_BYTES: usize = 8192;

/// Splits `m` tokens into passes of at most `most`, as even as possible (9 = 5 + 4, not 8 + 1).
fn passes(m: usize, most: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let count = m.div_ceil(most).max(1);
    (0..count).map(move |i| (i * m / count)..((i + 1) * m / count))
}

/// A thread's scratch: one pass's partial sums.
pub(crate) struct Scratch {
    partials: Lines,
}

impl Scratch {
    /// Scratch for one thread.
    pub(crate) fn new() -> Self {
        Self { partials: Lines::zeroed(MOST_TOKENS * PARTIALS * TILE_ROWS) }
    }
}

/// Computes `Y [m][n]` bf16 bits for `x: [m][k]` bf16 bits on `team`, thread `i` using
/// `scratch[i]`.
pub(crate) fn gemv(
    path: SimdPath,
    team: &Team,
    scratch: &[Mutex<Scratch>],
    weights: &Arranged,
    global_scale: f32,
    x: &[u16],
    m: usize,
) -> Vec<u16> {
    let geometry = &weights.geometry;
    let (n, k) = (geometry.n(), geometry.k());
    let activations = Activations::new(x, m, k, geometry.padded_k());
    let tiles = geometry.tiles();
    let threads = team.threads().clamp(1, tiles.div_ceil(TILES_PER_THREAD_MIN).max(1));
    let runs = if threads == 1 { 1 } else { threads * RUNS_PER_THREAD };
    let tiles_per_run = tiles.div_ceil(runs).max(TILES_PER_THREAD_MIN.min(tiles));
    let rows_per_run = tiles_per_run * TILE_ROWS;
    let mut y = vec![0u16; m * n];
    // Each run of tiles writes its columns of every token's row of Y.
    let mut columns: Vec<Vec<&mut [u16]>> = (0..n.div_ceil(rows_per_run)).map(|_| Vec::with_capacity(m)).collect();
    for token_row in y.chunks_mut(n) {
        for (run, run_columns) in columns.iter_mut().zip(token_row.chunks_mut(rows_per_run)) {
            run.push(run_columns);
        }
    }
    let columns: Vec<Mutex<Vec<&mut [u16]>>> = columns.into_iter().map(Mutex::new).collect();
    let most = tokens_per_pass(path).min(MOST_TOKENS);
    let (bytes, tile_bytes) = (&weights.bytes[..], geometry.tile_bytes());
    let next_run = AtomicUsize::new(0);
    let share = |index: usize| {
        if index >= threads {
            return;
        }
        let mut scratch = scratch[index].lock().unwrap_or_else(PoisonError::into_inner);
        let mut finished = [[0u16; TILE_ROWS]; MOST_TOKENS];
        loop {
            let run = next_run.fetch_add(1, Ordering::Relaxed);
            let Some(run_columns) = columns.get(run) else { break };
            let mut run_columns = run_columns.lock().unwrap_or_else(PoisonError::into_inner);
            let first_tile = run * tiles_per_run;
            let run_tiles = run_columns.first().map_or(0, |token| token.len().div_ceil(TILE_ROWS));
            for tile in first_tile..first_tile + run_tiles {
                let tile_data = &bytes[tile * tile_bytes..(tile + 1) * tile_bytes];
                let ahead = tile_data.as_ptr().wrapping_add(PREFETCH_BYTES);
                let column = (tile - first_tile) * TILE_ROWS;
                let rows = TILE_ROWS.min(n - tile * TILE_ROWS);
                for tokens in passes(m, most) {
                    let mut x: [&[f32]; MOST_TOKENS] = [&[]; MOST_TOKENS];
                    for (slot, t) in x.iter_mut().zip(tokens.clone()) {
                        *slot = activations.token(t);
                    }
                    let partials = &mut scratch.partials;
                    tile_partials(
                        path,
                        tile_data,
                        geometry,
                        weights.nan_scales,
                        &x[..tokens.len()],
                        activations.products_finite(),
                        partials,
                        ahead,
                    );
                    let finished = &mut finished[..tokens.len()];
                    finish(path, partials, global_scale, finished);
                    for (t, values) in tokens.zip(finished.iter()) {
                        run_columns[t][column..column + rows].copy_from_slice(&values[..rows]);
                    }
                }
            }
        }
    };
    team.run(&|index| {
        if index == 0 { with_exact_float_mode(|| share(index)) } else { share(index) }
    });
    y
}

#[cfg(test)]
mod tests {
    use super::passes;

    #[test]
    fn passes_cover_every_token_once_and_evenly() {
        for most in [1, 4, 8] {
            for m in 1..40 {
                let split: Vec<_> = passes(m, most).collect();
                assert_eq!(split.first().map(|r| r.start), Some(0));
                assert_eq!(split.last().map(|r| r.end), Some(m));
                assert!(split.windows(2).all(|w| w[0].end == w[1].start));
                let (shortest, longest) = (
                    split.iter().map(|r| r.len()).min().unwrap_or(0),
                    split.iter().map(|r| r.len()).max().unwrap_or(0),
                );
                assert!(longest <= most && longest - shortest <= 1 && shortest >= 1, "m {m}, most {most}: {split:?}");
            }
        }
    }
}
