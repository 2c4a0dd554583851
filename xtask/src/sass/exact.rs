//! The exact family's part of `cargo xtask sass`: its pass loop, its instructions per weight at
//! each M, and both models.

use super::devices::{ARCHS, BYTES_PER_WEIGHT, DEVICES, MODEL_N, WARPS_PER_BLOCK, occupancy};
use super::listing::{KernelStats, PerArch, loops, skipped_blocks};
use gemv_core::{Family, KillSwitches, TIERS, TierMask, dispatch_plan, kernel_spec};
use std::fmt::Write;

/// Launch geometry of the exact family (gemv-cuda's launch.rs and the kernel source agree; tests
/// check it): 8 warps per block, a pass is 64 groups, a lane owns two groups of a pass.
const WEIGHTS_PER_LANE_PASS: usize = 32;
/// Bytes of one weight row a pass streams: 512 packed + 64 scale bytes.
const PASS_BYTES_PER_ROW: f64 = 576.0;
/// Passes of weights in flight per warp while one computes: the next one in registers, the one
/// after it as an L2 prefetch.
const PASSES_IN_FLIGHT: f64 = 2.0;
/// Shared memory of one staged token (32 lanes x 36 floats, `kTokenStride` in the kernel source)
/// and of the scale table (256 codes x 4 bytes): a kernel's static shared memory is the table
/// plus one staged token per token of its slice.
const STAGED_TOKEN_BYTES: u32 = 4608;
const SCALE_TABLE_BYTES: u32 = 1024;
/// The pass loop of a kernel on the common path: its instructions outside staging, staging's
/// instructions and the chunks they stage (staging loops' bodies and the blocks of unrolled
/// steps, one chunk each), and the block barriers in it (two per pass and slice; the compiler may
/// unroll the loop over several passes).
#[derive(Default, Clone, Copy)]
pub struct PassLoop {
    body: usize,
    staging: usize,
    /// Chunks staged by one pass through the code (two shared stores each): a loop's body counts
    /// one, each unrolled step one.
    chunks: usize,
    barriers: usize,
    /// Tokens staged per slice (two barriers per slice and pass).
    pub slice: usize,
    /// A ring kernel's depth: its pass loop is unrolled over that many passes, of which only the
    /// first of each segment stages X (so its barriers do not count the passes). 0: classic.
    pub ring_depth: usize,
}

impl PassLoop {
    /// Instructions one warp executes per pass at `m` tokens (the plan always fills the kernel):
    /// a thread stages `m * 128 / 256` chunks per pass (8 k of a token each) at the staging code's
    /// mean cost per chunk, and runs everything else once per pass.
    pub fn per_pass(self, m: usize) -> f64 {
        let slices = m.div_ceil(self.slice.max(1));
        let passes = if self.ring_depth > 0 {
            self.ring_depth as f64
        } else {
            (self.barriers as f64 / (2 * slices) as f64).max(1.0)
        };
        let per_chunk = self.staging as f64 / self.chunks.max(1) as f64;
        self.body as f64 / passes + per_chunk * (m * 128) as f64 / 256.0
    }
}

/// Passes of weights a warp keeps in flight while it computes one: the classic pipeline's next
/// pass and L2 prefetch, or a ring's depth less the pass computing.
pub fn passes_in_flight(spec: &gemv_core::KernelSpec) -> f64 {
    if spec.ring_depth > 0 { (spec.ring_depth - 1) as f64 } else { PASSES_IN_FLIGHT }
}

fn rows(kernel: &str) -> usize {
    kernel_spec(kernel).map_or(1, |spec| spec.rows)
}

fn max_m(kernel: &str) -> usize {
    kernel_spec(kernel).map_or(1, |spec| spec.max_m)
}

/// The pass loop: the outermost loop holding the FFMAs and a block barrier (with `innermost`, the
/// innermost: a persistent kernel's loop over rounds holds its pass loop); staging is what it
/// holds with shared stores and no FFMA or barrier: loops, or blocks a branch skips.
pub fn pass_loop(instructions: &[(u64, String)], innermost: bool) -> Option<PassLoop> {
    let body = |(start, end): (u64, u64)| -> Vec<&str> {
        instructions.iter().filter(|(a, _)| (start..=end).contains(a)).map(|(_, t)| t.as_str()).collect()
    };
    let all = loops(instructions);
    let (start, end) = all
        .iter()
        .copied()
        .filter(|&range| {
            let b = body(range);
            b.iter().any(|t| t.contains("FFMA")) && b.iter().any(|t| t.starts_with("BAR"))
        })
        .max_by_key(|&(start, end)| if innermost { u64::MAX - (end - start) } else { end - start })?;
    let is_staging = |b: &Vec<&str>| {
        b.iter().any(|t| t.starts_with("STS")) && !b.iter().any(|t| t.contains("FFMA") || t.starts_with("BAR"))
    };
    let staging_loops: Vec<(u64, u64)> =
        all.iter().copied().filter(|&(s, e)| s > start && e < end).filter(|&range| is_staging(&body(range))).collect();
    // Unrolled steps (kernels whose one slice holds every token) are no loop but blocks that
    // threads without a chunk branch over: a predicated forward branch past shared stores (and
    // past no staging loop: the branch around a loop is the loop's own guard).
    let staging_blocks: Vec<(u64, u64)> = skipped_blocks(instructions)
        .into_iter()
        .filter(|&(s, e)| s > start && e < end && !staging_loops.iter().any(|&(ls, le)| ls <= e && s <= le))
        .filter(|&range| is_staging(&body(range)))
        .collect();
    // Unrolled steps nest (a step's guard skips the steps after it too): count each instruction once.
    let in_staging =
        |address: u64| staging_loops.iter().chain(&staging_blocks).any(|&(s, e)| (s..=e).contains(&address));
    let staged: Vec<&str> = instructions.iter().filter(|(a, _)| in_staging(*a)).map(|(_, t)| t.as_str()).collect();
    let staging = staged.len();
    let chunks = staged.iter().filter(|t| t.starts_with("STS")).count() / 2;
    let whole = body((start, end));
    let barriers = whole.iter().filter(|t| t.starts_with("BAR")).count();
    Some(PassLoop { body: whole.len() - staging, staging, chunks, barriers, slice: 0, ring_depth: 0 })
}

