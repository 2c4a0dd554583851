//! Every kernel reads its arguments with the widest loads their alignment allows. Decode streams
//! the weights, so their load width is speed; but a kernel whose alignment test wrongly answers
//! "unaligned" falls back to narrower loads and gives the same bits, which no gate that compares
//! outputs can see. The emulator counts each argument's loads by width
//! ([`CudaEmulator::global_accesses`]); for each layout below every load of an argument must have
//! the one width its alignment and K allow.
//!
//! Planted: mutants #1025, #1039 and #1044 of the exact kernel's pass (its 16-byte, 8-byte and
//! scale-pair alignment tests answering "unaligned" always) give the contract's bits, reading
//! aligned weights 8 bytes at a time, 8-byte-aligned weights 1 byte at a time and aligned scale
//! pairs 1 byte at a time; this test rejects each. #1027 (the 16-byte test's mask `15u` to `14u`)
//! calls weights 1 byte off aligned and reads them 16 bytes at a time, a fault on a GPU; only the
//! layout with packed 1 byte off shows it.

use gemv_backend::{GemvArgs, GpuBackend};
use gemv_conformance as conformance;
use gemv_core::{Family, KERNELS, gemv_contract};
use gemv_cuda_emulator::{CudaEmulator, GlobalAccesses, HostLaunch};

/// The emulated devices that run each build of the exact family (sm_80 its sm_75 build, sm_90
/// its sm_89 build); the fast family, one build, runs on sm_90.
const CAPABILITIES: [(i32, i32); 2] = [(8, 0), (9, 0)];

/// Rows: a block's worth of neither family, so a partial block runs too.
const N: usize = 20;

/// Where each argument starts past a 256-byte boundary, and the load widths (bytes) that must
/// then be the only ones.
struct Layout {
    name: &'static str,
    k: usize,
    offsets: [usize; 3],
    x: usize,
    packed: usize,
    scales: usize,
}

/// K = 1024 is whole passes and chunks of both families, with packed rows of 512 bytes (a
/// multiple of 16) and 64 scale codes (even); K = 1040 has rows of 520 bytes and 65 codes, so
/// only 8-byte loads of packed and 1-byte loads of scales stay aligned on every row.
const LAYOUTS: [Layout; 8] = [
    Layout { name: "all aligned", k: 1024, offsets: [0, 0, 0], x: 16, packed: 16, scales: 2 },
    Layout { name: "rows of 520 bytes and 65 codes", k: 1040, offsets: [0, 0, 0], x: 16, packed: 8, scales: 1 },
    Layout { name: "packed 16 bytes off", k: 1024, offsets: [0, 16, 0], x: 16, packed: 16, scales: 2 },
    Layout { name: "packed 8 bytes off", k: 1024, offsets: [0, 8, 0], x: 16, packed: 8, scales: 2 },
    Layout { name: "packed 4 bytes off", k: 1024, offsets: [0, 4, 0], x: 16, packed: 1, scales: 2 },
    Layout { name: "packed 1 byte off", k: 1024, offsets: [0, 1, 0], x: 16, packed: 1, scales: 2 },
    Layout { name: "scales 1 byte off", k: 1024, offsets: [0, 0, 1], x: 16, packed: 16, scales: 1 },
    Layout { name: "x 2 bytes off", k: 1024, offsets: [2, 0, 0], x: 2, packed: 16, scales: 2 },
];

/// X, the packed weights and the scales (in that order), each in a buffer of its own at the
/// layout's offset.
fn upload_at_offsets(
    emulator: &CudaEmulator,
    layout: &Layout,
    inputs: [&[u8]; 3],
) -> gemv_backend::Result<[gemv_backend::BufferRange; 3]> {
    let mut ranges = Vec::with_capacity(3);
    for (bytes, at) in inputs.into_iter().zip(layout.offsets) {
        let range = emulator.alloc(at + bytes.len())?.range(at, bytes.len());
        emulator.upload(range, bytes)?;
        ranges.push(range);
    }
    Ok([ranges[0], ranges[1], ranges[2]])
}

