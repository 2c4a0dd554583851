//! gemv-wgpu's errors, with the adapter, operation or limit they are about; converted into the
//! public [`gemv_backend::Error`] at the trait boundary.

/// What can go wrong on wgpu.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WgpuError {
    /// No adapter matched (none at all, or none with the requested name).
    #[error("{0}")]
    NoAdapter(String),
    /// The adapter would not give a device.
    #[error("{adapter}: cannot open device: {source}")]
    DeviceRequest {
        /// Adapter name.
        adapter: String,
        /// wgpu's error.
        source: wgpu::RequestDeviceError,
    },
    /// wgpu reported a validation error for an operation.
    #[error("{operation}: {message}")]
    Operation {
        /// What was being done (compiling a kernel, launching, allocating, ...).
        operation: String,
        /// wgpu's message.
        message: String,
    },
    /// wgpu reported that the device is out of memory.
    #[error("{operation}: out of memory: {message}")]
    OutOfMemory {
        /// What was being done (e.g. allocating N bytes).
        operation: String,
        /// wgpu's message.
        message: String,
    },
    /// A device limit: a binding window, a buffer or a dispatch too large.
    #[error("{what} needs {requested} bytes, over the limit of {limit} bytes")]
    Limit {
        /// The limit's name and adapter.
        what: String,
        /// Requested size.
        requested: u64,
        /// The limit.
        limit: u64,
    },
}

impl From<WgpuError> for gemv_backend::Error {
    fn from(error: WgpuError) -> Self {
        match error {
            WgpuError::NoAdapter(reason) => gemv_backend::Error::Unavailable { backend: "wgpu", reason },
            WgpuError::DeviceRequest { .. } => {
                gemv_backend::Error::Unavailable { backend: "wgpu", reason: error.to_string() }
            }
            WgpuError::Limit { what, requested, limit } => {
                gemv_backend::Error::LimitExceeded { backend: "wgpu", what, requested, limit, unit: "bytes" }
            }
            WgpuError::Operation { .. } => {
                gemv_backend::Error::Device { backend: "wgpu", message: error.to_string(), source: None }
            }
            // wgpu's own error is not `Sync`, so its message is kept instead of the value.
            WgpuError::OutOfMemory { operation, message } => {
                gemv_backend::Error::OutOfMemory { backend: "wgpu", what: operation, source: Some(message.into()) }
            }
        }
    }
}

/// A failed wgpu operation as the public error.
pub(crate) fn device_error(operation: impl Into<String>, message: impl std::fmt::Display) -> gemv_backend::Error {
    WgpuError::Operation { operation: operation.into(), message: message.to_string() }.into()
}

/// An error wgpu reported in an error scope, out of memory as its own kind.
pub(crate) fn scope_error(operation: impl Into<String>, error: &wgpu::Error) -> gemv_backend::Error {
    let (operation, message) = (operation.into(), error.to_string());
    match error {
        wgpu::Error::OutOfMemory { .. } => WgpuError::OutOfMemory { operation, message }.into(),
        _ => WgpuError::Operation { operation, message }.into(),
    }
}
