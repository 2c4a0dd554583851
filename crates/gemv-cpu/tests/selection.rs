//! How a launch's path is chosen: a forced path runs every launch, a calibrated backend runs each
//! M on the path its calibration chose, and the bits never depend on the choice.

use gemv_conformance::{activations, matrix};
use gemv_core::gemv_contract;
use gemv_cpu::{CALIBRATED_TOKENS, CpuBackend, CpuWeights, ForcedBy, PathSelection, SimdPath};

#[test]
fn a_forced_path_runs_every_launch_and_is_never_calibrated() {
    let w = matrix(64, 4096, 5);
    let weights = CpuWeights::new(&w.view());
    for path in SimdPath::ALL.into_iter().filter(|path| path.is_supported()) {
        let backend = CpuBackend::with_path(path).expect("supported");
        assert_eq!(backend.selection(), PathSelection::Forced { path, by: ForcedBy::Caller });
        for m in [1, 2, 3, 8, 16, 40] {
            assert_eq!(backend.path_for(&weights, m), path, "M = {m}");
        }
        assert_eq!(backend.calibrate(4), None);
        assert!(backend.calibrations().is_empty());
        assert!(format!("{}", backend.selection()).starts_with(path.name()));
    }
    for path in SimdPath::ALL.into_iter().filter(|path| !path.is_supported()) {
        assert!(CpuBackend::with_path(path).is_err(), "{} is not on this CPU", path.name());
    }
}

#[test]
fn the_calibrated_path_is_the_calibrations_choice_and_a_supported_one() {
    let backend = CpuBackend::calibrated();
    assert_eq!(backend.selection(), PathSelection::Calibrated);
    // A layer-sized matrix: its first launch of each M calibrates on its own slice.
    let w = matrix(512, 4096, 6);
    let weights = CpuWeights::new(&w.view());
    for m in [1, 2, 5, 16] {
        let path = backend.path_for(&weights, m);
        assert!(path.is_supported());
        let calibration = backend.calibrations().into_iter().find(|c| c.m == m).expect("calibrated at the first use");
        assert_eq!(calibration.chosen, path);
        assert!(calibration.timings.iter().any(|(candidate, _)| *candidate == path));
        let fastest = calibration.timings.iter().map(|(_, time)| *time).min();
        assert_eq!(calibration.timings.iter().find(|(p, _)| *p == path).map(|(_, t)| *t), fastest);
    }
    // More tokens than are calibrated one by one use the widest count's choice.
    assert_eq!(backend.path_for(&weights, 40), backend.path_for(&weights, CALIBRATED_TOKENS));
}

#[test]
fn the_bits_do_not_depend_on_the_path() {
    let (n, k) = (80, 1040);
    let w = matrix(n, k, 7);
    let weights = CpuWeights::new(&w.view());
    let calibrated = CpuBackend::calibrated().with_threads(2);
    let forced: Vec<CpuBackend> =
        SimdPath::ALL.into_iter().filter_map(|path| CpuBackend::with_path(path).ok()).collect();
    for m in [1, 2, 4, 7, 16, 17] {
        let x = activations(m, k, 100 + m as u64);
        let mut expected = vec![0u16; m * n];
        gemv_contract(&w.view(), &x, m, &mut expected, 1).expect("valid");
        for backend in forced.iter().chain([&calibrated]) {
            let mut y = vec![0u16; m * n];
            backend.gemv(&weights, &x, &mut y, &gemv_core::GemvCall::new(m)).expect("launch");
            assert!(y == expected, "{} at M = {m}", backend.selection());
        }
    }
}
