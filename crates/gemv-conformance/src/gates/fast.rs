//! Gates 10 and 11: the fast (tensor-core) family, on backends that have it (CUDA sm_80+ and the
//! CUDA emulator). Its outputs are bounded against the f64 reference, not bit-equal to the exact
//! contract, so gate 10 checks the bound ([`fast_bound_failure`]) on odd shapes, every scale code
//! and every class of global scale; gate 11 checks what the family promises bit for bit: a
//! token's output does not depend on M, on the tier or on the other tokens, and a launch repeated
//! gives the same bits; rows past M stay untouched and M past the width is a typed error.

use super::guards::{Offsets, guarded_launch};
use super::strides::{STRIDE_PADS, strided_launch};
use super::values::GLOBAL_SCALES;
use super::{Cases, clone_error};
use crate::data::{EXTREME_ROWS, activations, extreme_activations, matrix, matrix_with_scales, order_sensitive};
use gemv_backend::{DeviceMatrix, GpuBackend, KernelHandle, Result};
use gemv_core::codec::bf16_to_f32;
use gemv_core::{FAST_TIERS, KernelSpec, Nvfp4Matrix, ReferenceOutput, fast_reference, kernel_spec};

/// The fast kernels `backend` resolves, narrowest first.
pub(crate) fn fast_kernels(backend: &dyn GpuBackend) -> Vec<(&'static KernelSpec, KernelHandle)> {
    FAST_TIERS
        .iter()
        .filter_map(|tier| {
            let spec = kernel_spec(tier.kernel)?;
            let handle = backend.lookup_kernel(spec.module, spec.name);
            handle.is_resolved().then_some((spec, handle))
        })
        .collect()
}

/// Whether a fast-family output admits `found`: within the bound of the f64 reference, or
/// infinite with the reference's sign where the reference reaches bf16's overflow.
fn admits(reference: &ReferenceOutput, found: u16) -> bool {
    if reference.admits(found) {
        return true;
    }
    let value = f64::from(bf16_to_f32(found));
    value.is_infinite()
        && reference.value.is_finite()
        && reference.value.signum() == value.signum()
        && reference.value.abs() + reference.bound >= 2f64.powi(127)
}

/// The first output of `found` (`[m][N]` from `w` and `x`) outside the fast family's bound, as
/// a message; None when every output is within it.
pub fn fast_bound_failure(w: &Nvfp4Matrix, x: &[u16], m: usize, found: &[u16]) -> Option<String> {
    let n = w.n();
    let reference = match fast_reference(&w.view(), x, m) {
        Ok(reference) => reference,
        Err(error) => return Some(format!("reference: {error}")),
    };
    if reference.len() != found.len() {
        return Some(format!("expected {} outputs, found {}", reference.len(), found.len()));
    }
    let bad: Vec<usize> = (0..found.len()).filter(|&i| !admits(&reference[i], found[i])).collect();
    let &first = bad.first()?;
    let r = reference[first];
    let value = bf16_to_f32(found[first]);
    Some(format!(
        "{} of {} outputs outside the bound; Y[{}][{}]: f64 {} ± {:e}, found {value} (off by {:e})",
        bad.len(),
        found.len(),
        first / n,
        first % n,
        r.value,
        r.bound,
        (f64::from(value) - r.value).abs()
    ))
}

/// The first (token, slot) output of `found` (`[m][top_k][N]`, X `[m][K]`, expert `ids[p]` of
/// `experts` for pair p) outside the fast family's bound of its expert, as a message.
pub fn pairs_bound_failure(
    experts: &[Nvfp4Matrix],
    x: &[u16],
    ids: &[u32],
    top_k: usize,
    found: &[u16],
) -> Option<String> {
    ids.iter().enumerate().find_map(|(pair, &id)| {
        let w = &experts[id as usize];
        let (n, k) = (w.n(), w.k());
        let failure = fast_bound_failure(w, &x[pair / top_k * k..][..k], 1, &found[pair * n..][..n])?;
        Some(format!("pair {pair} (expert {id}): {failure}"))
    })
}

