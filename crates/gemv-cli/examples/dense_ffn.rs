//! An inference engine's dense FFN layer on gemv: resolve the tier table once, upload the three
//! NVFP4 projections once, then for M tokens run gate and up, SwiGLU on the host, and down.
//!
//! `cargo run --release -p gemv-cli --example dense_ffn -- [host|cpu|cuda-emu|wgpu|cuda] [M]`
//! (`cuda-emu` with `--features emulator`)
//!
//! `cargo test -p gemv-cli --example dense_ffn` checks that the layer writes the same bits on every
//! backend this machine has, for M that take one launch and M that the plan splits.

use gemv_backend::{DeviceMatrix, GpuBackend, ResolvedTiers};
use gemv_core::codec::{bf16_to_f32, f32_to_bf16};
use gemv_core::{KillSwitches, WIDEST_TIER, quantize_f32};

const D_MODEL: usize = 256;
const D_FF: usize = 688;

fn open(name: &str) -> Result<Box<dyn GpuBackend>, String> {
    Ok(match name {
        "host" => Box::new(gemv_mock::MockBackend::new()),
        "cpu" => Box::new(gemv_cpu::CpuBackend::new().map_err(|e| e.to_string())?),
        #[cfg(feature = "emulator")]
        "cuda-emu" => Box::new(gemv_cuda_emulator::CudaEmulator::new()),
        "wgpu" => Box::new(gemv_wgpu::WgpuBackend::new().map_err(|e| e.to_string())?),
        "cuda" => Box::new(gemv_cuda::CudaBackend::new(0).map_err(|e| e.to_string())?),
        other => return Err(format!("unknown backend {other:?} (host, cpu, cuda-emu, wgpu, cuda)")),
    })
}

/// Deterministic weights, as a checkpoint would provide them.
fn projection(rows: usize, cols: usize, seed: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| (((i * 2654435761 + seed) % 1000) as f32 / 1000.0 - 0.5) * 0.2).collect()
}

/// One decode step of the layer for M tokens: gate and up, SwiGLU, down. Returns Y ([M, D_MODEL]
/// bf16 bits) and the launches the plan chose.
fn layer(backend: &dyn GpuBackend, m: usize) -> Result<(Vec<u16>, Vec<String>), String> {
    // Once per model load: the tier table and the weights.
    let tiers = ResolvedTiers::resolve(backend, KillSwitches::process());
    if !tiers.has_batch4() {
        return Err(format!("backend {} cannot do NVFP4 batched decode (no batch4)", backend.name()));
    }
    let quantize =
        |rows, cols, seed| quantize_f32(&projection(rows, cols, seed), rows, cols).map_err(|e| e.to_string());
    let (gate_w, up_w, down_w) =
        (quantize(D_FF, D_MODEL, 1)?, quantize(D_FF, D_MODEL, 2)?, quantize(D_MODEL, D_FF, 3)?);
    let upload = |w: &gemv_core::Nvfp4Matrix| DeviceMatrix::upload(backend, &w.view()).map_err(|e| e.to_string());
    let (gate, up, down) = (upload(&gate_w)?, upload(&up_w)?, upload(&down_w)?);

    // Every decode step: M tokens through the layer. The dispatch plan picks the tiers.
    let x: Vec<u16> = (0..m * D_MODEL).map(|i| f32_to_bf16(((i % 97) as f32 - 48.0) / 48.0)).collect();
    let g = gate.gemv(&tiers, &x, m, WIDEST_TIER).map_err(|e| e.to_string())?;
    let u = up.gemv(&tiers, &x, m, WIDEST_TIER).map_err(|e| e.to_string())?;
    let hidden: Vec<u16> = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| {
            let g = bf16_to_f32(g);
            f32_to_bf16(g / (1.0 + (-g).exp()) * bf16_to_f32(u)) // SwiGLU
        })
        .collect();
    let y = down.gemv(&tiers, &hidden, m, WIDEST_TIER).map_err(|e| e.to_string())?;

    let plan: Vec<String> = tiers
        .plan(m, WIDEST_TIER)
        .map_err(|e| e.to_string())?
        .iter()
        .map(|l| format!("{}[{} rows]", tiers.kernel_name(gemv_core::Family::Exact, l.tier).unwrap_or("?"), l.rows))
        .collect();
    Ok((y, plan))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let backend = open(args.first().map_or("host", String::as_str))?;
    let m: usize = args.get(1).map_or(Ok(4), |s| s.parse()).map_err(|_| "M must be a number".to_string())?;
    let (y, plan) = layer(backend.as_ref(), m)?;
    println!(
        "backend {} ({}), M = {m}: dispatched on {}",
        backend.name(),
        backend.device_info().name,
        plan.join(" + ")
    );
    let first: Vec<String> = y[..4.min(y.len())].iter().map(|&b| format!("{:.4}", bf16_to_f32(b))).collect();
    println!("y[0][0..4] = [{}] (shape [{m}, {D_MODEL}])", first.join(", "));
    Ok(())
}

fn main() {
    if let Err(error) = run() {
        eprintln!("dense_ffn: {error}");
        std::process::exit(2);
    }
}

#[cfg(test)]
mod tests {
    use super::{D_MODEL, layer, open};
    use gemv_conformance::skip::{Requirement, skip};

    /// docs/cli.md's claim for this example: the same layer code on any backend, the same bits.
    /// The host reference is the oracle; M = 1 and 5 take one launch, 9 and 37 are split by the
    /// plan (37 = 32 + 5 with every tier present).
    #[test]
    fn the_layer_writes_the_same_bits_on_every_backend() {
        let mut names = vec!["cpu"];
        if cfg!(feature = "emulator") {
            names.push("cuda-emu");
        }
        match open("wgpu") {
            Ok(_) => names.push("wgpu"),
            Err(reason) => skip(Requirement::WgpuAdapter, &reason),
        }
        let host = open("host").expect("the host reference always opens");
        for m in [1, 5, 9, 37] {
            let (expected, _) = layer(host.as_ref(), m).expect("host layer");
            assert_eq!(expected.len(), m * D_MODEL);
            let nonzero = expected.iter().filter(|&&b| b & 0x7FFF != 0).count();
            assert!(nonzero > expected.len() / 2, "M={m}: the layer's output is mostly zero ({nonzero} non-zero)");
            for name in &names {
                let backend = open(name).expect("opened above or always available");
                let (found, plan) = layer(backend.as_ref(), m).unwrap_or_else(|e| panic!("{name}, M={m}: {e}"));
                if let Some(i) = (0..expected.len()).find(|&i| expected[i] != found[i]) {
                    panic!(
                        "{name}, M={m} ({}): y[{}][{}] expected {:#06x}, found {:#06x}",
                        plan.join(" + "),
                        i / D_MODEL,
                        i % D_MODEL,
                        expected[i],
                        found[i]
                    );
                }
            }
        }
    }
}
