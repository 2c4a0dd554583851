//! The routed layer on the CPU: a stack of experts, the routing as a u32 tensor, any leading
//! dimensions; every (token, slot) output its expert's exact contract; bad input refused.

use candle_core::{DType, Device, Tensor};
use gemv_candle::{Nvfp4Experts, Nvfp4RoutedExperts};
use gemv_conformance::{activations, matrix};
use gemv_core::{GroupedCall, Nvfp4Matrix, grouped_contract};
use half::bf16;

const N: usize = 21;
const K: usize = 800;
const EXPERTS: usize = 5;

/// Experts of one shape, each with a global scale of its own.
fn stack() -> Nvfp4Experts {
    let matrices: Vec<Nvfp4Matrix> = (0..EXPERTS)
        .map(|e| {
            let base = matrix(N, K, 60 + e as u64);
            let view = base.view();
            let global = view.global_scale() * (1.0 + e as f32 / 4.0);
            Nvfp4Matrix::from_parts(view.packed().to_vec(), view.scales().to_vec(), global, N, K).expect("shape")
        })
        .collect();
    Nvfp4Experts::stack(&matrices).expect("one shape")
}

fn bits(y: &Tensor) -> Vec<u16> {
    y.flatten_all().unwrap().to_vec1::<bf16>().unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_routed_layer_gives_each_slot_its_experts_contract_for_any_leading_dimensions() {
    let stack = stack();
    let layer = Nvfp4RoutedExperts::new(&stack.view(), &Device::Cpu).expect("placed");
    assert_eq!((layer.experts(), layer.in_features(), layer.out_features()), (EXPERTS, K, N));
    let (m, top_k) = (6, 3);
    let x_bits = activations(m, K, 61);
    let x: Vec<bf16> = x_bits.iter().map(|&b| bf16::from_bits(b)).collect();
    // Every token on expert 2 among others, one token naming an expert twice.
    let ids: Vec<u32> = vec![2, 0, 4, 2, 1, 1, 2, 3, 0, 4, 2, 3, 2, 2, 0, 1, 4, 2];
    let mut expected = vec![0u16; m * top_k * N];
    let routing = GroupedCall::new(m, top_k).routing(&ids, EXPERTS).expect("ids below E");
    grouped_contract(&stack.view(), &x_bits, &routing, &mut expected, 1).expect("contract");
    for leading in [vec![6], vec![2, 3]] {
        let x = Tensor::from_vec(x.clone(), [leading.clone(), vec![K]].concat(), &Device::Cpu).unwrap();
        let id_tensor = Tensor::from_vec(ids.clone(), [leading.clone(), vec![top_k]].concat(), &Device::Cpu).unwrap();
        let y = layer.forward(&x, &id_tensor).expect("forward");
        assert_eq!(y.dims(), [leading.clone(), vec![top_k, N]].concat().as_slice());
        assert_eq!(bits(&y), expected, "{leading:?}");
    }
    // X and the ids as views at an offset (the second halves of bigger tensors) give the same
    // bits.
    let (other_x, other_ids) = (vec![bf16::from_f32(3.0); m * K], vec![4u32; m * top_k]);
    let wide = Tensor::from_vec([other_x, x.clone()].concat(), (2 * m, K), &Device::Cpu).unwrap().narrow(0, m, m);
    let ids_wide = Tensor::from_vec([other_ids, ids.clone()].concat(), (2 * m, top_k), &Device::Cpu).unwrap();
    let y = layer.forward(&wide.unwrap(), &ids_wide.narrow(0, m, m).unwrap()).expect("forward");
    assert_eq!(bits(&y), expected, "views at an offset");
}

#[test]
fn bad_routed_input_is_refused_naming_what_is_wrong() {
    let layer = Nvfp4RoutedExperts::new(&stack().view(), &Device::Cpu).expect("placed");
    let x = Tensor::zeros((2, K), DType::BF16, &Device::Cpu).unwrap();
    let ids = |values: Vec<u32>, rows: usize| Tensor::from_vec(values, (rows, 2), &Device::Cpu).unwrap();
    let cases: [(Tensor, Tensor, &str); 5] = [
        (x.clone(), ids(vec![0, 1, 2, 5], 2), "names expert 5"),
        (x.clone(), ids(vec![0, 1], 1), "leading dimensions"),
        (x.clone(), ids(vec![0, 1, 2, 3], 2).to_dtype(DType::U8).unwrap(), "ids u32"),
        (x.to_dtype(DType::F32).unwrap(), ids(vec![0, 1, 2, 3], 2), "x must be bf16"),
        (Tensor::zeros((2, K - 16), DType::BF16, &Device::Cpu).unwrap(), ids(vec![0, 1, 2, 3], 2), "in_features"),
    ];
    for (x, ids, needle) in cases {
        let error = layer.forward(&x, &ids).expect_err(needle).to_string();
        assert!(error.contains(needle), "{needle}: {error}");
    }
}
