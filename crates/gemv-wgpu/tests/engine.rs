//! The engine-style path on lavapipe (or any adapter): the engine's own device, its buffers at
//! odd offsets (a row range of a bigger weight buffer, activations inside a bigger arena),
//! launches recorded into its own encoder and submitted by the engine; bit-exact against the
//! host contract for every M through the dispatch plan, with no buffer created per launch.
//! Skips without an adapter unless GEMV_REQUIRE_WGPU=1.

use gemv_conformance as conformance;
use gemv_conformance::skip::{Requirement, skip};
use gemv_core::{CoreError, gemv_contract, host_threads, kernel_spec};
// The engine's names, as an engine imports them: from the backend crate alone.
use gemv_wgpu::{
    Error, FamilyChoice, GemvCall, GroupedCall, Nvfp4Experts, WgpuBackend, WgpuExperts, WgpuRange, WgpuWeights,
};
use wgpu::util::DeviceExt;

/// What an engine would do: its own instance, adapter, device and queue.
fn engine_device() -> Option<(wgpu::Device, wgpu::Queue, wgpu::AdapterInfo)> {
    engine_device_with(wgpu::Features::IMMEDIATES)
}

/// The engine's device with `wanted` features where the adapter has them.
fn engine_device_with(wanted: wgpu::Features) -> Option<(wgpu::Device, wgpu::Queue, wgpu::AdapterInfo)> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::PRIMARY,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY));
    let Some(adapter) = adapters.into_iter().next() else {
        skip(Requirement::WgpuAdapter, "no wgpu adapter");
        return None;
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("engine"),
        required_features: adapter.features() & wanted,
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .expect("the engine's device");
    Some((device, queue, adapter.get_info()))
}

fn read_back(device: &wgpu::Device, queue: &wgpu::Queue, buffer: &wgpu::Buffer) -> Vec<u8> {
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("engine readback"),
        size: buffer.size(),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, buffer.size());
    queue.submit([encoder.finish()]);
    staging.map_async(wgpu::MapMode::Read, .., |result| result.expect("mapped"));
    device.poll(wgpu::PollType::wait_indefinitely()).expect("device idle");
    let bytes = staging.get_mapped_range(..).expect("mapped range").to_vec();
    staging.unmap();
    bytes
}

#[test]
fn an_engine_records_launches_on_its_own_device_and_buffers_bit_exact() {
    engine_launches(wgpu::Features::IMMEDIATES);
}

/// A device without immediate data: parameters go through a uniform buffer per launch, same bits.
#[test]
fn without_immediate_data_the_parameters_take_a_buffer_and_the_bits_are_the_same() {
    engine_launches(wgpu::Features::empty());
}

