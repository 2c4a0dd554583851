//! bfloat16 as raw `u16` bits: the top half of an f32.

/// The one NaN this project writes.
pub const BF16_NAN: u16 = 0x7FC0;

/// Round-to-nearest-even from f32; every NaN becomes [`BF16_NAN`]. Overflow rounds to infinity.
#[inline]
pub fn f32_to_bf16(value: f32) -> u16 {
    if value.is_nan() {
        return BF16_NAN;
    }
    let bits = value.to_bits();
    let lsb = (bits >> 16) & 1;
    ((bits + 0x7FFF + lsb) >> 16) as u16
}

/// Exact widening to f32.
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}