/// Gate 10: the f64 bound on the odd shapes at full and partial width, on every E4M3 scale code
/// with activations from subnormal to huge, and on every class of global scale.
pub(super) fn fast_bound(backend: &dyn GpuBackend, cases: &mut Cases) {
    let kernels = fast_kernels(backend);
    if kernels.is_empty() {
        return;
    }
    let mut check = |case: String, w: &Nvfp4Matrix, x: &[u16], m: usize, handle: KernelHandle| {
        let outcome = DeviceMatrix::upload(backend, &w.view())
            .map_err(|e| clone_error(&e))
            .and_then(|matrix| Ok(fast_bound_failure(w, x, m, &matrix.gemv_with(handle, x, m)?)));
        cases.record(case, outcome);
    };
    // (1, 5136): one row, so both of a lane's rows are row 0, and K past two block steps (2048), so
    // the L2 prefetch of the chunk after next is issued: its address must stay inside the matrix.
    let shapes = [(1, 16), (1, 5136), (7, 48), (63, 80), (65, 5136), (4097, 80), (9, 1552), (64, 4096), (130, 16)];
    for (n, k) in shapes {
        let w = matrix(n, k, 11 * n as u64 + k as u64);
        for &(spec, handle) in &kernels {
            for m in [spec.max_m, spec.max_m - 3] {
                let x = activations(m, k, (n + m) as u64);
                check(format!("N={n} K={k} {} m={m}", spec.name), &w, &x, m, handle);
            }
        }
    }
    // Row r scaled by E4M3 code r in every group: all 256 codes (NaN rows give NaN).
    let (n, k) = (256, 80);
    let every_code = matrix_with_scales(n, k, 256, 0.0371, |row, _, _| row as u8);
    for &(spec, handle) in &kernels {
        let m = EXTREME_ROWS.len().min(spec.max_m);
        check(
            format!("N={n} K={k} {} m={m}: row r scaled by E4M3 code r, extreme activations", spec.name),
            &every_code,
            &extreme_activations(m, k, 1),
            m,
            handle,
        );
    }
    // One NaN scale code per row (0x7F and 0xFF alternating), in group r mod 40, every weight 1.0
    // and every activation positive: each row's products in that group are all NaN, none of them
    // cancel, so the row must be NaN whichever group and which code of a lane's pair it is.
    let (n, k) = (80, 640);
    let groups = k / 16;
    let scales: Vec<u8> = (0..n * groups)
        .map(|i| {
            let (row, group) = (i / groups, i % groups);
            if group == row % groups { [0x7F, 0xFF][row % 2] } else { 0x38 }
        })
        .collect();
    let one_nan = Nvfp4Matrix::from_parts(vec![0x22; n * k / 2], scales, 1.0, n, k).expect("a valid shape");
    for &(spec, handle) in &kernels {
        let m = spec.max_m;
        let x: Vec<u16> = activations(m, k, 55).into_iter().map(|b| b & 0x7FFF).collect();
        check(
            format!("N={n} K={k} {} m={m}: one NaN scale code per row, in every group position", spec.name),
            &one_nan,
            &x,
            m,
            handle,
        );
    }
    // Every class of global scale, K with a partial last chunk.
    let (n, k) = (67, 800);
    for (index, (name, global_scale)) in GLOBAL_SCALES.into_iter().enumerate() {
        let w = matrix_with_scales(n, k, 900 + index as u64, global_scale, |_, _, rng| {
            0x18 + (rng.next_u32() % 0x38) as u8
        });
        for &(spec, handle) in &kernels {
            let m = spec.max_m;
            check(
                format!("N={n} K={k} {} m={m}: global scale {name}", spec.name),
                &w,
                &activations(m, k, 77),
                m,
                handle,
            );
        }
    }
    // Misaligned arguments (X off a 16-byte boundary, the packed weights 1 byte off with the
    // others and 4 bytes off alone, odd scales), each alone and all at once: the kernels'
    // narrow-load paths (gate 5's launch); K = 1024's rows would take the 16-byte path if aligned.
    let layout = |name, x, packed, scales| Offsets { name, x, packed, scales, y: 256 };
    for layout in [
        layout("all misaligned", 258, 257, 257),
        layout("x alone", 258, 256, 256),
        layout("packed alone", 256, 260, 256),
        layout("scales alone", 256, 256, 257),
    ] {
        for &(spec, handle) in &kernels {
            let (n, k, m) = (37, 1024, spec.max_m);
            let w = matrix(n, k, 61);
            let x = activations(m, k, 62);
            let outcome = guarded_launch(backend, handle, &w, &x, m, m, layout)
                .map(|buffers| fast_bound_failure(&w, &x, m, &buffers.y_rows(layout, m * n)));
            cases.record(format!("N={n} K={k} {} m={m}: {}", spec.name, layout.name), outcome);
        }
    }
    // X and Y as rows of wider buffers (gate 5's strided launch), within the bound.
    for (x_pad, y_pad, alignment) in STRIDE_PADS {
        for &(spec, handle) in &kernels {
            let (n, k, m) = (37, 1024, spec.max_m);
            let w = matrix(n, k, 63);
            let x = activations(m, k, 64);
            let outcome = strided_launch(backend, handle, &w, &x, m, (x_pad, y_pad)).map(|(y, changed)| {
                fast_bound_failure(&w, &x, m, &y)
                    .or_else(|| changed.map(|i| format!("y element {i}, between rows, changed")))
            });
            cases.record(
                format!("N={n} K={k} {} m={m}: row strides K + {x_pad} and N + {y_pad} ({alignment})", spec.name),
                outcome,
            );
        }
    }
}

