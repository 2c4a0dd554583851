//! The committed PTX of this crate's kernels/, built by `cargo xtask kernels` with the pinned
//! NVRTC 12.2 (PTX ISA 8.2, which drivers from the 535 branch on JIT). Embedded so that building
//! this crate needs no CUDA toolkit; `cargo xtask kernels --check` keeps it fresh.

/// PTX of module `w4a16_gemv`: the exact family (`.target sm_75`).
pub const W4A16_GEMV: &str = include_str!("../ptx/w4a16_gemv.ptx");

/// PTX of module `w4a16_fast`: the fast (tensor-core) family (`.target sm_80`).
pub const W4A16_FAST: &str = include_str!("../ptx/w4a16_fast.ptx");

/// Each registry module, its PTX and the lowest compute capability that can load it.
pub const MODULES: [(&str, &str, (i32, i32)); 2] =
    [(gemv_core::MODULE_NAME, W4A16_GEMV, (7, 5)), (gemv_core::FAST_MODULE_NAME, W4A16_FAST, (8, 0))];

/// The PTX and minimum compute capability of `module`.
pub fn module(module: &str) -> Option<(&'static str, (i32, i32))> {
    MODULES.iter().find(|(name, _, _)| *name == module).map(|&(_, ptx, capability)| (ptx, capability))
}
