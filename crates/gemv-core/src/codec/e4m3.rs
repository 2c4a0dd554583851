//! FP8 E4M3 "fn" (bias 7, no infinity, 0x7F/0xFF are NaN, max 448, subnormals `m * 2^-9`).

/// The largest finite E4M3 magnitude.
pub const E4M3_MAX: f32 = 448.0;

/// Decodes one E4M3 byte exactly to f32.
#[inline]
pub fn decode_e4m3(code: u8) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((code >> 3) & 0xF);
    let mantissa = f32::from(code & 0x7);
    if code & 0x7F == 0x7F {
        return f32::from_bits(0x7FC0_0000 | (u32::from(code & 0x80) << 24));
    }
    let magnitude =
        if exponent == 0 { mantissa * (2f32).powi(-9) } else { (1.0 + mantissa / 8.0) * (2f32).powi(exponent - 7) };
    sign * magnitude
}

/// The 256 E4M3 codes decoded ([`decode_e4m3`]; 0x7F and 0xFF are NaN), built once: the table
/// the contract and the CPU kernels look scales up in.
pub fn e4m3_table() -> &'static [f32; 256] {
    static TABLE: std::sync::OnceLock<[f32; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| std::array::from_fn(|code| decode_e4m3(code as u8)))
}

/// Encodes with round-to-nearest-even, as ml_dtypes' `float8_e4m3fn`: magnitudes that round
/// above 448 (>= 464, and infinities) become NaN (0x7F, sign kept); NaN stays NaN.
pub fn encode_e4m3(value: f32) -> u8 {
    let sign = if value.is_sign_negative() { 0x80 } else { 0 };
    if value.is_nan() {
        return sign | 0x7F;
    }
    let magnitude = f64::from(value.abs());
    match encode_magnitude(magnitude) {
        Some(bits) => sign | bits,
        None => sign | 0x7F,
    }
}

/// Like [`encode_e4m3`] but clamps magnitudes above 448 to 448 (the quantizer's rule). NaN still
/// encodes to NaN.
pub fn encode_e4m3_saturating(value: f32) -> u8 {
    if value.is_nan() {
        return encode_e4m3(value);
    }
    encode_e4m3(value.clamp(-E4M3_MAX, E4M3_MAX))
}

/// Magnitude bits (7 bits) or None on overflow.
fn encode_magnitude(magnitude: f64) -> Option<u8> {
    if magnitude.is_infinite() {
        return None;
    }
    // Binade exponent from the bits (exact), clamped to the subnormal range; spacing 2^(e-3).
    let exponent = if magnitude >= 2f64.powi(-6) { ((magnitude.to_bits() >> 52) as i32) - 1023 } else { -6 };
    let rounded = super::round_to_multiple(magnitude, exponent - 3);
    if rounded > f64::from(E4M3_MAX) {
        return None;
    }
    // The rounded value is on the E4M3 grid (possibly the next binade's first point).
    (0u8..=0x7E).find(|&code| f64::from(decode_e4m3(code)) == rounded)
}
