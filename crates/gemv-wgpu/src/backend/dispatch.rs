//! Recording a launch: the cached pipeline of a tier, the argument windows, the parameters
//! (immediate data where the device has it, else a small uniform buffer) and the dispatch.

use super::{Binding, NAME, WgpuBackend};
use crate::error::WgpuError;
use crate::launch::{WgpuRange, WgpuWeights};
use crate::shader::{rows_per_workgroup, shader_source};
use gemv_backend::{GemvArgs, KernelHandle, Result, bf16_y_only, resolved_spec};
use gemv_core::{KernelSpec, Operand};

/// `Params` in the template: 12 u32 words.
pub(super) const PARAMS_BYTES: u64 = 48;

impl WgpuBackend {
    pub(super) fn pipeline(&self, spec: &'static KernelSpec) -> Result<wgpu::ComputePipeline> {
        self.cached_pipeline(spec.name, &self.pipeline_layout, || shader_source(spec, self.immediates))
    }

    /// The pipeline of entry point `name` (its module from `source`, compiled at first use and
    /// kept) over `layout`.
    pub(super) fn cached_pipeline(
        &self,
        name: &'static str,
        layout: &wgpu::PipelineLayout,
        source: impl FnOnce() -> String,
    ) -> Result<wgpu::ComputePipeline> {
        let mut pipelines = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pipeline) = pipelines.get(name) {
            return Ok(pipeline.clone());
        }
        let source = source();
        let pipeline = self.scoped(wgpu::ErrorFilter::Validation, &format!("compiling {name}"), || {
            let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(name),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
            self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(name),
                layout: Some(layout),
                module: &module,
                entry_point: Some(name),
                compilation_options: Default::default(),
                cache: None,
            })
        })?;
        tracing::debug!(kernel = name, "pipeline compiled");
        pipelines.insert(name, pipeline.clone());
        Ok(pipeline)
    }

    /// `workgroups` as a two-dimensional dispatch (width, height) within the device's limit per
    /// dimension, or [`WgpuError::Limit`].
    pub(super) fn dispatch_grid(&self, workgroups: u64) -> Result<(u64, u64)> {
        let max = u64::from(self.limits.max_compute_workgroups_per_dimension);
        let width = workgroups.min(max);
        let height = workgroups.div_ceil(width);
        if height > max {
            return Err(WgpuError::Limit {
                what: format!("dispatch of {workgroups} workgroups (max_compute_workgroups_per_dimension squared)"),
                requested: workgroups,
                limit: max * max,
            }
            .into());
        }
        Ok((width, height))
    }

    /// Records one compute pass of `pipeline` over `bindings` (binding number, window) with
    /// `params` as immediate data where the device has it, else in a uniform buffer at binding 4
    /// of `layout`, dispatching `width` x `height` workgroups.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_pass(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        name: &str,
        (pipeline, layout): (&wgpu::ComputePipeline, &wgpu::BindGroupLayout),
        bindings: &[(u32, &Binding)],
        params: &[u32],
        (width, height): (u64, u64),
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        self.scoped(wgpu::ErrorFilter::Validation, &format!("launching {name}"), || {
            let params_buffer = (!self.immediates).then(|| {
                let buffer = self.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("gemv params"),
                    size: PARAMS_BYTES,
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(params));
                buffer
            });
            let mut entries: Vec<wgpu::BindGroupEntry<'_>> = bindings
                .iter()
                .map(|&(binding, b)| wgpu::BindGroupEntry {
                    binding,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &b.buffer,
                        offset: b.start,
                        size: wgpu::BufferSize::new(b.size),
                    }),
                })
                .collect();
            if let Some(buffer) = &params_buffer {
                entries.push(wgpu::BindGroupEntry { binding: 4, resource: buffer.as_entire_binding() });
            }
            let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(name),
                layout,
                entries: &entries,
            });
            let mut pass =
                encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(name), timestamp_writes });
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            if params_buffer.is_none() {
                pass.set_immediates(0, bytemuck::cast_slice(params));
            }
            pass.dispatch_workgroups(width as u32, height as u32, 1);
        })
    }

    /// Validates `args` against this backend's buffers (ids, bounds, Y overlapping no input) and
    /// records one dispatch into `encoder` through the engine path's launch
    /// ([`Self::record_launch`], which [`Self::record_gemv`] calls for each launch of a plan), so
    /// every gate run through the trait exercises what an engine calls. An input that shares Y's
    /// buffer (wgpu cannot bind one buffer read-only and read-write in one dispatch) is first
    /// copied into a buffer of its own.
    pub(super) fn encode(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        kernel: KernelHandle,
        args: &GemvArgs,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        let spec = resolved_spec(NAME, kernel)?;
        let shape = args.validate(spec)?;
        bf16_y_only(NAME, args.y_format)?;
        let launch = args.launch_shape()?;
        let y = self.checked_range("y", args.y)?;
        let mut inputs = Vec::with_capacity(3);
        for (operand, range) in [(Operand::X, args.x), (Operand::Packed, args.packed), (Operand::Scales, args.scales)] {
            let needed = launch.bytes(operand);
            if range.buffer.id() == args.y.buffer.id() {
                let copy =
                    self.detached(self.binding(operand.name(), range.buffer.range(range.offset, needed))?, encoder);
                inputs.push((copy.buffer, copy.inner, needed as u64));
            } else {
                inputs.push((self.checked_range(operand.name(), range)?, range.offset as u64, range.len as u64));
            }
        }
        fn engine_range((buffer, offset, len): &(wgpu::Buffer, u64, u64)) -> WgpuRange<'_> {
            WgpuRange { buffer, offset: *offset, len: *len }
        }
        let weights = WgpuWeights {
            packed: engine_range(&inputs[1]),
            scales: engine_range(&inputs[2]),
            global_scale: args.global_scale,
            n: shape.n,
            k: shape.k,
        };
        let y = WgpuRange { buffer: &y, offset: args.y.offset as u64, len: args.y.len as u64 };
        self.record_launch(encoder, kernel, &weights, engine_range(&inputs[0]), y, &launch, timestamp_writes)
    }

    /// Records one dispatch of `spec` over bound windows of X, the packed weights, the scales
    /// and Y (in that order), X's and Y's rows `strides` elements apart: parameters as immediate
    /// data where the device has it (nothing created), else in a small uniform buffer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dispatch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        spec: &'static KernelSpec,
        [x, packed, scales, y]: [&Binding; 4],
        (m, n, k): (usize, usize, usize),
        (x_stride, y_stride): (usize, usize),
        global_scale: f32,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        let (width, height) = self.dispatch_grid((n as u64).div_ceil(u64::from(rows_per_workgroup(spec))))?;
        let params: [u32; 12] = [
            m as u32,
            n as u32,
            k as u32,
            global_scale.to_bits(),
            (x.inner / 2) as u32,
            packed.inner as u32,
            scales.inner as u32,
            (y.inner / 2) as u32,
            width as u32,
            x_stride as u32,
            y_stride as u32,
            0,
        ];
        let pipeline = self.pipeline(spec)?;
        let bindings = [(0, x), (1, packed), (2, scales), (3, y)];
        self.record_pass(
            encoder,
            spec.name,
            (&pipeline, &self.layout),
            &bindings,
            &params,
            (width, height),
            timestamp_writes,
        )
    }
}
