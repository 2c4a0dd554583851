//! f32/bf16 -> NVFP4 following NVIDIA ModelOpt's recipe (docs/numerics.md):
//!
//! - `global_scale = amax / (6 * 448)` over the whole tensor (1.0 when the tensor is all zero);
//! - per 16 consecutive k of a row: `ratio = block_amax / (6 * global_scale)`; an all-zero block
//!   gets 1.0; the ratio is clamped to `[2^-9, 448]` (the smallest E4M3 subnormal and the
//!   largest finite value, so a block far below the tensor's maximum keeps a usable scale instead
//!   of underflowing to zero) and rounded to E4M3;
//! - `s = x / (decoded_scale * global_scale)`, `code = sign(s < 0) | e2m1_rne(|s|)` saturating at
//!   6: a zero that was negative zero gets the positive code, a tiny negative value rounding to
//!   zero keeps its sign.
//!
//! Each step is ModelOpt's (nvidia-modelopt 0.47 `NVFP4QTensor`), in its f32 order; a committed
//! fixture written by ModelOpt itself checks it byte for byte (`gemv-cli/tests/modelopt.rs`).

use crate::codec::{E2M1_MAX, E4M3_MAX, bf16_to_f32, decode_e4m3, encode_e2m1, encode_e4m3_saturating};
use crate::shape::{GROUP_SIZE, validate_weight_shape};
use crate::{CoreError, Nvfp4Matrix, Result};

/// The smallest block scale: E4M3's smallest subnormal, 2^-9.
const SMALLEST_SCALE: f32 = 1.0 / 512.0;

/// Quantizes row-major f32 values `[N, K]`. Non-finite values are an error naming the element.
pub fn quantize_f32(values: &[f32], n: usize, k: usize) -> Result<Nvfp4Matrix> {
    quantize_f32_with_amax(values, n, k, 0.0)
}

/// Like [`quantize_f32`], with the global scale taken from `max(shared_amax, the tensor's own
/// amax)`: layers an engine fuses into one GEMM (q/k/v, gate/up) share one global scale, as
/// ModelOpt's export gives them, so every block scale still fits E4M3.
pub fn quantize_f32_with_amax(values: &[f32], n: usize, k: usize, shared_amax: f32) -> Result<Nvfp4Matrix> {
    validate_weight_shape(n, k)?;
    if values.len() != n * k {
        return Err(CoreError::LengthMismatch { what: "values", expected: n * k, found: values.len(), m: 0, n, k });
    }
    if let Some(index) = values.iter().position(|v| !v.is_finite()) {
        return Err(CoreError::NonFiniteWeight { row: index / k, col: index % k, value: values[index] });
    }
    let amax = values.iter().fold(shared_amax.abs(), |acc, v| acc.max(v.abs()));
    let global_scale = global_scale_for_amax(amax);
    let mut packed = vec![0u8; n * k / 2];
    let mut scales = vec![0u8; n * k / GROUP_SIZE];
    quantize_rows(values, k, global_scale, &mut packed, &mut scales)?;
    Nvfp4Matrix::from_parts(packed, scales, global_scale, n, k)
}

/// The global scale of a tensor whose largest magnitude is `amax`: `amax / (6 * 448)`, 1.0 for
/// an all-zero tensor. It is 0.0 when `amax` is below `2688 * 2^-149` (the division underflows):
/// every value of such a tensor then quantizes to zero.
pub fn global_scale_for_amax(amax: f32) -> f32 {
    if amax > 0.0 { amax / (E2M1_MAX * E4M3_MAX) } else { 1.0 }
}

