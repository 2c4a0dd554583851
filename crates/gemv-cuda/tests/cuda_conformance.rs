//! The conformance suite on a real GPU. Without a driver or device each test reports a skip
//! (counted by `cargo xtask test`); `GEMV_REQUIRE_CUDA=1` turns that into a failure (the device
//! pack's run.sh sets it).

use gemv_backend::Error;
use gemv_conformance::skip::{Requirement, skip};
use gemv_cuda::CudaBackend;
use std::sync::OnceLock;

fn cuda() -> Option<&'static CudaBackend> {
    static BACKEND: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    match BACKEND.get_or_init(|| CudaBackend::new(0).map_err(|error| error.to_string())) {
        Ok(backend) => Some(backend),
        Err(reason) => {
            skip(Requirement::CudaGpu, reason);
            None
        }
    }
}

gemv_conformance::conformance_tests!(cuda);

/// The conformance suite again with every launch a programmatic dependent of the one before it
/// (the modules' builds for such launches, sm_90 and newer): the same bits and bounds.
mod programmatic_dependent_launches {
    use super::*;
    use gemv_cuda::LaunchOrder;

    fn cuda() -> Option<&'static CudaBackend> {
        static BACKEND: OnceLock<Result<Result<CudaBackend, String>, String>> = OnceLock::new();
        let opened = BACKEND.get_or_init(|| {
            let backend = CudaBackend::new(0).map_err(|error| error.to_string())?;
            Ok(backend.with_launch_order(LaunchOrder::ProgrammaticDependent).map_err(|error| error.to_string()))
        });
        match opened {
            Ok(Ok(backend)) => Some(backend),
            Ok(Err(reason)) => {
                skip(Requirement::CudaSm90, reason);
                None
            }
            Err(reason) => {
                skip(Requirement::CudaGpu, reason);
                None
            }
        }
    }

    gemv_conformance::conformance_tests!(cuda);
}

