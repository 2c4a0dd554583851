//! Every claim of docs/tiers.md about the batch tier table and the selector.

use gemv_core::{BATCH4_TO_8, KERNELS, KillSwitches, TIERS, batch4_to_8, kernel_spec, select_tier};
use rstest::rstest;

const ALL: [bool; 5] = [true; 5];

fn width(index: Option<usize>) -> Option<usize> {
    index.map(|i| batch4_to_8()[i].width)
}

#[test]
fn family_is_4_to_8_narrowest_first() {
    let widths: Vec<usize> = batch4_to_8().iter().map(|t| t.width).collect();
    assert_eq!(widths, [4, 5, 6, 7, 8]);
    assert!(
        TIERS[BATCH4_TO_8].iter().all(|t| t.width <= 8),
        "wide tiers must stay out of the batch tiers of widths 4 to 8"
    );
}

#[rstest]
#[case::one(1, Some(4))]
#[case::four(4, Some(4))]
#[case::five(5, Some(5))]
#[case::six(6, Some(6))]
#[case::seven(7, Some(7))]
#[case::eight(8, Some(8))]
fn narrowest_that_covers(#[case] m: usize, #[case] expected: Option<usize>) {
    assert_eq!(width(select_tier(m, &ALL, true)), expected);
}

#[rstest]
#[case::zero(0)]
#[case::nine(9)]
#[case::sixteen(16)]
#[case::huge(usize::MAX)]
fn none_for_zero_and_beyond_eight(#[case] m: usize) {
    assert_eq!(select_tier(m, &ALL, true), None);
    assert_eq!(select_tier(m, &ALL, false), None);
}

#[rstest]
#[case::m1(1, Some(4))]
#[case::m4(4, Some(4))]
#[case::m5(5, Some(8))]
#[case::m6(6, Some(8))]
#[case::m7(7, Some(8))]
#[case::m8(8, Some(8))]
fn kill_switch_hides_5_6_7_but_never_4_or_8(#[case] m: usize, #[case] expected: Option<usize>) {
    assert_eq!(width(select_tier(m, &ALL, false)), expected);
}

#[rstest]
#[case::no_batch5(5, [true, false, true, true, true], true, Some(6))]
#[case::no_batch5_6_7(5, [true, false, false, false, true], true, Some(8))]
#[case::no_batch4(1, [false, true, true, true, true], true, Some(5))]
#[case::no_batch4_killed(1, [false, true, true, true, true], false, Some(8))]
#[case::only_batch8(3, [false, false, false, false, true], true, Some(8))]
#[case::no_batch8(8, [true, true, true, true, false], true, None)]
#[case::only_exact_killed(5, [false, true, true, true, false], false, None)]
#[case::nothing(1, [false; 5], true, None)]
fn a_missing_tier_falls_to_the_next_wider(
    #[case] m: usize,
    #[case] present: [bool; 5],
    #[case] exact_m: bool,
    #[case] expected: Option<usize>,
) {
    let found = width(select_tier(m, &present, exact_m));
    assert_eq!(found, expected, "m = {m}, present = {present:?}, exact_m = {exact_m}");
}

#[test]
fn short_present_slices_count_as_absent() {
    assert_eq!(width(select_tier(5, &[true], true)), None);
    assert_eq!(width(select_tier(3, &[true], true)), Some(4));
}

#[rstest]
#[case::default([false, false, false, false], [true, true, true, true])]
#[case::no_exact([true, false, false, false], [false, true, true, true])]
#[case::no_rt([false, true, false, false], [true, false, true, true])]
#[case::exact_only([false, false, true, false], [true, true, false, true])]
#[case::no_tuned_table([false, false, false, true], [true, true, true, false])]
#[case::all([true, true, true, true], [false, false, false, false])]
fn kill_switches_are_presence_checked(#[case] set: [bool; 4], #[case] on: [bool; 4]) {
    // "Set to 0" still counts as set: presence is all that matters.
    let [no_exact, no_rt, exact_only, no_tuned] = set;
    let switches = KillSwitches::from_presence(|name| match name {
        gemv_core::NO_EXACT_M_TIERS => no_exact,
        gemv_core::NO_BATCH8_RT => no_rt,
        gemv_core::EXACT_ONLY => exact_only,
        gemv_core::NO_TUNED_TABLE => no_tuned,
        other => panic!("unexpected switch {other}"),
    });
    let found = [switches.exact_m_tiers, switches.batch8_register_tiled, switches.fast_family, switches.tuned_table];
    assert_eq!(found, on);
}

#[rstest]
#[case::rt2_preferred(true, "w4a16_gemv_batch8_rt2")]
#[case::classic_when_switched_off(false, "w4a16_gemv_batch8")]
fn width_8_prefers_rt2_unless_switched(#[case] rt: bool, #[case] expected: &str) {
    let switches = KillSwitches { batch8_register_tiled: rt, ..KillSwitches::default() };
    let eight = TIERS.iter().find(|t| t.width == 8).expect("width 8");
    assert_eq!(eight.kernel_name(switches), expected);
    // No other width has a variant: the switch changes nothing else.
    for tier in TIERS.iter().filter(|t| t.width != 8) {
        assert_eq!(tier.kernel_name(switches), tier.kernel);
    }
}

#[test]
fn registry_names_are_unique_and_every_tier_kernel_is_registered() {
    for (i, a) in KERNELS.iter().enumerate() {
        assert!(KERNELS[i + 1..].iter().all(|b| b.name != a.name), "duplicate {}", a.name);
    }
    for tier in TIERS {
        for name in [Some(tier.kernel), tier.register_tiled].into_iter().flatten() {
            let spec = kernel_spec(name).unwrap_or_else(|| panic!("{name} not registered"));
            assert_eq!(spec.max_m, tier.width, "{name}");
        }
    }
}

#[test]
fn widest_tier_is_the_widest_width() {
    assert_eq!(gemv_core::WIDEST_TIER, TIERS.iter().map(|t| t.width).max().unwrap_or(0));
    assert_eq!(gemv_core::WIDEST_TIER, 32);
}
