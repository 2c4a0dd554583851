//! An f32 Y (in gates 5 and 10): the values the bf16 result rounds, for a tensor-parallel
//! all-reduce to sum. The exact family writes the host's f32 contract bit for bit (so its bf16
//! rounding is the bf16 result): every kernel at its full width, with X and Y as rows of wider
//! buffers whose gaps must survive, on the plain path's detour (X that overflows when staged),
//! and through the plan past the widest tier. The fast family stays within the f64 reference's
//! f32 bound and rounds to its own bf16 output bit for bit. A backend that writes bf16 only
//! refuses an f32 Y with a typed error.

use super::fast::fast_kernels;
use super::strides::{STRIDE_PADS, strided_launch, strided_launch_as};
use super::{CAP, Cases, clone_error, lookup, resolve};
use crate::data::{activations, extreme_activations, matrix, staged_overflow};
use gemv_backend::{DeviceMatrix, Error, GpuBackend, KernelHandle, Result};
use gemv_core::codec::f32_to_bf16;
use gemv_core::{
    F32_Y_NAN, Family, FamilyChoice, GemvCall, Nvfp4Matrix, YFormat, family_kernels, fast_reference, gemv_contract_f32,
    host_threads,
};

/// Between an f32 Y's rows: never a result of these inputs' rows.
const Y_GAP: f32 = f32::from_bits(0x5A5A_5A5A);

/// The host contract's f32 Y.
fn host_f32(w: &Nvfp4Matrix, x: &[u16], m: usize) -> Vec<f32> {
    let mut y = vec![0f32; m * w.n()];
    gemv_contract_f32(&w.view(), x, m, &mut y, host_threads()).expect("suite shapes are valid");
    y
}

/// The first few outputs whose bits differ, as `Y[t][n]: expected .. found ..`, or None.
fn diff_f32(expected: &[f32], found: &[f32], n: usize) -> Option<String> {
    if expected.len() != found.len() {
        return Some(format!("expected {} outputs, found {}", expected.len(), found.len()));
    }
    let bad: Vec<usize> = (0..expected.len()).filter(|&i| expected[i].to_bits() != found[i].to_bits()).collect();
    let shown: Vec<String> = bad
        .iter()
        .take(3)
        .map(|&i| {
            let (e, f) = (expected[i], found[i]);
            format!("Y[{}][{}]: expected {:#010x} ({e}), found {:#010x} ({f})", i / n, i % n, e.to_bits(), f.to_bits())
        })
        .collect();
    (!bad.is_empty()).then(|| format!("{} of {} outputs differ; {}", bad.len(), expected.len(), shown.join("; ")))
}

/// One strided f32 launch's rows against `expected`, and the gaps between them.
fn strided_f32_failure(
    launched: Result<(Vec<f32>, Option<usize>)>,
    expected: impl FnOnce(&[f32]) -> Option<String>,
) -> Result<Option<String>> {
    launched
        .map(|(y, changed)| expected(&y).or_else(|| changed.map(|i| format!("y element {i}, between rows, changed"))))
}

