//! [`CpuWeights`]: an NVFP4 matrix in the CPU's arrangement, made once.

use crate::arrangements::Arranged;
use gemv_core::{Nvfp4Matrix, Nvfp4View};
use std::sync::Arc;

/// An NVFP4 matrix arranged for the CPU kernels (16 rows to a tile, scales next to their
/// weights, each tile one forward stream, docs/cpu.md): the checkpoint's bytes are read once,
/// here, and launches ([`CpuBackend::gemv`](crate::CpuBackend::gemv)) read only this. It holds
/// the matrix's bytes plus a little padding; weights of 2 MiB and more sit on huge pages where
/// the system offers them.
pub struct CpuWeights {
    arranged: Arc<Arranged>,
    global_scale: f32,
}

impl std::fmt::Debug for CpuWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuWeights")
            .field("n", &self.n())
            .field("k", &self.k())
            .field("global_scale", &self.global_scale)
            .field("bytes", &self.arranged.bytes.len())
            .finish()
    }
}

impl CpuWeights {
    /// Arranges a validated matrix.
    pub fn new(weights: &Nvfp4View<'_>) -> Self {
        Self {
            arranged: Arc::new(Arranged::new(weights.packed(), weights.scales(), weights.n(), weights.k())),
            global_scale: weights.global_scale(),
        }
    }

    /// An arrangement the backend already holds (the trait path's, made at the first launch over
    /// a weight range), with its global scale.
    pub(crate) fn shared(arranged: Arc<Arranged>, global_scale: f32) -> Self {
        Self { arranged, global_scale }
    }

    /// Another handle on the same arrangement.
    pub(crate) fn clone_shared(&self) -> Self {
        Self { arranged: Arc::clone(&self.arranged), global_scale: self.global_scale }
    }

    /// Weight rows.
    pub fn n(&self) -> usize {
        self.arranged.geometry.n()
    }

    /// Weight columns.
    pub fn k(&self) -> usize {
        self.arranged.geometry.k()
    }

    /// The FP32 global scale.
    pub fn global_scale(&self) -> f32 {
        self.global_scale
    }

    /// The matrix in the standard layout again: the bytes it was made from.
    pub fn to_matrix(&self) -> Nvfp4Matrix {
        let (packed, scales) = self.arranged.geometry.restore(&self.arranged.bytes);
        Nvfp4Matrix::from_parts(packed, scales, self.global_scale, self.n(), self.k())
            .expect("an arrangement restores to the shape it was made from")
    }

    pub(crate) fn arranged(&self) -> &Arranged {
        &self.arranged
    }
}
