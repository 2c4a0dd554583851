//! Gate 4: permuting the rows of X permutes the rows of Y, bit for bit (a token's result does not
//! depend on where it sits in the batch).

use super::{Cases, diff, exact, resolve};
use crate::data::{activations, matrix};
use gemv_backend::{DeviceMatrix, GpuBackend};

pub(super) fn row_permutation(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    let (n, k) = (65, 1040);
    let w = matrix(n, k, 44);
    for m in [2, 5, 8, 13, 32] {
        let x = activations(m, k, 99 + m as u64);
        // Rotate by one: no row stays put for any m >= 2.
        let order: Vec<usize> = (0..m).map(|t| (t + 1) % m).collect();
        let permuted: Vec<u16> = order.iter().flat_map(|&t| x[t * k..(t + 1) * k].iter().copied()).collect();
        let outcome = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| {
            let y = matrix.call(&tiers, &x, &exact(m))?;
            let y_permuted = matrix.call(&tiers, &permuted, &exact(m))?;
            let expected: Vec<u16> = order.iter().flat_map(|&t| y[t * n..(t + 1) * n].iter().copied()).collect();
            Ok(diff(&expected, &y_permuted, n))
        });
        cases.record(format!("N={n} K={k} M={m}"), outcome);
    }
}
