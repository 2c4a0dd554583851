//! Gate 5: a launch writes the first m rows of Y and nothing else: dead rows and guard bytes
//! around every buffer stay untouched, inputs are not modified. The arguments sit at offsets that
//! misalign them together and one at a time, so every alignment path of a kernel runs (buffers
//! start 256-byte aligned on every backend, as CUDA allocations do), and all four share one
//! buffer in a last case.

use super::{Cases, diff, host, lookup};
use crate::data::{activations, matrix};
use gemv_backend::{GemvArgs, GpuBackend, KernelHandle, Result};
use gemv_core::{Family, Nvfp4Matrix, family_kernels};

const GUARD_BYTE: u8 = 0xA5;
const DEAD_ROW: u16 = 0x5A5A;

/// The guard before each argument, which is also its offset in its buffer: (x, packed, scales, y).
#[derive(Debug, Clone, Copy)]
pub(super) struct Offsets {
    pub(super) name: &'static str,
    pub(super) x: usize,
    pub(super) packed: usize,
    pub(super) scales: usize,
    pub(super) y: usize,
}

/// 256 keeps an argument 256-byte aligned; 258 puts X 2 bytes past a 16-byte boundary (no
/// vector loads of X allowed); 257 and 260 put the packed weights off an 8-byte boundary.
const LAYOUTS: [Offsets; 4] = [
    Offsets { name: "all misaligned", x: 258, packed: 257, scales: 259, y: 258 },
    Offsets { name: "x alone misaligned", x: 258, packed: 256, scales: 256, y: 256 },
    Offsets { name: "packed alone misaligned", x: 256, packed: 260, scales: 256, y: 256 },
    Offsets { name: "all aligned", x: 256, packed: 256, scales: 256, y: 256 },
];

/// K = 80 gives packed rows of 40 bytes, which only 8-byte loads keep aligned; K = 96 rows of 48
/// bytes, so aligned weights take the 16-byte path and weights 1 byte off must not.
const DEPTHS: [usize; 2] = [80, 96];

pub(super) fn guards(backend: &dyn GpuBackend, cases: &mut Cases) {
    for k in DEPTHS {
        guards_at(backend, cases, k);
    }
}

fn guards_at(backend: &dyn GpuBackend, cases: &mut Cases, k: usize) {
    let n = 63;
    let w = matrix(n, k, 1234);
    for layout in LAYOUTS {
        for spec in family_kernels(Family::Exact) {
            let m = spec.max_m.saturating_sub(1).max(1);
            let x = activations(spec.max_m, k, 8);
            let expected = host(&w, &x[..m * k], m);
            let handle = lookup(backend, spec.name);
            let outcome = guarded_launch(backend, handle, &w, &x, m, spec.max_m, layout).map(|buffers| {
                let mut problems = Vec::new();
                for (what, guard, bytes, body) in [
                    ("x", layout.x, &buffers.x, bytemuck::cast_slice::<u16, u8>(&x).to_vec()),
                    ("packed", layout.packed, &buffers.packed, w.view().packed().to_vec()),
                    ("scales", layout.scales, &buffers.scales, w.view().scales().to_vec()),
                ] {
                    if let Some(at) = changed_guard(bytes, guard) {
                        problems.push(format!("{what} guard byte {at} changed"));
                    }
                    if bytes[guard..guard + body.len()] != body[..] {
                        problems.push(format!("input {what} was modified"));
                    }
                }
                if let Some(at) = changed_guard(&buffers.y, layout.y) {
                    problems.push(format!("y guard byte {at} changed"));
                }
                let y = buffers.y_rows(layout, spec.max_m * n);
                if let Some(d) = diff(&expected, &y[..m * n], n) {
                    problems.push(format!("live rows: {d}"));
                }
                if let Some(i) = y[m * n..].iter().position(|&v| v != DEAD_ROW) {
                    problems.push(format!("dead row {} column {} was written", m + i / n, i % n));
                }
                (!problems.is_empty()).then(|| problems.join("; "))
            });
            cases.record(format!("N={n} K={k} {} m={m} of {}, {}", spec.name, spec.max_m, layout.name), outcome);
        }
    }
}

/// x, packed, scales and y in ONE buffer, at odd offsets, with guards between them: backends must
/// not assume one argument per buffer (wgpu, for one, cannot bind a buffer read-only and
/// read-write in the same dispatch and has to detach the inputs).
pub(super) fn shared_buffer(backend: &dyn GpuBackend, cases: &mut Cases) {
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
    let mut bytes = vec![GUARD_BYTE; 258];
    for part in &parts {
        if bytes.len() % 2 == 1 {
            bytes.push(GUARD_BYTE);
        }
        layout.push(bytes.len());
        bytes.extend(part);
        bytes.extend(std::iter::repeat_n(GUARD_BYTE, 257));
    }
    let outcome = (|| {
        let buffer = backend.alloc(bytes.len())?;
        let run = (|| {
            backend.upload(buffer.whole(), &bytes)?;
            let args = GemvArgs::contiguous(
                buffer.range(layout[0], parts[0].len()),
                buffer.range(layout[1], parts[1].len()),
                buffer.range(layout[2], parts[2].len()),
                buffer.range(layout[3], 2 * m * n),
                w.global_scale(),
                m,
                n,
                k,
            );
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

/// Every buffer of a guarded launch after it, guards included.
pub(super) struct GuardedBytes {
    x: Vec<u8>,
    packed: Vec<u8>,
    scales: Vec<u8>,
    y: Vec<u8>,
}

impl GuardedBytes {
    /// The first `len` elements of Y (its rows, without the guard before them).
    pub(super) fn y_rows(&self, layout: Offsets, len: usize) -> Vec<u16> {
        self.y[layout.y..layout.y + 2 * len].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()
    }
}

/// The first changed byte of the guards: `guard` bytes before the body and as many after it.
fn changed_guard(bytes: &[u8], guard: usize) -> Option<usize> {
    let len = bytes.len();
    (0..guard).chain(len - guard..len).find(|&i| bytes[i] != GUARD_BYTE)
}

/// One launch of `handle` with each argument `layout`'s guard bytes into its own buffer, Y's
/// `rows` rows filled with a marker first.
pub(super) fn guarded_launch(
    backend: &dyn GpuBackend,
    handle: KernelHandle,
    w: &Nvfp4Matrix,
    x: &[u16],
    m: usize,
    rows: usize,
    layout: Offsets,
) -> Result<GuardedBytes> {
    let (n, k) = (w.n(), w.k());
    let dead_rows: Vec<u16> = vec![DEAD_ROW; rows * n];
    let bodies: [(usize, Vec<u8>); 4] = [
        (layout.x, bytemuck::cast_slice(x).to_vec()),
        (layout.packed, w.view().packed().to_vec()),
        (layout.scales, w.view().scales().to_vec()),
        (layout.y, bytemuck::cast_slice(&dead_rows).to_vec()),
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
        let args = GemvArgs::contiguous(
            buffers[0].range(layout.x, 2 * m * k),
            buffers[1].range(layout.packed, n * k / 2),
            buffers[2].range(layout.scales, n * k / 16),
            buffers[3].range(layout.y, 2 * rows * n),
            w.global_scale(),
            m,
            n,
            k,
        );
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
