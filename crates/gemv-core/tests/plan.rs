//! The dispatch plan covers every row exactly once, within the cap, from present allowed tiers.

use gemv_core::{CoreError, TIERS, TierMask, dispatch_plan};
use rstest::rstest;

fn check_plan(m: usize, cap: usize, mask: TierMask, exact_m: bool) {
    let Ok(plan) = dispatch_plan(m, cap, mask, exact_m) else {
        // Refusal is right only when no present, allowed tier fits under the cap.
        let any = (0..TIERS.len()).any(|i| mask.contains(i) && TIERS[i].width <= cap && TIERS[i].allowed(exact_m));
        assert!(!any, "m = {m} cap = {cap} mask = {:#b} exact = {exact_m}: refused although a tier fits", mask.bits());
        return;
    };
    let mut covered = vec![0u32; m];
    for launch in &plan {
        let tier = TIERS[launch.tier];
        assert!(mask.contains(launch.tier), "absent tier {} used", tier.width);
        assert!(tier.width <= cap, "tier {} over cap {cap}", tier.width);
        assert!(tier.allowed(exact_m), "tier {} used with exact_m = {exact_m}", tier.width);
        assert!(launch.rows >= 1 && launch.rows <= tier.width, "{launch:?}");
        for count in &mut covered[launch.row_offset..launch.row_offset + launch.rows] {
            *count += 1;
        }
    }
    assert!(covered.iter().all(|&c| c == 1), "m = {m} mask = {:#b}: coverage {covered:?}", mask.bits());
}

#[test]
fn covers_every_row_once_for_every_mask_and_m() {
    for bits in 0u16..1 << TIERS.len() {
        let mask = TierMask::from_bits(bits);
        for m in 1..=100 {
            for cap in [8, 32] {
                for exact_m in [true, false] {
                    check_plan(m, cap, mask, exact_m);
                }
            }
        }
    }
}

#[rstest]
#[case::m1(1, 32, &[(1, 1)])]
#[case::m5(5, 32, &[(5, 5)])]
#[case::m9_cap8(9, 8, &[(8, 8), (1, 1)])]
#[case::m9_cap32(9, 32, &[(16, 9)])]
#[case::m33(33, 32, &[(32, 32), (1, 1)])]
#[case::m40(40, 32, &[(32, 32), (8, 8)])]
fn plan_shapes_with_all_tiers(#[case] m: usize, #[case] cap: usize, #[case] expected: &[(usize, usize)]) {
    let plan = dispatch_plan(m, cap, TierMask::ALL, true).expect("plan");
    let found: Vec<(usize, usize)> = plan.iter().map(|l| (TIERS[l.tier].width, l.rows)).collect();
    assert_eq!(found, expected);
}

#[test]
fn exact_m_off_uses_8_for_5() {
    let plan = dispatch_plan(5, 8, TierMask::ALL, false).expect("plan");
    assert_eq!(plan.len(), 1);
    assert_eq!(TIERS[plan[0].tier].width, 8);
}

#[test]
fn refusals_are_typed() {
    assert!(matches!(dispatch_plan(3, 0, TierMask::ALL, true), Err(CoreError::InvalidWidthCap { cap: 0 })));
    let err = dispatch_plan(3, 8, TierMask::NONE, true).expect_err("nothing present");
    assert!(matches!(err, CoreError::NoTierAvailable { m: 3, cap: 8, .. }), "{err}");
    // Only batch16 present, cap 8: nothing fits.
    let only16 = TierMask::NONE.with(8);
    assert!(dispatch_plan(3, 8, only16, true).is_err());
    assert!(dispatch_plan(3, 32, only16, true).is_ok());
    // The error lists the widths that were present.
    match (dispatch_plan(3, 8, TierMask::NONE, true), dispatch_plan(3, 8, only16.with(9), true)) {
        (Err(CoreError::NoTierAvailable { present: none, .. }), Err(CoreError::NoTierAvailable { present, .. })) => {
            assert_eq!((none.as_str(), present.as_str()), ("none", "16,32"));
        }
        other => panic!("expected two NoTierAvailable, got {other:?}"),
    }
}

#[test]
fn tier_masks_hold_exactly_the_tiers_set() {
    let mask = TierMask::NONE.with(2).with(8);
    assert_eq!(mask.bits(), (1 << 2) | (1 << 8));
    assert_eq!(TierMask::from_bits(mask.bits()), mask);
    // Setting a tier twice keeps it set.
    assert!(mask.with(2).contains(2) && mask.with(8).with(8).contains(8));
    let present: Vec<usize> = (0..TIERS.len()).filter(|&i| mask.contains(i)).collect();
    assert_eq!(present, [2, 8]);
    assert!(!mask.contains(TIERS.len()) && !TierMask::ALL.contains(TIERS.len()));
    assert_eq!(TierMask::ALL.bits().count_ones() as usize, TIERS.len());
}

#[test]
fn the_fast_plan_covers_every_row_once_from_present_fast_tiers() {
    use gemv_core::{FAST_TIERS, fast_dispatch_plan};
    for bits in 0u16..1 << FAST_TIERS.len() {
        let mask = TierMask::from_bits(bits);
        for m in 1..=100 {
            let Ok(plan) = fast_dispatch_plan(m, mask) else {
                assert_eq!(bits, 0, "m = {m} mask = {bits:#b}: refused although a fast tier is present");
                continue;
            };
            let mut covered = vec![0u32; m];
            for launch in &plan {
                let tier = FAST_TIERS[launch.tier];
                assert!(mask.contains(launch.tier), "absent fast tier {} used", tier.width);
                assert!(launch.rows >= 1 && launch.rows <= tier.width, "{launch:?}");
                for count in &mut covered[launch.row_offset..launch.row_offset + launch.rows] {
                    *count += 1;
                }
            }
            assert!(covered.iter().all(|&c| c == 1), "m = {m} mask = {bits:#b}: coverage {covered:?}");
        }
    }
    // Both present: M = 40 is m16 + m16 + m8 (8 rows); M = 5 one m8 launch.
    let widths = |m| {
        fast_dispatch_plan(m, TierMask::from_bits(0b11))
            .map(|plan| plan.iter().map(|l| (FAST_TIERS[l.tier].width, l.rows)).collect::<Vec<_>>())
    };
    assert_eq!(widths(40).ok(), Some(vec![(16, 16), (16, 16), (8, 8)]));
    assert_eq!(widths(5).ok(), Some(vec![(8, 5)]));
    assert_eq!(widths(9).ok(), Some(vec![(16, 9)]));
}
