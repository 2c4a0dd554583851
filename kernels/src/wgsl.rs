//! The WGSL template of the wgpu backend: one source, specialised per tier by gemv-wgpu, with one
//! of two entry points: a launch's (rows at strides) or a grouped launch's (a routed
//! mixture-of-experts layer).

/// `wgsl/w4a16_gemv.wgsl`: everything but the entry point (`{{ENTRY}}`).
pub const W4A16_GEMV: &str = include_str!("../wgsl/w4a16_gemv.wgsl");

/// `wgsl/w4a16_gemv_entry.wgsl`: a single launch's entry point.
pub const GEMV_ENTRY: &str = include_str!("../wgsl/w4a16_gemv_entry.wgsl");

/// `wgsl/w4a16_grouped_entry.wgsl`: a grouped launch's bindings and entry point.
pub const GROUPED_ENTRY: &str = include_str!("../wgsl/w4a16_grouped_entry.wgsl");
