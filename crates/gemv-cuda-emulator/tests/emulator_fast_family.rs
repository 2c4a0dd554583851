//! The fast (tensor-core) family under the emulator, beyond the conformance gates: its planted
//! fault (a wrong mma fragment index) fails gate 10's bound while the real kernel passes it, the
//! family resolves on the emulator (so gates 10 and 11 are never vacuous here), and how far its
//! results are from the exact family's (printed, not asserted: the two contracts differ).

use gemv_backend::GpuBackend;
use gemv_conformance::{activations, fast_bound_failure, matrix};
use gemv_core::{FAST_TIERS, Family, GemvCall, family_kernels, gemv_contract, kernel_spec};
use gemv_cuda::launch::THREADS_PER_BLOCK;
use gemv_cuda_emulator::{CudaEmulator, HostLaunch};

fn launch(kernel: &str, w: &gemv_core::Nvfp4Matrix, x: &[u16], m: usize) -> Vec<u16> {
    let (n, k) = (w.n(), w.k());
    let mut y = vec![0u16; m * n];
    CudaEmulator::new()
        .launch_on_host(HostLaunch {
            kernel,
            grid: n.div_ceil(16) as u32,
            block: THREADS_PER_BLOCK,
            x,
            packed: w.view().packed(),
            scales: w.view().scales(),
            y: &mut y,
            global_scale: w.global_scale(),
            m,
            n,
            k,
        })
        .unwrap_or_else(|error| panic!("{kernel}: {error}"));
    y
}

#[test]
fn a_wrong_fragment_index_fails_the_bound_and_the_real_kernel_passes_it() {
    let (n, k, m) = (48, 2048, 16);
    let w = matrix(n, k, 17);
    let x = activations(m, k, 18);
    let real = launch("w4a16_fast_m16", &w, &x, m);
    assert_eq!(fast_bound_failure(&w, &x, m, &real), None, "the real kernel must pass");
    let faulty = launch("emu_test_fast_wrong_fragment", &w, &x, m);
    let failure = fast_bound_failure(&w, &x, m, &faulty).expect("the planted fault must fail the bound");
    eprintln!("planted wrong fragment: {failure}");
    assert!(failure.contains("outside the bound"), "{failure}");
}

#[test]
fn the_fast_family_resolves_on_the_emulator() {
    let emulator = CudaEmulator::new();
    for spec in family_kernels(Family::Fast) {
        assert!(emulator.lookup_kernel(spec.module, spec.name).is_resolved(), "{} must resolve", spec.name);
        assert!(!emulator.lookup_kernel(gemv_core::MODULE_NAME, spec.name).is_resolved(), "wrong module resolves");
    }
    for tier in FAST_TIERS {
        assert_eq!(kernel_spec(tier.kernel).map(|s| s.family), Some(Family::Fast), "{}", tier.kernel);
    }
}

#[test]
fn distance_from_the_exact_family_is_reported() {
    let (n, k, m) = (64, 4096, 8);
    let w = matrix(n, k, 5);
    let x = activations(m, k, 6);
    let fast = launch("w4a16_fast_m8", &w, &x, m);
    let mut exact = vec![0u16; m * n];
    gemv_contract(&w.view(), &x, m, &mut exact, 1).expect("valid shape");
    let differing = fast.iter().zip(&exact).filter(|(a, b)| a != b).count();
    let widest = fast
        .iter()
        .zip(&exact)
        .map(|(&a, &b)| (i32::from(a as i16) - i32::from(b as i16)).unsigned_abs())
        .max()
        .unwrap_or(0);
    eprintln!(
        "fast vs exact, N={n} K={k} M={m}: {differing} of {} outputs differ, at most {widest} bf16 ulp",
        fast.len()
    );
    assert_eq!(fast_bound_failure(&w, &x, m, &fast), None);
}

#[test]
fn a_summation_order_that_depends_on_m_fails_the_invariance_check() {
    let (w, x) = gemv_conformance::order_sensitive(16);
    let (n, k) = (w.n(), w.k());
    let check = |kernel: &str| {
        gemv_conformance::invariance_failure(
            &x,
            n,
            k,
            16,
            &mut |row| Ok(launch("w4a16_fast_m8", &w, row, 1)),
            &mut |rows, m| Ok(launch(kernel, &w, rows, m)),
        )
        .expect("host launches")
    };
    assert_eq!(check("w4a16_fast_m16"), None, "the real kernel is batch-invariant");
    let failure = check("emu_test_fast_order_depends_on_m").expect("the planted fault must fail");
    eprintln!("planted M-dependent order: {failure}");
    // Token 0's cancellation lands in a finer binade (|sum| < 2^20) and survives the reversal;
    // from token 1 on the reversed order loses the small partials' bits.
    assert!(failure.starts_with("M=9: token 1, row 0: alone 0x4442 (776), here 0x4440 (768)"), "{failure}");
}

