//! `cargo xtask sass [--check]`: static metrics of the CUDA kernels for every target
//! architecture, written to docs/sass.md: registers, spills (must be 0), shared memory, static
//! SASS size and occupancy from the committed PTX; instructions per weight of the pass loop on the
//! common path at each M the plan serves; and two models per device (issue rate, bytes in flight).
//!
//! The common path (16-byte aligned weights, whole passes, every token of a slice live, no
//! staged activation overflowing) is counted on the same source compiled with `GEMV_SASS_COMMON_PATH`, which turns
//! the conditions that select the other paths into constants, so the pass loop holds only the
//! instructions that path executes. Staging (a loop per slice of staged tokens, or unrolled steps
//! that the threads without a chunk branch over) stages `tokens * 128 / 256` chunks per thread
//! and pass (8-k chunks of X spread over the block) at its code's mean cost per chunk, the rest
//! of the loop runs once per pass (the compiler may unroll the loop over several passes: two barriers
//! per pass and slice tell how many). A kernel's tokens per slice are read from its shared
//! memory (one staged token's bytes each, plus the scale table).

use crate::cuda_toolchain::Toolchain;
use crate::kernels::{Nvrtc, PTX_DIR, builds, compile};
use crate::util::root;
use gemv_core::{Family, KillSwitches, TIERS, TierMask, dispatch_plan, kernel_spec};
use std::collections::BTreeMap;
use std::fmt::Write;

pub const ARCHS: [&str; 7] = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120", "sm_121"];
const REPORT: &str = "docs/sass.md";
/// The define that selects the common path (see the kernel source).
const COMMON_PATH: &str = "GEMV_SASS_COMMON_PATH";
/// Launch geometry of the exact family (gemv-cuda's launch.rs and the kernel source agree; tests
/// check it): 8 warps per block, a pass is 64 groups, a lane owns two groups of a pass.
const WARPS_PER_BLOCK: usize = 8;
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
/// One NVFP4 weight: half a byte of code plus a sixteenth of a scale byte.
pub const BYTES_PER_WEIGHT: f64 = 0.5625;
/// Shapes whose bytes in flight the report states.
pub const MODEL_N: [usize; 3] = [1024, 5120, 17408];

#[derive(Default, Clone)]
pub struct KernelStats {
    pub registers: u32,
    /// Bytes of registers spilled to local memory (must be 0).
    pub spill_bytes: u32,
    /// Bytes loaded back from spills, or, with no spill stores, read through the call ABI (the
    /// plain fallback path is a called function).
    spill_loads: u32,
    pub shared_bytes: u32,
    pub instructions: usize,
}

/// The pass loop of a kernel on the common path: its instructions outside staging, staging's
/// instructions and the chunks they stage (staging loops' bodies and the blocks of unrolled
/// steps, one chunk each), and the block barriers in it (two per pass and slice; the compiler may
/// unroll the loop over several passes).
#[derive(Default, Clone, Copy)]
struct PassLoop {
    body: usize,
    staging: usize,
    /// Chunks staged by one pass through the code (two shared stores each): a loop's body counts
    /// one, each unrolled step one.
    chunks: usize,
    barriers: usize,
    /// Tokens staged per slice (two barriers per slice and pass).
    slice: usize,
}

impl PassLoop {
    /// Instructions one warp executes per pass at `m` tokens (the plan always fills the kernel):
    /// a thread stages `m * 128 / 256` chunks per pass (8 k of a token each) at the staging code's
    /// mean cost per chunk, and runs everything else once per pass.
    fn per_pass(self, m: usize) -> f64 {
        let slices = m.div_ceil(self.slice.max(1));
        let passes = (self.barriers as f64 / (2 * slices) as f64).max(1.0);
        let per_chunk = self.staging as f64 / self.chunks.max(1) as f64;
        self.body as f64 / passes + per_chunk * (m * 128) as f64 / 256.0
    }
}

fn rows(kernel: &str) -> usize {
    kernel_spec(kernel).map_or(1, |spec| spec.rows)
}

fn max_m(kernel: &str) -> usize {
    kernel_spec(kernel).map_or(1, |spec| spec.max_m)
}

