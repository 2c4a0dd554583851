//! Properties of the committed PTX that the emulator cannot see: every registry kernel is there,
//! each declares the launcher's block size as its bound, and nothing flushes subnormals (the
//! E2M1 and E4M3 decodes pass through subnormal f32 intermediates, and the contract keeps
//! subnormal products and sums).

use gemv_cuda::launch::THREADS_PER_BLOCK;
use gemv_cuda::ptx::W4A16_GEMV;

/// The text of entry `name`, from `.entry name(` to the next `.entry` (or the end).
fn entry<'a>(ptx: &'a str, name: &str) -> Option<&'a str> {
    let start = ptx.find(&format!(".entry {name}("))?;
    let rest = &ptx[start + 1..];
    Some(&ptx[start..start + 1 + rest.find(".entry ").unwrap_or(rest.len())])
}

#[test]
fn every_registry_kernel_is_in_the_ptx() {
    for spec in gemv_core::KERNELS {
        assert!(entry(W4A16_GEMV, spec.name).is_some(), "{} missing from the committed PTX", spec.name);
    }
    assert!(W4A16_GEMV.contains(".target sm_75"), "the scalar family targets compute_75");
}

/// The README promises drivers from the 535 branch (CUDA 12.2) and Turing (sm_75) up: a driver
/// JIT-compiles PTX only up to the ISA its CUDA version knows (12.2: ISA 8.2; 13.0: ISA 9.0).
#[test]
fn the_committed_ptx_loads_on_drivers_from_the_535_branch() {
    let version = W4A16_GEMV.lines().find_map(|line| line.trim().strip_prefix(".version ")).map(str::trim);
    assert_eq!(version, Some("8.2"), "PTX ISA 8.2 (CUDA 12.2, driver 535) is what the README promises");
    let target = W4A16_GEMV.lines().find_map(|line| line.trim().strip_prefix(".target ")).map(str::trim);
    assert_eq!(target, Some("sm_75"), "Turing and newer");
}

#[test]
fn every_kernel_is_bounded_at_the_launchers_block_size() {
    let expected = format!(".maxntid {THREADS_PER_BLOCK}, 1, 1");
    for spec in gemv_core::KERNELS {
        let text = entry(W4A16_GEMV, spec.name).unwrap_or_default();
        let declared = text.lines().find(|line| line.contains(".maxntid")).map(str::trim);
        assert_eq!(declared, Some(expected.as_str()), "{}: launch bound vs THREADS_PER_BLOCK", spec.name);
    }
}

#[test]
fn no_instruction_flushes_subnormals() {
    let flushing: Vec<&str> = W4A16_GEMV.lines().filter(|line| line.contains(".ftz")).take(5).collect();
    assert!(flushing.is_empty(), "the PTX flushes subnormals (built with fast math?): {flushing:#?}");
}
