//! The engine-facing path: launches on an engine's own device, buffers and command encoder.
//!
//! An engine that already renders or computes with wgpu hands over its `Device` and `Queue`
//! ([`WgpuBackend::from_device`]); each decode step it records launches over its own buffers,
//! at any offsets, into its own `CommandEncoder` ([`WgpuBackend::record_gemv`], one
//! `gemv_core::GemvCall` for any M) and submits
//! when it likes; a routed mixture-of-experts layer is one call too
//! ([`WgpuBackend::record_grouped`], the routing read from the engine's buffer). Nothing is
//! submitted, waited for or read back here, and where the device has
//! immediate data (`Features::IMMEDIATES`, which lavapipe and the desktop drivers offer) a launch
//! creates no buffer: the parameters travel in the command stream. (Without it, each launch
//! writes a 48-byte uniform buffer.)

use crate::backend::{GroupedDims, WgpuBackend};
use crate::launch::{WgpuExperts, WgpuRange, WgpuWeights};
use gemv_backend::{Error, GpuBackend, KernelHandle, Result, resolved_spec};
use gemv_core::{
    CoreError, GROUPED_ALIGNMENTS, GROUPED_OPERANDS, GemvCall, GemvShape, GroupedCall, KernelSpec, KillSwitches,
    LaunchShape, Operand, select_family,
};

