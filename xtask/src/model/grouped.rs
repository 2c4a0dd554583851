//! The grouped kernels' predictions (modelled): a routed layer's launch as the touched experts'
//! rows streamed by the ring pipeline of the grouped kernel's width, beside the same work as one
//! classic launch per (token, slot) pair.

use super::{BYTES_PER_WEIGHT, COPY_GBPS, Fitted, SMS, WARPS_PER_BLOCK, warp_rounds_kb};
use gemv_core::{Family, GROUPED_KERNELS, GroupedKernelSpec, MOE_LAYERS, MoeLayer, TIERS, grouped_kernel, kernel_spec};
use std::fmt::Write;

/// The token counts predicted.
const MS: [usize; 5] = [1, 2, 4, 8, 16];

/// The mean number of chunks of `width` pairs an expert a routing touches runs: its pairs are
/// binomial (each of `m` tokens picks it with probability top_k / E), given at least one.
fn mean_chunks(layer: &MoeLayer, m: usize, width: usize) -> f64 {
    let p = layer.top_k as f64 / layer.experts as f64;
    let mut choose = 1.0;
    let (mut sum, mut touched) = (0.0, 0.0);
    for pairs in 1..=m {
        choose *= (m + 1 - pairs) as f64 / pairs as f64;
        let probability = choose * p.powi(pairs as i32) * (1.0 - p).powi((m - pairs) as i32);
        touched += probability;
        sum += probability * pairs.div_ceil(width) as f64;
    }
    sum / touched
}

/// One prediction: microseconds and what bounds them.
struct Prediction {
    micros: f64,
    bound: &'static str,
}

/// The grouped launch of `layer` at `m` tokens on `spec`, from the classic kernel of its width
/// (`classic`: its ramp, and its warps' rate scaled by the bytes a ring warp keeps in flight).
fn grouped(layer: &MoeLayer, m: usize, spec: &GroupedKernelSpec, classic: &Fitted) -> Prediction {
    let chunks = layer.expected_touched(m) * mean_chunks(layer, m, spec.max_m);
    let row_blocks = layer.n.div_ceil(WARPS_PER_BLOCK * spec.rows) as f64;
    // The working blocks (each chunk's first pair's, one per chunk and row block) spread over the
    // SMs, `cuda_min_blocks` at a time; the other pairs' blocks return at once.
    let rounds = (chunks * row_blocks / SMS as f64).ceil() / spec.cuda_min_blocks as f64;
    let warp_kb = spec.rows as f64 * layer.k as f64 * BYTES_PER_WEIGHT / 1024.0;
    let speedup = (spec.rows * (spec.ring_depth - 1)) as f64 / classic.kernel.rows as f64;
    let latency = classic.slope / speedup * rounds.ceil() * warp_kb;
    let copy = bytes(layer, m) / (COPY_GBPS * 1e3);
    let bound = if latency >= copy { "latency" } else { "copy" };
    Prediction { micros: classic.ramp + latency.max(copy), bound }
}

/// Bytes a launch moves: the touched experts' weights, X and Y as bf16.
fn bytes(layer: &MoeLayer, m: usize) -> f64 {
    let weights = layer.expected_touched(m) * (layer.n * layer.k) as f64 * BYTES_PER_WEIGHT;
    weights + 2.0 * (m * layer.k + m * layer.top_k * layer.n) as f64
}

/// The classic kernel whose fit predicts a grouped kernel of `width`: the plan's kernel at that
/// width, fitted at M = width.
fn classic_of(model: &[Fitted], width: usize) -> Option<&Fitted> {
    let tier = TIERS.iter().find(|tier| tier.width == width)?;
    model.iter().find(|f| f.kernel.name == tier.kernel && f.m == width)
}

/// Every exact grouped kernel's prediction for `layer` at `m`, in registry order.
fn every_kernel(model: &[Fitted], layer: &MoeLayer, m: usize) -> Vec<(&'static GroupedKernelSpec, Prediction)> {
    GROUPED_KERNELS
        .iter()
        .filter(|spec| spec.family == Family::Exact)
        .filter_map(|spec| Some((spec, grouped(layer, m, spec, classic_of(model, spec.max_m)?))))
        .collect()
}

pub(super) fn render(out: &mut String, model: &[Fitted]) {
    let fit = |name: &str, m: usize| model.iter().find(|f| f.kernel.name == name && f.m == m);
    let _ = writeln!(out, "## Predictions for the grouped kernels (modelled)\n");
    let _ = writeln!(
        out,
        "A routed layer's grouped launch (`gemv bench --moe`'s layers, each token's top-k distinct experts chosen \
         uniformly: E (1 - (1 - top_k / E)^M) experts touched on average) as the touched experts' rows streamed by \
         the grouped kernel `gemv_core::grouped_kernel` picks (of its selectable kernels, the one whose chunks of \
         the pairs a touched expert has on average stream soonest, by the rows its SMs keep in flight): its working blocks (one per chunk of an expert's pairs, as many as the \
         kernel is wide, and row block; the other pairs' blocks return at once) spread over the {SMS} SMs, \
         `cuda_min_blocks` at a time, each warp streaming its rows of K once, at the warp rate of the classic kernel of the same width scaled by the \
         bytes a ring warp keeps in flight, with that kernel's ramp, and no faster than the copy \
         ({COPY_GBPS:.0} GB/s; the grouped kernels' instruction counts are not modelled). Beside it, the same \
         work as one launch of the classic plan per (token, slot) pair, the table above's model at N x K. Bytes: \
         the touched experts' weights, X and Y. Nothing here has been measured.\n"
    );
    let _ = writeln!(
        out,
        "| layer | M | grouped kernel | experts touched | grouped (us) | % copy | separate launches (us) | speed-up |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for layer in &MOE_LAYERS {
        for m in MS {
            let spec = grouped_kernel(Family::Exact, m, layer.top_k, layer.experts);
            let Some(classic) = classic_of(model, spec.max_m) else { continue };
            let prediction = grouped(layer, m, spec, classic);
            let percent = 100.0 * bytes(layer, m) / prediction.micros / 1e3 / COPY_GBPS;
            // One launch per pair: the classic one-token kernel on N x K.
            let separate = kernel_spec(TIERS[0].kernel).zip(fit(TIERS[0].kernel, 1)).map(|(single, f)| {
                (m * layer.top_k) as f64 * (f.ramp + f.slope * warp_rounds_kb(single, layer.n, layer.k))
            });
            let (separate, speedup) = match separate {
                Some(t) => (format!("{t:.0}"), format!("{:.1}x", t / prediction.micros)),
                None => ("-".into(), "-".into()),
            };
            let _ = writeln!(
                out,
                "| {} | {m} | {} | {:.1} | {:.1}, {} | {percent:.0}% | {separate} | {speedup} |",
                layer.name,
                spec.name,
                layer.expected_touched(m),
                prediction.micros,
                prediction.bound
            );
        }
    }
    out.push('\n');
    render_sweep(out, model);
}