/// One launch of `kernel` at M = `m` with the arguments at the layout's offsets, on a fresh
/// emulator; checks the bits against the host contract and returns the accesses counted.
fn accesses(capability: (i32, i32), spec: &gemv_core::KernelSpec, layout: &Layout) -> GlobalAccesses {
    let (n, k, m) = (N, layout.k, spec.max_m);
    let context = format!("{} on sm_{}{}, {}", spec.name, capability.0, capability.1, layout.name);
    let weights = conformance::matrix(n, k, 21);
    let view = weights.view();
    let x = conformance::activations(m, k, 22);
    let mut expected = vec![0u16; m * n];
    gemv_contract(&view, &x, m, &mut expected, 1).expect("host contract");
    let emulator = CudaEmulator::new().with_capability(capability);
    let kernel = emulator.lookup_kernel(spec.module, spec.name);
    assert!(kernel.is_resolved(), "{context}: the kernel does not resolve");
    let run = || -> gemv_backend::Result<Vec<u16>> {
        let [x, packed, scales] =
            upload_at_offsets(&emulator, layout, [bytemuck::cast_slice(&x), view.packed(), view.scales()])?;
        let y = emulator.alloc(2 * m * n)?;
        let args = GemvArgs::contiguous(x, packed, scales, y.whole(), view.global_scale(), m, n, k);
        emulator.launch_gemv(kernel, &args)?;
        emulator.synchronize()?;
        let mut found = vec![0u16; m * n];
        emulator.download(y.whole(), bytemuck::cast_slice_mut(&mut found))?;
        Ok(found)
    };
    let found = run().unwrap_or_else(|e| panic!("{context}: {e}"));
    if let Some(i) = (0..expected.len()).find(|&i| found[i] != expected[i]) {
        panic!("{context}: output {i}: expected {:#06x}, found {:#06x}", expected[i], found[i]);
    }
    emulator.global_accesses()
}

/// Each argument whose loads (or Y's stores, 2 bytes) are not all of the layout's one width.
fn width_problems(counted: &GlobalAccesses, layout: &Layout) -> Vec<String> {
    [
        ("x loads", counted.x_loads, layout.x),
        ("packed loads", counted.packed_loads, layout.packed),
        ("scales loads", counted.scales_loads, layout.scales),
        ("y stores", counted.y_stores, 2),
    ]
    .into_iter()
    .filter(|(_, widths, expected)| widths.widths() != [*expected])
    .map(|(argument, widths, expected)| format!("{argument}: expected {expected} B only, found {widths}"))
    .collect()
}

