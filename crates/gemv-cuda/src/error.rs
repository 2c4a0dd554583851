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
    /// libcublas cannot be loaded on this machine (the cuBLAS peer of `gemv bench`).
    #[error(
        "no cuBLAS found (libcublas could not be loaded; it ships with the CUDA toolkit, or from PyPI as nvidia-cublas)"
    )]
    NoCublas,
    /// A cuBLAS call failed; `call` says which and on what shape.
    #[error("{call}: cuBLAS status {status}")]
    Cublas {
        /// The call and its context.
        call: String,
        /// cuBLAS's status code, by name.
        status: String,
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
            CudaError::NoCublas => gemv_backend::Error::Unavailable { backend: "cuda", reason: error.to_string() },
            CudaError::Cublas { .. } => {
                gemv_backend::Error::Device { backend: "cuda", message: error.to_string(), source: None }
            }
            CudaError::Driver { call, source } => {
                if source.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                    gemv_backend::Error::OutOfMemory { backend: "cuda", what: call, source: Some(Box::new(source)) }
                } else {
                    let message = format!("{call}: {source}");
                    gemv_backend::Error::Device { backend: "cuda", message, source: Some(Box::new(source)) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUresult;
    use std::error::Error as _;

    /// An engine can tell out-of-memory from other driver errors and reach the driver's code.
    /// (Only the conversion runs: formatting a `DriverError` asks libcuda for its text.)
    #[test]
    fn out_of_memory_is_its_own_kind_with_the_drivers_error_as_source() {
        let error: gemv_backend::Error =
            CudaError::driver("allocating 1024 bytes")(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY)).into();
        match &error {
            gemv_backend::Error::OutOfMemory { backend: "cuda", what, .. } => assert_eq!(what, "allocating 1024 bytes"),
            _ => panic!("expected OutOfMemory"),
        }
        let source = error.source().expect("the driver's error is kept");
        let driver = source.downcast_ref::<DriverError>().expect("as cudarc's DriverError");
        assert_eq!(driver.0, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
}
