//! The engine path: weights arranged once (`CpuWeights`), launches over the caller's slices with
//! row strides, on every SIMD path this CPU has, against the host contract bit for bit.

use gemv_conformance::{
    activations, matrix,
    skip::{Requirement, skip},
};
use gemv_core::codec::BF16_NAN;
use gemv_core::{CoreError, gemv_contract};
// The engine's names, as an engine imports them: from the backend crate alone.
use gemv_cpu::{
    CpuBackend, CpuExperts, CpuWeights, Error, FamilyChoice, GemvCall, GroupedCall, Nvfp4Experts, SimdPath,
};

/// Every path this CPU has, forced, and the calibrated choice.
fn backends() -> Vec<CpuBackend> {
    let mut backends: Vec<CpuBackend> = SimdPath::ALL
        .into_iter()
        .filter_map(|path| match CpuBackend::with_path(path) {
            Ok(backend) => Some(backend.with_threads(2)),
            Err(error) => {
                skip(Requirement::CpuFeature, &error.to_string());
                None
            }
        })
        .collect();
    backends.push(CpuBackend::calibrated().with_threads(2));
    backends
}

#[test]
fn strided_slices_give_the_contract_and_nothing_between_rows_is_read_or_written() {
    const MARK: u16 = 0x1234;
    for (n, k) in [(37, 272), (130, 1040), (16, 16)] {
        let w = matrix(n, k, (n + k) as u64);
        let weights = CpuWeights::new(&w.view());
        assert_eq!((weights.n(), weights.k(), weights.global_scale()), (n, k, w.global_scale()));
        assert_eq!(weights.to_matrix(), w, "the arrangement restores the bytes it was made from");
        for m in [1, 2, 3, 5, 8, 11] {
            let x = activations(m, k, m as u64);
            let mut expected = vec![0u16; m * n];
            gemv_contract(&w.view(), &x, m, &mut expected, 1).expect("valid");
            // X's rows 7 elements apart beyond K, the gaps NaN; Y's 3 apart beyond N, marked.
            let (x_stride, y_stride) = (k + 7, n + 3);
            let mut strided_x = vec![BF16_NAN; (m - 1) * x_stride + k];
            for t in 0..m {
                strided_x[t * x_stride..][..k].copy_from_slice(&x[t * k..][..k]);
            }
            for backend in backends() {
                let mut y = vec![MARK; (m - 1) * y_stride + n];
                let call = GemvCall::new(m).with_x_row_stride(x_stride).with_y_row_stride(y_stride);
                backend.gemv(&weights, &strided_x, &mut y, &call).expect("launch");
                for t in 0..m {
                    assert_eq!(
                        &y[t * y_stride..][..n],
                        &expected[t * n..][..n],
                        "{}: {n} x {k}, M = {m}, t = {t}",
                        backend.selection()
                    );
                    if t + 1 < m {
                        assert!(
                            y[t * y_stride + n..(t + 1) * y_stride].iter().all(|&v| v == MARK),
                            "a gap was written"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bad_slices_and_strides_are_errors_and_write_nothing() {
    let (n, k, m) = (20, 64, 3);
    let w = matrix(n, k, 4);
    let weights = CpuWeights::new(&w.view());
    let x = activations(m, k, 5);
    let backend = CpuBackend::with_path(SimdPath::Portable).expect("portable");
    let mut y = vec![7u16; m * n];
    let call = GemvCall::new(m);
    type Expect = fn(&CoreError) -> bool;
    let cases: [(&[u16], GemvCall, usize, Expect); 6] = [
        (&x, call.with_x_row_stride(k - 1), 0, |e| matches!(e, CoreError::RowStrideTooSmall { what: "x", .. })),
        (&x, call.with_y_row_stride(n - 1), 0, |e| matches!(e, CoreError::RowStrideTooSmall { what: "y", .. })),
        (&x[..m * k - 1], call, 0, |e| matches!(e, CoreError::RangeTooSmall { what: "x", .. })),
        (&x, call, 1, |e| matches!(e, CoreError::RangeTooSmall { what: "y", .. })),
        (&x, GemvCall::new(0), 0, |e| matches!(e, CoreError::ZeroM { .. })),
        (&x, call.with_family(FamilyChoice::Fast), 0, |e| matches!(e, CoreError::FamilyUnavailable { .. })),
    ];
    for (i, &(x, call, short, expected)) in cases.iter().enumerate() {
        let len = y.len() - short;
        let error = backend.gemv(&weights, x, &mut y[..len], &call).expect_err("refused");
        assert!(matches!(&error, Error::Core(core) if expected(core)), "case {i}: {error}");
        assert!(y.iter().all(|&v| v == 7), "case {i}: Y was written");
    }
}

/// An engine's `half::bf16` tensors go in and come out as they are: the same bits as `u16`.
#[test]
fn half_bf16_slices_give_the_same_bits_as_raw_bits() {
    use gemv_core::half::bf16;
    let (n, k, m) = (37, 272, 3);
    let w = matrix(n, k, 5);
    let weights = CpuWeights::new(&w.view());
    let x = activations(m, k, 6);
    let x_half: Vec<bf16> = x.iter().map(|&bits| bf16::from_bits(bits)).collect();
    for backend in backends() {
        let mut y_bits = vec![0u16; m * n];
        backend.gemv(&weights, &x, &mut y_bits, &GemvCall::new(m)).expect("launch");
        let mut y_half = vec![bf16::ZERO; m * n];
        backend.gemv(&weights, &x_half, &mut y_half, &GemvCall::new(m)).expect("launch");
        assert!(y_half.iter().zip(&y_bits).all(|(h, &b)| h.to_bits() == b), "{}", backend.selection());
    }
}

#[test]
fn a_routed_layer_gives_each_pair_its_experts_contract_and_bad_routings_write_nothing() {
    let (n, k, experts) = (45, 1040, 6);
    let matrices: Vec<_> = (0..experts).map(|e| matrix(n, k, 70 + e as u64)).collect();
    let stack = Nvfp4Experts::stack(&matrices).expect("one shape");
    let arranged = CpuExperts::new(&stack.view()).expect("valid");
    assert_eq!((arranged.experts(), arranged.n(), arranged.k()), (experts, n, k));
    for backend in backends() {
        for (m, top_k) in [(1, 2), (5, 3), (16, 6)] {
            let x = activations(m, k, 3 * m as u64);
            let ids: Vec<u32> = (0..m * top_k).map(|p| ((p * 7 + p / top_k) % experts) as u32).collect();
            let mut y = vec![0u16; m * top_k * n];
            backend.grouped(&arranged, &x, &ids, &mut y, &GroupedCall::new(m, top_k)).expect("grouped");
            for (p, &e) in ids.iter().enumerate() {
                let mut alone = vec![0u16; n];
                gemv_contract(&matrices[e as usize].view(), &x[(p / top_k) * k..][..k], 1, &mut alone, 1)
                    .expect("valid");
                assert_eq!(&y[p * n..][..n], &alone[..], "{:?} M={m} top-k={top_k} pair {p}", backend.selection());
            }
        }
        let x = activations(2, k, 1);
        let mut y = vec![0x1234u16; 2 * 2 * n];
        let call = GroupedCall::new(2, 2);
        let out_of_range = backend.grouped(&arranged, &x, &[0, 1, 2, experts as u32], &mut y, &call);
        assert!(
            matches!(out_of_range, Err(Error::Core(CoreError::ExpertOutOfRange { token: 1, slot: 1, .. }))),
            "{out_of_range:?}"
        );
        let fast = backend.grouped(&arranged, &x, &[0, 1, 2, 3], &mut y, &call.with_family(FamilyChoice::Fast));
        assert!(matches!(fast, Err(Error::Core(CoreError::FamilyUnavailable { .. }))), "{fast:?}");
        let short = backend.grouped(&arranged, &x, &[0, 1, 2, 3], &mut y[1..], &call);
        assert!(matches!(short, Err(Error::Core(CoreError::LengthMismatch { what: "y", .. }))), "{short:?}");
        assert!(y.iter().all(|&v| v == 0x1234), "a refused call writes nothing");
    }
}
