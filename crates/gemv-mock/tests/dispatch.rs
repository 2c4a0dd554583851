//! Resolution and dispatch against a backend that lacks kernels, read through the launch log.

use gemv_backend::{DeviceMatrix, KernelHandle, ResolvedTiers};
use gemv_conformance as conformance;
use gemv_core::{KillSwitches, TIERS};
use gemv_mock::{LaunchRecord, MockBackend};
use rstest::rstest;

const ON: KillSwitches = KillSwitches::ALL_ON;

fn widths(backend: &MockBackend, switches: KillSwitches) -> Vec<Option<usize>> {
    let tiers = ResolvedTiers::resolve(backend, switches);
    (0..=9).map(|m| tiers.width(m)).collect()
}

#[test]
fn full_backend_dispatches_narrowest() {
    let backend = MockBackend::new();
    assert_eq!(
        widths(&backend, ON),
        [None, Some(4), Some(4), Some(4), Some(4), Some(5), Some(6), Some(7), Some(8), None]
    );
    let off = KillSwitches { exact_m_tiers: false, ..ON };
    assert_eq!(
        widths(&backend, off),
        [None, Some(4), Some(4), Some(4), Some(4), Some(8), Some(8), Some(8), Some(8), None]
    );
}

#[test]
fn missing_tier_falls_to_next_wider_and_zero_handles_on_miss() {
    let backend =
        MockBackend::with_present(&["w4a16_gemv_batch4", "w4a16_gemv_batch7", "w4a16_gemv_batch8"]).expect("names");
    let tiers = ResolvedTiers::resolve(&backend, ON);
    assert_eq!(tiers.width(5), Some(7));
    assert_eq!(tiers.width(8), Some(8));
    assert_eq!(tiers.kernel(9), KernelHandle::NONE);
    assert_eq!(tiers.kernel(0), KernelHandle::NONE);
    assert!(tiers.has_batch4());
    // rt2 is absent: width 8 falls back to the classic kernel even though rt2 is preferred.
    assert_eq!(tiers.kernel(8), KernelHandle::for_name("w4a16_gemv_batch8"));
}

#[test]
fn has_batch4_means_the_batch4_kernel_resolved() {
    let without = MockBackend::with_present(&["w4a16_gemv_batch8", "w4a16_gemv"]).expect("names");
    assert!(!ResolvedTiers::resolve(&without, ON).has_batch4());
    let nothing = MockBackend::with_present(&[]).expect("names");
    let tiers = ResolvedTiers::resolve(&nothing, ON);
    assert!(!tiers.has_batch4());
    assert!((0..=8).all(|m| tiers.kernel(m) == KernelHandle::NONE));
}

#[rstest]
#[case::rt2(true, "w4a16_gemv_batch8_rt2")]
#[case::classic(false, "w4a16_gemv_batch8")]
fn width_8_resolves_per_switch(#[case] rt: bool, #[case] expected: &str) {
    let backend = MockBackend::new();
    let switches = KillSwitches { batch8_register_tiled: rt, ..ON };
    let tiers = ResolvedTiers::resolve(&backend, switches);
    assert_eq!(tiers.switches(), switches, "the table keeps the switches it was resolved with");
    assert_eq!(tiers.kernel(8), KernelHandle::for_name(expected));
    assert_eq!(tiers.kernel(6), KernelHandle::for_name("w4a16_gemv_batch6"));
}

#[rstest]
#[case::m3(3, &[("w4a16_gemv_batch3", 3)])]
#[case::m8(8, &[("w4a16_gemv_batch8_rt2", 8)])]
#[case::m11(11, &[("w4a16_gemv_batch16", 11)])]
#[case::m40(40, &[("w4a16_gemv_batch32", 32), ("w4a16_gemv_batch8_rt2", 8)])]
fn plan_launches_are_logged(#[case] m: usize, #[case] expected: &[(&'static str, usize)]) {
    let backend = MockBackend::new();
    let tiers = ResolvedTiers::resolve(&backend, ON);
    let (n, k) = (9, 48);
    let w = conformance::matrix(n, k, 1);
    let x = conformance::activations(m, k, 2);
    let matrix = DeviceMatrix::upload(&backend, &w.view()).expect("upload");
    matrix.gemv(&tiers, &x, m, 32).expect("runs");
    let expected: Vec<LaunchRecord> = expected.iter().map(|&(kernel, m)| LaunchRecord { kernel, m }).collect();
    assert_eq!(backend.launches(), expected);
}