#[test]
fn no_driver_is_a_typed_error_not_a_panic() {
    if gemv_cuda::driver_present() {
        skip(Requirement::NoCudaDriver, "this machine has a CUDA driver, so the no-driver path cannot be exercised");
        return;
    }
    match CudaBackend::new(0) {
        Err(Error::Unavailable { backend: "cuda", reason }) => assert!(reason.contains("no CUDA driver"), "{reason}"),
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("opened a CUDA device without a driver"),
    }
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release-mode test: the device pack runs it")]
fn weights_past_2_gib_are_addressed_correctly() {
    let Some(backend) = cuda() else { return };
    if let Err(failure) = gemv_conformance::weights_past_2_gib(backend) {
        panic!("cuda: {failure}");
    }
}

/// The bench's peer row times cuBLAS on Y = X W^T with W row-major N x K: this checks that the
/// call computes exactly that product (not a transpose or another layout) against the host, on a
/// shape where every wrong layout reads different values. Values are multiples of 1/8, so every
/// product and partial sum is exact in f32; only the BF16 output rounding remains.
#[cfg(feature = "cublas-peer")]
#[test]
fn the_cublas_peer_computes_the_product_it_is_timed_on() {
    let Some(backend) = cuda() else { return };
    if !gemv_cuda::cublas_present() {
        skip(Requirement::Cublas, "libcublas could not be loaded: the bench prints no peer row here");
        return;
    }
    let (m, n, k) = (3, 37, 64);
    let value = |i: usize, seed: usize| ((i * 7 + seed) % 13) as f32 / 8.0 - 0.75;
    // Exactly representable: at most 4 significant bits.
    let bf16 = gemv_core::codec::f32_to_bf16;
    let weights: Vec<f32> = (0..n * k).map(|i| value(i, 1)).collect();
    let x: Vec<f32> = (0..m * k).map(|i| value(i, 5)).collect();
    let shape = gemv_core::GemvShape { m, n, k };
    let weights_bits: Vec<u16> = weights.iter().map(|&v| bf16(v)).collect();
    let x_bits: Vec<u16> = x.iter().map(|&v| bf16(v)).collect();
    let found = backend.cublas_bf16_gemm(&weights_bits, &x_bits, shape).expect("cuBLAS GEMM");
    assert_eq!(found.len(), m * n);
    for t in 0..m {
        for row in 0..n {
            let expected: f32 = (0..k).map(|j| weights[row * k + j] * x[t * k + j]).sum();
            let got = gemv_core::codec::bf16_to_f32(found[t * n + row]);
            assert!(
                (got - expected).abs() <= expected.abs() / 128.0,
                "Y[{t}][{row}]: expected {expected} (within a BF16 rounding), found {got}"
            );
        }
    }
    // The lengths the shape needs are checked before anything reaches the device.
    assert!(backend.cublas_bf16_gemm(&weights_bits[1..], &x_bits, shape).is_err());
}

/// Without a driver, an engine asking for a context gets the typed error too.
#[test]
fn the_engine_path_without_a_driver_is_a_typed_error() {
    if gemv_cuda::driver_present() {
        skip(Requirement::NoCudaDriver, "this machine has a CUDA driver, so the no-driver path cannot be exercised");
        return;
    }
    match gemv_cuda::engine_context(0) {
        Err(Error::Unavailable { backend: "cuda", reason }) => assert!(reason.contains("no CUDA driver"), "{reason}"),
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("opened a CUDA context without a driver"),
    }
}

/// An engine's context on device 0, one stream of it, and the kernels loaded into it.
fn engine()
-> (std::sync::Arc<cudarc::driver::CudaContext>, std::sync::Arc<cudarc::driver::CudaStream>, gemv_cuda::CudaKernels) {
    let context = gemv_cuda::engine_context(0).expect("context");
    // SAFETY: the engine tests use one stream only, so cudarc's cross-stream event tracking
    // (which would record events inside a graph capture) is not needed.
    unsafe { context.disable_event_tracking() };
    let stream = context.new_stream().expect("stream");
    let kernels = gemv_cuda::CudaKernels::load(&context).expect("kernels");
    (context, stream, kernels)
}

/// An engine's decode step on its own stream and memory: weights a row range (shard) of a bigger
/// device matrix, X and Y device buffers it owns, every M through the dispatch plan bit-exact
/// against the host contract; then the same launches captured into a CUDA graph and replayed,
/// bit-exact again; then X and Y as rows of wider buffers (row strides).
#[test]
fn an_engine_launches_on_its_own_stream_and_memory_and_replays_a_captured_graph() {
    if cuda().is_none() {
        return;
    }
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use gemv_conformance as conformance;
    use gemv_core::{gemv_contract, host_threads};
    // The engine's names, as an engine imports them: from the backend crate alone.
    use gemv_cuda::{FamilyChoice, GemvCall};
    let (_context, stream, kernels) = engine();
    let (n, k, row0) = (67, 5136, 11);
    let full = conformance::matrix(3 * n, k, 21);
    let view = full.view();
    let packed = stream.clone_htod(view.packed()).expect("packed");
    let scales = stream.clone_htod(view.scales()).expect("scales");
    let weights = gemv_cuda::CudaWeights {
        packed: packed.slice(row0 * k / 2..(row0 + n) * k / 2),
        scales: scales.slice(row0 * k / 16..(row0 + n) * k / 16),
        global_scale: view.global_scale(),
        n,
        k,
    };
    let shard = gemv_core::Nvfp4View::new(
        &view.packed()[row0 * k / 2..(row0 + n) * k / 2],
        &view.scales()[row0 * k / 16..(row0 + n) * k / 16],
        view.global_scale(),
        n,
        k,
    )
    .expect("shard");
    for m in [1, 5, 8, 16, 37] {
        let x_host = conformance::activations(m, k, 22 + m as u64);
        let x = stream.clone_htod(&x_host).expect("x");
        let mut y = stream.alloc_zeros::<u16>(m * n).expect("y");
        let mut expected = vec![0u16; m * n];
        gemv_contract(&shard, &x_host, m, &mut expected, host_threads()).expect("contract");
        // The exact family (the tuned plan of this device where it has one), whatever M.
        let call = GemvCall::new(m).with_family(FamilyChoice::Exact);
        kernels.gemv(&stream, &weights, &x.slice(..), &mut y.slice_mut(..), &call).expect("launches");
        let found = stream.clone_dtoh(&y).expect("y back");
        assert_eq!(found, expected, "M = {m}: direct launches");
        // The default policy runs the family the tuned table names for this device, as if asked.
        let preferred = kernels.tiers().family(FamilyChoice::Auto).expect("auto");
        kernels.gemv(&stream, &weights, &x.slice(..), &mut y.slice_mut(..), &GemvCall::new(m)).expect("auto");
        let auto = stream.clone_dtoh(&y).expect("y back");
        let named = GemvCall::new(m).with_family(preferred.into());
        kernels.gemv(&stream, &weights, &x.slice(..), &mut y.slice_mut(..), &named).expect("named");
        assert_eq!(auto, stream.clone_dtoh(&y).expect("y back"), "M = {m}: auto is {}", preferred.name());

        // The same step captured into a graph: no allocation, copy or synchronisation inside.
        stream.memset_zeros(&mut y).expect("clear y");
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).expect("capture");
        kernels.gemv(&stream, &weights, &x.slice(..), &mut y.slice_mut(..), &call).expect("captured");
        let graph = stream.end_capture(CUgraphInstantiate_flags(0)).expect("end capture").expect("a graph");
        assert_eq!(stream.clone_dtoh(&y).expect("y back"), vec![0u16; m * n], "capture must not run the kernels");
        graph.launch().expect("replay");
        assert_eq!(stream.clone_dtoh(&y).expect("y back"), expected, "M = {m}: graph replay");

        // X and Y as rows of wider buffers (strides K + 24 and N + 3): the rows bit-exact, the
        // elements between Y's rows untouched.
        let (x_stride, y_stride) = (k + 24, n + 3);
        let mut x_wide = vec![0x4479u16; (m - 1) * x_stride + k];
        for t in 0..m {
            x_wide[t * x_stride..t * x_stride + k].copy_from_slice(&x_host[t * k..(t + 1) * k]);
        }
        let x_wide = stream.clone_htod(&x_wide).expect("strided x");
        let marker = vec![0x5A5Au16; (m - 1) * y_stride + n];
        let mut y_wide = stream.clone_htod(&marker).expect("strided y");
        let strided = call.with_x_row_stride(x_stride).with_y_row_stride(y_stride);
        kernels
            .gemv(&stream, &weights, &x_wide.slice(..), &mut y_wide.slice_mut(..), &strided)
            .expect("strided launches");
        let found = stream.clone_dtoh(&y_wide).expect("strided y back");
        for (i, (&value, &before)) in found.iter().zip(&marker).enumerate() {
            let (t, column) = (i / y_stride, i % y_stride);
            let wanted = if column < n { expected[t * n + column] } else { before };
            assert_eq!(value, wanted, "M = {m}: strided Y element {i} (row {t}, column {column})");
        }

        // The engine's own `half::bf16` tensors, no cast: the same bits.
        use gemv_core::half::bf16;
        let x_half: Vec<bf16> = x_host.iter().map(|&bits| bf16::from_bits(bits)).collect();
        let x_half = stream.clone_htod(&x_half).expect("bf16 x");
        let mut y_half = stream.alloc_zeros::<bf16>(m * n).expect("bf16 y");
        kernels.gemv(&stream, &weights, &x_half.slice(..), &mut y_half.slice_mut(..), &call).expect("bf16 launches");
        let found: Vec<u16> = stream.clone_dtoh(&y_half).expect("bf16 y back").iter().map(|v| v.to_bits()).collect();
        assert_eq!(found, expected, "M = {m}: half::bf16 views");

        // The plan in either family from the engine path: exact bit-exact, fast (sm_80+) within
        // its bound of the f64 reference.
        let mut y = stream.alloc_zeros::<u16>(m * n).expect("y");
        let exact = call.with_family(FamilyChoice::Exact);
        kernels.gemv(&stream, &weights, &x.slice(..), &mut y.slice_mut(..), &exact).expect("exact plan");
        assert_eq!(stream.clone_dtoh(&y).expect("y back"), expected, "M = {m}: exact family");
        if kernels.tiers().family(FamilyChoice::Fast).is_ok() {
            let fast = call.with_family(FamilyChoice::Fast);
            kernels.gemv(&stream, &weights, &x.slice(..), &mut y.slice_mut(..), &fast).expect("fast plan");
            let found = stream.clone_dtoh(&y).expect("y back");
            let matrix = gemv_core::Nvfp4Matrix::from_parts(
                shard.packed().to_vec(),
                shard.scales().to_vec(),
                shard.global_scale(),
                n,
                k,
            )
            .expect("shard matrix");
            let failure = conformance::fast_bound_failure(&matrix, &x_host, m, &found);
            assert!(failure.is_none(), "M = {m}: fast family: {failure:?}");
        }
    }
}

