//! The AVX-512F tile kernel: one vector is one element of one group for the tile's 16 rows.
//!
//! A block's words load as vectors; element j of a group is `word >> 4 j` (odd j) or the words
//! loaded j / 2 bytes further on (even j), looked up by a permute in the 16-entry signed E2M1
//! table (the permute reads the low 4 bits, sign included) and multiplied by the group's 16
//! scales: a permute, a multiply and half a shift per 16 weights, then one fused multiply-add per
//! token with the activation broadcast from memory. `P` groups of a
//! block advance together (`T x P` independent chains), so the multiply-adds never wait on each
//! other's latency.

// Lane, token and group indices address several arrays at once in these loops.
#![allow(clippy::needless_range_loop)]

use super::{pass_for_tokens, prefetch_lines};
use crate::layout::{BLOCK_BYTES, BLOCK_GROUPS, CHUNKS, Geometry, READ_PAST, TILE_ROWS, word_offset};
use gemv_core::codec::BF16_NAN;
use gemv_core::{GROUP_SIZE, PARTIALS};
use std::arch::x86_64::*;

/// 2^120: an E4M3 magnitude's bits moved into an f32's exponent and mantissa read 2^-120 of its
/// value (subnormal codes land on f32 subnormals, exactly).
const E4M3_BIAS: f32 = f32::from_bits((127 + 120) << 23);

/// 16 E4M3 codes (one per row) as f32, exactly.
///
/// Without `SPECIAL` (the caller knows no code is NaN or subnormal): the sign-extended code
/// shifted so its sign, exponent and mantissa fall on the f32's, masked, times 2^120 (zero codes
/// give zeros; no input to the multiply is subnormal, which would cost a microcode assist on
/// some CPUs). With `SPECIAL`: normal codes rebiased by an integer add, subnormal codes
/// (`m * 2^-9`) by an integer conversion, 0x7F and 0xFF as NaN.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn decode_scales(codes: __m128i, special: bool) -> __m512 {
    let extended = _mm512_cvtepi8_epi32(codes);
    let shifted = _mm512_slli_epi32::<20>(extended);
    if !special {
        let bits = _mm512_and_si512(shifted, _mm512_set1_epi32(0x87F0_0000_u32 as i32));
        return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(E4M3_BIAS));
    }
    let magnitude = _mm512_and_si512(extended, _mm512_set1_epi32(0x7F));
    let normal =
        _mm512_add_epi32(_mm512_and_si512(shifted, _mm512_set1_epi32(0x07F0_0000)), _mm512_set1_epi32(120 << 23));
    let mantissa = _mm512_and_si512(extended, _mm512_set1_epi32(7));
    let subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(mantissa), _mm512_set1_ps(1.0 / 512.0));
    let is_subnormal = _mm512_cmplt_epi32_mask(magnitude, _mm512_set1_epi32(8));
    let value = _mm512_mask_blend_ps(is_subnormal, _mm512_castsi512_ps(normal), subnormal);
    let is_nan = _mm512_cmpeq_epi32_mask(magnitude, _mm512_set1_epi32(0x7F));
    let value = _mm512_mask_blend_ps(is_nan, value, _mm512_set1_ps(f32::NAN));
    let sign = _mm512_and_si512(extended, _mm512_set1_epi32(i32::MIN));
    _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign))
}

