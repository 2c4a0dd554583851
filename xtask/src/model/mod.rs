//! `cargo xtask model [--check]`: the exact family's time model, fitted to the H200 measurements
//! committed under docs/measurements/, written to docs/model.md (`--check` fails when it is
//! stale). Every figure it predicts is modelled, not measured.
//!
//! The model: a warp streams its rows' weights at a rate of its own (it is latency-bound: one pass
//! in flight, IPC well under one), so a launch takes `t = ramp + c x (the busiest SM's rounds of
//! warps x the KB each warp streams)`. A grid sized by N gives an SM up to ceil(blocks / SMs)
//! blocks, run `cuda_min_blocks` at a time; a persistent grid gives it up to ceil(groups / SMs)
//! groups of rows, run by its resident warps (`sass::rows_per_sm`). `c`, the inverse of one warp's
//! rate, and `ramp` are fitted per kernel and M on two shapes and tested on the third. The ring
//! kernels and the grouped launches (`grouped`) are predicted from the fitted classic kernels.

mod grouped;

use crate::util::root;
use gemv_core::{Family, KERNELS, KernelSpec, TIERS, WARPS_PER_BLOCK, kernel_spec};
use std::collections::BTreeMap;
use std::fmt::Write;

const REPORT: &str = "docs/model.md";
/// The measured run the model is fitted to, and the logs that hold its tables.
const RUN: &str = "docs/measurements/h200-2026-12-04";
const LOGS: [&str; 2] = ["bench.log", "families.log"];
const DEVICE: &str = "H200 (sm_90, 132 SMs)";
const SMS: usize = 132;
/// The benchmark shapes as the logs name them, (N, K).
const SHAPES: [(&str, usize, usize); 3] = [("qkv/o", 5120, 5120), ("ffn-up", 17408, 5120), ("ffn-down", 5120, 17408)];
/// Bytes per weight: half a byte of code and a sixteenth of a scale byte.
const BYTES_PER_WEIGHT: f64 = 0.5625;
/// How far a prediction may miss a measured row for the model to steer.
const STEERING_ERROR: f64 = 0.20;
/// Two shapes fit the model only if their abscissas differ by this factor at least: closer, the
/// line through them extrapolates noise.
const MIN_LEVER: f64 = 1.5;
/// The device-to-device copy the same run measured (GB/s, the median of its rounds): no kernel
/// streams faster, whatever its warps' rate.
const COPY_GBPS: f64 = 4163.0;

/// The measured times, by (kernel, M), then shape: the median time of each table row.
type Measured = BTreeMap<(String, usize), BTreeMap<&'static str, f64>>;

/// Reads the rows `shape  kernel  M  time us ...` of the logs' tables.
fn measured() -> Result<Measured, String> {
    let mut rows = Measured::new();
    for log in LOGS {
        let path = root().join(RUN).join(log);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [shape, kernel, m, time, "us", ..] = fields[..] else { continue };
            let Some(&(shape, _, _)) = SHAPES.iter().find(|(name, _, _)| *name == shape) else { continue };
            let (Ok(m), Ok(time)) = (m.parse::<usize>(), time.parse::<f64>()) else { continue };
            rows.entry((kernel.to_string(), m)).or_default().insert(shape, time);
        }
    }
    Ok(rows)
}

/// The model's abscissa for `spec` at shape (N, K): the busiest SM's rounds of warps times the KB
/// each warp streams in a round (its rows of K weights).
fn warp_rounds_kb(spec: &KernelSpec, n: usize, k: usize) -> f64 {
    let (_, rows) = crate::sass::rows_per_sm(spec, n, SMS);
    let resident_rows = spec.cuda_min_blocks * WARPS_PER_BLOCK * spec.rows;
    let rounds = rows.div_ceil(resident_rows);
    rounds as f64 * spec.rows as f64 * k as f64 * BYTES_PER_WEIGHT / 1024.0
}

/// The alternative the report rejects: KB of weights the busiest SM streams, as if its rate were
/// fixed whatever its warps.
fn busiest_kb(spec: &KernelSpec, n: usize, k: usize) -> f64 {
    let (_, rows) = crate::sass::rows_per_sm(spec, n, SMS);
    rows as f64 * k as f64 * BYTES_PER_WEIGHT / 1024.0
}

/// `(ramp, slope)` through two (abscissa, us) points, if their abscissas differ by [`MIN_LEVER`].
fn fit(a: (f64, f64), b: (f64, f64)) -> Option<(f64, f64)> {
    let (low, high) = if a.0 <= b.0 { (a, b) } else { (b, a) };
    if low.0 <= 0.0 || high.0 < MIN_LEVER * low.0 {
        return None;
    }
    let slope = (high.1 - low.1) / (high.0 - low.0);
    Some((low.1 - slope * low.0, slope))
}

