//! The conformance suite on the CUDA kernels, run on the CPU by the SIMT emulator, twice: an
//! emulated sm_90 with the threads of each block resumed in forward order (the exact family's
//! sm_89 build), and an emulated sm_80 in reversed order (its sm_75 build). Both must match the
//! host contract, so a kernel whose result depends on thread scheduling fails the second, and
//! each build of the exact family is checked on every gate. (A third run would add some five
//! minutes to CI; seeded orders run every gate but the slow gate 7, below.)

fn emulator() -> Option<gemv_cuda_emulator::CudaEmulator> {
    Some(gemv_cuda_emulator::CudaEmulator::new())
}

gemv_conformance::conformance_tests!(emulator);

mod sm80_reversed_thread_order {
    fn emulator() -> Option<gemv_cuda_emulator::CudaEmulator> {
        Some(
            gemv_cuda_emulator::CudaEmulator::new()
                .with_capability((8, 0))
                .with_thread_order(gemv_cuda_emulator::ThreadOrder::Reversed),
        )
    }

    gemv_conformance::conformance_tests!(emulator);
}

#[test]
fn every_build_of_every_registry_kernel_is_compiled() {
    for spec in gemv_core::KERNELS {
        for build in gemv_cuda::ptx::builds(spec.module) {
            let name = format!("{}{}", spec.name, build.emulator_suffix);
            assert!(gemv_cuda_emulator::CudaEmulator::has_kernel(&name), "{name} missing from the emulator library");
        }
    }
}

/// The emulated capability decides what resolves, as on a GPU: no fast family on sm_75, and
/// nothing below sm_75.
#[test]
fn the_emulated_capability_decides_what_resolves() {
    use gemv_backend::GpuBackend;
    let fast = gemv_core::FAST_TIERS[0].kernel;
    let exact = gemv_core::TIERS[0].kernel;
    let resolves = |capability, module, name| {
        gemv_cuda_emulator::CudaEmulator::new().with_capability(capability).lookup_kernel(module, name).is_resolved()
    };
    assert!(!resolves((7, 5), gemv_core::FAST_MODULE_NAME, fast), "no fast family on sm_75");
    assert!(resolves((7, 5), gemv_core::MODULE_NAME, exact));
    assert!(resolves((9, 0), gemv_core::FAST_MODULE_NAME, fast));
    assert!(!resolves((7, 0), gemv_core::MODULE_NAME, exact), "nothing below sm_75");
    assert!(gemv_cuda_emulator::CudaEmulator::new().device_info().architecture.starts_with("sm_90"));
}

/// Seeded block and thread orders, on every gate but 7 (odd shapes, minutes under the emulator,
/// run in the two fixed orders above): results must not depend on which block starts first or
/// how the threads of a block interleave.
#[test]
fn gates_pass_under_seeded_block_and_thread_orders() {
    use gemv_conformance::{Gate, assert_gate};
    for (seed, capability) in [(0x5EED_0001, (9, 0)), (0x5EED_0002, (8, 0))] {
        let emulator = gemv_cuda_emulator::CudaEmulator::new()
            .with_capability(capability)
            .with_thread_order(gemv_cuda_emulator::ThreadOrder::Seeded(seed));
        for gate in Gate::ALL.into_iter().filter(|&gate| gate != Gate::OddShapes) {
            assert_gate(&emulator, gate);
        }
    }
}
