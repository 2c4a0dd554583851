//! The static check of the exact family's pipeline variants on the H200 (sm_90): per ring kernel
//! and the classic kernel of the same width, what the issue asks of a kernel that streams at memory
//! speed, on the three shapes the benchmarks time. A variant with under 24 KB of weights in flight
//! per SM, over 5% per-SM byte imbalance or any spill is marked "not shipped" with its reasons:
//! only a measurement may overrule that.

use super::devices::{DEVICES, WARPS_PER_BLOCK, occupancy};
use super::exact::{PassLoop, passes_in_flight};
use super::listing::{KernelStats, PerArch};
use gemv_core::{KERNELS, KernelSpec, TIERS, kernel_spec};
use std::fmt::Write;

/// The benchmarks' shapes (N, K): qkv, ffn-up, ffn-down.
const SHAPES: [(&str, usize, usize); 3] = [("qkv", 5120, 5120), ("ffn-up", 17408, 5120), ("ffn-down", 5120, 17408)];
/// Bytes of weights in flight per SM a shipped variant keeps, at least.
const MIN_IN_FLIGHT_BYTES: f64 = 24.0 * 1024.0;
/// Per-SM byte imbalance a shipped variant stays within.
const MAX_IMBALANCE: f64 = 0.05;
/// Bytes of one weight row a pass streams: 512 packed + 64 scale bytes.
const PASS_BYTES_PER_ROW: f64 = 576.0;

/// One shape's launch on the device: bytes in flight per SM, waves of resident blocks (rounds of a
/// persistent grid), and how unevenly the SMs' bytes fall. A grid sized by N hands out blocks of
/// equal bytes, so an SM runs at most ceil(blocks / SMs) of them; a persistent grid (SMs x resident
/// blocks) hands groups of `rows` rows out warp-major, group i to block i mod G, so SM s gets the
/// groups i = s mod SMs: at most ceil(groups / SMs).
struct Spread {
    in_flight: f64,
    waves: f64,
    imbalance: f64,
}

/// The rows a launch hands out (whole blocks of 8 x rows rows, or a persistent grid's whole groups
/// of `rows`) and the most of them one SM streams on a device of `sms` SMs (see [`Spread`]).
pub fn rows_per_sm(spec: &KernelSpec, n: usize, sms: usize) -> (usize, usize) {
    let unit = if spec.persistent { spec.rows } else { WARPS_PER_BLOCK * spec.rows };
    let units = n.div_ceil(unit);
    (units * unit, units.div_ceil(sms) * unit)
}

fn spread(spec: &KernelSpec, resident: usize, sms: f64, n: usize) -> Spread {
    let passes = passes_in_flight(spec) * PASS_BYTES_PER_ROW * spec.rows as f64;
    let (rows, busiest) = rows_per_sm(spec, n, sms as usize);
    let imbalance = busiest as f64 * sms / rows as f64 - 1.0;
    if spec.persistent {
        let groups = (rows / spec.rows) as f64;
        let warps_per_sm = (groups / sms).min((resident * WARPS_PER_BLOCK) as f64);
        return Spread {
            in_flight: warps_per_sm * passes,
            waves: groups / (sms * (resident * WARPS_PER_BLOCK).max(1) as f64),
            imbalance,
        };
    }
    let blocks = (rows / (WARPS_PER_BLOCK * spec.rows)) as f64;
    let per_sm = (resident as f64).min(blocks / sms);
    Spread {
        in_flight: per_sm * WARPS_PER_BLOCK as f64 * passes,
        waves: blocks / (sms * resident.max(1) as f64),
        imbalance,
    }
}

/// The kernels the check covers (and the device pack times side by side): every ring variant and
/// the kernel gemv-core's tier table runs at each of their widths.
pub fn covered() -> Vec<&'static KernelSpec> {
    let rings = KERNELS.iter().filter(|s| s.ring_depth > 0);
    let classic = TIERS
        .iter()
        .filter(|tier| rings.clone().any(|s| s.max_m == tier.width))
        .filter_map(|tier| kernel_spec(tier.kernel));
    let mut kernels: Vec<&KernelSpec> = rings.clone().chain(classic).collect();
    kernels.sort_by_key(|s| (s.max_m, s.persistent, s.ring_depth, s.rows));
    kernels
}

