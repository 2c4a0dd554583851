//! `gemv bench`'s options: what to run, and the parsers that keep each value in its limits.

use crate::backends::BackendChoice;
use gemv_core::{FamilyChoice, KernelSpec, kernel_spec};
use std::path::PathBuf;

/// What to run: `gemv bench`'s arguments, as clap parses them.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchOptions {
    /// Backend; auto picks CUDA, then wgpu on a real GPU, then the CPU backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Weight shape NxK, or qkv (5120x5120), ffn-up (17408x5120), ffn-down (5120x17408).
    /// Repeatable.
    #[arg(long = "shape", value_name = "SHAPE", default_value = "qkv", value_parser = parse_shape)]
    pub shapes: Vec<(String, usize, usize)>,
    /// Rows per launch, as a list of numbers and ranges (each M in 1..=4096, at most 1024 values).
    #[arg(long = "m", value_name = "M", default_value = "1..8", value_parser = parse_ms)]
    pub ms: std::vec::Vec<usize>,
    /// Force a kernel (e.g. w4a16_gemv_batch8 at M = 4..8, the 8-wide kernel without the
    /// exact-M tiers); repeatable; `plan` is the dispatch plan. Default: the plan.
    #[arg(long = "tier", value_name = "TIER", value_parser = parse_tier)]
    pub tiers: Vec<TierChoice>,
    /// The kernel family the plan runs in: auto (the default: the family the device's tuned table
    /// names, fast on sm_90, else exact; `gemv info` says which), exact, or fast
    /// (tensor cores, CUDA sm_80+; its own bounded, batch-invariant contract). Repeatable, to
    /// compare the families side by side; `GEMV_EXACT_ONLY` forces exact. With --moe: the
    /// families whose grouped and pair-by-pair launches are timed (default exact).
    #[arg(long = "family", value_name = "FAMILY", value_parser = parse_family)]
    pub families: Vec<FamilyChoice>,
    /// Nominal peak bandwidth in GB/s for the % column (default: what the device reports).
    #[arg(long, value_parser = parse_peak_gbps)]
    pub peak_gbps: Option<f64>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write effective bandwidth against M as an SVG plot, one line per tier.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Interleaved rounds; the median is reported (1..=100000).
    #[arg(long, default_value = "5", value_parser = parse_repeats)]
    pub rounds: usize,
    /// Back-to-back launches per timing (1..=100000).
    #[arg(long, default_value = "20", value_parser = parse_repeats)]
    pub launches: usize,
    /// Megabytes of weight copies to rotate through, so weights are cold (>= 4x the L2).
    /// Checked against the memory available before anything is allocated.
    #[arg(long, default_value = "256", value_parser = parse_cold_mb)]
    pub cold_mb: usize,
    /// Time a routed mixture-of-experts layer instead of --shape: a preset (deepseek-v3-up,
    /// deepseek-v3-down, qwen3-moe-up, qwen3-moe-down, mixtral-8x7b-up, mixtral-8x7b-down) or
    /// E,TOPK,N,K. The grouped launch (where
    /// the backend has one) and the same work in one launch per (token, slot) pair, a fresh
    /// random routing per launch; bytes are the distinct experts touched. On the CPU with ggml
    /// built in (`cargo xtask ggml-bench`), ggml_mul_mat_id on the same routings, beside the
    /// first --family's arms. Repeatable.
    #[arg(long = "moe", value_name = "LAYER", value_parser = super::moe::parse_moe)]
    pub moe: Vec<super::moe::MoeShape>,
    /// With --moe: also time the grouped launch forced onto this grouped kernel (a name of
    /// `gemv_core::GROUPED_KERNELS`, e.g. w4a16_grouped_batch8_ring2_r2_b1; its family must be
    /// among --family's), whatever the selector picks, as the arm `grouped NAME`; repeatable. A
    /// sweep of the kernels the selector chooses between.
    #[arg(long = "grouped-kernel", value_name = "NAME", value_parser = parse_grouped_kernel)]
    pub grouped_kernels: Vec<&'static gemv_core::GroupedKernelSpec>,
    /// Time a chain of STEPS dependent layers instead of single layers: each --shape (square,
    /// N = K) as STEPS matrices, the Y of each step the X of the next, in each --family's plan,
    /// launched one after the other and, where the backend has them (CUDA sm_90+, the emulator
    /// at 9.0+), as programmatic dependent launches, which start streaming their weights while
    /// the step before them finishes; each also captured into a CUDA graph and replayed, where
    /// the backend has graphs (CUDA; the emulator runs a graph's launches in order). Prints the
    /// time per step of each and its ratio to the serialized launches. 2..=64.
    #[arg(long, value_name = "STEPS", value_parser = parse_chain_steps)]
    pub chain: Option<usize>,
    /// Skip the peer rows: on CUDA the bench also times cuBLAS's BF16 GEMM on the same shape
    /// and M (where libcublas loads; a note says so where it does not) and prints the NVFP4
    /// speed-up over it (ideal 3.56x: 2 bytes per weight against 0.5625); on the CPU, ggml's
    /// kernels where they are built in.
    #[arg(long)]
    pub no_peer: bool,
}

