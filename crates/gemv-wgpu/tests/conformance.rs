//! The conformance suite on wgpu. Without an adapter each test reports a skip (counted by `cargo
//! xtask test`); `GEMV_REQUIRE_WGPU=1` turns that into a failure (CI sets it: lavapipe).

use gemv_conformance::skip::{Requirement, skip};
use std::sync::OnceLock;

fn wgpu_backend() -> Option<&'static gemv_wgpu::WgpuBackend> {
    static BACKEND: OnceLock<Result<gemv_wgpu::WgpuBackend, String>> = OnceLock::new();
    match BACKEND.get_or_init(|| gemv_wgpu::WgpuBackend::new().map_err(|error| error.to_string())) {
        Ok(backend) => Some(backend),
        Err(reason) => {
            skip(Requirement::WgpuAdapter, reason);
            None
        }
    }
}

gemv_conformance::conformance_tests!(wgpu_backend);
