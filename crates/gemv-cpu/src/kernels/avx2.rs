//! The AVX2 + FMA row kernel: 8 groups per vector, 8 vectors per 64-group superblock.
//!
//! A block's 64 packed bytes load as two vectors of 32-bit words; group g's words 2g and 2g + 1
//! hold its nibbles 0..7 and 8..15. Gathering the even and the odd words puts group g in lane g,
//! then for element j: shift right by 4j, look the magnitude up with an 8-entry permute (it reads
//! the low 3 bits), move bit 3 to the sign, multiply by the group's scale (exact: at most 6
//! significant bits). For each superblock, each row of the tile has its 8 x 16 weight vectors
//! decoded once; then every token runs its 64 partials (8 vectors: 8 independent chains)
//! through them, against a slice of X that stays in L1 across the tile.

// Lane, row, token and element indices address several arrays at once in these loops.
#![allow(clippy::needless_range_loop)]

use super::{TILE_ROWS, block_bytes};
use crate::activations::TransposedX;
use gemv_core::{GROUP_SIZE, PARTIALS};
use std::arch::x86_64::*;

const W: usize = 8;
/// Blocks per 64-group superblock.
const Q: usize = PARTIALS / W;

/// 8 E4M3 codes (one per lane) as f32, exactly, without gathers or subnormal arithmetic (see the
/// AVX-512 kernel).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn decode_scales(codes: __m256i) -> __m256 {
    let magnitude = _mm256_and_si256(codes, _mm256_set1_epi32(0x7F));
    let normal =
        _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32::<20>(magnitude), _mm256_set1_epi32(120 << 23)));
    let mantissa = _mm256_and_si256(codes, _mm256_set1_epi32(7));
    let subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(mantissa), _mm256_set1_ps(1.0 / 512.0));
    let is_subnormal = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), magnitude));
    let value = _mm256_blendv_ps(normal, subnormal, is_subnormal);
    let is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(0x7F)));
    let value = _mm256_blendv_ps(value, _mm256_set1_ps(f32::NAN), is_nan);
    let sign = _mm256_slli_epi32::<24>(_mm256_and_si256(codes, _mm256_set1_epi32(0x80)));
    _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(value), sign))
}

/// Weight j (or 8 + j, from the odd words) of the 8 groups whose nibbles are in `words`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn weights<const SHR: i32, const SHL: i32>(words: __m256i, magnitudes: __m256, sign: __m256i, scale: __m256) -> __m256 {
    let magnitude = _mm256_permutevar8x32_ps(magnitudes, _mm256_srli_epi32::<SHR>(words));
    let signs = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32::<SHL>(words), sign));
    _mm256_mul_ps(_mm256_xor_ps(magnitude, signs), scale)
}

/// The words of groups 0..7 in order, from the per-128-bit-lane shuffle's 0, 1, 4, 5 | 2, 3, 6, 7.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn in_group_order(v: __m256) -> __m256i {
    _mm256_castpd_si256(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(v)))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn decode_half(words: __m256i, magnitudes: __m256, sign: __m256i, scale: __m256, out: &mut [__m256]) {
    out[0] = weights::<0, 28>(words, magnitudes, sign, scale);
    out[1] = weights::<4, 24>(words, magnitudes, sign, scale);
    out[2] = weights::<8, 20>(words, magnitudes, sign, scale);
    out[3] = weights::<12, 16>(words, magnitudes, sign, scale);
    out[4] = weights::<16, 12>(words, magnitudes, sign, scale);
    out[5] = weights::<20, 8>(words, magnitudes, sign, scale);
    out[6] = weights::<24, 4>(words, magnitudes, sign, scale);
    out[7] = weights::<28, 0>(words, magnitudes, sign, scale);
}

/// Rows decoded together (a tile).
pub(crate) const ROWS: usize = 2;
/// Tokens whose accumulators are held at once: ROWS x TOKENS = 8 vectors, plus the tokens'
/// activations and one weight vector, within the 16 registers.
const TOKENS: usize = 4;

