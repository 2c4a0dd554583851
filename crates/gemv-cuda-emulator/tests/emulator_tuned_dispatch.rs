//! The tuned table on the engine path, under the emulator of an sm_90 device (the table's one
//! measured device): `Auto` takes the table's family, exact widths resolve the table's kernels,
//! and each M runs the table's plan, with the exact contract's bits and the fast family's
//! batch-invariant bits; `GEMV_NO_TUNED_TABLE` and devices the table does not know get the rule.

use gemv_backend::{DeviceMatrix, ResolvedTiers};
use gemv_conformance::{activations, matrix};
use gemv_core::{
    Family, FamilyChoice, GemvCall, KillSwitches, TIERS, TierMask, WIDEST_TIER, device_tuning, dispatch_plan,
    gemv_contract,
};
use gemv_cuda_emulator::CudaEmulator;

const SM90: (i32, i32) = (9, 0);

fn tuned_tiers(backend: &CudaEmulator) -> ResolvedTiers {
    let tiers = ResolvedTiers::resolve(backend, KillSwitches::default());
    assert!(tiers.tuning().is_some(), "the emulator of sm_90 follows sm_90's tuning");
    tiers
}

#[test]
fn auto_takes_the_tables_family_and_exact_widths_its_kernels() {
    let backend = CudaEmulator::new().with_capability(SM90);
    let tuning = device_tuning(Some(SM90), KillSwitches::default()).expect("sm_90 is tuned");
    let tiers = tuned_tiers(&backend);
    assert_eq!(tiers.family(FamilyChoice::Auto).ok(), Some(tuning.auto_family));
    for (index, tier) in TIERS.iter().enumerate() {
        let expected = tuning.kernel_for_width(tier.width).unwrap_or(tier.kernel_name(KillSwitches::default()));
        assert_eq!(tiers.kernel_name(Family::Exact, index), Some(expected), "width {}", tier.width);
    }
    // Every entry is usable on a device with every tier, and is what the tiers plan.
    for entry in tuning.plans {
        let present = if entry.family == Family::Exact { tiers.present() } else { tiers.fast_present() };
        let plan = tuning.plan(entry.family, entry.m, WIDEST_TIER, present, KillSwitches::default());
        let plan = plan.unwrap_or_else(|| panic!("unusable entry {entry:?}"));
        assert_eq!(plan.len(), entry.launches.len(), "{entry:?}");
        let planned =
            if entry.family == Family::Exact { tiers.plan(entry.m, WIDEST_TIER) } else { tiers.fast_plan(entry.m) };
        assert_eq!(planned.ok(), Some(plan), "{entry:?}");
    }
    for m in 1..=WIDEST_TIER {
        let tuned = tuning.plan(Family::Exact, m, WIDEST_TIER, tiers.present(), KillSwitches::default());
        let rule = dispatch_plan(m, WIDEST_TIER, tiers.present(), true).expect("rule");
        assert_eq!(tiers.plan(m, WIDEST_TIER).expect("plan"), tuned.unwrap_or(rule), "m = {m}");
    }

    // Off by its switch: the tiers' own kernels, the rule's plans, the exact family for Auto.
    let off = ResolvedTiers::resolve(&backend, KillSwitches { tuned_table: false, ..KillSwitches::default() });
    assert!(off.tuning().is_none());
    assert_eq!(off.family(FamilyChoice::Auto).ok(), Some(Family::Exact));
    assert_eq!(off.kernel_name(Family::Exact, 0), Some(TIERS[0].kernel));
    assert_eq!(off.plan(9, WIDEST_TIER).ok(), dispatch_plan(9, WIDEST_TIER, off.present(), true).ok());

    // A device the table does not know: the same.
    let sm80 = ResolvedTiers::resolve(&CudaEmulator::new().with_capability((8, 0)), KillSwitches::default());
    assert!(sm80.tuning().is_none());
    assert_eq!(sm80.family(FamilyChoice::Auto).ok(), Some(Family::Exact));
}

#[test]
fn tuned_plans_give_the_contracts_bits_through_the_engine_path() {
    let backend = CudaEmulator::new().with_capability(SM90);
    let tiers = tuned_tiers(&backend);
    let (n, k) = (40, 1040);
    let w = matrix(n, k, 91);
    let uploaded = DeviceMatrix::upload(&backend, &w.view()).expect("upload");
    // M = 3 and 9 run tuned exact plans of two launches, one of them a ring kernel; 17 three.
    for m in [1, 3, 9, 17] {
        let plan = tiers.plan(m, WIDEST_TIER).expect("plan");
        let rule = dispatch_plan(m, WIDEST_TIER, TierMask::ALL, true).expect("rule");
        eprintln!("m = {m}: tuned {plan:?}, rule {rule:?}");
        let x = activations(m, k, 92 + m as u64);
        let mut expected = vec![0u16; m * n];
        gemv_contract(&w.view(), &x, m, &mut expected, 2).expect("contract");
        let exact = uploaded.call(&tiers, &x, &GemvCall::new(m).with_family(FamilyChoice::Exact)).expect("exact");
        assert_eq!(exact, expected, "exact family, m = {m}, plan {plan:?}");
        let auto = uploaded.call(&tiers, &x, &GemvCall::new(m)).expect("auto");
        let fast = uploaded.call(&tiers, &x, &GemvCall::new(m).with_family(FamilyChoice::Fast)).expect("fast");
        let preferred = tiers.family(FamilyChoice::Auto).expect("family");
        assert_eq!(auto, if preferred == Family::Fast { fast.clone() } else { exact }, "auto, m = {m}");
        // Batch invariance through the tuned fast plans: each token as if alone.
        for t in 0..m {
            let alone = uploaded
                .call(&tiers, &x[t * k..(t + 1) * k], &GemvCall::new(1).with_family(FamilyChoice::Fast))
                .expect("one token");
            assert_eq!(&fast[t * n..(t + 1) * n], &alone[..], "token {t} of m = {m}");
        }
    }
}
