//! The arguments of one gemv launch over a backend's buffers. What the launch needs is
//! gemv-core's [`LaunchShape`]; this adds what only buffers have: bounds and overlap.

use crate::{BufferRange, Error, Result};
use gemv_core::{GemvShape, KernelSpec, LaunchShape, Operand, YFormat, strided_span};

/// `Y[0..m) = contract(W, X[0..m))` for one kernel launch.
///
/// X and Y are row-major with row strides in elements (`x_row_stride >= K`,
/// `y_row_stride >= N`): an engine's activations are often rows of a wider buffer. Contiguous
/// rows have strides K and N ([`GemvArgs::contiguous`]). Elements between rows are neither read
/// (X) nor written (Y).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemvArgs {
    /// X: row t at element `t * x_row_stride`, K bf16 each; at least
    /// `2 ((m - 1) x_row_stride + K)` bytes, 2-byte aligned.
    pub x: BufferRange,
    /// Packed E2M1 weights `[N][K/2]`.
    pub packed: BufferRange,
    /// E4M3 block scales `[N][K/16]`.
    pub scales: BufferRange,
    /// Y: row t at element `t * y_row_stride`, N elements of `y_format` each (`e` bytes: 2 for
    /// bf16, 4 for f32); at least `e ((m - 1) y_row_stride + N)` bytes, `e`-byte aligned; nothing
    /// else is written.
    pub y: BufferRange,
    /// The FP32 global scale.
    pub global_scale: f32,
    /// Rows of X and Y.
    pub m: usize,
    /// Weight rows.
    pub n: usize,
    /// Weight columns.
    pub k: usize,
    /// Elements from one row of X to the next (at least K).
    pub x_row_stride: usize,
    /// Elements from one row of Y to the next (at least N).
    pub y_row_stride: usize,
    /// Y's element type: the contract's bf16 result or the f32 value it rounds.
    pub y_format: YFormat,
}

impl GemvArgs {
    /// Arguments with contiguous X `[m][K]` and Y `[m][N]` (row strides K and N).
    #[allow(clippy::too_many_arguments)]
    pub fn contiguous(
        x: BufferRange,
        packed: BufferRange,
        scales: BufferRange,
        y: BufferRange,
        global_scale: f32,
        m: usize,
        n: usize,
        k: usize,
    ) -> Self {
        Self { x, packed, scales, y, global_scale, m, n, k, x_row_stride: k, y_row_stride: n, y_format: YFormat::Bf16 }
    }

    /// The bytes of Y a launch may write: from its first row's first element to its last row's
    /// last (elements between rows inside this span are not written).
    pub fn y_written(&self) -> BufferRange {
        let bytes = strided_span(self.m, self.n, self.y_row_stride).saturating_mul(self.y_format.element_bytes());
        self.y.buffer.range(self.y.offset, bytes)
    }

    /// The bytes of X a launch may read: from its first row's first element to its last row's
    /// last (elements between rows are not read).
    pub fn x_read(&self) -> BufferRange {
        self.x.buffer.range(self.x.offset, strided_span(self.m, self.k, self.x_row_stride).saturating_mul(2))
    }

    /// The bytes of the packed weights a launch reads.
    pub fn packed_read(&self) -> BufferRange {
        self.packed.buffer.range(self.packed.offset, self.n * self.k / 2)
    }

    /// The bytes of the scales a launch reads.
    pub fn scales_read(&self) -> BufferRange {
        self.scales.buffer.range(self.scales.offset, self.n * self.k / gemv_core::GROUP_SIZE)
    }

    /// The launch's shape, validated (M, N, K and strides that cover their rows).
    pub fn launch_shape(&self) -> Result<LaunchShape> {
        Ok(LaunchShape::new(self.m, self.n, self.k, self.x_row_stride, self.y_row_stride)?.with_y_format(self.y_format))
    }

    /// Checks the shape, the kernel's width, every range against what the launch needs
    /// ([`LaunchShape::check_operand`]) and inside its buffer, and that Y overlaps no input.
    /// Every backend calls this before touching memory.
    pub fn validate(&self, kernel: &KernelSpec) -> Result<GemvShape> {
        let launch = self.launch_shape()?;
        launch.check_width(kernel)?;
        for (operand, range) in Operand::ALL.into_iter().zip([self.x, self.packed, self.scales, self.y]) {
            range.check_bounds(operand.name())?;
            launch.check_operand(operand, range.offset, range.len)?;
        }
        for (what, input) in [("x", self.x), ("packed", self.packed), ("scales", self.scales)] {
            if self.y_written().overlaps(&input) {
                return Err(Error::OutputOverlaps { what, buffer: input.buffer.id() });
            }
        }
        Ok(launch.shape())
    }
}

/// Refuses a Y format other than bf16 on `backend`, one that writes the contract's bf16 result
/// only ([`Error::Unsupported`], as for any capability a backend lacks).
pub fn bf16_y_only(backend: &'static str, format: YFormat) -> Result<()> {
    match format {
        YFormat::Bf16 => Ok(()),
        _ => Err(Error::Unsupported { backend, what: "f32 Y (YFormat::F32)" }),
    }
}
