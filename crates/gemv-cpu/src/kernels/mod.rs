//! Row kernels: the 64 partial sums of every token for one weight row, on one instruction set.
//!
//! Partial l visits groups l, l + 64, ... in order; a kernel of width W handles groups
//! `b * W .. (b + 1) * W` as one vector whose lanes are the partials `(b * W) % 64 ..`, and
//! processes blocks in increasing order, element j = 0..15 of each group at a time, with fused
//! multiply-adds: exactly the contract's chains. The SIMD kernels decode a whole superblock of
//! 64 groups (all 64 partials, 64 / W vectors) before the tokens run over it, so each token has
//! 64 / W independent chains in flight instead of one (a chain of dependent FMAs would otherwise
//! wait on their latency). The tree and the final rounding are shared code ([`finish`] one output
//! at a time, [`finish_outputs`] 16 outputs to a vector on AVX-512 and 8 on AVX2, the same
//! additions).

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod portable;

use crate::activations::TransposedX;
use crate::simd::SimdPath;
use gemv_core::codec::{decode_e4m3, f32_to_bf16};
use gemv_core::{GROUP_SIZE, PARTIALS};
use std::sync::OnceLock;

/// The 256 E4M3 codes as f32 (0x7F and 0xFF are NaN).
pub(crate) fn e4m3_table() -> &'static [f32; 256] {
    static TABLE: OnceLock<[f32; 256]> = OnceLock::new();
    TABLE.get_or_init(|| std::array::from_fn(|code| decode_e4m3(code as u8)))
}

/// The most rows a kernel decodes together (a tile): per superblock, the tile's weight vectors
/// and a few tokens' accumulators are held at once, so each activation load feeds every row of
/// the tile and each weight load every token of a chunk.
pub(crate) const TILE_ROWS: usize = 6;

/// The rows of a tile on `path` (at most [`TILE_ROWS`]).
pub(crate) fn tile_rows(path: SimdPath) -> usize {
    match path {
        #[cfg(target_arch = "x86_64")]
        SimdPath::Avx512 => avx512::ROWS,
        #[cfg(target_arch = "x86_64")]
        SimdPath::Avx2 => avx2::ROWS,
        _ => portable::ROWS,
    }
}

/// Prefetches `lines` cache lines of row `row`'s packed bytes from byte `offset` of the row and,
/// where `scale_code` is given, the line holding that scale code of the row. The row index may
/// lie past `packed` (the kernels prefetch the rows after their tile, which may be past the
/// matrix): the addresses are only prefetched, never read, and a prefetch does not fault.
/// `prefetcht0` is SSE, part of every x86-64 CPU.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "sse")]
pub(crate) fn prefetch_row(
    packed: &[u8],
    scales: &[u8],
    (row_bytes, groups): (usize, usize),
    row: usize,
    offset: usize,
    lines: usize,
    scale_code: Option<usize>,
) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    let bytes = packed.as_ptr().wrapping_add(row * row_bytes + offset);
    for line in 0..lines {
        _mm_prefetch::<_MM_HINT_T0>(bytes.wrapping_add(64 * line).cast());
    }
    if let Some(code) = scale_code {
        _mm_prefetch::<_MM_HINT_T0>(scales.as_ptr().wrapping_add(row * groups + code).cast());
    }
}

/// Block `b` of one row (`W` groups from group `b * W`): its `8 * W` packed bytes and `W` scale
/// codes. Whole blocks are borrowed in place; a block reaching past the row's last group is
/// copied into `tail`, zero-padded (a zero scale code makes the padding's weights zero, never
/// NaN).
#[inline(always)]
pub(crate) fn block_bytes<'a, const W: usize>(
    packed: &'a [u8],
    scales: &'a [u8],
    b: usize,
    tail: &'a mut ([u8; 128], [u8; 16]),
) -> (&'a [u8], &'a [u8]) {
    let first = b * W;
    let groups = scales.len();
    if first + W <= groups {
        return (&packed[8 * first..8 * (first + W)], &scales[first..first + W]);
    }
    tail.0.fill(0);
    tail.1.fill(0);
    let valid = groups.saturating_sub(first);
    if valid > 0 {
        tail.0[..8 * valid].copy_from_slice(&packed[8 * first..]);
        tail.1[..valid].copy_from_slice(&scales[first..]);
    }
    (&tail.0[..8 * W], &tail.1[..W])
}

/// Accumulates `rows <= tile_rows(path)` consecutive rows (their bytes contiguous in `packed`
/// and `scales`) into `partials` (`tile_rows(path) * m * 64`, by row then token, zeroed by the
/// caller; rows past `rows` are scratch) on `path`.
pub(crate) fn row_tile(
    path: SimdPath,
    packed: &[u8],
    scales: &[u8],
    rows: usize,
    xt: &TransposedX,
    partials: &mut [f32],
) {
    debug_assert_eq!(packed.len(), scales.len() * GROUP_SIZE / 2);
    debug_assert_eq!(partials.len(), tile_rows(path) * xt.m() * PARTIALS);
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a backend only holds an x86 path after `SimdPath::is_supported` confirmed the
        // CPU has its features (AVX-512F; AVX2 and FMA).
        SimdPath::Avx512 => unsafe { avx512::row_tile(packed, scales, rows, xt, partials) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        SimdPath::Avx2 => unsafe { avx2::row_tile(packed, scales, rows, xt, partials) },
        _ => portable::row_tile(packed, scales, rows, xt, partials),
    }
}

/// Outputs `path` finishes together (one vector of them); [`finish_outputs`] is fastest on
/// batches of a multiple of it.
pub(crate) fn finish_width(path: SimdPath) -> usize {
    match path {
        #[cfg(target_arch = "x86_64")]
        SimdPath::Avx512 => avx512::FINISH_OUTPUTS,
        #[cfg(target_arch = "x86_64")]
        SimdPath::Avx2 => avx2::FINISH_OUTPUTS,
        _ => 1,
    }
}