impl WgpuBackend {
    /// A backend on an engine's device and queue (this crate's own path, [`WgpuBackend::new`],
    /// stays). The device's features and limits decide how parameters travel (see the module).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, adapter: wgpu::AdapterInfo) -> Self {
        Self::from_parts(device, queue, adapter)
    }

    /// Records `call` into the engine's `encoder`: `y[t] = W x[t]` for its M tokens, X's and Y's
    /// rows at its strides, as every launch of the dispatch plan for that M (the family its
    /// policy picks: WGSL has the exact family only, so `Fast` is refused and `Auto` is exact).
    /// `x` and `y` are byte ranges starting at row 0 (2-byte aligned, Y in its own buffer). The
    /// call, the weights and both ranges are validated before anything is recorded; nothing is
    /// submitted.
    pub fn record_gemv<'a>(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        weights: &WgpuWeights<'_>,
        x: WgpuRange<'a>,
        y: WgpuRange<'a>,
        call: &GemvCall,
    ) -> Result<()> {
        let shape = call.shape(weights.n, weights.k)?;
        shape.check_operand(Operand::X, x.offset as usize, x.len as usize)?;
        shape.check_operand(Operand::Y, y.offset as usize, y.len as usize)?;
        let plan = self.tiers().plan_call(call)?;
        for planned in &plan {
            let (part, x_start, y_start) = shape.part(&planned.launch)?;
            let rows = |range: WgpuRange<'a>, start: usize, operand| WgpuRange {
                offset: range.offset + 2 * start as u64,
                len: part.bytes(operand) as u64,
                ..range
            };
            let (x_rows, y_rows) = (rows(x, x_start, Operand::X), rows(y, y_start, Operand::Y));
            self.record_launch(encoder, planned.kernel, weights, x_rows, y_rows, &part, None)?;
        }
        Ok(())
    }

    /// Records `call`'s routed layer into the engine's `encoder` as one grouped launch:
    /// `y[t][s] = W[ids[t][s]] x[t]` for its M tokens and top-k slots, X `[M][K]` bf16, the routing
    /// `[M][top_k]` u32 expert ids (read by the GPU: no host round trip; an id past E gives that
    /// pair a NaN row), Y `[M][top_k][N]` bf16, each output its expert's exact contract. Each
    /// touched expert's weights are read once however many pairs chose it. The call (WGSL has
    /// the exact family only: `Fast` is refused), the experts and every range (inside its buffer,
    /// long enough, X and Y 2-byte and the routing and global scales 4-byte aligned, Y in a
    /// buffer of its own) are validated before anything is recorded; nothing is submitted.
    pub fn record_grouped(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        experts: &WgpuExperts<'_>,
        x: WgpuRange<'_>,
        ids: WgpuRange<'_>,
        y: WgpuRange<'_>,
        call: &GroupedCall,
    ) -> Result<()> {
        let WgpuExperts { packed, scales, global_scales, experts: count, n, k } = *experts;
        let ranges = [x, packed, scales, global_scales, ids, y];
        call.check_operands(count, n, k, ranges.map(|r| r.len as usize))?;
        select_family(call.family(), false, KillSwitches::process(), gemv_core::Family::Exact)?;
        for ((what, range), align) in GROUPED_OPERANDS.into_iter().zip(ranges).zip(GROUPED_ALIGNMENTS) {
            if range.offset.checked_add(range.len).is_none_or(|end| end > range.buffer.size()) {
                return Err(Error::RangeOutOfBounds {
                    what,
                    offset: range.offset as usize,
                    len: range.len as usize,
                    buffer_len: range.buffer.size() as usize,
                });
            }
            if !range.offset.is_multiple_of(align as u64) {
                return Err(CoreError::Misaligned { what, offset: range.offset as usize, align }.into());
            }
        }
        for (what, input) in GROUPED_OPERANDS.into_iter().zip(&ranges[..5]) {
            if input.buffer == y.buffer {
                return Err(Error::OutputOverlaps { what, buffer: 0 });
            }
        }
        let (m, top_k) = (call.m(), call.top_k());
        let read = [2 * m * k, count * n * k / 2, count * n * k / 16, global_scales.len as usize, 4 * m * top_k];
        let mut inputs = Vec::with_capacity(read.len());
        for ((what, range), len) in GROUPED_OPERANDS.into_iter().zip(ranges).zip(read) {
            inputs.push(self.window(what, range.buffer.clone(), range.offset, len as u64)?);
        }
        let Ok(inputs) = inputs.try_into() else { unreachable!("five inputs") };
        let y = self.window("y", y.buffer.clone(), y.offset, (2 * m * top_k * n) as u64)?;
        let per_expert = global_scales.len != 4;
        let dims = GroupedDims { m, top_k, experts: count, n, k, per_expert };
        let spec = gemv_core::grouped_kernel(gemv_core::Family::Exact, m, top_k, count);
        self.record_grouped_pass(encoder, spec, &dims, inputs, y)
    }

    /// Records one dispatch of `kernel` (any registry kernel of the exact family, whatever the
    /// plan would pick: a benchmark's or a test's choice) for `call`, whose M must be within the
    /// kernel's width; the call's family policy does not apply. Validated like
    /// [`Self::record_gemv`].
    pub fn record_kernel(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        kernel: &'static KernelSpec,
        weights: &WgpuWeights<'_>,
        x: WgpuRange<'_>,
        y: WgpuRange<'_>,
        call: &GemvCall,
    ) -> Result<()> {
        let shape = call.shape(weights.n, weights.k)?;
        let handle = self.lookup_kernel(kernel.module, kernel.name);
        self.record_launch(encoder, handle, weights, x, y, &shape, None)
    }

    /// Validates one launch of `kernel` over `shape` (its width, every range inside its buffer
    /// and large enough, bf16 ranges 2-byte aligned, Y in its own buffer, 32-bit shader indices)
    /// and records it, with the pass's timestamp writes where given (the bench's timing).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_launch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        kernel: KernelHandle,
        weights: &WgpuWeights<'_>,
        x: WgpuRange<'_>,
        y: WgpuRange<'_>,
        shape: &LaunchShape,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        let spec = resolved_spec("wgpu", kernel)?;
        shape.check_width(spec)?;
        let ranges = [x, weights.packed, weights.scales, y];
        for (operand, range) in Operand::ALL.into_iter().zip(ranges) {
            let end = range.offset.checked_add(range.len).filter(|&end| end <= range.buffer.size());
            if end.is_none() {
                return Err(Error::RangeOutOfBounds {
                    what: operand.name(),
                    offset: range.offset as usize,
                    len: range.len as usize,
                    buffer_len: range.buffer.size() as usize,
                });
            }
            shape.check_operand(operand, range.offset as usize, range.len as usize)?;
        }
        let GemvShape { m, n, k } = shape.shape();
        let (x_bytes, y_bytes) = (shape.bytes(Operand::X), shape.bytes(Operand::Y));
        // Shader indices are 32-bit words.
        for (what, bytes) in [("x", x_bytes), ("packed", shape.bytes(Operand::Packed)), ("y", y_bytes)] {
            if bytes >= u32::MAX as usize / 2 {
                return Err(Error::LimitExceeded {
                    backend: "wgpu",
                    what: format!("{what} index range (shader indices are 32-bit)"),
                    requested: bytes as u64,
                    limit: u64::from(u32::MAX / 2),
                    unit: "bytes",
                });
            }
        }
        for (what, input) in [("x", x), ("packed", weights.packed), ("scales", weights.scales)] {
            if input.buffer == y.buffer {
                return Err(Error::OutputOverlaps { what, buffer: 0 });
            }
        }
        let window =
            |what, range: WgpuRange<'_>, len: usize| self.window(what, range.buffer.clone(), range.offset, len as u64);
        let x = window("x", x, x_bytes)?;
        let packed = window("packed", weights.packed, shape.bytes(Operand::Packed))?;
        let scales = window("scales", weights.scales, shape.bytes(Operand::Scales))?;
        let y = window("y", y, y_bytes)?;
        let strides = (shape.x_row_stride(), shape.y_row_stride());
        self.dispatch(
            encoder,
            spec,
            [&x, &packed, &scales, &y],
            (m, n, k),
            strides,
            weights.global_scale,
            timestamp_writes,
        )
    }
}
