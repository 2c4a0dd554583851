//! The one-token products kernel (AVX-512F): an activation's products by the 16 signed E2M1
//! values, made once in a vector, serve the rows of several tiles, so a weight costs a permute and
//! one multiply-add, no multiply.
//!
//! For element j of a group, `products = E2M1 * x` (one multiply, the activation broadcast); a
//! weight's code, in the low 4 bits of its row's lane (brought there as the AVX-512F kernel brings
//! it), picks its product by a permute, and `fma(scale, e2m1 * x, a)` adds it. `e2m1 * x` is exact
//! (2 significant bits times 8, subnormals included) wherever it is finite, so `scale * (e2m1 *
//! x)` is the exact product `(e2m1 * scale) * x` and the multiply-add rounds once, as the
//! contract's `fma(ws, x, a)`. A launch takes this kernel only where no finite product can
//! overflow (every finite |x| < 2^116); infinite and NaN `x` give the contract's infinities and NaN
//! (`0 * inf` is NaN both ways). Padding groups (zero scale codes, zero activations) add
//! `fma(+0, ±0, a) = a`, a partial never being -0.
//!
//! Against the AVX-512F kernel (a permute, a multiply and a multiply-add per 16 weights) the
//! multiply is shared by [`PRODUCT_TILES`] tiles (docs/cpu.md has the measured effect). Four tiles'
//! accumulators, scales and words fit the registers only one group at a time, so the chains
//! rest in the partials between blocks and each block is read once, front to back.

// Tile and group indices address several arrays at once in these loops.
#![allow(clippy::needless_range_loop)]

use super::PRODUCT_TILES;
use super::avx512::{decode_scales, store_partials};
use crate::layout::{BLOCK_BYTES, BLOCK_GROUPS, CHUNKS, Geometry, READ_PAST, TILE_ROWS, word_offset};
use gemv_core::{GROUP_SIZE, PARTIALS};
use std::arch::x86_64::*;

