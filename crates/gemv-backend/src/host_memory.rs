//! Buffers in host memory, shared by the backends that execute on the CPU (the host reference
//! and the CUDA emulator). A launch borrows its inputs in place: the weights are never copied.
//! Buffers are aligned like device allocations ([`DEVICE_ALIGNMENT`](crate::DEVICE_ALIGNMENT)), so the offsets a caller
//! picks decide alignment exactly as on a GPU.

use crate::aligned_bytes::AlignedBytes;
use crate::{BufferRange, BufferTable, DeviceBuffer, GemvArgs, GroupedArgs, Result};

/// Buffers as device-aligned bytes.
#[derive(Debug)]
pub struct HostMemory {
    table: BufferTable<AlignedBytes>,
}

/// The addresses of a validated launch's arguments in host memory, in place (not copies): what a
/// kernel running on the CPU receives as its device pointers. Valid only inside
/// [`HostMemory::with_launch_addresses`], which holds the memory locked meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct HostLaunchAddresses {
    /// X's first byte (its rows `x_row_stride` elements apart: `GemvArgs::x_read` is readable).
    pub x: *const u8,
    /// The packed weights' first byte (`N K / 2` bytes readable).
    pub packed: *const u8,
    /// The scales' first byte (`N K / 16` bytes readable).
    pub scales: *const u8,
    /// Y's first byte (its m rows of N elements, `y_row_stride` apart, are writable; nothing
    /// else is).
    pub y: *mut u8,
}

/// What a validated launch reads, borrowed from host memory.
#[derive(Debug)]
pub struct HostLaunchInputs<'a> {
    /// X `[m][K]` bf16 bits, its rows gathered from their strides (copied: small, and bytes in
    /// memory need not be 2-byte aligned).
    pub x: Vec<u16>,
    /// Packed weights `[N][K/2]`.
    pub packed: &'a [u8],
    /// Scales `[N][K/16]`.
    pub scales: &'a [u8],
}

/// The addresses of a validated grouped launch's ranges in host memory, in place (see
/// [`HostLaunchAddresses`]). Valid only inside [`HostMemory::with_grouped_addresses`].
#[derive(Debug, Clone, Copy)]
pub struct HostGroupedAddresses {
    /// X's first byte (`2 m K` readable).
    pub x: *const u8,
    /// The stacked packed weights' first byte (`E N K / 2` readable).
    pub packed: *const u8,
    /// The stacked scales' first byte (`E N K / 16` readable).
    pub scales: *const u8,
    /// The global scales' first byte (the range's length readable).
    pub global_scales: *const u8,
    /// The routing's first byte (`4 m top_k` readable).
    pub routing: *const u8,
    /// Y's first byte (`2 m top_k N` writable; nothing else is).
    pub y: *mut u8,
}

/// What a validated grouped launch reads, borrowed from host memory where it is bytes and
/// copied where it is wider values (bytes in memory need not be aligned for them).
#[derive(Debug)]
pub struct HostGroupedInputs<'a> {
    /// X `[m][K]` bf16 bits.
    pub x: Vec<u16>,
    /// Every expert's packed weights `[E][N][K/2]`.
    pub packed: &'a [u8],
    /// Every expert's scales `[E][N][K/16]`.
    pub scales: &'a [u8],
    /// One global scale, or one per expert.
    pub global_scales: Vec<f32>,
    /// Expert ids `[m][top_k]`, as stored (not yet checked against E).
    pub routing: Vec<u32>,
}

impl HostMemory {
    /// An empty memory; `backend` names it in errors.
    pub fn new(backend: &'static str) -> Self {
        Self { table: BufferTable::new(backend) }
    }

    /// A zero-filled buffer.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        Ok(self.table.insert(bytes, AlignedBytes::zeroed(bytes)))
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

    /// Writes a validated launch's Y, `y` as `[m][N]`, each row at its stride; the elements
    /// between rows are left as they are.
    pub fn write_y_rows<T: bytemuck::Pod>(&self, args: &GemvArgs, y: &[T]) -> Result<()> {
        let (n, stride, bytes) = (args.n, args.y_row_stride, std::mem::size_of::<T>());
        debug_assert_eq!(bytes, args.y_format.element_bytes(), "Y's elements are the format's");
        self.write_with("y", args.y_written(), |out| {
            for (t, row) in y.chunks_exact(n).take(args.m).enumerate() {
                out[bytes * t * stride..][..bytes * n].copy_from_slice(bytemuck::cast_slice(row));
            }
        })
    }

