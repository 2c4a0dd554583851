//! Tier shaders from the one WGSL template: the template's `{{...}}` holes are the only
//! per-tier difference.

use gemv_core::{GroupedKernelSpec, KernelSpec};

const TEMPLATE: &str = gemv_kernels::wgsl::W4A16_GEMV;

/// Partials per output, and the workgroup size.
pub const WORKGROUP_SIZE: u32 = 64;

/// Weight rows one workgroup computes (the registry's `rows`).
pub fn rows_per_workgroup(kernel: &KernelSpec) -> u32 {
    kernel.rows as u32
}

/// The WGSL module of one kernel; its entry point has the kernel's name. `immediates`: the
/// launch parameters arrive as immediate data rather than in a uniform buffer at binding 4.
pub fn shader_source(kernel: &KernelSpec, immediates: bool) -> String {
    specialise(gemv_kernels::wgsl::GEMV_ENTRY, "Params", (kernel.name, kernel.max_m, kernel.rows), immediates)
}

/// The WGSL module of one grouped kernel (a routed mixture-of-experts layer; bindings 5 and 6
/// hold the global scales and the routing); its entry point has the kernel's name.
pub fn grouped_shader_source(kernel: &GroupedKernelSpec, immediates: bool) -> String {
    specialise(gemv_kernels::wgsl::GROUPED_ENTRY, "GroupedParams", (kernel.name, kernel.max_m, kernel.rows), immediates)
}

/// The template with `entry` as its entry point, `params` the parameters' type, and the
/// kernel's name, width and rows per workgroup filled in.
fn specialise(entry: &str, params: &str, (name, max_m, rows): (&str, usize, usize), immediates: bool) -> String {
    TEMPLATE
        .replace("{{ENTRY}}", entry)
        .replace("{{NAME}}", name)
        .replace("{{MAX_M}}", &max_m.to_string())
        .replace("{{ROWS}}", &rows.to_string())
        .replace("{{SUMS}}", &(rows * max_m * WORKGROUP_SIZE as usize).to_string())
        .replace("{{ACC}}", &(rows * max_m).to_string())
        .replace("{{WS}}", &(rows * 16).to_string())
        .replace(
            "{{PARAMS}}",
            &if immediates {
                format!("var<immediate> params: {params};")
            } else {
                format!("@group(0) @binding(4) var<uniform> params: {params};")
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemv_core::{Family, family_kernels};

    #[test]
    fn every_tier_fills_every_hole_and_parses() {
        let single = family_kernels(Family::Exact)
            .map(|spec| (spec.name, shader_source(spec, false), shader_source(spec, true)));
        let grouped = gemv_core::GROUPED_KERNELS
            .iter()
            .filter(|spec| spec.family == Family::Exact)
            .map(|spec| (spec.name, grouped_shader_source(spec, false), grouped_shader_source(spec, true)));
        for (name, source) in single.chain(grouped).flat_map(|(name, a, b)| [(name, a), (name, b)]) {
            assert!(!source.contains("{{"), "{}: unfilled template hole", name);
            assert!(source.contains(&format!("fn {}(", name)), "{}: entry point", name);
            let module = wgpu::naga::front::wgsl::parse_str(&source)
                .unwrap_or_else(|e| panic!("{}: {}", name, e.emit_to_string(&source)));
            let mut validator = wgpu::naga::valid::Validator::new(
                wgpu::naga::valid::ValidationFlags::all(),
                wgpu::naga::valid::Capabilities::IMMEDIATES,
            );
            if let Err(error) = validator.validate(&module) {
                panic!("{}: {}", name, error.emit_to_string(&source));
            }
        }
    }
}
