//! The conformance suite on a real GPU. Without a driver or device this prints why it skipped;
//! `GEMV_REQUIRE_CUDA=1` turns that into a failure (the device pack's run.sh sets it).

use gemv_backend::Error;
use gemv_cuda::CudaBackend;
use std::sync::OnceLock;

fn cuda() -> Option<&'static CudaBackend> {
    static BACKEND: OnceLock<Option<CudaBackend>> = OnceLock::new();
    BACKEND
        .get_or_init(|| match CudaBackend::new(0) {
            Ok(backend) => Some(backend),
            Err(error) => {
                assert!(std::env::var_os("GEMV_REQUIRE_CUDA").is_none(), "GEMV_REQUIRE_CUDA is set but: {error}");
                eprintln!("skipped: no CUDA GPU here ({error}); set GEMV_REQUIRE_CUDA=1 to make this a failure");
                None
            }
        })
        .as_ref()
}

gemv_backend::conformance_tests!(cuda);

#[test]
fn no_driver_is_a_typed_error_not_a_panic() {
    if gemv_cuda::driver_present() {
        eprintln!("skipped: this machine has a CUDA driver, so the no-driver path cannot be exercised");
        return;
    }
    match CudaBackend::new(0) {
        Err(Error::Unavailable { backend: "cuda", reason }) => assert!(reason.contains("no CUDA driver"), "{reason}"),
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("opened a CUDA device without a driver"),
    }
}