fn engine_launches(features: wgpu::Features) {
    let Some((device, queue, info)) = engine_device_with(features) else { return };
    let backend = WgpuBackend::from_device(device.clone(), queue.clone(), info);
    assert!(!backend.uses_immediates() || features.contains(wgpu::Features::IMMEDIATES));
    // A tensor-parallel shard: rows 16..16+N of a 3N-row matrix, used in place.
    let (n, k, m) = (67, 80, 37);
    let full = conformance::matrix(3 * n, k, 7);
    let view = full.view();
    let (row0, packed_row, scale_row) = (16, k / 2, k / 16);
    let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let make = |label, contents: &[u8]| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents, usage: storage })
    };
    // Weights: packed and scales in one engine buffer, at offsets no gemv code chose.
    let mut weights = view.packed().to_vec();
    let scales_at = weights.len() + 24;
    weights.resize(scales_at, 0xAA);
    weights.extend_from_slice(view.scales());
    weights.resize(weights.len() + 4, 0xAA);
    let weights = make("engine weights", &weights);
    // Activations inside a bigger arena, at an offset that is not a multiple of 4.
    let x_host = conformance::activations(m, k, 8);
    let x_at = 258;
    let mut arena = vec![0u8; x_at];
    arena.extend_from_slice(bytemuck::cast_slice(&x_host));
    arena.resize(arena.len() + 6, 0);
    let arena = make("engine activations", &arena);
    let y_at = 6;
    let y_buffer = make("engine outputs", &vec![0u8; y_at + 2 * m * n + 2]);

    let shard = WgpuWeights {
        packed: WgpuRange { buffer: &weights, offset: (row0 * packed_row) as u64, len: (n * packed_row) as u64 },
        scales: WgpuRange {
            buffer: &weights,
            offset: (scales_at + row0 * scale_row) as u64,
            len: (n * scale_row) as u64,
        },
        global_scale: view.global_scale(),
        n,
        k,
    };
    let x = WgpuRange { buffer: &arena, offset: x_at as u64, len: (2 * m * k) as u64 };
    let y = WgpuRange { buffer: &y_buffer, offset: y_at as u64, len: (2 * m * n) as u64 };
    let call = GemvCall::new(m);
    let launches = backend.tiers().plan_call(&call).expect("plan").len();
    assert!(launches > 1, "M = {m} takes several launches");
    let record_all =
        |encoder: &mut wgpu::CommandEncoder| backend.record_gemv(encoder, &shard, x, y, &call).expect("recorded");
    // Warm up (pipelines compile once), then count: recording creates no buffer.
    let mut encoder = device.create_command_encoder(&Default::default());
    record_all(&mut encoder);
    queue.submit([encoder.finish()]);
    let before = backend.buffers_created();
    let mut encoder = device.create_command_encoder(&Default::default());
    for _ in 0..3 {
        record_all(&mut encoder);
    }
    if backend.uses_immediates() {
        assert_eq!(backend.buffers_created(), before, "no buffer per launch with immediate data");
    } else {
        assert_eq!(backend.buffers_created(), before + 3 * launches, "one parameter buffer per launch");
    }
    queue.submit([encoder.finish()]);

    let bytes = read_back(&device, &queue, &y_buffer);
    let found: Vec<u16> =
        bytes[y_at..y_at + 2 * m * n].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    let shard_view = gemv_core::Nvfp4View::new(
        &view.packed()[row0 * packed_row..(row0 + n) * packed_row],
        &view.scales()[row0 * scale_row..(row0 + n) * scale_row],
        view.global_scale(),
        n,
        k,
    )
    .expect("shard view");
    let mut expected = vec![0u16; m * n];
    gemv_contract(&shard_view, &x_host, m, &mut expected, host_threads()).expect("contract");
    let wrong = expected.iter().zip(&found).filter(|(a, b)| a != b).count();
    assert_eq!(wrong, 0, "{wrong} of {} outputs differ from the host contract", expected.len());
    // The bytes around Y are untouched.
    assert!(bytes[..y_at].iter().chain(&bytes[y_at + 2 * m * n..]).all(|&b| b == 0), "wrote outside Y");
}