/// Runs chunk by chunk over one tile for `T` tokens, `P` groups of a block at a time, and writes
/// the 64 partials of each token (`partials[t][l][row]`; zero for a chunk with no group).
/// `ahead` is the tile the caller runs next (or any address: it is only prefetched).
///
/// # Safety
/// The CPU must support AVX-512F. `tile` holds `geometry.tile_bytes() + READ_PAST` bytes; each
/// `x[t]` holds `geometry.padded_k()` values; `partials` holds `T * 64 * 16`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn pass<const T: usize, const P: usize>(
    tile: &[u8],
    geometry: &Geometry,
    special_scales: bool,
    x: &[&[f32]],
    partials: &mut [f32],
    ahead: *const u8,
) {
    debug_assert!(tile.len() >= geometry.tile_bytes() + READ_PAST && partials.len() >= T * PARTIALS * TILE_ROWS);
    debug_assert!(x.len() == T && x.iter().all(|x| x.len() >= geometry.padded_k()));
    let x: [&[f32]; T] = std::array::from_fn(|t| x[t]);
    let table = _mm512_setr_ps(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0);
    for c in 0..CHUNKS {
        let blocks = geometry.superblocks(c);
        let chunk = geometry.chunk_offset(c);
        for q in 0..BLOCK_GROUPS / P {
            let mut acc = [[_mm512_setzero_ps(); P]; T];
            for s in 0..blocks {
                let at = chunk + s * BLOCK_BYTES;
                // The block `ahead` is ahead of this one, a line per element step (its scales'
                // two lines first): spread out, the prefetches never queue up behind each other.
                let prefetching = q == 0;
                let ahead = ahead.wrapping_add(at);
                if prefetching {
                    prefetch_lines(ahead, 2);
                }
                let block = &tile[at..at + BLOCK_BYTES + READ_PAST];
                // Group q P + p's activations start at `first + 16 p`.
                let first = geometry.activation(c, s) + q * P * GROUP_SIZE;
                let scale: [__m512; P] = std::array::from_fn(|p| {
                    // SAFETY: 16 scale codes of group q P + p lie inside the block; unaligned.
                    let codes = unsafe { _mm_loadu_si128(block.as_ptr().add((q * P + p) * TILE_ROWS).cast()) };
                    decode_scales(codes, special_scales)
                });
                for half in 0..2 {
                    let words: [__m512i; P] = std::array::from_fn(|p| {
                        let word_at = word_offset(q * P + p, half);
                        // SAFETY: 16 words of group q P + p's half lie inside the block; unaligned.
                        unsafe { _mm512_loadu_si512(block.as_ptr().add(word_at).cast()) }
                    });
                    // Each token's activations from a pointer of its own, at constant offsets:
                    // the multiply-adds then address memory as base plus displacement, not base
                    // plus index, which Intel cores issue as two micro-operations.
                    let xb: [*const f32; T] =
                        std::array::from_fn(|t| opaque(x[t].as_ptr().wrapping_add(first + 8 * half)));
                    // Element j's codes in the low 4 bits of each row's lane: for even j (the low
                    // nibble of byte j / 2) the words loaded j / 2 bytes further on, a load instead
                    // of a shift on the ports the multiply-adds use; for odd j the words shifted.
                    macro_rules! element {
                        ($shift:literal, $j:literal) => {
                            if prefetching {
                                prefetch_lines(ahead.wrapping_add(word_offset(0, half) + 64 * $j), 1);
                            }
                            for p in 0..P {
                                let index = if $j % 2 == 0 && $j > 0 {
                                    let at = word_offset(q * P + p, half) + $j / 2;
                                    // SAFETY: 64 bytes from `at` lie inside the block and the 3
                                    // bytes after it (`block` holds them); unaligned.
                                    unsafe { _mm512_loadu_si512(block.as_ptr().add(at).cast()) }
                                } else {
                                    _mm512_srli_epi32::<$shift>(words[p])
                                };
                                let w = _mm512_mul_ps(_mm512_permutexvar_ps(index, table), scale[p]);
                                for t in 0..T {
                                    // SAFETY: group q P + p of this block is below the padded K.
                                    let xv = unsafe { *xb[t].add(p * GROUP_SIZE + $j) };
                                    acc[t][p] = _mm512_fmadd_ps(w, _mm512_set1_ps(xv), acc[t][p]);
                                }
                            }
                        };
                    }
                    element!(0, 0);
                    element!(4, 1);
                    element!(8, 2);
                    element!(12, 3);
                    element!(16, 4);
                    element!(20, 5);
                    element!(24, 6);
                    element!(28, 7);
                }
            }
            store_partials(&acc, c * BLOCK_GROUPS + q * P, partials);
        }
    }
}

