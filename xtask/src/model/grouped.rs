//! The grouped kernels' predictions (modelled): a routed layer's launch as the touched experts'
//! rows streamed by the ring pipeline of the grouped kernel's width, beside the same work as one
//! classic launch per (token, slot) pair.

use super::{BYTES_PER_WEIGHT, COPY_GBPS, Fitted, SMS, WARPS_PER_BLOCK, warp_rounds_kb};
use gemv_core::{Family, GroupedKernelSpec, MOE_LAYERS, MoeLayer, TIERS, grouped_kernel, kernel_spec};
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
    let touched = layer.expected_touched(m);
    let row_blocks = layer.n.div_ceil(WARPS_PER_BLOCK * spec.rows) as f64;
    // The working blocks (an expert's first pair's) spread over the SMs, `cuda_min_blocks` at a
    // time; the other pairs' blocks return at once.
    let rounds = (touched * row_blocks / SMS as f64).ceil() / spec.cuda_min_blocks as f64;
    let warp_kb = spec.rows as f64 * layer.k as f64 * BYTES_PER_WEIGHT / 1024.0 * mean_chunks(layer, m, spec.max_m);
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

pub(super) fn render(out: &mut String, model: &[Fitted]) {
    let fit = |name: &str, m: usize| model.iter().find(|f| f.kernel.name == name && f.m == m);
    let classic_of =
        |width: usize| TIERS.iter().find(|tier| tier.width == width).and_then(|tier| fit(tier.kernel, width));
    let _ = writeln!(out, "## Predictions for the grouped kernels (modelled)\n");
    let _ = writeln!(
        out,
        "A routed layer's grouped launch (`gemv bench --moe`'s layers, each token's top-k distinct experts chosen \
         uniformly: E (1 - (1 - top_k / E)^M) experts touched on average) as the touched experts' rows streamed by \
         the grouped kernel of its width: its working blocks (one per expert and row block; the other pairs' \
         blocks return at once) spread over the {SMS} SMs, `cuda_min_blocks` at a time, each warp streaming its \
         rows of K once per chunk of pairs, at the warp rate of the classic kernel of the same width scaled by the \
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
            let spec = grouped_kernel(Family::Exact, m);
            let Some(classic) = classic_of(spec.max_m) else { continue };
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
