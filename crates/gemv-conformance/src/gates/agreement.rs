//! Gates 1 and 2: every kernel at every m within its width equals the M = 1 kernel run row by
//! row and the host contract; the register-tiled batch8 equals the classic one.

use super::{CAP, Cases, diff, host, lookup};
use crate::data::{activations, matrix};
use gemv_backend::{DeviceMatrix, GpuBackend};
use gemv_core::{Family, family_kernels};

/// (N, K): a K with G > 64 and G mod 64 = 4, one with K % 32 != 0 and G = 130, one tiny, and two
/// whose last pass fills the second half of the 64 partials (G mod 64 = 50 and 33).
pub(super) const AGREEMENT_SHAPES: [(usize, usize); 5] = [(67, 272), (33, 2080), (5, 48), (9, 800), (3, 1552)];

pub(super) fn tier_agreement(backend: &dyn GpuBackend, cases: &mut Cases) {
    for (n, k) in AGREEMENT_SHAPES {
        let w = matrix(n, k, (n * k) as u64);
        let x = activations(CAP, k, k as u64);
        let expected = host(&w, &x, CAP);
        let matrix = match DeviceMatrix::upload(backend, &w.view()) {
            Ok(m) => m,
            Err(error) => {
                cases.record(format!("N={n} K={k} upload"), Err(error));
                continue;
            }
        };
        let single = lookup(backend, "w4a16_gemv");
        let mut m1_rows = Vec::with_capacity(CAP * n);
        let m1 = (0..CAP).try_for_each(|t| {
            m1_rows.extend(matrix.gemv_with(single, &x[t * k..(t + 1) * k], 1)?);
            Ok(())
        });
        cases.record(format!("N={n} K={k} w4a16_gemv row by row = host"), m1.map(|()| diff(&expected, &m1_rows, n)));
        for spec in family_kernels(Family::Exact) {
            let handle = lookup(backend, spec.name);
            let outcome = if !handle.is_resolved() {
                Ok(Some(format!("kernel {} is not present", spec.name)))
            } else {
                (1..=spec.max_m).try_fold(None, |failure, m| {
                    if failure.is_some() {
                        return Ok(failure);
                    }
                    let found = matrix.gemv_with(handle, &x[..m * k], m)?;
                    Ok(diff(&expected[..m * n], &found, n)
                        .map(|d| format!("m={m} vs host: {d}"))
                        .or_else(|| diff(&m1_rows[..m * n], &found, n).map(|d| format!("m={m} vs M=1 kernel: {d}"))))
                })
            };
            cases.record(format!("N={n} K={k} {} m=1..={}", spec.name, spec.max_m), outcome);
        }
    }
}

pub(super) fn register_tiled(backend: &dyn GpuBackend, cases: &mut Cases) {
    let (classic, tiled) = (lookup(backend, "w4a16_gemv_batch8"), lookup(backend, "w4a16_gemv_batch8_rt2"));
    for (n, k) in AGREEMENT_SHAPES {
        let w = matrix(n, k, (n + k) as u64);
        let x = activations(8, k, 77);
        let outcome = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| {
            for m in 1..=8 {
                let a = matrix.gemv_with(classic, &x[..m * k], m)?;
                let b = matrix.gemv_with(tiled, &x[..m * k], m)?;
                if let Some(d) = diff(&a, &b, n) {
                    return Ok(Some(format!("m={m}: batch8 vs rt2: {d}")));
                }
            }
            Ok(None)
        });
        cases.record(format!("N={n} K={k} m=1..=8"), outcome);
    }
}