/// The first token whose row of `found` differs from `expected_rows[t]`.
fn token_mismatch(
    found: &[u16],
    n: usize,
    expected_rows: &[Vec<u16>],
    tokens: impl Iterator<Item = usize>,
) -> Option<String> {
    for t in tokens {
        let row = &found[t * n..(t + 1) * n];
        if let Some(column) = (0..n).find(|&c| row[c] != expected_rows[t][c]) {
            return Some(format!(
                "token {t}, row {column}: alone {:#06x} ({}), here {:#06x} ({})",
                expected_rows[t][column],
                bf16_to_f32(expected_rows[t][column]),
                row[column],
                bf16_to_f32(row[column])
            ));
        }
    }
    None
}

/// A launch of `m` rows of X (`[m][K]`), returning Y (`[m][N]`).
pub type RowsLaunch<'a> = dyn FnMut(&[u16], usize) -> Result<Vec<u16>> + 'a;

/// Token t alone (M = 1 on `alone`) against token t inside every M in 1..=`width` (on `inside`),
/// bit for bit, for `x` of `width` rows; the first difference as a message.
pub fn invariance_failure(
    x: &[u16],
    n: usize,
    k: usize,
    width: usize,
    alone: &mut dyn FnMut(&[u16]) -> Result<Vec<u16>>,
    inside: &mut RowsLaunch<'_>,
) -> Result<Option<String>> {
    let singles: Vec<Vec<u16>> = (0..width).map(|t| alone(&x[t * k..(t + 1) * k])).collect::<Result<_>>()?;
    for m in 1..=width {
        let found = inside(&x[..m * k], m)?;
        if let Some(difference) = token_mismatch(&found, n, &singles, 0..m) {
            return Ok(Some(format!("M={m}: {difference}")));
        }
    }
    Ok(None)
}

