//! `cargo xtask tune [--check]`: the tuned table the dispatch reads
//! (`crates/gemv-core/src/tuned_table.rs`) and its evidence (docs/tuning.md), generated from the
//! committed measured run the time model is fitted to and, for kernels no run has measured, the
//! model's predictions (`cargo xtask model`); `--check` fails when either file is stale.
//!
//! Three decisions per device, each from the launch times of [`TuningInputs`] (a launch's time is
//! its kernel's at its rows on a shape; a plan's cost its launches' times summed over the shapes
//! the family is measured on):
//! - per exact-family width, the kernel that serves it: a ring variant (same bits) replaces the
//!   tier's kernel where it is faster in total, by [`MODELLED_MARGIN`] when only the model says so;
//! - per family and M in 1..=[`MAX_M`], the cheapest plan over the family's widths (dynamic
//!   programming over launches of costed (width, rows)); it replaces the rule's plan where that is
//!   not costed or is slower by [`PLAN_MARGIN`];
//! - `Auto`'s family, one for every M: the one whose plans cost less over M in [`FAMILY_MS`] on
//!   the shapes both families are measured on, decided by measured times alone where they cover
//!   every such M, by the model's otherwise.

mod render;

use crate::model::TuningInputs;
use gemv_core::{Family, KillSwitches, TierMask, WIDEST_TIER, dispatch_plan, family_tiers, fast_dispatch_plan};

const TABLE: &str = "crates/gemv-core/src/tuned_table.rs";
const REPORT: &str = "docs/tuning.md";
/// A kernel or plan chosen by a modelled time replaces a measured one only when predicted this
/// much faster: the model's steering error.
const MODELLED_MARGIN: f64 = 1.2;
/// A plan replaces the rule's only when this much faster: noise between measured rows.
const PLAN_MARGIN: f64 = 1.03;
/// The Ms whose costs decide `Auto`'s family.
const FAMILY_MS: std::ops::RangeInclusive<usize> = 1..=16;
/// The largest M the table plans.
const MAX_M: usize = 32;

/// Where a time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Measured,
    Modelled,
}

/// A time, or a sum of times, and whether any of it is modelled.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cost {
    us: f64,
    source: Source,
}

impl Cost {
    fn plus(self, other: Cost) -> Cost {
        Cost { us: self.us + other.us, source: self.source.max(other.source) }
    }
}

/// Launch times, measured or (when `allow_model`) modelled.
struct Times<'a> {
    inputs: &'a TuningInputs,
    allow_model: bool,
}

impl Times<'_> {
    /// `kernel` carrying `rows` tokens, summed over `shapes`; `None` unless every shape has a time.
    fn total(&self, kernel: &str, rows: usize, shapes: &[&str]) -> Option<Cost> {
        let key = (kernel.to_string(), rows);
        let measured = self.inputs.measured.get(&key);
        let modelled = self.inputs.modelled.get(&key).filter(|_| self.allow_model);
        let mut total = Cost { us: 0.0, source: Source::Measured };
        for shape in shapes {
            let one = match (measured.and_then(|m| m.get(shape)), modelled.and_then(|m| m.get(shape))) {
                (Some(&us), _) => Cost { us, source: Source::Measured },
                (None, Some(&us)) => Cost { us, source: Source::Modelled },
                (None, None) => return None,
            };
            total = total.plus(one);
        }
        Some(total)
    }
}

/// A plan as (width, rows) launches, widest first, and its cost.
#[derive(Debug, Clone, PartialEq)]
struct Costed {
    launches: Vec<(usize, usize)>,
    cost: Cost,
}

/// The exact family's choice for one width.
#[derive(Debug, Clone)]
struct WidthKernel {
    width: usize,
    tier_kernel: &'static str,
    tier_cost: Option<Cost>,
    chosen: &'static str,
    chosen_cost: Option<Cost>,
}

