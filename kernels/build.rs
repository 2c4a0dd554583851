//! Tells dependents where the CUDA sources are: `DEP_GEMV_KERNELS_CUDA_DIR` in their build
//! scripts (gemv-cuda-emulator compiles them for the host).

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let cuda = std::path::Path::new(&manifest).join("cuda");
    println!("cargo::metadata=cuda_dir={}", cuda.display());
    println!("cargo::rerun-if-changed=build.rs");
}