/// Runs chunk by chunk over `N` tiles at once, block by block within a chunk and group by group
/// within a block, and writes the token's 64 partials of each tile (`partials[tile][l][row]`),
/// which hold the chains between blocks: group `q` of block `(c, s)` continues partial `8 c + q`
/// where block `(c, s - 1)` left it, so every chain still runs in the contract's order while each
/// block is read once, front to back. The next N tiles (the next pass's) are prefetched into L2
/// as this pass runs.
///
/// # Safety
/// The CPU must support AVX-512F. Each of `tiles` holds `geometry.tile_bytes() + READ_PAST`
/// bytes; `x` holds `geometry.padded_k()` values; `partials` holds `N * 64 * 16`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn pass<const N: usize>(
    tiles: [&[u8]; N],
    geometry: &Geometry,
    special_scales: bool,
    x: &[f32],
    partials: &mut [f32],
) {
    debug_assert!(tiles.iter().all(|tile| tile.len() >= geometry.tile_bytes() + READ_PAST));
    debug_assert!(partials.len() >= N * PARTIALS * TILE_ROWS && x.len() >= geometry.padded_k());
    let e2m1 = _mm512_setr_ps(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0);
    let partial = |i: usize, l: usize| (i * PARTIALS + l) * TILE_ROWS;
    for c in 0..CHUNKS {
        let chunk = geometry.chunk_offset(c);
        for s in 0..geometry.superblocks(c) {
            let at = chunk + s * BLOCK_BYTES;
            // SAFETY: block `at` and the READ_PAST bytes after it lie inside every tile (the
            // caller's contract: whole tiles and the bytes past them).
            let block: [*const u8; N] = tiles.map(|tile| unsafe { tile.as_ptr().add(at) });
            // The next pass's N tiles (back to back after these) as one stream into L2, as far
            // through it as this pass is through its tiles: N blocks' lines per block.
            let tile_bytes = geometry.tile_bytes();
            let next = tiles[0].as_ptr().wrapping_add(N * tile_bytes + N * at);
            for q in 0..BLOCK_GROUPS {
                let l = c * BLOCK_GROUPS + q;
                let mut acc = [_mm512_setzero_ps(); N];
                if s > 0 {
                    for i in 0..N {
                        // SAFETY: partial l of tile i lies inside `partials`; unaligned.
                        acc[i] = unsafe { _mm512_loadu_ps(partials.as_ptr().add(partial(i, l))) };
                    }
                }
                let mut scale = [_mm512_setzero_ps(); N];
                for i in 0..N {
                    // SAFETY: 16 scale codes of group q lie inside the block; unaligned.
                    let codes = unsafe { _mm_loadu_si128(block[i].add(q * TILE_ROWS).cast()) };
                    scale[i] = decode_scales(codes, special_scales);
                }
                // SAFETY: group q's 16 activations lie below the padded K, which `x` holds.
                let xs = unsafe { x.as_ptr().add(geometry.activation(c, s) + q * GROUP_SIZE) };
                for half in 0..2 {
                    let word_at = word_offset(q, half);
                    // N blocks' lines for each block of this pass, spread over its 16 group halves.
                    let first = (2 * q + half) * N * (BLOCK_BYTES / 64) / 16;
                    let last = (2 * q + half + 1) * N * (BLOCK_BYTES / 64) / 16;
                    for line in first..last {
                        // A prefetch never faults: the next pass may lie past the matrix.
                        _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(64 * line).cast());
                    }
                    // SAFETY: 16 words of group q's half lie inside the block; unaligned.
                    let words: [__m512i; N] = block.map(|b| unsafe { _mm512_loadu_si512(b.add(word_at).cast()) });
                    // Element j's codes in the low 4 bits of each row's lane: for even j the words
                    // loaded j / 2 bytes further on, for odd j the words shifted (as the AVX-512F
                    // kernel does).
                    macro_rules! element {
                        ($j:literal) => {
                            // SAFETY: element 8 half + j is one of group q's 16.
                            let xv = unsafe { *xs.add(8 * half + $j) };
                            let products = _mm512_mul_ps(e2m1, _mm512_set1_ps(xv));
                            for i in 0..N {
                                let index = if $j % 2 == 0 && $j > 0 {
                                    // SAFETY: 64 bytes from `word_at + j / 2` lie inside the block
                                    // and the 3 bytes after it (READ_PAST); unaligned.
                                    unsafe { _mm512_loadu_si512(block[i].add(word_at + $j / 2).cast()) }
                                } else {
                                    _mm512_srli_epi32::<{ 4 * $j }>(words[i])
                                };
                                let product = _mm512_permutexvar_ps(index, products);
                                acc[i] = _mm512_fmadd_ps(scale[i], product, acc[i]);
                            }
                        };
                    }
                    element!(0);
                    element!(1);
                    element!(2);
                    element!(3);
                    element!(4);
                    element!(5);
                    element!(6);
                    element!(7);
                }
                for i in 0..N {
                    // SAFETY: as for the load above; unaligned store.
                    unsafe { _mm512_storeu_ps(partials.as_mut_ptr().add(partial(i, l)), acc[i]) };
                }
            }
        }
        if geometry.superblocks(c) == 0 {
            // A chunk with no group: its partials are zero.
            for i in 0..N {
                store_partials(
                    &[[_mm512_setzero_ps(); BLOCK_GROUPS]],
                    c * BLOCK_GROUPS,
                    &mut partials[partial(i, 0)..],
                );
            }
        }
    }
}

// `tile_partials` has a pass for each count of tiles up to this.
const _: () = assert!(PRODUCT_TILES == 4);

/// The 64 partials of one token for each of `tiles` (1 to [`PRODUCT_TILES`]; see [`pass`]).
///
/// # Safety
/// The CPU must support AVX-512F; `tiles`, `x` and `partials` as for [`pass`].
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile_partials(
    tiles: &[&[u8]],
    geometry: &Geometry,
    special_scales: bool,
    x: &[f32],
    partials: &mut [f32],
) {
    // SAFETY: as this function's contract.
    unsafe {
        match *tiles {
            [a] => pass::<1>([a], geometry, special_scales, x, partials),
            [a, b] => pass::<2>([a, b], geometry, special_scales, x, partials),
            [a, b, c] => pass::<3>([a, b, c], geometry, special_scales, x, partials),
            [a, b, c, d] => pass::<4>([a, b, c, d], geometry, special_scales, x, partials),
            _ => unreachable!("{} tiles in one products pass", tiles.len()),
        }
    }
}