/// A row-parallel tensor-parallel shard's step: Y as f32 (the values the bf16 result rounds, for
/// the engine's all-reduce to sum), through the plan on the engine's stream: the exact family the
/// host's f32 contract bit for bit, rounding to the bf16 launch's result; the fast family (sm_80+)
/// within its f32 bound, rounding to its own bf16 result; a strided f32 Y's gaps untouched; an f32
/// view too short for the call a typed error.
#[test]
fn an_engine_writes_an_f32_y_for_a_tensor_parallel_all_reduce() {
    if cuda().is_none() {
        return;
    }
    use gemv_conformance as conformance;
    use gemv_core::codec::f32_to_bf16;
    use gemv_core::{gemv_contract_f32, host_threads};
    use gemv_cuda::{FamilyChoice, GemvCall};
    let (_context, stream, kernels) = engine();
    let (n, k) = (67, 2576);
    let matrix = conformance::matrix(n, k, 31);
    let view = matrix.view();
    let packed = stream.clone_htod(view.packed()).expect("packed");
    let scales = stream.clone_htod(view.scales()).expect("scales");
    let weights = gemv_cuda::CudaWeights {
        packed: packed.slice(..),
        scales: scales.slice(..),
        global_scale: view.global_scale(),
        n,
        k,
    };
    for m in [1, 9, 20] {
        let x_host = conformance::activations(m, k, 32 + m as u64);
        let x = stream.clone_htod(&x_host).expect("x");
        let mut expected = vec![0f32; m * n];
        gemv_contract_f32(&view, &x_host, m, &mut expected, host_threads()).expect("contract");
        let mut families = vec![FamilyChoice::Exact];
        if kernels.tiers().family(FamilyChoice::Fast).is_ok() {
            families.push(FamilyChoice::Fast);
        }
        for family in families {
            let call = GemvCall::new(m).with_family(family);
            let mut y32 = stream.alloc_zeros::<f32>(m * n).expect("f32 y");
            kernels.gemv(&stream, &weights, &x.slice(..), &mut y32.slice_mut(..), &call).expect("f32 launches");
            let found = stream.clone_dtoh(&y32).expect("f32 y back");
            let mut y = stream.alloc_zeros::<u16>(m * n).expect("y");
            kernels.gemv(&stream, &weights, &x.slice(..), &mut y.slice_mut(..), &call).expect("bf16 launches");
            let rounded: Vec<u16> = found.iter().map(|&v| f32_to_bf16(v)).collect();
            assert_eq!(rounded, stream.clone_dtoh(&y).expect("y back"), "M = {m}, {family:?}: f32 rounds to bf16");
            if family == FamilyChoice::Exact {
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&found), bits(&expected), "M = {m}: exact f32 Y");
            } else {
                let failure = conformance::fast_f32_failure(&matrix, &x_host, m, &found);
                assert!(failure.is_none(), "M = {m}: fast f32 Y: {failure:?}");
            }
            // Y's rows N + 3 apart: the elements between them keep their marker.
            let y_stride = n + 3;
            let marker = vec![f32::from_bits(0x5A5A_5A5A); (m - 1) * y_stride + n];
            let mut y_wide = stream.clone_htod(&marker).expect("strided y");
            let strided = call.with_y_row_stride(y_stride);
            kernels.gemv(&stream, &weights, &x.slice(..), &mut y_wide.slice_mut(..), &strided).expect("strided f32");
            let wide = stream.clone_dtoh(&y_wide).expect("strided y back");
            for (i, (&value, &before)) in wide.iter().zip(&marker).enumerate() {
                let (t, column) = (i / y_stride, i % y_stride);
                let wanted = if column < n { found[t * n + column] } else { before };
                assert_eq!(value.to_bits(), wanted.to_bits(), "M = {m}, {family:?}: strided f32 Y element {i}");
            }
        }
        let mut short = stream.alloc_zeros::<f32>(m * n - 1).expect("short y");
        let error = kernels
            .gemv(&stream, &weights, &x.slice(..), &mut short.slice_mut(..), &GemvCall::new(m))
            .expect_err("an f32 Y one element short");
        assert!(
            matches!(error, gemv_backend::Error::Core(gemv_core::CoreError::RangeTooSmall { what: "y", .. })),
            "{error}"
        );
    }
}

