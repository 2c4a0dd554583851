//! Which path runs a launch of M tokens: every path writes the contract's bits, so the choice is
//! only about time, and which is fastest depends on the CPU (the pair kernel is faster from two
//! tokens on AMD Zen 5 and slower on an Intel Xeon whose `vdpbf16ps` issues at a quarter of the
//! FMA's rate). The first launch of each token count in the process times each candidate path on
//! a slice of that launch's weights (of a sample matrix where they are too small to say much) and
//! keeps the fastest for the rest of the process (docs/cpu.md).

use crate::arrangements::Arranged;
use crate::compute::{prepare, time_tiles};
use crate::layout::TILE_ROWS;
use crate::simd::SimdPath;
use std::sync::OnceLock;
use std::time::Duration;

/// Token counts calibrated one by one; a launch of more tokens uses this count's choice (its
/// passes are the same kernels).
pub const CALIBRATED_TOKENS: usize = 16;

/// Interleaved rounds over the candidates; each candidate's fastest round counts (on a shared
/// machine, the fastest is the steadiest figure of a kernel's own rate).
const ROUNDS: usize = 5;

/// Weight-token products one timed slice computes: 0.1-0.2 ms on the AVX-512F kernel of an
/// Intel Xeon (Emerald Rapids) core, from its hot rates in docs/benchmarks.md.
const SLICE_PRODUCTS: usize = 1 << 22;

/// What a calibration found for one token count.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// The token count calibrated (launches of more than [`CALIBRATED_TOKENS`] use that count's).
    pub m: usize,
    /// The fastest path, which launches of `m` tokens now run on.
    pub chosen: SimdPath,
    /// Each candidate's fastest round on the slice, in the order the candidates were tried.
    pub timings: Vec<(SimdPath, Duration)>,
}

impl Calibration {
    /// Each other candidate's time over the chosen one's, e.g. `avx512bf16 1.45x`.
    pub fn summary(&self) -> String {
        let best = self.timings.iter().find(|(path, _)| *path == self.chosen).map_or(Duration::ZERO, |(_, t)| *t);
        let others: Vec<String> = self
            .timings
            .iter()
            .filter(|(path, _)| *path != self.chosen)
            .map(|(path, time)| format!("{} {:.2}x", path.name(), time.as_secs_f64() / best.as_secs_f64().max(1e-12)))
            .collect();
        if others.is_empty() {
            format!("M = {}: {}", self.m, self.chosen.name())
        } else {
            format!("M = {}: {} ({})", self.m, self.chosen.name(), others.join(", "))
        }
    }
}

/// The key a launch of `m` tokens is calibrated under.
fn key(m: usize) -> usize {
    m.clamp(1, CALIBRATED_TOKENS)
}

/// The paths a launch of `m` tokens can differ on: every supported SIMD path (the portable one
/// only where no other is), as it would run `m` tokens (the pair kernel takes two tokens or more,
/// the products kernel one), without repeats.
pub(crate) fn candidates(m: usize) -> Vec<SimdPath> {
    let mut candidates = Vec::new();
    for path in SimdPath::ALL.into_iter().filter(|path| *path != SimdPath::Portable && path.is_supported()) {
        let runs = path.runs(m);
        if !candidates.contains(&runs) {
            candidates.push(runs);
        }
    }
    if candidates.is_empty() {
        candidates.push(SimdPath::Portable);
    }
    candidates
}

/// Times `candidates` in `rounds` interleaved rounds with `time` and picks the one with the
/// fastest round (the first listed on a tie).
pub(crate) fn choose(
    m: usize,
    candidates: &[SimdPath],
    rounds: usize,
    mut time: impl FnMut(SimdPath) -> Duration,
) -> Calibration {
    assert!(!candidates.is_empty(), "a calibration needs a candidate");
    let mut best = vec![Duration::MAX; candidates.len()];
    for _ in 0..rounds.max(1) {
        for (slot, &path) in best.iter_mut().zip(candidates) {
            *slot = (*slot).min(time(path));
        }
    }
    let timings: Vec<(SimdPath, Duration)> = candidates.iter().copied().zip(best).collect();
    let chosen = timings.iter().min_by_key(|(_, time)| *time).map_or(candidates[0], |(path, _)| *path);
    Calibration { m, chosen, timings }
}

