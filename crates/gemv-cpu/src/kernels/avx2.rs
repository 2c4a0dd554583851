//! The AVX2 + FMA tile kernel: one vector is one element of one group for 8 of the tile's 16
//! rows.
//!
//! A group-half's words (8 elements of 16 rows) load as two vectors; each word's nibbles are
//! looked up 32 at a time: `vpshufb` on the low and on the high nibbles of every byte gives
//! `2 * e2m1` as a signed byte (sign included). For element j one more `vpshufb` moves that byte
//! to the top of its lane with zeros below, an integer conversion makes it `2 * e2m1 * 2^24`
//! exactly, and one multiply by `scale * 2^-25` gives the weight (exact: at most 6 significant
//! bits). The integer look-up has no negative zero; the product's sign only matters when the
//! partial it meets is zero, and a partial starts at +0 and can never become -0.

// Lane, token and group indices address several arrays at once in these loops.
#![allow(clippy::needless_range_loop)]

use super::{pass_for_tokens, prefetch_lines};
use crate::layout::{BLOCK_BYTES, BLOCK_GROUPS, CHUNKS, Geometry, TILE_ROWS, word_offset};
use gemv_core::{GROUP_SIZE, PARTIALS};
use std::arch::x86_64::*;

/// 2^95: an E4M3 magnitude's bits moved into an f32's exponent and mantissa read 2^-120 of its
/// value; times 2^95 that is the value times 2^-25 (see the module doc).
const E4M3_BIAS_HALVED: f32 = f32::from_bits((127 + 95) << 23);

/// 8 E4M3 codes (one per row) as f32 times 2^-25, exactly (see the AVX-512 kernel's two ways).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn decode_scales(codes: __m128i, special: bool) -> __m256 {
    let extended = _mm256_cvtepi8_epi32(codes);
    let shifted = _mm256_slli_epi32::<20>(extended);
    if !special {
        let bits = _mm256_and_si256(shifted, _mm256_set1_epi32(0x87F0_0000_u32 as i32));
        return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(E4M3_BIAS_HALVED));
    }
    let magnitude = _mm256_and_si256(extended, _mm256_set1_epi32(0x7F));
    // Normal codes: the exponent field + 120 - 25 is the f32 exponent.
    let normal =
        _mm256_add_epi32(_mm256_and_si256(shifted, _mm256_set1_epi32(0x07F0_0000)), _mm256_set1_epi32(95 << 23));
    // Subnormal codes: m * 2^-9, times 2^-25.
    let mantissa = _mm256_and_si256(extended, _mm256_set1_epi32(7));
    let subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(mantissa), _mm256_set1_ps(f32::from_bits(93 << 23)));
    let is_subnormal = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), magnitude));
    let value = _mm256_blendv_ps(_mm256_castsi256_ps(normal), subnormal, is_subnormal);
    let is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(0x7F)));
    let value = _mm256_blendv_ps(value, _mm256_set1_ps(f32::NAN), is_nan);
    let sign = _mm256_and_si256(extended, _mm256_set1_epi32(i32::MIN));
    _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(value), sign))
}

/// `2 * e2m1` for the 16 nibble codes, as signed bytes, in both 128-bit lanes (`vpshufb` looks
/// up within a lane).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn doubled_e2m1_table() -> __m256i {
    _mm256_setr_epi8(
        0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8,
        -12,
    )
}

/// The `vpshufb` control that moves byte `B` of every 32-bit lane to its top byte, zeros below.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn to_top<const B: i8>() -> __m256i {
    const Z: i8 = -128;
    _mm256_setr_epi8(
        Z,
        Z,
        Z,
        B,
        Z,
        Z,
        Z,
        4 + B,
        Z,
        Z,
        Z,
        8 + B,
        Z,
        Z,
        Z,
        12 + B,
        Z,
        Z,
        Z,
        B,
        Z,
        Z,
        Z,
        4 + B,
        Z,
        Z,
        Z,
        8 + B,
        Z,
        Z,
        Z,
        12 + B,
    )
}