/// One M of one family: the rule's plan, the cheapest, and whether the table keeps the latter.
#[derive(Debug, Clone)]
struct PlanChoice {
    m: usize,
    rule: Vec<(usize, usize)>,
    rule_cost: Option<Cost>,
    best: Option<Costed>,
    /// The table's entry (a plan other than the rule's), if any.
    entry: Option<Costed>,
}

/// One family's tuning on one device.
struct FamilyTuning {
    family: Family,
    shapes: Vec<&'static str>,
    widths: Vec<WidthKernel>,
    plans: Vec<PlanChoice>,
}

impl FamilyTuning {
    fn kernel_of(&self, width: usize) -> &'static str {
        self.widths.iter().find(|w| w.width == width).map_or("", |w| w.chosen)
    }

    /// The plan the table makes the dispatch run at `m`: its entry, else the rule's.
    fn dispatched(&self, m: usize) -> Option<Vec<(usize, usize)>> {
        let choice = self.plans.iter().find(|p| p.m == m)?;
        Some(choice.entry.as_ref().map_or_else(|| choice.rule.clone(), |e| e.launches.clone()))
    }

    /// What the dispatched plan at `m` costs on `shapes`.
    fn dispatched_cost(&self, times: &Times, m: usize, shapes: &[&str]) -> Option<Cost> {
        plan_cost(&self.dispatched(m)?, |width, rows| times.total(self.kernel_of(width), rows, shapes))
    }
}

/// The rule's plan (every tier present, exact-M tiers on) as (width, rows).
fn rule_plan(family: Family, m: usize) -> Vec<(usize, usize)> {
    let plan = match family {
        Family::Exact => dispatch_plan(m, WIDEST_TIER, TierMask::ALL, true),
        Family::Fast => fast_dispatch_plan(m, TierMask::ALL),
    };
    let tiers = family_tiers(family);
    plan.map(|plan| plan.iter().map(|l| (tiers[l.tier].width, l.rows)).collect()).unwrap_or_default()
}

fn plan_cost(launches: &[(usize, usize)], cost: impl Fn(usize, usize) -> Option<Cost>) -> Option<Cost> {
    launches.iter().try_fold(Cost { us: 0.0, source: Source::Measured }, |sum, &(w, r)| Some(sum.plus(cost(w, r)?)))
}

/// The cheapest plan of `m` rows over launches of (width, rows <= width) that `cost` prices;
/// ties go to fewer launches.
fn cheapest_plan(widths: &[usize], m: usize, cost: impl Fn(usize, usize) -> Option<Cost>) -> Option<Costed> {
    let mut best: Vec<Option<Costed>> = vec![None; m + 1];
    best[0] = Some(Costed { launches: Vec::new(), cost: Cost { us: 0.0, source: Source::Measured } });
    for covered in 1..=m {
        for &width in widths {
            for rows in 1..=width.min(covered) {
                let (Some(rest), Some(launch)) = (&best[covered - rows], cost(width, rows)) else { continue };
                let total = rest.cost.plus(launch);
                let launches = rest.launches.len() + 1;
                let better = match &best[covered] {
                    None => true,
                    Some(current) => {
                        total.us < current.cost.us - 1e-9
                            || ((total.us - current.cost.us).abs() <= 1e-9 && launches < current.launches.len())
                    }
                };
                if better {
                    let mut plan = rest.launches.clone();
                    plan.push((width, rows));
                    plan.sort_by(|a, b| b.cmp(a));
                    best[covered] = Some(Costed { launches: plan, cost: total });
                }
            }
        }
    }
    best.swap_remove(m)
}

/// Whether `challenger` is faster than `incumbent` by the margin its evidence needs.
fn beats(challenger: Cost, incumbent: Cost, margin: f64) -> bool {
    let needed = if challenger.source == Source::Modelled && incumbent.source == Source::Measured {
        MODELLED_MARGIN
    } else {
        margin
    };
    challenger.us * needed < incumbent.us
}

