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
//! rounding (relative 2^-9), the last the spacing of bf16 subnormals.

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
}

impl ReferenceOutput {
    /// Whether a bf16 output (raw bits) is within the bound. NaN matches only a NaN reference.
    pub fn admits(&self, found: u16) -> bool {
        let found = f64::from(bf16_to_f32(found));
        if self.value.is_nan() || found.is_nan() {
            return self.value.is_nan() && found.is_nan();
        }
        if self.value.is_infinite() || found.is_infinite() {
            return self.value == found;
        }
        (found - self.value).abs() <= self.bound
    }
}

/// Rounding steps any one product passes through in the contract for K/16 = `groups`.
pub fn rounding_depth(groups: usize) -> usize {
    GROUP_SIZE * groups.div_ceil(PARTIALS) - 1 + PARTIALS.trailing_zeros() as usize
}

/// The f64 reference and bound for every output, `[m][N]` row-major.
pub fn f64_reference(w: &Nvfp4View<'_>, x: &[u16], m: usize) -> Result<Vec<ReferenceOutput>> {
    let (n, k) = (w.n(), w.k());
    GemvShape::new(m, n, k)?;
    if x.len() != m * k {
        return Err(CoreError::LengthMismatch { what: "x", expected: m * k, found: x.len(), m, n, k });
    }
    let u = 2f64.powi(-24);
    let h = rounding_depth(w.groups()) as f64;
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
            let summation = gamma * abs_sum;
            let bound =
                gs.abs() * (summation + (u + 2f64.powi(-8) * (1.0 + u)) * (sum.abs() + summation)) + 2f64.powi(-133);
            out.push(ReferenceOutput { value: gs * sum, bound });
        }
    }
    Ok(out)
}
