//! X widened to f32 once per launch, each token's row in the order a tile's blocks use it (see
//! `Geometry::activation`), with zeros for the padding groups, on cache lines.

use crate::layout::Geometry;
use crate::lines::Lines;
use gemv_core::GROUP_SIZE;
use gemv_core::codec::bf16_to_f32;

/// 2^116: finite activations at least this large can overflow a product with a weight.
const PRODUCT_OVERFLOW_X: f32 = f32::from_bits(0x7980_0000);

/// Splits `m` tokens into passes of at most `most`, as even as possible (9 = 5 + 4, not 8 + 1).
pub(crate) fn passes(m: usize, most: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let count = m.div_ceil(most.max(1)).max(1);
    (0..count).map(move |i| (i * m / count)..((i + 1) * m / count))
}

/// X as f32, `[t][geometry.padded_k()]`, in the blocks' order.
#[derive(Debug, Clone)]
pub(crate) struct Activations {
    values: Lines,
    padded_k: usize,
    products_finite: bool,
}

impl Activations {
    /// Widens `m` rows of K bf16 bits, row t at `x[t * x_row_stride..]`, into rows in the blocks'
    /// order of `geometry`.
    pub(crate) fn new(x: &[u16], x_row_stride: usize, m: usize, geometry: &Geometry) -> Self {
        let k = geometry.k();
        debug_assert!(x_row_stride >= k);
        // Every row starts on a cache line.
        let row = geometry.padded_k().next_multiple_of(16);
        let mut values = Lines::zeroed(m * row);
        // |e2m1 * e4m3| <= 2688 < 2^12, so below 2^116 no product of finite values overflows:
        // on the bits, a finite magnitude from 2^116 up is 0x7980..0x7F7F. Folded without a
        // branch per element.
        let overflow_x = PRODUCT_OVERFLOW_X.to_bits() >> 16;
        let mut large = false;
        for (t, target) in values.chunks_exact_mut(row).take(m).enumerate() {
            for (g, group) in x[t * x_row_stride..][..k].chunks_exact(GROUP_SIZE).enumerate() {
                let at = geometry.group_activations(g);
                for (value, &bits) in target[at..at + GROUP_SIZE].iter_mut().zip(group) {
                    let magnitude = u32::from(bits & 0x7FFF);
                    large |= magnitude >= overflow_x && magnitude < 0x7F80;
                    *value = bf16_to_f32(bits);
                }
            }
        }
        Self { values, padded_k: row, products_finite: !large }
    }

    /// Whether no product of a weight and these activations can overflow f32 (every finite
    /// |x| < 2^116; NaN and infinite x included, they give the same results fused or not). Then
    /// `a + ws * x` equals `fma(ws, x, a)` everywhere: the portable kernel can skip the fused
    /// operation, which is a library call where the target has no FMA instruction.
    pub(crate) fn products_finite(&self) -> bool {
        self.products_finite
    }

    /// Token `t`'s row, in the blocks' order.
    pub(crate) fn token(&self, t: usize) -> &[f32] {
        &self.values[t * self.padded_k..(t + 1) * self.padded_k]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_cover_every_token_once_and_evenly() {
        for most in [1, 4, 8] {
            for m in 1..40 {
                let split: Vec<_> = passes(m, most).collect();
                assert_eq!(split.first().map(|r| r.start), Some(0));
                assert_eq!(split.last().map(|r| r.end), Some(m));
                assert!(split.windows(2).all(|w| w[0].end == w[1].start));
                let (shortest, longest) = (
                    split.iter().map(|r| r.len()).min().unwrap_or(0),
                    split.iter().map(|r| r.len()).max().unwrap_or(0),
                );
                assert!(longest <= most && longest - shortest <= 1 && shortest >= 1, "m {m}, most {most}: {split:?}");
            }
        }
    }

    #[test]
    fn rows_are_widened_in_the_blocks_order_with_zeros_and_on_cache_lines() {
        // 75 groups: padding groups in chunk 1's second block.
        let (m, k, stride) = (3, 16 * 75, 16 * 75 + 5);
        let geometry = Geometry::new(16, k);
        let x: Vec<u16> = (0..m * stride).map(|i| (0x3C00 + i) as u16).collect();
        let activations = Activations::new(&x, stride, m, &geometry);
        for t in 0..m {
            let row = activations.token(t);
            assert_eq!(row.as_ptr() as usize % 64, 0, "token {t} on a cache line");
            assert!(row.len() >= geometry.padded_k());
            let mut expected = vec![0f32; geometry.padded_k()];
            for i in 0..k {
                expected[geometry.group_activations(i / 16) + i % 16] = bf16_to_f32(x[t * stride + i]);
            }
            assert!(row[..geometry.padded_k()].iter().zip(&expected).all(|(a, b)| a.to_bits() == b.to_bits()), "t={t}");
        }
        assert!(activations.products_finite());
        let mut large = x.clone();
        large[2 * stride + 5] = 0x7A00; // 2^117
        assert!(!Activations::new(&large, stride, m, &geometry).products_finite());
        large[2 * stride + 5] = 0x7F80; // +Inf: the same fused or not
        assert!(Activations::new(&large, stride, m, &geometry).products_finite());
        // Elements between rows are not read.
        large[2 * stride - 1] = 0x7A00;
        assert!(Activations::new(&large, stride, m, &geometry).products_finite());
    }
}
