//! X once per launch, each token's row in the order a tile's blocks use it (see
//! `Geometry::activation`), with zeros for the padding groups, on cache lines: widened to f32 for
//! the fused multiply-add kernels, or kept as bf16 pairs for the pair kernel (see
//! [`Activations::reads_pairs`]).

use crate::layout::Geometry;
use crate::lines::Lines;
use gemv_core::GROUP_SIZE;
use gemv_core::codec::bf16_to_f32;

/// 2^116: finite activations at least this large can overflow a product with a weight.
const PRODUCT_OVERFLOW_X: f32 = f32::from_bits(0x7980_0000);

/// 2^-109: the smallest magnitude whose products with weights are all multiples of 2^-126 (see
/// [`Activations::reads_pairs`]).
const GRID_X: f32 = f32::from_bits(0x0900_0000);

/// Splits `m` tokens into passes of at most `most`, as even as possible (9 = 5 + 4, not 8 + 1).
pub(crate) fn passes(m: usize, most: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let count = m.div_ceil(most.max(1)).max(1);
    (0..count).map(move |i| (i * m / count)..((i + 1) * m / count))
}

/// What a scan of X found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scan {
    /// Every finite |x| < 2^116.
    products_finite: bool,
    /// Every x is zero, infinite, NaN or at least 2^-109 in magnitude.
    on_grid: bool,
}

impl Scan {
    /// Scans `m` rows of K bf16 bits, row t at `x[t * x_row_stride..]`. On the bits, a finite
    /// magnitude from 2^116 up is 0x7980..0x7F7F and a nonzero one below 2^-109 is 0x0001..0x08FF;
    /// folded without a branch per element.
    fn new(x: &[u16], x_row_stride: usize, m: usize, k: usize) -> Self {
        let (overflow_x, grid_x) = (PRODUCT_OVERFLOW_X.to_bits() >> 16, GRID_X.to_bits() >> 16);
        let (mut large, mut tiny) = (false, false);
        for t in 0..m {
            for &bits in &x[t * x_row_stride..][..k] {
                let magnitude = u32::from(bits & 0x7FFF);
                large |= magnitude >= overflow_x && magnitude < 0x7F80;
                tiny |= magnitude != 0 && magnitude < grid_x;
            }
        }
        Self { products_finite: !large, on_grid: !tiny }
    }
}

/// Token rows in one of the two forms.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Only x86 has a pair kernel.
#[derive(Debug, Clone)]
enum Rows {
    /// f32, one per element, `[t][row]`.
    Widened(Lines<f32>),
    /// Pairs, tokens interleaved (see [`Pairs`]).
    Pairs(Lines<u32>),
}

/// X as bf16 pairs, every token's pair `i` together: elements `2 i` and `2 i + 1` of token `t`
/// (in the blocks' order) as one word at `values[i * tokens + t]`, `2 i`'s bf16 bits high and
/// `2 i + 1`'s low. A pass of several tokens then reads one forward stream.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Only x86 has a pair kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pairs<'a> {
    pub(crate) values: &'a [u32],
    pub(crate) tokens: usize,
}

/// X, `[t][row]`, in the blocks' order.
#[derive(Debug, Clone)]
pub(crate) struct Activations {
    rows: Rows,
    /// Widened: f32 from one token's row to the next, a whole number of cache lines. Pairs: the
    /// tokens.
    row: usize,
    products_finite: bool,
}

impl Activations {
    /// X's `m` rows of K bf16 bits, row t at `x[t * x_row_stride..]`, in the blocks' order of
    /// `geometry`: as bf16 pairs when `pairs` asks for them and X allows them (see
    /// [`reads_pairs`](Self::reads_pairs)), widened to f32 otherwise.
    pub(crate) fn new(x: &[u16], x_row_stride: usize, m: usize, geometry: &Geometry, pairs: bool) -> Self {
        let k = geometry.k();
        debug_assert!(x_row_stride >= k);
        let scan = Scan::new(x, x_row_stride, m, k);
        let products_finite = scan.products_finite;
        if pairs && scan.products_finite && scan.on_grid {
            let mut values = Lines::<u32>::zeroed(geometry.padded_k() / 2 * m);
            // Group by group, so each group's 8 m words are written together.
            for g in 0..k / GROUP_SIZE {
                let at = geometry.group_activations(g) / 2;
                let target = &mut values[at * m..(at + GROUP_SIZE / 2) * m];
                for t in 0..m {
                    let group = &x[t * x_row_stride + g * GROUP_SIZE..][..GROUP_SIZE];
                    for (i, pair) in group.chunks_exact(2).enumerate() {
                        target[i * m + t] = u32::from(pair[0]) << 16 | u32::from(pair[1]);
                    }
                }
            }
            return Self { rows: Rows::Pairs(values), row: m, products_finite };
        }
        // Every row starts on a cache line.
        let row = geometry.padded_k().next_multiple_of(16);
        let mut values = Lines::<f32>::zeroed(m * row);
        for (t, target) in values.chunks_exact_mut(row).take(m).enumerate() {
            for (g, group) in x[t * x_row_stride..][..k].chunks_exact(GROUP_SIZE).enumerate() {
                let at = geometry.group_activations(g);
                for (value, &bits) in target[at..at + GROUP_SIZE].iter_mut().zip(group) {
                    *value = bf16_to_f32(bits);
                }
            }
        }
        Self { rows: Rows::Widened(values), row, products_finite }
    }

