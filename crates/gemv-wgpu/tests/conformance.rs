//! The conformance suite on wgpu. Without an adapter this prints why it skipped;
//! `GEMV_REQUIRE_WGPU=1` turns that into a failure (CI sets it: lavapipe).

use std::sync::OnceLock;

fn wgpu_backend() -> Option<&'static gemv_wgpu::WgpuBackend> {
    static BACKEND: OnceLock<Option<gemv_wgpu::WgpuBackend>> = OnceLock::new();
    BACKEND
        .get_or_init(|| match gemv_wgpu::WgpuBackend::new() {
            Ok(backend) => Some(backend),
            Err(error) => {
                assert!(std::env::var_os("GEMV_REQUIRE_WGPU").is_none(), "GEMV_REQUIRE_WGPU is set but: {error}");
                eprintln!("skipped: no wgpu adapter here ({error}); set GEMV_REQUIRE_WGPU=1 to make this a failure");
                None
            }
        })
        .as_ref()
}

gemv_backend::conformance_tests!(wgpu_backend);
