//! The engine path: weights arranged once (`CpuWeights`), launches over the caller's slices with
//! row strides, on every SIMD path this CPU has, against the host contract bit for bit.

use gemv_conformance::{
    activations, matrix,
    skip::{Requirement, skip},
};
use gemv_core::codec::BF16_NAN;
use gemv_core::{CoreError, gemv_contract};
// The engine's names, as an engine imports them: from the backend crate alone.
use gemv_cpu::{CpuBackend, CpuWeights, Error, FamilyChoice, GemvCall, SimdPath};

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