    /// Whether no product of a weight and these activations can overflow f32 (every finite
    /// |x| < 2^116; NaN and infinite x included, they give the same results fused or not). Then
    /// `a + ws * x` equals `fma(ws, x, a)` everywhere: the portable kernel can skip the fused
    /// operation, which is a library call where the target has no FMA instruction.
    pub(crate) fn products_finite(&self) -> bool {
        self.products_finite
    }

    /// Whether the rows are bf16 pairs, for the pair kernel, which adds two products of bf16
    /// weights and activations per instruction, each rounded to f32 in turn and flushing
    /// subnormal inputs and results to zero. Only for X that makes that the contract: every
    /// product is finite (see [`products_finite`](Self::products_finite)), and every x is zero,
    /// infinite, NaN or of magnitude at least 2^-109. A weight is a multiple of 2^-10 (E2M1
    /// steps of 1/2 times E4M3 steps of 2^-9), a bf16 x from 2^-109 up a multiple of 2^-116, so
    /// every product is a multiple of 2^-126, and so is every sum of them rounded to f32: no
    /// product, partial or input is subnormal, and nothing is flushed.
    pub(crate) fn reads_pairs(&self) -> bool {
        matches!(self.rows, Rows::Pairs(_))
    }

    /// Token `t`'s row widened to f32, in the blocks' order (`None` when the rows are pairs).
    pub(crate) fn widened(&self, t: usize) -> Option<&[f32]> {
        match &self.rows {
            Rows::Widened(values) => Some(&values[t * self.row..(t + 1) * self.row]),
            Rows::Pairs(_) => None,
        }
    }

    /// Every token's bf16 pairs (`None` when the rows are widened).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Only x86 has a pair kernel.
    pub(crate) fn pairs(&self) -> Option<Pairs<'_>> {
        match &self.rows {
            Rows::Pairs(values) => Some(Pairs { values, tokens: self.row }),
            Rows::Widened(_) => None,
        }
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
        let activations = Activations::new(&x, stride, m, &geometry, false);
        assert!(!activations.reads_pairs() && activations.pairs().is_none());
        for t in 0..m {
            let row = activations.widened(t).expect("widened rows");
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
        assert!(!Activations::new(&large, stride, m, &geometry, false).products_finite());
        large[2 * stride + 5] = 0x7F80; // +Inf: the same fused or not
        assert!(Activations::new(&large, stride, m, &geometry, false).products_finite());
        // Elements between rows are not read.
        large[2 * stride - 1] = 0x7A00;
        assert!(Activations::new(&large, stride, m, &geometry, false).products_finite());
    }

    #[test]
    fn pairs_hold_two_elements_first_one_high_in_the_blocks_order_tokens_together() {
        let (m, k, stride) = (3, 16 * 75, 16 * 75 + 5);
        let geometry = Geometry::new(16, k);
        let x: Vec<u16> = (0..m * stride).map(|i| (0x3C00 + i) as u16).collect();
        let activations = Activations::new(&x, stride, m, &geometry, true);
        assert!(activations.reads_pairs() && activations.widened(0).is_none());
        let pairs = activations.pairs().expect("pairs");
        assert_eq!((pairs.tokens, pairs.values.as_ptr() as usize % 64), (m, 0));
        // Padding groups' pairs are zero.
        let mut expected = vec![0u32; geometry.padded_k() / 2 * m];
        for t in 0..m {
            for i in (0..k).step_by(2) {
                let (first, second) = (u32::from(x[t * stride + i]), u32::from(x[t * stride + i + 1]));
                expected[(geometry.group_activations(i / 16) + i % 16) / 2 * m + t] = first << 16 | second;
            }
        }
        assert_eq!(pairs.values, &expected[..]);
    }

    #[test]
    fn pairs_only_where_every_product_and_sum_stays_on_the_grid() {
        let (m, k) = (2, 64);
        let geometry = Geometry::new(16, k);
        let reads_pairs = |value: u16| {
            let mut x = vec![0x3F80u16; m * k];
            x[k + 17] = value;
            Activations::new(&x, k, m, &geometry, true).reads_pairs()
        };
        // Zeros, infinities, NaN, 2^-109 and the largest below 2^116 keep the pairs.
        for value in [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0900, 0x8900, 0x797F, 0xF97F] {
            assert!(reads_pairs(value), "{value:#06x}");
        }
        // Subnormal, below 2^-109, or a product that can overflow: widened.
        for value in [0x0001, 0x8001, 0x007F, 0x0080, 0x08FF, 0x88FF, 0x7980, 0xF980, 0x7F7F] {
            assert!(!reads_pairs(value), "{value:#06x}");
        }
        assert!(!Activations::new(&vec![0x3F80u16; m * k], k, m, &geometry, false).reads_pairs(), "not asked");
    }
}