/// Accumulates tokens `t0 .. t0 + T` of every row of the tile over one superblock (see the
/// AVX-512 kernel): the ROWS x T accumulators of one partial vector stay in registers.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn accumulate<const T: usize>(
    ws: &[[[__m256; GROUP_SIZE]; Q]; ROWS],
    xt: &TransposedX,
    superblock: usize,
    t0: usize,
    partials: &mut [f32],
) {
    let m = xt.m();
    // Loops, not `array::from_fn`: a closure does not inherit the target features, and an
    // out-of-line call here spills every vector register around it.
    let mut x: [&[f32]; T] = [&[]; T];
    for t in 0..T {
        x[t] = xt.blocks_from(t0 + t, Q * superblock, Q);
    }
    for q in 0..Q {
        let mut acc = [[_mm256_setzero_ps(); T]; ROWS];
        // SAFETY: partial vector q of row r, token t0 + t lies inside `partials` (ROWS * m * 64
        // values); unaligned loads.
        unsafe {
            for (r, row_acc) in acc.iter_mut().enumerate() {
                for (t, sum) in row_acc.iter_mut().enumerate() {
                    *sum = _mm256_loadu_ps(partials.as_ptr().add((r * m + t0 + t) * PARTIALS + q * W));
                }
            }
        }
        for j in 0..GROUP_SIZE {
            let offset = (q * GROUP_SIZE + j) * W;
            // A loop, not `array::from_fn`: a closure does not inherit the target features, and
            // an out-of-line call per load cost more than the load.
            let mut xs = [_mm256_setzero_ps(); T];
            for t in 0..T {
                // SAFETY: each token's slice holds Q blocks of 16 vectors of 8 f32.
                xs[t] = unsafe { _mm256_loadu_ps(x[t].as_ptr().add(offset)) };
            }
            for r in 0..ROWS {
                let w = ws[r][q][j];
                for t in 0..T {
                    acc[r][t] = _mm256_fmadd_ps(w, xs[t], acc[r][t]);
                }
            }
        }
        // SAFETY: as for the loads above; unaligned stores.
        unsafe {
            for (r, row_acc) in acc.iter().enumerate() {
                for (t, &sum) in row_acc.iter().enumerate() {
                    _mm256_storeu_ps(partials.as_mut_ptr().add((r * m + t0 + t) * PARTIALS + q * W), sum);
                }
            }
        }
    }
}

/// One block of every row of the tile, decoded in registers, for one or two tokens: per element
/// j each row's weight vector is decoded and fused straight into that row's accumulators, so at
/// M <= 2 weights never go through memory (see the AVX-512 kernel).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn stream_block<const T: usize>(
    words: &[[__m256i; 2]; ROWS],
    scale: &[__m256; ROWS],
    magnitudes: __m256,
    sign: __m256i,
    x: [&[f32]; T],
    acc: &mut [[__m256; T]; ROWS],
) {
    macro_rules! element {
        ($half:expr, $shr:expr, $shl:expr, $j:expr) => {{
            let mut xs = [_mm256_setzero_ps(); T];
            for t in 0..T {
                // SAFETY: each token's block holds 16 vectors of 8 f32.
                xs[t] = unsafe { _mm256_loadu_ps(x[t].as_ptr().add($j * W)) };
            }
            for r in 0..ROWS {
                let w = weights::<$shr, $shl>(words[r][$half], magnitudes, sign, scale[r]);
                for t in 0..T {
                    acc[r][t] = _mm256_fmadd_ps(w, xs[t], acc[r][t]);
                }
            }
        }};
    }
    element!(0, 0, 28, 0);
    element!(0, 4, 24, 1);
    element!(0, 8, 20, 2);
    element!(0, 12, 16, 3);
    element!(0, 16, 12, 4);
    element!(0, 20, 8, 5);
    element!(0, 24, 4, 6);
    element!(0, 28, 0, 7);
    element!(1, 0, 28, 8);
    element!(1, 4, 24, 9);
    element!(1, 8, 20, 10);
    element!(1, 12, 16, 11);
    element!(1, 16, 12, 12);
    element!(1, 20, 8, 13);
    element!(1, 24, 4, 14);
    element!(1, 28, 0, 15);
}

