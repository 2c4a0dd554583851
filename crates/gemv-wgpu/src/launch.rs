//! One launch over an engine's buffers, as the engine describes it: the ranges of X, the
//! weights and Y, and the shape and strides. The engine path (`engine.rs`) validates and records
//! it; the dispatch (`backend/dispatch.rs`) binds it.

/// `len` bytes at `offset` of an engine's buffer (which needs `STORAGE` usage).
#[derive(Debug, Clone, Copy)]
pub struct WgpuRange<'a> {
    /// The buffer.
    pub buffer: &'a wgpu::Buffer,
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// One launch over an engine's buffers: `y[m][n] = W x[m][k]` with W the `packed`/`scales`
/// ranges (a whole matrix, or a row range of a bigger one: the rows are contiguous).
#[derive(Debug, Clone, Copy)]
pub struct WgpuGemv<'a> {
    /// m rows of k bf16, `x_row_stride` elements apart, 2-byte aligned.
    pub x: WgpuRange<'a>,
    /// `[n][k/2]` packed E2M1 codes.
    pub packed: WgpuRange<'a>,
    /// `[n][k/16]` E4M3 scale codes.
    pub scales: WgpuRange<'a>,
    /// m rows of n bf16, `y_row_stride` elements apart, 2-byte aligned, in a different buffer
    /// from the inputs (wgpu cannot bind one buffer read-only and read-write in the same
    /// dispatch); elements between rows are not written.
    pub y: WgpuRange<'a>,
    /// The matrix's global scale.
    pub global_scale: f32,
    /// Tokens (at most the kernel's width).
    pub m: usize,
    /// Weight rows.
    pub n: usize,
    /// Weight columns (a multiple of 16).
    pub k: usize,
    /// Elements from one row of X to the next (k for contiguous rows).
    pub x_row_stride: usize,
    /// Elements from one row of Y to the next (n for contiguous rows).
    pub y_row_stride: usize,
}
