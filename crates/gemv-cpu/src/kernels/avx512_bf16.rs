//! The AVX-512 BF16 tile kernel: two elements of a group per instruction for the tile's 16 rows.
//!
//! `vdpbf16ps` adds to each f32 lane two products of bf16 pairs, the pair's high element first,
//! each addition rounded to nearest even (inputs and results subnormal flushed to zero). A weight
//! `e2m1 * e4m3` has at most 6 significant bits, so it is a bf16 exactly, and the product of two
//! bf16 is an f32 exactly: where nothing is subnormal, the instruction is two of the contract's
//! fused multiply-adds in order (`Activations::reads_pairs` says when X keeps everything off the
//! subnormals; `crate::dpbf16_probe::adds_in_turn` checks once that the CPU rounds after each product).
//!
//! Decode: a block's 64-byte vector of one group's words for 16 rows is permuted into two
//! vectors of 8 rows, each row's word twice (lanes `2 r` and `2 r + 1`); element pair `(j, j + 1)`
//! is those words shifted by `4 j + 4` (even lanes) and `4 j` (odd lanes), looked up in the
//! 16-entry signed E2M1 table and multiplied by the scales (duplicated the same way); one
//! conversion packs both 8-row vectors into the bf16 pairs of 16 rows, element j high. Then one
//! `vdpbf16ps` per token with the activation pair broadcast from memory.

// Lane, token and group indices address several arrays at once in these loops.
#![allow(clippy::needless_range_loop)]

use super::avx512::{decode_scales, store_partials};
use super::{pass_for_tokens, prefetch_lines};
use crate::activations::Pairs;
use crate::layout::{BLOCK_BYTES, BLOCK_GROUPS, CHUNKS, Geometry, TILE_ROWS, word_offset};
use gemv_core::{GROUP_SIZE, PARTIALS};
use std::arch::x86_64::*;

/// The same 512 bits read as 32 bf16.
#[inline(always)]
fn bf16_pairs(bits: __m512i) -> __m512bh {
    // SAFETY: both types are 64 bytes of plain bits; every bit pattern is valid for either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(bits) }
}

/// Runs chunk by chunk over one tile for `T` tokens, `P` groups of a block at a time, and writes
/// the 64 partials of each token (`partials[t][l][row]`; zero for a chunk with no group).
/// `ahead` is the tile the caller runs next (or any address: it is only prefetched).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 BF16. `tile` holds `geometry.tile_bytes()` bytes;
/// `x` holds `geometry.padded_k() / 2` pairs of tokens `first .. first + T`; `partials` holds
/// `T * 64 * 16`.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn pass<const T: usize, const P: usize>(
    tile: &[u8],
    geometry: &Geometry,
    special_scales: bool,
    x: Pairs<'_>,
    first: usize,
    partials: &mut [f32],
    ahead: *const u8,
) {
    debug_assert!(tile.len() >= geometry.tile_bytes() && partials.len() >= T * PARTIALS * TILE_ROWS);
    debug_assert!(first + T <= x.tokens && x.values.len() >= geometry.padded_k() / 2 * x.tokens);
    let (values, tokens) = (&x.values[first..], x.tokens);
    let table = _mm512_setr_ps(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0);
    for c in 0..CHUNKS {
        let blocks = geometry.superblocks(c);
        let chunk = geometry.chunk_offset(c);
        for q in 0..BLOCK_GROUPS / P {
            let mut acc = [[_mm512_setzero_ps(); P]; T];
            for s in 0..blocks {
                let at = chunk + s * BLOCK_BYTES;
                // The block `ahead` is ahead of this one, a line per element pair (its scales'
                // two lines first), as the AVX-512 kernel spreads them.
                let prefetching = q == 0;
                let ahead = ahead.wrapping_add(at);
                if prefetching {
                    prefetch_lines(ahead, 2);
                }
                let block = &tile[at..at + BLOCK_BYTES];
                // Group q P + p's activation pairs start at `first + 8 p`.
                let first = (geometry.activation(c, s) + q * P * GROUP_SIZE) / 2;
                let scales: [__m512; P] = std::array::from_fn(|p| {
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
                    let base = first + 4 * half;
                    macro_rules! pair {
                        ($k:literal) => {
                            if prefetching {
                                prefetch_lines(ahead.wrapping_add(word_offset(0, half) + 128 * $k), 2);
                            }
                            let w: [__m512bh; P] = std::array::from_fn(|p| {
                                let first = _mm512_srli_epi32::<{ 8 * $k }>(words[p]);
                                let second = _mm512_srli_epi32::<{ 8 * $k + 4 }>(words[p]);
                                let first = _mm512_mul_ps(_mm512_permutexvar_ps(first, table), scales[p]);
                                let second = _mm512_mul_ps(_mm512_permutexvar_ps(second, table), scales[p]);
                                // Both are bf16 exactly (their low 16 bits zero): lane r holds row
                                // r's element 2 k high and 2 k + 1 low.
                                let second = _mm512_srli_epi32::<16>(_mm512_castps_si512(second));
                                bf16_pairs(_mm512_or_si512(_mm512_castps_si512(first), second))
                            });
                            for p in 0..P {
                                for t in 0..T {
                                    let at = (base + p * GROUP_SIZE / 2 + $k) * tokens + t;
                                    // SAFETY: group q P + p of this block is below the padded K,
                                    // and token `first + t` below `tokens`.
                                    let pair = unsafe { *values.get_unchecked(at) };
                                    let xv = bf16_pairs(_mm512_set1_epi32(pair as i32));
                                    acc[t][p] = _mm512_dpbf16_ps(acc[t][p], w[p], xv);
                                }
                            }
                        };
                    }
                    pair!(0);
                    pair!(1);
                    pair!(2);
                    pair!(3);
                }
            }
            store_partials(&acc, c * BLOCK_GROUPS + q * P, partials);
        }
    }
}

/// Tokens one pass over a tile serves at most (the accumulators of `TOKENS` chains, the weights
/// and scales fit in the 32 registers).
pub(crate) const TOKENS: usize = 16;

/// The 64 partials of tokens `first .. first + count` (`count` 2 to [`TOKENS`]) for one tile (see
/// [`pass`]).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 BF16; `tile`, `x` and `partials` as for [`pass`].
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn tile_partials(
    tile: &[u8],
    geometry: &Geometry,
    special_scales: bool,
    x: Pairs<'_>,
    (first, count): (usize, usize),
    partials: &mut [f32],
    ahead: *const u8,
) {
    // SAFETY: as this function's contract.
    unsafe {
        pass_for_tokens!(
            count,
            pass(tile, geometry, special_scales, x, first, partials, ahead),
            (2, 4),
            (3, 4),
            (4, 4),
            (5, 2),
            (6, 2),
            (7, 2),
            (8, 2),
            (9, 1),
            (10, 1),
            (11, 1),
            (12, 1),
            (13, 1),
            (14, 1),
            (15, 1),
            (16, 1)
        )
    }
}
