//! Gate 3: every output within the derived bound of the independent f64 reference.

use super::{Cases, clone_error, exact, resolve};
use crate::data::{activations, matrix};
use gemv_backend::{DeviceMatrix, GpuBackend};
use gemv_core::codec::bf16_to_f32;
use gemv_core::f64_reference;

pub(super) fn f64_bound(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    for (n, k) in [(64, 4096), (17, 5136), (130, 16), (9, 1552)] {
        let w = matrix(n, k, 3 * n as u64);
        let matrix = DeviceMatrix::upload(backend, &w.view());
        for m in [1, 8, 32] {
            let x = activations(m, k, 5 + m as u64);
            let outcome = matrix.as_ref().map_err(clone_error).and_then(|matrix| {
                let found = matrix.call(&tiers, &x, &exact(m))?;
                let reference = f64_reference(&w.view(), &x, m)?;
                let bad = (0..found.len()).find(|&i| !reference[i].admits(found[i]));
                Ok(bad.map(|i| {
                    let r = reference[i];
                    format!(
                        "Y[{}][{}]: f64 {} ± {:e}, found {} (off by {:e})",
                        i / n,
                        i % n,
                        r.value,
                        r.bound,
                        bf16_to_f32(found[i]),
                        (f64::from(bf16_to_f32(found[i])) - r.value).abs()
                    )
                }))
            });
            cases.record(format!("N={n} K={k} M={m}"), outcome);
        }
    }
}
