//! One launch on the CPU: widen X once, hand runs of tiles to the team's threads, run each tile's
//! passes (a few tokens each) and finish its outputs straight away, writing Y in place.

use crate::activations::{Activations, passes};
use crate::arrangements::Arranged;
use crate::kernels::{PRODUCT_TILES, finish, tile_partials, tokens_per_pass};
#[cfg(target_arch = "x86_64")]
use crate::kernels::{tile_partials_pairs, tile_partials_products};
use crate::layout::{READ_PAST, TILE_ROWS};
use crate::lines::Lines;
use crate::simd::{SimdPath, with_exact_float_mode};
use crate::team::Team;
use gemv_core::PARTIALS;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Tiles below which one thread does the whole launch (handing out work would dominate).
const TILES_PER_THREAD_MIN: usize = 4;

/// Runs of tiles per thread: threads take runs as they come free, so a thread slowed by the rest
/// of the machine does not hold up the launch.
const RUNS_PER_THREAD: usize = 8;

/// The most tokens a pass serves on any path.
const MOST_TOKENS: usize = 16;

/// Bytes ahead of the block being read that a kernel prefetches.
const PREFETCH_BYTES: usize = 8192;

/// A thread's scratch: one pass's partial sums.
struct Scratch {
    partials: Lines,
}

/// The team a launch runs on and each of its threads' scratch.
pub(crate) struct Threads {
    team: Team,
    scratch: Vec<Mutex<Scratch>>,
}

impl Threads {
    /// `threads` threads (the caller included); every worker first calls `start`.
    pub(crate) fn new(threads: usize, start: fn()) -> std::io::Result<Self> {
        let team = Team::new(threads, start)?;
        let scratch = (0..team.threads())
            .map(|_| Mutex::new(Scratch { partials: Lines::zeroed(MOST_TOKENS * PARTIALS * TILE_ROWS) }))
            .collect();
        Ok(Self { team, scratch })
    }
}

/// The path a launch of `m` tokens over X runs on and X in that path's form: the pair kernel's
/// bf16 pairs where `path` reads them and X allows (see `Activations::reads_pairs`), the products
/// kernel where `path` runs it for `m` and X's products cannot overflow, widened rows on the
/// path's own kernels otherwise.
pub(crate) fn prepare(
    path: SimdPath,
    (x, x_row_stride): (&[u16], usize),
    m: usize,
    weights: &Arranged,
) -> (SimdPath, Activations) {
    let runs = path.runs(m);
    let activations = Activations::new(x, x_row_stride, m, &weights.geometry, runs.reads_pairs(m));
    let path = match runs {
        SimdPath::Avx512Bf16 if !activations.reads_pairs() => runs.widened(),
        SimdPath::Avx512Products if !activations.products_finite() => runs.widened(),
        runs => runs,
    };
    (path, activations)
}

/// The tiles of `tiles` in the steps a pass on `path` takes: [`PRODUCT_TILES`] at a time on the
/// products kernel (fewer at the end), one at a time otherwise.
fn tile_steps(path: SimdPath, tiles: std::ops::Range<usize>) -> impl Iterator<Item = std::ops::Range<usize>> {
    let step = if path == SimdPath::Avx512Products { PRODUCT_TILES } else { 1 };
    let end = tiles.end;
    tiles.step_by(step).map(move |first| first..(first + step).min(end))
}

/// The outputs of `tiles` (one, or a step of [`tile_steps`]) for every token of `activations`,
/// pass by pass (at most [`tokens_per_pass`] tokens each), handed to `write(tile, t, values)` (16
/// rows; those past N are padding). `partials` is scratch for one pass.
#[allow(clippy::too_many_arguments)]
fn tile_outputs(
    path: SimdPath,
    activations: &Activations,
    m: usize,
    weights: &Arranged,
    global_scale: f32,
    tiles: std::ops::Range<usize>,
    partials: &mut [f32],
    mut write: impl FnMut(usize, usize, &[u16; TILE_ROWS]),
) {
    let tile_bytes = weights.geometry.tile_bytes();
    // Each tile and the bytes a kernel may read past it (the next tile's, or the padding after
    // the last).
    let tile_data = |tile: usize| &weights.bytes[tile * tile_bytes..(tile + 1) * tile_bytes + READ_PAST];
    let mut finished = [[0u16; TILE_ROWS]; MOST_TOKENS];
    #[cfg(target_arch = "x86_64")]
    if path == SimdPath::Avx512Products {
        let mut data: [&[u8]; PRODUCT_TILES] = [&[]; PRODUCT_TILES];
        for (slot, tile) in data.iter_mut().zip(tiles.clone()) {
            *slot = tile_data(tile);
        }
        let x = activations.widened(0).expect("widened rows");
        let (geometry, special_scales) = (&weights.geometry, weights.special_scales);
        tile_partials_products(&data[..tiles.len()], geometry, special_scales, x, partials);
        for (i, tile) in tiles.enumerate() {
            let finished = &mut finished[..1];
            finish(path, &mut partials[i * PARTIALS * TILE_ROWS..], global_scale, finished);
            write(tile, 0, &finished[0]);
        }
        return;
    }
    assert!(tiles.len() == 1, "one tile a pass but on the products kernel");
    let tile = tiles.start;
    let ahead = tile_data(tile).as_ptr().wrapping_add(PREFETCH_BYTES);
    for tokens in passes(m, tokens_per_pass(path).min(MOST_TOKENS)) {
        run_pass(path, activations, tokens.clone(), tile_data(tile), weights, partials, ahead);
        let finished = &mut finished[..tokens.len()];
        finish(path, partials, global_scale, finished);
        for (t, values) in tokens.zip(finished.iter()) {
            write(tile, t, values);
        }
    }
}