/// Loads the accumulators of partial vector `q` for tokens 0..T of every row, streams block `b`
/// through them, and stores them back.
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn stream_tokens<const T: usize>(
    words: &[[__m256i; 2]; ROWS],
    scale: &[__m256; ROWS],
    magnitudes: __m256,
    sign: __m256i,
    xt: &TransposedX,
    b: usize,
    q: usize,
    partials: &mut [f32],
) {
    let m = xt.m();
    let mut x: [&[f32]; T] = [&[]; T];
    for t in 0..T {
        x[t] = xt.block(t, b);
    }
    let mut acc = [[_mm256_setzero_ps(); T]; ROWS];
    // SAFETY: partial vector q of row r, token t lies inside `partials` (ROWS * m * 64 values);
    // unaligned loads and stores.
    unsafe {
        for (r, row_acc) in acc.iter_mut().enumerate() {
            for (t, sum) in row_acc.iter_mut().enumerate() {
                *sum = _mm256_loadu_ps(partials.as_ptr().add((r * m + t) * PARTIALS + q * W));
            }
        }
    }
    stream_block::<T>(words, scale, magnitudes, sign, x, &mut acc);
    // SAFETY: as above.
    unsafe {
        for (r, row_acc) in acc.iter().enumerate() {
            for (t, &sum) in row_acc.iter().enumerate() {
                _mm256_storeu_ps(partials.as_mut_ptr().add((r * m + t) * PARTIALS + q * W), sum);
            }
        }
    }
}

/// Prefetches what the next tile will read where this one reads now: the same superblock of the
/// same row one tile further on. A row of a 5120-wide matrix is only five superblocks, so
/// looking ahead within the row would leave every tile's start cold; rows are consecutive in
/// memory, so one tile ahead is the stream's true frontier. The address may lie past the slice
/// (or the matrix): it is only prefetched, never read, and a prefetch does not fault.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn prefetch_next_tile(packed: &[u8], scales: &[u8], rows: usize, r: usize, superblock: usize) {
    let (row_bytes, groups) = (packed.len() / rows, scales.len() / rows);
    let bytes = packed.as_ptr().wrapping_add((rows + r) * row_bytes + superblock * 512);
    for line in 0..8 {
        _mm_prefetch::<_MM_HINT_T0>(bytes.wrapping_add(64 * line).cast());
    }
    _mm_prefetch::<_MM_HINT_T0>(scales.as_ptr().wrapping_add((rows + r) * groups + superblock * 64).cast());
}

/// At M <= 2, block by block: prefetches block `b` of row `r` two tiles further on (one line of
/// packed bytes; at the superblock's first block also its line of scale codes). Spread over the
/// blocks, the prefetches keep pace with the stream where one burst per superblock did not
/// (measured with a C model of this loop, 16384 x 5120 weights (46 MB) from DRAM: 0.185-0.205
/// ns per weight without, 0.153-0.155 with). Like [`prefetch_next_tile`], it may point past the matrix: only
/// prefetched, never read.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn prefetch_block_ahead(packed: &[u8], scales: &[u8], rows: usize, r: usize, b: usize) {
    const TILES_AHEAD: usize = 2;
    let (row_bytes, groups) = (packed.len() / rows, scales.len() / rows);
    let row = TILES_AHEAD * rows + r;
    _mm_prefetch::<_MM_HINT_T0>(packed.as_ptr().wrapping_add(row * row_bytes + b * 64).cast());
    if b.is_multiple_of(Q) {
        _mm_prefetch::<_MM_HINT_T0>(scales.as_ptr().wrapping_add(row * groups + b * W).cast());
    }
}

