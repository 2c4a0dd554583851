//! gemv-cuda's errors, with the call, kernel and device they are about; converted into the public
//! [`gemv_backend::Error`] at the trait boundary.

use cudarc::driver::DriverError;

/// What can go wrong on the CUDA paths.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// libcuda cannot be loaded on this machine.
    #[error("no CUDA driver found (libcuda could not be loaded)")]
    NoDriver,
    /// The driver loaded but the device does not exist.
    #[error("no CUDA device {ordinal} ({count} found)")]
    NoDevice {
        /// Requested ordinal.
        ordinal: usize,
        /// Devices found.
        count: i32,
    },
    /// The driver refused to count or open devices.
    #[error("cannot open CUDA device {ordinal}: {source}")]
    Open {
        /// Requested ordinal.
        ordinal: usize,
        /// The driver's error.
        source: DriverError,
    },
    /// A driver call failed; `call` says which and on what.
    #[error("{call}: {source}")]
    Driver {
        /// The call and its context (kernel, bytes).
        call: String,
        /// The driver's error.
        source: DriverError,
    },
    /// The emulator stopped a kernel (memory, barrier, shuffle or deadlock check).
    #[error("kernel {kernel} faulted: {message}")]
    Fault {
        /// Kernel name.
        kernel: String,
        /// Block, thread, region and offset.
        message: String,
    },
}

impl CudaError {
    /// A failed driver call, with context.
    pub(crate) fn driver(call: impl Into<String>) -> impl FnOnce(DriverError) -> CudaError {
        let call = call.into();
        move |source| CudaError::Driver { call, source }
    }
}

impl From<CudaError> for gemv_backend::Error {
    fn from(error: CudaError) -> Self {
        match error {
            CudaError::NoDriver | CudaError::NoDevice { .. } | CudaError::Open { .. } => {
                gemv_backend::Error::Unavailable { backend: "cuda", reason: error.to_string() }
            }
            CudaError::Fault { kernel, message } => gemv_backend::Error::KernelFault { kernel, message },
            CudaError::Driver { .. } => gemv_backend::Error::Device { backend: "cuda", message: error.to_string() },
        }
    }
}
