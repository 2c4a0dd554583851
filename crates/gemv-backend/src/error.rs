//! The public error of every backend: typed, with the kernel, buffer or shape it is about.

use gemv_core::CoreError;

/// Everything a backend call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A shape, length or plan error from gemv-core.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The handle was zero or not one of this backend's.
    #[error("kernel handle {raw} is not resolved on backend {backend}")]
    UnresolvedKernel {
        /// The raw handle.
        raw: u64,
        /// Backend name.
        backend: &'static str,
    },
    /// A range reaching past the end of its buffer.
    #[error("{what}: range [{offset}, {offset} + {len}) lies outside its buffer of {buffer_len} bytes")]
    RangeOutOfBounds {
        /// Which argument.
        what: &'static str,
        /// Byte offset.
        offset: usize,
        /// Byte length.
        len: usize,
        /// The buffer's size.
        buffer_len: usize,
    },
    /// Y shares bytes with an input.
    #[error("y overlaps {what} in buffer {buffer}")]
    OutputOverlaps {
        /// The input it overlaps.
        what: &'static str,
        /// Buffer id.
        buffer: u64,
    },
    /// A buffer id this backend does not know (freed, or from another backend).
    #[error("buffer {id} is unknown to backend {backend} (freed, or from another backend)")]
    UnknownBuffer {
        /// Buffer id.
        id: u64,
        /// Backend name.
        backend: &'static str,
    },
    /// A host slice whose length does not match the device range.
    #[error("{what}: host data has {found} bytes, the device range {expected}")]
    HostLengthMismatch {
        /// Which transfer.
        what: &'static str,
        /// Bytes of the device range.
        expected: usize,
        /// Bytes given.
        found: usize,
    },
    /// No usable device or driver: the backend cannot run here.
    #[error("backend {backend} is unavailable: {reason}")]
    Unavailable {
        /// Backend name.
        backend: &'static str,
        /// Why, in one line.
        reason: String,
    },
    /// A grouped launch forced onto a kernel of another family than its own.
    #[error("grouped kernel {kernel} is of the {kernel_family} family; the launch is in the {family} family")]
    KernelFamilyMismatch {
        /// The forced kernel.
        kernel: &'static str,
        /// Its family.
        kernel_family: &'static str,
        /// The launch's family.
        family: &'static str,
    },
    /// An operation this backend does not offer (yet).
    #[error("backend {backend} has no {what}")]
    Unsupported {
        /// Backend name.
        backend: &'static str,
        /// What it lacks.
        what: &'static str,
    },
    /// A request over a device limit (binding size, allocation, grid size, a 32-bit parameter).
    #[error("{backend}: {what} needs {requested} {unit}, over the limit of {limit} {unit}")]
    LimitExceeded {
        /// Backend name.
        backend: &'static str,
        /// What was too large.
        what: String,
        /// How much was requested, in `unit`.
        requested: u64,
        /// The limit, in `unit`.
        limit: u64,
        /// What `requested` and `limit` count: `bytes`, `blocks`, `elements`.
        unit: &'static str,
    },
    /// A kernel fault: an out-of-bounds access or a barrier/shuffle error (emulator), or a
    /// device-side error.
    #[error("kernel {kernel} faulted: {message}")]
    KernelFault {
        /// Kernel name.
        kernel: String,
        /// What happened, with block/thread/offset where known.
        message: String,
    },
    /// The device ran out of memory (an engine may free something and retry).
    #[error("{backend}: out of memory {what}")]
    OutOfMemory {
        /// Backend name.
        backend: &'static str,
        /// What was being done (the call and its size), e.g. "allocating 1048576 bytes".
        what: String,
        /// The driver's own error, where it gives one.
        #[source]
        source: Option<DriverSource>,
    },
    /// Any other driver or runtime error.
    #[error("{backend}: {message}")]
    Device {
        /// Backend name.
        backend: &'static str,
        /// The driver's message with context.
        message: String,
        /// The driver's own error (e.g. cudarc's `DriverError`, whose code an engine can match),
        /// where it gives one.
        #[source]
        source: Option<DriverSource>,
    },
}

/// A driver's own error, kept as the `source` of [`Error::Device`] and [`Error::OutOfMemory`].
pub type DriverSource = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result alias for backend calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;
