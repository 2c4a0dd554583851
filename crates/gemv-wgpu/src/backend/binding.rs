//! Arguments bound as windows of their buffers: the start aligned down to the adapter's storage
//! offset alignment, the end rounded up to whole words, the binding-size limit checked.

use super::WgpuBackend;
use crate::error::WgpuError;
use gemv_backend::{BufferRange, Result};

/// One argument bound as a window of its buffer.
pub(crate) struct Binding {
    pub(super) buffer: wgpu::Buffer,
    pub(super) start: u64,
    pub(super) size: u64,
    /// Bytes from the window's start to the argument's first byte.
    pub(super) inner: u64,
}

pub(super) fn round_up4(value: u64) -> u64 {
    value.div_ceil(4) * 4
}

/// The whole 4-byte words around `len` bytes at `offset` (copies and writes need word
/// alignment): (window start, window size, the bytes' offset inside the window).
pub(super) fn word_window(offset: usize, len: usize) -> (u64, u64, usize) {
    let offset = offset as u64;
    let start = offset - offset % 4;
    (start, round_up4(offset + len as u64) - start, (offset - start) as usize)
}

impl WgpuBackend {
    /// The wgpu buffer behind `range`, after checking its id and the range's bounds.
    pub(super) fn checked_range(&self, what: &'static str, range: BufferRange) -> Result<wgpu::Buffer> {
        self.buffers.lock().get(what, range).cloned()
    }

    /// The window of `range` that is bound: start aligned down to the storage offset alignment,
    /// end rounded up to 4 bytes (buffers are allocated in whole words).
    pub(super) fn binding(&self, what: &'static str, range: BufferRange) -> Result<Binding> {
        let buffer = self.checked_range(what, range)?;
        self.window(what, buffer, range.offset as u64, range.len as u64)
    }

    /// The bound window of `len` bytes at `offset` of `buffer` (see [`Self::binding`]).
    pub(crate) fn window(&self, what: &str, buffer: wgpu::Buffer, offset: u64, len: u64) -> Result<Binding> {
        let align = u64::from(self.limits.min_storage_buffer_offset_alignment.max(4));
        let start = offset - offset % align;
        let end = round_up4(offset + len);
        let size = end - start;
        if size > self.limits.max_storage_buffer_binding_size {
            return Err(WgpuError::Limit {
                what: format!("binding {what} (max_storage_buffer_binding_size of {})", self.info.name),
                requested: size,
                limit: self.limits.max_storage_buffer_binding_size,
            }
            .into());
        }
        Ok(Binding { buffer, start, size, inner: offset - start })
    }

    /// A copy of `binding`'s window in a fresh buffer (for an input sharing Y's buffer, which
    /// cannot be bound read-only and read-write in one dispatch).
    pub(super) fn detached(&self, binding: Binding, encoder: &mut wgpu::CommandEncoder) -> Binding {
        let copy = self.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gemv input copy"),
            size: binding.size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        encoder.copy_buffer_to_buffer(&binding.buffer, binding.start, &copy, 0, binding.size);
        Binding { buffer: copy, start: 0, size: binding.size, inner: binding.inner }
    }
}
