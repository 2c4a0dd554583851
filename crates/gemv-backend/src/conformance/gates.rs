//! The gate implementations. Shapes are chosen to exercise: K % 32 != 0 (rows not 16-byte
//! aligned), G > 64 (partials visiting several groups), N not a multiple of anything, unaligned
//! buffer offsets, and every m of every kernel.

use super::data::{activations, matrix};
use super::{Gate, GateResult};
use crate::{DeviceMatrix, Error, GemvArgs, GpuBackend, KernelHandle, ResolvedTiers, Result};
use gemv_core::codec::{BF16_NAN, bf16_to_f32, f32_to_bf16};
use gemv_core::{
    CoreError, KERNELS, KillSwitches, MODULE_NAME, Nvfp4Matrix, f64_reference, gemv_contract, host_threads,
};

/// The suite plans with every tier allowed.
const CAP: usize = gemv_core::WIDEST_TIER;

pub(super) fn run(backend: &dyn GpuBackend, gate: Gate) -> Vec<GateResult> {
    let mut cases = Cases { gate, results: Vec::new() };
    match gate {
        Gate::TierAgreement => tier_agreement(backend, &mut cases),
        Gate::RegisterTiled => register_tiled(backend, &mut cases),
        Gate::F64Bound => f64_bound(backend, &mut cases),
        Gate::RowPermutation => row_permutation(backend, &mut cases),
        Gate::Guards => {
            guards(backend, &mut cases);
            shared_buffer(backend, &mut cases);
        }
        Gate::Impulse => impulse(backend, &mut cases),
        Gate::OddShapes => odd_shapes(backend, &mut cases),
        Gate::BadInput => bad_input(backend, &mut cases),
    }
    cases.results
}

struct Cases {
    gate: Gate,
    results: Vec<GateResult>,
}

impl Cases {
    /// Records a case: `Ok(None)` passed, `Ok(Some(why))` or `Err` failed.
    fn record(&mut self, case: impl Into<String>, outcome: Result<Option<String>>) {
        let failure = match outcome {
            Ok(failure) => failure,
            Err(error) => Some(format!("error: {error}")),
        };
        self.results.push(GateResult { gate: self.gate, case: case.into(), failure });
    }
}

fn host(w: &Nvfp4Matrix, x: &[u16], m: usize) -> Vec<u16> {
    let mut y = vec![0u16; m * w.n()];
    gemv_contract(&w.view(), x, m, &mut y, host_threads()).expect("suite shapes are valid");
    y
}

/// The first few differing outputs as `Y[t][n]: expected .. found ..`, or None when equal.
fn diff(expected: &[u16], found: &[u16], n: usize) -> Option<String> {
    if expected.len() != found.len() {
        return Some(format!("expected {} outputs, found {}", expected.len(), found.len()));
    }
    let bad: Vec<usize> = (0..expected.len()).filter(|&i| expected[i] != found[i]).collect();
    if bad.is_empty() {
        return None;
    }
    let shown: Vec<String> = bad
        .iter()
        .take(3)
        .map(|&i| {
            format!(
                "Y[{}][{}]: expected {:#06x} ({}), found {:#06x} ({})",
                i / n,
                i % n,
                expected[i],
                bf16_to_f32(expected[i]),
                found[i],
                bf16_to_f32(found[i])
            )
        })
        .collect();
    Some(format!("{} of {} outputs differ; {}", bad.len(), expected.len(), shown.join("; ")))
}

fn lookup(backend: &dyn GpuBackend, name: &str) -> KernelHandle {
    backend.lookup_kernel(MODULE_NAME, name)
}

fn resolve(backend: &dyn GpuBackend) -> ResolvedTiers {
    ResolvedTiers::resolve(backend, KillSwitches::process())
}

const AGREEMENT_SHAPES: [(usize, usize); 3] = [(67, 272), (33, 2080), (5, 48)];

