//! A buffer table in host memory, shared by the backends that execute on the CPU (the host
//! reference and the CUDA emulator), so both validate ids and ranges the same way.

use crate::{BufferRange, DeviceBuffer, Error, Result};
use std::collections::HashMap;
use std::sync::Mutex;

/// Buffers as `Vec<u8>` keyed by id.
#[derive(Debug)]
pub struct HostMemory {
    backend: &'static str,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    buffers: HashMap<u64, Vec<u8>>,
}

impl HostMemory {
    /// An empty table; `backend` names it in errors.
    pub fn new(backend: &'static str) -> Self {
        Self { backend, state: Mutex::new(State { next_id: 1, buffers: HashMap::new() }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a buffer half-registered: recover.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A zero-filled buffer.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.buffers.insert(id, vec![0; bytes]);
        Ok(DeviceBuffer::new(id, bytes))
    }

    /// Drops a buffer.
    pub fn free(&self, buffer: DeviceBuffer) -> Result<()> {
        self.lock().buffers.remove(&buffer.id()).map(|_| ()).ok_or(self.unknown(buffer))
    }

    fn unknown(&self, buffer: DeviceBuffer) -> Error {
        Error::UnknownBuffer { id: buffer.id(), backend: self.backend }
    }

    fn checked<'a>(&self, state: &'a mut State, what: &'static str, range: BufferRange) -> Result<&'a mut [u8]> {
        let data = state.buffers.get_mut(&range.buffer.id()).ok_or(self.unknown(range.buffer))?;
        if data.len() != range.buffer.len() || !range.in_bounds() {
            return Err(Error::RangeOutOfBounds { what, offset: range.offset, len: range.len, buffer_len: data.len() });
        }
        Ok(&mut data[range.offset..range.offset + range.len])
    }

    /// Copies host bytes in.
    pub fn upload(&self, dst: BufferRange, data: &[u8]) -> Result<()> {
        if data.len() != dst.len {
            return Err(Error::HostLengthMismatch { what: "upload", expected: dst.len, found: data.len() });
        }
        let mut state = self.lock();
        self.checked(&mut state, "upload", dst)?.copy_from_slice(data);
        Ok(())
    }

    /// Copies bytes out.
    pub fn download(&self, src: BufferRange, out: &mut [u8]) -> Result<()> {
        if out.len() != src.len {
            return Err(Error::HostLengthMismatch { what: "download", expected: src.len, found: out.len() });
        }
        let mut state = self.lock();
        out.copy_from_slice(self.checked(&mut state, "download", src)?);
        Ok(())
    }

    /// A copy of a range's bytes.
    pub fn read(&self, what: &'static str, range: BufferRange) -> Result<Vec<u8>> {
        let mut state = self.lock();
        Ok(self.checked(&mut state, what, range)?.to_vec())
    }

    /// Runs `f` on a range's bytes in place.
    pub fn write_with<T>(&self, what: &'static str, range: BufferRange, f: impl FnOnce(&mut [u8]) -> T) -> Result<T> {
        let mut state = self.lock();
        Ok(f(self.checked(&mut state, what, range)?))
    }
}

/// A launch's inputs copied out of host memory: exactly the bytes the shape needs.
#[derive(Debug, Clone, PartialEq)]
pub struct HostLaunchInputs {
    /// X `[m][K]` bf16 bits.
    pub x: Vec<u16>,
    /// Packed weights `[N][K/2]`.
    pub packed: Vec<u8>,
    /// Scales `[N][K/16]`.
    pub scales: Vec<u8>,
    /// The bytes of Y the launch writes: its first `m` rows.
    pub y_range: BufferRange,
}

impl HostMemory {
    /// Copies out what a validated launch reads, and names the range it writes.
    pub fn launch_inputs(&self, args: &crate::GemvArgs, shape: gemv_core::GemvShape) -> Result<HostLaunchInputs> {
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let x_bytes = self.read("x", args.x.buffer.range(args.x.offset, 2 * m * k))?;
        Ok(HostLaunchInputs {
            x: x_bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect(),
            packed: self.read("packed", args.packed.buffer.range(args.packed.offset, n * k / 2))?,
            scales: self.read("scales", args.scales.buffer.range(args.scales.offset, n * k / 16))?,
            y_range: args.y.buffer.range(args.y.offset, 2 * m * n),
        })
    }
}

/// Implements `alloc`, `free`, `upload` and `download` of [`GpuBackend`](crate::GpuBackend) by
/// delegating to a [`HostMemory`] field, for backends whose buffers live in host memory.
#[macro_export]
macro_rules! delegate_buffers_to_host_memory {
    ($field:ident) => {
        fn alloc(&self, bytes: usize) -> $crate::Result<$crate::DeviceBuffer> {
            self.$field.alloc(bytes)
        }
        fn free(&self, buffer: $crate::DeviceBuffer) -> $crate::Result<()> {
            self.$field.free(buffer)
        }
        fn upload(&self, dst: $crate::BufferRange, data: &[u8]) -> $crate::Result<()> {
            self.$field.upload(dst, data)
        }
        fn download(&self, src: $crate::BufferRange, out: &mut [u8]) -> $crate::Result<()> {
            self.$field.download(src, out)
        }
    };
}