/// One call records the whole plan for any M, X's and Y's rows at strides inside bigger
/// buffers: bit-exact, the gaps between rows untouched; the fast family, which wgpu lacks, is
/// refused before anything is recorded.
#[test]
fn a_plan_for_any_m_is_recorded_in_one_call_with_row_strides() {
    let Some((device, queue, info)) = engine_device() else { return };
    let backend = WgpuBackend::from_device(device.clone(), queue.clone(), info);
    let (n, k, m, x_stride, y_stride) = (40, 96, 37, 99, 43);
    let matrix = conformance::matrix(n, k, 11);
    let view = matrix.view();
    let x_host = conformance::activations(m, k, 12);
    const GAP: u16 = 0x7E7E;
    let mut x_rows = vec![GAP; (m - 1) * x_stride + k];
    for t in 0..m {
        x_rows[t * x_stride..t * x_stride + k].copy_from_slice(&x_host[t * k..(t + 1) * k]);
    }
    let (x_at, y_at) = (10u64, 2u64);
    let mut arena = vec![0u8; x_at as usize];
    arena.extend_from_slice(bytemuck::cast_slice(&x_rows));
    arena.resize(arena.len() + 2, 0);
    let y_len = 2 * ((m - 1) * y_stride + n);
    let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let make = |contents: &[u8]| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents, usage: storage })
    };
    let (arena, packed, scales) = (make(&arena), make(view.packed()), make(view.scales()));
    let y_gaps: Vec<u16> = vec![GAP; y_len / 2 + 2];
    let y_buffer = make(bytemuck::cast_slice(&y_gaps));
    let whole = |buffer, len: usize| WgpuRange { buffer, offset: 0, len: len as u64 };
    let weights = WgpuWeights {
        packed: whole(&packed, view.packed().len()),
        scales: whole(&scales, view.scales().len()),
        global_scale: view.global_scale(),
        n,
        k,
    };
    let x = WgpuRange { buffer: &arena, offset: x_at, len: 2 * x_rows.len() as u64 };
    let y = WgpuRange { buffer: &y_buffer, offset: y_at, len: y_len as u64 };
    let call = GemvCall::new(m).with_x_row_stride(x_stride).with_y_row_stride(y_stride);
    let mut encoder = device.create_command_encoder(&Default::default());
    let fast = backend.record_gemv(&mut encoder, &weights, x, y, &call.with_family(FamilyChoice::Fast));
    assert!(fast.is_err(), "wgpu has no fast family: {fast:?}");
    let short = WgpuRange { len: y_len as u64 - 2, ..y };
    let refused = backend.record_gemv(&mut encoder, &weights, x, short, &call);
    assert!(matches!(refused, Err(Error::Core(CoreError::RangeTooSmall { what: "y", .. }))), "{refused:?}");
    backend.record_gemv(&mut encoder, &weights, x, y, &call).expect("recorded");
    queue.submit([encoder.finish()]);

    let bytes = read_back(&device, &queue, &y_buffer);
    let words: Vec<u16> = bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    let mut expected = vec![0u16; m * n];
    gemv_contract(&view, &x_host, m, &mut expected, host_threads()).expect("contract");
    let first = y_at as usize / 2;
    for (i, &word) in words.iter().enumerate() {
        let row_col = i.checked_sub(first).map(|e| (e / y_stride, e % y_stride));
        match row_col {
            Some((t, c)) if t < m && c < n => assert_eq!(word, expected[t * n + c], "Y[{t}][{c}]"),
            _ => assert_eq!(word, GAP, "word {i} outside Y's rows was written"),
        }
    }
}

