//! The NEON tile kernel (aarch64): one vector is one element of one group for 4 of the tile's 16
//! rows; a pass runs the tile's four row-quarters in turn (the last three from the cache), so
//! `T x P` chains of 4 rows are in flight in the 32 registers.
//!
//! A group-half's words for 4 rows load as one vector of 16 bytes; a table look-up on the low and
//! on the high nibbles of every byte gives `2 * e2m1` as a signed byte. For element j a second
//! look-up moves that byte to the top of its 32-bit lane with zeros below, a fixed-point
//! conversion with 25 fraction bits makes it `e2m1` exactly, and one multiply by the group's
//! scales gives the weight (exact: at most 6 significant bits). The multiply-adds take each
//! token's activation from a lane of a vector (`fmla` by element: fused). The look-up has no
//! negative zero; a partial starts at +0 and can never become -0, so the sign of a zero product
//! cannot reach a result.

// Token, group and lane indices address several arrays at once in these loops.
#![allow(clippy::needless_range_loop)]

use super::{e4m3_table, pass_for_tokens};
use crate::layout::{BLOCK_BYTES, BLOCK_GROUPS, CHUNKS, Geometry, TILE_ROWS, word_offset};
use gemv_core::{GROUP_SIZE, PARTIALS};
use std::arch::aarch64::*;

/// `2 * e2m1` for the 16 nibble codes, as signed bytes.
const DOUBLED_E2M1: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// The look-up indices that move byte `b` of every 32-bit lane to its top byte (an index past
/// the table gives zero).
const fn to_top(b: u8) -> [u8; 16] {
    const Z: u8 = 0xFF;
    [Z, Z, Z, b, Z, Z, Z, 4 + b, Z, Z, Z, 8 + b, Z, Z, Z, 12 + b]
}
const TO_TOP: [[u8; 16]; 4] = [to_top(0), to_top(1), to_top(2), to_top(3)];

/// Rows a vector holds.
const LANES: usize = 4;

/// See the AVX-512 kernel's `pass`.
///
/// # Safety
/// The CPU must support NEON; `tile` holds `geometry.tile_bytes()` bytes; each `x[t]` holds
/// `geometry.padded_k()` values; `partials` holds `T * 64 * 16`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn pass<const T: usize, const P: usize>(tile: &[u8], geometry: &Geometry, x: &[&[f32]], partials: &mut [f32]) {
    debug_assert!(tile.len() >= geometry.tile_bytes() && partials.len() >= T * PARTIALS * TILE_ROWS);
    debug_assert!(x.len() == T && x.iter().all(|x| x.len() >= geometry.padded_k()));
    let x: [&[f32]; T] = std::array::from_fn(|t| x[t]);
    let scales = e4m3_table();
    // SAFETY: the tables are 16 bytes each.
    let (table, low, to_top) = unsafe {
        (
            vld1q_s8(DOUBLED_E2M1.as_ptr()),
            vdupq_n_u8(0x0F),
            [
                vld1q_u8(TO_TOP[0].as_ptr()),
                vld1q_u8(TO_TOP[1].as_ptr()),
                vld1q_u8(TO_TOP[2].as_ptr()),
                vld1q_u8(TO_TOP[3].as_ptr()),
            ],
        )
    };
    for quarter in 0..TILE_ROWS / LANES {
        for c in 0..CHUNKS {
            let blocks = geometry.superblocks(c);
            let chunk = geometry.chunk_offset(c);
            for q in 0..BLOCK_GROUPS / P {
                let mut acc = [[vdupq_n_f32(0.0); P]; T];
                for s in 0..blocks {
                    let at = chunk + s * BLOCK_BYTES;
                    let block = &tile[at..at + BLOCK_BYTES];
                    // Group q P + p's activations start at `first + 16 p`.
                    let first = geometry.activation(c, s) + q * P * GROUP_SIZE;
                    let scale: [float32x4_t; P] = std::array::from_fn(|p| {
                        let codes = &block[(q * P + p) * TILE_ROWS + LANES * quarter..][..LANES];
                        let values = [
                            scales[usize::from(codes[0])],
                            scales[usize::from(codes[1])],
                            scales[usize::from(codes[2])],
                            scales[usize::from(codes[3])],
                        ];
                        // SAFETY: four f32.
                        unsafe { vld1q_f32(values.as_ptr()) }
                    });
                    for half in 0..2 {
                        let base = first + 8 * half;
                        for p in 0..P {
                            let word_at = word_offset(q * P + p, half) + 4 * LANES * quarter;
                            // SAFETY: the 4 rows' words (16 bytes) lie inside the block; each
                            // token's 8 activations of this group-half lie below the padded K.
                            let (words, xs) = unsafe {
                                let at = base + p * GROUP_SIZE;
                                let xs: [[float32x4_t; 2]; T] = std::array::from_fn(|t| {
                                    [vld1q_f32(x[t].as_ptr().add(at)), vld1q_f32(x[t].as_ptr().add(at + 4))]
                                });
                                (vld1q_u8(block.as_ptr().add(word_at)), xs)
                            };
                            let even = vqtbl1q_s8(table, vandq_u8(words, low));
                            let odd = vqtbl1q_s8(table, vshrq_n_u8::<4>(words));
                            let scale = scale[p];
                            macro_rules! element {
                                ($source:expr, $byte:literal, $quad:literal, $lane:literal) => {{
                                    let doubled = vreinterpretq_s32_s8(vqtbl1q_s8($source, to_top[$byte]));
                                    let w = vmulq_f32(vcvtq_n_f32_s32::<25>(doubled), scale);
                                    for t in 0..T {
                                        acc[t][p] = vfmaq_laneq_f32::<$lane>(acc[t][p], w, xs[t][$quad]);
                                    }
                                }};
                            }
                            element!(even, 0, 0, 0);
                            element!(odd, 0, 0, 1);
                            element!(even, 1, 0, 2);
                            element!(odd, 1, 0, 3);
                            element!(even, 2, 1, 0);
                            element!(odd, 2, 1, 1);
                            element!(even, 3, 1, 2);
                            element!(odd, 3, 1, 3);
                        }
                    }
                }
                for t in 0..T {
                    for p in 0..P {
                        let l = c * BLOCK_GROUPS + q * P + p;
                        let out = &mut partials[(t * PARTIALS + l) * TILE_ROWS + LANES * quarter..][..LANES];
                        // SAFETY: `out` holds 4 f32.
                        unsafe { vst1q_f32(out.as_mut_ptr(), acc[t][p]) };
                    }
                }
            }
        }
    }
}

/// Tokens one pass over a tile serves at most.
pub(crate) const TOKENS: usize = 8;

/// The 64 partials of `x.len() <= TOKENS` tokens for one tile (see [`pass`]).
///
/// # Safety
/// The CPU must support NEON; `tile`, `x` and `partials` as for [`pass`].
#[target_feature(enable = "neon")]
pub(crate) unsafe fn tile_partials(tile: &[u8], geometry: &Geometry, x: &[&[f32]], partials: &mut [f32]) {
    // SAFETY: as this function's contract.
    unsafe {
        pass_for_tokens!(
            x.len(),
            pass(tile, geometry, x, partials),
            (1, 8),
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
