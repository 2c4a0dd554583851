//! The arguments of one gemv launch, validated once here for every backend.

use crate::{BufferRange, Error, Result};
use gemv_core::{GROUP_SIZE, GemvShape, KernelSpec};

/// `Y[0..m) = contract(W, X[0..m))` for one kernel launch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemvArgs {
    /// X `[m][K]` bf16, at least `2 m K` bytes, 2-byte aligned.
    pub x: BufferRange,
    /// Packed E2M1 weights `[N][K/2]`.
    pub packed: BufferRange,
    /// E4M3 block scales `[N][K/16]`.
    pub scales: BufferRange,
    /// Y `[m][N]` bf16, at least `2 m N` bytes, 2-byte aligned; bytes past row m are untouched.
    pub y: BufferRange,
    /// The FP32 global scale.
    pub global_scale: f32,
    /// Rows of X and Y.
    pub m: usize,
    /// Weight rows.
    pub n: usize,
    /// Weight columns.
    pub k: usize,
}

impl GemvArgs {
    /// The bytes of Y a launch writes: its first `m` rows.
    pub fn y_written(&self) -> BufferRange {
        self.y.buffer.range(self.y.offset, 2 * self.m * self.n)
    }

    /// The bytes of X a launch reads: its first `m` rows.
    pub fn x_read(&self) -> BufferRange {
        self.x.buffer.range(self.x.offset, 2 * self.m * self.k)
    }

    /// The bytes of the packed weights a launch reads.
    pub fn packed_read(&self) -> BufferRange {
        self.packed.buffer.range(self.packed.offset, self.n * self.k / 2)
    }

    /// The bytes of the scales a launch reads.
    pub fn scales_read(&self) -> BufferRange {
        self.scales.buffer.range(self.scales.offset, self.n * self.k / GROUP_SIZE)
    }

    /// Checks the shape, the kernel's width, every range's bounds, size and alignment, and that Y
    /// overlaps no input. Every backend calls this before touching memory.
    pub fn validate(&self, kernel: &KernelSpec) -> Result<GemvShape> {
        let shape = GemvShape::new(self.m, self.n, self.k)?;
        if self.m > kernel.max_m {
            return Err(Error::MExceedsWidth { kernel: kernel.name, m: self.m, width: kernel.max_m });
        }
        let (m, n, k) = (self.m, self.n, self.k);
        let needs = [
            ("x", self.x, 2 * m * k, 2),
            ("packed", self.packed, n * k / 2, 1),
            ("scales", self.scales, n * k / GROUP_SIZE, 1),
            ("y", self.y, 2 * m * n, 2),
        ];
        for (what, range, needed, align) in needs {
            range.check_bounds(what)?;
            if range.len < needed {
                return Err(Error::RangeTooSmall { what, len: range.len, needed, m, n, k });
            }
            if range.offset % align != 0 {
                return Err(Error::Misaligned { what, offset: range.offset, align });
            }
        }
        for (what, input) in [("x", self.x), ("packed", self.packed), ("scales", self.scales)] {
            if self.y_written().overlaps(&input) {
                return Err(Error::OutputOverlaps { what, buffer: input.buffer.id() });
            }
        }
        Ok(shape)
    }
}
