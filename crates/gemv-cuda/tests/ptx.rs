//! Properties of the committed PTX that the emulator cannot see: every registry kernel is in its
//! module's PTX, each declares the launcher's block size as its bound, each module targets the
//! architecture and PTX ISA the README promises, and nothing flushes subnormals (the E2M1 and
//! E4M3 decodes pass through subnormal intermediates, and the contracts keep subnormal products
//! and sums).

use gemv_cuda::launch::THREADS_PER_BLOCK;
use gemv_cuda::ptx::{MODULES, module};

/// The text of entry `name`, from `.entry name(` to the next `.entry` (or the end).
fn entry<'a>(ptx: &'a str, name: &str) -> Option<&'a str> {
    let start = ptx.find(&format!(".entry {name}("))?;
    let rest = &ptx[start + 1..];
    Some(&ptx[start..start + 1 + rest.find(".entry ").unwrap_or(rest.len())])
}

fn ptx_of(spec: &gemv_core::KernelSpec) -> &'static str {
    module(spec.module).map(|(ptx, _)| ptx).unwrap_or_else(|| panic!("{}: no module {}", spec.name, spec.module))
}

#[test]
fn every_registry_kernel_is_in_its_modules_ptx() {
    for spec in gemv_core::KERNELS {
        assert!(entry(ptx_of(&spec), spec.name).is_some(), "{} missing from the PTX of {}", spec.name, spec.module);
    }
}

/// The README promises drivers from the 535 branch (CUDA 12.2): a driver JIT-compiles PTX only up
/// to the ISA its CUDA version knows (12.2: ISA 8.2; 13.0: ISA 9.0). The exact family runs from
/// Turing (sm_75), the fast family from Ampere (sm_80: bf16 mma), and the backend loads each
/// module only where the device's compute capability reaches its target.
#[test]
fn each_module_targets_its_architecture_and_loads_on_drivers_from_the_535_branch() {
    for (name, ptx, (major, minor)) in MODULES {
        let version = ptx.lines().find_map(|line| line.trim().strip_prefix(".version ")).map(str::trim);
        assert_eq!(version, Some("8.2"), "{name}: PTX ISA 8.2 (CUDA 12.2, driver 535) is what the README promises");
        let target = ptx.lines().find_map(|line| line.trim().strip_prefix(".target ")).map(str::trim);
        assert_eq!(
            target,
            Some(format!("sm_{major}{minor}").as_str()),
            "{name}: target vs the capability it is loaded at"
        );
    }
    assert_eq!(module(gemv_core::MODULE_NAME).map(|(_, c)| c), Some((7, 5)), "the exact family: Turing and newer");
    assert_eq!(module(gemv_core::FAST_MODULE_NAME).map(|(_, c)| c), Some((8, 0)), "the fast family: Ampere and newer");
}

#[test]
fn every_kernel_is_bounded_at_the_launchers_block_size() {
    let expected = format!(".maxntid {THREADS_PER_BLOCK}, 1, 1");
    for spec in gemv_core::KERNELS {
        let text = entry(ptx_of(&spec), spec.name).unwrap_or_default();
        let declared = text.lines().find(|line| line.contains(".maxntid")).map(str::trim);
        assert_eq!(declared, Some(expected.as_str()), "{}: launch bound vs THREADS_PER_BLOCK", spec.name);
    }
}

#[test]
fn no_instruction_flushes_subnormals() {
    for (name, ptx, _) in MODULES {
        let flushing: Vec<&str> = ptx.lines().filter(|line| line.contains(".ftz")).take(5).collect();
        assert!(flushing.is_empty(), "{name}: the PTX flushes subnormals (built with fast math?): {flushing:#?}");
    }
}
