//! With the `emulator` feature, compiles the CUDA kernels and the SIMT emulator for the host.

fn main() {
    #[cfg(feature = "emulator")]
    emulator::build();
}

#[cfg(feature = "emulator")]
mod emulator {
    use std::path::PathBuf;

    pub fn build() {
        let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
        let kernels = manifest.join("../../kernels/cuda");
        println!("cargo:rerun-if-changed={}", kernels.display());
        cc::Build::new()
            .cpp(true)
            .std("c++17")
            .opt_level(2)
            .define("GEMV_EMULATOR", None)
            .include(&kernels)
            .flag_if_supported("-Wno-unknown-pragmas")
            .flag_if_supported("-Wno-unused-parameter")
            .file(kernels.join("emu/kernels.cpp"))
            .file(kernels.join("emu/runtime.cpp"))
            .compile("gemv_cuda_emulator");
        println!("cargo:rustc-link-lib=pthread");
    }
}
