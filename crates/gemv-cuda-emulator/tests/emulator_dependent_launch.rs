//! Programmatic dependent launch (sm_90 and newer): launched as a dependent of the previous
//! kernel, a kernel may start while that kernel still writes X (and a grouped launch's routing)
//! and reads Y, so it may read weights at once but X and the routing, and write Y, only after
//! `griddepcontrol.wait`. Each module has a build for such launches
//! (`gemv_core::dependent_module_build`), which an emulator made `with_dependent_launch` runs; its
//! memory checker faults any read of X or the routing and any write of Y that a thread makes
//! before its wait. Here every registry kernel and every grouped kernel of both families runs
//! that way, under seeded thread orders, and gives the bits of its ordinary build.
//!
//! Planted, each caught here ("read of 'x' before griddepcontrol.wait", or of 'routing'): the
//! wait removed from the exact family's classic pipeline (every classic kernel), from its ring
//! pipeline (every ring kernel), from the fast family's tile (both fast kernels) and from the
//! exact family's grouped entry (every exact grouped kernel). The control below runs an
//! ordinary build, which never waits, as a dependent and expects that fault.

use gemv_backend::{DeviceExperts, GemvArgs, GpuBackend};
use gemv_conformance as conformance;
use gemv_core::{Family, GROUPED_KERNELS, GroupedCall, KERNELS, Nvfp4Experts, gemv_contract};
use gemv_cuda_emulator::{CudaEmulator, HostLaunch, ThreadOrder};

/// Rows: no family's whole block, so a partial block runs; on one SM a persistent kernel's warps
/// walk more than one round.
const N: usize = 20;
/// Two whole passes of the exact family and a 16-k tail; the fast family's warps get unequal
/// chunk counts.
const K: usize = 2064;

fn dependent_emulator(seed: u64) -> CudaEmulator {
    CudaEmulator::new()
        .with_capability((9, 0))
        .with_multiprocessors(1)
        .with_thread_order(ThreadOrder::Seeded(seed))
        .with_dependent_launch(true)
}

/// One launch of registry kernel `spec` at M = `m`.
fn launch(emulator: &CudaEmulator, spec: &gemv_core::KernelSpec, m: usize) -> gemv_backend::Result<Vec<u16>> {
    let weights = conformance::matrix(N, K, 31);
    let view = weights.view();
    let x = conformance::activations(m, K, 32);
    let kernel = emulator.lookup_kernel(spec.module, spec.name);
    let x_buffer = emulator.alloc(2 * x.len())?;
    emulator.upload(x_buffer.whole(), bytemuck::cast_slice(&x))?;
    let packed = emulator.alloc(view.packed().len())?;
    emulator.upload(packed.whole(), view.packed())?;
    let scales = emulator.alloc(view.scales().len())?;
    emulator.upload(scales.whole(), view.scales())?;
    let y = emulator.alloc(2 * m * N)?;
    let args =
        GemvArgs::contiguous(x_buffer.whole(), packed.whole(), scales.whole(), y.whole(), view.global_scale(), m, N, K);
    emulator.launch_gemv(kernel, &args)?;
    emulator.synchronize()?;
    let mut found = vec![0u16; m * N];
    emulator.download(y.whole(), bytemuck::cast_slice_mut(&mut found))?;
    Ok(found)
}

#[test]
fn every_kernel_launched_as_a_dependent_waits_before_x_and_y_and_gives_its_builds_bits() {
    let weights = conformance::matrix(N, K, 31);
    let mut wrong = Vec::new();
    for (i, spec) in KERNELS.iter().enumerate() {
        let widths: &[usize] = if spec.max_m == 1 { &[1] } else { &[1, spec.max_m] };
        for &m in widths {
            let context = format!("{} at M = {m}", spec.name);
            let expected = match spec.family {
                Family::Exact => {
                    let x = conformance::activations(m, K, 32);
                    let mut expected = vec![0u16; m * N];
                    gemv_contract(&weights.view(), &x, m, &mut expected, 1).expect("host contract");
                    expected
                }
                // The fast family's own bits: the same kernel launched the ordinary way.
                Family::Fast => launch(&CudaEmulator::new().with_capability((9, 0)), spec, m)
                    .unwrap_or_else(|e| panic!("{context}, ordinary launch: {e}")),
            };
            match launch(&dependent_emulator(0xD0_0000 + i as u64), spec, m) {
                Err(error) => wrong.push(format!("{context}: {error}")),
                Ok(found) if found != expected => wrong.push(format!("{context}: the bits differ")),
                Ok(_) => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{} wrong:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn every_grouped_kernel_launched_as_a_dependent_waits_before_the_routing_and_gives_its_builds_bits() {
    let (experts, m, top_k) = (3, 3, 2);
    let matrices: Vec<_> = (0..experts).map(|e| conformance::matrix(N, K, 70 + e as u64)).collect();
    let stack = Nvfp4Experts::stack(&matrices).expect("one shape");
    let view = stack.view();
    let x = conformance::activations(m, K, 33);
    // Expert 1 chosen by every token, expert 2 by one, expert 0 by two.
    let ids = [1u32, 0, 1, 2, 0, 1];
    let expected =
        conformance::GroupedExpected::new(&CudaEmulator::new().with_capability((9, 0)), &view, &x, &ids, m, top_k);
    let mut wrong = Vec::new();
    for (i, spec) in GROUPED_KERNELS.iter().enumerate() {
        let expected = expected.of(spec.family);
        let emulator = dependent_emulator(0xD1_0000 + i as u64);
        let run = || -> gemv_backend::Result<Vec<u16>> {
            DeviceExperts::upload(&emulator, &view)?.call_on(spec, &x, &ids, &GroupedCall::new(m, top_k))
        };
        match run() {
            Err(error) => wrong.push(format!("{}: {error}", spec.name)),
            Ok(found) if found != expected => wrong.push(format!("{}: the bits differ", spec.name)),
            Ok(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{} wrong:\n{}", wrong.len(), wrong.join("\n"));
}

/// The control: an ordinary build, which never waits, launched as a dependent reads X before any
/// wait, and the emulator says so.
#[test]
fn an_ordinary_build_launched_as_a_dependent_is_a_fault() {
    let weights = conformance::matrix(N, K, 31);
    let view = weights.view();
    let x = conformance::activations(1, K, 32);
    let mut y = vec![0u16; N];
    let result = CudaEmulator::new().with_capability((9, 0)).with_dependent_launch(true).launch_on_host(HostLaunch {
        kernel: "w4a16_gemv_sm89",
        grid: 1,
        block: gemv_cuda::launch::THREADS_PER_BLOCK,
        x: &x,
        packed: view.packed(),
        scales: view.scales(),
        y: &mut y,
        global_scale: view.global_scale(),
        m: 1,
        n: N,
        k: K,
    });
    let message = result.expect_err("the sm_89 build never waits").to_string();
    assert!(message.contains("read of 'x' before griddepcontrol.wait"), "{message}");
}

/// Below sm_90 there are no dependent launches: no kernel resolves for them.
#[test]
fn no_kernel_resolves_for_a_dependent_launch_below_sm_90() {
    for (capability, resolves) in [((8, 9), false), ((9, 0), true)] {
        let emulator = CudaEmulator::new().with_capability(capability).with_dependent_launch(true);
        for spec in KERNELS {
            assert_eq!(emulator.lookup_kernel(spec.module, spec.name).is_resolved(), resolves, "{}", spec.name);
        }
    }
}
