//! X widened to f32 once per launch, each token's row padded with zeros to the arrangement's
//! padded K (whole superblocks), on cache lines.

use crate::lines::Lines;
use gemv_core::codec::bf16_to_f32;

/// 2^116: finite activations at least this large can overflow a product with a weight.
const PRODUCT_OVERFLOW_X: f32 = f32::from_bits(0x7980_0000);

/// Splits `m` tokens into passes of at most `most`, as even as possible (9 = 5 + 4, not 8 + 1).
pub(crate) fn passes(m: usize, most: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let count = m.div_ceil(most.max(1)).max(1);
    (0..count).map(move |i| (i * m / count)..((i + 1) * m / count))
}

/// X as f32, `[t][padded_k]`, zeros past K.
#[derive(Debug, Clone)]
pub(crate) struct Activations {
    values: Lines,
    padded_k: usize,
    products_finite: bool,
}

impl Activations {
    /// Widens `m` rows of `k` bf16 bits, row t at `x[t * x_row_stride..]`, into rows of
    /// `padded_k >= k` values.
    pub(crate) fn new(x: &[u16], x_row_stride: usize, m: usize, k: usize, padded_k: usize) -> Self {
        debug_assert!(padded_k >= k && x_row_stride >= k);
        // Every row starts on a cache line.
        let row = padded_k.next_multiple_of(16);
        let mut values = Lines::zeroed(m * row);
        // |e2m1 * e4m3| <= 2688 < 2^12, so below 2^116 no product of finite values overflows:
        // on the bits, a finite magnitude from 2^116 up is 0x7980..0x7F7F. Folded without a
        // branch per element.
        let overflow_x = PRODUCT_OVERFLOW_X.to_bits() >> 16;
        let mut large = false;
        for (t, target) in values.chunks_exact_mut(row).take(m).enumerate() {
            for (value, &bits) in target.iter_mut().zip(&x[t * x_row_stride..][..k]) {
                let magnitude = u32::from(bits & 0x7FFF);
                large |= magnitude >= overflow_x && magnitude < 0x7F80;
                *value = bf16_to_f32(bits);
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

    /// Token `t`'s padded row.
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
    fn rows_are_widened_padded_with_zeros_and_on_cache_lines() {
        let (m, k, padded_k) = (3, 48, 1024);
        let x: Vec<u16> = (0..m * k).map(|i| (0x3C00 + i) as u16).collect();
        let activations = Activations::new(&x, k, m, k, padded_k);
        for t in 0..m {
            let row = activations.token(t);
            assert_eq!(row.as_ptr() as usize % 64, 0, "token {t} on a cache line");
            assert!(row.len() >= padded_k);
            for (i, &value) in row.iter().enumerate() {
                let expected = if i < k { bf16_to_f32(x[t * k + i]) } else { 0.0 };
                assert_eq!(value.to_bits(), expected.to_bits(), "t={t} i={i}");
            }
        }
        assert!(activations.products_finite());
        let mut large = x.clone();
        large[5] = 0x7A00; // 2^117
        assert!(!Activations::new(&large, k, m, k, padded_k).products_finite());
        large[5] = 0x7F80; // +Inf: the same fused or not
        assert!(Activations::new(&large, k, m, k, padded_k).products_finite());
    }
}
