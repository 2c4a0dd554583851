//! Times the host reference on the 27B qkv/o shape: `cargo run --release -p gemv-mock --example
//! real_shape [N K M]`. Prints the median of five runs.

use gemv_backend::{DeviceMatrix, GpuBackend, ResolvedTiers};
use gemv_conformance as conformance;
use gemv_core::KillSwitches;
use gemv_mock::MockBackend;
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (n, k, m) = match args[..] {
        [n, k, m] => (n, k, m),
        _ => (5120, 5120, 8),
    };
    let backend = MockBackend::new();
    let tiers = ResolvedTiers::resolve(&backend, KillSwitches::process());
    let weights = conformance::matrix(n, k, 1);
    let x = conformance::activations(m, k, 2);
    let matrix = match DeviceMatrix::upload(&backend, &weights.view()) {
        Ok(matrix) => matrix,
        Err(error) => {
            eprintln!("upload failed: {error}");
            std::process::exit(2);
        }
    };
    let mut times = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        if let Err(error) = matrix.gemv(&tiers, &x, m, gemv_core::WIDEST_TIER) {
            eprintln!("gemv failed: {error}");
            std::process::exit(1);
        }
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    println!("host reference N={n} K={k} M={m}: median {:.3} s over 5 runs ({})", times[2], backend.device_info().name);
}
