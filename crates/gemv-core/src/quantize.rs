//! f32/bf16 -> NVFP4 following NVIDIA ModelOpt's recipe (docs/numerics.md):
//!
//! - `global_scale = amax / (6 * 448)` over the whole tensor (1.0 when the tensor is all zero);
//! - per 16 consecutive k of a row: `scale = e4m3(block_amax / 6 / global_scale)`, saturating;
//! - `code = e2m1_rne(x / (decoded_scale * global_scale))`, saturating at ±6; a zero block scale
//!   gives code 0.

use crate::codec::{E2M1_MAX, E4M3_MAX, bf16_to_f32, decode_e4m3, encode_e2m1, encode_e4m3_saturating};
use crate::shape::{GROUP_SIZE, validate_weight_shape};
use crate::{CoreError, Nvfp4Matrix, Result};

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
    let global_scale = if amax > 0.0 { amax / (E2M1_MAX * E4M3_MAX) } else { 1.0 };

    let mut packed = vec![0u8; n * k / 2];
    let mut scales = vec![0u8; n * k / GROUP_SIZE];
    for (block_index, block) in values.chunks_exact(GROUP_SIZE).enumerate() {
        let block_amax = block.iter().fold(0f32, |acc, v| acc.max(v.abs()));
        let scale_code = encode_e4m3_saturating(block_amax / E2M1_MAX / global_scale);
        scales[block_index] = scale_code;
        let step = decode_e4m3(scale_code) * global_scale;
        for (j, &value) in block.iter().enumerate() {
            let code = if step > 0.0 { encode_e2m1(value / step) } else { 0 };
            let flat = block_index * GROUP_SIZE + j;
            packed[flat / 2] |= if flat.is_multiple_of(2) { code } else { code << 4 };
        }
    }
    Nvfp4Matrix::from_parts(packed, scales, global_scale, n, k)
}

/// Quantizes row-major bf16 values (raw bits) `[N, K]`.
pub fn quantize_bf16(values: &[u16], n: usize, k: usize) -> Result<Nvfp4Matrix> {
    let widened: Vec<f32> = values.iter().map(|&b| bf16_to_f32(b)).collect();
    quantize_f32(&widened, n, k)
}