/// Block `b` of one row as (even words, odd words) in group order, and its scales.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn load_block(bytes: &[u8], codes: &[u8]) -> ([__m256i; 2], __m256) {
    // SAFETY: `bytes` has 64 bytes and `codes` 8 (a block of 8 groups); unaligned.
    let (codes, low, high) = unsafe {
        (
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(codes.as_ptr().cast())),
            _mm256_castsi256_ps(_mm256_loadu_si256(bytes.as_ptr().cast())),
            _mm256_castsi256_ps(_mm256_loadu_si256(bytes.as_ptr().add(32).cast())),
        )
    };
    // Per 128-bit lane: [low0, low2, high0, high2], i.e. groups 0, 1, 4, 5 | 2, 3, 6, 7.
    let even = in_group_order(_mm256_shuffle_ps::<0x88>(low, high));
    let odd = in_group_order(_mm256_shuffle_ps::<0xDD>(low, high));
    ([even, odd], decode_scales(codes))
}

/// # Safety
/// The CPU must support AVX2 and FMA. `packed` and `scales` hold `rows <= ROWS` whole rows;
/// `partials` holds `ROWS * 64 * xt.m()` values (rows past `rows` are scratch); `xt` was built
/// for width 8.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn row_tile(packed: &[u8], scales: &[u8], rows: usize, xt: &TransposedX, partials: &mut [f32]) {
    debug_assert!(rows <= ROWS && ROWS <= TILE_ROWS);
    let magnitudes = _mm256_setr_ps(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0);
    let sign = _mm256_set1_epi32(i32::MIN);
    let (row_bytes, groups, m) = (packed.len() / rows, scales.len() / rows, xt.m());
    let mut tail = ([0u8; 128], [0u8; 16]);
    let row = |r: usize| (&packed[r * row_bytes..(r + 1) * row_bytes], &scales[r * groups..(r + 1) * groups]);
    if m <= 2 {
        for superblock in 0..xt.blocks() / Q {
            let mut words = [[_mm256_setzero_si256(); 2]; ROWS];
            let mut scale = [_mm256_setzero_ps(); ROWS];
            for q in 0..Q {
                let b = Q * superblock + q;
                for r in 0..rows {
                    prefetch_block_ahead(packed, scales, rows, r, b);
                    let (row_packed, row_scales) = row(r);
                    let (bytes, codes) = block_bytes::<W>(row_packed, row_scales, b, &mut tail);
                    (words[r], scale[r]) = load_block(bytes, codes);
                }
                if m == 1 {
                    stream_tokens::<1>(&words, &scale, magnitudes, sign, xt, b, q, partials);
                } else {
                    stream_tokens::<2>(&words, &scale, magnitudes, sign, xt, b, q, partials);
                }
            }
        }
        return;
    }
    // Rows of the tile past `rows` keep zero weights: their partials are scratch.
    let mut ws = [[[_mm256_setzero_ps(); GROUP_SIZE]; Q]; ROWS];
    for superblock in 0..xt.blocks() / Q {
        for (r, row_ws) in ws.iter_mut().enumerate().take(rows) {
            let (row_packed, row_scales) = row(r);
            prefetch_next_tile(packed, scales, rows, r, superblock);
            for (q, block_ws) in row_ws.iter_mut().enumerate() {
                let (bytes, codes) = block_bytes::<W>(row_packed, row_scales, Q * superblock + q, &mut tail);
                let ([even, odd], scale) = load_block(bytes, codes);
                let (first, second) = block_ws.split_at_mut(GROUP_SIZE / 2);
                decode_half(even, magnitudes, sign, scale, first);
                decode_half(odd, magnitudes, sign, scale, second);
            }
        }
        let mut t0 = 0;
        while t0 < m {
            match m - t0 {
                1 => accumulate::<1>(&ws, xt, superblock, t0, partials),
                2 => accumulate::<2>(&ws, xt, superblock, t0, partials),
                3 => accumulate::<3>(&ws, xt, superblock, t0, partials),
                _ => accumulate::<TOKENS>(&ws, xt, superblock, t0, partials),
            }
            t0 += TOKENS;
        }
    }
}