#[test]
fn a_target_missing_tiers_gives_the_same_bits() {
    let full = MockBackend::new();
    let sparse = MockBackend::with_present(&["w4a16_gemv_batch8"]).expect("names");
    let (n, k, m) = (13, 96, 6);
    let w = conformance::matrix(n, k, 3);
    let x = conformance::activations(m, k, 4);
    let run = |backend: &MockBackend| {
        let tiers = ResolvedTiers::resolve(backend, ON);
        DeviceMatrix::upload(backend, &w.view()).expect("upload").gemv(&tiers, &x, m, 8).expect("runs")
    };
    assert_eq!(run(&full), run(&sparse));
    assert_eq!(sparse.launches(), [LaunchRecord { kernel: "w4a16_gemv_batch8", m: 6 }]);
    assert_eq!(TIERS.len(), 10);
}

#[test]
fn unknown_names_are_rejected() {
    let error = MockBackend::with_present(&["w4a16_gemv_batch9"]).expect_err("unknown");
    assert!(error.to_string().contains("w4a16_gemv_batch9"));
}

/// A call becomes launches in one step: the family its policy picks on this backend, that
/// family's plan, each launch with a resolved kernel wide enough for its rows, every row once.
#[test]
fn a_call_plans_every_row_once_on_resolved_kernels_of_its_family() {
    use gemv_core::{FamilyChoice, GemvCall};
    // Every registry kernel present, the fast family's included (the mock itself has none).
    let tiers = ResolvedTiers::resolve_with("every kernel", |_, name| KernelHandle::for_name(name), ON, None);
    assert!(tiers.family(FamilyChoice::Fast).is_ok());
    for choice in [FamilyChoice::Auto, FamilyChoice::Exact, FamilyChoice::Fast] {
        for m in 1..=40 {
            let call = GemvCall::new(m).with_family(choice);
            let family = tiers.family(choice);
            let planned = tiers.plan_call(&call);
            let (Ok(family), Ok(planned)) = (family, planned) else {
                assert!(tiers.family(choice).is_err() && tiers.plan_call(&call).is_err(), "{choice:?} M = {m}");
                continue;
            };
            let mut next_row = 0;
            for step in &planned {
                let spec = step.kernel.spec().expect("a resolved kernel");
                assert_eq!(spec.family, family, "{choice:?} M = {m}: {}", spec.name);
                assert!(step.launch.rows <= spec.max_m, "{choice:?} M = {m}: {} too narrow", spec.name);
                assert_eq!(step.launch.row_offset, next_row, "{choice:?} M = {m}: rows in order, once each");
                next_row += step.launch.rows;
            }
            assert_eq!(next_row, m, "{choice:?} M = {m}: every row covered");
        }
    }
}

/// `DeviceMatrix::call` keeps the call's row strides across every launch of its plan: each
/// token's row of Y is the host contract's, read from its strided row of X, and the elements
/// between Y's rows stay zero.
#[test]
fn a_call_with_row_strides_writes_each_token_at_its_row() {
    let backend = MockBackend::new();
    let tiers = ResolvedTiers::resolve(&backend, ON);
    let (n, k, m) = (40, 96, 40);
    let (x_stride, y_stride) = (k + 24, n + 8);
    let w = conformance::matrix(n, k, 5);
    let dense = conformance::activations(m, k, 6);
    let mut x = vec![0x7FC0u16; (m - 1) * x_stride + k];
    for t in 0..m {
        x[t * x_stride..t * x_stride + k].copy_from_slice(&dense[t * k..(t + 1) * k]);
    }
    let mut expected = vec![0u16; m * n];
    gemv_core::gemv_contract(&w.view(), &dense, m, &mut expected, 1).expect("host");
    let call = gemv_core::GemvCall::new(m).with_x_row_stride(x_stride).with_y_row_stride(y_stride);
    let matrix = DeviceMatrix::upload(&backend, &w.view()).expect("upload");
    let y = matrix.call(&tiers, &x, &call).expect("call");
    assert_eq!(y.len(), (m - 1) * y_stride + n);
    assert!(backend.launches().len() >= 2, "M = 40 takes more than one launch");
    for t in 0..m {
        assert_eq!(&y[t * y_stride..t * y_stride + n], &expected[t * n..(t + 1) * n], "token {t}");
        if t + 1 < m {
            assert!(y[t * y_stride + n..(t + 1) * y_stride].iter().all(|&v| v == 0), "gap after token {t}");
        }
    }
}