fn tier_agreement(backend: &dyn GpuBackend, cases: &mut Cases) {
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
        for spec in KERNELS {
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

fn register_tiled(backend: &dyn GpuBackend, cases: &mut Cases) {
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

fn f64_bound(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    for (n, k) in [(64, 4096), (17, 5136), (130, 16)] {
        let w = matrix(n, k, 3 * n as u64);
        let matrix = DeviceMatrix::upload(backend, &w.view());
        for m in [1, 8, 32] {
            let x = activations(m, k, 5 + m as u64);
            let outcome = matrix.as_ref().map_err(clone_error).and_then(|matrix| {
                let found = matrix.gemv(&tiers, &x, m, CAP)?;
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

/// `DeviceMatrix::upload` errors are reported once per dependent case.
fn clone_error(error: &Error) -> Error {
    Error::Device { backend: "suite", message: format!("upload failed: {error}") }
}

fn row_permutation(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    let (n, k) = (65, 1040);
    let w = matrix(n, k, 44);
    for m in [2, 5, 8, 13, 32] {
        let x = activations(m, k, 99 + m as u64);
        // Reverse, then swap the first two: no row stays put for m >= 2.
        let mut order: Vec<usize> = (0..m).rev().collect();
        order.swap(0, 1);
        let permuted: Vec<u16> = order.iter().flat_map(|&t| x[t * k..(t + 1) * k].iter().copied()).collect();
        let outcome = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| {
            let y = matrix.gemv(&tiers, &x, m, CAP)?;
            let y_permuted = matrix.gemv(&tiers, &permuted, m, CAP)?;
            let expected: Vec<u16> = order.iter().flat_map(|&t| y[t * n..(t + 1) * n].iter().copied()).collect();
            Ok(diff(&expected, &y_permuted, n))
        });
        cases.record(format!("N={n} K={k} M={m}"), outcome);
    }
}

/// Guard sizes; odd for the byte arrays so that base addresses are misaligned on purpose.
const GUARD_BF16: usize = 258;
const GUARD_PACKED: usize = 257;
const GUARD_SCALES: usize = 259;
const GUARD_BYTE: u8 = 0xA5;
const DEAD_ROW: u16 = 0x5A5A;

fn guards(backend: &dyn GpuBackend, cases: &mut Cases) {
    let (n, k) = (63, 80);
    let w = matrix(n, k, 1234);
    for spec in KERNELS {
        let m = spec.max_m.saturating_sub(1).max(1);
        let x = activations(spec.max_m, k, 8);
        let expected = host(&w, &x[..m * k], m);
        let outcome = guarded_launch(backend, spec.name, &w, &x, m, spec.max_m).map(|buffers| {
            let mut problems = Vec::new();
            for (what, guard, bytes, body) in [
                ("x", GUARD_BF16, &buffers.x, bytemuck::cast_slice::<u16, u8>(&x).to_vec()),
                ("packed", GUARD_PACKED, &buffers.packed, w.view().packed().to_vec()),
                ("scales", GUARD_SCALES, &buffers.scales, w.view().scales().to_vec()),
            ] {
                if let Some(at) = changed_guard(bytes, guard) {
                    problems.push(format!("{what} guard byte {at} changed"));
                }
                if bytes[guard..guard + body.len()] != body[..] {
                    problems.push(format!("input {what} was modified"));
                }
            }
            if let Some(at) = changed_guard(&buffers.y, GUARD_BF16) {
                problems.push(format!("y guard byte {at} changed"));
            }
            let y: Vec<u16> = buffers.y[GUARD_BF16..GUARD_BF16 + 2 * spec.max_m * n]
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect();
            if let Some(d) = diff(&expected, &y[..m * n], n) {
                problems.push(format!("live rows: {d}"));
            }
            if let Some(i) = y[m * n..].iter().position(|&v| v != DEAD_ROW) {
                problems.push(format!("dead row {} column {} was written", m + i / n, i % n));
            }
            (!problems.is_empty()).then(|| problems.join("; "))
        });
        cases.record(format!("N={n} K={k} {} m={m} of {}", spec.name, spec.max_m), outcome);
    }
}

/// x, packed, scales and y in ONE buffer, at odd offsets, with guards between them: backends must
/// not assume one argument per buffer (wgpu, for one, cannot bind a buffer read-only and
/// read-write in the same dispatch and has to detach the inputs).
fn shared_buffer(backend: &dyn GpuBackend, cases: &mut Cases) {
    let (n, k, m) = (33, 80, 3);
    let w = matrix(n, k, 4321);
    let x = activations(m, k, 12);
    let expected = host(&w, &x, m);
    let parts: [Vec<u8>; 4] = [
        bytemuck::cast_slice(&x).to_vec(),
        w.view().packed().to_vec(),
        w.view().scales().to_vec(),
        bytemuck::cast_slice(&vec![DEAD_ROW; (m + 1) * n]).to_vec(),
    ];
    let mut layout = Vec::new();
    let mut bytes = vec![GUARD_BYTE; GUARD_BF16];
    for part in &parts {
        if bytes.len() % 2 == 1 {
            bytes.push(GUARD_BYTE);
        }
        layout.push(bytes.len());
        bytes.extend(part);
        bytes.extend(std::iter::repeat_n(GUARD_BYTE, GUARD_PACKED));
    }
    let outcome = (|| {
        let buffer = backend.alloc(bytes.len())?;
        let run = (|| {
            backend.upload(buffer.whole(), &bytes)?;
            let args = GemvArgs {
                x: buffer.range(layout[0], parts[0].len()),
                packed: buffer.range(layout[1], parts[1].len()),
                scales: buffer.range(layout[2], parts[2].len()),
                y: buffer.range(layout[3], 2 * m * n),
                global_scale: w.global_scale(),
                m,
                n,
                k,
            };
            backend.launch_gemv(lookup(backend, "w4a16_gemv_batch3"), &args)?;
            backend.synchronize()?;
            let mut after = vec![0u8; bytes.len()];
            backend.download(buffer.whole(), &mut after)?;
            Ok(after)
        })();
        let _ = backend.free(buffer);
        run
    })();
    let outcome = outcome.map(|after| {
        let y: Vec<u16> =
            after[layout[3]..layout[3] + 2 * m * n].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
        let written = layout[3]..layout[3] + 2 * m * n;
        let changed = (0..bytes.len()).find(|i| !written.contains(i) && after[*i] != bytes[*i]);
        diff(&expected, &y, n).or_else(|| changed.map(|i| format!("byte {i} outside y's first m rows changed")))
    });
    cases.record(format!("N={n} K={k} w4a16_gemv_batch3 m={m}, all arguments in one buffer"), outcome);
}

struct GuardedBytes {
    x: Vec<u8>,
    packed: Vec<u8>,
    scales: Vec<u8>,
    y: Vec<u8>,
}

fn changed_guard(bytes: &[u8], guard: usize) -> Option<usize> {
    let len = bytes.len();
    (0..guard).chain(len - guard..len).find(|&i| bytes[i] != GUARD_BYTE)
}

fn guarded_launch(
    backend: &dyn GpuBackend,
    kernel: &str,
    w: &Nvfp4Matrix,
    x: &[u16],
    m: usize,
    rows: usize,
) -> Result<GuardedBytes> {
    let (n, k) = (w.n(), w.k());
    let handle = lookup(backend, kernel);
    let dead_rows: Vec<u16> = vec![DEAD_ROW; rows * n];
    let bodies: [(usize, Vec<u8>); 4] = [
        (GUARD_BF16, bytemuck::cast_slice(x).to_vec()),
        (GUARD_PACKED, w.view().packed().to_vec()),
        (GUARD_SCALES, w.view().scales().to_vec()),
        (GUARD_BF16, bytemuck::cast_slice(&dead_rows).to_vec()),
    ];
    let mut buffers = Vec::new();
    let result = (|| {
        for (guard, body) in &bodies {
            let buffer = backend.alloc(guard + body.len() + guard)?;
            buffers.push(buffer);
            let mut bytes = vec![GUARD_BYTE; buffer.len()];
            bytes[*guard..guard + body.len()].copy_from_slice(body);
            backend.upload(buffer.whole(), &bytes)?;
        }
        let args = GemvArgs {
            x: buffers[0].range(GUARD_BF16, 2 * m * k),
            packed: buffers[1].range(GUARD_PACKED, n * k / 2),
            scales: buffers[2].range(GUARD_SCALES, n * k / 16),
            y: buffers[3].range(GUARD_BF16, 2 * rows * n),
            global_scale: w.global_scale(),
            m,
            n,
            k,
        };
        backend.launch_gemv(handle, &args)?;
        backend.synchronize()?;
        let mut out: Vec<Vec<u8>> = Vec::new();
        for buffer in &buffers {
            let mut bytes = vec![0u8; buffer.len()];
            backend.download(buffer.whole(), &mut bytes)?;
            out.push(bytes);
        }
        let y = out.pop().unwrap_or_default();
        let scales = out.pop().unwrap_or_default();
        let packed = out.pop().unwrap_or_default();
        let x = out.pop().unwrap_or_default();
        Ok(GuardedBytes { x, packed, scales, y })
    })();
    for buffer in buffers {
        let _ = backend.free(buffer);
    }
    result
}

fn impulse(backend: &dyn GpuBackend, cases: &mut Cases) {
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
                let rows3 = matrix.gemv(&tiers, &x, 3, CAP)?;
                let row1 = matrix.gemv(&tiers, &x[..k], 1, CAP)?;
                Ok(diff(&expected, &rows3, n).or_else(|| diff(&expected[..n], &row1, n)))
            });
            cases.record(format!("N={n} K={k} column {c}"), outcome);
        }
    }
}

fn odd_shapes(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    for n in [1, 7, 63, 65, 4097] {
        for k in [16, 48, 80, 5136] {
            let w = matrix(n, k, (7 * n + k) as u64);
            let x = activations(CAP, k, (n ^ k) as u64);
            let expected = host(&w, &x, CAP);
            let outcome = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| {
                for m in 1..=CAP {
                    let found = matrix.gemv(&tiers, &x[..m * k], m, CAP)?;
                    if let Some(d) = diff(&expected[..m * n], &found, n) {
                        return Ok(Some(format!("M={m}: {d}")));
                    }
                }
                Ok(None)
            });
            cases.record(format!("N={n} K={k} M=1..=32"), outcome);
        }
    }
}

fn bad_input(backend: &dyn GpuBackend, cases: &mut Cases) {
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
    let good = GemvArgs {
        x: x.whole(),
        packed: packed.whole(),
        scales: scales.whole(),
        y: y.whole(),
        global_scale: 1.0,
        m,
        n,
        k,
    };
    cases
        .record("valid arguments launch", backend.launch_gemv(batch2, &good).and(backend.synchronize()).map(|()| None));

    type Check = fn(&Error) -> bool;
    let rejected: Vec<(&str, KernelHandle, GemvArgs, Check)> = vec![
        ("M = 0", batch2, GemvArgs { m: 0, ..good }, |e| matches!(e, Error::Core(CoreError::ZeroM { .. }))),
        ("N = 0", batch2, GemvArgs { n: 0, ..good }, |e| matches!(e, Error::Core(CoreError::ZeroN { .. }))),
        ("K = 24", batch2, GemvArgs { k: 24, ..good }, |e| matches!(e, Error::Core(CoreError::InvalidK { .. }))),
        ("K = 0", batch2, GemvArgs { k: 0, ..good }, |e| matches!(e, Error::Core(CoreError::InvalidK { .. }))),
        ("M = 3 on batch2", batch2, GemvArgs { m: 3, ..good }, |e| matches!(e, Error::MExceedsWidth { .. })),
        ("zero handle", KernelHandle::NONE, good, |e| matches!(e, Error::UnresolvedKernel { .. })),
        ("x too small", batch2, GemvArgs { x: x.range(0, 2 * m * k - 2), ..good }, |e| {
            matches!(e, Error::RangeTooSmall { what: "x", .. })
        }),
        ("packed too small", batch2, GemvArgs { packed: packed.range(0, 10), ..good }, |e| {
            matches!(e, Error::RangeTooSmall { what: "packed", .. })
        }),
        ("scales too small", batch2, GemvArgs { scales: scales.range(1, 9), ..good }, |e| {
            matches!(e, Error::RangeTooSmall { what: "scales", .. })
        }),
        ("y too small", batch2, GemvArgs { y: y.range(0, 2), ..good }, |e| {
            matches!(e, Error::RangeTooSmall { what: "y", .. })
        }),
        ("range past the buffer", batch2, GemvArgs { y: y.range(2, 2 * m * n), ..good }, |e| {
            matches!(e, Error::RangeOutOfBounds { what: "y", .. })
        }),
        ("range offset overflow", batch2, GemvArgs { x: x.range(usize::MAX, 2), ..good }, |e| {
            matches!(e, Error::RangeOutOfBounds { .. })
        }),
        ("shape larger than the buffers", batch2, GemvArgs { n: 6, ..good }, |e| {
            matches!(e, Error::RangeTooSmall { .. })
        }),
        ("misaligned y", batch2, GemvArgs { y: y.range(1, 2 * m * n - 1), ..good }, |e| {
            matches!(e, Error::RangeTooSmall { .. } | Error::Misaligned { .. })
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
        let found = matrix.gemv(&tiers, &x, m, CAP)?;
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
        let found = matrix.gemv(&tiers, &x, m, CAP)?;
        let column: Vec<u16> = (0..m).map(|t| found[t * n + 2]).collect();
        Ok(diff(&host(&nan_scale, &x, m), &found, n)
            .or_else(|| column.iter().any(|&v| v != BF16_NAN).then(|| format!("column 2 should be NaN: {column:x?}"))))
    });
    cases.record("NaN scale gives 0x7FC0 in its column", outcome);

    let (_, scales, _) = w.clone().into_parts();
    let nan_global = Nvfp4Matrix::from_parts(packed, scales, f32::NAN, n, k).expect("same shape");
    let outcome = DeviceMatrix::upload(backend, &nan_global.view()).and_then(|matrix| {
        let found = matrix.gemv(&tiers, &x, m, CAP)?;
        Ok(found.iter().any(|&v| v != BF16_NAN).then(|| "a NaN global scale must give 0x7FC0 everywhere".into()))
    });
    cases.record("NaN global scale gives 0x7FC0 everywhere", outcome);

    let bad_x = DeviceMatrix::upload(backend, &w.view()).and_then(|matrix| matrix.gemv(&tiers, &x[..k - 1], 1, CAP));
    cases.record(
        "rejects X of the wrong length",
        Ok(match bad_x {
            Err(Error::Core(CoreError::LengthMismatch { what: "x", .. })) => None,
            Err(error) => Some(format!("wrong error: {error}")),
            Ok(_) => Some("accepted".into()),
        }),
    );
}
