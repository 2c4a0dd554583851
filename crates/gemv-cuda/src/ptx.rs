//! The committed PTX of gemv-kernels (built by `cargo xtask kernels` with the pinned NVRTC 12.2,
//! PTX ISA 8.2, which drivers from the 535 branch on JIT), embedded so that building this crate
//! needs no CUDA toolkit.
//!
//! A registry module may come in several builds of one source for different architectures
//! ([`MODULE_BUILDS`], one table in `gemv-core` that xtask compiles from): the exact family's
//! `w4a16_gemv` has an sm_75 build (scales looked up in a shared-memory table) and an sm_89 build
//! (scales converted by `cvt.rn.f16x2.e4m3x2`, fewer instructions per weight, modelled). Both
//! compute the same bits; [`module_build`] picks the one a device runs, for the driver and the
//! emulator alike.

pub use gemv_kernels::ptx::{
    W4A16_FAST, W4A16_FAST_SM90_DEPENDENT, W4A16_GEMV, W4A16_GEMV_SM89, W4A16_GEMV_SM90_DEPENDENT,
};

pub use gemv_core::{MODULE_BUILDS, ModuleBuild, dependent_module_build, module_build, module_builds as builds};

/// The embedded PTX of `build`; `None` for a build this crate does not embed (a test checks that
/// every one of [`MODULE_BUILDS`] is).
pub fn text(build: &ModuleBuild) -> Option<&'static str> {
    gemv_kernels::ptx::ALL.iter().find(|(stem, _)| *stem == build.ptx).map(|(_, text)| *text)
}
