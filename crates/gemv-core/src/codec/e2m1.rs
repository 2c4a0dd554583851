//! FP4 E2M1 ("fn": no infinity, no NaN). Nibble `s e1 e0 m`.

/// The largest E2M1 magnitude.
pub const E2M1_MAX: f32 = 6.0;

/// Magnitudes of codes 0..=7; bit 3 is the sign.
const MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Decodes the low nibble of `code` (the high nibble is ignored). 0x8 decodes to -0.0.
#[inline]
pub fn decode_e2m1(code: u8) -> f32 {
    let magnitude = MAGNITUDES[usize::from(code & 0x7)];
    if code & 0x8 != 0 { -magnitude } else { magnitude }
}

/// Encodes with round-to-nearest-even. Magnitudes above 6 (and infinities) saturate to ±6, as
/// ml_dtypes' `float4_e2m1fn` does. NaN has no E2M1 code: it encodes to +0 (the quantizer never
/// produces one; documented in docs/numerics.md).
pub fn encode_e2m1(value: f32) -> u8 {
    if value.is_nan() {
        return 0;
    }
    let sign = if value.is_sign_negative() { 0x8 } else { 0 };
    let magnitude = f64::from(value.abs());
    // Grid spacing: 0.5 below 2, 1 in [2, 4), 2 in [4, 6].
    let rounded = if magnitude < 2.0 {
        super::round_to_multiple(magnitude, -1)
    } else if magnitude < 4.0 {
        super::round_to_multiple(magnitude, 0)
    } else {
        super::round_to_multiple(magnitude, 1).min(f64::from(E2M1_MAX))
    };
    let code = MAGNITUDES.iter().position(|&m| f64::from(m) == rounded).unwrap_or(7) as u8;
    sign | code
}