/// The shapes a family is measured on: those of its narrowest tier's kernel at one row.
fn family_shapes(inputs: &TuningInputs, family: Family) -> Vec<&'static str> {
    let kernel = family_tiers(family)[0].kernel_name(KillSwitches::default());
    let rows = inputs.measured.get(&(kernel.to_string(), 1));
    inputs.shapes.iter().copied().filter(|shape| rows.is_some_and(|r| r.contains_key(shape))).collect()
}

fn tune_family(inputs: &TuningInputs, family: Family, times: &Times) -> FamilyTuning {
    let shapes = family_shapes(inputs, family);
    let tiers = family_tiers(family);
    let widths: Vec<WidthKernel> = tiers
        .iter()
        .map(|tier| {
            let tier_kernel = tier.kernel_name(KillSwitches::default());
            let tier_cost = times.total(tier_kernel, tier.width, &shapes);
            let mut choice =
                WidthKernel { width: tier.width, tier_kernel, tier_cost, chosen: tier_kernel, chosen_cost: tier_cost };
            if family == Family::Exact {
                for variant in gemv_core::KERNELS.iter().filter(|s| s.ring_depth > 0 && s.max_m == tier.width) {
                    let Some(cost) = times.total(variant.name, tier.width, &shapes) else { continue };
                    let wins = match choice.chosen_cost {
                        Some(current) => beats(cost, current, 1.0),
                        None => true,
                    };
                    if wins {
                        (choice.chosen, choice.chosen_cost) = (variant.name, Some(cost));
                    }
                }
            }
            choice
        })
        .collect();
    let mut tuning = FamilyTuning { family, shapes, widths, plans: Vec::new() };
    let width_list: Vec<usize> = tiers.iter().map(|t| t.width).collect();
    let cost = |width: usize, rows: usize| times.total(tuning.kernel_of(width), rows, &tuning.shapes);
    let plans = (1..=MAX_M)
        .map(|m| {
            let rule = rule_plan(family, m);
            let rule_cost = plan_cost(&rule, cost);
            let best = cheapest_plan(&width_list, m, cost);
            let entry = match (&best, rule_cost) {
                (Some(best), _) if best.launches == rule => None,
                (Some(best), Some(rule_cost)) => beats(best.cost, rule_cost, PLAN_MARGIN).then(|| best.clone()),
                (Some(best), None) => Some(best.clone()),
                (None, _) => None,
            };
            PlanChoice { m, rule, rule_cost, best, entry }
        })
        .collect();
    tuning.plans = plans;
    tuning
}

/// `Auto`'s family on one device, with the per-M costs that decided it (exact, fast) on the
/// shapes both are measured on.
struct FamilyChoice {
    family: Family,
    source: Source,
    /// The totals (exact, fast) over [`FAMILY_MS`] that decided it, us.
    totals: (f64, f64),
    shapes: Vec<&'static str>,
    costs: Vec<(usize, Option<Cost>, Option<Cost>)>,
}

/// Sums each family's dispatched plans over [`FAMILY_MS`] on the common shapes; `None` unless
/// every M is costed for both.
fn family_totals(times: &Times, exact: &FamilyTuning, fast: &FamilyTuning, shapes: &[&str]) -> Option<(f64, f64)> {
    let mut totals = (0.0, 0.0);
    for m in FAMILY_MS {
        totals.0 += exact.dispatched_cost(times, m, shapes)?.us;
        totals.1 += fast.dispatched_cost(times, m, shapes)?.us;
    }
    Some(totals)
}

