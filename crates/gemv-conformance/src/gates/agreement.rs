//! Gates 1 and 2: every kernel at every m within its width equals the M = 1 kernel run row by
//! row and the host contract, the ring-pipeline kernels also across several X-staging segments;
//! the register-tiled batch8 equals the classic one.

use super::{CAP, Cases, diff, host, lookup, upload};
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
        let Some(matrix) = upload(backend, &w, cases) else { continue };
        let single = lookup(backend, "w4a16_gemv");
        let mut m1_rows = Vec::with_capacity(CAP * n);
        let m1 = (0..CAP).try_for_each(|t| {
            m1_rows.extend(matrix.gemv_with(single, &x[t * k..(t + 1) * k], 1)?);
            Ok(())
        });
        cases.record(format!("N={n} K={k} w4a16_gemv row by row = host"), m1.map(|()| diff(&expected, &m1_rows, n)));
        for spec in family_kernels(Family::Exact) {
            let outcome = at_every_m(backend, &matrix, spec, &x, |m, found| {
                diff(&expected[..m * n], found, n)
                    .map(|d| format!("m={m} vs host: {d}"))
                    .or_else(|| diff(&m1_rows[..m * n], found, n).map(|d| format!("m={m} vs M=1 kernel: {d}")))
            });
            cases.record(format!("N={n} K={k} {} m=1..={}", spec.name, spec.max_m), outcome);
        }
    }
}

/// Runs `spec` at every m within its width on the first m tokens of `x` (K each), until `check`
/// (given m and the outputs) reports a difference: `Some` names the first, or the kernel's absence.
fn at_every_m(
    backend: &dyn GpuBackend,
    matrix: &DeviceMatrix<&dyn GpuBackend>,
    spec: &gemv_core::KernelSpec,
    x: &[u16],
    check: impl Fn(usize, &[u16]) -> Option<String>,
) -> gemv_backend::Result<Option<String>> {
    let handle = lookup(backend, spec.name);
    if !handle.is_resolved() {
        return Ok(Some(format!("kernel {} is not present", spec.name)));
    }
    let k = matrix.k();
    for m in 1..=spec.max_m {
        let found = matrix.gemv_with(handle, &x[..m * k], m)?;
        if let Some(difference) = check(m, &found) {
            return Ok(Some(difference));
        }
    }
    Ok(None)
}

/// (N, K) for the ring kernels. The first's K spans two whole segments of staged X at one token (8
/// passes of 1,024 k each), a partial third and a partial last pass (G mod 64 = 35), and its N
/// leaves the last block's warps partly past the end. The second's N takes a persistent grid's
/// warps several rounds on a device of few SMs (the emulator's 3: 192 rows a round at 4 rows per
/// warp), ending in a partial one.
const RING_SHAPES: [(usize, usize); 2] = [(37, 17_968), (421, 1552)];

/// Every ring-pipeline kernel at every m within its width, where X is staged in several segments
/// and a persistent grid walks several rounds, against the host contract (gate 1's shapes fit one
/// segment at one token and one round).
pub(super) fn ring_segments(backend: &dyn GpuBackend, cases: &mut Cases) {
    for (n, k) in RING_SHAPES {
        let w = matrix(n, k, (n * 31 + k) as u64);
        let x = activations(CAP, k, (n + k * 7) as u64);
        let expected = host(&w, &x, CAP);
        let Some(matrix) = upload(backend, &w, cases) else { continue };
        for spec in family_kernels(Family::Exact).filter(|spec| spec.ring_depth > 0) {
            let outcome = at_every_m(backend, &matrix, spec, &x, |m, found| {
                diff(&expected[..m * n], found, n).map(|d| format!("m={m} vs host: {d}"))
            });
            cases.record(format!("N={n} K={k} {} m=1..={} (ring)", spec.name, spec.max_m), outcome);
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
