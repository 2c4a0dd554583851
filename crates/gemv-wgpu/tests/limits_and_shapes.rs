//! wgpu-specific behaviour: typed errors for missing adapters and device limits, and the real
//! shape on the adapter (release only). Skips without an adapter unless GEMV_REQUIRE_WGPU=1.

use gemv_backend::{DeviceMatrix, Error, GpuBackend, ResolvedTiers};
use gemv_conformance as conformance;
use gemv_conformance::skip::{Requirement, skip};
use gemv_core::{KillSwitches, gemv_contract, host_threads};
use gemv_wgpu::{AdapterChoice, WgpuBackend};

fn backend() -> Option<WgpuBackend> {
    match WgpuBackend::new() {
        Ok(backend) => Some(backend),
        Err(error) => {
            skip(Requirement::WgpuAdapter, &error.to_string());
            None
        }
    }
}

#[test]
fn an_adapter_that_does_not_exist_is_a_typed_error() {
    match WgpuBackend::with_adapter(AdapterChoice::NameContains("no such adapter, surely".into())) {
        Err(Error::Unavailable { backend: "wgpu", reason }) => assert!(reason.contains("no such adapter"), "{reason}"),
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("an adapter matched a name nobody has"),
    }
}

#[test]
fn an_adapter_index_past_the_list_is_a_typed_error_listing_the_adapters() {
    match WgpuBackend::with_adapter(AdapterChoice::Index(1000)) {
        Err(Error::Unavailable { backend: "wgpu", reason }) => {
            assert!(reason.contains("no adapter 1000") && reason.contains("found"), "{reason}")
        }
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("a machine with 1001 adapters?"),
    }
    // Where an adapter exists, index 0 opens it.
    if backend().is_some() {
        WgpuBackend::with_adapter(AdapterChoice::Index(0)).expect("the first adapter opens");
    }
}

/// Lavapipe (a software adapter) is never opened for the hardware choice; a real GPU is.
#[test]
fn the_hardware_choice_never_opens_a_software_adapter() {
    let Some(best) = backend() else { return };
    let software = best.device_info().kind == gemv_backend::DeviceKind::SoftwareGpu;
    match WgpuBackend::with_adapter(AdapterChoice::Hardware) {
        Ok(hardware) => assert_eq!(hardware.device_info().kind, gemv_backend::DeviceKind::Gpu, "{}", hardware.name()),
        Err(Error::Unavailable { backend: "wgpu", reason }) => {
            assert!(software, "a real GPU is there and was refused: {reason}");
            assert!(reason.contains("no hardware adapter, only software ones"), "{reason}");
        }
        Err(other) => panic!("expected Unavailable, got {other}"),
    }
}

#[test]
fn a_buffer_over_the_device_limit_is_refused_naming_it() {
    let Some(backend) = backend() else { return };
    let too_big = usize::try_from(backend.max_buffer_size() + 1).unwrap_or(usize::MAX);
    match backend.alloc(too_big) {
        Err(Error::LimitExceeded { what, limit, .. }) => {
            assert!(what.contains("max_buffer_size"), "{what}");
            assert_eq!(limit, backend.max_buffer_size());
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

#[test]
fn weights_over_the_binding_limit_are_refused_naming_it() {
    let Some(backend) = backend() else { return };
    let backend = backend.with_max_binding_size(1024);
    let (n, k) = (64, 64); // 2048 packed bytes > 1024
    let weights = conformance::matrix(n, k, 9);
    let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
    let matrix = DeviceMatrix::upload(&backend, &weights.view()).expect("upload is not a binding");
    match matrix.gemv(&tiers, &conformance::activations(1, k, 1), 1, 8) {
        Err(Error::LimitExceeded { what, limit: 1024, .. }) => {
            assert!(what.contains("max_storage_buffer_binding_size") && what.contains("packed"), "{what}")
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release-mode test: `cargo xtask test` runs it with --release")]
fn qkv_shape_m8_is_bit_exact() {
    let Some(backend) = backend() else { return };
    let (n, k, m) = (5120, 5120, 8);
    let weights = conformance::matrix(n, k, 2026);
    let x = conformance::activations(m, k, 11);
    let mut expected = vec![0u16; m * n];
    gemv_contract(&weights.view(), &x, m, &mut expected, host_threads()).expect("host contract");
    let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
    let matrix = DeviceMatrix::upload(&backend, &weights.view()).expect("upload");
    matrix.gemv(&tiers, &x, m, 8).expect("warm-up: compiles the pipeline");
    let start = std::time::Instant::now();
    let found = matrix.gemv(&tiers, &x, m, 8).expect("launch");
    let elapsed = start.elapsed();
    let differing = expected.iter().zip(&found).filter(|(a, b)| a != b).count();
    assert_eq!(differing, 0, "{differing} of {} outputs differ from the host contract", expected.len());
    eprintln!(
        "wgpu on {} N={n} K={k} M={m} (w4a16_gemv_batch8_rt2): {:.3} s, bit-exact",
        backend.device_info().name,
        elapsed.as_secs_f64()
    );
}
