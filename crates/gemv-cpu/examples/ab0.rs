// Temporary: interleaved A/B timing of kernel variants.
use gemv_backend::conformance;
use gemv_cpu::{CpuBackend, CpuWeights};

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args[0].parse().unwrap();
    let k: usize = args[1].parse().unwrap();
    let ms: Vec<usize> = args[2].split(',').map(|v| v.parse().unwrap()).collect();
    let variants: Vec<usize> = args[3].split(',').map(|v| v.parse().unwrap()).collect();
    let rounds: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(9);
    let threads: usize = args.get(5).and_then(|a| a.parse().ok()).unwrap_or(2);
    let cold: usize = args.get(6).and_then(|a| a.parse().ok()).unwrap_or(256);
    let backend = CpuBackend::new().unwrap().with_threads(threads);
    let w = conformance::matrix(n, k, 1);
    let bytes = n * k * 9 / 16;
    let copies = (cold << 20).div_ceil(bytes).max(1);
    let weights: Vec<CpuWeights> = (0..copies).map(|_| CpuWeights::new(&w.view())).collect();
    let maxm = *ms.iter().max().unwrap();
    let x = conformance::activations(maxm, k, 2);
    let mut y = vec![0u16; maxm * n];
    let launches: usize = std::env::var("L").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let mut times = vec![vec![Vec::new(); variants.len()]; ms.len()];
    let mut li = 0;
    for _ in 0..rounds {
        for (mi, &m) in ms.iter().enumerate() {
            for (vi, &v) in variants.iter().enumerate() {
                let _ = v;
                backend.gemv(&weights[li % copies], &x, k, &mut y, n, m).unwrap();
                let start = Instant::now();
                for _ in 0..launches {
                    backend.gemv(&weights[li % copies], &x, k, &mut y, n, m).unwrap();
                    li += 1;
                }
                times[mi][vi].push(start.elapsed().as_secs_f64() / launches as f64 * 1e6);
                if threads > 1 {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            }
        }
    }
    for (mi, &m) in ms.iter().enumerate() {
        let line: Vec<String> = variants
            .iter()
            .enumerate()
            .map(|(vi, v)| {
                let t = &mut times[mi][vi];
                t.sort_by(f64::total_cmp);
                format!("v{v} {:.1} ({:.1}-{:.1})", t[t.len() / 2], t[t.len() / 4], t[3 * t.len() / 4])
            })
            .collect();
        println!("M={m}: {} [{}]", line.join("  "), tasks());
    }
}
#[allow(dead_code)]
fn huge() -> String {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("AnonHuge") || l.starts_with("Rss"))
        .collect::<Vec<_>>()
        .join(" ")
}
#[allow(dead_code)]
fn tasks() -> String {
    let mut out = vec![];
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for e in dir.flatten() {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let after = stat.rsplit(')').next().unwrap_or("");
            let f: Vec<&str> = after.split_whitespace().collect();
            // fields after ')' start at index 0 = state (field 3)
            if f.len() > 36 {
                out.push(format!("cpu{} u{} s{}", f[36], f[11], f[12]));
            }
        }
    }
    out.join(", ")
}