/// Every exact grouped kernel on every layer and M: what the selector's choice is measured against.
fn render_sweep(out: &mut String, model: &[Fitted]) {
    let _ = writeln!(out, "### Every grouped kernel (modelled)\n");
    let _ = writeln!(
        out,
        "Each exact grouped kernel's predicted time (us) on each layer and M, by the model above; `*` marks \
         `grouped_kernel`'s choice. The choice follows the pairs a touched expert has, not M. The 4-wide kernel \
         keeps 48 rows in flight per SM (one row a warp, a four-pass ring, two blocks) to the 1- and 2-wide \
         kernels' 64, and its warps run at the rate of the classic 4-wide kernel, which is slower per weight \
         than the 2-wide one, so even where a touched expert has 2.2 or four pairs (Mixtral's 2 of 8 at M = 8 \
         and 16) the 2-wide kernel's chunks are predicted sooner done; the 8-wide keeps 16 (one block of \
         depth-2 warps). Both are therefore not selectable (`GroupedKernelSpec::selectable`): they are the \
         device sweep's arms. With top 8 of 128 or 256 experts a touched expert has at most 1.6 pairs up to \
         M = 16, one chunk of the 2-wide kernel.\n"
    );
    let specs: Vec<&GroupedKernelSpec> = GROUPED_KERNELS.iter().filter(|spec| spec.family == Family::Exact).collect();
    let names: Vec<&str> = specs.iter().map(|spec| spec.name).collect();
    let _ = writeln!(out, "| layer | M | pairs an expert | {} |", names.join(" | "));
    let _ = writeln!(out, "|---|---|---|{}", "---|".repeat(specs.len()));
    for layer in &MOE_LAYERS {
        for m in MS {
            let chosen = grouped_kernel(Family::Exact, m, layer.top_k, layer.experts);
            let cells: Vec<String> = every_kernel(model, layer, m)
                .iter()
                .map(|(spec, p)| format!("{:.1}{}", p.micros, if spec.name == chosen.name { " *" } else { "" }))
                .collect();
            let pairs = gemv_core::expected_pairs_per_expert(layer.experts, layer.top_k, m);
            let _ = writeln!(out, "| {} | {m} | {pairs:.2} | {} |", layer.name, cells.join(" | "));
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The selector agrees with the model fitted to the committed measurements: from M = 2 its
    /// choice is the fastest exact grouped kernel on every preset; at M = 1 (the 1-wide kernel,
    /// whose predicted ramp is borrowed from the classic one-token kernel's) within 30% of it.
    #[test]
    fn the_grouped_kernel_chosen_is_the_models_fastest() {
        let measured = super::super::measured().expect("the committed measurements parse");
        let model = super::super::fits(&measured, super::super::warp_rounds_kb);
        for layer in &MOE_LAYERS {
            for m in MS {
                let chosen = grouped_kernel(Family::Exact, m, layer.top_k, layer.experts);
                let every = every_kernel(&model, layer, m);
                let time = |name: &str| every.iter().find(|(spec, _)| spec.name == name).map(|(_, p)| p.micros);
                let best = every.iter().map(|(_, p)| p.micros).fold(f64::INFINITY, f64::min);
                let t = time(chosen.name).expect("the chosen kernel is predicted");
                let slack = if m == 1 { 1.3 } else { 1.0 + 1e-9 };
                assert!(
                    t <= best * slack,
                    "{} M = {m}: {} predicted {t:.1} us, the best {best:.1}",
                    layer.name,
                    chosen.name
                );
            }
        }
    }

    #[test]
    fn an_expert_runs_one_chunk_until_it_can_have_more_pairs_than_the_width() {
        let layer = MOE_LAYERS[2];
        for m in [1, 2, 4, 8] {
            assert!((mean_chunks(&layer, m, 8) - 1.0).abs() < 1e-12, "M = {m}");
        }
        let sixteen = mean_chunks(&layer, 16, 8);
        assert!(sixteen > 1.0 && sixteen < 1.001, "nine pairs of 16 tokens are rare: {sixteen}");
        // One pair a chunk: the mean pairs of a touched expert, M top_k / touched.
        assert!((mean_chunks(&layer, 3, 1) - 3.0 * 8.0 / layer.expected_touched(3)).abs() < 1e-9);
    }
}
