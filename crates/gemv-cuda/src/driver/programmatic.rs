//! A kernel enqueued as a programmatic dependent of the kernel before it on its stream
//! (`cuLaunchKernelEx` with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`), which
//! cudarc's launch builder does not offer.

use cudarc::driver::sys::{
    CUlaunchAttribute, CUlaunchAttributeID, CUlaunchAttributeValue, CUlaunchConfig, cuLaunchKernelEx,
};
use cudarc::driver::{CudaFunction, CudaStream, DriverError, LaunchConfig};
use std::ffi::c_void;

/// Enqueues `function` on `stream` over `config`'s grid with the kernel parameters `params` (one
/// pointer to each argument's value, in the kernel's order), allowed to start before the previous
/// kernel on the stream has finished.
///
/// # Safety
/// `params` matches `function`'s signature (count, order and size of each argument); every
/// pointer in it, and every device address among the values, stays valid as the kernel needs;
/// the kernel waits on the previous one (`griddepcontrol.wait`) before it touches memory that
/// kernel may write or read.
pub(super) unsafe fn launch_dependent(
    stream: &CudaStream,
    function: &CudaFunction,
    config: LaunchConfig,
    params: &mut [*mut c_void],
) -> Result<(), DriverError> {
    stream.context().bind_to_thread()?;
    // SAFETY: the attribute value is a plain C union of integers and structs of integers, for
    // which all-zero bytes are a valid value.
    let mut value: CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attribute = CUlaunchAttribute {
        id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let launch = CUlaunchConfig {
        gridDimX: config.grid_dim.0,
        gridDimY: config.grid_dim.1,
        gridDimZ: config.grid_dim.2,
        blockDimX: config.block_dim.0,
        blockDimY: config.block_dim.1,
        blockDimZ: config.block_dim.2,
        sharedMemBytes: config.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attribute,
        numAttrs: 1,
    };
    // SAFETY: `launch` and `attribute` outlive the call, which copies them; the function handle
    // belongs to the stream's context (bound above); the parameters are the caller's contract.
    unsafe { cuLaunchKernelEx(&launch, function.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }.result()
}
