//! An NVFP4 linear layer inside candle: `y = W x` for a bf16 activation tensor `[m, k]`, as a
//! [`CustomOp1`]. On a CUDA device the op enqueues the gemv kernels on candle's own stream, reads
//! X from candle's storage in place and returns Y in a buffer candle owns: no host round trip, no
//! synchronisation. On the CPU it runs the host contract, which gives the same bits.
//!
//! Run: `cargo run --release` (in this directory). With a GPU it checks the CUDA result against
//! the CPU one bit for bit; without one it runs the CPU path and says so.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView};
use candle_core::{CpuStorage, CudaStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use gemv_core::{Nvfp4Matrix, gemv_contract, quantize_f32};
use gemv_cuda::{CudaKernels, CudaWeights};
use half::bf16;

/// Rows per launch the dispatch plan may use (every tier up to 32 tokens).
const WIDTH_CAP: usize = 32;

/// The layer's weights: device copies on candle's stream once loaded, and the host matrix the
/// CPU path (and the check) uses.
struct Nvfp4Linear {
    host: Nvfp4Matrix,
    device: Option<DeviceWeights>,
}

struct DeviceWeights {
    kernels: CudaKernels,
    packed: CudaSlice<u8>,
    scales: CudaSlice<u8>,
}

impl Nvfp4Linear {
    /// Uploads `host` to `device` when it is a CUDA device, on candle's stream.
    fn new(host: Nvfp4Matrix, device: &Device) -> candle_core::Result<Self> {
        let device = match device {
            Device::Cuda(cuda) => {
                let stream = cuda.cuda_stream();
                let kernels = CudaKernels::load(stream.context()).map_err(candle_core::Error::wrap)?;
                let packed = stream.clone_htod(host.view().packed()).map_err(candle_core::Error::wrap)?;
                let scales = stream.clone_htod(host.view().scales()).map_err(candle_core::Error::wrap)?;
                Some(DeviceWeights { kernels, packed, scales })
            }
            _ => None,
        };
        Ok(Self { host, device })
    }

    /// `y = W x` for `x: [m, k]` bf16.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(self)
    }

    fn output_shape(&self, layout: &Layout) -> candle_core::Result<(usize, usize)> {
        let (m, k) = layout.shape().dims2()?;
        if k != self.host.k() {
            candle_core::bail!("nvfp4-linear: x has {k} columns, the weights {}", self.host.k());
        }
        if !layout.is_contiguous() {
            candle_core::bail!("nvfp4-linear: x must be contiguous");
        }
        Ok((m, layout.start_offset()))
    }
}

impl CustomOp1 for Nvfp4Linear {
    fn name(&self) -> &'static str {
        "nvfp4-linear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, offset) = self.output_shape(layout)?;
        let (n, k) = (self.host.n(), self.host.k());
        let CpuStorage::BF16(x) = storage else {
            candle_core::bail!("nvfp4-linear: x must be bf16, found {:?}", storage.dtype());
        };
        let x_bits: Vec<u16> = x[offset..offset + m * k].iter().map(|v| v.to_bits()).collect();
        let mut y = vec![0u16; m * n];
        gemv_contract(&self.host.view(), &x_bits, m, &mut y, 1).map_err(candle_core::Error::wrap)?;
        let y = y.into_iter().map(bf16::from_bits).collect();
        Ok((CpuStorage::BF16(y), Shape::from((m, n))))
    }

    fn cuda_fwd(&self, storage: &CudaStorage, layout: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (m, offset) = self.output_shape(layout)?;
        let (n, k) = (self.host.n(), self.host.k());
        let Some(weights) = &self.device else {
            candle_core::bail!("nvfp4-linear: the weights were loaded for another device");
        };
        let cuda = storage.device();
        let stream = cuda.cuda_stream();
        let x: &CudaSlice<bf16> = storage.as_cuda_slice::<bf16>()?;
        let x: CudaView<'_, bf16> = x.slice(offset..offset + m * k);
        // SAFETY: bf16 and u16 have the same size and alignment, and every bit pattern is valid
        // for both; the view covers exactly the m * k elements of x.
        let x: CudaView<'_, u16> = unsafe { x.transmute::<u16>(m * k) }.expect("same length");
        // SAFETY: every element is written by the launches below before candle reads Y (they are
        // enqueued on the same stream, which orders them before any later use).
        let mut y: CudaSlice<bf16> = unsafe { cuda.alloc::<bf16>(m * n) }?;
        {
            // SAFETY: as for x.
            let mut y_bits = unsafe { y.transmute_mut::<u16>(m * n) }.expect("same length");
            let matrix = CudaWeights {
                packed: weights.packed.as_view(),
                scales: weights.scales.as_view(),
                global_scale: self.host.global_scale(),
                n,
                k,
            };
            weights
                .kernels
                .launch_m(&stream, &matrix, &x, &mut y_bits, m, WIDTH_CAP)
                .map_err(candle_core::Error::wrap)?;
        }
        Ok((CudaStorage::wrap_cuda_slice(y, cuda.clone()), Shape::from((m, n))))
    }
}

fn main() -> candle_core::Result<()> {
    let (n, k, m) = (4096, 5120, 8);
    let dense: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 4096.0).collect();
    let host = quantize_f32(&dense, n, k).map_err(candle_core::Error::wrap)?;
    let x_values: Vec<bf16> = (0..m * k).map(|i| bf16::from_f32(((i * 104729 % 997) as f32 - 498.0) / 256.0)).collect();

    let cpu_layer = Nvfp4Linear::new(host.clone(), &Device::Cpu)?;
    let x_cpu = Tensor::from_vec(x_values.clone(), (m, k), &Device::Cpu)?;
    let y_cpu = cpu_layer.forward(&x_cpu)?;
    println!("cpu: y {:?} {:?}", y_cpu.shape(), y_cpu.dtype());

    let device = match Device::new_cuda(0) {
        Ok(device) => device,
        Err(error) => {
            println!("no CUDA device ({error}); the CPU path ran, nothing to compare");
            return Ok(());
        }
    };
    let layer = Nvfp4Linear::new(host, &device)?;
    let x = Tensor::from_vec(x_values, (m, k), &device)?;
    let y = layer.forward(&x)?;
    let (found, expected) = (y.to_dtype(DType::BF16)?.to_vec2::<bf16>()?, y_cpu.to_vec2::<bf16>()?);
    let mismatches =
        found.iter().flatten().zip(expected.iter().flatten()).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    println!("cuda: y {:?}, {mismatches} of {} values differ from the CPU path", y.shape(), m * n);
    if mismatches != 0 {
        candle_core::bail!("the CUDA result differs from the contract");
    }
    Ok(())
}
