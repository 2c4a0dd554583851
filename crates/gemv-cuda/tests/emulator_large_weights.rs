//! Weights past 2^31 bytes under the emulator (release only: 2.1 GB of weights, about half a
//! minute on two cores). `cargo xtask test` runs it with --release.

#[test]
#[cfg_attr(debug_assertions, ignore = "release-mode test: `cargo xtask test` runs it with --release")]
fn weights_past_2_gib_are_addressed_correctly() {
    let started = std::time::Instant::now();
    let emulator = gemv_cuda::CudaEmulator::new();
    if let Err(failure) = gemv_backend::conformance::weights_past_2_gib(&emulator) {
        panic!("cuda-emu: {failure}");
    }
    eprintln!("cuda-emu: weights past 2^31 bytes bit-exact in {:.1} s", started.elapsed().as_secs_f64());
}
