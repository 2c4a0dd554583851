//! The conformance suite on the CUDA kernels, run on the CPU by the SIMT emulator.

fn emulator() -> Option<gemv_cuda::CudaEmulator> {
    Some(gemv_cuda::CudaEmulator::new())
}

gemv_backend::conformance_tests!(emulator);

#[test]
fn every_registry_kernel_is_compiled() {
    for spec in gemv_core::KERNELS {
        assert!(gemv_cuda::CudaEmulator::has_kernel(spec.name), "{} missing from the emulator library", spec.name);
    }
}