/// `ptxas -v` stderr -> registers, spill bytes and shared memory per function (entries by name;
/// called device functions under their mangled names).
fn parse_ptxas(stderr: &str, stats: &mut BTreeMap<String, KernelStats>) {
    let mut current = String::new();
    for line in stderr.lines() {
        if let Some(rest) =
            line.split("Compiling entry function '").nth(1).or_else(|| line.split("Function properties for ").nth(1))
        {
            current = rest.split(['\'', ' ']).next().unwrap_or_default().trim().to_string();
        } else if line.contains("bytes spill stores") {
            let numbers: Vec<u32> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse().ok()).collect();
            // "N bytes stack frame, S bytes spill stores, L bytes spill loads"
            if let [_, stores, loads, ..] = numbers[..] {
                let entry = stats.entry(current.clone()).or_default();
                entry.spill_bytes = stores;
                entry.spill_loads = loads;
            }
        } else if let Some(rest) = line.split("Used ").nth(1) {
            let entry = stats.entry(current.clone()).or_default();
            entry.registers = rest.split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(0);
            entry.shared_bytes = rest
                .split(", ")
                .find(|part| part.ends_with("bytes smem"))
                .and_then(|part| part.split_whitespace().next()?.parse().ok())
                .unwrap_or(0);
        }
    }
}

/// `cuobjdump -sass` -> (function, [(address, instruction)]).
fn functions(sass: &str) -> Vec<(String, Vec<(u64, String)>)> {
    let mut functions: Vec<(String, Vec<(u64, String)>)> = Vec::new();
    for line in sass.lines() {
        if let Some(name) = line.split("Function : ").nth(1) {
            functions.push((name.trim().to_string(), Vec::new()));
            continue;
        }
        let Some((_, rest)) = line.trim_start().split_once("/*") else { continue };
        let Some((address, text)) = rest.split_once("*/") else { continue };
        let (Ok(address), Some(function)) = (u64::from_str_radix(address, 16), functions.last_mut()) else { continue };
        if let Some((instruction, _)) = text.split_once(';') {
            function.1.push((address, instruction.trim().to_string()));
        }
    }
    functions
}

/// Backward branches as (first address, last address) of the loop they close.
pub fn loops(instructions: &[(u64, String)]) -> Vec<(u64, u64)> {
    instructions
        .iter()
        .filter(|(_, text)| text.contains("BRA"))
        .filter_map(|(address, text)| {
            let hex = text.split("0x").nth(1)?;
            let target = u64::from_str_radix(hex.trim_matches(|c: char| !c.is_ascii_hexdigit()), 16).ok()?;
            (target < *address).then_some((target, *address))
        })
        .collect()
}

/// Predicated forward branches as (first, last address) of the instructions they skip.
fn skipped_blocks(instructions: &[(u64, String)]) -> Vec<(u64, u64)> {
    instructions
        .iter()
        .enumerate()
        .filter(|(_, (_, text))| text.starts_with('@') && text.contains("BRA"))
        .filter_map(|(index, (address, text))| {
            let hex = text.split("0x").nth(1)?;
            let target = u64::from_str_radix(hex.trim_matches(|c: char| !c.is_ascii_hexdigit()), 16).ok()?;
            let first = instructions.get(index + 1)?.0;
            let last = instructions.iter().take_while(|(a, _)| *a < target).last()?.0;
            (target > *address && first <= last).then_some((first, last))
        })
        .collect()
}

/// The pass loop: the outermost loop holding the FFMAs and a block barrier; staging is what it
/// holds with shared stores and no FFMA or barrier: loops, or blocks a branch skips.
fn pass_loop(instructions: &[(u64, String)]) -> Option<PassLoop> {
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
        .max_by_key(|&(start, end)| end - start)?;
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
    Some(PassLoop { body: whole.len() - staging, staging, chunks, barriers, slice: 0 })
}

