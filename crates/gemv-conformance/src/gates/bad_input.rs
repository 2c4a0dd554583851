//! Gate 8: bad input gives a typed error naming what is wrong, and NaN or infinite values give
//! the contract's documented results, never a panic or an out-of-bounds access.

use super::{Cases, diff, exact, host, lookup, resolve};
use crate::data::{activations, matrix, overflowing_product, staged_overflow};
use gemv_backend::{DeviceMatrix, Error, GemvArgs, GpuBackend, KernelHandle, MultiplyAdd};
use gemv_core::codec::{BF16_NAN, bf16_to_f32, f32_to_bf16};
use gemv_core::{CoreError, Nvfp4Matrix};

pub(super) fn bad_input(backend: &dyn GpuBackend, cases: &mut Cases) {
    let (n, k, m) = (5, 32, 2);
    let w = matrix(n, k, 31);
    let batch2 = lookup(backend, "w4a16_gemv_batch2");
    let outcome = (|| {
        let x = backend.alloc(2 * m * k)?;
        let packed = backend.alloc(n * k / 2)?;
        let scales = backend.alloc(n * k / 16)?;
        let y = backend.alloc(2 * m * n)?;
        Ok((x, packed, scales, y))
    })();
    let (x, packed, scales, y) = match outcome {
        Ok(buffers) => buffers,
        Err(error) => return cases.record("allocate", Err(error)),
    };
    let good = GemvArgs::contiguous(x.whole(), packed.whole(), scales.whole(), y.whole(), 1.0, m, n, k);
    cases
        .record("valid arguments launch", backend.launch_gemv(batch2, &good).and(backend.synchronize()).map(|()| None));

    type Check = fn(&Error) -> bool;
    let rejected: Vec<(&str, KernelHandle, GemvArgs, Check)> = vec![
        ("M = 0", batch2, GemvArgs { m: 0, ..good }, |e| matches!(e, Error::Core(CoreError::ZeroM { .. }))),
        ("N = 0", batch2, GemvArgs { n: 0, ..good }, |e| matches!(e, Error::Core(CoreError::ZeroN { .. }))),
        ("K = 24", batch2, GemvArgs { k: 24, ..good }, |e| matches!(e, Error::Core(CoreError::InvalidK { .. }))),
        ("K = 0", batch2, GemvArgs { k: 0, ..good }, |e| matches!(e, Error::Core(CoreError::InvalidK { .. }))),
        ("M = 3 on batch2", batch2, GemvArgs { m: 3, ..good }, |e| {
            matches!(e, Error::Core(CoreError::MExceedsWidth { .. }))
        }),
        ("zero handle", KernelHandle::NONE, good, |e| matches!(e, Error::UnresolvedKernel { .. })),
        ("x too small", batch2, GemvArgs { x: x.range(0, 2 * m * k - 2), ..good }, |e| {
            matches!(e, Error::Core(CoreError::RangeTooSmall { what: "x", .. }))
        }),
        ("x row stride below K", batch2, GemvArgs { x_row_stride: k - 1, ..good }, |e| {
            matches!(e, Error::Core(CoreError::RowStrideTooSmall { what: "x", .. }))
        }),
        ("y row stride below N", batch2, GemvArgs { y_row_stride: n - 1, ..good }, |e| {
            matches!(e, Error::Core(CoreError::RowStrideTooSmall { what: "y", .. }))
        }),
        // Two rows K + 1 apart span 2K + 1 elements: one more than the buffer holds.
        ("x too small for its row stride", batch2, GemvArgs { x_row_stride: k + 1, ..good }, |e| {
            matches!(e, Error::Core(CoreError::RangeTooSmall { what: "x", .. }))
        }),
        ("y too small for its row stride", batch2, GemvArgs { y_row_stride: n + 1, ..good }, |e| {
            matches!(e, Error::Core(CoreError::RangeTooSmall { what: "y", .. }))
        }),
        // Each range one element short of what the shape needs.
        ("packed too small", batch2, GemvArgs { packed: packed.range(0, n * k / 2 - 1), ..good }, |e| {
            matches!(e, Error::Core(CoreError::RangeTooSmall { what: "packed", .. }))
        }),
        ("scales too small", batch2, GemvArgs { scales: scales.range(1, 9), ..good }, |e| {
            matches!(e, Error::Core(CoreError::RangeTooSmall { what: "scales", .. }))
        }),
        ("y too small", batch2, GemvArgs { y: y.range(0, 2 * m * n - 2), ..good }, |e| {
            matches!(e, Error::Core(CoreError::RangeTooSmall { what: "y", .. }))
        }),
        ("range past the buffer", batch2, GemvArgs { y: y.range(2, 2 * m * n), ..good }, |e| {
            matches!(e, Error::RangeOutOfBounds { what: "y", .. })
        }),
        ("range offset overflow", batch2, GemvArgs { x: x.range(usize::MAX, 2), ..good }, |e| {
            matches!(e, Error::RangeOutOfBounds { .. })
        }),
        ("shape larger than the buffers", batch2, GemvArgs { n: 6, y_row_stride: 6, ..good }, |e| {
            matches!(e, Error::Core(CoreError::RangeTooSmall { .. }))
        }),
        ("misaligned y", batch2, GemvArgs { y: y.range(1, 2 * m * n - 1), ..good }, |e| {
            matches!(e, Error::Core(CoreError::RangeTooSmall { .. }) | Error::Core(CoreError::Misaligned { .. }))
        }),
        ("y overlaps x", batch2, GemvArgs { y: x.range(0, 2 * m * n), ..good }, |e| {
            matches!(e, Error::OutputOverlaps { what: "x", .. })
        }),
    ];
    for (what, kernel, args, check) in rejected {
        let outcome = match backend.launch_gemv(kernel, &args) {
            Ok(()) => Some("accepted".to_string()),
            Err(error) if check(&error) => None,
            Err(error) => Some(format!("wrong error: {error}")),
        };
        cases.record(format!("rejects {what}"), Ok(outcome));
    }
    let missing = lookup(backend, "w4a16_gemv_batch9");
    let wrong_module = backend.lookup_kernel("other_module", "w4a16_gemv");
    cases.record(
        "unknown kernel or module resolves to zero",
        Ok((missing.is_resolved() || wrong_module.is_resolved()).then(|| "a bogus name resolved".to_string())),
    );
    let freed = backend.free(y).and_then(|()| backend.launch_gemv(batch2, &good));
    cases.record(
        "rejects a freed buffer",
        Ok(match freed {
            Err(Error::UnknownBuffer { .. }) => None,
            Err(error) => Some(format!("wrong error: {error}")),
            Ok(()) => Some("accepted".into()),
        }),
    );
    for buffer in [x, packed, scales] {
        let _ = backend.free(buffer);
    }
    nan_and_inf(backend, cases, &w);
    overflowing_products(backend, cases);
    staged_overflows(backend, cases);
}

