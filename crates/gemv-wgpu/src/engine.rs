//! The engine-facing path: launches on an engine's own device, buffers and command encoder.
//!
//! An engine that already renders or computes with wgpu hands over its `Device` and `Queue`
//! ([`WgpuBackend::from_device`]); each decode step it records launches over its own buffers,
//! at any offsets, into its own `CommandEncoder` ([`WgpuBackend::record_gemv`], one
//! `gemv_core::GemvCall` for any M) and submits
//! when it likes. Nothing is submitted, waited for or read back here, and where the device has
//! immediate data (`Features::IMMEDIATES`, which lavapipe and the desktop drivers offer) a launch
//! creates no buffer: the parameters travel in the command stream. (Without it, each launch
//! writes a 48-byte uniform buffer.)

use crate::backend::WgpuBackend;
use crate::launch::{WgpuRange, WgpuWeights};
use gemv_backend::{Error, GpuBackend, KernelHandle, Result, resolved_spec};
use gemv_core::{GemvCall, GemvShape, KernelSpec, LaunchShape, Operand};

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
