//! X transposed once per launch into the row kernels' lane layout.
//!
//! A kernel advances `width` consecutive groups together, element j of each at a time, so for
//! token t, block b (groups `b * width ..`) and element j it wants the `width` activations
//! `x[t][16 * (b * width + lane) + j]` side by side. Blocks are padded to whole superblocks of
//! 64 groups (one group per partial sum); groups past the end are zero, which the kernels pair
//! with zero weights: `fma(0, 0, a) = a` for every partial (a partial is never -0).

use crate::lines::Lines;
use gemv_core::{GROUP_SIZE, PARTIALS};

/// 2^116: finite activations at least this large can overflow a product with a weight.
const PRODUCT_OVERFLOW_X: f32 = f32::from_bits(0x7980_0000);
use gemv_core::codec::bf16_to_f32;

/// Transposes the whole blocks of `W` groups of one token's row into `[block][j][lane]` order
/// and returns how many there were. Fixed-size arrays leave the compiler no bounds to check (one
/// group at a time, strided, took 43 us for M = 8, K = 5120 here).
fn transpose_blocks<const W: usize>(row: &[u16], token: &mut [f32]) -> usize {
    let (groups, _) = row.as_chunks::<GROUP_SIZE>();
    let (vectors, _) = token.as_chunks_mut::<W>();
    let mut whole = 0;
    for (groups, vectors) in groups.chunks_exact(W).zip(vectors.chunks_exact_mut(GROUP_SIZE)) {
        let (Ok(groups), Ok(vectors)) =
            (<&[[u16; GROUP_SIZE]; W]>::try_from(groups), <&mut [[f32; W]; GROUP_SIZE]>::try_from(vectors))
        else {
            break;
        };
        for (j, vector) in vectors.iter_mut().enumerate() {
            for (value, group) in vector.iter_mut().zip(groups) {
                *value = bf16_to_f32(group[j]);
            }
        }
        whole += 1;
    }
    whole
}

/// X as f32 in `[t][block][j][lane]` order, on cache lines (every block is whole lines).
#[derive(Debug, Clone)]
pub struct TransposedX {
    values: Lines,
    width: usize,
    blocks: usize,
    m: usize,
    products_finite: bool,
}

impl TransposedX {
    /// Transposes `x: [m][k]` bf16 bits for kernels of `width` lanes.
    pub fn new(x: &[u16], m: usize, k: usize, width: usize) -> Self {
        let groups = k / GROUP_SIZE;
        let blocks = groups.div_ceil(PARTIALS) * (PARTIALS / width);
        let block_len = GROUP_SIZE * width;
        let mut values = Lines::zeroed(m * blocks * block_len);
        // |e2m1 * e4m3| <= 2688 < 2^12, so below 2^116 no product of finite values overflows:
        // on the bits, a finite magnitude from 2^116 up is 0x7980..0x7F7F. Folded without a
        // branch per element.
        let overflow_x = PRODUCT_OVERFLOW_X.to_bits() >> 16;
        let products_finite = !x.iter().fold(false, |large, &bits| {
            let magnitude = u32::from(bits & 0x7FFF);
            large | (magnitude >= overflow_x && magnitude < 0x7F80)
        });
        for (t, row) in x.chunks_exact(k).take(m).enumerate() {
            let token = &mut values[t * blocks * block_len..(t + 1) * blocks * block_len];
            let whole = match width {
                16 => transpose_blocks::<16>(row, token),
                8 => transpose_blocks::<8>(row, token),
                _ => 0,
            };
            // The last, partial block (and any width without a specialisation) element by element.
            for (g, group) in row.chunks_exact(GROUP_SIZE).enumerate().skip(whole * width) {
                let (b, lane) = (g / width, g % width);
                let block = &mut token[b * block_len..(b + 1) * block_len];
                for (value, &bits) in block[lane..].iter_mut().step_by(width).zip(group) {
                    *value = bf16_to_f32(bits);
                }
            }
        }
        Self { values, width, blocks, m, products_finite }
    }

    /// Whether no product of a weight and these activations can overflow f32 (every finite
    /// |x| < 2^116; NaN and infinite x included, they give the same results fused or not). Then
    /// `a + ws * x` equals `fma(ws, x, a)` everywhere: the portable kernel can skip the fused
    /// operation, which is a library call where the target has no FMA instruction.
    pub fn products_finite(&self) -> bool {
        self.products_finite
    }

    /// Blocks of `width` groups per row, a whole number of 64-group superblocks (the last ones may
    /// be partly or wholly padding).
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Tokens.
    pub fn m(&self) -> usize {
        self.m
    }

    /// The `16 * width` activations of token `t`, block `b`.
    pub fn block(&self, t: usize, b: usize) -> &[f32] {
        self.blocks_from(t, b, 1)
    }

    /// The activations of token `t`, blocks `b .. b + count`, contiguous.
    pub fn blocks_from(&self, t: usize, b: usize, count: usize) -> &[f32] {
        let len = GROUP_SIZE * self.width;
        let start = (t * self.blocks + b) * len;
        &self.values[start..start + count * len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_hold_consecutive_groups_and_padding_is_zero() {
        // 11 groups: one whole block of 8 and a partial one, or a partial block of 16; 70 groups:
        // several whole blocks of either width and a partial one.
        for (groups, width) in [(11, 8), (11, 16), (70, 8), (70, 16)] {
            let (m, k) = (2, 16 * groups);
            // Distinct bit patterns, all normal numbers.
            let x: Vec<u16> = (0..m * k).map(|i| (0x3C00 + i) as u16).collect();
            let xt = TransposedX::new(&x, m, k, width);
            assert_eq!(xt.blocks(), groups.div_ceil(64) * 64 / width, "whole 64-group superblocks");
            for t in 0..m {
                for b in 0..xt.blocks() {
                    assert_eq!(xt.block(t, b).as_ptr() as usize % 64, 0, "block {b} of token {t} on a cache line");
                }
                for g in 0..xt.blocks() * width {
                    for j in 0..16 {
                        let found = xt.block(t, g / width)[j * width + g % width];
                        let expected = if g < groups { bf16_to_f32(x[t * k + 16 * g + j]) } else { 0.0 };
                        assert_eq!(found, expected, "width {width}, {groups} groups: t={t} g={g} j={j}");
                    }
                }
            }
        }
    }
}