#[test]
fn engine_launches_are_validated_before_anything_is_recorded() {
    let Some((device, queue, info)) = engine_device() else { return };
    let backend = WgpuBackend::from_device(device.clone(), queue, info);
    let kernel = kernel_spec("w4a16_gemv").expect("in the registry");
    let storage = wgpu::BufferUsages::STORAGE;
    let buffer = |size| {
        device.create_buffer(&wgpu::BufferDescriptor { label: None, size, usage: storage, mapped_at_creation: false })
    };
    let (x, w, y) = (buffer(64), buffer(64), buffer(64));
    let range = |buffer, offset, len| WgpuRange { buffer, offset, len };
    let weights = WgpuWeights { packed: range(&w, 0, 8), scales: range(&w, 8, 1), global_scale: 1.0, n: 1, k: 16 };
    let (good_x, good_y, one) = (range(&x, 0, 32), range(&y, 0, 2), GemvCall::new(1));
    let mut encoder = device.create_command_encoder(&Default::default());
    backend.record_kernel(&mut encoder, kernel, &weights, good_x, good_y, &one).expect("a good launch records");
    backend.record_gemv(&mut encoder, &weights, good_x, good_y, &one).expect("a good call records");
    type Expect = fn(&Error) -> bool;
    let cases: [(WgpuRange<'_>, WgpuRange<'_>, GemvCall, Expect); 7] = [
        (range(&x, 0, 64), range(&y, 0, 4), GemvCall::new(2), |e| {
            matches!(e, Error::Core(CoreError::MExceedsWidth { .. }))
        }),
        (range(&x, 40, 32), good_y, one, |e| matches!(e, Error::RangeOutOfBounds { what: "x", .. })),
        (range(&x, 0, 30), good_y, one, |e| matches!(e, Error::Core(CoreError::RangeTooSmall { what: "x", .. }))),
        (good_x, range(&y, 1, 2), one, |e| matches!(e, Error::Core(CoreError::Misaligned { what: "y", .. }))),
        (good_x, range(&x, 34, 2), one, |e| matches!(e, Error::OutputOverlaps { what: "x", .. })),
        (good_x, good_y, one.with_x_row_stride(15), |e| {
            matches!(e, Error::Core(CoreError::RowStrideTooSmall { what: "x", .. }))
        }),
        (good_x, good_y, one.with_y_row_stride(0), |e| {
            matches!(e, Error::Core(CoreError::RowStrideTooSmall { what: "y", .. }))
        }),
    ];
    for (index, (x, y, call, expected)) in cases.iter().enumerate() {
        match backend.record_kernel(&mut encoder, kernel, &weights, *x, *y, call) {
            Err(error) => assert!(expected(&error), "case {index}: unexpected {error}"),
            Ok(()) => panic!("case {index}: accepted"),
        }
    }
    let fast = kernel_spec("w4a16_fast_m8").expect("in the registry");
    assert!(matches!(
        backend.record_kernel(&mut encoder, fast, &weights, good_x, good_y, &one),
        Err(Error::UnresolvedKernel { .. })
    ));
}

