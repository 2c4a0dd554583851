//! Buffers in host memory, shared by the backends that execute on the CPU (the host reference
//! and the CUDA emulator). A launch borrows its inputs in place: the weights are never copied.

use crate::{BufferRange, BufferTable, DeviceBuffer, GemvArgs, Result};

/// Buffers as `Vec<u8>`.
#[derive(Debug)]
pub struct HostMemory {
    table: BufferTable<Vec<u8>>,
}

/// What a validated launch reads, borrowed from host memory.
#[derive(Debug)]
pub struct HostLaunchInputs<'a> {
    /// X `[m][K]` bf16 bits (copied: small, and bytes in memory need not be 2-byte aligned).
    pub x: Vec<u16>,
    /// Packed weights `[N][K/2]`.
    pub packed: &'a [u8],
    /// Scales `[N][K/16]`.
    pub scales: &'a [u8],
}

impl HostMemory {
    /// An empty memory; `backend` names it in errors.
    pub fn new(backend: &'static str) -> Self {
        Self { table: BufferTable::new(backend) }
    }

    /// A zero-filled buffer.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        Ok(self.table.insert(bytes, vec![0; bytes]))
    }

    /// Drops a buffer.
    pub fn free(&self, buffer: DeviceBuffer) -> Result<()> {
        self.table.remove(buffer).map(drop)
    }

    /// Copies host bytes in.
    pub fn upload(&self, dst: BufferRange, data: &[u8]) -> Result<()> {
        dst.check_host_len("upload", data.len())?;
        self.write_with("upload", dst, |bytes| bytes.copy_from_slice(data))
    }

    /// Copies bytes out.
    pub fn download(&self, src: BufferRange, out: &mut [u8]) -> Result<()> {
        src.check_host_len("download", out.len())?;
        let table = self.table.lock();
        out.copy_from_slice(&table.get("download", src)?[src.offset..src.offset + src.len]);
        Ok(())
    }

    /// Runs `f` on a range's bytes in place.
    pub fn write_with<T>(&self, what: &'static str, range: BufferRange, f: impl FnOnce(&mut [u8]) -> T) -> Result<T> {
        let mut table = self.table.lock();
        Ok(f(&mut table.get_mut(what, range)?[range.offset..range.offset + range.len]))
    }

    /// Runs `f` on the inputs of a validated launch, borrowed in place (the memory stays locked
    /// while `f` runs), and returns what it computed.
    pub fn with_launch_inputs<T>(&self, args: &GemvArgs, f: impl FnOnce(HostLaunchInputs<'_>) -> T) -> Result<T> {
        let table = self.table.lock();
        let bytes = |what, range: BufferRange| -> Result<&[u8]> {
            Ok(&table.get(what, range)?[range.offset..range.offset + range.len])
        };
        let x = bytes("x", args.x_read())?;
        let inputs = HostLaunchInputs {
            x: x.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect(),
            packed: bytes("packed", args.packed_read())?,
            scales: bytes("scales", args.scales_read())?,
        };
        let result = f(inputs);
        drop(table);
        Ok(result)
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
