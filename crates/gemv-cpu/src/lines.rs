//! f32 scratch that starts on a cache line.
//!
//! The kernels load and store whole 64-byte vectors of activations and partial sums. A `Vec<f32>`
//! is only as aligned as the allocator makes it (16 bytes from glibc's `malloc`, so 64-byte
//! vectors in it straddle two cache lines, and every activation load of the M > 2 loop and every
//! partial-sum load and store would be a split access). docs/cpu.md has the measured effect.

use bytemuck::{Pod, Zeroable};

/// One cache line of f32.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// `len` f32, zeroed, the first on a 64-byte boundary.
#[derive(Debug, Clone)]
pub(crate) struct Lines {
    lines: Vec<Line>,
    len: usize,
}

impl Lines {
    /// `len` zeros.
    pub(crate) fn zeroed(len: usize) -> Self {
        Self { lines: vec![Line::zeroed(); len.div_ceil(16)], len }
    }
}

impl std::ops::Deref for Lines {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl std::ops::DerefMut for Lines {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_cache_line_and_holds_len_zeros() {
        for len in [0, 1, 15, 16, 17, 1000] {
            let mut values = Lines::zeroed(len);
            assert_eq!(values.len(), len);
            assert_eq!(values.as_ptr() as usize % 64, 0, "len {len}");
            assert!(values.iter().all(|&v| v == 0.0));
            values.iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
            assert!(values.iter().enumerate().all(|(i, &v)| v == i as f32));
        }
    }
}
