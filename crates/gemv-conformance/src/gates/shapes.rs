//! Gate 7: odd shapes (N in {1, 7, 63, 65, 4097}; K in {16, 48, 80, 800, 1552, 5136}) at every M
//! in 1..=32 through the dispatch plan, and every kernel of the registry forced at its full
//! width on each shape, so a kernel the plan does not pick (the classic batch8, say) still meets
//! N = 4097 and K = 5136.

use super::{CAP, Cases, diff, exact, host, lookup, resolve, upload};
use crate::data::{activations, matrix};
use gemv_backend::GpuBackend;
use gemv_core::{Family, family_kernels};

pub(super) const ODD_N: [usize; 5] = [1, 7, 63, 65, 4097];
pub(super) const ODD_K: [usize; 6] = [16, 48, 80, 800, 1552, 5136];

pub(super) fn odd_shapes(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    for n in ODD_N {
        for k in ODD_K {
            let w = matrix(n, k, (7 * n + k) as u64);
            let x = activations(CAP, k, (n ^ k) as u64);
            let expected = host(&w, &x, CAP);
            let Some(matrix) = upload(backend, &w, cases) else { continue };
            let planned = (1..=CAP).try_fold(None, |failure, m| {
                if failure.is_some() {
                    return Ok(failure);
                }
                let found = matrix.call(&tiers, &x[..m * k], &exact(m))?;
                Ok(diff(&expected[..m * n], &found, n).map(|d| format!("M={m}: {d}")))
            });
            cases.record(format!("N={n} K={k} M=1..=32 by the plan"), planned);
            let forced = family_kernels(Family::Exact).try_fold(None, |failure, spec| {
                if failure.is_some() {
                    return Ok(failure);
                }
                let m = spec.max_m;
                let found = matrix.gemv_with(lookup(backend, spec.name), &x[..m * k], m)?;
                Ok(diff(&expected[..m * n], &found, n).map(|d| format!("{} at m={m}: {d}", spec.name)))
            });
            cases.record(format!("N={n} K={k} every kernel at its width"), forced);
        }
    }
}
