//! The committed PTX of this crate's kernels/, built by `cargo xtask kernels` with the pinned
//! NVRTC 12.2 (PTX ISA 8.2, which drivers from the 535 branch on JIT). Embedded so that building
//! this crate needs no CUDA toolkit; `cargo xtask kernels --check` keeps it fresh.
//!
//! A registry module may come in several builds of one source for different architectures: the
//! exact family's `w4a16_gemv` has an sm_75 build (scales looked up in a shared-memory table) and
//! an sm_89 build (scales converted by `cvt.rn.f16x2.e4m3x2`, about 3% fewer instructions (modelled) per
//! weight). Both compute the same bits; [`module_build`] picks the one a device runs, for the
//! driver and the emulator alike.

/// PTX of module `w4a16_gemv`'s sm_75 build: the exact family (`.target sm_75`).
pub const W4A16_GEMV: &str = include_str!("../ptx/w4a16_gemv.ptx");

/// PTX of module `w4a16_gemv`'s sm_89 build: the exact family, scales through
/// `cvt.rn.f16x2.e4m3x2` (`.target sm_89`).
pub const W4A16_GEMV_SM89: &str = include_str!("../ptx/w4a16_gemv_sm89.ptx");

/// PTX of module `w4a16_fast`: the fast (tensor-core) family (`.target sm_80`).
pub const W4A16_FAST: &str = include_str!("../ptx/w4a16_fast.ptx");

/// One build of a registry module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleBuild {
    /// The registry module it serves ([`gemv_core::MODULE_NAME`], [`gemv_core::FAST_MODULE_NAME`]).
    pub module: &'static str,
    /// Its PTX.
    pub ptx: &'static str,
    /// The lowest compute capability that can load it (its `.target`).
    pub minimum: (i32, i32),
    /// What the emulator appends to its kernels' names (the emulator links every build into one
    /// library); empty for the first build of a module.
    pub emulator_suffix: &'static str,
}

/// Every build of every registry module.
pub const MODULES: [ModuleBuild; 3] = [
    ModuleBuild { module: gemv_core::MODULE_NAME, ptx: W4A16_GEMV, minimum: (7, 5), emulator_suffix: "" },
    ModuleBuild { module: gemv_core::MODULE_NAME, ptx: W4A16_GEMV_SM89, minimum: (8, 9), emulator_suffix: "_sm89" },
    ModuleBuild { module: gemv_core::FAST_MODULE_NAME, ptx: W4A16_FAST, minimum: (8, 0), emulator_suffix: "" },
];

/// The build of `module` a device of compute capability `capability` runs: of those it can load,
/// the one for the newest architecture. `None` when it can load none (the fast family below
/// sm_80) or the module is unknown.
pub fn module_build(module: &str, capability: (i32, i32)) -> Option<&'static ModuleBuild> {
    builds(module).filter(|build| build.minimum <= capability).max_by_key(|build| build.minimum)
}

/// Every build of `module`.
pub fn builds(module: &str) -> impl Iterator<Item = &'static ModuleBuild> + '_ {
    MODULES.iter().filter(move |build| build.module == module)
}
