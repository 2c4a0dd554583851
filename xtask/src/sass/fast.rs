//! The fast (tensor-core) family's part of `cargo xtask sass`: its hot loop and both models.
//!
//! A block of 8 warps computes 16 weight rows; each warp steps through 128-k chunks (2,048
//! weights: 16 rows x 128 k, 1,152 bytes with the scales), 8 mma steps per 8-token tile per chunk.
//! The hot loop is the outermost loop holding the HMMAs on the common path (aligned buffers,
//! whole chunks, every token live); the compiler unrolls it over two chunks, which the HMMA count
//! tells. Its instructions per chunk over 64 are warp-instructions per 32 weights, the same
//! figure as the exact family's instructions per weight per lane.

use super::devices::{ARCHS, BYTES_PER_WEIGHT, DEVICES, MODEL_N, occupancy};
use super::listing::{KernelStats, PerArch, loops};
use gemv_core::{FAST_TIERS, kernel_spec};
use std::fmt::Write;

/// Weights one warp covers per chunk, over 32: warp-instructions per chunk / this = per 32 weights.
const CHUNK_WEIGHTS_PER_LANE: f64 = 2048.0 / 32.0;
/// Bytes of weights (packed and scales) one warp loads per chunk.
const CHUNK_BYTES: f64 = 1152.0;
/// Chunks of weights in flight per warp while one computes: the next one in registers, the one
/// after it as an L2 prefetch.
const CHUNKS_IN_FLIGHT: f64 = 2.0;
const ROWS_PER_BLOCK: usize = 16;
const WARPS_PER_BLOCK: f64 = 8.0;

/// The hot loop of a fast kernel on the common path.
#[derive(Default, Clone, Copy)]
pub struct MmaLoop {
    instructions: usize,
    mmas: usize,
}

impl MmaLoop {
    /// Warp-instructions per 32 weights at the kernel's `tiles` (8-token mma tiles).
    fn per_32_weights(self, tiles: usize) -> f64 {
        let chunks = (self.mmas as f64 / (8 * tiles) as f64).max(1.0);
        self.instructions as f64 / chunks / CHUNK_WEIGHTS_PER_LANE
    }
}

/// The outermost loop holding HMMAs.
pub fn mma_loop(instructions: &[(u64, String)]) -> Option<MmaLoop> {
    let body = |(start, end): (u64, u64)| -> Vec<&str> {
        instructions.iter().filter(|(a, _)| (start..=end).contains(a)).map(|(_, t)| t.as_str()).collect()
    };
    let (start, end) = loops(instructions)
        .into_iter()
        .filter(|&range| body(range).iter().any(|t| t.starts_with("HMMA")))
        .max_by_key(|&(start, end)| end - start)?;
    let whole = body((start, end));
    Some(MmaLoop { instructions: whole.len(), mmas: whole.iter().filter(|t| t.starts_with("HMMA")).count() })
}

fn tiles(kernel: &str) -> usize {
    kernel_spec(kernel).map_or(1, |spec| spec.max_m.div_ceil(8))
}

/// The report's section on the fast family.
pub fn render(out: &mut String, stats: &PerArch<KernelStats>, loops: &PerArch<MmaLoop>) {
    let _ = writeln!(out, "## The fast family (tensor cores)\n");
    let _ = writeln!(
        out,
        "`w4a16_fast_m8` / `w4a16_fast_m16` (module `w4a16_fast`, `.target sm_80`): a block of 8 warps computes 16 \
         weight rows, its warps splitting K in 128-k chunks (2,048 weights and 1,152 bytes per warp and chunk, 8 mma \
         steps per 8-token tile). Hot loop: the outermost loop holding the HMMAs on the common path (aligned \
         buffers, whole chunks, every token live); per 32 weights = its warp-instructions per chunk / 64, every \
         token of the kernel's width included (the loop's cost does not depend on M). Target: <= 3.5.\n"
    );
    let _ = writeln!(
        out,
        "| arch | kernel | registers | spill stores | shared memory | SASS | blocks/SM | hot loop per chunk | per 32 weights |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for arch in ARCHS {
        let Some(arch_loops) = loops.get(arch) else { continue };
        for tier in FAST_TIERS {
            let (Some(s), Some(l)) = (stats.get(arch).and_then(|a| a.get(tier.kernel)), arch_loops.get(tier.kernel))
            else {
                continue;
            };
            let per_32 = l.per_32_weights(tiles(tier.kernel));
            let _ = writeln!(
                out,
                "| {arch} | {} | {} | {} | {} B | {} | {} | {:.0} | {per_32:.2} |",
                tier.kernel,
                s.registers,
                s.spill_bytes,
                s.shared_bytes,
                s.instructions,
                occupancy(arch, s),
                per_32 * CHUNK_WEIGHTS_PER_LANE
            );
        }
    }
    let _ = writeln!(
        out,
        "\nModels as for the exact family (below), with the fast kernels' geometry: a warp keeps {CHUNKS_IN_FLIGHT} \
         chunks ({CHUNK_BYTES} bytes each: the next in registers, the one after as an L2 prefetch) in flight while it \
         computes one; N / 16 blocks of 8 warps.\n"
    );
    for device in &DEVICES {
        let issue = device.sms * 4.0 * device.clock_ghz * 1e9;
        let needed_per_instruction = device.bandwidth_gbs * 1e9 / issue;
        let needed_in_flight = device.bandwidth_gbs / device.sms * device.latency_ns;
        let _ = writeln!(out, "**{}** ({}):\n", device.name, device.arch);
        let headers: Vec<String> = MODEL_N.iter().map(|n| format!("in flight, N = {n}")).collect();
        let _ = writeln!(out, "| kernel | M served | per 32 weights | issue model | {} |", headers.join(" | "));
        let _ = writeln!(out, "|---|---|---|---|{}", "---|".repeat(MODEL_N.len()));
        for tier in FAST_TIERS {
            let (Some(s), Some(l)) = (
                stats.get(device.arch).and_then(|a| a.get(tier.kernel)),
                loops.get(device.arch).and_then(|a| a.get(tier.kernel)),
            ) else {
                continue;
            };
            let per_32 = l.per_32_weights(tiles(tier.kernel));
            let supplied = 32.0 * BYTES_PER_WEIGHT / per_32;
            let issue_model = (supplied / needed_per_instruction).min(1.0) * 100.0;
            let cells: Vec<String> = MODEL_N
                .iter()
                .map(|&n| {
                    let blocks = n.div_ceil(ROWS_PER_BLOCK) as f64;
                    let resident = (occupancy(device.arch, s) as f64).min(blocks / device.sms);
                    let in_flight = resident * WARPS_PER_BLOCK * CHUNK_BYTES * CHUNKS_IN_FLIGHT;
                    format!("{:.1} KB ({:.0}%)", in_flight / 1024.0, (in_flight / needed_in_flight).min(1.0) * 100.0)
                })
                .collect();
            let low = if tier.width > 8 { 9 } else { 1 };
            let _ = writeln!(
                out,
                "| {} | {low}..={} | {per_32:.2} | {issue_model:.1}% | {} |",
                tier.kernel,
                tier.width,
                cells.join(" | ")
            );
        }
        let _ = writeln!(out);
    }
}
