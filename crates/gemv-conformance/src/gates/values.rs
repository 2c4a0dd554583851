//! Gate 9: special values through every backend, bit for bit against the host contract: every
//! one of the 256 E4M3 scale codes (both signs, zero, subnormals, the largest, NaN), global
//! scales of every class (both signs, zero, subnormal, infinite, large enough to overflow) and
//! activations from bf16 subnormals to 2^100.

use super::{Cases, clone_error, diff, exact, host, resolve};
use crate::data::{EXTREME_ROWS, Lcg, activations, extreme_activations, matrix_with_scales};
use gemv_backend::{DeviceMatrix, GpuBackend};

/// E4M3's NaN codes.
const NAN_CODES: [u8; 2] = [0x7F, 0xFF];

/// Every non-NaN scale code, drawn at random.
fn any_finite_code(rng: &mut Lcg) -> u8 {
    loop {
        let code = rng.next_u32() as u8;
        if !NAN_CODES.contains(&code) {
            return code;
        }
    }
}

/// Global scales of every class, with a name for the case.
pub(super) const GLOBAL_SCALES: [(&str, f32); 10] = [
    ("ordinary", 0.0371),
    ("negative", -1.5),
    ("+0", 0.0),
    ("-0", -0.0),
    ("subnormal", 1.0e-40),
    ("smallest normal", f32::MIN_POSITIVE),
    ("+inf", f32::INFINITY),
    ("-inf", f32::NEG_INFINITY),
    ("overflowing (3e38)", 3.0e38),
    ("NaN", f32::NAN),
];

pub(super) fn special_values(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    let mut check = |case: String, w: &gemv_core::Nvfp4Matrix, x: &[u16], m: usize| {
        let expected = host(w, x, m);
        let outcome = DeviceMatrix::upload(backend, &w.view())
            .map_err(|e| clone_error(&e))
            .and_then(|matrix| Ok(diff(&expected, &matrix.call(&tiers, x, &exact(m))?, w.n())));
        cases.record(case, outcome);
    };

    // Row r uses scale code r in every group: each code's effect on its own, NaN codes included.
    let (n, k, m) = (256, 80, EXTREME_ROWS.len());
    let every_code = matrix_with_scales(n, k, 256, 0.0371, |row, _, _| row as u8);
    check(
        format!("N={n} K={k} M={m}: row r scaled by E4M3 code r, all 256 codes"),
        &every_code,
        &extreme_activations(m, k, 1),
        m,
    );

    // Mixed finite codes in one row, K with G mod 64 = 50, every global-scale class.
    let (n, k, m) = (67, 800, 3);
    let x = activations(m, k, 800);
    for (index, (name, global_scale)) in GLOBAL_SCALES.into_iter().enumerate() {
        let w = matrix_with_scales(n, k, 800 + index as u64, global_scale, |_, _, rng| any_finite_code(rng));
        check(format!("N={n} K={k} M={m}: every finite scale code, global scale {name} ({global_scale:e})"), &w, &x, m);
    }

    // Extreme activations against mixed codes, K with G mod 64 = 33, every kind of row.
    let (n, k, m) = (33, 1552, 2 * EXTREME_ROWS.len());
    let w = matrix_with_scales(n, k, 1552, 0.0371, |_, _, rng| any_finite_code(rng));
    check(format!("N={n} K={k} M={m}: activations {}", EXTREME_ROWS.join(", ")), &w, &extreme_activations(m, k, 2), m);
}
