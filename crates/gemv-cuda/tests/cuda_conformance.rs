//! The conformance suite on a real GPU. Without a driver or device each test reports a skip
//! (counted by `cargo xtask test`); `GEMV_REQUIRE_CUDA=1` turns that into a failure (the device
//! pack's run.sh sets it).

use gemv_backend::Error;
use gemv_backend::conformance::skip::{Requirement, skip};
use gemv_cuda::CudaBackend;
use std::sync::OnceLock;

fn cuda() -> Option<&'static CudaBackend> {
    static BACKEND: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    match BACKEND.get_or_init(|| CudaBackend::new(0).map_err(|error| error.to_string())) {
        Ok(backend) => Some(backend),
        Err(reason) => {
            skip(Requirement::CudaGpu, reason);
            None
        }
    }
}

gemv_backend::conformance_tests!(cuda);

#[test]
fn no_driver_is_a_typed_error_not_a_panic() {
    if gemv_cuda::driver_present() {
        skip(Requirement::NoCudaDriver, "this machine has a CUDA driver, so the no-driver path cannot be exercised");
        return;
    }
    match CudaBackend::new(0) {
        Err(Error::Unavailable { backend: "cuda", reason }) => assert!(reason.contains("no CUDA driver"), "{reason}"),
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("opened a CUDA device without a driver"),
    }
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release-mode test: the device pack runs it")]
fn weights_past_2_gib_are_addressed_correctly() {
    let Some(backend) = cuda() else { return };
    if let Err(failure) = gemv_backend::conformance::weights_past_2_gib(backend) {
        panic!("cuda: {failure}");
    }
}
