//! Weights past 2^31 bytes: the kernels' 32-bit size parameters must never turn into 32-bit byte
//! offsets. N = 2^16 + 1 rows of K = 2^16 puts the last row's packed bytes past 2^31; every row
//! holds different bytes, so a wrapped offset reads the wrong row and the last outputs differ.
//! The dispatch plan, two ring-pipeline kernels and a grouped launch (the same bytes as 2^16 + 1
//! experts of one row, so the last expert starts at byte 2^31) are checked. Heavy (2.1 GB of
//! packed weights, held twice: host copy and device copy): release-only tests call it.

use super::data::activations;
use gemv_backend::{DeviceMatrix, Error, GpuBackend, GroupedArgs, KernelHandle, ResolvedTiers};
use gemv_core::{Family, KillSwitches, Nvfp4Matrix, Nvfp4View, gemv_contract, kernel_spec};

/// Rows and columns of the check: `N * K / 2 = 2^31 + 2^15` packed bytes.
pub const LARGE_SHAPE: (usize, usize) = ((1 << 16) + 1, 1 << 16);

/// Rows compared at each end (the host contract on all of them would dominate the time).
const COMPARED_ROWS: usize = 64;

/// Runs M = 2 on the large shape and compares the first and last 64 rows with the host contract.
/// `Ok(())` when bit-exact; otherwise what differed or failed.
pub fn weights_past_2_gib(backend: &dyn GpuBackend) -> Result<(), String> {
    let (n, k) = LARGE_SHAPE;
    let m = 2;
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut packed = vec![0u8; n * k / 2];
    for chunk in packed.chunks_mut(8) {
        let word = next().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    // Scales 0x28..0x47 (2^-2 .. 2^1.9): ordinary magnitudes, no overflow in long sums.
    let scales: Vec<u8> = (0..n * k / 16).map(|_| 0x28 + (next() % 0x20) as u8).collect();
    let w = Nvfp4Matrix::from_parts(packed, scales, 0.0371, n, k).map_err(|e| e.to_string())?;
    let x = activations(m, k, 31);

    let tiers = ResolvedTiers::resolve(backend, KillSwitches::default());
    let matrix = DeviceMatrix::upload(backend, &w.view()).map_err(|e| format!("upload: {e}"))?;
    let view = w.view();
    let found = matrix.gemv(&tiers, &x, m, 2).map_err(|e| format!("launch: {e}"))?;
    compare_ends(&view, &x, m, &found, "the plan")?;
    // Two kernels of the ring pipeline, one per width, where the backend has them (a persistent
    // grid is left out: its blocks walk the rows in rounds, so the emulator's grid ends would
    // not cover the last rows).
    for name in RING_KERNELS {
        let spec = kernel_spec(name).filter(|s| s.family == Family::Exact && s.ring_depth > 0 && !s.persistent);
        let spec = spec.ok_or_else(|| format!("{name} is not a ring kernel of the registry"))?;
        let handle = backend.lookup_kernel(spec.module, spec.name);
        if handle == KernelHandle::NONE {
            continue;
        }
        let width = spec.max_m.min(m);
        let found = matrix.gemv_with(handle, &x[..width * k], width).map_err(|e| format!("{name}: {e}"))?;
        compare_ends(&view, &x, width, &found, name)?;
    }
    grouped_past_2_gib(backend, &matrix, &view, &x)
}

/// Ring-pipeline kernels the check runs: the widest-row one-token kernel and the two-token one.
const RING_KERNELS: [&str; 2] = ["w4a16_gemv_ring3_r4_b2", "w4a16_gemv_batch2_ring3_r2_b2"];

/// Compares rows `0..64` and the last 64 of `found` (`[m][N]`) with the host contract.
fn compare_ends(view: &Nvfp4View<'_>, x: &[u16], m: usize, found: &[u16], what: &str) -> Result<(), String> {
    let (n, k) = (view.n(), view.k());
    for first in [0, n - COMPARED_ROWS] {
        let rows = Nvfp4View::new(
            &view.packed()[first * k / 2..(first + COMPARED_ROWS) * k / 2],
            &view.scales()[first * k / 16..(first + COMPARED_ROWS) * k / 16],
            view.global_scale(),
            COMPARED_ROWS,
            k,
        )
        .map_err(|e| e.to_string())?;
        let mut expected = vec![0u16; m * COMPARED_ROWS];
        gemv_contract(&rows, &x[..m * k], m, &mut expected, gemv_core::host_threads()).map_err(|e| e.to_string())?;
        for t in 0..m {
            for r in 0..COMPARED_ROWS {
                let (want, got) = (expected[t * COMPARED_ROWS + r], found[t * n + first + r]);
                if want != got {
                    return Err(format!(
                        "{what}: Y[{t}][{}] (packed bytes from offset {}): expected {want:#06x}, found {got:#06x}",
                        first + r,
                        (first + r) * k / 2
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The uploaded weights as a stack of N experts of one row each, in one grouped launch: token 0
/// routed to the last expert (its bytes start at 2^31) and the first, token 1 to the second and
/// the one before the last. Skipped where the backend has no grouped launch.
fn grouped_past_2_gib(
    backend: &dyn GpuBackend,
    matrix: &DeviceMatrix<&dyn GpuBackend>,
    view: &Nvfp4View<'_>,
    x: &[u16],
) -> Result<(), String> {
    let (n, k) = (view.n(), view.k());
    let (m, top_k) = (2, 2);
    let ids: [u32; 4] = [(n - 1) as u32, 0, 1, (n - 2) as u32];
    let failed = |what: &str, e: Error| format!("grouped: {what}: {e}");
    let buffers = [2 * m * k, 4, 4 * ids.len(), 2 * m * top_k];
    let allocated = buffers.map(|len| backend.alloc(len));
    let outcome = (|| -> Result<Option<Vec<u16>>, String> {
        let mut held = Vec::with_capacity(allocated.len());
        for buffer in &allocated {
            held.push(buffer.as_ref().map_err(|e| format!("grouped: alloc: {e}"))?.whole());
        }
        let [x_buf, scale_buf, ids_buf, y_buf] = [held[0], held[1], held[2], held[3]];
        backend.upload(x_buf, bytemuck::cast_slice(&x[..m * k])).map_err(|e| failed("x", e))?;
        backend.upload(scale_buf, &view.global_scale().to_le_bytes()).map_err(|e| failed("global scale", e))?;
        backend.upload(ids_buf, bytemuck::cast_slice(&ids)).map_err(|e| failed("routing", e))?;
        let weights = matrix.args(x_buf.buffer, y_buf.buffer, 0, 1);
        let args = GroupedArgs {
            x: x_buf,
            packed: weights.packed,
            scales: weights.scales,
            global_scales: scale_buf,
            routing: ids_buf,
            y: y_buf,
            experts: n,
            m,
            top_k,
            n: 1,
            k,
            family: gemv_core::Family::Exact,
            forced_kernel: None,
        };
        match backend.launch_grouped(&args) {
            Err(Error::Unsupported { .. }) => return Ok(None),
            launched => launched.map_err(|e| failed("launch", e))?,
        }
        backend.synchronize().map_err(|e| failed("synchronize", e))?;
        let mut bytes = vec![0u8; 2 * m * top_k];
        backend.download(y_buf, &mut bytes).map_err(|e| failed("download", e))?;
        Ok(Some(bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()))
    })();
    for buffer in allocated.into_iter().flatten() {
        let _ = backend.free(buffer);
    }
    let Some(found) = outcome? else { return Ok(()) };
    for (pair, &expert) in ids.iter().enumerate() {
        let e = expert as usize;
        let row = Nvfp4View::new(
            &view.packed()[e * k / 2..(e + 1) * k / 2],
            &view.scales()[e * k / 16..(e + 1) * k / 16],
            view.global_scale(),
            1,
            k,
        )
        .map_err(|e| e.to_string())?;
        let mut want = [0u16];
        gemv_contract(&row, &x[(pair / top_k) * k..][..k], 1, &mut want, 1).map_err(|e| e.to_string())?;
        if found[pair] != want[0] {
            return Err(format!(
                "grouped: pair {pair} (expert {e}, packed bytes from offset {}): expected {:#06x}, found {:#06x}",
                e * k / 2,
                want[0],
                found[pair]
            ));
        }
    }
    Ok(())
}