/// Computes Y for `m` tokens on `threads`: X's row t (k bf16 bits)
/// at `x[t * x_row_stride..]`, Y's row t (n) written at `y[t * y_row_stride..]`, nothing else
/// written. The caller validated the lengths.
pub(crate) fn gemv(
    path: SimdPath,
    threads: &Threads,
    weights: &Arranged,
    global_scale: f32,
    x: (&[u16], usize),
    (y, y_row_stride): (&mut [u16], usize),
    m: usize,
) {
    let geometry = &weights.geometry;
    let n = geometry.n();
    let (path, activations) = prepare(path, x, m, weights);
    let tiles = geometry.tiles();
    let (team, scratch) = (&threads.team, &threads.scratch);
    let threads = team.threads().clamp(1, tiles.div_ceil(TILES_PER_THREAD_MIN).max(1));
    let runs = if threads == 1 { 1 } else { threads * RUNS_PER_THREAD };
    let tiles_per_run = tiles.div_ceil(runs).max(TILES_PER_THREAD_MIN.min(tiles));
    let rows_per_run = tiles_per_run * TILE_ROWS;
    // Each run of tiles writes its columns of every token's row of Y.
    let mut columns: Vec<Vec<&mut [u16]>> = (0..n.div_ceil(rows_per_run)).map(|_| Vec::with_capacity(m)).collect();
    for token_row in y.chunks_mut(y_row_stride).take(m).map(|row| &mut row[..n]) {
        for (run, run_columns) in columns.iter_mut().zip(token_row.chunks_mut(rows_per_run)) {
            run.push(run_columns);
        }
    }
    let columns: Vec<Mutex<Vec<&mut [u16]>>> = columns.into_iter().map(Mutex::new).collect();
    let next_run = AtomicUsize::new(0);
    let share = |index: usize| {
        if index >= threads {
            return;
        }
        let mut scratch = scratch[index].lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let run = next_run.fetch_add(1, Ordering::Relaxed);
            let Some(run_columns) = columns.get(run) else { break };
            let mut run_columns = run_columns.lock().unwrap_or_else(PoisonError::into_inner);
            let first_tile = run * tiles_per_run;
            let run_tiles = run_columns.first().map_or(0, |token| token.len().div_ceil(TILE_ROWS));
            for tiles in tile_steps(path, first_tile..first_tile + run_tiles) {
                tile_outputs(
                    path,
                    &activations,
                    m,
                    weights,
                    global_scale,
                    tiles,
                    &mut scratch.partials,
                    |tile, t, values| {
                        let column = (tile - first_tile) * TILE_ROWS;
                        let rows = TILE_ROWS.min(n - tile * TILE_ROWS);
                        run_columns[t][column..column + rows].copy_from_slice(&values[..rows])
                    },
                );
            }
        }
    };
    team.run(&|index| {
        if index == 0 { with_exact_float_mode(|| share(index)) } else { share(index) }
    });
}

/// One matrix of a grouped launch: its arrangement and global scale, the path it runs on, its
/// gathered X rows (`[m][K]`, contiguous) and the Y rows it writes (`[m][N]`, contiguous).
pub(crate) struct GroupedPart<'a> {
    pub(crate) weights: &'a Arranged,
    pub(crate) global_scale: f32,
    pub(crate) path: SimdPath,
    pub(crate) x: &'a [u16],
    pub(crate) m: usize,
    pub(crate) y: &'a mut [u16],
}

