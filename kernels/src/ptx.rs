//! The committed PTX of `cuda/`, built by `cargo xtask kernels` with the pinned NVRTC 12.2 (PTX
//! ISA 8.2, which drivers from the 535 branch on JIT); `cargo xtask kernels --check` keeps it
//! fresh. Which build a device loads is gemv-core's `MODULE_BUILDS` table.

/// Module `w4a16_gemv`'s sm_75 build: the exact family (`.target sm_75`).
pub const W4A16_GEMV: &str = include_str!("../ptx/w4a16_gemv.ptx");

/// Module `w4a16_gemv`'s sm_89 build: the exact family, scales through `cvt.rn.f16x2.e4m3x2`
/// (`.target sm_89`).
pub const W4A16_GEMV_SM89: &str = include_str!("../ptx/w4a16_gemv_sm89.ptx");

/// Module `w4a16_gemv`'s build for programmatic dependent launch: the sm_89 build's kernels,
/// which read X only after `griddepcontrol.wait` (`.target sm_90`).
pub const W4A16_GEMV_SM90_DEPENDENT: &str = include_str!("../ptx/w4a16_gemv_sm90_dependent.ptx");

/// Module `w4a16_fast`: the fast (tensor-core) family (`.target sm_80`).
pub const W4A16_FAST: &str = include_str!("../ptx/w4a16_fast.ptx");

/// Module `w4a16_fast`'s build for programmatic dependent launch (`.target sm_90`).
pub const W4A16_FAST_SM90_DEPENDENT: &str = include_str!("../ptx/w4a16_fast_sm90_dependent.ptx");

/// Every committed PTX by its file stem (gemv-core's `ModuleBuild::ptx`).
pub const ALL: [(&str, &str); 5] = [
    ("w4a16_gemv", W4A16_GEMV),
    ("w4a16_gemv_sm89", W4A16_GEMV_SM89),
    ("w4a16_gemv_sm90_dependent", W4A16_GEMV_SM90_DEPENDENT),
    ("w4a16_fast", W4A16_FAST),
    ("w4a16_fast_sm90_dependent", W4A16_FAST_SM90_DEPENDENT),
];