/// A routed mixture-of-experts layer from an engine: stacked experts, X, the routing and Y in its
/// own device memory, one launch per step, bit-exact against the host contract; then captured
/// into a graph and replayed with a new routing written between replays (the routing is read
/// from device memory, never from the host); on sm_80+ the fast family's grouped launch, each
/// pair's row equal to the family's single launch of it.
#[test]
fn an_engine_runs_a_routed_layer_in_one_launch_and_replays_it_with_new_routings() {
    if cuda().is_none() {
        return;
    }
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use gemv_conformance as conformance;
    use gemv_core::{ExpertRouting, grouped_contract, host_threads};
    use gemv_core::{Family, FamilyChoice, GemvCall};
    use gemv_cuda::{CudaExperts, CudaWeights, GroupedCall, Nvfp4Experts};
    let (_context, stream, kernels) = engine();
    let (experts, n, k, top_k) = (12, 45, 2064, 4);
    let matrices: Vec<_> = (0..experts).map(|e| conformance::matrix(n, k, 60 + e as u64)).collect();
    let stack = Nvfp4Experts::stack(&matrices).expect("stack");
    let view = stack.view();
    let packed = stream.clone_htod(view.packed()).expect("packed");
    let scales = stream.clone_htod(view.scales()).expect("scales");
    let global_scales = stream.clone_htod(view.global_scales()).expect("global scales");
    let weights = CudaExperts {
        packed: packed.slice(..),
        scales: scales.slice(..),
        global_scales: global_scales.slice(..),
        experts,
        n,
        k,
    };
    for m in [1, 3, 8, 16] {
        let x_host = conformance::activations(m, k, 70 + m as u64);
        let x = stream.clone_htod(&x_host).expect("x");
        let route = |seed: usize| -> Vec<u32> {
            (0..m * top_k).map(|p| ((p * 5 + seed + p / top_k) % experts) as u32).collect()
        };
        let expected = |ids: &[u32]| {
            let routing = ExpertRouting::new(ids, m, top_k, experts).expect("routing");
            let mut y = vec![0u16; m * top_k * n];
            grouped_contract(&view, &x_host, &routing, &mut y, host_threads()).expect("contract");
            y
        };
        let first = route(1);
        let mut routing = stream.clone_htod(&first).expect("routing");
        let mut y = stream.alloc_zeros::<u16>(m * top_k * n).expect("y");
        let call = GroupedCall::new(m, top_k).with_family(FamilyChoice::Exact);
        kernels
            .grouped(&stream, &weights, &x.slice(..), &routing.slice(..), &mut y.slice_mut(..), &call)
            .expect("launch");
        assert_eq!(stream.clone_dtoh(&y).expect("y back"), expected(&first), "M = {m}: one grouped launch");

        stream.memset_zeros(&mut y).expect("clear y");
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).expect("capture");
        kernels
            .grouped(&stream, &weights, &x.slice(..), &routing.slice(..), &mut y.slice_mut(..), &call)
            .expect("captured");
        let graph = stream.end_capture(CUgraphInstantiate_flags(0)).expect("end capture").expect("a graph");
        let second = route(7);
        stream.memcpy_htod(&second, &mut routing).expect("new routing");
        graph.launch().expect("replay");
        assert_eq!(stream.clone_dtoh(&y).expect("y back"), expected(&second), "M = {m}: replay, new routing");

        // The fast family (sm_80+): each pair's output is the family's M = 1 launch of its pair.
        if kernels.tiers().family(FamilyChoice::Fast).ok() != Some(Family::Fast) {
            continue;
        }
        let fast = call.with_family(FamilyChoice::Fast);
        kernels
            .grouped(&stream, &weights, &x.slice(..), &routing.slice(..), &mut y.slice_mut(..), &fast)
            .expect("fast launch");
        let grouped = stream.clone_dtoh(&y).expect("y back");
        let (packed_len, scales_len) = (n * k / 2, n * k / 16);
        let mut one = stream.alloc_zeros::<u16>(n).expect("one row");
        for (pair, &e) in second.iter().enumerate() {
            let (e, token) = (e as usize, pair / top_k);
            let expert = CudaWeights {
                packed: packed.slice(e * packed_len..(e + 1) * packed_len),
                scales: scales.slice(e * scales_len..(e + 1) * scales_len),
                global_scale: gemv_core::expert_global_scale(view.global_scales(), e),
                n,
                k,
            };
            let single = GemvCall::new(1).with_family(FamilyChoice::Fast);
            kernels
                .gemv(&stream, &expert, &x.slice(token * k..(token + 1) * k), &mut one.slice_mut(..), &single)
                .expect("single fast launch");
            let alone = stream.clone_dtoh(&one).expect("row back");
            assert_eq!(alone[..], grouped[pair * n..(pair + 1) * n], "M = {m}, pair {pair}: fast grouped = single");
        }
    }
}