/// [`finish`] for each of `out.len()` outputs, whose partials are `partials[64 * o..][..64]`: on
/// AVX-512 16 outputs to a vector, on AVX2 8 (the same additions in the same order), the rest one
/// at a time.
pub(crate) fn finish_outputs(path: SimdPath, partials: &mut [f32], global_scale: f32, out: &mut [u16]) {
    debug_assert!(partials.len() >= out.len() * PARTIALS);
    let width = finish_width(path);
    let vectorised = if width > 1 { out.len() / width * width } else { 0 };
    #[cfg(target_arch = "x86_64")]
    if vectorised > 0 {
        for (out, partials) in out[..vectorised].chunks_exact_mut(width).zip(partials.chunks_exact(width * PARTIALS)) {
            match path {
                // SAFETY: a backend holds an x86 path only after `SimdPath::is_supported`
                // confirmed the CPU has its features (AVX-512F; AVX2 and FMA).
                SimdPath::Avx512 => unsafe { avx512::finish_outputs(partials, global_scale, out) },
                // SAFETY: as above.
                SimdPath::Avx2 => unsafe { avx2::finish_outputs(partials, global_scale, out) },
                SimdPath::Portable => unreachable!("the portable path finishes one output at a time"),
            }
        }
    }
    for (o, value) in out.iter_mut().enumerate().skip(vectorised) {
        *value = finish(&mut partials[o * PARTIALS..(o + 1) * PARTIALS], global_scale);
    }
}

/// The contract's tree over one token's 64 partials, then `bf16(total * global_scale)`.
/// Each level adds the upper half onto the lower, written over two disjoint halves so the
/// compiler emits vector adds (the same IEEE additions, lane by lane, as one at a time).
pub(crate) fn finish(partials: &mut [f32], global_scale: f32) -> u16 {
    let mut d = PARTIALS / 2;
    while d >= 1 {
        let (low, high) = partials.split_at_mut(d);
        for (sum, &upper) in low.iter_mut().zip(&high[..d]) {
            *sum += upper;
        }
        d /= 2;
    }
    f32_to_bf16(partials[0] * global_scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (an LCG's upper bits).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u32 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) as u32
        }
    }

    /// One value of many kinds: NaN, infinities of both signs (so inf - inf), signed zeros,
    /// subnormals, values near f32's limits (so sums and the scaling overflow), bf16 halfway
    /// cases, and ordinary values of mixed magnitude.
    fn special(random: &mut Lcg) -> f32 {
        match random.next() % 16 {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => f32::NEG_INFINITY,
            3 => -0.0,
            4 => 0.0,
            5 => f32::from_bits((random.next() % 0x0080_0000) | (random.next() & 0x8000_0000)),
            6 => f32::from_bits(0x7F00_0000 | (random.next() & 0x807F_FFFF)),
            7 => f32::from_bits((random.next() & 0xFFFF_0000) | 0x8000),
            _ => ordinary(random),
        }
    }

    /// A finite value between 2^-63 and 1 in magnitude, either sign.
    fn ordinary(random: &mut Lcg) -> f32 {
        f32::from_bits(((random.next() % 0x3F) << 23) | 0x2000_0000 | (random.next() & 0x807F_FFFF))
    }

    /// Ordinary partials in which one level `d` of the tree (32, 16, ..., 1) meets a pair that
    /// cancels exactly: +B at position i < d and -B at i + d (B = 2^40, which swallows every
    /// ordinary value), and zeros at the positions that fold into them before that level. The tree
    /// gives the ordinary values' sum; any other pairing or order adds B to something first.
    fn cancelling(random: &mut Lcg) -> [f32; PARTIALS] {
        let mut partials = [0f32; PARTIALS];
        let d = PARTIALS >> (1 + random.next() % 6);
        let i = random.next() as usize % d;
        for (position, value) in partials.iter_mut().enumerate() {
            *value = if position % d != i {
                ordinary(random)
            } else if position == i {
                2f32.powi(40)
            } else if position == i + d {
                -(2f32.powi(40))
            } else {
                0.0
            };
        }
        partials
    }

    #[test]
    fn the_vector_finish_matches_the_tree_one_output_at_a_time() {
        // 37 outputs: on AVX-512 two vectors of 16, then five one at a time.
        let outputs = 37;
        for path in SimdPath::ALL.into_iter().filter(|path| path.is_supported()) {
            for global_scale in [1.0f32, 0.0371, -2.5, 0.0, f32::INFINITY, 1e-40, 3e38] {
                for seed in 0..60u64 {
                    let mut random = Lcg(seed);
                    let partials: Vec<f32> = match seed % 3 {
                        0 => (0..outputs * PARTIALS).map(|_| special(&mut random)).collect(),
                        1 => (0..outputs * PARTIALS).map(|_| ordinary(&mut random)).collect(),
                        _ => (0..outputs).flat_map(|_| cancelling(&mut random)).collect(),
                    };
                    let expected: Vec<u16> = partials
                        .chunks_exact(PARTIALS)
                        .map(|output| finish(&mut output.to_vec(), global_scale))
                        .collect();
                    let mut found = vec![0u16; outputs];
                    finish_outputs(path, &mut partials.clone(), global_scale, &mut found);
                    for o in 0..outputs {
                        assert_eq!(
                            found[o],
                            expected[o],
                            "{}: output {o}, seed {seed}, global scale {global_scale}: expected {:#06x}, found {:#06x}",
                            path.name(),
                            expected[o],
                            found[o]
                        );
                    }
                }
            }
        }
    }
}