/// The time `path` takes, on the calling thread, for `m` tokens over the first tiles of
/// `weights` that hold [`SLICE_PRODUCTS`] products (all of them, swept again until they have,
/// where the matrix is smaller), with activations every path can take (ones: the pair kernel
/// reads them as pairs).
pub(crate) fn time_slice(path: SimdPath, weights: &Arranged, m: usize) -> Duration {
    let geometry = &weights.geometry;
    let k = geometry.k();
    let tile_products = (TILE_ROWS * k * m).max(1);
    let tiles = SLICE_PRODUCTS.div_ceil(tile_products).clamp(1, geometry.tiles());
    let sweeps = SLICE_PRODUCTS.div_ceil(tiles * tile_products);
    let x = vec![0x3F80u16; m * k];
    let (runs, activations) = prepare(path, (&x, k), m, weights);
    time_tiles(runs, &activations, m, weights, 0..tiles, sweeps)
}

/// Whether `weights` hold a whole slice for `m` tokens, K wide enough to be a layer's
/// (a smaller matrix, such as a test's, says little about the kernels' speed on a model).
fn holds_a_slice(weights: &Arranged, m: usize) -> bool {
    let geometry = &weights.geometry;
    geometry.k() >= SAMPLE_K && geometry.tiles() * TILE_ROWS * geometry.k() * m >= SLICE_PRODUCTS
}

/// K of the sample matrix calibrations use where a launch's weights are too small.
const SAMPLE_K: usize = 4096;

/// A sample matrix, [`SAMPLE_K`] wide with rows enough for a slice at one token: E2M1 codes from
/// a fixed sequence, normal E4M3 scale codes.
fn sample() -> &'static Arranged {
    static SAMPLE: OnceLock<Arranged> = OnceLock::new();
    SAMPLE.get_or_init(|| {
        let n = SLICE_PRODUCTS.div_ceil(SAMPLE_K).next_multiple_of(TILE_ROWS);
        let mut next = crate::sequence::xorshift(0x2545_F491_4F6C_DD1D);
        let packed: Vec<u8> = (0..n * SAMPLE_K / 2).map(|_| next() as u8).collect();
        let scales: Vec<u8> = (0..n * SAMPLE_K / 16).map(|_| 0x30 + (next() % 0x20) as u8).collect();
        Arranged::new(&packed, &scales, n, SAMPLE_K)
    })
}

/// The calibrations made in this process, by token count: read without a lock once made; a
/// launch that arrives while its count is being calibrated waits for it.
static CALIBRATIONS: [OnceLock<Calibration>; CALIBRATED_TOKENS] = [const { OnceLock::new() }; CALIBRATED_TOKENS];

/// The calibration launches of `m` tokens use, made at the first launch of `m` (or of more than
/// [`CALIBRATED_TOKENS`]) in the process, on a slice of that launch's `weights` where they hold
/// one (on the sample matrix otherwise).
fn calibrated(weights: &Arranged, m: usize) -> &'static Calibration {
    let key = key(m);
    CALIBRATIONS[key - 1].get_or_init(|| {
        let sample = if holds_a_slice(weights, key) { weights } else { sample() };
        let calibration = choose(key, &candidates(key), ROUNDS, |path| time_slice(path, sample, key));
        tracing::info!(m = key, chosen = calibration.chosen.name(), summary = %calibration.summary(), "cpu path calibrated");
        calibration
    })
}

/// The path launches of `m` tokens run on (see [`calibrated`]).
pub(crate) fn calibrated_path(weights: &Arranged, m: usize) -> SimdPath {
    calibrated(weights, m).chosen
}

/// The calibration of `m` tokens, made now on the sample matrix where this process has none yet.
pub(crate) fn calibration(m: usize) -> Calibration {
    calibrated(sample(), m).clone()
}

/// The calibrations made so far in this process, by token count.
pub(crate) fn calibrations() -> Vec<Calibration> {
    CALIBRATIONS.iter().filter_map(OnceLock::get).cloned().collect()
}

