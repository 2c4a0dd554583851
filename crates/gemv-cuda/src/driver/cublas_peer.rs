//! cuBLAS's dense BF16 GEMM on the bench's shape: the peer the NVFP4 kernels are measured
//! against. BF16 weights stream 2 bytes per weight where NVFP4 streams 0.5625 (half a byte of
//! code and a sixteenth of a scale byte), so on a memory-bound decode step the ideal speed-up is
//! 2 / 0.5625 = 3.56x.
//!
//! Feature `cublas-peer` (off by default: it adds cuBLAS's bindings, and a library must not make
//! that choice for the engine that depends on it). With `dynamic-loading`, libcublas is opened
//! at run time and probed first: a machine without it gets [`CudaError::NoCublas`], never a
//! panic. The call is cuBLAS's `GemmEx` with BF16 inputs and output and FP32 accumulation (what
//! an engine runs for a BF16 linear layer), on the backend's stream, timed by device events.

use super::{CudaBackend, driver_error};
use crate::error::CudaError;
use crate::launch::kernel_int;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t};
use cudarc::cublas::{CudaBlas, result::gemm_ex};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use gemv_backend::{PeerTiming, Result};
use gemv_core::GemvShape;
use gemv_core::codec::f32_to_bf16;
use std::time::Duration;

const NAME: &str = "cuBLAS BF16 GEMM";