/// Tokens per slice from a kernel's static shared memory (see `STAGED_TOKEN_BYTES`).
/// (The sm_89 build has no table.)
fn slice_tokens(name: &str, shared_bytes: u32) -> Result<usize, String> {
    let whole = |b: u32| (b > 0 && b.is_multiple_of(STAGED_TOKEN_BYTES)).then_some((b / STAGED_TOKEN_BYTES) as usize);
    shared_bytes.checked_sub(SCALE_TABLE_BYTES).and_then(whole).or_else(|| whole(shared_bytes)).ok_or(format!(
        "{name}: {shared_bytes} B of shared memory is not whole staged tokens, with or without the scale table \
         ({SCALE_TABLE_BYTES} + n x {STAGED_TOKEN_BYTES} B): update xtask/src/sass.rs with the kernel's layout"
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

/// An architecture's per-SM resources (CUDA programming guide, compute capability tables).
struct Sm {
    arch: &'static str,
    max_warps: usize,
    max_blocks: usize,
    shared_bytes: usize,
}

const SMS: [Sm; 7] = [
    Sm { arch: "sm_80", max_warps: 64, max_blocks: 32, shared_bytes: 164 << 10 },
    Sm { arch: "sm_86", max_warps: 48, max_blocks: 16, shared_bytes: 100 << 10 },
    Sm { arch: "sm_89", max_warps: 48, max_blocks: 24, shared_bytes: 100 << 10 },
    Sm { arch: "sm_90", max_warps: 64, max_blocks: 32, shared_bytes: 228 << 10 },
    Sm { arch: "sm_100", max_warps: 64, max_blocks: 32, shared_bytes: 228 << 10 },
    Sm { arch: "sm_120", max_warps: 48, max_blocks: 32, shared_bytes: 100 << 10 },
    Sm { arch: "sm_121", max_warps: 48, max_blocks: 32, shared_bytes: 100 << 10 },
];

/// Resident blocks per SM: the tightest of registers (65,536 per SM, allocated in units of 8 per
/// thread), shared memory (1 KB reserved per block), warps and the block limit.
pub fn occupancy(arch: &str, stats: &KernelStats) -> usize {
    let Some(sm) = SMS.iter().find(|sm| sm.arch == arch) else { return 0 };
    let threads = WARPS_PER_BLOCK * 32;
    let registers = (stats.registers as usize).div_ceil(8).max(1) * 8 * threads;
    let by_registers = 65536 / registers;
    let by_shared = sm.shared_bytes / (stats.shared_bytes as usize + 1024);
    let by_warps = sm.max_warps / WARPS_PER_BLOCK;
    by_registers.min(by_shared).min(by_warps).min(sm.max_blocks)
}

pub struct Device {
    pub name: &'static str,
    pub arch: &'static str,
    pub sms: f64,
    pub clock_ghz: f64,
    pub bandwidth_gbs: f64,
    pub latency_ns: f64,
    source: &'static str,
}

pub const DEVICES: [Device; 3] = [
    Device {
        name: "H200",
        arch: "sm_90",
        sms: 132.0,
        clock_ghz: 1.98,
        bandwidth_gbs: 4800.0,
        latency_ns: 700.0,
        source: "132 SMs at 1.98 GHz boost (the H100 SXM configuration), 4.8 TB/s HBM3e; 700 ns loaded memory latency \
                 assumed (600-800 ns is typical of HBM under load)",
    },
    Device {
        name: "B200",
        arch: "sm_100",
        sms: 148.0,
        clock_ghz: 1.965,
        bandwidth_gbs: 8000.0,
        latency_ns: 700.0,
        source: "148 SMs at 1.965 GHz, 8 TB/s HBM3e; 700 ns loaded latency assumed, as for H200",
    },
    Device {
        name: "GB10",
        arch: "sm_121",
        sms: 48.0,
        clock_ghz: 2.52,
        bandwidth_gbs: 273.0,
        latency_ns: 600.0,
        source: "48 SMs (6144 CUDA cores / 128) at 2.52 GHz, 273 GB/s LPDDR5x; 600 ns loaded latency assumed",
    },
];

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

pub type PerArch<T> = BTreeMap<&'static str, BTreeMap<String, T>>;

fn render(
    stats: &PerArch<KernelStats>,
    loops: &PerArch<PassLoop>,
    fast_loops: &PerArch<crate::sass_fast::MmaLoop>,
    ptx: &str,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# SASS report\n");
    let _ = writeln!(
        out,
        "Generated by `cargo xtask sass` from `{ptx}` with ptxas 13.0.88 (`-O3`) and cuobjdump 13.2.51; \
         `cargo xtask sass --check` fails when this file is stale. Do not edit by hand. Every figure is static \
         or modelled: nothing here was measured on a GPU.\n"
    );
    let _ = writeln!(
        out,
        "Columns: registers per thread; bytes of registers spilled (must be 0); static shared memory per block; \
         static SASS instructions (every path); resident 256-thread blocks per SM; the pass loop's instructions \
         per warp and pass on the common path (16-byte aligned weights, whole 64-group passes, every token live, \
         no staged activation overflowing) at the kernel's full width; and that divided by the weights a lane \
         covers per pass (32 x rows per warp): instructions per weight, all tokens included. The exact family has \
         two builds: sm_80 and sm_86 run `w4a16_gemv` (scales from a shared-memory table, X staged times 2^7), \
         sm_89 and newer `w4a16_gemv_sm89` (scales through `cvt.rn.f16x2.e4m3x2`, X staged times 2^14); each \
         architecture's table shows the build it runs.\n"
    );
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
    crate::sass_fast::render(&mut out, stats, fast_loops);
    out
}

/// Assembles, parses, renders; with `check`, compares with the committed report.
pub fn run(check: bool) -> Result<(), String> {
    let toolchain = Toolchain::find_or_install()?;
    let nvrtc = Nvrtc::find_or_install()?;
    let out_dir = root().join("target/sass");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let mut stats: PerArch<KernelStats> = BTreeMap::new();
    let mut loops: PerArch<PassLoop> = BTreeMap::new();
    let mut fast_loops: PerArch<crate::sass_fast::MmaLoop> = BTreeMap::new();
    let mut ptx_names = Vec::new();
    let all = builds()?;
    for (source, build) in &all {
        let stem = build.ptx;
        let ptx = format!("{PTX_DIR}/{stem}.ptx");
        ptx_names.push(ptx.clone());
        let common = out_dir.join(format!("{stem}.common.ptx"));
        compile(&nvrtc, source, build, &common, &[COMMON_PATH])?;
        // Each architecture is reported with the build it runs (`gemv_core::module_build`, what
        // gemv-cuda loads).
        let runs_on = |arch: &str| {
            let sm: i32 = arch.trim_start_matches("sm_").parse().unwrap_or(0);
            gemv_core::module_build(build.module, (sm / 10, sm % 10)).is_some_and(|runs| runs.ptx == build.ptx)
        };
        for arch in ARCHS.into_iter().filter(|arch| runs_on(arch)) {
            eprintln!("xtask: ptxas {ptx} for {arch}");
            let arch_flag = format!("-arch={arch}");
            let cubin = out_dir.join(format!("{stem}.{arch}.cubin"));
            let (_, stderr) =
                toolchain.output("ptxas", &[&arch_flag, "-O3", "-v", &ptx, "-o", &cubin.to_string_lossy()])?;
            let arch_stats = stats.entry(arch).or_default();
            parse_ptxas(&stderr, arch_stats);
            let (sass, _) = toolchain.output("cuobjdump", &["-sass", &cubin.to_string_lossy()])?;
            for (name, instructions) in functions(&sass) {
                arch_stats.entry(name).or_default().instructions = instructions.len();
            }
            let common_cubin = out_dir.join(format!("{stem}.common.{arch}.cubin"));
            toolchain.output(
                "ptxas",
                &[&arch_flag, "-O3", &common.to_string_lossy(), "-o", &common_cubin.to_string_lossy()],
            )?;
            let (sass, _) = toolchain.output("cuobjdump", &["-sass", &common_cubin.to_string_lossy()])?;
            for (name, instructions) in functions(&sass) {
                if kernel_spec(&name).is_some_and(|spec| spec.family == Family::Fast) {
                    let hot = crate::sass_fast::mma_loop(&instructions)
                        .ok_or(format!("{name} on {arch}: no mma loop found"))?;
                    fast_loops.entry(arch).or_default().insert(name, hot);
                    continue;
                }
                let mut pass = pass_loop(&instructions).ok_or(format!("{name} on {arch}: no pass loop found"))?;
                pass.slice = slice_tokens(&name, arch_stats.get(&name).map_or(0, |s| s.shared_bytes))?;
                loops.entry(arch).or_default().insert(name, pass);
            }
        }
    }
    let spills: Vec<String> = stats
        .iter()
        .flat_map(|(arch, stats)| {
            stats
                .iter()
                .filter(|(_, s)| s.spill_bytes > 0)
                .map(move |(k, s)| format!("{k} on {arch}: {} bytes", s.spill_bytes))
        })
        .collect();
    if !spills.is_empty() {
        return Err(format!("register spills: {}", spills.join("; ")));
    }
    let report = render(&stats, &loops, &fast_loops, &ptx_names.join(", "));
    let path = root().join(REPORT);
    if check {
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != report {
            return Err(format!("{REPORT} is stale: run `cargo xtask sass`"));
        }
        eprintln!("xtask: {REPORT} is fresh; no spills");
    } else {
        std::fs::write(&path, report).map_err(|e| format!("cannot write {REPORT}: {e}"))?;
        eprintln!("xtask: wrote {REPORT}; no spills");
    }
    Ok(())
}