impl BenchOptions {
    /// Bytes of weight copies to rotate through (cold weights).
    pub fn cold_bytes(&self) -> usize {
        self.cold_mb.saturating_mul(1 << 20)
    }

    /// Whether the backend's peer GEMM (cuBLAS BF16 on CUDA) is timed too.
    pub fn peer(&self) -> bool {
        !self.no_peer
    }
}

/// What one `--tier` times: the dispatch plan (in each `--family`), or one registry kernel forced
/// at every M it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierChoice {
    /// The dispatch plan.
    Plan,
    /// One kernel, whatever the plan would choose.
    Kernel(&'static KernelSpec),
}

/// Parses `--tier`: `plan`, or a kernel of the registry by name.
pub fn parse_tier(text: &str) -> Result<TierChoice, String> {
    if text == "plan" {
        return Ok(TierChoice::Plan);
    }
    kernel_spec(text)
        .map(TierChoice::Kernel)
        .ok_or(format!("{text:?} is not a kernel of the registry (`gemv info` lists them) nor `plan`"))
}

/// Parses `NxK` or a named shape of the 27B-class model.
pub fn parse_shape(text: &str) -> Result<(String, usize, usize), String> {
    match text {
        "qkv" | "o" | "qkv/o" => return Ok(("qkv/o".into(), 5120, 5120)),
        "ffn-up" | "up" => return Ok(("ffn-up".into(), 17408, 5120)),
        "ffn-down" | "down" => return Ok(("ffn-down".into(), 5120, 17408)),
        _ => {}
    }
    let (n, k) = text.split_once(['x', 'X']).ok_or(format!("shape {text:?}: expected NxK or qkv, ffn-up, ffn-down"))?;
    let parse =
        |s: &str, what: &str| s.trim().parse::<usize>().map_err(|_| format!("shape {text:?}: {what} is not a number"));
    let (n, k) = (parse(n, "N")?, parse(k, "K")?);
    gemv_core::validate_weight_shape(n, k).map_err(|e| format!("shape {text:?}: {e}"))?;
    Ok((format!("{n}x{k}"), n, k))
}

/// The largest M `gemv bench` times (the plan splits it into launches of at most 32 rows).
pub const MAX_BENCH_M: usize = 4096;

/// The most M values one `--m` list may hold.
pub const MAX_BENCH_MS: usize = 1024;

/// Parses `1..8,16,32`. Every M lies in 1..=[`MAX_BENCH_M`] and the list holds at most
/// [`MAX_BENCH_MS`] values; both are checked before the list is built.
pub fn parse_ms(text: &str) -> Result<Vec<usize>, String> {
    let mut ms = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let number = |s: &str| {
            let m = s.trim().parse::<usize>().map_err(|_| format!("--m {text:?}: {s:?} is not a number"))?;
            if m > MAX_BENCH_M {
                return Err(format!("--m {text:?}: M = {m} is above the largest M the bench times ({MAX_BENCH_M})"));
            }
            Ok(m)
        };
        let (a, b) = match part.split_once("..") {
            Some((a, b)) => (number(a)?, number(b.trim_start_matches('='))?),
            None => (number(part)?, number(part)?),
        };
        if a > b {
            return Err(format!("--m {text:?}: empty range {part}"));
        }
        if ms.len() + (b - a + 1) > MAX_BENCH_MS {
            return Err(format!("--m {text:?}: more than {MAX_BENCH_MS} values of M"));
        }
        ms.extend(a..=b);
    }
    if ms.is_empty() || ms.contains(&0) {
        return Err(format!("--m {text:?}: need M >= 1"));
    }
    Ok(ms)
}

/// The most rounds or launches per timing `gemv bench` accepts.
pub const MAX_REPEATS: usize = 100_000;

/// Parses `--rounds` and `--launches`: 1..=[`MAX_REPEATS`].
pub fn parse_repeats(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_REPEATS).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is outside 1..={MAX_REPEATS}")),
        Err(_) => Err(format!("{text:?} is not a whole number")),
    }
}

/// The largest `--cold-mb` (1 TiB).
pub const MAX_COLD_MB: usize = 1 << 20;

/// Parses `--cold-mb`: 0..=[`MAX_COLD_MB`] megabytes.
pub fn parse_cold_mb(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(mb) if mb <= MAX_COLD_MB => Ok(mb),
        Ok(mb) => Err(format!("{mb} MB is more than {MAX_COLD_MB} MB")),
        Err(_) => Err(format!("{text:?} is not a whole number of megabytes")),
    }
}

