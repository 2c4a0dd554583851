//! The conformance suite on every SIMD path of the CPU backend, and on the calibrated choice
//! that engines get by default. A path this CPU lacks reports a skip; the portable path and the
//! best one the CPU has always run, and the calibrated backend wherever it has two paths to
//! choose from.

use gemv_conformance::skip::{Requirement, skip};
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
        super::calibrated()
    }
    gemv_conformance::conformance_tests!(backend);
}

/// The calibrated backend, where the CPU has two SIMD paths or more to choose from (with one, it
/// is that path's backend, which its own suite runs).
fn calibrated() -> Option<CpuBackend> {
    let paths = SimdPath::ALL.into_iter().filter(|path| *path != SimdPath::Portable && path.is_supported()).count();
    if paths < 2 {
        skip(Requirement::CpuFeature, "one SIMD path on this CPU, so the calibrated backend is that path's");
        return None;
    }
    Some(CpuBackend::calibrated())
}

mod avx512bf16 {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Avx512Bf16)
    }
    gemv_conformance::conformance_tests!(backend);
}

mod avx512 {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Avx512)
    }
    gemv_conformance::conformance_tests!(backend);
}

mod avx512products {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Avx512Products)
    }
    gemv_conformance::conformance_tests!(backend);
}

mod avx2 {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Avx2)
    }
    gemv_conformance::conformance_tests!(backend);
}

mod neon {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Neon)
    }
    gemv_conformance::conformance_tests!(backend);
}

mod portable {
    fn backend() -> Option<gemv_cpu::CpuBackend> {
        super::on(gemv_cpu::SimdPath::Portable)
    }
    gemv_conformance::conformance_tests!(backend);
}

#[test]
fn the_best_path_is_supported_and_portable_always_is() {
    let best = SimdPath::best();
    assert!(best.is_supported());
    assert!(SimdPath::Portable.is_supported());
    eprintln!("this CPU's best path: {}", best.name());
}