#[test]
fn every_kernel_loads_its_arguments_at_the_widest_width_their_alignment_allows() {
    let mut wrong = Vec::new();
    for capability in CAPABILITIES {
        let family = |spec: &&gemv_core::KernelSpec| capability == (9, 0) || spec.family == Family::Exact;
        for spec in KERNELS.iter().filter(family) {
            for layout in &LAYOUTS {
                let counted = accesses(capability, spec, layout);
                for problem in width_problems(&counted, layout) {
                    wrong.push(format!(
                        "{} on sm_{}{}, {}: {problem}",
                        spec.name, capability.0, capability.1, layout.name
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} wrong:\n{}", wrong.len(), wrong.join("\n"));
}

/// The control: a kernel that copies X element by element (the emulator's `emu_test_copy_x`,
/// 32 elements) is counted exactly, and on the aligned layout the check names what it did wrong.
#[test]
fn a_kernel_loading_x_two_bytes_at_a_time_is_counted_and_named() {
    let (m, n, k): (usize, usize, usize) = (1, 64, 32);
    let x: Vec<u16> = (0..(m * k) as u16).collect();
    let (packed, scales, mut y) = (vec![0u8; n * k / 2], vec![0u8; n * k / 16], vec![0u16; m * n]);
    let emulator = CudaEmulator::new();
    emulator
        .launch_on_host(HostLaunch {
            kernel: "emu_test_copy_x",
            grid: 2,
            block: 32,
            x: &x,
            packed: &packed,
            scales: &scales,
            y: &mut y,
            global_scale: 1.0,
            m,
            n,
            k,
        })
        .expect("emu_test_copy_x must pass");
    let counted = emulator.global_accesses();
    eprintln!("emu_test_copy_x: {counted}");
    assert_eq!(counted.to_string(), "x loads: 2 B x 32; packed loads: none; scales loads: none; y stores: 2 B x 32");
    let problems = width_problems(&counted, &LAYOUTS[0]);
    assert_eq!(
        problems,
        [
            "x loads: expected 16 B only, found 2 B x 32",
            "packed loads: expected 16 B only, found none",
            "scales loads: expected 2 B only, found none",
        ]
    );
}

/// The grouped kernels too, on every layout above (X, the packed weights and the scales of the
/// whole stack of experts at the layout's offsets; with K = 1024 an expert is 10,240 bytes of
/// weights, so each one's rows lie as the first's): every grouped kernel of both families, each
/// build of the exact family, loads each argument at the widest width its alignment allows and
/// gives the host contract's bits (the exact family) or its own M = 1 launches' (the fast).
/// Planted: mutants of `w4a16_gemv_grouped.cuh`'s alignment tests that load narrower with the
/// same bits: #42 (the 16-byte test's `&` as `|`, always "unaligned"), which only this test
/// rejects, and #43 (`& 15` as `& 16`: 16 bytes off reads 8 at a time, the "packed 16 bytes
/// off" layout).
#[test]
fn every_grouped_kernel_loads_its_arguments_at_the_widest_width_their_alignment_allows() {
    let mut wrong = Vec::new();
    for layout in &LAYOUTS {
        wrong.extend(grouped_width_problems(layout));
    }
    assert!(wrong.is_empty(), "{} wrong:\n{}", wrong.len(), wrong.join("\n"));
}

/// Every grouped kernel's width problems on one layout, each named.
fn grouped_width_problems(layout: &Layout) -> Vec<String> {
    use gemv_backend::DeviceExperts;
    use gemv_core::{GROUPED_KERNELS, Nvfp4Experts};
    let (experts, k, m, top_k) = (3, layout.k, 2, 2);
    let matrices: Vec<_> = (0..experts).map(|e| conformance::matrix(N, k, 60 + e as u64)).collect();
    let stack = Nvfp4Experts::stack(&matrices).expect("one shape");
    let view = stack.view();
    let x = conformance::activations(m, k, 23);
    let ids = [0u32, 1, 1, 2];
    // The fast family's reference: its own M = 1 launches, on an emulator of their own (sm_90,
    // the one capability below with the fast family).
    let expected =
        conformance::GroupedExpected::new(&CudaEmulator::new().with_capability((9, 0)), &view, &x, &ids, m, top_k);
    let mut wrong = Vec::new();
    for capability in CAPABILITIES {
        for spec in GROUPED_KERNELS.iter().filter(|spec| capability == (9, 0) || spec.family == Family::Exact) {
            let context = format!("{} on sm_{}{}, {}", spec.name, capability.0, capability.1, layout.name);
            let expected = expected.of(spec.family);
            let emulator = CudaEmulator::new().with_capability(capability);
            let run = || -> gemv_backend::Result<Vec<u16>> {
                let layer = DeviceExperts::upload(&emulator, &view)?;
                let [x, packed, scales] =
                    upload_at_offsets(&emulator, layout, [bytemuck::cast_slice(&x), view.packed(), view.scales()])?;
                let ids_bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
                let routing = emulator.alloc(ids_bytes.len())?;
                emulator.upload(routing.whole(), &ids_bytes)?;
                let y = emulator.alloc(2 * expected.len())?;
                let mut args = layer.args(x, routing.whole(), y.whole(), m, top_k, spec.family).with_kernel(spec);
                (args.packed, args.scales) = (packed, scales);
                emulator.launch_grouped(&args)?;
                emulator.synchronize()?;
                let mut found = vec![0u16; expected.len()];
                emulator.download(y.whole(), bytemuck::cast_slice_mut(&mut found))?;
                Ok(found)
            };
            match run() {
                Err(error) => wrong.push(format!("{context}: {error}")),
                Ok(found) if found != expected => wrong.push(format!("{context}: the grouped launch's bits differ")),
                Ok(_) => {
                    let counted = emulator.global_accesses();
                    wrong.extend(width_problems(&counted, layout).into_iter().map(|p| format!("{context}: {p}")));
                }
            }
        }
    }
    wrong
}
