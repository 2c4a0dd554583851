//! Properties of the committed PTX that the emulator cannot see: every registry kernel is in its
//! module's PTX, each declares the launcher's block size as its bound, each module targets the
//! architecture and PTX ISA docs/api.md promises, and nothing flushes subnormals (the E2M1 and
//! E4M3 decodes pass through subnormal intermediates, and the contracts keep subnormal products
//! and sums).

use gemv_cuda::launch::THREADS_PER_BLOCK;
use gemv_cuda::ptx::{MODULE_BUILDS, ModuleBuild, builds};

/// The text of entry `name`, from `.entry name(` to the next `.entry` (or the end).
fn entry<'a>(ptx: &'a str, name: &str) -> Option<&'a str> {
    let start = ptx.find(&format!(".entry {name}("))?;
    let rest = &ptx[start + 1..];
    Some(&ptx[start..start + 1 + rest.find(".entry ").unwrap_or(rest.len())])
}

/// A build's embedded PTX.
fn embedded(build: &ModuleBuild) -> &'static str {
    gemv_cuda::ptx::text(build).unwrap_or_else(|| panic!("{}: no embedded PTX", build.ptx))
}

#[test]
fn every_build_is_embedded() {
    for build in &MODULE_BUILDS {
        assert!(embedded(build).contains(".entry "), "{}: embedded PTX without entries", build.ptx);
    }
}

/// Every build's PTX of the module that holds `spec`.
fn ptx_of(spec: &gemv_core::KernelSpec) -> Vec<&'static str> {
    let ptx: Vec<_> = builds(spec.module).map(embedded).collect();
    assert!(!ptx.is_empty(), "{}: no module {}", spec.name, spec.module);
    ptx
}

#[test]
fn every_registry_kernel_is_in_every_build_of_its_module() {
    for spec in gemv_core::KERNELS {
        for ptx in ptx_of(&spec) {
            assert!(entry(ptx, spec.name).is_some(), "{} missing from a PTX build of {}", spec.name, spec.module);
        }
    }
}

/// The exact family's sm_89 builds convert their scales with the sm_89 instruction and the other
/// builds never do (the sm_75 build would not load on sm_75..sm_86). Which build a device runs is
/// `gemv_core::module_build`, tested in gemv-core.
#[test]
fn only_the_sm89_builds_convert_scales_with_the_sm89_instruction() {
    for build in &MODULE_BUILDS {
        let converts = embedded(build).contains("cvt.rn.f16x2.e4m3x2");
        assert_eq!(
            converts,
            build.module == gemv_core::MODULE_NAME && build.minimum >= (8, 9),
            "{}: cvt.rn.f16x2.e4m3x2",
            build.ptx
        );
    }
}

/// Only the builds for programmatic dependent launch wait on the previous kernel, and each of
/// their kernels does (an ordinary build would fault where a dependent launch needs the wait;
/// the emulator's `emulator_dependent_launch` checks where the waits stand).
#[test]
fn only_the_dependent_builds_wait_on_the_previous_kernel_and_every_kernel_of_them_does() {
    for build in &MODULE_BUILDS {
        let ptx = embedded(build);
        assert_eq!(ptx.contains("griddepcontrol"), build.dependent_launch, "{}: griddepcontrol", build.ptx);
        if !build.dependent_launch {
            continue;
        }
        let entries =
            gemv_core::KERNELS.iter().filter(|spec| spec.module == build.module).map(|spec| spec.name).chain(
                gemv_core::GROUPED_KERNELS.iter().filter(|spec| spec.module == build.module).map(|spec| spec.name),
            );
        for name in entries {
            let text = entry(ptx, name).unwrap_or_default();
            for instruction in ["griddepcontrol.launch_dependents;", "griddepcontrol.wait;"] {
                assert!(text.contains(instruction), "{name} in {}: no {instruction}", build.ptx);
            }
        }
    }
}

/// docs/api.md promises drivers from the 535 branch (CUDA 12.2): a driver JIT-compiles PTX only up
/// to the ISA its CUDA version knows (12.2: ISA 8.2; 13.0: ISA 9.0). The exact family runs from
/// Turing (sm_75), the fast family from Ampere (sm_80: bf16 mma), and the backend loads each
/// module only where the device's compute capability reaches its target.
#[test]
fn each_module_targets_its_architecture_and_loads_on_drivers_from_the_535_branch() {
    for build @ ModuleBuild { module: name, minimum: (major, minor), .. } in &MODULE_BUILDS {
        let ptx = embedded(build);
        let version = ptx.lines().find_map(|line| line.trim().strip_prefix(".version ")).map(str::trim);
        assert_eq!(version, Some("8.2"), "{name}: PTX ISA 8.2 (CUDA 12.2, driver 535) is what docs/api.md promises");
        let target = ptx.lines().find_map(|line| line.trim().strip_prefix(".target ")).map(str::trim);
        assert_eq!(
            target,
            Some(format!("sm_{major}{minor}").as_str()),
            "{name}: target vs the capability it is loaded at"
        );
    }
    let oldest = |module: &str| builds(module).map(|build| build.minimum).min();
    assert_eq!(oldest(gemv_core::MODULE_NAME), Some((7, 5)), "the exact family: Turing and newer");
    assert_eq!(oldest(gemv_core::FAST_MODULE_NAME), Some((8, 0)), "the fast family: Ampere and newer");
}

#[test]
fn every_kernel_is_bounded_at_the_launchers_block_size() {
    let expected = format!(".maxntid {THREADS_PER_BLOCK}, 1, 1");
    for spec in gemv_core::KERNELS {
        for ptx in ptx_of(&spec) {
            let text = entry(ptx, spec.name).unwrap_or_default();
            let declared = text.lines().find(|line| line.contains(".maxntid")).map(str::trim);
            assert_eq!(declared, Some(expected.as_str()), "{}: launch bound vs THREADS_PER_BLOCK", spec.name);
        }
    }
}

#[test]
fn no_instruction_flushes_subnormals() {
    for build in &MODULE_BUILDS {
        let (name, ptx) = (build.module, embedded(build));
        let flushing: Vec<&str> = ptx.lines().filter(|line| line.contains(".ftz")).take(5).collect();
        assert!(flushing.is_empty(), "{name}: the PTX flushes subnormals (built with fast math?): {flushing:#?}");
    }
}
