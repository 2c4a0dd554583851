//! The WGSL template of the wgpu backend: one source, specialised per tier by gemv-wgpu.

/// `wgsl/w4a16_gemv.wgsl`.
pub const W4A16_GEMV: &str = include_str!("../wgsl/w4a16_gemv.wgsl");