/// Parses `--peak-gbps`: a finite bandwidth above zero.
pub fn parse_peak_gbps(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(gbps) if gbps.is_finite() && gbps > 0.0 => Ok(gbps),
        Ok(_) => Err(format!("{text:?}: the peak must be a finite number of GB/s above 0")),
        Err(_) => Err(format!("{text:?} is not a number")),
    }
}

/// A grouped kernel's name, for `--grouped-kernel`.
pub fn parse_grouped_kernel(text: &str) -> Result<&'static gemv_core::GroupedKernelSpec, String> {
    gemv_core::grouped_kernel_spec(text).ok_or_else(|| {
        let names: Vec<&str> = gemv_core::GROUPED_KERNELS.iter().map(|spec| spec.name).collect();
        format!("{text:?} is not a grouped kernel; one of {}", names.join(", "))
    })
}

/// The most steps `--chain` takes.
pub const MAX_CHAIN_STEPS: usize = 64;

/// Parses `--chain`: 2..=[`MAX_CHAIN_STEPS`] steps.
pub fn parse_chain_steps(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(steps) if (2..=MAX_CHAIN_STEPS).contains(&steps) => Ok(steps),
        Ok(steps) => Err(format!("{steps} steps: a chain has 2..={MAX_CHAIN_STEPS}")),
        Err(_) => Err(format!("{text:?} is not a whole number of steps")),
    }
}

/// `auto`, `exact` or `fast`, for `--family`.
pub fn parse_family(text: &str) -> Result<FamilyChoice, String> {
    match text {
        "auto" => Ok(FamilyChoice::Auto),
        "exact" => Ok(FamilyChoice::Exact),
        "fast" => Ok(FamilyChoice::Fast),
        other => Err(format!("{other:?}: the family is auto, exact or fast")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_m_lists_parse() {
        assert_eq!(parse_shape("ffn-up"), Ok(("ffn-up".into(), 17408, 5120)));
        assert_eq!(parse_shape("7x48"), Ok(("7x48".into(), 7, 48)));
        assert!(parse_shape("7x40").is_err());
        assert_eq!(parse_ms("1..3,8,16"), Ok(vec![1, 2, 3, 8, 16]));
        assert_eq!(parse_ms("2..=4"), Ok(vec![2, 3, 4]));
        assert_eq!(parse_tier("plan"), Ok(TierChoice::Plan));
        assert!(matches!(parse_tier("w4a16_gemv_batch8"), Ok(TierChoice::Kernel(s)) if s.name == "w4a16_gemv_batch8"));
        assert!(parse_tier("w4a16_gemv_batch9").unwrap_err().contains("not a kernel of the registry"));
    }

    /// Random option values: every parser returns, never panics, and what it accepts is inside
    /// its documented limits.
    #[test]
    fn option_parsers_never_panic_and_keep_their_limits() {
        const ALPHABET: &[u8] = b"0123456789..,=xX-+eE qkvNaNinf";
        let mut state = 0x1234_5678u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as usize
        };
        for _ in 0..20_000 {
            let len = next() % 24;
            let text: String = (0..len).map(|_| ALPHABET[next() % ALPHABET.len()] as char).collect();
            if let Ok(ms) = parse_ms(&text) {
                assert!(!ms.is_empty() && ms.len() <= MAX_BENCH_MS, "{text:?}");
                assert!(ms.iter().all(|&m| (1..=MAX_BENCH_M).contains(&m)), "{text:?}");
            }
            if let Ok((_, n, k)) = parse_shape(&text) {
                assert!(n >= 1 && k >= 16 && k % 16 == 0, "{text:?}");
            }
            if let Ok(r) = parse_repeats(&text) {
                assert!((1..=MAX_REPEATS).contains(&r), "{text:?}");
            }
            if let Ok(mb) = parse_cold_mb(&text) {
                assert!(mb <= MAX_COLD_MB, "{text:?}");
            }
            if let Ok(gbps) = parse_peak_gbps(&text) {
                assert!(gbps.is_finite() && gbps > 0.0, "{text:?}");
            }
            if let Ok(steps) = parse_chain_steps(&text) {
                assert!((2..=MAX_CHAIN_STEPS).contains(&steps), "{text:?}");
            }
        }
        // Values at and past each limit.
        assert!(parse_ms(&format!("{MAX_BENCH_M}")).is_ok() && parse_ms(&format!("{}", MAX_BENCH_M + 1)).is_err());
        assert!(parse_repeats("100000").is_ok() && parse_repeats("100001").is_err() && parse_repeats("0").is_err());
        assert!(parse_cold_mb("1048576").is_ok() && parse_cold_mb("1048577").is_err());
        assert!(parse_chain_steps("2").is_ok() && parse_chain_steps("1").is_err() && parse_chain_steps("65").is_err());
        assert!(parse_peak_gbps("inf").is_err() && parse_peak_gbps("-0").is_err() && parse_peak_gbps("4800").is_ok());
    }
}