/// Computes every part of a grouped launch in one run of the team: the runs of tiles of all the
/// parts are one queue the threads take from, so small matrices do not each pay a launch's start
/// and end. Each output is computed exactly as [`gemv`] computes it.
pub(crate) fn gemv_grouped(threads: &Threads, parts: Vec<GroupedPart<'_>>) {
    let (team, scratch) = (&threads.team, &threads.scratch);
    let total_tiles: usize = parts.iter().map(|part| part.weights.geometry.tiles()).sum();
    let threads = team.threads().clamp(1, total_tiles.div_ceil(TILES_PER_THREAD_MIN).max(1));
    let runs = if threads == 1 { 1 } else { threads * RUNS_PER_THREAD };
    let tiles_per_run = total_tiles.div_ceil(runs).max(TILES_PER_THREAD_MIN);
    let rows_per_run = tiles_per_run * TILE_ROWS;
    // Every (part, run of tiles) with the columns of its part's Y rows it writes.
    struct Item<'p> {
        part: usize,
        first_tile: usize,
        columns: Mutex<Vec<&'p mut [u16]>>,
    }
    let mut prepared = Vec::with_capacity(parts.len());
    let mut items = Vec::new();
    for (index, part) in parts.into_iter().enumerate() {
        let n = part.weights.geometry.n();
        let (path, activations) = prepare(part.path, (part.x, part.weights.geometry.k()), part.m, part.weights);
        let mut columns: Vec<Vec<&mut [u16]>> =
            (0..n.div_ceil(rows_per_run)).map(|_| Vec::with_capacity(part.m)).collect();
        for token_row in part.y.chunks_mut(n).take(part.m) {
            for (run, run_columns) in columns.iter_mut().zip(token_row.chunks_mut(rows_per_run)) {
                run.push(run_columns);
            }
        }
        for (run, run_columns) in columns.into_iter().enumerate() {
            items.push(Item { part: index, first_tile: run * tiles_per_run, columns: Mutex::new(run_columns) });
        }
        prepared.push((path, activations, part.weights, part.global_scale, part.m));
    }
    let next = AtomicUsize::new(0);
    let share = |index: usize| {
        if index >= threads {
            return;
        }
        let mut scratch = scratch[index].lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            let (path, activations, weights, global_scale, m) = &prepared[item.part];
            let n = weights.geometry.n();
            let mut run_columns = item.columns.lock().unwrap_or_else(PoisonError::into_inner);
            let run_tiles = run_columns.first().map_or(0, |token| token.len().div_ceil(TILE_ROWS));
            for tiles in tile_steps(*path, item.first_tile..item.first_tile + run_tiles) {
                tile_outputs(
                    *path,
                    activations,
                    *m,
                    weights,
                    *global_scale,
                    tiles,
                    &mut scratch.partials,
                    |tile, t, values| {
                        let column = (tile - item.first_tile) * TILE_ROWS;
                        let rows = TILE_ROWS.min(n - tile * TILE_ROWS);
                        run_columns[t][column..column + rows].copy_from_slice(&values[..rows])
                    },
                );
            }
        }
    };
    team.run(&|index| {
        if index == 0 { with_exact_float_mode(|| share(index)) } else { share(index) }
    });
}

/// The time the calling thread takes to compute `tiles` of the weights `sweeps` times for `m`
/// tokens of X (prepared for `path` by [`prepare`]), the outputs discarded: what a calibration
/// compares.
pub(crate) fn time_tiles(
    path: SimdPath,
    activations: &Activations,
    m: usize,
    weights: &Arranged,
    tiles: std::ops::Range<usize>,
    sweeps: usize,
) -> Duration {
    let mut partials = Lines::zeroed(MOST_TOKENS * PARTIALS * TILE_ROWS);
    let mut sink = 0u16;
    with_exact_float_mode(|| {
        let start = Instant::now();
        for step in (0..sweeps).flat_map(|_| tile_steps(path, tiles.clone())) {
            tile_outputs(path, activations, m, weights, 1.0, step, &mut partials, |_, _, values| sink ^= values[0]);
        }
        std::hint::black_box(sink);
        start.elapsed()
    })
}

/// The partials of `tokens` for one tile, by the pair kernel where the activations are pairs and
/// by `path`'s kernel over widened rows otherwise.
fn run_pass(
    path: SimdPath,
    activations: &Activations,
    tokens: std::ops::Range<usize>,
    tile: &[u8],
    weights: &Arranged,
    partials: &mut [f32],
    ahead: *const u8,
) {
    let (geometry, special_scales) = (&weights.geometry, weights.special_scales);
    #[cfg(target_arch = "x86_64")]
    if let Some(pairs) = activations.pairs() {
        tile_partials_pairs(tile, geometry, special_scales, pairs, tokens, partials, ahead);
        return;
    }

    let mut x: [&[f32]; MOST_TOKENS] = [&[]; MOST_TOKENS];
    for (slot, t) in x.iter_mut().zip(tokens.clone()) {
        *slot = activations.widened(t).expect("widened rows");
    }
    let x = &x[..tokens.len()];
    tile_partials(path, tile, geometry, special_scales, x, activations.products_finite(), partials, ahead);
}
