//! The layer on the CPU: loaded from a checkpoint in either layout or from tensors, any leading
//! dimensions of X, the exact contract's bits; bad input refused with the name at fault.

use candle_core::safetensors::SliceSafetensors;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use gemv_candle::{Nvfp4Linear, nvfp4_linear};
use gemv_conformance::{activations, matrix};
use gemv_core::{Nvfp4Matrix, gemv_contract};
use half::bf16;
use safetensors::Dtype;
use safetensors::tensor::TensorView;

const N: usize = 37;
const K: usize = 272;

/// A checkpoint holding `matrix` as layer `prefix`, in ModelOpt's names or compressed-tensors'.
fn checkpoint(matrix: &Nvfp4Matrix, prefix: &str, compressed_tensors: bool) -> Vec<u8> {
    let view = matrix.view();
    let (packed_name, global_name, global) = if compressed_tensors {
        ("weight_packed", "weight_global_scale", 1.0 / matrix.global_scale())
    } else {
        ("weight", "weight_scale_2", matrix.global_scale())
    };
    let global = global.to_le_bytes();
    let tensors = [
        (format!("{prefix}.{packed_name}"), TensorView::new(Dtype::U8, vec![N, K / 2], view.packed()).unwrap()),
        (format!("{prefix}.weight_scale"), TensorView::new(Dtype::F8_E4M3, vec![N, K / 16], view.scales()).unwrap()),
        (format!("{prefix}.{global_name}"), TensorView::new(Dtype::F32, vec![], &global).unwrap()),
    ];
    safetensors::serialize(tensors, None).expect("serialize")
}

/// What the contract gives for `x` (`m` rows of K bf16 bits).
fn expected(matrix: &Nvfp4Matrix, x: &[u16], m: usize) -> Vec<u16> {
    let mut y = vec![0u16; m * N];
    gemv_contract(&matrix.view(), x, m, &mut y, 1).expect("contract");
    y
}

