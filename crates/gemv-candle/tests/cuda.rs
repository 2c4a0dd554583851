//! The layer on a CUDA device (feature `cuda`): gemv's kernels on candle's stream write the bits
//! the CPU path writes, for any leading dimensions and in the fast family within its bound. Needs
//! a GPU and candle's CUDA build; elsewhere it says why it skipped (`GEMV_REQUIRE_CUDA=1` fails).
#![cfg(feature = "cuda")]

use candle_core::{Device, Tensor};
use gemv_candle::{FamilyChoice, Nvfp4Linear};
use gemv_conformance::skip::{Requirement, skip};
use gemv_conformance::{activations, matrix};
use half::bf16;

#[test]
fn the_cuda_path_writes_the_cpu_paths_bits() {
    let device = match Device::new_cuda(0) {
        Ok(device) => device,
        Err(error) => return skip(Requirement::CudaGpu, &format!("no CUDA device for candle: {error}")),
    };
    let (n, k) = (4096, 5120);
    let matrix = matrix(n, k, 9);
    let x: Vec<bf16> = activations(12, k, 10).into_iter().map(bf16::from_bits).collect();
    let cpu = Nvfp4Linear::new(&matrix, &Device::Cpu).expect("cpu layer");
    let gpu = Nvfp4Linear::new(&matrix, &device).expect("cuda layer");
    for dims in [vec![1, k], vec![3, 4, k]] {
        let m: usize = dims[..dims.len() - 1].iter().product();
        let x_cpu = Tensor::from_vec(x[..m * k].to_vec(), dims.clone(), &Device::Cpu).expect("x");
        let expected = cpu.forward(&x_cpu).expect("cpu").flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        let found = gpu.forward(&x_cpu.to_device(&device).unwrap()).expect("cuda");
        let found = found.to_device(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        let differ = found.iter().zip(&expected).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{dims:?}: {differ} of {} values differ from the CPU path", m * n);
    }
    // The fast family where the device has it: finite, and batch-invariant across M.
    let fast = Nvfp4Linear::new(&matrix, &device).expect("cuda layer").with_family(FamilyChoice::Fast);
    let one = Tensor::from_vec(x[..k].to_vec(), (1, k), &device).unwrap();
    let many = Tensor::from_vec(x[..12 * k].to_vec(), (12, k), &device).unwrap();
    if let (Ok(alone), Ok(batch)) = (fast.forward(&one), fast.forward(&many)) {
        let alone = alone.to_device(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        let batch = batch.to_device(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        assert!(alone.iter().zip(&batch[..n]).all(|(a, b)| a.to_bits() == b.to_bits()), "token 0 alone = in a batch");
    }
}

/// 64 layers on one CUDA device share one load of gemv's kernels (a model's layers do not load
/// every PTX module again each), and each still gives the CPU path's bits.
#[test]
fn layers_on_one_device_load_the_kernels_once() {
    let device = match Device::new_cuda(0) {
        Ok(device) => device,
        Err(error) => return skip(Requirement::CudaGpu, &format!("no CUDA device for candle: {error}")),
    };
    let (n, k) = (64, 256);
    let before = gemv_candle::cuda_kernel_loads();
    let layers: Vec<Nvfp4Linear> =
        (0..64).map(|seed| Nvfp4Linear::new(&matrix(n, k, seed), &device).expect("cuda layer")).collect();
    assert!(gemv_candle::cuda_kernel_loads() - before <= 1, "64 layers loaded the kernels more than once");
    let x: Vec<bf16> = activations(2, k, 64).into_iter().map(bf16::from_bits).collect();
    let x_cpu = Tensor::from_vec(x, (2, k), &Device::Cpu).expect("x");
    let x_gpu = x_cpu.to_device(&device).expect("x on the device");
    for (seed, layer) in layers.iter().enumerate().step_by(21) {
        let cpu = Nvfp4Linear::new(&matrix(n, k, seed as u64), &Device::Cpu).expect("cpu layer");
        let expected = cpu.forward(&x_cpu).unwrap().flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        let found = layer.forward(&x_gpu).unwrap().to_device(&Device::Cpu).unwrap();
        let found = found.flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        assert!(found.iter().zip(&expected).all(|(a, b)| a.to_bits() == b.to_bits()), "layer {seed}");
    }
}

/// A routed layer on the CUDA device (the routing a u32 tensor the GPU reads) writes the CPU
/// path's bits for every (token, slot), at M = 1 and 16.
#[test]
fn the_routed_layer_on_cuda_writes_the_cpu_paths_bits() {
    let device = match Device::new_cuda(0) {
        Ok(device) => device,
        Err(error) => return skip(Requirement::CudaGpu, &format!("no CUDA device for candle: {error}")),
    };
    let (experts, n, k, top_k) = (16, 1536, 2048, 4);
    let matrices: Vec<_> = (0..experts).map(|e| matrix(n, k, 300 + e as u64)).collect();
    let stack = gemv_candle::Nvfp4Experts::stack(&matrices).expect("one shape");
    let cpu = gemv_candle::Nvfp4RoutedExperts::new(&stack.view(), &Device::Cpu).expect("cpu layer");
    let gpu = gemv_candle::Nvfp4RoutedExperts::new(&stack.view(), &device).expect("cuda layer");
    for m in [1, 16] {
        let x: Vec<bf16> = activations(m, k, 301).into_iter().map(bf16::from_bits).collect();
        let ids: Vec<u32> = (0..m * top_k).map(|i| ((i * 7 + i / top_k) % experts) as u32).collect();
        let x_cpu = Tensor::from_vec(x, (m, k), &Device::Cpu).expect("x");
        let ids_cpu = Tensor::from_vec(ids, (m, top_k), &Device::Cpu).expect("ids");
        let expected = cpu.forward(&x_cpu, &ids_cpu).expect("cpu").flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        let found =
            gpu.forward(&x_cpu.to_device(&device).unwrap(), &ids_cpu.to_device(&device).unwrap()).expect("cuda");
        let found = found.to_device(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        let differ = found.iter().zip(&expected).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "M = {m}: {differ} of {} values differ from the CPU path", m * top_k * n);
    }
    // The fast family where the device has it: token 0's slots alone equal its slots among 16.
    let fast = gemv_candle::Nvfp4RoutedExperts::new(&stack.view(), &device).expect("cuda layer");
    let fast = fast.with_family(FamilyChoice::Fast);
    let x: Vec<bf16> = activations(16, k, 302).into_iter().map(bf16::from_bits).collect();
    let ids: Vec<u32> = (0..16 * top_k).map(|i| ((i * 5 + 3) % experts) as u32).collect();
    let x = Tensor::from_vec(x, (16, k), &device).expect("x");
    let ids = Tensor::from_vec(ids, (16, top_k), &device).expect("ids");
    let one = (x.narrow(0, 0, 1).unwrap(), ids.narrow(0, 0, 1).unwrap());
    if let (Ok(alone), Ok(batch)) = (fast.forward(&one.0, &one.1), fast.forward(&x, &ids)) {
        let alone = alone.to_device(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        let batch = batch.to_device(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        let same = alone.iter().zip(&batch[..top_k * n]).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "token 0's routed slots alone = in a batch of 16");
    }
}
