//! The PTX builds of the kernel modules: the source each is compiled from, for which
//! architecture, with which defines, and which devices load it. One table, read by `gemv-cuda`
//! (which PTX a device loads, which of the emulator's entry points a capability resolves) and by
//! xtask (what `cargo xtask kernels` compiles, which build `cargo xtask sass` reports for each
//! architecture, which capabilities the mutation pass judges a source on).
//!
//! A module may come in several builds of one source that compute the same bits: the exact
//! family's `w4a16_gemv` has an sm_75 build (scales looked up in a shared-memory table) and an
//! sm_89 build (scales converted by `cvt.rn.f16x2.e4m3x2`, fewer instructions per weight). A device
//! runs the newest build it can load ([`module_build`]).
//!
//! Each module also has a build for programmatic dependent launch (sm_90 and newer,
//! [`ModuleBuild::dependent_launch`]): the same kernels, which start streaming their weights
//! while the previous kernel on the stream finishes and read X only after it has (PTX
//! `griddepcontrol`). It is loaded only for launches that ask for it
//! ([`dependent_module_build`]); [`module_build`] never picks it.

use crate::{FAST_MODULE_NAME, Family, KERNELS, MODULE_NAME};

/// One PTX build of a kernel module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleBuild {
    /// The registry module it serves ([`MODULE_NAME`], [`FAST_MODULE_NAME`]).
    pub module: &'static str,
    /// The kernel source it is compiled from: `cuda/<source>.cu` in gemv-kernels.
    pub source: &'static str,
    /// Its PTX: `ptx/<ptx>.ptx` in gemv-kernels.
    pub ptx: &'static str,
    /// Its `.target`: the lowest compute capability that can load it.
    pub minimum: (i32, i32),
    /// Preprocessor symbols defined when compiling it.
    pub defines: &'static [&'static str],
    /// What the emulator appends to its kernels' names (the emulator links every build into one
    /// library); empty for the first build of a module.
    pub emulator_suffix: &'static str,
    /// Built for programmatic dependent launch (`GEMV_DEPENDENT_LAUNCH`): each kernel lets the
    /// next one launch at its start, and reads X and the routing and writes Y only after
    /// `griddepcontrol.wait` (weights and scales before it). Launched without the attribute it
    /// computes what the module's other builds compute.
    pub dependent_launch: bool,
}

impl ModuleBuild {
    /// The virtual architecture it is compiled for, as NVRTC's `-arch` takes it (`compute_89`).
    pub fn virtual_arch(&self) -> String {
        format!("compute_{}{}", self.minimum.0, self.minimum.1)
    }

    /// The family of the kernels it holds.
    pub fn family(&self) -> Option<Family> {
        KERNELS.iter().find(|spec| spec.module == self.module).map(|spec| spec.family)
    }
}

/// Every build of every registry module.
pub const MODULE_BUILDS: [ModuleBuild; 5] = [
    ModuleBuild {
        module: MODULE_NAME,
        source: "w4a16_gemv",
        ptx: "w4a16_gemv",
        minimum: (7, 5),
        defines: &[],
        emulator_suffix: "",
        dependent_launch: false,
    },
    ModuleBuild {
        module: MODULE_NAME,
        source: "w4a16_gemv",
        ptx: "w4a16_gemv_sm89",
        minimum: (8, 9),
        defines: &["GEMV_SCALES_BY_CVT"],
        emulator_suffix: "_sm89",
        dependent_launch: false,
    },
    ModuleBuild {
        module: MODULE_NAME,
        source: "w4a16_gemv",
        ptx: "w4a16_gemv_sm90_dependent",
        minimum: (9, 0),
        defines: &["GEMV_SCALES_BY_CVT", "GEMV_DEPENDENT_LAUNCH"],
        emulator_suffix: "_sm90_dependent",
        dependent_launch: true,
    },
    ModuleBuild {
        module: FAST_MODULE_NAME,
        source: "w4a16_fast",
        ptx: "w4a16_fast",
        minimum: (8, 0),
        defines: &[],
        emulator_suffix: "",
        dependent_launch: false,
    },
    ModuleBuild {
        module: FAST_MODULE_NAME,
        source: "w4a16_fast",
        ptx: "w4a16_fast_sm90_dependent",
        minimum: (9, 0),
        defines: &["GEMV_DEPENDENT_LAUNCH"],
        emulator_suffix: "_sm90_dependent",
        dependent_launch: true,
    },
];