#[test]
fn the_fast_plan_gives_every_token_its_bits_alone_at_any_m() {
    use gemv_backend::{DeviceMatrix, ResolvedTiers};
    use gemv_core::{FamilyChoice, KillSwitches};
    let backend = CudaEmulator::new();
    let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
    assert_eq!(tiers.family(FamilyChoice::Fast).ok(), Some(Family::Fast));
    let untuned = ResolvedTiers::resolve(&backend, KillSwitches { tuned_table: false, ..KillSwitches::default() });
    assert_eq!(untuned.family(FamilyChoice::Auto).ok(), Some(Family::Exact), "without the table auto is exact");
    let exact_only = ResolvedTiers::resolve(&backend, KillSwitches { fast_family: false, ..KillSwitches::default() });
    assert_eq!(exact_only.family(FamilyChoice::Fast).ok(), Some(Family::Exact), "GEMV_EXACT_ONLY wins");
    let (n, k, m) = (40, 272, 40);
    let w = matrix(n, k, 41);
    let x = activations(m, k, 42);
    let matrix = DeviceMatrix::upload(&backend, &w.view()).expect("upload");
    let all = matrix.call(&tiers, &x, &GemvCall::new(m).with_family(FamilyChoice::Fast)).expect("m16 + m16 + m8");
    for t in 0..m {
        let alone = matrix
            .call(&tiers, &x[t * k..(t + 1) * k], &GemvCall::new(1).with_family(FamilyChoice::Fast))
            .expect("one token");
        assert_eq!(&all[t * n..(t + 1) * n], &alone[..], "token {t} inside M = {m} vs alone");
    }
    assert_eq!(fast_bound_failure(&w, &x, m, &all), None);
}

#[test]
fn backends_without_the_family_refuse_it_with_a_typed_error() {
    use gemv_backend::ResolvedTiers;
    use gemv_core::{CoreError, FamilyChoice, KillSwitches};
    let tiers = ResolvedTiers::resolve(&gemv_mock::MockBackend::new(), KillSwitches::default());
    assert_eq!(tiers.fast_present(), gemv_core::TierMask::NONE);
    match tiers.family(FamilyChoice::Fast) {
        Err(CoreError::FamilyUnavailable { family: "fast" }) => {}
        other => panic!("expected FamilyUnavailable, got {other:?}"),
    }
    assert_eq!(tiers.family(FamilyChoice::Auto).ok(), Some(Family::Exact));
}

/// A grouped launch in the fast family: refused where the device lacks the family (an emulated
/// sm_75, the host) whether the engine asks through the policy or names the family in raw
/// arguments; served on sm_80.
#[test]
fn grouped_launches_in_the_fast_family_need_the_family() {
    use gemv_backend::{DeviceExperts, Error, GpuBackend, ResolvedTiers};
    use gemv_core::{CoreError, FamilyChoice, GroupedCall, KillSwitches, Nvfp4Experts};
    let stack = Nvfp4Experts::stack(&[matrix(16, 64, 1), matrix(16, 64, 2)]).expect("one shape");
    let call = GroupedCall::new(2, 1).with_family(FamilyChoice::Fast);
    let x = activations(2, 64, 3);
    let sm75 = CudaEmulator::new().with_capability((7, 5));
    let host = gemv_mock::MockBackend::new();
    for backend in [&sm75 as &dyn GpuBackend, &host] {
        let layer = DeviceExperts::upload(backend, &stack.view()).expect("upload");
        let tiers = ResolvedTiers::resolve(backend, KillSwitches::default());
        let refused = layer.call(&tiers, &x, &[0, 1], &call);
        assert!(matches!(refused, Err(Error::Core(CoreError::FamilyUnavailable { .. }))), "{refused:?}");
        // X [1][64], the routing [1][1], Y [1][1][16]: valid in every way but the family.
        let buffers = [128, 4, 32].map(|len| backend.alloc(len).expect("alloc"));
        let args = layer.args(buffers[0].whole(), buffers[1].whole(), buffers[2].whole(), 1, 1, Family::Fast);
        let raw = backend.launch_grouped(&args);
        assert!(matches!(raw, Err(Error::Core(CoreError::FamilyUnavailable { .. }))), "{raw:?}");
        let exact = backend.launch_grouped(&gemv_backend::GroupedArgs { family: Family::Exact, ..args });
        assert!(exact.is_ok(), "{exact:?}");
        for buffer in buffers {
            backend.free(buffer).expect("free");
        }
    }
    let sm80 = CudaEmulator::new().with_capability((8, 0));
    let layer = DeviceExperts::upload(&sm80, &stack.view()).expect("upload");
    let tiers = ResolvedTiers::resolve(&sm80, KillSwitches::default());
    assert_eq!(layer.call(&tiers, &x, &[0, 1], &call).map(|y| y.len()).ok(), Some(2 * 16));
}