fn bits(y: &Tensor) -> Vec<u16> {
    y.flatten_all().unwrap().to_vec1::<bf16>().unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn both_layouts_load_and_any_leading_dimensions_give_the_contracts_bits() {
    let matrix = matrix(N, K, 3);
    let x_bits = activations(6, K, 4);
    let x: Vec<bf16> = x_bits.iter().map(|&b| bf16::from_bits(b)).collect();
    for compressed_tensors in [false, true] {
        let buffer = checkpoint(&matrix, "model.layers.0.mlp.up_proj", compressed_tensors);
        let source = SliceSafetensors::new(&buffer).expect("checkpoint");
        for name in ["model.layers.0.mlp.up_proj", "model.layers.0.mlp.up_proj.weight"] {
            if compressed_tensors && name.ends_with(".weight") {
                continue;
            }
            let layer = Nvfp4Linear::from_safetensors(&source, name, &Device::Cpu).expect("layer");
            assert_eq!((layer.in_features(), layer.out_features()), (K, N));
            assert_eq!(layer.global_scale(), matrix.global_scale(), "compressed-tensors: {compressed_tensors}");
            for dims in [vec![K], vec![6, K], vec![2, 3, K]] {
                let m: usize = dims[..dims.len() - 1].iter().product();
                let x = Tensor::from_vec(x[..m * K].to_vec(), dims.clone(), &Device::Cpu).unwrap();
                let y = layer.forward(&x).expect("forward");
                let mut y_dims = dims.clone();
                *y_dims.last_mut().unwrap() = N;
                assert_eq!(y.dims(), y_dims.as_slice());
                assert_eq!(bits(&y), expected(&matrix, &x_bits[..m * K], m), "{dims:?}");
            }
        }
    }
}

#[test]
fn a_layer_from_tensors_and_x_strided_or_at_an_offset_give_the_same_bits() {
    let matrix = matrix(N, K, 5);
    let view = matrix.view();
    let packed = Tensor::from_vec(view.packed().to_vec(), (N, K / 2), &Device::Cpu).unwrap();
    let codes = Tensor::from_vec(view.scales().to_vec(), (N, K / 16), &Device::Cpu).unwrap();
    let as_f8 = Tensor::from_raw_buffer(view.scales(), DType::F8E4M3, &[N, K / 16], &Device::Cpu).unwrap();
    let x_bits = activations(4, K, 6);
    let x: Vec<bf16> = x_bits.iter().map(|&b| bf16::from_bits(b)).collect();
    // X transposed twice: the same values in a non-contiguous layout.
    let x = Tensor::from_vec(x, (4, K), &Device::Cpu).unwrap().t().unwrap().contiguous().unwrap().t().unwrap();
    assert!(!x.is_contiguous());
    // Rows 2..6 of a bigger X: contiguous, starting K * 2 elements into candle's storage.
    let padded: Vec<bf16> = [vec![bf16::NAN; 2 * K], x_bits.iter().map(|&b| bf16::from_bits(b)).collect()].concat();
    let tail = Tensor::from_vec(padded, (6, K), &Device::Cpu).unwrap().narrow(0, 2, 4).unwrap();
    assert!(tail.is_contiguous() && tail.layout().start_offset() == 2 * K);
    for scales in [&codes, &as_f8] {
        let layer = Nvfp4Linear::from_tensors(&packed, scales, matrix.global_scale(), &Device::Cpu).expect("layer");
        assert_eq!(bits(&layer.forward(&x).expect("forward")), expected(&matrix, &x_bits, 4), "{:?}", scales.dtype());
        assert_eq!(bits(&layer.forward(&tail).expect("forward")), expected(&matrix, &x_bits, 4), "rows at an offset");
    }
}

#[test]
fn bad_input_is_refused_naming_what_is_wrong() {
    let matrix = matrix(N, K, 7);
    let buffer = checkpoint(&matrix, "up", false);
    let source = SliceSafetensors::new(&buffer).expect("checkpoint");
    let missing = Nvfp4Linear::from_safetensors(&source, "down", &Device::Cpu).expect_err("no such layer");
    assert!(missing.to_string().contains("\"down.weight\""), "{missing}");
    let layer = Nvfp4Linear::from_safetensors(&source, "up", &Device::Cpu).expect("layer");
    let wrong_k = Tensor::zeros((2, K + 16), DType::BF16, &Device::Cpu).unwrap();
    assert!(layer.forward(&wrong_k).expect_err("K").to_string().contains("in_features 272"));
    let f32_x = Tensor::zeros((2, K), DType::F32, &Device::Cpu).unwrap();
    assert!(layer.forward(&f32_x).expect_err("dtype").to_string().contains("bf16"));
    let empty = Tensor::zeros((0, K), DType::BF16, &Device::Cpu).unwrap();
    assert_eq!(layer.forward(&empty).expect("no rows").dims(), [0, N]);
    // Scales of the wrong shape.
    let view = matrix.view();
    let packed = Tensor::from_vec(view.packed().to_vec(), (N, K / 2), &Device::Cpu).unwrap();
    let short = Tensor::from_vec(view.scales()[..N * (K / 16 - 1)].to_vec(), (N, K / 16 - 1), &Device::Cpu).unwrap();
    let error = Nvfp4Linear::from_tensors(&packed, &short, 1.0, &Device::Cpu).expect_err("scales");
    assert!(error.to_string().contains("scales should be [37, 17]"), "{error}");
}

#[test]
fn a_var_builder_loads_either_layout_like_a_dense_linear() {
    let matrix = matrix(N, K, 11);
    let x_bits = activations(3, K, 12);
    let x = Tensor::from_vec(x_bits.iter().map(|&b| bf16::from_bits(b)).collect::<Vec<_>>(), (3, K), &Device::Cpu);
    let x = x.unwrap();
    for compressed_tensors in [false, true] {
        let buffer = checkpoint(&matrix, "model.layers.1.mlp.down_proj", compressed_tensors);
        let vb = VarBuilder::from_buffered_safetensors(buffer, DType::BF16, &Device::Cpu).expect("var builder");
        let layer = nvfp4_linear(K, N, vb.pp("model.layers.1.mlp.down_proj")).expect("layer");
        assert_eq!(layer.global_scale(), matrix.global_scale(), "compressed-tensors: {compressed_tensors}");
        assert_eq!(bits(&layer.forward(&x).expect("forward")), expected(&matrix, &x_bits, 3));
        let wrong = nvfp4_linear(K + 16, N, vb.pp("model.layers.1.mlp.down_proj")).expect_err("K");
        assert!(wrong.to_string().contains("shape mismatch"), "{wrong}");
    }
}

/// What the contract gives for `matrix` of any shape.
fn contract(matrix: &Nvfp4Matrix, x: &[u16], m: usize) -> Vec<u16> {
    let mut y = vec![0u16; m * matrix.n()];
    gemv_contract(&matrix.view(), x, m, &mut y, 1).expect("contract");
    y
}

/// A two-layer MLP of `Nvfp4Linear` (up, relu, down) run through candle's `Module`, as a model
/// built of modules runs it: each layer writes the host contract's bits for what reaches it.
#[test]
fn a_two_layer_mlp_through_module_forward_gives_the_contracts_bits() {
    use candle_core::Module;
    let (k, hidden, n, m) = (64, 48, 32, 3);
    let (up_weights, down_weights) = (matrix(hidden, k, 21), matrix(n, hidden, 22));
    let up = Nvfp4Linear::new(&up_weights, &Device::Cpu).expect("up");
    let down = Nvfp4Linear::new(&down_weights, &Device::Cpu).expect("down");
    let x_bits = activations(m, k, 23);
    let x_values: Vec<bf16> = x_bits.iter().map(|&b| bf16::from_bits(b)).collect();
    let x = Tensor::from_vec(x_values, (m, k), &Device::Cpu).unwrap();
    let hidden_out = Module::forward(&up, &x).expect("up forward");
    assert_eq!(bits(&hidden_out), contract(&up_weights, &x_bits, m), "the first layer");
    let activated = hidden_out.relu().expect("relu");
    let y = Module::forward(&down, &activated).expect("down forward");
    assert_eq!(y.dims(), &[m, n]);
    assert_eq!(bits(&y), contract(&down_weights, &bits(&activated), m), "the second layer");
    let mlp = |x: &Tensor| Module::forward(&down, &Module::forward(&up, x)?.relu()?);
    assert_eq!(bits(&mlp(&x).expect("mlp")), bits(&y), "the composition");
}