/// How a backend picks the SIMD path of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathSelection {
    /// Every launch runs on one path.
    Forced {
        /// The path.
        path: SimdPath,
        /// Who named it.
        by: ForcedBy,
    },
    /// Each token count runs on the path that was fastest on this CPU at its first launch.
    Calibrated,
}

/// Who forced a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForcedBy {
    /// The `GEMV_CPU_SIMD` environment variable.
    Environment,
    /// The program, through `CpuBackend::with_path`.
    Caller,
}

impl std::fmt::Display for PathSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathSelection::Forced { path, by: ForcedBy::Environment } => {
                write!(f, "{}, forced by {}", path.name(), crate::SIMD_VARIABLE)
            }
            PathSelection::Forced { path, by: ForcedBy::Caller } => write!(f, "{}, forced", path.name()),
            PathSelection::Calibrated => write!(f, "path calibrated per M"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_made_slower_on_purpose_is_never_chosen() {
        // Two paths this CPU has (the portable one always): whichever is slowed loses, so the
        // choice follows the timings, not an order.
        let fast = candidates(4)[0];
        if fast == SimdPath::Portable {
            gemv_conformance::skip::skip(
                gemv_conformance::skip::Requirement::CpuFeature,
                "this CPU has no SIMD path beside the portable one to compare it with",
            );
            return;
        }
        let pair = [fast, SimdPath::Portable];
        let weights = sample();
        let once = |path| time_slice(path, weights, 4);
        // Each path's fastest and slowest of three timings: on a busy machine one timing can be
        // several times another of the same path.
        let spread = |path| {
            let times = [once(path), once(path), once(path)];
            (times.iter().min().copied().unwrap_or_default(), times.iter().max().copied().unwrap_or_default())
        };
        let (a, b) = (spread(pair[0]), spread(pair[1]));
        // Enough repeats that the slowed path at its fastest takes four times the other's slowest.
        let repeats = |slowed: (Duration, Duration), other: (Duration, Duration)| {
            (4.0 * other.1.as_secs_f64() / slowed.0.as_secs_f64().max(1e-9)).ceil() as usize + 1
        };
        for (slowed, repeat) in [(pair[0], repeats(a, b)), (pair[1], repeats(b, a))] {
            let calibration =
                choose(
                    4,
                    &pair,
                    3,
                    |path| {
                        if path == slowed { (0..repeat).map(|_| once(path)).sum() } else { once(path) }
                    },
                );
            assert_ne!(calibration.chosen, slowed, "{calibration:?}");
            assert_eq!(calibration.timings.len(), 2);
            assert!(calibration.summary().contains(slowed.name()), "{}", calibration.summary());
        }
    }

    #[test]
    fn candidates_are_the_paths_a_launch_can_differ_on() {
        for m in 1..=CALIBRATED_TOKENS {
            let candidates = candidates(m);
            assert!(!candidates.is_empty() && candidates.iter().all(|path| path.is_supported()));
            let mut unique = candidates.clone();
            unique.dedup();
            assert_eq!(unique, candidates, "no repeats");
            // One token never runs the pair kernel, two or more never the products kernel; the
            // portable path only where nothing else is.
            assert!(m > 1 || !candidates.contains(&SimdPath::Avx512Bf16), "{candidates:?}");
            assert!(m == 1 || !candidates.contains(&SimdPath::Avx512Products), "{candidates:?}");
            assert!(candidates == [SimdPath::Portable] || !candidates.contains(&SimdPath::Portable));
        }
        assert_eq!((key(0), key(1), key(16), key(17), key(4096)), (1, 1, 16, 16, 16));
    }

    #[test]
    fn a_token_count_is_calibrated_once_and_kept() {
        let first = calibration(3);
        assert_eq!(first.m, 3);
        assert!(candidates(3).contains(&first.chosen));
        assert_eq!(first.timings.iter().map(|(path, _)| *path).collect::<Vec<_>>(), candidates(3));
        // Kept: the same record, however the timings would come out now.
        assert_eq!(calibration(3), first);
        assert_eq!(calibrated_path(sample(), 3), first.chosen);
        assert!(calibrations().contains(&first));
    }
}
