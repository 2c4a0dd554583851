//! Row strides (in gates 5 and 10): X and Y as rows of wider buffers, as an engine's activations
//! often are. The elements between X's rows hold a large finite value, so a kernel that reads one
//! changes an output (NaN would not do: the exact kernels recompute a block whose outputs are not
//! finite on their plain path, which would hide a wrong stride on the fast one); the elements
//! between Y's rows hold a marker that must survive. Two stride pairs: X's
//! rows kept 16-byte aligned (stride K + 8, Y's N + 5), and every other X row off its 16-byte
//! boundary (stride K + 3, Y's N + 1), so both of a kernel's X load paths meet a stride.

use super::{Cases, diff, host, lookup};
use crate::data::{activations, matrix};
use gemv_backend::{GemvArgs, GpuBackend, KernelHandle, Result};
use gemv_core::{Family, Nvfp4Matrix, family_kernels};
use gemv_core::{YFormat, strided_span};

/// Between X's rows: bf16 996.0, finite and far from the activations' range.
const X_GAP: u16 = 0x4479;
/// Between Y's rows: never a result of these inputs' rows (an odd bf16 pattern).
const Y_GAP: u16 = 0x5A5A;

/// (X padding, Y padding, what the X padding does to alignment), in elements.
pub(super) const STRIDE_PADS: [(usize, usize, &str); 2] =
    [(8, 5, "x rows 16-byte aligned"), (3, 1, "odd x rows off 16-byte alignment")];

/// Y's rows after one launch of `handle` with X's rows `k + x_pad` elements apart and Y's
/// `n + y_pad` (`x` holds `m` contiguous rows), and the first element between Y's rows that
/// changed, if any.
pub(super) fn strided_launch(
    backend: &dyn GpuBackend,
    handle: KernelHandle,
    w: &Nvfp4Matrix,
    x: &[u16],
    m: usize,
    pads: (usize, usize),
) -> Result<(Vec<u16>, Option<usize>)> {
    strided_launch_as(backend, handle, (w, x, m), pads, (YFormat::Bf16, Y_GAP))
}

/// [`strided_launch`] writing Y as `y_format`, whose elements are `T`, the gaps between its rows
/// holding `y_gap`.
pub(super) fn strided_launch_as<T: bytemuck::Pod + PartialEq>(
    backend: &dyn GpuBackend,
    handle: KernelHandle,
    (w, x, m): (&Nvfp4Matrix, &[u16], usize),
    (x_pad, y_pad): (usize, usize),
    (y_format, y_gap): (YFormat, T),
) -> Result<(Vec<T>, Option<usize>)> {
    let (n, k) = (w.n(), w.k());
    let (x_stride, y_stride) = (k + x_pad, n + y_pad);
    let mut x_rows = vec![X_GAP; strided_span(m, k, x_stride)];
    for t in 0..m {
        x_rows[t * x_stride..t * x_stride + k].copy_from_slice(&x[t * k..(t + 1) * k]);
    }
    let y_gaps = vec![y_gap; strided_span(m, n, y_stride)];
    let mut buffers = Vec::new();
    let result = (|| {
        for bytes in [
            bytemuck::cast_slice::<u16, u8>(&x_rows),
            w.view().packed(),
            w.view().scales(),
            bytemuck::cast_slice::<T, u8>(&y_gaps),
        ] {
            let buffer = backend.alloc(bytes.len())?;
            buffers.push(buffer);
            backend.upload(buffer.whole(), bytes)?;
        }
        let args = GemvArgs {
            x: buffers[0].whole(),
            packed: buffers[1].whole(),
            scales: buffers[2].whole(),
            y: buffers[3].whole(),
            global_scale: w.global_scale(),
            m,
            n,
            k,
            x_row_stride: x_stride,
            y_row_stride: y_stride,
            y_format,
        };
        backend.launch_gemv(handle, &args)?;
        backend.synchronize()?;
        let mut after = vec![T::zeroed(); y_gaps.len()];
        backend.download(buffers[3].whole(), bytemuck::cast_slice_mut(&mut after))?;
        let rows = (0..m).flat_map(|t| after[t * y_stride..t * y_stride + n].iter().copied()).collect();
        let changed = (0..after.len()).find(|&i| i % y_stride >= n && after[i] != y_gap);
        Ok((rows, changed))
    })();
    for buffer in buffers {
        let _ = backend.free(buffer);
    }
    result
}

/// Gate 5's part: every exact kernel at its full width, bit-exact against the host contract.
pub(super) fn exact_strides(backend: &dyn GpuBackend, cases: &mut Cases) {
    let (n, k) = (63, 80);
    let w = matrix(n, k, 555);
    for (x_pad, y_pad, alignment) in STRIDE_PADS {
        for spec in family_kernels(Family::Exact) {
            let m = spec.max_m;
            let x = activations(m, k, 90);
            let expected = host(&w, &x, m);
            let outcome =
                strided_launch(backend, lookup(backend, spec.name), &w, &x, m, (x_pad, y_pad)).map(|(y, changed)| {
                    diff(&expected, &y, n).or_else(|| changed.map(|i| format!("y element {i}, between rows, changed")))
                });
            cases.record(
                format!("N={n} K={k} {} m={m}, row strides K + {x_pad} and N + {y_pad} ({alignment})", spec.name),
                outcome,
            );
        }
    }
}