fn choose_family(inputs: &TuningInputs, exact: &FamilyTuning, fast: &FamilyTuning) -> Result<FamilyChoice, String> {
    let shapes: Vec<&'static str> = exact.shapes.iter().copied().filter(|s| fast.shapes.contains(s)).collect();
    let with_model = Times { inputs, allow_model: true };
    let costs = FAMILY_MS
        .map(|m| (m, exact.dispatched_cost(&with_model, m, &shapes), fast.dispatched_cost(&with_model, m, &shapes)))
        .collect();
    // Measured times alone, over the plans measured times alone would choose.
    let measured_only = Times { inputs, allow_model: false };
    let (exact_measured, fast_measured) =
        (tune_family(inputs, Family::Exact, &measured_only), tune_family(inputs, Family::Fast, &measured_only));
    let (totals, source) = match family_totals(&measured_only, &exact_measured, &fast_measured, &shapes) {
        Some(totals) => (totals, Source::Measured),
        None => (
            family_totals(&with_model, exact, fast, &shapes)
                .ok_or_else(|| format!("{}: no M in 1..=16 costed for both families on common shapes", inputs.run))?,
            Source::Modelled,
        ),
    };
    let family = if totals.1 < totals.0 { Family::Fast } else { Family::Exact };
    Ok(FamilyChoice { family, source, totals, shapes, costs })
}

/// Everything the table holds for one device.
struct DeviceChoice<'a> {
    inputs: &'a TuningInputs,
    exact: FamilyTuning,
    fast: FamilyTuning,
    family: FamilyChoice,
}

fn decide(inputs: &TuningInputs) -> Result<DeviceChoice<'_>, String> {
    let times = Times { inputs, allow_model: true };
    let exact = tune_family(inputs, Family::Exact, &times);
    let fast = tune_family(inputs, Family::Fast, &times);
    let family = choose_family(inputs, &exact, &fast)?;
    Ok(DeviceChoice { inputs, exact, fast, family })
}

/// Writes the table and its report, or with `check` fails when either committed file differs.
pub fn run(check: bool) -> Result<(), String> {
    let inputs = crate::model::tuning_inputs()?;
    let device = decide(&inputs)?;
    crate::util::write_or_check(TABLE, &render::table(&[&device]), check, "tune")?;
    crate::util::write_or_check(REPORT, &render::report(&[&device]), check, "tune")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(us: f64) -> Option<Cost> {
        Some(Cost { us, source: Source::Measured })
    }

    #[test]
    fn the_cheapest_plan_splits_where_the_wide_launch_is_slow() {
        // A 16-wide launch at 9 rows costs 20; 8 + 1 costs 9 + 3.
        let price = |width: usize, rows: usize| match (width, rows) {
            (1, 1) => cost(3.0),
            (8, 8) => cost(9.0),
            (16, r) if r >= 9 => cost(20.0),
            _ => None,
        };
        let plan = cheapest_plan(&[1, 8, 16], 9, price).expect("costed");
        assert_eq!(plan.launches, [(8, 8), (1, 1)]);
        assert!((plan.cost.us - 12.0).abs() < 1e-12);
        // Equal cost: fewer launches win.
        let flat = |width: usize, rows: usize| if rows == width { cost(1.0) } else { None };
        assert_eq!(cheapest_plan(&[1, 2], 2, flat).expect("costed").launches, [(2, 2)]);
        assert!(cheapest_plan(&[8], 3, |_, _| None).is_none());
    }

    #[test]
    fn a_modelled_time_must_win_by_the_steering_margin() {
        let measured = Cost { us: 100.0, source: Source::Measured };
        let modelled = |us| Cost { us, source: Source::Modelled };
        assert!(!beats(modelled(90.0), measured, PLAN_MARGIN));
        assert!(beats(modelled(80.0), measured, PLAN_MARGIN));
        assert!(beats(Cost { us: 90.0, source: Source::Measured }, measured, PLAN_MARGIN));
    }

    #[test]
    fn the_committed_run_tunes_sm_90() {
        let inputs = crate::model::tuning_inputs().expect("the committed run");
        let device = decide(&inputs).expect("decided");
        // The 2026-12-04 rows: the fast family is faster at every M of both ffn shapes.
        assert_eq!((device.family.family, device.family.source), (Family::Fast, Source::Measured));
        // M = 9 on the exact family: 16-wide is slower than 8 + 1 on every measured shape.
        let nine = device.exact.plans.iter().find(|p| p.m == 9).expect("M = 9");
        assert!(nine.entry.as_ref().is_some_and(|e| e.launches.len() == 2), "{nine:?}");
    }
}