/// The fits of one measured kernel at one M: the constants from qkv/o and ffn-up (the two shapes of
/// one K), and each shape predicted from the other two where they fit.
struct Fitted {
    kernel: &'static KernelSpec,
    m: usize,
    ramp: f64,
    slope: f64,
    /// (shape left out, predicted us, measured us), or `None` where the other two are too close.
    tests: Vec<(&'static str, Option<(f64, f64)>)>,
    /// The measured times, by shape.
    times: BTreeMap<&'static str, f64>,
}

type Abscissa = fn(&KernelSpec, usize, usize) -> f64;

fn fitted(spec: &'static KernelSpec, m: usize, times: &BTreeMap<&'static str, f64>, x: Abscissa) -> Option<Fitted> {
    let point = |shape: &str| {
        let &(_, n, k) = SHAPES.iter().find(|(name, _, _)| *name == shape)?;
        Some((x(spec, n, k), *times.get(shape)?))
    };
    let (ramp, slope) = fit(point(SHAPES[0].0)?, point(SHAPES[1].0)?)?;
    let mut tests = Vec::new();
    for (left_out, _, _) in SHAPES {
        let test = point(left_out)?;
        let others: Vec<(f64, f64)> =
            SHAPES.iter().filter(|(name, _, _)| *name != left_out).filter_map(|(name, _, _)| point(name)).collect();
        let prediction = match others[..] {
            [a, b] => fit(a, b).map(|(r, c)| (r + c * test.0, test.1)),
            _ => None,
        };
        tests.push((left_out, prediction));
    }
    Some(Fitted { kernel: spec, m, ramp, slope, tests, times: times.clone() })
}

fn fits(measured: &Measured, x: Abscissa) -> Vec<Fitted> {
    measured
        .iter()
        .filter_map(|((kernel, m), times)| {
            let spec = kernel_spec(kernel).filter(|s| s.family == Family::Exact && s.ring_depth == 0)?;
            fitted(spec, *m, times, x)
        })
        .collect()
}

fn worst_error(fits: &[Fitted]) -> f64 {
    fits.iter().flat_map(|f| &f.tests).filter_map(|(_, t)| t.map(|(p, m)| (p / m - 1.0).abs())).fold(0.0, f64::max)
}

/// Per-weight instruction counts of the exact kernels on sm_90, from docs/sass.md's pipeline
/// table (`cargo xtask sass` writes it; the model reads the committed report).
fn instructions_per_weight() -> Result<BTreeMap<String, f64>, String> {
    let path = root().join("docs/sass.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let section = text.split("## Pipeline variants").nth(1).ok_or("docs/sass.md has no pipeline-variants section")?;
    let mut counts = BTreeMap::new();
    for line in section.lines().take_while(|line| !line.starts_with("## ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if let (Some(name), Some(Ok(per_weight))) = (cells.get(1), cells.get(7).map(|c| c.parse::<f64>())) {
            counts.insert(name.to_string(), per_weight);
        }
    }
    Ok(counts)
}

/// The report's text.
pub fn render() -> Result<String, String> {
    let measured = measured()?;
    let model = fits(&measured, warp_rounds_kb);
    if model.is_empty() {
        return Err(format!("no exact-family rows with the three shapes in {RUN}"));
    }
    let (worst, worst_rejected) = (worst_error(&model), worst_error(&fits(&measured, busiest_kb)));
    let steers = worst <= STEERING_ERROR;
    let mut out = String::new();
    let _ = writeln!(out, "# The time model of the exact family\n");
    let _ = writeln!(
        out,
        "Generated by `cargo xtask model` from the tables of `{RUN}/{}` and the instruction counts of \
         docs/sass.md; `cargo xtask model --check` fails when this file is stale. Do not edit by hand. The \
         constants are fitted to measurements; every prediction is modelled.\n",
        LOGS.join("`, `")
    );
    let _ = writeln!(
        out,
        "**The model.** A warp streams its rows' weights at a rate of its own: the classic kernels keep one pass of \
         weights in flight per warp and issue well under one instruction per clock (the 2026-12-04 profile), so \
         they are latency-bound per warp. A launch then takes `t = ramp + c x (busiest SM's rounds x KB a warp \
         streams per round)`: a grid sized by N gives an SM up to ceil(blocks / {SMS}) blocks, run \
         `cuda_min_blocks` at a time; a persistent grid gives it up to ceil(groups / {SMS}) groups of rows, one \
         per resident warp per round; a warp's round is its rows x K weights. `c` is the inverse of one warp's \
         rate. Fitted per kernel and M on qkv/o and ffn-up (one K) and tested on ffn-down (K = 17408), and on \
         ffn-up from the other two; qkv/o is not predicted from ffn-up and ffn-down, whose abscissas are within \
         a factor {MIN_LEVER} of each other at every width (a line through them extrapolates noise). Rows: the \
         {DEVICE} measurements of the classic exact kernels. Worst held-out error {:.0}%; the same form with the \
         busiest SM's bytes as the abscissa (an SM streaming at a fixed rate whatever its warps) misses by up \
         to {:.0}%.\n",
        worst * 100.0,
        worst_rejected * 100.0
    );
    let _ = writeln!(
        out,
        "| kernel | M | ramp (us) | c (us/KB) | warp rate (GB/s) | held out: predicted / measured (error) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for f in &model {
        let tests: Vec<String> = f
            .tests
            .iter()
            .map(|(shape, test)| match test {
                Some((p, m)) => format!("{shape} {p:.1} / {m:.1} us ({:+.0}%)", (p / m - 1.0) * 100.0),
                None => format!("{shape} not tested"),
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.4} | {:.2} | {} |",
            f.kernel.name,
            f.m,
            f.ramp,
            f.slope,
            1.024 / f.slope,
            tests.join("; ")
        );
    }
    let _ = writeln!(
        out,
        "\n{}\n",
        if steers {
            "Every tested row is within 20%: the model steers the choices below until a measurement says otherwise."
        } else {
            "Some tested row is off by more than 20%: the model does not steer; the predictions below are shown only."
        }
    );
    render_predictions(&mut out, &model, &instructions_per_weight()?);
    grouped::render(&mut out, &model);
    Ok(out)
}

/// One ring kernel's prediction at its width: per shape of [`SHAPES`], the time, the bound that
/// sets it and the classic kernel's measured time there (if any).
struct RingPrediction {
    spec: &'static KernelSpec,
    /// The bytes a ring warp keeps in flight over the classic warp's.
    speedup: f64,
    times: Vec<(&'static str, f64, &'static str, Option<f64>)>,
}

/// The ring kernels predicted from the classic kernel of their width (its ramp, its warps' rate
/// scaled by the bytes a ring warp keeps in flight against its own), under two ceilings: the
/// busiest SM's instructions at four per clock, and the copy's bandwidth.
fn ring_predictions(model: &[Fitted], per_weight: &BTreeMap<String, f64>) -> Vec<RingPrediction> {
    const ISSUE_PER_US: f64 = 4.0 * 1.98e3;
    let mut predictions = Vec::new();
    for spec in KERNELS.iter().filter(|s| s.ring_depth > 0) {
        let Some(tier) = TIERS.iter().find(|tier| tier.width == spec.max_m) else { continue };
        let Some(classic) = model.iter().find(|f| f.kernel.name == tier.kernel && f.m == spec.max_m) else { continue };
        let Some(&ipw) = per_weight.get(spec.name) else { continue };
        let speedup = (spec.rows * (spec.ring_depth - 1)) as f64 / classic.kernel.rows as f64;
        let times = SHAPES
            .iter()
            .map(|&(shape, n, k)| {
                let (_, rows) = crate::sass::rows_per_sm(spec, n, SMS);
                let latency = classic.slope / speedup * warp_rounds_kb(spec, n, k);
                let issue = rows as f64 * k as f64 * ipw / 32.0 / ISSUE_PER_US;
                let copy = n as f64 * k as f64 * BYTES_PER_WEIGHT / (COPY_GBPS * 1e3);
                let t = classic.ramp + latency.max(issue).max(copy);
                let bound = if latency >= issue.max(copy) {
                    "latency"
                } else if issue >= copy {
                    "issue"
                } else {
                    "copy"
                };
                (shape, t, bound, classic.times.get(shape).copied())
            })
            .collect();
        predictions.push(RingPrediction { spec, speedup, times });
    }
    predictions
}

fn render_predictions(out: &mut String, model: &[Fitted], per_weight: &BTreeMap<String, f64>) {
    let slope_of = |name: &str| model.iter().find(|f| f.kernel.name == name && f.m == 1).map(|f| f.slope);
    let two_to_four = match (slope_of("w4a16_gemv"), slope_of("w4a16_gemv_batch8")) {
        (Some(four), Some(two)) => four / two,
        _ => f64::NAN,
    };
    let _ = writeln!(out, "## Predictions for the ring-pipeline kernels (modelled)\n");
    let _ = writeln!(
        out,
        "Each ring kernel with the ramp of the classic kernel the plan runs at its width and that kernel's warp \
         rate times the bytes a ring warp keeps in flight (rows x (depth - 1) passes) over the classic warp's \
         (rows x one pass: its L2 prefetch only shortens that load), as Little's law has it for a latency-bound \
         warp (an assumption the device pack's `variants` step tests; the classic kernels of 2 and 4 rows at \
         M = 1, `batch8` and `w4a16_gemv`, measured a warp-rate ratio of {two_to_four:.2} against 0.5), but no \
         faster than the busiest SM's instructions allow (docs/sass.md's count per weight, four warp-instructions \
         per clock at 1.98 GHz) or than the copy ({COPY_GBPS:.0} GB/s). Against the classic kernel's measured \
         time; the factor is measured over predicted.\n"
    );
    let headers: Vec<String> = SHAPES.iter().map(|(name, n, k)| format!("{name} ({n}x{k})")).collect();
    let _ = writeln!(out, "| kernel | M | rate x | {} |", headers.join(" | "));
    let _ = writeln!(out, "|---|---|---|{}", "---|".repeat(SHAPES.len()));
    for prediction in ring_predictions(model, per_weight) {
        let cells: Vec<String> = prediction
            .times
            .iter()
            .map(|&(_, t, bound, measured)| match measured {
                Some(m) => format!("{t:.1} us, {bound} ({:.2}x)", m / t),
                None => format!("{t:.1} us, {bound}"),
            })
            .collect();
        let spec = prediction.spec;
        let _ = writeln!(out, "| {} | {} | {:.2} | {} |", spec.name, spec.max_m, prediction.speedup, cells.join(" | "));
    }
    let _ = writeln!(out);
}

/// What the tuned table is generated from: the measured run's times and, where the model steers,
/// its predictions for the kernels no run has measured.
pub struct TuningInputs {
    /// The measured run (a path under the repository).
    pub run: &'static str,
    /// The device it ran on.
    pub device: &'static str,
    /// Its compute capability.
    pub capability: (i32, i32),
    /// The benchmark shapes, by name.
    pub shapes: Vec<&'static str>,
    /// Measured median times (us), by (kernel, M), then shape.
    pub measured: BTreeMap<(String, usize), BTreeMap<&'static str, f64>>,
    /// Modelled times (us) of the ring kernels at their width, by (kernel, M), then shape; empty
    /// when the model does not steer (a measured row missed by more than the steering error).
    pub modelled: BTreeMap<(String, usize), BTreeMap<&'static str, f64>>,
}

/// The committed measurements and the model's predictions, for `cargo xtask tune`.
pub fn tuning_inputs() -> Result<TuningInputs, String> {
    let measured = measured()?;
    let model = fits(&measured, warp_rounds_kb);
    let steers = !model.is_empty() && worst_error(&model) <= STEERING_ERROR;
    let mut modelled = BTreeMap::new();
    if steers {
        for prediction in ring_predictions(&model, &instructions_per_weight()?) {
            let times: BTreeMap<&'static str, f64> =
                prediction.times.iter().map(|&(shape, t, _, _)| (shape, t)).collect();
            modelled.insert((prediction.spec.name.to_string(), prediction.spec.max_m), times);
        }
    }
    Ok(TuningInputs {
        run: RUN,
        device: "NVIDIA H200",
        capability: (9, 0),
        shapes: SHAPES.iter().map(|(name, _, _)| *name).collect(),
        measured,
        modelled,
    })
}

/// Writes docs/model.md, or with `check` fails when the committed one differs.
pub fn run(check: bool) -> Result<(), String> {
    crate::util::write_or_check(REPORT, &render()?, check, "model")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fit_passes_through_both_points_and_refuses_close_abscissas() {
        let (ramp, slope) = fit((300.0, 20.0), (100.0, 10.0)).expect("a lever of 3");
        assert!((ramp - 5.0).abs() < 1e-12 && (slope - 0.05).abs() < 1e-12);
        assert!(fit((100.0, 10.0), (140.0, 12.0)).is_none());
    }

    #[test]
    fn rounds_follow_the_grid() {
        let classic = kernel_spec("w4a16_gemv").expect("registry");
        let warp_kb = |k: usize| 4.0 * k as f64 * BYTES_PER_WEIGHT / 1024.0;
        // qkv: 160 blocks, two on the busiest SM, both resident: one round.
        assert!((warp_rounds_kb(classic, 5120, 5120) - warp_kb(5120)).abs() < 1e-9);
        // ffn-up: 544 blocks, five on the busiest SM, two at a time: three rounds.
        assert!((warp_rounds_kb(classic, 17408, 5120) - 3.0 * warp_kb(5120)).abs() < 1e-9);
        // Persistent, ffn-up: 4,352 groups, at most 33 per SM, 16 resident warps: three rounds.
        let persistent = kernel_spec("w4a16_gemv_ring3_r4_b2_p").expect("registry");
        assert!((warp_rounds_kb(persistent, 17408, 5120) - 3.0 * warp_kb(5120)).abs() < 1e-9);
    }

    #[test]
    fn the_committed_measurements_fit_within_the_steering_error() {
        let text = render().expect("the committed measurements parse");
        assert!(text.contains("| w4a16_gemv | 1 |"), "{text}");
        assert!(text.contains("the model steers"), "{text}");
    }
}