/// A routed layer recorded in one call on the engine's buffers: the experts, their global scales
/// and the routing inside buffers of the engine's own layout at offsets no gemv code chose;
/// bit-exact with every pair's expert contract, an id past E giving its pair a NaN row, bytes
/// around Y untouched; bad calls refused before anything is recorded.
#[test]
fn an_engine_records_a_routed_layer_in_one_call_bit_exact() {
    let Some((device, queue, info)) = engine_device() else { return };
    let backend = WgpuBackend::from_device(device.clone(), queue.clone(), info);
    let (experts, n, k, m, top_k) = (5, 21, 800, 6, 3);
    // A global scale of each expert's own.
    let matrices: Vec<_> = (0..experts)
        .map(|e| {
            let view = conformance::matrix(n, k, 40 + e as u64);
            let view = view.view();
            let global = view.global_scale() * (1.0 + e as f32 / 8.0);
            gemv_core::Nvfp4Matrix::from_parts(view.packed().to_vec(), view.scales().to_vec(), global, n, k)
                .expect("a valid shape")
        })
        .collect();
    let stack = Nvfp4Experts::stack(&matrices).expect("one shape");
    let view = stack.view();
    let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let make = |contents: &[u8]| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents, usage: storage })
    };
    // Codes, scales and global scales in one engine buffer.
    let (packed_at, mut layer) = (8, vec![0x5Au8; 8]);
    layer.extend_from_slice(view.packed());
    let scales_at = layer.len() + 12;
    layer.resize(scales_at, 0x5A);
    layer.extend_from_slice(view.scales());
    let globals_at = layer.len().next_multiple_of(4) + 4;
    layer.resize(globals_at, 0x5A);
    layer.extend(view.global_scales().iter().flat_map(|g| g.to_le_bytes()));
    let layer = make(&layer);
    let x_host = conformance::activations(m, k, 41);
    let x_at = 34;
    let mut arena = vec![0u8; x_at];
    arena.extend_from_slice(bytemuck::cast_slice(&x_host));
    let arena = make(&arena);
    // Every token on expert 2 among others, an expert twice in one token's list.
    let ids: Vec<u32> = vec![2, 0, 4, 2, 1, 1, 2, 3, 0, 4, 2, 3, 2, 2, 0, 1, 4, 2];
    let ids_at = 12;
    let mut routing = vec![0u8; ids_at];
    routing.extend(ids.iter().flat_map(|id| id.to_le_bytes()));
    let routing = make(&routing);
    let (y_at, y_len) = (6, 2 * m * top_k * n);
    let y_buffer = make(&vec![0u8; y_at + y_len + 2]);
    let range = |buffer, offset: usize, len: usize| WgpuRange { buffer, offset: offset as u64, len: len as u64 };
    let stacked = WgpuExperts {
        packed: range(&layer, packed_at, view.packed().len()),
        scales: range(&layer, scales_at, view.scales().len()),
        global_scales: range(&layer, globals_at, 4 * experts),
        experts,
        n,
        k,
    };
    let (x, y) = (range(&arena, x_at, 2 * m * k), range(&y_buffer, y_at, y_len));
    let ids_range = range(&routing, ids_at, 4 * ids.len());
    let call = GroupedCall::new(m, top_k);

    let mut encoder = device.create_command_encoder(&Default::default());
    let refusals = [
        backend.record_grouped(&mut encoder, &stacked, x, ids_range, y, &call.with_family(FamilyChoice::Fast)),
        backend.record_grouped(&mut encoder, &stacked, x, ids_range, range(&y_buffer, y_at, y_len - 2), &call),
        backend.record_grouped(&mut encoder, &stacked, x, range(&routing, ids_at - 2, 4 * ids.len()), y, &call),
        backend.record_grouped(&mut encoder, &stacked, x, ids_range, range(&arena, 0, y_len), &call),
        backend.record_grouped(&mut encoder, &stacked, range(&arena, x_at + 4, 2 * m * k), ids_range, y, &call),
    ];
    assert!(refusals[0].is_err(), "wgpu has no fast family");
    assert!(matches!(refusals[1], Err(Error::Core(CoreError::RangeTooSmall { what: "y", .. }))), "{:?}", refusals[1]);
    assert!(matches!(refusals[2], Err(Error::Core(CoreError::Misaligned { what: "routing", .. }))));
    assert!(matches!(refusals[3], Err(Error::OutputOverlaps { what: "x", .. })), "{:?}", refusals[3]);
    assert!(matches!(refusals[4], Err(Error::RangeOutOfBounds { what: "x", .. })), "{:?}", refusals[4]);
    backend.record_grouped(&mut encoder, &stacked, x, ids_range, y, &call).expect("recorded");
    queue.submit([encoder.finish()]);
    let words = |bytes: &[u8]| -> Vec<u16> {
        bytes[y_at..y_at + y_len].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()
    };
    let bytes = read_back(&device, &queue, &y_buffer);
    let routed = call.routing(&ids, experts).expect("ids below E");
    let mut expected = vec![0u16; m * top_k * n];
    gemv_core::grouped_contract(&view, &x_host, &routed, &mut expected, host_threads()).expect("contract");
    let wrong = expected.iter().zip(words(&bytes)).filter(|(a, b)| **a != *b).count();
    assert_eq!(wrong, 0, "{wrong} of {} outputs differ from the experts' contracts", expected.len());
    assert!(bytes[..y_at].iter().chain(&bytes[y_at + y_len..]).all(|&b| b == 0), "wrote outside Y");

    // The GPU reads the routing: an id past E, written by the engine, gives its pair NaN rows.
    let mut past = ids.clone();
    past[7] = experts as u32;
    queue.write_buffer(&routing, ids_at as u64, bytemuck::cast_slice(&past));
    let mut encoder = device.create_command_encoder(&Default::default());
    backend.record_grouped(&mut encoder, &stacked, x, ids_range, y, &call).expect("recorded");
    queue.submit([encoder.finish()]);
    let found = words(&read_back(&device, &queue, &y_buffer));
    for (pair, row) in found.chunks_exact(n).enumerate() {
        if pair == 7 {
            assert!(row.iter().all(|&v| v == 0x7FC0), "pair 7's id is past E: NaN rows");
        } else {
            assert_eq!(row, &expected[pair * n..(pair + 1) * n], "pair {pair}");
        }
    }
}
