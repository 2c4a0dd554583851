//! Scratch of 32-bit values (f32 or u32) that starts on a cache line.
//!
//! The kernels load and store whole 64-byte vectors of activations and partial sums. A `Vec<f32>`
//! is only as aligned as the allocator makes it (16 bytes from glibc's `malloc`, so 64-byte
//! vectors in it straddle two cache lines, and every activation load of the M > 2 loop and every
//! partial-sum load and store would be a split access). docs/cpu.md has the measured effect.

use bytemuck::{Pod, Zeroable};
use std::marker::PhantomData;

/// One cache line of 32-bit values.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// A 32-bit value a line holds 16 of (every bit pattern valid, all-zero bits a zero).
pub(crate) trait LineValue: Pod {}
impl LineValue for f32 {}
impl LineValue for u32 {}

/// `len` values, zeroed, the first on a 64-byte boundary.
#[derive(Debug, Clone)]
pub(crate) struct Lines<T: LineValue = f32> {
    lines: Vec<Line>,
    len: usize,
    values: PhantomData<T>,
}

impl<T: LineValue> Lines<T> {
    /// `len` zeros.
    pub(crate) fn zeroed(len: usize) -> Self {
        const { assert!(std::mem::size_of::<T>() == 4) };
        Self { lines: vec![Line::zeroed(); len.div_ceil(16)], len, values: PhantomData }
    }
}

impl<T: LineValue> std::ops::Deref for Lines<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl<T: LineValue> std::ops::DerefMut for Lines<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_cache_line_and_holds_len_zeros() {
        for len in [0, 1, 15, 16, 17, 1000] {
            let mut values = Lines::<f32>::zeroed(len);
            assert_eq!(values.len(), len);
            assert_eq!(values.as_ptr() as usize % 64, 0, "len {len}");
            assert!(values.iter().all(|&v| v == 0.0));
            values.iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
            assert!(values.iter().enumerate().all(|(i, &v)| v == i as f32));
            let words = Lines::<u32>::zeroed(len);
            assert_eq!((words.len(), words.as_ptr() as usize % 64), (len, 0));
        }
    }
}