/// `pointer` itself, which the optimiser can no longer relate to other addresses (an empty
/// assembly statement passes it through a register): it stays one base register instead of being
/// rewritten as a shared pointer plus an index.
#[inline(always)]
// The pointer passes through the statement but is never dereferenced there.
#[allow(clippy::pointers_in_nomem_asm_block)]
fn opaque(mut pointer: *const f32) -> *const f32 {
    // SAFETY: the template is empty: no instruction runs, no memory is touched, and the register
    // holds the same value after.
    unsafe { std::arch::asm!("/* {0} */", inout(reg) pointer, options(pure, nomem, nostack, preserves_flags)) };
    pointer
}

/// Writes the accumulators of `T` tokens and `P` groups as partials `first .. first + P` of each
/// token (`partials[t][l][row]`).
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn store_partials<const T: usize, const P: usize>(
    acc: &[[__m512; P]; T],
    first: usize,
    partials: &mut [f32],
) {
    for t in 0..T {
        for p in 0..P {
            let out = &mut partials[(t * PARTIALS + first + p) * TILE_ROWS..][..TILE_ROWS];
            // SAFETY: `out` holds 16 f32; unaligned store.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc[t][p]) };
        }
    }
}

/// Tokens one pass over a tile serves at most (the accumulators of `TOKENS x 2` chains, the
/// weights and scales fit in the 32 registers).
pub(crate) const TOKENS: usize = 8;

/// The 64 partials of `x.len() <= TOKENS` tokens for one tile (see [`pass`]).
///
/// # Safety
/// The CPU must support AVX-512F; `tile`, `x` and `partials` as for [`pass`].
#[target_feature(enable = "avx512f")]
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
            (1, 8),
            (2, 4),
            (3, 2),
            (4, 4),
            (5, 2),
            (6, 2),
            (7, 2),
            (8, 2)
        )
    }
}

/// The contract's tree over each token's 64 partials (`partials[t][l][row]`, 16 rows to a
/// vector: every level adds whole vectors, the same additions in the same order as one output at
/// a time), then `bf16(total * global_scale)` into `out[t][row]`.
///
/// # Safety
/// The CPU must support AVX-512F; `partials` holds `out.len() * 64 * 16` values.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn finish(partials: &[f32], global_scale: f32, out: &mut [[u16; TILE_ROWS]]) {
    assert!(partials.len() >= out.len() * PARTIALS * TILE_ROWS);
    for (t, out) in out.iter_mut().enumerate() {
        let base = &partials[t * PARTIALS * TILE_ROWS..][..PARTIALS * TILE_ROWS];
        // SAFETY: 64 vectors of 16 f32 lie inside `base`; unaligned loads.
        let mut level: [__m512; PARTIALS] =
            std::array::from_fn(|l| unsafe { _mm512_loadu_ps(base.as_ptr().add(l * TILE_ROWS)) });
        let mut d = PARTIALS / 2;
        while d >= 1 {
            for l in 0..d {
                level[l] = _mm512_add_ps(level[l], level[l + d]);
            }
            d /= 2;
        }
        let scaled = _mm512_mul_ps(level[0], _mm512_set1_ps(global_scale));
        // Round to nearest even on the bits; NaN to the canonical bf16 NaN.
        let bits = _mm512_castps_si512(scaled);
        let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(1));
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))));
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(scaled, scaled);
        let values = _mm512_mask_blend_epi32(nan, rounded, _mm512_set1_epi32(i32::from(BF16_NAN)));
        // SAFETY: `out` holds 16 u16; an unaligned 32-byte store.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), _mm512_cvtepi32_epi16(values)) };
    }
}
