//! The element types X and Y may be given as: raw bf16 bits (`u16`) or [`half::bf16`], so an
//! engine hands over its own tensors without a cast or `unsafe` at the call site.

mod sealed {
    pub trait Sealed {}
    impl Sealed for u16 {}
    impl Sealed for half::bf16 {}
}

/// A 2-byte element holding bf16 bits: `u16` or [`half::bf16`] (sealed: the kernels read and
/// write the bits, so no other type fits).
pub trait Bf16Element: bytemuck::Pod + sealed::Sealed {}

impl Bf16Element for u16 {}
impl Bf16Element for half::bf16 {}

/// The bf16 bits of `elements`, in place.
pub fn bf16_bits<T: Bf16Element>(elements: &[T]) -> &[u16] {
    bytemuck::cast_slice(elements)
}

/// The bf16 bits of `elements`, in place and writable.
pub fn bf16_bits_mut<T: Bf16Element>(elements: &mut [T]) -> &mut [u16] {
    bytemuck::cast_slice_mut(elements)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_bf16_and_raw_bits_are_the_same_bits_in_place() {
        let mut values = [half::bf16::from_f32(1.0), half::bf16::from_f32(-2.5), half::bf16::NAN];
        assert_eq!(bf16_bits(&values), [0x3F80, 0xC020, half::bf16::NAN.to_bits()]);
        assert_eq!(bf16_bits(&values).as_ptr().cast::<half::bf16>(), values.as_ptr(), "no copy");
        bf16_bits_mut(&mut values)[1] = 0x4000;
        assert_eq!(values[1], half::bf16::from_f32(2.0));
        assert_eq!(bf16_bits(&[7u16, 8]), [7, 8]);
    }
}