/// X that overflows once scaled by a power of two, as the exact CUDA kernels stage it: an
/// infinite total (token 0) and a NaN made by the reduction tree's addition (token 1), where
/// the contract's outputs are finite. A kernel must notice each (any NaN and either infinity)
/// and still write the contract's bits; each token runs alone too, since a kernel that noticed
/// one of them would redo the other's outputs with it.
fn staged_overflows(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    let n = 9;
    let (w, x) = staged_overflow(n);
    let k = w.k();
    let runs = [("an infinite total", &x[..k], 1), ("a NaN total", &x[k..], 1), ("both", &x[..], 2)];
    for (label, x, m) in runs {
        let expected = host(&w, x, m);
        let outcome = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| {
            if let Some(i) = expected.iter().position(|&v| !bf16_to_f32(v).is_finite()) {
                return Ok(Some(format!("the contract's output {i} must be finite: {:#06x}", expected[i])));
            }
            Ok(diff(&expected, &matrix.call(&tiers, x, &exact(m))?, n))
        });
        cases.record(format!("X that overflows once staged, M = {m}: {label} there, finite here"), outcome);
    }
}

/// A product that overflows f32 inside a chain whose fused result is finite: a backend that
/// fuses, as the contract does, matches it bit for bit; one whose driver may not fuse (WGSL) may
/// write +Inf for that one output instead, and nothing else may differ.
fn overflowing_products(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    let (n, k) = (9, 48);
    let (w, x) = overflowing_product(n, k);
    let expected = host(&w, &x, 1);
    let multiply_add = backend.device_info().multiply_add;
    let outcome = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| {
        let found = matrix.call(&tiers, &x, &exact(1))?;
        if !bf16_to_f32(expected[0]).is_finite() {
            return Ok(Some(format!("the host contract must keep the fused chain finite: {:#06x}", expected[0])));
        }
        let unfused_allowed = multiply_add == MultiplyAdd::DriverChoice && found[0] == f32_to_bf16(f32::INFINITY);
        let compared = if unfused_allowed { 1 } else { 0 };
        Ok(diff(&expected[compared..], &found[compared..], n))
    });
    cases.record(format!("an overflowing product in a finite fused chain ({multiply_add:?} multiply-add)"), outcome);
}

