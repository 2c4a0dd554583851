//! The committed PTX of this crate's kernels/, built by `cargo xtask kernels` with the pinned
//! NVRTC 12.2 (PTX ISA 8.2, which drivers from the 535 branch on JIT). Embedded so that building
//! this crate needs no CUDA toolkit; `cargo xtask kernels --check` keeps it fresh.
//!
//! A registry module may come in several builds of one source for different architectures
//! ([`MODULE_BUILDS`], one table in `gemv-core` that xtask compiles from): the exact family's
//! `w4a16_gemv` has an sm_75 build (scales looked up in a shared-memory table) and an sm_89 build
//! (scales converted by `cvt.rn.f16x2.e4m3x2`, fewer instructions per weight, modelled). Both
//! compute the same bits; [`module_build`] picks the one a device runs, for the driver and the
//! emulator alike.

/// PTX of module `w4a16_gemv`'s sm_75 build: the exact family (`.target sm_75`).
pub const W4A16_GEMV: &str = include_str!("../ptx/w4a16_gemv.ptx");

/// PTX of module `w4a16_gemv`'s sm_89 build: the exact family, scales through
/// `cvt.rn.f16x2.e4m3x2` (`.target sm_89`).
pub const W4A16_GEMV_SM89: &str = include_str!("../ptx/w4a16_gemv_sm89.ptx");

/// PTX of module `w4a16_fast`: the fast (tensor-core) family (`.target sm_80`).
pub const W4A16_FAST: &str = include_str!("../ptx/w4a16_fast.ptx");

pub use gemv_core::{MODULE_BUILDS, ModuleBuild, module_build, module_builds as builds};

/// The embedded PTX of every build in [`MODULE_BUILDS`], by its file stem ([`ModuleBuild::ptx`]).
const EMBEDDED: [(&str, &str); 3] =
    [("w4a16_gemv", W4A16_GEMV), ("w4a16_gemv_sm89", W4A16_GEMV_SM89), ("w4a16_fast", W4A16_FAST)];

/// The embedded PTX of `build`; `None` for a build this crate does not embed (a test checks that
/// every one of [`MODULE_BUILDS`] is).
pub fn text(build: &ModuleBuild) -> Option<&'static str> {
    EMBEDDED.iter().find(|(stem, _)| *stem == build.ptx).map(|(_, text)| *text)
}
