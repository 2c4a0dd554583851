//! An engine's model struct can own its layers' weights: `DeviceMatrix` over an
//! `Arc<dyn GpuBackend>` has no lifetime, runs like the borrowed form, and frees its buffers when
//! dropped.

use gemv_backend::{DeviceMatrix, GpuBackend, ResolvedTiers};
use gemv_conformance as conformance;
use gemv_core::{KillSwitches, WIDEST_TIER};
use gemv_mock::MockBackend;
use std::sync::Arc;

/// What an engine's layer looks like: owned weights and the tier handles, no borrowed backend.
struct Layer {
    weights: DeviceMatrix<Arc<dyn GpuBackend>>,
    tiers: ResolvedTiers,
}

#[test]
fn a_model_struct_owns_its_weights_and_dropping_it_frees_them() {
    let backend: Arc<dyn GpuBackend> = Arc::new(MockBackend::new());
    let (n, k, m) = (37, 48, 5);
    let w = conformance::matrix(n, k, 3);
    let x = conformance::activations(m, k, 4);
    let layer = Layer {
        weights: DeviceMatrix::upload(Arc::clone(&backend), &w.view()).expect("uploads"),
        tiers: ResolvedTiers::resolve(backend.as_ref(), KillSwitches::default()),
    };
    let owned = layer.weights.gemv(&layer.tiers, &x, m, WIDEST_TIER).expect("runs");
    // The same bits as the borrowed form.
    let borrowed = DeviceMatrix::upload(backend.as_ref(), &w.view()).expect("uploads");
    assert_eq!(owned, borrowed.gemv(&layer.tiers, &x, m, WIDEST_TIER).expect("runs"));

    // Dropping the layer frees its weight buffers: they are unknown to the backend afterwards.
    let scratch = backend.alloc(2 * k).expect("alloc");
    let packed = layer.weights.args(scratch, scratch, 0, 1).packed;
    let mut probe = vec![0u8; packed.len];
    backend.download(packed, &mut probe).expect("live while the layer lives");
    drop(layer);
    let error = backend.download(packed, &mut probe).expect_err("freed with the layer");
    assert!(error.to_string().contains("unknown"), "{error}");
}