/// An engine's chain of dependent layers, every launch a programmatic dependent of the one before
/// it (sm_90 and newer): three steps of a square matrix, each Y the next X, on the engine's own
/// stream, every step bit-exact against the host contract run as the same chain; then the chain
/// captured into a graph and replayed, bit-exact again, where the driver records programmatic
/// edges in a capture (where it cannot, the test says so and checks the direct launches only).
#[test]
fn an_engine_chains_programmatic_dependent_launches_and_replays_them_from_a_graph() {
    let Some(backend) = cuda() else { return };
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use gemv_conformance as conformance;
    use gemv_core::{gemv_contract, host_threads};
    use gemv_cuda::{FamilyChoice, GemvCall, LaunchOrder};
    let architecture = gemv_backend::GpuBackend::device_info(backend).architecture;
    let context = gemv_cuda::engine_context(0).expect("context");
    let order = LaunchOrder::ProgrammaticDependent;
    let kernels = match gemv_cuda::CudaKernels::load_ordered(&context, gemv_core::KillSwitches::default(), order) {
        Ok(kernels) => kernels,
        Err(error) => {
            skip(Requirement::CudaSm90, &format!("{architecture}: {error}"));
            return;
        }
    };
    assert_eq!(kernels.launch_order(), order);
    // SAFETY: this test uses one stream only (see `engine`).
    unsafe { context.disable_event_tracking() };
    let stream = context.new_stream().expect("stream");
    let (size, m, steps) = (1040, 4, 3);
    let matrices: Vec<_> = (0..steps).map(|s| conformance::matrix(size, size, 40 + s as u64)).collect();
    let device: Vec<_> = matrices
        .iter()
        .map(|w| {
            (
                stream.clone_htod(w.view().packed()).expect("packed"),
                stream.clone_htod(w.view().scales()).expect("scales"),
            )
        })
        .collect();
    let x_host = conformance::activations(m, size, 43);
    let mut expected = vec![x_host.clone()];
    for w in &matrices {
        let mut y = vec![0u16; m * size];
        gemv_contract(&w.view(), expected.last().expect("an input"), m, &mut y, host_threads()).expect("contract");
        expected.push(y);
    }
    let mut buffers: Vec<_> = (0..=steps).map(|_| stream.alloc_zeros::<u16>(m * size).expect("buffer")).collect();
    stream.memcpy_htod(&x_host, &mut buffers[0]).expect("x");
    let call = GemvCall::new(m).with_family(FamilyChoice::Exact);
    let chain = |buffers: &mut Vec<cudarc::driver::CudaSlice<u16>>| -> gemv_backend::Result<()> {
        for (step, (packed, scales)) in device.iter().enumerate() {
            let weights = gemv_cuda::CudaWeights {
                packed: packed.slice(..),
                scales: scales.slice(..),
                global_scale: matrices[step].global_scale(),
                n: size,
                k: size,
            };
            let (input, output) = buffers.split_at_mut(step + 1);
            kernels.gemv(&stream, &weights, &input[step].slice(..), &mut output[0].slice_mut(..), &call)?;
        }
        Ok(())
    };
    chain(&mut buffers).expect("dependent launches");
    for step in 1..=steps {
        assert_eq!(stream.clone_dtoh(&buffers[step]).expect("y back"), expected[step], "step {step}: direct");
    }
    for buffer in &mut buffers[1..] {
        stream.memset_zeros(buffer).expect("clear");
    }
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).expect("capture");
    let captured = chain(&mut buffers);
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    match (captured, graph) {
        (Ok(()), Ok(Some(graph))) => {
            graph.launch().expect("replay");
            for step in 1..=steps {
                assert_eq!(stream.clone_dtoh(&buffers[step]).expect("y back"), expected[step], "step {step}: graph");
            }
        }
        (captured, graph) => eprintln!(
            "{architecture}: this driver does not capture programmatic dependent launches into a graph \
             (launches: {captured:?}; capture: {:?}); the direct launches were checked",
            graph.map(|g| g.is_some())
        ),
    }
}
