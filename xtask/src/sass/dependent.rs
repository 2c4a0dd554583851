//! The builds for programmatic dependent launch (`gemv_core::ModuleBuild::dependent_launch`):
//! assembled for sm_90 beside the ordinary builds, which sm_90 runs otherwise, so the report shows
//! what the waits cost in registers and instructions, and a spill there fails the check like any
//! other.

use super::listing::KernelStats;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The architecture the dependent builds are assembled for: the first with
/// `griddepcontrol`.
pub const ARCH: &str = "sm_90";

/// `dependent`: each dependent build's kernels on [`ARCH`]; `ordinary`: the ordinary builds'
/// kernels on the same architecture.
pub fn render(
    out: &mut String,
    dependent: &BTreeMap<String, KernelStats>,
    ordinary: Option<&BTreeMap<String, KernelStats>>,
) {
    let _ = writeln!(out, "## Builds for programmatic dependent launch ({ARCH})\n");
    let _ = writeln!(
        out,
        "`w4a16_gemv_sm90_dependent` and `w4a16_fast_sm90_dependent`: the same kernels, which let the next \
         kernel launch at their start (`griddepcontrol.launch_dependents`) and read X and the routing, and write \
         Y, only after `griddepcontrol.wait`: the exact family after its first pass's (or ring's) weight loads, \
         the fast family after prefetching its first two chunks into L2, grouped kernels at their start. Loaded \
         only for launches that ask for it; the columns compare each kernel with the build {ARCH} runs \
         otherwise.\n"
    );
    let _ = writeln!(out, "| kernel | registers | ordinary | spill stores | SASS | ordinary |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let entries = dependent
        .iter()
        .filter(|(name, _)| gemv_core::kernel_spec(name).is_some() || gemv_core::grouped_kernel_spec(name).is_some());
    for (name, s) in entries {
        let plain = ordinary.and_then(|stats| stats.get(name));
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} |",
            s.registers,
            plain.map_or("-".to_string(), |p| p.registers.to_string()),
            s.spill_bytes,
            s.instructions,
            plain.map_or("-".to_string(), |p| p.instructions.to_string()),
        );
    }
    out.push('\n');
}
