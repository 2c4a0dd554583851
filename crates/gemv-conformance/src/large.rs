//! Weights past 2^31 bytes: the kernels' 32-bit size parameters must never turn into 32-bit byte
//! offsets. N = 2^16 + 1 rows of K = 2^16 puts the last row's packed bytes past 2^31; every row
//! holds different bytes, so a wrapped offset reads the wrong row and the last outputs differ.
//! Heavy (2.1 GB of packed weights, held twice: host copy and device copy): release-only tests
//! call it.

use super::data::activations;
use gemv_backend::{DeviceMatrix, GpuBackend, ResolvedTiers};
use gemv_core::{KillSwitches, Nvfp4Matrix, Nvfp4View, gemv_contract};

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
    let found = matrix.gemv(&tiers, &x, m, 2).map_err(|e| format!("launch: {e}"))?;

    let view = w.view();
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
        gemv_contract(&rows, &x, m, &mut expected, gemv_core::host_threads()).map_err(|e| e.to_string())?;
        for t in 0..m {
            for r in 0..COMPARED_ROWS {
                let (want, got) = (expected[t * COMPARED_ROWS + r], found[t * n + first + r]);
                if want != got {
                    return Err(format!(
                        "Y[{t}][{}] (packed bytes from offset {}): expected {want:#06x}, found {got:#06x}",
                        first + r,
                        (first + r) * k / 2
                    ));
                }
            }
        }
    }
    Ok(())
}
