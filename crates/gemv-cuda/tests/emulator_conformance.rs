//! The conformance suite on the CUDA kernels, run on the CPU by the SIMT emulator, twice: with
//! the threads of each block resumed in forward and in reversed order. Both must match the host
//! contract, so a kernel whose result depends on thread scheduling fails one of them.

fn emulator() -> Option<gemv_cuda::CudaEmulator> {
    Some(gemv_cuda::CudaEmulator::new())
}

gemv_backend::conformance_tests!(emulator);

mod reversed_thread_order {
    fn emulator() -> Option<gemv_cuda::CudaEmulator> {
        Some(gemv_cuda::CudaEmulator::new().with_thread_order(gemv_cuda::ThreadOrder::Reversed))
    }

    gemv_backend::conformance_tests!(emulator);
}

#[test]
fn every_registry_kernel_is_compiled() {
    for spec in gemv_core::KERNELS {
        assert!(gemv_cuda::CudaEmulator::has_kernel(spec.name), "{} missing from the emulator library", spec.name);
    }
}
