//! The grouped launch (a routed mixture-of-experts layer): its own bind group layout (the
//! single launch's four arguments, the global scales at binding 5, the routing at 6), its
//! pipelines, and the dispatch of a row block of every (token, slot) pair.

use super::Binding;
use super::{NAME, WgpuBackend};
use crate::shader::grouped_shader_source;
use gemv_backend::{GroupedArgs, Result};
use gemv_core::{GROUP_SIZE, GROUPED_OPERANDS, GroupedKernelSpec};

/// `GroupedParams` in the template: 12 u32 words, the size of a single launch's.
const GROUPED_PARAMS_WORDS: usize = 12;

/// The layout of a grouped launch's bindings: 0-2 and 5-6 read-only storage, 3 (Y) read-write,
/// 4 the parameters where they do not travel as immediate data.
pub(super) fn grouped_layout_entries(immediates: bool) -> Vec<wgpu::BindGroupLayoutEntry> {
    let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    };
    let storage = |read_only| wgpu::BufferBindingType::Storage { read_only };
    let mut entries = vec![
        entry(0, storage(true)),
        entry(1, storage(true)),
        entry(2, storage(true)),
        entry(3, storage(false)),
        entry(5, storage(true)),
        entry(6, storage(true)),
    ];
    if !immediates {
        entries.push(entry(4, wgpu::BufferBindingType::Uniform));
    }
    entries
}

/// What a grouped pass needs beside its bindings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupedDims {
    pub(crate) m: usize,
    pub(crate) top_k: usize,
    pub(crate) experts: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    /// One global scale per expert (else one for all).
    pub(crate) per_expert: bool,
}

impl WgpuBackend {
    /// Validates `args` and records the grouped launch into `encoder`: every argument bound as a
    /// window of its buffer (an input sharing Y's buffer copied first), one workgroup per row
    /// block of every pair.
    pub(super) fn encode_grouped(&self, encoder: &mut wgpu::CommandEncoder, args: &GroupedArgs) -> Result<()> {
        args.validate()?;
        let spec = args.kernel(false)?;
        let (e, n, k) = (args.experts, args.n, args.k);
        let reads = [
            args.x_read(),
            args.packed.buffer.range(args.packed.offset, e * n * k / 2),
            args.scales.buffer.range(args.scales.offset, e * n * k / GROUP_SIZE),
            args.global_scales,
            args.routing_read(),
        ];
        let y = self.binding("y", args.y_written())?;
        let mut inputs = Vec::with_capacity(reads.len());
        for (what, range) in GROUPED_OPERANDS.into_iter().zip(reads) {
            let binding = self.binding(what, range)?;
            inputs.push(if range.buffer.id() == args.y.buffer.id() {
                self.detached(binding, encoder)
            } else {
                binding
            });
        }
        let Ok(inputs) = <[Binding; 5]>::try_from(inputs) else { unreachable!("five inputs") };
        let dims =
            GroupedDims { m: args.m, top_k: args.top_k, experts: e, n, k, per_expert: args.per_expert_global_scales() };
        self.record_grouped_pass(encoder, spec, &dims, inputs, y)
    }

    /// Records one grouped pass of `spec` (an exact grouped kernel) over bound windows (X,
    /// packed, scales, global scales, routing; then Y), validated by the caller: one workgroup per
    /// row block of every pair.
    pub(crate) fn record_grouped_pass(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        spec: &'static GroupedKernelSpec,
        dims: &GroupedDims,
        inputs: [Binding; 5],
        y: Binding,
    ) -> Result<()> {
        let GroupedDims { m, top_k, experts, n, k, per_expert } = *dims;
        let pairs = (m * top_k) as u64;
        let (width, height) = self.dispatch_grid(pairs * (n as u64).div_ceil(spec.rows as u64))?;
        let per_expert = if per_expert { 1u32 << 31 } else { 0 };
        let params: [u32; GROUPED_PARAMS_WORDS] = [
            m as u32,
            n as u32,
            k as u32,
            top_k as u32,
            (inputs[0].inner / 2) as u32,
            inputs[1].inner as u32,
            inputs[2].inner as u32,
            (y.inner / 2) as u32,
            width as u32,
            experts as u32,
            (inputs[3].inner / 4) as u32 | per_expert,
            (inputs[4].inner / 4) as u32,
        ];
        let pipeline = self.cached_pipeline(spec.name, &self.grouped_pipeline_layout, || {
            grouped_shader_source(spec, self.immediates)
        })?;
        let [x, packed, scales, global_scales, routing] = &inputs;
        let bindings = [(0, x), (1, packed), (2, scales), (3, &y), (5, global_scales), (6, routing)];
        let layout = (&pipeline, &self.grouped_layout);
        self.record_pass(encoder, spec.name, layout, &bindings, &params, (width, height), None)?;
        tracing::trace!(kernel = spec.name, m, top_k, n, k, experts, backend = NAME, "grouped dispatch");
        Ok(())
    }
}
