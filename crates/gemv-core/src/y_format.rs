//! What a launch writes into Y: the contract's bf16 result, or the f32 value that result rounds.

/// The f32 every NaN of an f32 Y is written as: its bf16 rounding is 0x7FC0, the bf16 result's NaN.
pub const F32_Y_NAN: u32 = 0x7FC0_0000;

/// Y's element type.
///
/// [`YFormat::F32`] serves a row-parallel tensor-parallel shard: each rank multiplies its slice of
/// K and the engine's all-reduce sums the ranks' f32 values, rounding once, where bf16 outputs
/// would round on every rank. Each element is the value the bf16 result rounds (the exact
/// family's `total * global_scale`, the fast family's the same within its bound), every NaN
/// written as [`F32_Y_NAN`]; rounding it to bf16 gives the [`YFormat::Bf16`] result bit for bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum YFormat {
    /// bf16, the contract's result.
    #[default]
    Bf16,
    /// f32, the value before the bf16 rounding.
    F32,
}

impl YFormat {
    /// Bytes of one element of Y (also its alignment).
    pub const fn element_bytes(self) -> usize {
        match self {
            YFormat::Bf16 => 2,
            YFormat::F32 => 4,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for f32 {}
}

/// An element type Y may be given as on a typed engine path, which names its format: bf16 bits
/// (`u16`, [`half::bf16`]) or `f32` (sealed: the kernels write one of these two formats).
pub trait YElement: bytemuck::Pod + sealed::Sealed {
    /// The format a Y of this element type is written in.
    const FORMAT: YFormat;
}

impl YElement for u16 {
    const FORMAT: YFormat = YFormat::Bf16;
}
impl YElement for half::bf16 {
    const FORMAT: YFormat = YFormat::Bf16;
}
impl YElement for f32 {
    const FORMAT: YFormat = YFormat::F32;
}

/// The f32 Y element of `value`: `value`, or [`F32_Y_NAN`] for any NaN.
pub fn f32_y_element(value: f32) -> f32 {
    if value.is_nan() { f32::from_bits(F32_Y_NAN) } else { value }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::f32_to_bf16;

    #[test]
    fn an_f32_element_rounds_to_the_bf16_result_nan_included() {
        for bits in [0x3F80_0000u32, 0x3F80_8000, 0x3F81_8000, 0x7F7F_FFFF, 0x8000_0001, 0xFF80_0000] {
            let value = f32::from_bits(bits);
            assert_eq!(f32_to_bf16(f32_y_element(value)), f32_to_bf16(value), "{bits:#x}");
        }
        for nan in [0x7FFF_FFFFu32, 0xFFC0_0000, 0x7F80_0001] {
            assert_eq!(f32_y_element(f32::from_bits(nan)).to_bits(), F32_Y_NAN);
            assert_eq!(f32_to_bf16(f32::from_bits(F32_Y_NAN)), 0x7FC0);
        }
        assert_eq!((YFormat::Bf16.element_bytes(), YFormat::F32.element_bytes()), (2, 4));
        assert_eq!(YFormat::default(), YFormat::Bf16);
    }
}
