//! The conformance suite on every SIMD path of the CPU backend, and on the calibrated choice
//! that engines get by default. A path this CPU lacks reports a skip (the portable path, the
//! best one the CPU has and the calibrated backend always run).

use gemv_backend::conformance::skip::{Requirement, skip};
use gemv_cpu::{CpuBackend, SimdPath};

fn on(path: SimdPath) -> Option<CpuBackend> {
    match CpuBackend::with_path(path) {
        Ok(backend) => Some(backend),
        Err(error) => {
            skip(Requirement::CpuFeature, &error.to_string());
            None
        }
    }
}

mod calibrated {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        Some(gemv_cpu::CpuBackend::calibrated())
    }
    gemv_backend::conformance_tests!(backend);
}

mod avx512bf16 {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Avx512Bf16)
    }
    gemv_backend::conformance_tests!(backend);
}

mod avx512 {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Avx512)
    }
    gemv_backend::conformance_tests!(backend);
}

mod avx2 {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Avx2)
    }
    gemv_backend::conformance_tests!(backend);
}

mod neon {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Neon)
    }
    gemv_backend::conformance_tests!(backend);
}

mod portable {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Portable)
    }
    gemv_backend::conformance_tests!(backend);
}

#[test]
fn the_best_path_is_supported_and_portable_always_is() {
    let best = SimdPath::best();
    assert!(best.is_supported());
    assert!(SimdPath::Portable.is_supported());
    eprintln!("this CPU's best path: {}", best.name());
}