/// The section's text.
pub fn render(out: &mut String, stats: &PerArch<KernelStats>, loops: &PerArch<PassLoop>) {
    let device = &DEVICES[0];
    let (Some(arch_stats), Some(arch_loops)) = (stats.get(device.arch), loops.get(device.arch)) else { return };
    let issue = device.sms * 4.0 * device.clock_ghz * 1e9;
    let needed_per_instruction = device.bandwidth_gbs * 1e9 / issue;
    let _ = writeln!(out, "## Pipeline variants: the static check ({}, {})\n", device.name, device.arch);
    let _ = writeln!(
        out,
        "Every ring-pipeline variant of the exact family beside the classic kernel of its width (4 rows per \
         warp). Per shape: weights in flight per SM (resident blocks, capped by the blocks the shape gives each \
         SM, x 8 warps x rows x 576 bytes x passes in flight: 2 for the classic pipeline, which counts its L2 \
         prefetch, depth - 1 for a ring; a persistent grid (`_p`) keeps its share of the shape's warps, at most \
         its resident ones, busy), waves of resident blocks (rounds of a persistent grid's warps), and the per-SM \
         byte imbalance (an SM runs at most ceil(blocks / SMs) blocks of equal bytes; a persistent grid hands its \
         groups of rows out warp-major, so an SM gets at most ceil(groups / SMs)). A variant ships only with at least 24 KB in flight, at \
         most 5% imbalance and no spill on every shape, unless a measurement says otherwise. Instructions per \
         weight are at the kernel's full width; the issue model as above.\n"
    );
    let headers: Vec<String> = SHAPES.iter().map(|(name, n, k)| format!("{name} ({n}x{k})")).collect();
    let _ = writeln!(
        out,
        "| kernel | M | depth | regs | spills | blocks/SM | per weight | issue model | {} | verdict |",
        headers.join(" | ")
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|{}---|", "---|".repeat(SHAPES.len()));
    let mut shipped = 0;
    let mut failures: Vec<String> = Vec::new();
    for spec in covered() {
        let (Some(s), Some(pass)) = (arch_stats.get(spec.name), arch_loops.get(spec.name)) else { continue };
        let resident = occupancy(device.arch, s);
        let per_weight = pass.per_pass(spec.max_m) / (32 * spec.rows) as f64;
        let issue_model = (32.0 * super::devices::BYTES_PER_WEIGHT / per_weight / needed_per_instruction).min(1.0);
        let mut reasons = Vec::new();
        if s.spill_bytes > 0 {
            reasons.push(format!("{} B spilled", s.spill_bytes));
        }
        let cells: Vec<String> = SHAPES
            .iter()
            .map(|&(name, n, _)| {
                let spread = spread(spec, resident, device.sms, n);
                if spread.in_flight < MIN_IN_FLIGHT_BYTES {
                    reasons.push(format!("{name}: {:.1} KB in flight", spread.in_flight / 1024.0));
                }
                if spread.imbalance > MAX_IMBALANCE {
                    reasons.push(format!("{name}: {:.0}% imbalance", spread.imbalance * 100.0));
                }
                format!(
                    "{:.1} KB, {:.2} waves, {:.0}%",
                    spread.in_flight / 1024.0,
                    spread.waves,
                    spread.imbalance * 100.0
                )
            })
            .collect();
        shipped += usize::from(reasons.is_empty());
        failures.extend(reasons.iter().map(|r| r.split(": ").last().unwrap_or(r).to_string()));
        let verdict =
            if reasons.is_empty() { "ships".to_string() } else { format!("not shipped: {}", reasons.join("; ")) };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {resident} | {per_weight:.2} | {:.1}% | {} | {verdict} |",
            spec.name,
            spec.max_m,
            if spec.ring_depth == 0 { "classic".to_string() } else { spec.ring_depth.to_string() },
            s.registers,
            s.spill_bytes,
            issue_model * 100.0,
            cells.join(" | ")
        );
    }
    let imbalanced = failures.iter().filter(|r| r.ends_with("imbalance")).count();
    let _ = writeln!(
        out,
        "\n{shipped} of {} kernels pass the check; {imbalanced} of the {} failed rules are per-SM imbalance: blocks of \
         8 x rows rows fall unevenly on {} SMs unless a persistent grid hands the rows out in smaller groups.\n",
        covered().len(),
        failures.len(),
        device.sms
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemv_core::kernel_spec;

    fn spec(name: &str) -> &'static KernelSpec {
        kernel_spec(name).unwrap_or_else(|| panic!("{name} in the registry"))
    }

    #[test]
    fn blocks_sized_by_n_fall_unevenly_and_a_persistent_grid_evens_them_out() {
        // qkv, 132 SMs, two resident blocks: 160 blocks of 32 rows, 28 SMs with two of them.
        let by_n = spread(spec("w4a16_gemv_ring3_r4_b2"), 2, 132.0, 5120);
        assert!((by_n.imbalance - (2.0 * 132.0 / 160.0 - 1.0)).abs() < 1e-12);
        assert!((by_n.waves - 160.0 / 264.0).abs() < 1e-12);
        // Warp-major groups of 4 rows: 1,280 groups, at most 10 per SM against 9.7 on average.
        let persistent = spread(spec("w4a16_gemv_ring3_r4_b2_p"), 2, 132.0, 5120);
        assert!((persistent.imbalance - (10.0 * 132.0 / 1280.0 - 1.0)).abs() < 1e-12);
        assert!(persistent.imbalance < MAX_IMBALANCE);
        // 9.7 busy warps per SM, each with two passes of four rows in flight.
        assert!((persistent.in_flight - 1280.0 / 132.0 * 4.0 * 576.0 * 2.0).abs() < 1e-6);
    }

    #[test]
    fn the_check_covers_every_ring_kernel_and_the_classic_kernel_of_each_width() {
        let covered = covered();
        for ring in KERNELS.iter().filter(|s| s.ring_depth > 0) {
            assert!(covered.iter().any(|s| s.name == ring.name), "{}", ring.name);
            assert!(covered.iter().any(|s| s.ring_depth == 0 && s.max_m == ring.max_m), "classic of {}", ring.name);
        }
    }
}