/// Gate 11: batch invariance, tier agreement, repeatability, rows past M, M past the width.
pub(super) fn fast_invariance(backend: &dyn GpuBackend, cases: &mut Cases) {
    let kernels = fast_kernels(backend);
    let Some(&(narrowest, narrowest_handle)) = kernels.first() else { return };
    let widest = kernels.iter().map(|(spec, _)| spec.max_m).max().unwrap_or(1);
    for (n, k) in [(65, 80), (7, 5136), (130, 16), (33, 1552)] {
        let w = matrix(n, k, 5 * n as u64 + k as u64);
        let uploaded = match DeviceMatrix::upload(backend, &w.view()) {
            Ok(matrix) => matrix,
            Err(error) => {
                cases.record(format!("N={n} K={k}: upload"), Err(error));
                continue;
            }
        };
        let x = activations(widest, k, 31 + k as u64);
        let other = activations(widest, k, 97 + k as u64);
        // Each token alone, on the narrowest kernel.
        let singles: Result<Vec<Vec<u16>>> =
            (0..widest).map(|t| uploaded.gemv_with(narrowest_handle, &x[t * k..(t + 1) * k], 1)).collect();
        let singles = match singles {
            Ok(singles) => singles,
            Err(error) => {
                cases.record(format!("N={n} K={k}: tokens alone on {}", narrowest.name), Err(error));
                continue;
            }
        };
        for &(spec, handle) in &kernels {
            // Token t inside every M up to the width = token t alone.
            let inside = (1..=spec.max_m).try_fold(None, |failure, m| {
                if failure.is_some() {
                    return Ok(failure);
                }
                let found = uploaded.gemv_with(handle, &x[..m * k], m)?;
                Ok(token_mismatch(&found, n, &singles, 0..m).map(|d| format!("M={m}: {d}")))
            });
            cases.record(format!("N={n} K={k} {}: each token inside M=1..={} = alone", spec.name, spec.max_m), inside);
            // Different neighbours: odd tokens replaced, even tokens unchanged.
            let m = spec.max_m;
            let mixed: Vec<u16> = (0..m)
                .flat_map(|t| if t % 2 == 0 { &x[t * k..(t + 1) * k] } else { &other[t * k..(t + 1) * k] })
                .copied()
                .collect();
            let neighbours = uploaded
                .gemv_with(handle, &mixed, m)
                .map(|found| token_mismatch(&found, n, &singles, (0..m).step_by(2)));
            cases.record(format!("N={n} K={k} {}: other neighbours, M={m}", spec.name), neighbours);
            // The same launch twice: the same bits.
            let repeat = uploaded.gemv_with(handle, &x[..m * k], m).and_then(|first| {
                let second = uploaded.gemv_with(handle, &x[..m * k], m)?;
                Ok((first != second).then(|| "two identical launches differ".to_string()))
            });
            cases.record(format!("N={n} K={k} {}: repeatable, M={m}", spec.name), repeat);
        }
    }
    // Data whose sum depends on the order the warps' partials are added in (cancelling halves).
    let (w, x) = order_sensitive(widest);
    let (n, k) = (w.n(), w.k());
    for &(spec, handle) in &kernels {
        let outcome = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| {
            invariance_failure(
                &x[..spec.max_m * k],
                n,
                k,
                spec.max_m,
                &mut |row| matrix.gemv_with(narrowest_handle, row, 1),
                &mut |rows, m| matrix.gemv_with(handle, rows, m),
            )
        });
        cases.record(format!("N={n} K={k} {}: order-sensitive sums, each token inside M = alone", spec.name), outcome);
    }
    for &(spec, handle) in &kernels {
        cases.record(format!("{}: rows past M untouched", spec.name), rows_past_m(backend, spec, handle));
        let (n, k) = (9, 48);
        let w = matrix(n, k, 3);
        let m = spec.max_m + 1;
        let outcome = DeviceMatrix::upload(backend, &w.view()).map(|matrix| {
            match matrix.gemv_with(handle, &activations(m, k, 4), m) {
                Err(_) => None,
                Ok(_) => Some(format!("M={m} on a kernel of width {} was accepted", spec.max_m)),
            }
        });
        cases.record(format!("{}: M past the width is an error", spec.name), outcome);
    }
}

/// Launches with M = width - 1 into a Y of `width` rows pre-filled with a pattern: the last row
/// must keep it.
fn rows_past_m(backend: &dyn GpuBackend, spec: &KernelSpec, handle: KernelHandle) -> Result<Option<String>> {
    let (n, k) = (37, 96);
    let w = matrix(n, k, 8);
    let matrix = DeviceMatrix::upload(backend, &w.view())?;
    let rows = spec.max_m;
    let m = rows - 1;
    let x = activations(rows, k, 9);
    let pattern: Vec<u16> = (0..rows * n).map(|i| 0x5A00 | (i as u16 & 0xFF)).collect();
    let x_buf = backend.alloc(2 * rows * k)?;
    let y_buf = backend.alloc(2 * rows * n)?;
    let outcome = (|| {
        backend.upload(x_buf.whole(), bytemuck::cast_slice(&x))?;
        backend.upload(y_buf.whole(), bytemuck::cast_slice(&pattern))?;
        let mut args = matrix.args(x_buf, y_buf, 0, rows);
        args.m = m;
        backend.launch_gemv(handle, &args)?;
        backend.synchronize()?;
        let mut y = vec![0u16; rows * n];
        backend.download(y_buf.whole(), bytemuck::cast_slice_mut(&mut y))?;
        let touched = (m * n..rows * n).find(|&i| y[i] != pattern[i]);
        let written = fast_bound_failure(&w, &x[..m * k], m, &y[..m * n]);
        Ok(touched.map(|i| format!("Y[{}][{}] past M changed", i / n, i % n)).or(written))
    })();
    let _ = backend.free(x_buf);
    let _ = backend.free(y_buf);
    outcome
}
