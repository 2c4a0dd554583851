//! Times the CPU backend on one shape: `cargo run --release -p gemv-cpu --example throughput --
//! N K M THREADS [PATH]`. A cache-resident N (e.g. 256 x 5120) shows the kernels' compute rate,
//! a large one the memory rate. Prints the fastest and the median of `GEMV_LAUNCHES` launches
//! (default 9); on a shared or virtual machine the fastest is the steadier compute figure.
//! `GEMV_COPIES` cycles that many weight copies (enough of them stream every launch from
//! memory); `GEMV_BACK_TO_BACK=20` times launches in groups the way `gemv bench` does.

use gemv_backend::{BenchTimers, DeviceMatrix, GpuBackend, ResolvedTiers};
use gemv_conformance as conformance;
use gemv_core::KillSwitches;
use gemv_cpu::{CpuBackend, SimdPath};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (n, k, m, threads) = (number(0, 256), number(1, 5120), number(2, 1), number(3, 1));
    let path = args.get(4).and_then(|name| SimdPath::from_name(name)).unwrap_or_else(SimdPath::best);
    let backend = match CpuBackend::with_path(path) {
        Ok(backend) => backend.with_threads(threads),
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(2);
        }
    };
    let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
    let weights = conformance::matrix(n, k, 1);
    let x = conformance::activations(m, k, 2);
    // GEMV_COPIES copies of the weights, launched in turn: enough of them (over the last-level
    // cache) make every launch stream its weights from memory.
    let copies = std::env::var("GEMV_COPIES").ok().and_then(|v| v.parse().ok()).unwrap_or(1usize).max(1);
    let matrices: Vec<_> = (0..copies)
        .map(|_| DeviceMatrix::upload(&backend, &weights.view()).unwrap_or_else(|e| panic!("upload: {e}")))
        .collect();
    let launches = std::env::var("GEMV_LAUNCHES").ok().and_then(|v| v.parse().ok()).unwrap_or(9usize).max(1);
    // GEMV_BACK_TO_BACK=B: time groups of B launches back to back through the backend, X and Y
    // allocated once, and report per-launch means of the groups, as `gemv bench` does (its rows
    // are medians of such means, B = 20); otherwise each launch is timed alone.
    let group = std::env::var("GEMV_BACK_TO_BACK").ok().and_then(|v| v.parse().ok()).unwrap_or(1usize).max(1);
    let mut times: Vec<f64> = if group > 1 {
        let (x_buffer, y_buffer) =
            (backend.alloc(2 * m * k).expect("alloc x"), backend.alloc(2 * m * n).expect("alloc y"));
        backend.upload(x_buffer.whole(), bytemuck::cast_slice(&x)).expect("upload x");
        let plan = tiers.plan(m, 32).unwrap_or_else(|e| panic!("plan: {e}"));
        let (plan, tiers) = (&plan, &tiers);
        let list: Vec<_> = (0..group)
            .flat_map(|i| {
                let matrix = &matrices[i % copies];
                plan.iter().map(move |l| (tiers.handle(l.tier), matrix.args(x_buffer, y_buffer, l.row_offset, l.rows)))
            })
            .collect();
        (0..launches.div_ceil(group))
            .map(|_| backend.time_launches(&list, 1).expect("launch").as_secs_f64() / group as f64)
            .collect()
    } else {
        (0..launches)
            .map(|launch| {
                let matrix = &matrices[launch % copies];
                let start = Instant::now();
                matrix.gemv(&tiers, &x, m, 32).unwrap_or_else(|e| panic!("launch: {e}"));
                start.elapsed().as_secs_f64()
            })
            .collect()
    };
    times.sort_by(f64::total_cmp);
    let (fastest, seconds) = (times[0], times[times.len() / 2]);
    let weights_count = (n * k) as f64;
    println!(
        "{} N={n} K={k} M={m} threads={threads}: fastest {:.1} us, median {:.1} us, {:.3} ns per weight (fastest), {:.3} ns per weight-token",
        path.name(),
        fastest * 1e6,
        seconds * 1e6,
        fastest * 1e9 / weights_count,
        fastest * 1e9 / weights_count / m as f64
    );
}