fn nan_and_inf(backend: &dyn GpuBackend, cases: &mut Cases, w: &Nvfp4Matrix) {
    let tiers = resolve(backend);
    let (n, k) = (w.n(), w.k());
    let m = 3;
    let mut x = activations(m, k, 17);
    x[3] = BF16_NAN; // row 0
    x[k + 4] = f32_to_bf16(f32::INFINITY); // row 1
    x[k + 9] = f32_to_bf16(f32::NEG_INFINITY);
    x[2 * k + 20] = f32_to_bf16(f32::INFINITY); // row 2
    let expected = host(w, &x, m);
    let outcome = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| {
        let found = matrix.call(&tiers, &x, &exact(m))?;
        if let Some(d) = diff(&expected, &found, n) {
            return Ok(Some(format!("vs host contract: {d}")));
        }
        Ok(found[..n].iter().any(|&v| v != BF16_NAN).then(|| "a NaN in X must give 0x7FC0 in its whole row".into()))
    });
    cases.record("NaN and ±Inf in X give the contract's bits", outcome);

    let (packed, mut scales, _) = w.clone().into_parts();
    scales[2 * (k / 16)] = 0x7F; // row n = 2, group 0
    let nan_scale = Nvfp4Matrix::from_parts(packed.clone(), scales, w.global_scale(), n, k).expect("same shape");
    let x = activations(m, k, 18);
    let outcome = DeviceMatrix::upload(backend, &nan_scale.view()).and_then(|matrix| {
        let found = matrix.call(&tiers, &x, &exact(m))?;
        let column: Vec<u16> = (0..m).map(|t| found[t * n + 2]).collect();
        Ok(diff(&host(&nan_scale, &x, m), &found, n)
            .or_else(|| column.iter().any(|&v| v != BF16_NAN).then(|| format!("column 2 should be NaN: {column:x?}"))))
    });
    cases.record("NaN scale gives 0x7FC0 in its column", outcome);

    let (_, scales, _) = w.clone().into_parts();
    let nan_global = Nvfp4Matrix::from_parts(packed, scales, f32::NAN, n, k).expect("same shape");
    let outcome = DeviceMatrix::upload(backend, &nan_global.view()).and_then(|matrix| {
        let found = matrix.call(&tiers, &x, &exact(m))?;
        Ok(found.iter().any(|&v| v != BF16_NAN).then(|| "a NaN global scale must give 0x7FC0 everywhere".into()))
    });
    cases.record("NaN global scale gives 0x7FC0 everywhere", outcome);

    let bad_x = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| matrix.call(&tiers, &x[..k - 1], &exact(1)));
    cases.record(
        "rejects X of the wrong length",
        Ok(match bad_x {
            Err(Error::Core(CoreError::LengthMismatch { what: "x", .. })) => None,
            Err(error) => Some(format!("wrong error: {error}")),
            Ok(_) => Some("accepted".into()),
        }),
    );
}