/// See the AVX-512 kernel's `pass`; here a pass runs the tile's first 8 rows, then its last 8
/// (the second time from the cache), so `T x P` chains of 8 rows are in flight.
///
/// # Safety
/// The CPU must support AVX2 and FMA; as the AVX-512 `pass` otherwise.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn pass<const T: usize, const P: usize>(
    tile: &[u8],
    geometry: &Geometry,
    special_scales: bool,
    x: &[&[f32]],
    partials: &mut [f32],
    ahead: *const u8,
) {
    debug_assert!(tile.len() >= geometry.tile_bytes() && partials.len() >= T * PARTIALS * TILE_ROWS);
    debug_assert!(x.len() == T && x.iter().all(|x| x.len() >= geometry.padded_k()));
    let x: [&[f32]; T] = std::array::from_fn(|t| x[t]);
    let table = doubled_e2m1_table();
    let low_nibbles = _mm256_set1_epi8(0x0F);
    for rows in 0..2 {
        for c in 0..CHUNKS {
            let blocks = geometry.superblocks(c);
            let chunk = geometry.chunk_offset(c);
            for q in 0..BLOCK_GROUPS / P {
                let mut acc = [[_mm256_setzero_ps(); P]; T];
                for s in 0..blocks {
                    let at = chunk + s * BLOCK_BYTES;
                    // The block `ahead` is ahead of this one, its scales' two lines first, then its
                    // words a few lines per group-half: spread out, the prefetches never queue up
                    // behind each other.
                    let prefetching = q == 0 && rows == 0;
                    let ahead = ahead.wrapping_add(at);
                    if prefetching {
                        prefetch_lines(ahead, 2);
                    }
                    let block = &tile[at..at + BLOCK_BYTES];
                    // Group q P + p's activations start at `first + 16 p`.
                    let first = geometry.activation(c, s) + q * P * GROUP_SIZE;
                    let scale: [__m256; P] = std::array::from_fn(|p| {
                        let codes_at = (q * P + p) * TILE_ROWS + 8 * rows;
                        // SAFETY: 8 scale codes of the group's rows lie inside the block; unaligned.
                        let codes = unsafe { _mm_loadl_epi64(block.as_ptr().add(codes_at).cast()) };
                        decode_scales(codes, special_scales)
                    });
                    for half in 0..2 {
                        let base = first + 8 * half;
                        for p in 0..P {
                            if prefetching {
                                // This pass reads P of the half's 8 lines: all 8 prefetched.
                                let lines = BLOCK_GROUPS / P;
                                prefetch_lines(ahead.wrapping_add(word_offset(p * lines, half)), lines);
                            }
                            let word_at = word_offset(q * P + p, half) + 32 * rows;
                            // SAFETY: 8 words of the group's half lie inside the block; unaligned.
                            let words = unsafe { _mm256_loadu_si256(block.as_ptr().add(word_at).cast()) };
                            let even = _mm256_shuffle_epi8(table, _mm256_and_si256(words, low_nibbles));
                            let odd = _mm256_shuffle_epi8(
                                table,
                                _mm256_and_si256(_mm256_srli_epi32::<4>(words), low_nibbles),
                            );
                            let scale = scale[p];
                            macro_rules! element {
                                ($source:expr, $byte:literal, $j:literal) => {{
                                    let doubled = _mm256_shuffle_epi8($source, to_top::<$byte>());
                                    let w = _mm256_mul_ps(_mm256_cvtepi32_ps(doubled), scale);
                                    for t in 0..T {
                                        // SAFETY: group q P + p of this block is below the padded K.
                                        let xv = unsafe { *x[t].get_unchecked(base + p * GROUP_SIZE + $j) };
                                        acc[t][p] = _mm256_fmadd_ps(w, _mm256_set1_ps(xv), acc[t][p]);
                                    }
                                }};
                            }
                            element!(even, 0, 0);
                            element!(odd, 0, 1);
                            element!(even, 1, 2);
                            element!(odd, 1, 3);
                            element!(even, 2, 4);
                            element!(odd, 2, 5);
                            element!(even, 3, 6);
                            element!(odd, 3, 7);
                        }
                    }
                }
                for t in 0..T {
                    for p in 0..P {
                        let l = c * BLOCK_GROUPS + q * P + p;
                        let out = &mut partials[(t * PARTIALS + l) * TILE_ROWS + 8 * rows..][..8];
                        // SAFETY: `out` holds 8 f32; an unaligned store.
                        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc[t][p]) };
                    }
                }
            }
        }
    }
}

/// Tokens one pass over a tile serves at most (their accumulators, the scales and the looked-up
/// nibbles fit in the 16 registers).
pub(crate) const TOKENS: usize = 8;

/// The 64 partials of `x.len() <= TOKENS` tokens for one tile (see [`pass`]).
///
/// # Safety
/// The CPU must support AVX2 and FMA; `tile`, `x` and `partials` as for [`pass`].
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn tile_partials(
    tile: &[u8],
    geometry: &Geometry,
    special_scales: bool,
    x: &[&[f32]],
    partials: &mut [f32],
    ahead: *const u8,
) {
    // SAFETY: as this function's contract.
    unsafe {
        pass_for_tokens!(
            x.len(),
            pass(tile, geometry, special_scales, x, partials, ahead),
            (1, 4),
            (2, 4),
            (3, 2),
            (4, 2),
            (5, 1),
            (6, 1),
            (7, 1),
            (8, 1)
        )
    }
}
