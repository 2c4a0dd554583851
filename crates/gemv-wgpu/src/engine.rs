//! The engine-facing path: launches on an engine's own device, buffers and command encoder.
//!
//! An engine that already renders or computes with wgpu hands over its `Device` and `Queue`
//! ([`WgpuBackend::from_device`]); each decode step it records launches over its own buffers,
//! at any offsets, into its own `CommandEncoder` ([`WgpuBackend::record_gemv`]) and submits
//! when it likes. Nothing is submitted, waited for or read back here, and where the device has
//! immediate data (`Features::IMMEDIATES`, which lavapipe and the desktop drivers offer) a launch
//! creates no buffer: the parameters travel in the command stream. (Without it, each launch
//! writes a 48-byte uniform buffer.)

use crate::backend::WgpuBackend;
use crate::launch::{WgpuGemv, WgpuRange};
use gemv_backend::{Error, KernelHandle, ResolvedTiers, Result, resolved_spec};
use gemv_core::{Family, FamilyChoice, GemvShape, LaunchShape, Operand, WIDEST_TIER};

impl WgpuBackend {
    /// A backend on an engine's device and queue (this crate's own path, [`WgpuBackend::new`],
    /// stays). The device's features and limits decide how parameters travel (see the module).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, adapter: wgpu::AdapterInfo) -> Self {
        Self::from_parts(device, queue, adapter)
    }

    /// Validates `launch` (shape, width, row strides, every range inside its buffer and large
    /// enough, bf16 ranges 2-byte aligned, Y in its own buffer) and records one dispatch of `kernel` into the
    /// engine's `encoder`. Nothing is submitted.
    pub fn record_gemv(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        kernel: KernelHandle,
        launch: &WgpuGemv<'_>,
    ) -> Result<()> {
        self.record_gemv_timed(encoder, kernel, launch, None)
    }

    /// Records every launch of the dispatch plan for any M (`launch.m`, rows of X and Y at their
    /// strides) in the family `family` picks on this backend (the fast family is CUDA's only: here
    /// `Fast` is refused and `Auto` is exact), each part validated and recorded by
    /// [`Self::record_gemv`]. Nothing is submitted.
    pub fn record_plan<'a>(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        tiers: &ResolvedTiers,
        family: FamilyChoice,
        launch: &WgpuGemv<'a>,
    ) -> Result<()> {
        let shape = LaunchShape::new(launch.m, launch.n, launch.k, launch.x_row_stride, launch.y_row_stride)?;
        shape.check_operand(Operand::X, launch.x.offset as usize, launch.x.len as usize)?;
        shape.check_operand(Operand::Y, launch.y.offset as usize, launch.y.len as usize)?;
        let (plan, handle): (_, fn(&ResolvedTiers, usize) -> KernelHandle) = match tiers.family(launch.m, family)? {
            Family::Exact => (tiers.plan(launch.m, WIDEST_TIER)?, ResolvedTiers::handle),
            Family::Fast => (tiers.fast_plan(launch.m)?, ResolvedTiers::fast_handle),
        };
        for step in &plan {
            let (part, x_start, y_start) = shape.part(step)?;
            let rows = |range: WgpuRange<'a>, start: usize, operand| WgpuRange {
                offset: range.offset + 2 * start as u64,
                len: part.bytes(operand) as u64,
                ..range
            };
            let part_launch = WgpuGemv {
                x: rows(launch.x, x_start, Operand::X),
                y: rows(launch.y, y_start, Operand::Y),
                m: step.rows,
                ..*launch
            };
            self.record_gemv(encoder, handle(tiers, step.tier), &part_launch)?;
        }
        Ok(())
    }

    /// [`Self::record_gemv`], with the pass's timestamp writes (the bench's timing).
    pub(crate) fn record_gemv_timed(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        kernel: KernelHandle,
        launch: &WgpuGemv<'_>,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        let spec = resolved_spec("wgpu", kernel)?;
        let shape = LaunchShape::new(launch.m, launch.n, launch.k, launch.x_row_stride, launch.y_row_stride)?;
        shape.check_width(spec)?;
        let ranges = [launch.x, launch.packed, launch.scales, launch.y];
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
        for (what, input) in [("x", launch.x), ("packed", launch.packed), ("scales", launch.scales)] {
            if input.buffer == launch.y.buffer {
                return Err(Error::OutputOverlaps { what, buffer: 0 });
            }
        }
        let window =
            |what, range: WgpuRange<'_>, len: usize| self.window(what, range.buffer.clone(), range.offset, len as u64);
        let x = window("x", launch.x, x_bytes)?;
        let packed = window("packed", launch.packed, shape.bytes(Operand::Packed))?;
        let scales = window("scales", launch.scales, shape.bytes(Operand::Scales))?;
        let y = window("y", launch.y, y_bytes)?;
        let strides = (launch.x_row_stride, launch.y_row_stride);
        self.dispatch(
            encoder,
            spec,
            [&x, &packed, &scales, &y],
            (m, n, k),
            strides,
            launch.global_scale,
            timestamp_writes,
        )
    }
}