/// Tokens per slice from a kernel's static shared memory (see `STAGED_TOKEN_BYTES`).
/// (The sm_89 build has no table.)
pub fn slice_tokens(name: &str, shared_bytes: u32) -> Result<usize, String> {
    let whole = |b: u32| (b > 0 && b.is_multiple_of(STAGED_TOKEN_BYTES)).then_some((b / STAGED_TOKEN_BYTES) as usize);
    shared_bytes.checked_sub(SCALE_TABLE_BYTES).and_then(whole).or_else(|| whole(shared_bytes)).ok_or(format!(
        "{name}: {shared_bytes} B of shared memory is not whole staged tokens, with or without the scale table \
         ({SCALE_TABLE_BYTES} + n x {STAGED_TOKEN_BYTES} B): update xtask/src/sass/exact.rs with the kernel's layout"
    ))
}

/// Least-squares slope of y over x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let num: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    num / den
}

/// The kernel the dispatch plan picks for each M in 1..=8 (every tier present, default switches),
/// then the wide tiers at their width: gemv-core decides, the report only reads it.
fn planned_kernels() -> Vec<(usize, &'static str)> {
    let mut planned: Vec<(usize, &'static str)> = (1..=8)
        .filter_map(|m| {
            let plan = dispatch_plan(m, 8, TierMask::ALL, true).ok()?;
            plan.first().map(|launch| (m, TIERS[launch.tier].kernel_name(KillSwitches::default())))
        })
        .collect();
    planned.extend(TIERS.iter().filter(|tier| tier.width > 8).map(|tier| (tier.width, tier.kernel)));
    planned
}

/// The exact family's sections: per-architecture tables, instructions per weight at each M, and
/// the issue and bytes-in-flight models per device.
pub fn render(out: &mut String, stats: &PerArch<KernelStats>, loops: &PerArch<PassLoop>) {
    for arch in ARCHS {
        let (Some(arch_stats), Some(arch_loops)) = (stats.get(arch), loops.get(arch)) else { continue };
        let _ = writeln!(out, "## {arch}\n");
        let _ = writeln!(
            out,
            "| kernel | rows/warp | registers | spill stores | shared memory | SASS | blocks/SM | pass loop | per weight |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
        let mut ordered: Vec<(&String, &KernelStats)> = arch_stats
            .iter()
            .filter(|(name, _)| kernel_spec(name).is_some_and(|s| s.family == Family::Exact))
            .collect();
        ordered.sort_by_key(|(name, _)| (max_m(name), rows(name)));
        for (name, s) in ordered {
            let pass = arch_loops.get(name.as_str()).copied().unwrap_or_default();
            let per_pass = pass.per_pass(max_m(name));
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} B | {} | {} | {per_pass:.0} | {:.2} |",
                rows(name),
                s.registers,
                s.spill_bytes,
                s.shared_bytes,
                s.instructions,
                occupancy(arch, s),
                per_pass / (WEIGHTS_PER_LANE_PASS * rows(name)) as f64
            );
        }
        let callee_spills = arch_stats
            .iter()
            .filter(|(name, _)| kernel_spec(name).is_none())
            .map(|(_, s)| s.spill_bytes + s.spill_loads)
            .max();
        if let Some(spills) = callee_spills {
            let _ = writeln!(
                out,
                "\nThe plain fallback path, a called function run only by blocks whose X overflows the scaled path, \
                 moves at most {spills} bytes through local memory.\n"
            );
        }
    }

    let _ = writeln!(out, "## Instructions per weight at each M, and the per-token slope\n");
    let _ = writeln!(
        out,
        "The kernel the dispatch plan runs at each M (every tier present, default kill switches), common path, \
         sm_90 and sm_121. The per-token slope is the least-squares slope of instructions per weight over M = \
         1..8: what one more token costs, the family's headline figure (the contract needs one FFMA per weight \
         per token, so 1.0 is the floor).\n"
    );
    let _ = writeln!(out, "| M | kernel | sm_90 | sm_121 |");
    let _ = writeln!(out, "|---|---|---|---|");
    let per_weight = |arch: &str, kernel: &str, m: usize| -> Option<f64> {
        let pass = loops.get(arch)?.get(kernel)?;
        Some(pass.per_pass(m) / (WEIGHTS_PER_LANE_PASS * rows(kernel)) as f64)
    };
    for (m, kernel) in planned_kernels() {
        let cell = |arch| per_weight(arch, kernel, m).map_or("-".into(), |v| format!("{v:.2}"));
        let _ = writeln!(out, "| {m} | {kernel} | {} | {} |", cell("sm_90"), cell("sm_121"));
    }
    for arch in ["sm_90", "sm_121"] {
        let points: Vec<(f64, f64)> = planned_kernels()
            .into_iter()
            .filter(|&(m, _)| m <= 8)
            .filter_map(|(m, kernel)| per_weight(arch, kernel, m).map(|v| (m as f64, v)))
            .collect();
        if points.len() > 1 {
            let _ = writeln!(
                out,
                "\nPer-token slope on {arch}: **{:.2} instructions per weight per token**.",
                slope(&points)
            );
        }
    }
    let _ = writeln!(out);

    let _ = writeln!(out, "## Models: issue rate and bytes in flight\n");
    let _ = writeln!(
        out,
        "**Issue model**: a warp-instruction issues at one per clock per scheduler, four schedulers per SM, and \
         nothing else limits. A lane covers {BYTES_PER_WEIGHT} bytes per weight, so a warp-instruction streams 32 x \
         {BYTES_PER_WEIGHT} / (instructions per weight) bytes; the kernel keeps up with memory when that is at least \
         `bandwidth / (SMs x 4 x clock)`. Modelled efficiency = min(1, supplied / needed).\n"
    );
    let _ = writeln!(
        out,
        "**Bytes-in-flight model** (Little's law): memory delivers `bandwidth / SMs` bytes per ns to an SM and \
         each load takes `latency` ns, so an SM needs `bandwidth / SMs x latency` bytes of loads outstanding. A \
         warp keeps {PASSES_IN_FLIGHT} passes of weights in flight while it computes one (the next in registers, \
         the one after as an L2 prefetch): rows x {PASS_BYTES_PER_ROW} bytes each. Resident warps per SM at shape N are 8 per block times the lesser of the occupancy and the blocks N \
         gives each SM (N / (8 x rows) blocks over all SMs). Modelled efficiency = min(1, outstanding / needed); \
         the latency is an assumption, stated per device.\n"
    );
    for device in &DEVICES {
        let issue = device.sms * 4.0 * device.clock_ghz * 1e9;
        let needed_per_instruction = device.bandwidth_gbs * 1e9 / issue;
        let needed_in_flight = device.bandwidth_gbs / device.sms * device.latency_ns;
        let _ = writeln!(
            out,
            "**{}** ({}; {}): needs {needed_per_instruction:.2} bytes per warp-instruction and {:.1} KB of weight loads \
             in flight per SM.\n",
            device.name,
            device.arch,
            device.source,
            needed_in_flight / 1024.0
        );
        let headers: Vec<String> = MODEL_N.iter().map(|n| format!("in flight, N = {n}")).collect();
        let _ = writeln!(out, "| M | kernel | per weight | issue model | {} |", headers.join(" | "));
        let _ = writeln!(out, "|---|---|---|---|{}", "---|".repeat(MODEL_N.len()));
        let (Some(arch_stats), Some(_)) = (stats.get(device.arch), loops.get(device.arch)) else { continue };
        for (m, kernel) in planned_kernels() {
            let (Some(s), Some(ipw)) = (arch_stats.get(kernel), per_weight(device.arch, kernel, m)) else { continue };
            let supplied = 32.0 * BYTES_PER_WEIGHT / ipw;
            let issue_model = (supplied / needed_per_instruction).min(1.0) * 100.0;
            let cells: Vec<String> = MODEL_N
                .iter()
                .map(|&n| {
                    let blocks = n.div_ceil(WARPS_PER_BLOCK * rows(kernel)) as f64;
                    let resident = (occupancy(device.arch, s) as f64).min(blocks / device.sms);
                    let in_flight =
                        resident * WARPS_PER_BLOCK as f64 * rows(kernel) as f64 * PASS_BYTES_PER_ROW * PASSES_IN_FLIGHT;
                    format!("{:.1} KB ({:.0}%)", in_flight / 1024.0, (in_flight / needed_in_flight).min(1.0) * 100.0)
                })
                .collect();
            let _ = writeln!(out, "| {m} | {kernel} | {ipw:.2} | {issue_model:.1}% | {} |", cells.join(" | "));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "Reading: both models are upper bounds (no latency hiding limits in the first, no issue limit in the \
         second); the lesser of the two is the model's prediction. The exact contract costs one FFMA per weight per \
         token, so no exact kernel stays memory-bound on H200 beyond a few tokens: that is the tensor-core family's \
         job. docs/benchmarks.md holds what a GPU measured.\n"
    );
}
