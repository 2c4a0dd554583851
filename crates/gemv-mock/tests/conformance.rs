//! The conformance suite on the host reference backend.

fn host() -> Option<gemv_mock::MockBackend> {
    Some(gemv_mock::MockBackend::new())
}

gemv_conformance::conformance_tests!(host);
