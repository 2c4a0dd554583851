//! Opens the CUDA backend in a binary whose cudarc links libcuda (the engine's choice).

use gemv_backend::GpuBackend;

fn main() {
    match gemv_cuda::CudaBackend::new(0) {
        Ok(backend) => println!("opened {}", backend.device_info().name),
        Err(error) => println!("no CUDA here: {error}"),
    }
}
