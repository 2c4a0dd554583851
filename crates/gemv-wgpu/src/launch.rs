//! An engine's memory as the engine path takes it: byte ranges of its buffers (wgpu buffers count
//! bytes), the weights as two ranges with their shape, and a stack of experts as three. The call itself (M, row strides in
//! elements, family) is a `gemv_core::GemvCall`; `engine.rs` validates and records it.

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

/// An NVFP4 matrix in an engine's buffers: `[n][k/2]` packed E2M1 codes and `[n][k/16]` E4M3
/// scale codes (a whole matrix, or a row range of a bigger one: the rows are contiguous), and
/// its global scale. Neither range may share a buffer with Y (wgpu cannot bind one buffer
/// read-only and read-write in the same dispatch).
#[derive(Debug, Clone, Copy)]
pub struct WgpuWeights<'a> {
    /// `[n][k/2]` packed E2M1 codes.
    pub packed: WgpuRange<'a>,
    /// `[n][k/16]` E4M3 scale codes.
    pub scales: WgpuRange<'a>,
    /// The matrix's global scale.
    pub global_scale: f32,
    /// Weight rows.
    pub n: usize,
    /// Weight columns (a multiple of 16).
    pub k: usize,
}

/// A routed layer's experts in an engine's buffers: `E` NVFP4 matrices stacked as `[E][n][k/2]`
/// packed E2M1 codes and `[E][n][k/16]` E4M3 scale codes, and their global scales as `[E]` f32
/// (one per expert) or a single f32 (shared). None of the ranges may share a buffer with Y.
#[derive(Debug, Clone, Copy)]
pub struct WgpuExperts<'a> {
    /// `[E][n][k/2]` packed E2M1 codes.
    pub packed: WgpuRange<'a>,
    /// `[E][n][k/16]` E4M3 scale codes.
    pub scales: WgpuRange<'a>,
    /// `[E]` f32 global scales, or one f32 for every expert (4-byte aligned).
    pub global_scales: WgpuRange<'a>,
    /// Experts in the stack.
    pub experts: usize,
    /// Rows of each expert.
    pub n: usize,
    /// Columns of each expert (a multiple of 16).
    pub k: usize,
}
