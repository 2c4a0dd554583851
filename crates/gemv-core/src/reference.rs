//! An independent f64 reference and the error bound the f32 contract must stay within
//! (verification gate 3; the derivation is in docs/numerics.md).
//!
//! The reference dequantizes each weight in f64 and sums in f64 in natural k order. The bound per
//! output, with `u = 2^-24`, `S = sum |w x|`, `E` the f64 sum and `gs` the global scale:
//!
//! ```text
//! h     = 16 * ceil(G / 64) - 1 + 6      // roundings any one product goes through
//! g_h   = h u / (1 - h u)
//! bound = |gs| (g_h S + (u + 2^-8 (1 + u)) (|E| + g_h S)) + 2^-133
//! ```
//!
//! The first term is the f32 summation error, the second the f32 multiply by `gs` and the bf16
//! rounding (relative 2^-9), the last the spacing of bf16 subnormals. An f32 Y (the values before
//! the bf16 rounding) has the bound without the rounding's terms:
//! `|gs| (g_h S + u (|E| + g_h S)) + 2^-149`.
//!
//! The fast (tensor-core) family's bound, [`fast_reference`], has the same form with what a
//! tensor core may do instead of IEEE f32 steps: any summation order inside and across mma steps
//! (depth `h = 128 * ceil(K / 1024) + 7`: at most 16 additions per mma step, 8 steps per 128-k
//! chunk of a warp, 7 to add the 8 warps), each addition truncating rather than rounding
//! (`u = 2^-23`), and every product and partial sum below f32's normal range flushed to zero
//! (`2^-126` each, at most `2K + 8` of them, scaled back by the kernel's `2^7`:
//! `(2K + 8) * 2^-119 * |gs|` in all).

use crate::codec::{bf16_to_f32, decode_e2m1, decode_e4m3};
use crate::contract::PARTIALS;
use crate::shape::GROUP_SIZE;
use crate::{CoreError, GemvShape, Nvfp4View, Result};

/// One output of the f64 reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReferenceOutput {
    /// `gs * sum(w x)` in f64.
    pub value: f64,
    /// The largest distance the contract's bf16 output may have from `value`.
    pub bound: f64,
    /// The largest distance an f32 Y (the value before the bf16 rounding) may have from `value`.
    pub f32_bound: f64,
}

impl ReferenceOutput {
    /// Whether a bf16 output (raw bits) is within the bound. NaN matches only a NaN reference.
    pub fn admits(&self, found: u16) -> bool {
        self.within(f64::from(bf16_to_f32(found)), self.bound)
    }

    /// Whether an f32 Y element is within the f32 bound. NaN matches only a NaN reference.
    pub fn admits_f32(&self, found: f32) -> bool {
        self.within(f64::from(found), self.f32_bound)
    }

    fn within(&self, found: f64, bound: f64) -> bool {
        if self.value.is_nan() || found.is_nan() {
            return self.value.is_nan() && found.is_nan();
        }
        if self.value.is_infinite() || found.is_infinite() {
            return self.value == found;
        }
        (found - self.value).abs() <= bound
    }
}

/// Rounding steps any one product passes through in the contract for K/16 = `groups`.
pub fn rounding_depth(groups: usize) -> usize {
    GROUP_SIZE * groups.div_ceil(PARTIALS) - 1 + PARTIALS.trailing_zeros() as usize
}

/// Addition steps any one product passes through in the fast family for K/16 = `groups`, in any
/// order the tensor cores may use.
pub fn fast_rounding_depth(groups: usize) -> usize {
    128 * (groups * GROUP_SIZE).div_ceil(1024) + 7
}

/// The f64 reference and bound for every output, `[m][N]` row-major.
pub fn f64_reference(w: &Nvfp4View<'_>, x: &[u16], m: usize) -> Result<Vec<ReferenceOutput>> {
    reference_with(w, x, m, rounding_depth(w.groups()), 2f64.powi(-24), 0.0)
}

/// The f64 reference with the fast family's bound (see the module docs).
pub fn fast_reference(w: &Nvfp4View<'_>, x: &[u16], m: usize) -> Result<Vec<ReferenceOutput>> {
    reference_with(w, x, m, fast_rounding_depth(w.groups()), 2f64.powi(-23), (2 * w.k() + 8) as f64 * 2f64.powi(-119))
}

/// `depth` addition steps of relative error `u` each, plus `flushed` (before the global scale)
/// for products a device may flush.
fn reference_with(
    w: &Nvfp4View<'_>,
    x: &[u16],
    m: usize,
    depth: usize,
    u: f64,
    flushed: f64,
) -> Result<Vec<ReferenceOutput>> {
    let (n, k) = (w.n(), w.k());
    GemvShape::new(m, n, k)?;
    if x.len() != m * k {
        return Err(CoreError::LengthMismatch { what: "x", expected: m * k, found: x.len(), m, n, k });
    }
    let h = depth as f64;
    let gamma = h * u / (1.0 - h * u);
    let gs = f64::from(w.global_scale());
    let dequantized: Vec<f64> = (0..n * k)
        .map(|i| f64::from(decode_e2m1(w.code(i / k, i % k))) * f64::from(decode_e4m3(w.scale_code(i / k, i % k))))
        .collect();
    let mut out = Vec::with_capacity(m * n);
    for t in 0..m {
        let xs: Vec<f64> = x[t * k..(t + 1) * k].iter().map(|&b| f64::from(bf16_to_f32(b))).collect();
        for row in dequantized.chunks_exact(k) {
            let (mut sum, mut abs_sum) = (0f64, 0f64);
            for (wv, xv) in row.iter().zip(&xs) {
                sum += wv * xv;
                abs_sum += (wv * xv).abs();
            }
            let summation = gamma * abs_sum + flushed;
            let bound =
                gs.abs() * (summation + (u + 2f64.powi(-8) * (1.0 + u)) * (sum.abs() + summation)) + 2f64.powi(-133);
            let f32_bound = gs.abs() * (summation + u * (sum.abs() + summation)) + 2f64.powi(-149);
            out.push(ReferenceOutput { value: gs * sum, bound, f32_bound });
        }
    }
    Ok(out)
}