/// Gate 5's part: the exact family's f32 Y.
pub(super) fn exact_f32_y(backend: &dyn GpuBackend, cases: &mut Cases) {
    let (n, k) = (63, 80);
    let w = matrix(n, k, 556);
    let f32_launch = |handle: KernelHandle, w: &Nvfp4Matrix, x: &[u16], m: usize, pads| {
        strided_launch_as(backend, handle, (w, x, m), pads, (YFormat::F32, Y_GAP))
    };
    let first = family_kernels(Family::Exact).next().map_or(KernelHandle::NONE, |spec| lookup(backend, spec.name));
    if let Err(Error::Unsupported { .. }) = f32_launch(first, &w, &activations(1, k, 91), 1, (0, 0)) {
        cases.record("f32 Y refused with a typed error (this backend writes bf16 only)", Ok(None));
        return;
    }
    for (x_pad, y_pad, alignment) in STRIDE_PADS {
        for spec in family_kernels(Family::Exact) {
            let m = spec.max_m;
            let x = activations(m, k, 91);
            let expected = host_f32(&w, &x, m);
            let outcome = strided_f32_failure(f32_launch(lookup(backend, spec.name), &w, &x, m, (x_pad, y_pad)), |y| {
                diff_f32(&expected, y, n)
            });
            cases.record(
                format!(
                    "N={n} K={k} {} m={m}, f32 Y, row strides K + {x_pad} and N + {y_pad} ({alignment})",
                    spec.name
                ),
                outcome,
            );
        }
    }
    // X that overflows when staged (blocks take the plain path, whose f32 Y is the contract's
    // too), and extreme activations with a NaN in token 0 and an infinity in token 1 (NaN and
    // infinite outputs: every NaN written as F32_Y_NAN; products and sums near f32's limits and
    // subnormal, kept where bf16 would flush or round them).
    let (overflow, overflowing_x) = staged_overflow(37);
    let mut extreme_x = extreme_activations(CAP, k, 93);
    extreme_x[3] = 0x7FC1;
    extreme_x[k + 5] = 0x7F80;
    let special =
        [("X overflowing when staged", &overflow, &overflowing_x), ("extreme X, NaN and Inf", &w, &extreme_x)];
    for (what, w, x) in special {
        for spec in family_kernels(Family::Exact) {
            let m = spec.max_m.min(x.len() / w.k());
            let x = &x[..m * w.k()];
            let expected = host_f32(w, x, m);
            let outcome = strided_f32_failure(f32_launch(lookup(backend, spec.name), w, x, m, (0, 0)), |y| {
                diff_f32(&expected, y, w.n())
            });
            cases.record(format!("N={} K={} {} m={m}, f32 Y, {what}", w.n(), w.k(), spec.name), outcome);
        }
    }
    // Through the plan (M past the widest tier: several launches, each writing its rows).
    let tiers = resolve(backend);
    let (n, k) = (45, 1552);
    let w = matrix(n, k, 557);
    for m in [1, 9, 35] {
        let x = activations(m, k, 92 + m as u64);
        let call = GemvCall::new(m).with_family(FamilyChoice::Exact);
        let outcome = DeviceMatrix::upload(backend, &w.view()).map_err(|e| clone_error(&e)).and_then(|matrix| {
            let y = matrix.call_f32(&tiers, &x, &call)?;
            let bf16 = matrix.call(&tiers, &x, &call)?;
            let rounded: Vec<u16> = y.iter().map(|&v| f32_to_bf16(v)).collect();
            Ok(diff_f32(&host_f32(&w, &x, m), &y, n).or_else(|| {
                (rounded != bf16).then(|| "the f32 Y does not round to the bf16 call's result".to_string())
            }))
        });
        cases.record(format!("N={n} K={k} m={m}: f32 Y through the exact plan"), outcome);
    }
}

/// Gate 10's part: the fast family's f32 Y, where the backend has the family.
pub(super) fn fast_f32_y(backend: &dyn GpuBackend, cases: &mut Cases) {
    let (n, k) = (37, 1024);
    let w = matrix(n, k, 65);
    for (x_pad, y_pad, alignment) in STRIDE_PADS {
        for (spec, handle) in fast_kernels(backend) {
            for m in [spec.max_m, spec.max_m - 3] {
                // Token 0 holds a NaN: its outputs are NaN, written as F32_Y_NAN.
                let mut x = activations(m, k, 66 + m as u64);
                x[3] = 0x7FC1;
                let launched = strided_launch_as(backend, handle, (&w, &x, m), (x_pad, y_pad), (YFormat::F32, Y_GAP));
                let bf16 = strided_launch(backend, handle, &w, &x, m, (x_pad, y_pad));
                let outcome = bf16.and_then(|(bf16, _)| {
                    strided_f32_failure(launched, |y| {
                        fast_f32_failure(&w, &x, m, y).or_else(|| nan_failure(y)).or_else(|| {
                            let rounded: Vec<u16> = y.iter().map(|&v| f32_to_bf16(v)).collect();
                            (rounded != bf16).then(|| "the f32 Y does not round to the bf16 launch's result".into())
                        })
                    })
                });
                cases.record(
                    format!(
                        "N={n} K={k} {} m={m}: f32 Y, row strides K + {x_pad} and N + {y_pad} ({alignment})",
                        spec.name
                    ),
                    outcome,
                );
            }
        }
    }
}

/// The first NaN of an f32 Y written other than as [`F32_Y_NAN`], as a message.
fn nan_failure(found: &[f32]) -> Option<String> {
    let (i, v) = found.iter().enumerate().find(|(_, v)| v.is_nan() && v.to_bits() != F32_Y_NAN)?;
    Some(format!("output {i}: NaN written as {:#010x}, not {F32_Y_NAN:#010x}", v.to_bits()))
}

/// The first output of an f32 Y (`[m][N]` from `w` and `x`) outside the fast family's f32 bound,
/// as a message; None when every output is within it.
pub fn fast_f32_failure(w: &Nvfp4Matrix, x: &[u16], m: usize, found: &[f32]) -> Option<String> {
    let reference = match fast_reference(&w.view(), x, m) {
        Ok(reference) => reference,
        Err(error) => return Some(format!("reference: {error}")),
    };
    let bad: Vec<usize> = (0..found.len()).filter(|&i| !reference[i].admits_f32(found[i])).collect();
    let &first = bad.first()?;
    let r = reference[first];
    Some(format!(
        "{} of {} outputs outside the f32 bound; Y[{}][{}]: f64 {} ± {:e}, found {}",
        bad.len(),
        found.len(),
        first / w.n(),
        first % w.n(),
        r.value,
        r.f32_bound,
        found[first]
    ))
}
