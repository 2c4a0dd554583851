//! The grouped kernels' section of docs/sass.md: registers, spills and shared memory per
//! architecture. Their loop is their single kernel's (a block runs it over one chunk of an
//! expert's pairs):
//! the exact family's ring kernels', the fast family's tiles', so the per-weight figures are
//! those kernels'.

use super::devices::ARCHS;
use super::listing::{KernelStats, PerArch};
use gemv_core::GROUPED_KERNELS;
use std::fmt::Write;

pub fn render(out: &mut String, stats: &PerArch<KernelStats>) {
    let _ = writeln!(out, "## Grouped kernels (a routed mixture-of-experts layer)\n");
    let _ = writeln!(
        out,
        "`w4a16_grouped_*` (module `w4a16_gemv`, both builds): the ring pipeline over one chunk of the pairs \
         routed to one expert (up to `batchN`), the chunk's pairs listed in shared memory beside the ring's \
         staged X. Their pass loop is the ring kernel's of the same width, rows and depth. \
         `w4a16_fast_grouped_m8` and `_m16` (module `w4a16_fast`, sm_80+, two blocks per SM): the fast \
         family's tile over a chunk of 8 or 16 pairs; their loop is `w4a16_fast_m8`'s and `_m16`'s.\n"
    );
    let _ = writeln!(out, "| arch | kernel | registers | spill stores | shared memory | SASS |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for arch in ARCHS {
        for spec in GROUPED_KERNELS {
            let Some(s) = stats.get(arch).and_then(|a| a.get(spec.name)) else { continue };
            let _ = writeln!(
                out,
                "| {arch} | {} | {} | {} | {} B | {} |",
                spec.name, s.registers, s.spill_bytes, s.shared_bytes, s.instructions
            );
        }
    }
    out.push('\n');
}