/// Quantizes whole rows of a tensor, `values` `[rows, K]`, with the tensor's global scale (from
/// [`global_scale_for_amax`] over the whole tensor): their packed bytes into `packed`
/// (`values.len() / 2`) and their block scales into `scales` (`values.len() / 16`). Rows are
/// independent given the global scale, so a tensor quantized piece by piece has the bits of
/// [`quantize_f32_with_amax`] over the whole. A non-finite value is an error naming its row
/// (counted within `values`) and column.
pub fn quantize_rows(values: &[f32], k: usize, global_scale: f32, packed: &mut [u8], scales: &mut [u8]) -> Result<()> {
    let rows = values.len().checked_div(k).unwrap_or(0);
    validate_weight_shape(rows.max(1), k)?;
    for (what, expected, found) in [
        ("values", rows * k, values.len()),
        ("packed", values.len() / 2, packed.len()),
        ("scales", values.len() / GROUP_SIZE, scales.len()),
    ] {
        if expected != found {
            return Err(CoreError::LengthMismatch { what, expected, found, m: 0, n: rows, k });
        }
    }
    if let Some(index) = values.iter().position(|v| !v.is_finite()) {
        return Err(CoreError::NonFiniteWeight { row: index / k, col: index % k, value: values[index] });
    }
    packed.fill(0);
    let unit = E2M1_MAX * global_scale;
    for (block_index, block) in values.chunks_exact(GROUP_SIZE).enumerate() {
        let block_amax = block.iter().fold(0f32, |acc, v| acc.max(v.abs()));
        let ratio = block_amax / unit;
        let ratio = if ratio == 0.0 { 1.0 } else { ratio.clamp(SMALLEST_SCALE, E4M3_MAX) };
        let scale_code = encode_e4m3_saturating(ratio);
        scales[block_index] = scale_code;
        let step = decode_e4m3(scale_code) * global_scale;
        for (j, &value) in block.iter().enumerate() {
            // `step` is 0 only when the global scale underflowed (amax below 2688 * 2^-149).
            let scaled = if step > 0.0 { value / step } else { 0.0 };
            let code = if scaled < 0.0 { 0x8 } else { 0 } | encode_e2m1(scaled.abs());
            let flat = block_index * GROUP_SIZE + j;
            packed[flat / 2] |= if flat.is_multiple_of(2) { code } else { code << 4 };
        }
    }
    Ok(())
}

/// Quantizes row-major bf16 values (raw bits) `[N, K]`.
pub fn quantize_bf16(values: &[u16], n: usize, k: usize) -> Result<Nvfp4Matrix> {
    let widened: Vec<f32> = values.iter().map(|&b| bf16_to_f32(b)).collect();
    quantize_f32(&widened, n, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor quantized a few rows at a time has the bits of the whole, given the whole's
    /// global scale; a NaN is named by its row within the piece.
    #[test]
    fn rows_quantized_piece_by_piece_match_the_whole_tensor() {
        let (n, k) = (7, 48);
        let values: Vec<f32> = (0..n * k).map(|i| ((i * 53 % 97) as f32 - 48.0) * 0.37).collect();
        let whole = quantize_f32_with_amax(&values, n, k, 30.0).expect("quantized");
        let amax = values.iter().fold(30f32, |a, v| a.max(v.abs()));
        let global = global_scale_for_amax(amax);
        assert_eq!(global, whole.global_scale());
        let (mut packed, mut scales) = (vec![0xFFu8; n * k / 2], vec![0u8; n * k / 16]);
        for rows in [0..3, 3..4, 4..7] {
            let piece = &values[rows.start * k..rows.end * k];
            let (p, s) = (rows.start * k / 2..rows.end * k / 2, rows.start * k / 16..rows.end * k / 16);
            quantize_rows(piece, k, global, &mut packed[p], &mut scales[s]).expect("piece");
        }
        let (whole_packed, whole_scales, _) = whole.into_parts();
        assert_eq!((packed, scales), (whole_packed, whole_scales));

        let mut bad = values[k..3 * k].to_vec();
        bad[k + 5] = f32::NAN;
        let error = quantize_rows(&bad, k, global, &mut [0; 48], &mut [0; 6]).expect_err("NaN");
        assert!(matches!(error, CoreError::NonFiniteWeight { row: 1, col: 5, .. }), "{error:?}");
        let short = quantize_rows(&values[..k], k, global, &mut [0; 23], &mut [0; 3]);
        assert!(matches!(short, Err(CoreError::LengthMismatch { what: "packed", .. })), "{short:?}");
        // Below 2688 x 2^-149 the global scale underflows to zero and every code is zero.
        assert_eq!(global_scale_for_amax(f32::from_bits(1) * 1000.0), 0.0);
        assert_eq!(global_scale_for_amax(0.0), 1.0);
    }
}
