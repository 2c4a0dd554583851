//! The portable tile kernel: 16-lane arrays, for any CPU. It multiplies and adds separately when
//! no product can overflow (then that is exactly the fused result) and uses the fused operation
//! otherwise, so the compiler can vectorise the common case on any target.

use super::e4m3_table;
use crate::layout::{BLOCK_BYTES, BLOCK_GROUPS, CHUNKS, Geometry, HALF_BYTES, TILE_ROWS, word_offset};
use gemv_core::codec::{decode_e2m1, f32_to_bf16};
use gemv_core::{GROUP_SIZE, PARTIALS, fused_multiply_add};

/// The 64 partials of each token of `x` for one tile (`partials[t][l][row]`), block by block in
/// the chains' order.
pub(crate) fn tile_partials(
    tile: &[u8],
    geometry: &Geometry,
    x: &[&[f32]],
    products_finite: bool,
    partials: &mut [f32],
) {
    let partials = &mut partials[..x.len() * PARTIALS * TILE_ROWS];
    partials.fill(0.0);
    let table = e4m3_table();
    for c in 0..CHUNKS {
        for s in 0..geometry.superblocks(c) {
            let block = &tile[geometry.chunk_offset(c) + s * BLOCK_BYTES..][..BLOCK_BYTES];
            for i in 0..BLOCK_GROUPS {
                let l = c * BLOCK_GROUPS + i;
                let first = geometry.activation(c, s) + i * GROUP_SIZE;
                let scales: [f32; TILE_ROWS] = std::array::from_fn(|r| table[usize::from(block[i * TILE_ROWS + r])]);
                for half in 0..2 {
                    let words = &block[word_offset(i, half)..][..HALF_BYTES];
                    let words: [u32; TILE_ROWS] = std::array::from_fn(|r| {
                        u32::from_le_bytes([words[4 * r], words[4 * r + 1], words[4 * r + 2], words[4 * r + 3]])
                    });
                    for j in 0..8 {
                        let ws: [f32; TILE_ROWS] =
                            std::array::from_fn(|r| decode_e2m1((words[r] >> (4 * j) & 0xF) as u8) * scales[r]);
                        for (t, x) in x.iter().enumerate() {
                            let xv = x[first + 8 * half + j];
                            let acc = &mut partials[(t * PARTIALS + l) * TILE_ROWS..][..TILE_ROWS];
                            if products_finite {
                                for (a, &w) in acc.iter_mut().zip(&ws) {
                                    *a += w * xv;
                                }
                            } else {
                                for (a, &w) in acc.iter_mut().zip(&ws) {
                                    *a = fused_multiply_add(w, xv, *a);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The contract's tree over each token's 64 partials (`partials[t][l][row]`, level by level over
/// whole rows of 16, so the compiler emits vector adds), then `bf16(total * global_scale)`.
pub(crate) fn finish(partials: &mut [f32], global_scale: f32, out: &mut [[u16; TILE_ROWS]]) {
    for (t, out) in out.iter_mut().enumerate() {
        let level = &mut partials[t * PARTIALS * TILE_ROWS..][..PARTIALS * TILE_ROWS];
        let mut d = PARTIALS / 2;
        while d >= 1 {
            let (low, high) = level.split_at_mut(d * TILE_ROWS);
            for (sum, &upper) in low.iter_mut().zip(&high[..d * TILE_ROWS]) {
                *sum += upper;
            }
            d /= 2;
        }
        for (value, &total) in out.iter_mut().zip(&level[..TILE_ROWS]) {
            *value = f32_to_bf16(total * global_scale);
        }
    }
}
