//! Tier shaders from the one WGSL template: the template's `{{...}}` holes are the only
//! per-tier difference.

use gemv_core::KernelSpec;

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
    let rows = rows_per_workgroup(kernel) as usize;
    let max_m = kernel.max_m;
    TEMPLATE
        .replace("{{NAME}}", kernel.name)
        .replace("{{MAX_M}}", &max_m.to_string())
        .replace("{{ROWS}}", &rows.to_string())
        .replace("{{SUMS}}", &(rows * max_m * WORKGROUP_SIZE as usize).to_string())
        .replace("{{ACC}}", &(rows * max_m).to_string())
        .replace("{{WS}}", &(rows * 16).to_string())
        .replace(
            "{{PARAMS}}",
            if immediates {
                "var<immediate> params: Params;"
            } else {
                "@group(0) @binding(4) var<uniform> params: Params;"
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemv_core::{Family, family_kernels};

    #[test]
    fn every_tier_fills_every_hole_and_parses() {
        for (spec, immediates) in family_kernels(Family::Exact).flat_map(|spec| [(spec, false), (spec, true)]) {
            let source = shader_source(spec, immediates);
            assert!(!source.contains("{{"), "{}: unfilled template hole", spec.name);
            assert!(source.contains(&format!("fn {}(", spec.name)), "{}: entry point", spec.name);
            let module = wgpu::naga::front::wgsl::parse_str(&source)
                .unwrap_or_else(|e| panic!("{}: {}", spec.name, e.emit_to_string(&source)));
            let mut validator = wgpu::naga::valid::Validator::new(
                wgpu::naga::valid::ValidationFlags::all(),
                wgpu::naga::valid::Capabilities::IMMEDIATES,
            );
            if let Err(error) = validator.validate(&module) {
                panic!("{}: {}", spec.name, error.emit_to_string(&source));
            }
        }
    }
}
