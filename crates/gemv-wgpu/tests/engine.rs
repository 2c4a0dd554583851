//! The engine-style path on lavapipe (or any adapter): the engine's own device, its buffers at
//! odd offsets (a row range of a bigger weight buffer, activations inside a bigger arena),
//! launches recorded into its own encoder and submitted by the engine; bit-exact against the
//! host contract for every M through the dispatch plan, with no buffer created per launch.
//! Skips without an adapter unless GEMV_REQUIRE_WGPU=1.

use gemv_backend::conformance::skip::{Requirement, skip};
use gemv_backend::{Error, GpuBackend, ResolvedTiers, conformance};
use gemv_core::{CoreError, KillSwitches, WIDEST_TIER, gemv_contract, host_threads};
use gemv_wgpu::{WgpuBackend, WgpuGemv, WgpuRange};
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
    let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
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

    let plan = tiers.plan(m, WIDEST_TIER).expect("plan");
    let shard = || -> (WgpuRange<'_>, WgpuRange<'_>) {
        (
            WgpuRange { buffer: &weights, offset: (row0 * packed_row) as u64, len: (n * packed_row) as u64 },
            WgpuRange { buffer: &weights, offset: (scales_at + row0 * scale_row) as u64, len: (n * scale_row) as u64 },
        )
    };
    let record_all = |encoder: &mut wgpu::CommandEncoder| {
        for launch in &plan {
            let (packed, scales) = shard();
            let rows = launch.rows;
            let args = WgpuGemv {
                x: WgpuRange {
                    buffer: &arena,
                    offset: (x_at + 2 * launch.row_offset * k) as u64,
                    len: (2 * rows * k) as u64,
                },
                packed,
                scales,
                y: WgpuRange {
                    buffer: &y_buffer,
                    offset: (y_at + 2 * launch.row_offset * n) as u64,
                    len: (2 * rows * n) as u64,
                },
                global_scale: view.global_scale(),
                m: rows,
                n,
                k,
                x_row_stride: k,
                y_row_stride: n,
            };
            backend.record_gemv(encoder, tiers.handle(launch.tier), &args).expect("recorded");
        }
    };
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
        assert_eq!(backend.buffers_created(), before + 3 * plan.len(), "one parameter buffer per launch");
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
    let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
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
    let launch = WgpuGemv {
        x: WgpuRange { buffer: &arena, offset: x_at, len: 2 * x_rows.len() as u64 },
        packed: whole(&packed, view.packed().len()),
        scales: whole(&scales, view.scales().len()),
        y: WgpuRange { buffer: &y_buffer, offset: y_at, len: y_len as u64 },
        global_scale: view.global_scale(),
        m,
        n,
        k,
        x_row_stride: x_stride,
        y_row_stride: y_stride,
    };
    let mut encoder = device.create_command_encoder(&Default::default());
    let fast = backend.record_plan(&mut encoder, &tiers, gemv_core::FamilyChoice::Fast, &launch);
    assert!(fast.is_err(), "wgpu has no fast family: {fast:?}");
    let short = WgpuGemv { y: WgpuRange { len: y_len as u64 - 2, ..launch.y }, ..launch };
    let refused = backend.record_plan(&mut encoder, &tiers, gemv_core::FamilyChoice::Auto, &short);
    assert!(matches!(refused, Err(Error::Core(CoreError::RangeTooSmall { what: "y", .. }))), "{refused:?}");
    backend.record_plan(&mut encoder, &tiers, gemv_core::FamilyChoice::Auto, &launch).expect("recorded");
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
    let kernel = backend.lookup_kernel(gemv_core::MODULE_NAME, "w4a16_gemv");
    let storage = wgpu::BufferUsages::STORAGE;
    let buffer = |size| {
        device.create_buffer(&wgpu::BufferDescriptor { label: None, size, usage: storage, mapped_at_creation: false })
    };
    let (x, w, y) = (buffer(64), buffer(64), buffer(64));
    let range = |buffer, offset, len| WgpuRange { buffer, offset, len };
    let good = WgpuGemv {
        x: range(&x, 0, 32),
        packed: range(&w, 0, 8),
        scales: range(&w, 8, 1),
        y: range(&y, 0, 2),
        global_scale: 1.0,
        m: 1,
        n: 1,
        k: 16,
        x_row_stride: 16,
        y_row_stride: 1,
    };
    let mut encoder = device.create_command_encoder(&Default::default());
    backend.record_gemv(&mut encoder, kernel, &good).expect("a good launch records");
    type Expect = fn(&Error) -> bool;
    let cases: [(WgpuGemv<'_>, Expect); 7] = [
        (WgpuGemv { m: 2, ..good }, |e| matches!(e, Error::Core(CoreError::MExceedsWidth { .. }))),
        (WgpuGemv { x: range(&x, 40, 32), ..good }, |e| matches!(e, Error::RangeOutOfBounds { what: "x", .. })),
        (WgpuGemv { x: range(&x, 0, 30), ..good }, |e| {
            matches!(e, Error::Core(CoreError::RangeTooSmall { what: "x", .. }))
        }),
        (WgpuGemv { y: range(&y, 1, 2), ..good }, |e| {
            matches!(e, Error::Core(CoreError::Misaligned { what: "y", .. }))
        }),
        (WgpuGemv { y: range(&x, 34, 2), ..good }, |e| matches!(e, Error::OutputOverlaps { what: "x", .. })),
        (WgpuGemv { x_row_stride: 15, ..good }, |e| {
            matches!(e, Error::Core(CoreError::RowStrideTooSmall { what: "x", .. }))
        }),
        (WgpuGemv { y_row_stride: 0, ..good }, |e| {
            matches!(e, Error::Core(CoreError::RowStrideTooSmall { what: "y", .. }))
        }),
    ];
    for (index, (launch, expected)) in cases.iter().enumerate() {
        match backend.record_gemv(&mut encoder, kernel, launch) {
            Err(error) => assert!(expected(&error), "case {index}: unexpected {error}"),
            Ok(()) => panic!("case {index}: accepted"),
        }
    }
    assert!(matches!(
        backend.record_gemv(&mut encoder, gemv_backend::KernelHandle::NONE, &good),
        Err(Error::UnresolvedKernel { .. })
    ));
}
