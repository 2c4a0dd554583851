//! Gate 6: X one-hot at column c gives `bf16(e2m1 * e4m3 * global_scale)` exactly: a closed-form
//! oracle that shares no arithmetic with the contract.

use super::{Cases, clone_error, diff, exact, resolve};
use crate::data::matrix;
use gemv_backend::{DeviceMatrix, GpuBackend};
use gemv_core::codec::f32_to_bf16;

pub(super) fn impulse(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    for (n, k) in [(65, 80), (7, 5136)] {
        let w = matrix(n, k, 555 + k as u64);
        let view = w.view();
        let columns = [0, 1, 15, 16, 17, k / 2 + 1, k - 1];
        let matrix = DeviceMatrix::upload(backend, &view);
        for (i, &c) in columns.iter().enumerate() {
            // Three rows, each one-hot at a different column.
            let hot: Vec<usize> = (0..3).map(|t| columns[(i + t) % columns.len()]).collect();
            let mut x = vec![0u16; 3 * k];
            for (t, &col) in hot.iter().enumerate() {
                x[t * k + col] = f32_to_bf16(1.0);
            }
            let expected: Vec<u16> = hot
                .iter()
                // `+ 0.0`: the contract's partials start at +0.0, so a -0.0 weight (code 0x8) gives +0.0.
                .flat_map(|&col| {
                    (0..n).map(move |row| f32_to_bf16(view.scaled_weight(row, col) * view.global_scale() + 0.0))
                })
                .collect();
            let outcome = matrix.as_ref().map_err(clone_error).and_then(|matrix| {
                let rows3 = matrix.call(&tiers, &x, &exact(3))?;
                let row1 = matrix.call(&tiers, &x[..k], &exact(1))?;
                Ok(diff(&expected, &rows3, n).or_else(|| diff(&expected[..n], &row1, n)))
            });
            cases.record(format!("N={n} K={k} column {c}"), outcome);
        }
    }
}