/// The build of `module` a device of compute capability `capability` runs: of those it can load,
/// the one for the newest architecture. `None` when it can load none (the fast family below
/// sm_80) or the module is unknown.
pub fn module_build(module: &str, capability: (i32, i32)) -> Option<&'static ModuleBuild> {
    module_builds(module)
        .filter(|build| !build.dependent_launch && build.minimum <= capability)
        .max_by_key(|build| build.minimum)
}

/// The build of `module` for programmatic dependent launches on a device of compute capability
/// `capability`: `None` below its architecture (sm_90), where such launches do not exist.
pub fn dependent_module_build(module: &str, capability: (i32, i32)) -> Option<&'static ModuleBuild> {
    module_builds(module)
        .filter(|build| build.dependent_launch && build.minimum <= capability)
        .max_by_key(|build| build.minimum)
}

/// Every build of `module`, in table order.
pub fn module_builds(module: &str) -> impl Iterator<Item = &'static ModuleBuild> + '_ {
    MODULE_BUILDS.iter().filter(move |build| build.module == module)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_capability_runs_the_newest_build_it_can_load() {
        let exact = |capability| module_build(MODULE_NAME, capability).map(|build| build.ptx);
        assert_eq!(exact((7, 0)), None);
        assert_eq!(exact((7, 5)), Some("w4a16_gemv"));
        assert_eq!(exact((8, 6)), Some("w4a16_gemv"));
        assert_eq!(exact((8, 9)), Some("w4a16_gemv_sm89"));
        assert_eq!(exact((9, 0)), Some("w4a16_gemv_sm89"));
        assert_eq!(exact((12, 1)), Some("w4a16_gemv_sm89"));
        assert_eq!(module_build(FAST_MODULE_NAME, (7, 5)), None);
        assert_eq!(module_build(FAST_MODULE_NAME, (8, 6)).map(|build| build.ptx), Some("w4a16_fast"));
        assert_eq!(module_build(FAST_MODULE_NAME, (9, 0)).map(|build| build.ptx), Some("w4a16_fast"));
        assert_eq!(module_build("nonexistent", (9, 0)), None);
    }

    #[test]
    fn dependent_builds_serve_only_dependent_launches_from_sm_90() {
        for module in [MODULE_NAME, FAST_MODULE_NAME] {
            assert_eq!(dependent_module_build(module, (8, 9)), None);
            for capability in [(9, 0), (10, 0), (12, 1)] {
                let build = dependent_module_build(module, capability).expect("a dependent build from sm_90");
                assert!(build.dependent_launch && build.defines.contains(&"GEMV_DEPENDENT_LAUNCH"));
                assert!(module_build(module, capability).is_some_and(|plain| !plain.dependent_launch));
            }
        }
        // The exact family's dependent build converts scales as the sm_89 build does.
        let exact = dependent_module_build(MODULE_NAME, (9, 0)).expect("exact");
        assert!(exact.defines.contains(&"GEMV_SCALES_BY_CVT"));
    }

    #[test]
    fn builds_are_distinct_and_name_their_family() {
        for (i, build) in MODULE_BUILDS.iter().enumerate() {
            assert!(build.family().is_some(), "{} serves no registry module", build.ptx);
            for other in &MODULE_BUILDS[i + 1..] {
                assert_ne!(build.ptx, other.ptx, "two builds write one PTX file");
                if build.module == other.module {
                    if build.dependent_launch == other.dependent_launch {
                        assert_ne!(build.minimum, other.minimum, "{}: two builds for one architecture", build.module);
                    }
                    assert_ne!(build.emulator_suffix, other.emulator_suffix, "{}: emulator names clash", build.module);
                }
            }
        }
        assert_eq!(MODULE_BUILDS[0].virtual_arch(), "compute_75");
        assert_eq!(module_build(MODULE_NAME, (9, 0)).and_then(ModuleBuild::family), Some(Family::Exact));
    }
}