/// Whether libcublas can be loaded (no cuBLAS call is made).
#[cfg(feature = "dynamic-loading")]
pub fn cublas_present() -> bool {
    // SAFETY: only tries to open libcublas by its well-known names with libloading; no cuBLAS
    // function is called.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

/// Whether libcublas can be loaded: without `dynamic-loading` the final binary links it.
#[cfg(not(feature = "dynamic-loading"))]
pub fn cublas_present() -> bool {
    true
}

/// Finite BF16 data in [-0.5, 0.5): a deterministic pattern (the GEMM's speed does not depend
/// on the values, but zeros could be compressed by some memory systems).
fn pattern(len: usize, seed: usize) -> Vec<u16> {
    (0..len).map(|i| f32_to_bf16(((i.wrapping_mul(7919).wrapping_add(seed)) % 251) as f32 / 251.0 - 0.5)).collect()
}

/// The cuBLAS call for Y[m][n] = sum_k X[m][k] W[n][k] with row-major W (N x K), X (M x K) and
/// Y (M x N): in cuBLAS's column-major terms Y^T (N x M) = op(W) X^T with op = transpose.
struct Gemm {
    m: i32,
    n: i32,
    k: i32,
}

impl Gemm {
    fn new(shape: GemvShape) -> Result<Self> {
        Ok(Self {
            m: kernel_int("cuda", "M", shape.m)?,
            n: kernel_int("cuda", "N", shape.n)?,
            k: kernel_int("cuda", "K", shape.k)?,
        })
    }

    /// Enqueues one GEMM on the handle's stream.
    fn enqueue(
        &self,
        blas: &CudaBlas,
        stream: &CudaStream,
        weights: &CudaSlice<u16>,
        x: &CudaSlice<u16>,
        y: &mut CudaSlice<u16>,
    ) -> std::result::Result<(), CudaError> {
        let (w, _w_sync) = weights.device_ptr(stream);
        let (x, _x_sync) = x.device_ptr(stream);
        let (y, _y_sync) = y.device_ptr_mut(stream);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the handle is live and bound to `stream` (the backend's, where the buffers
        // live); `weights` holds n * k, `x` m * k and `y` m * n BF16 values (checked by the
        // callers), which is what the transposed-W, plain-X call with leading dimensions k, k
        // and n reads and writes; alpha and beta are f32 as CUBLAS_COMPUTE_32F requires, and
        // outlive the call (cuBLAS reads host scalars before returning).
        unsafe {
            gemm_ex(
                *blas.handle(),
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                self.n,
                self.m,
                self.k,
                (&alpha as *const f32).cast(),
                w as *const std::ffi::c_void,
                cudaDataType_t::CUDA_R_16BF,
                self.k,
                x as *const std::ffi::c_void,
                cudaDataType_t::CUDA_R_16BF,
                self.k,
                (&beta as *const f32).cast(),
                y as *mut std::ffi::c_void,
                cudaDataType_t::CUDA_R_16BF,
                self.n,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|status| CudaError::Cublas {
            call: format!("GemmEx M = {} N = {} K = {}", self.m, self.n, self.k),
            status: format!("{status:?}"),
        })
    }
}

impl CudaBackend {
    fn blas(&self) -> Result<CudaBlas> {
        if !cublas_present() {
            return Err(CudaError::NoCublas.into());
        }
        CudaBlas::new(self.stream.clone()).map_err(|status| {
            CudaError::Cublas { call: "creating a cuBLAS handle".into(), status: format!("{status:?}") }.into()
        })
    }

    fn upload_u16(&self, data: &[u16], what: &str) -> Result<CudaSlice<u16>> {
        self.stream.clone_htod(data).map_err(driver_error(format!("uploading the peer's {what}")))
    }

    /// cuBLAS's BF16 GEMM on `shape` timed `rounds` times over `repeats` runs, the weights
    /// rotated through copies that fill at least `cold_bytes` (as the kernels' are).
    pub(super) fn time_cublas(
        &self,
        shape: GemvShape,
        cold_bytes: usize,
        repeats: usize,
        rounds: usize,
    ) -> Result<PeerTiming> {
        let gemm = Gemm::new(shape)?;
        let blas = self.blas()?;
        let weight_bytes = 2 * shape.n * shape.k;
        let copies = cold_bytes.div_ceil(weight_bytes.max(1)).max(1);
        let host_weights = pattern(shape.n * shape.k, 1);
        let weights = (0..copies).map(|_| self.upload_u16(&host_weights, "weights")).collect::<Result<Vec<_>>>()?;
        let x = self.upload_u16(&pattern(shape.m * shape.k, 2), "activations")?;
        let mut y = self.upload_u16(&vec![0; shape.m * shape.n], "outputs")?;
        gemm.enqueue(&blas, &self.stream, &weights[0], &x, &mut y)?;
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let start = self.stream.record_event(timing).map_err(driver_error("recording an event"))?;
            for i in 0..repeats {
                gemm.enqueue(&blas, &self.stream, &weights[i % copies], &x, &mut y)?;
            }
            let end = self.stream.record_event(timing).map_err(driver_error("recording an event"))?;
            end.synchronize().map_err(driver_error("waiting for an event"))?;
            let ms = start.elapsed_ms(&end).map_err(driver_error("reading event time"))?;
            times.push(Duration::from_secs_f64(f64::from(ms) / 1e3));
        }
        Ok(PeerTiming { name: NAME, rounds: times })
    }

    /// cuBLAS's BF16 GEMM once on the caller's data (BF16 bits, row-major W: N x K, X: M x K),
    /// returning Y (M x N): how the tests prove the peer computes the product it is said to.
    pub fn cublas_bf16_gemm(&self, weights: &[u16], x: &[u16], shape: GemvShape) -> Result<Vec<u16>> {
        let gemm = Gemm::new(shape)?;
        let lengths = [
            (weights.len(), shape.n * shape.k, "cuBLAS peer weights"),
            (x.len(), shape.m * shape.k, "cuBLAS peer activations"),
        ];
        if let Some((found, expected, what)) = lengths.into_iter().find(|(found, expected, _)| found != expected) {
            return Err(gemv_backend::Error::HostLengthMismatch { what, expected: 2 * expected, found: 2 * found });
        }
        let blas = self.blas()?;
        let weights = self.upload_u16(weights, "weights")?;
        let x = self.upload_u16(x, "activations")?;
        let mut y = self.upload_u16(&vec![0; shape.m * shape.n], "outputs")?;
        gemm.enqueue(&blas, &self.stream, &weights, &x, &mut y)?;
        self.stream.clone_dtoh(&y).map_err(driver_error("downloading the peer's outputs"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_data_is_finite_bf16() {
        assert!(pattern(1000, 3).iter().all(|&b| (b & 0x7F80) != 0x7F80), "finite");
    }
}