    /// Runs `f` on the inputs of a validated launch, borrowed in place (the memory stays locked
    /// while `f` runs), and returns what it computed.
    pub fn with_launch_inputs<T>(&self, args: &GemvArgs, f: impl FnOnce(HostLaunchInputs<'_>) -> T) -> Result<T> {
        let table = self.table.lock();
        let bytes = |what, range: BufferRange| -> Result<&[u8]> {
            Ok(&table.get(what, range)?[range.offset..range.offset + range.len])
        };
        let x = bytes("x", args.x_read())?;
        let row_bytes = 2 * args.k;
        // Row by row into a zeroed vector (a flat-mapped iterator of pairs cost 8% of a small
        // CPU-backend launch's profile).
        let mut x_values = vec![0u16; args.m * args.k];
        for (t, row) in x_values.chunks_exact_mut(args.k).enumerate() {
            let bytes = &x[2 * t * args.x_row_stride..][..row_bytes];
            for (value, pair) in row.iter_mut().zip(bytes.chunks_exact(2)) {
                *value = u16::from_le_bytes([pair[0], pair[1]]);
            }
        }
        let inputs = HostLaunchInputs {
            x: x_values,
            packed: bytes("packed", args.packed_read())?,
            scales: bytes("scales", args.scales_read())?,
        };
        let result = f(inputs);
        drop(table);
        Ok(result)
    }

    /// Runs `f` on the inputs of a validated grouped launch (the memory stays locked while `f`
    /// runs) and returns what it computed.
    pub fn with_grouped_inputs<T>(&self, args: &GroupedArgs, f: impl FnOnce(HostGroupedInputs<'_>) -> T) -> Result<T> {
        let table = self.table.lock();
        let bytes = |what, range: BufferRange| -> Result<&[u8]> {
            Ok(&table.get(what, range)?[range.offset..range.offset + range.len])
        };
        let words = |what, range| -> Result<Vec<u32>> {
            Ok(bytes(what, range)?.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
        };
        let packed_len = args.experts * args.n * args.k / 2;
        let inputs = HostGroupedInputs {
            x: bytes("x", args.x_read())?.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect(),
            packed: bytes("packed", args.packed.buffer.range(args.packed.offset, packed_len))?,
            scales: bytes("scales", args.scales.buffer.range(args.scales.offset, packed_len / 8))?,
            global_scales: words("global_scales", args.global_scales)?.into_iter().map(f32::from_bits).collect(),
            routing: words("routing", args.routing_read())?,
        };
        let result = f(inputs);
        drop(table);
        Ok(result)
    }

    /// Runs `f` with the addresses of a grouped launch's ranges in place, as
    /// [`Self::with_launch_addresses`] does for a single launch.
    pub fn with_grouped_addresses<T>(
        &self,
        args: &GroupedArgs,
        f: impl FnOnce(HostGroupedAddresses) -> T,
    ) -> Result<T> {
        let table = self.table.lock();
        let address = |what, range: BufferRange| -> Result<*mut u8> {
            let bytes = table.get(what, range)?;
            // `get` checked `offset + len <= bytes.len()`; `wrapping_add` never wraps here.
            Ok(bytes.base().wrapping_add(range.offset))
        };
        let addresses = HostGroupedAddresses {
            x: address("x", args.x_read())?,
            packed: address("packed", args.packed)?,
            scales: address("scales", args.scales)?,
            global_scales: address("global_scales", args.global_scales)?,
            routing: address("routing", args.routing_read())?,
            y: address("y", args.y_written())?,
        };
        let result = f(addresses);
        drop(table);
        Ok(result)
    }

    /// Writes a validated grouped launch's Y (`[m][top_k][N]`, contiguous).
    pub fn write_grouped_y(&self, args: &GroupedArgs, y: &[u16]) -> Result<()> {
        let range = args.y_written();
        range.check_host_len("y", 2 * y.len())?;
        self.write_with("y", range, |out| out.copy_from_slice(bytemuck::cast_slice(y)))
    }

    /// Runs `f` with the addresses of a launch's ranges in place: the inputs' first bytes and Y's
    /// first written byte (ranges checked against their buffers first). The memory stays locked
    /// while `f` runs, so nothing else reads or writes it; `f` may read the input ranges and
    /// write the first `m` rows of Y through the pointers, nothing else. X and Y keep the
    /// alignment their offsets give them (buffers start
    /// [`DEVICE_ALIGNMENT`](crate::DEVICE_ALIGNMENT)-aligned).
    pub fn with_launch_addresses<T>(&self, args: &GemvArgs, f: impl FnOnce(HostLaunchAddresses) -> T) -> Result<T> {
        let table = self.table.lock();
        let address = |what, range: BufferRange| -> Result<*mut u8> {
            let bytes = table.get(what, range)?;
            // `offset + len <= bytes.len()` was checked by `get`, so the offset stays inside the
            // allocation. `wrapping_add` keeps this free of `unsafe`; it never wraps here.
            Ok(bytes.base().wrapping_add(range.offset))
        };
        let addresses = HostLaunchAddresses {
            x: address("x", args.x_read())?,
            packed: address("packed", args.packed_read())?,
            scales: address("scales", args.scales_read())?,
            y: address("y", args.y_written())?,
        };
        let result = f(addresses);
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
