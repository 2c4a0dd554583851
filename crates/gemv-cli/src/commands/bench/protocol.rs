//! The timing protocol: cold weights rotated through copies totalling at least
//! `cold_bytes`, device events where the backend has them, `launches` back-to-back launches per
//! timing after a warm-up, `rounds` rounds with the arms interleaved (rotated each round), and
//! the median per arm.

use super::{Arm, BenchOptions, Measurement};
use crate::commands::progress::progress;
use gemv_backend::{DeviceInfo, DeviceMatrix, GpuBackend, TimerKind, conformance};
use gemv_core::GemvShape;
use std::io::Write;

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Times every arm on one shape.
pub fn measure(
    backend: &dyn GpuBackend,
    arms: &[Arm],
    label: &str,
    n: usize,
    k: usize,
    options: &BenchOptions,
    peak: Option<f64>,
) -> Result<Vec<Measurement>, String> {
    let max_m = arms.iter().map(|a| a.m).max().unwrap_or(1);
    let weight_bytes = n * k / 2 + n * k / 16;
    let copies = super::memory::cold_copies(weight_bytes as u64, options.cold_bytes as u64) as usize;
    eprintln!(
        "bench: {label} (N = {n}, K = {k}): {copies} weight copies ({} MB) for cold weights",
        (copies * weight_bytes) >> 20
    );
    let weights = conformance::matrix(n, k, 1);
    let matrices = (0..copies)
        .map(|_| DeviceMatrix::upload(backend, &weights.view()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("uploading {copies} weight copies: {e}"))?;
    let x = backend.alloc(2 * max_m * k).map_err(|e| e.to_string())?;
    let y = backend.alloc(2 * max_m * n).map_err(|e| e.to_string())?;
    let x_data = conformance::activations(max_m, k, 2);
    backend.upload(x.whole(), bytemuck::cast_slice(&x_data)).map_err(|e| e.to_string())?;
    let copy_gbps = backend
        .time_device_copy(weight_bytes, options.launches)
        .map_err(|e| e.to_string())?
        .map(|t| 2.0 * (weight_bytes * options.launches) as f64 / t.as_secs_f64() / 1e9);

    let mut samples = vec![Vec::with_capacity(options.rounds); arms.len()];
    let total = options.rounds * arms.len();
    for round in 0..options.rounds {
        for step in 0..arms.len() {
            let index = (step + round) % arms.len();
            let arm = &arms[index];
            let list: Vec<_> = (0..options.launches)
                .flat_map(|i| {
                    let matrix = &matrices[i % copies];
                    arm.launches.iter().map(move |&(kernel, offset, rows)| (kernel, matrix.args(x, y, offset, rows)))
                })
                .collect();
            if round == 0 {
                backend.time_launches(&list[..arm.launches.len()], 1).map_err(|e| e.to_string())?;
            }
            let elapsed = backend.time_launches(&list, 1).map_err(|e| e.to_string())?;
            samples[index].push(elapsed.as_secs_f64() / options.launches as f64);
            progress(round * arms.len() + step + 1, total, &format!("bench {label}"));
        }
    }
    let _ = backend.free(x);
    let _ = backend.free(y);
    Ok(arms
        .iter()
        .zip(samples.iter_mut())
        .map(|(arm, samples)| {
            let seconds = median(samples);
            let bytes = GemvShape { m: arm.m, n, k }.bytes_moved() as f64;
            let gbps = bytes / seconds / 1e9;
            Measurement {
                shape: label.to_string(),
                n,
                k,
                tier: arm.tier.clone(),
                kernels: arm.kernels.clone(),
                m: arm.m,
                micros: seconds * 1e6,
                gbps,
                percent_peak: peak.map(|p| 100.0 * gbps / p),
                percent_copy: copy_gbps.map(|c| 100.0 * gbps / c),
            }
        })
        .collect())
}

fn percent(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.1}%"))
}

/// The human table.
pub fn print_table(
    out: &mut dyn Write,
    info: &DeviceInfo,
    options: &BenchOptions,
    peak: Option<f64>,
    rows: &[Measurement],
    notes: &[String],
) {
    let timer = match info.timer {
        TimerKind::DeviceEvents => "device events",
        TimerKind::HostClock => "host clock",
    };
    let _ = writeln!(
        out,
        "gemv bench on {} ({}, {}): {} rounds x {} launches, cold weights >= {} MB, timed by {timer}; peak {}",
        info.backend,
        info.name,
        info.architecture,
        options.rounds,
        options.launches,
        options.cold_bytes >> 20,
        peak.map_or("unknown (--peak-gbps)".into(), |p| format!("{p:.0} GB/s"))
    );
    let _ = writeln!(
        out,
        "{:<9} {:<44} {:>3} {:>11} {:>11} {:>7} {:>7}",
        "shape", "tier", "M", "time", "eff BW", "% peak", "% copy"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<9} {:<44} {:>3} {:>8.1} us {:>6.1} GB/s {:>7} {:>7}",
            r.shape,
            r.kernels,
            r.m,
            r.micros,
            r.gbps,
            percent(r.percent_peak),
            percent(r.percent_copy)
        );
    }
    for note in notes {
        let _ = writeln!(out, "note: {note}");
    }
    if matches!(
        info.kind,
        gemv_backend::DeviceKind::Reference
            | gemv_backend::DeviceKind::Cpu
            | gemv_backend::DeviceKind::Emulator
            | gemv_backend::DeviceKind::SoftwareGpu
    ) {
        let _ = writeln!(
            out,
            "note: {} ({}) is not a GPU: these times measure the CPU, not a kernel's weight streaming",
            info.backend, info.name
        );
    }
}

fn json_string(text: &str) -> serde_json::Value {
    serde_json::Value::String(text.to_string())
}

/// The machine-readable form.
pub fn to_json(
    info: &DeviceInfo,
    options: &BenchOptions,
    peak: Option<f64>,
    rows: &[Measurement],
    notes: &[String],
) -> String {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "shape": r.shape, "n": r.n, "k": r.k, "tier": r.tier, "kernels": r.kernels, "m": r.m,
                "time_us": r.micros, "effective_gbps": r.gbps,
                "percent_of_peak": r.percent_peak, "percent_of_copy": r.percent_copy,
            })
        })
        .collect();
    let value = serde_json::json!({
        "backend": info.backend,
        "device": info.name,
        "architecture": info.architecture,
        "timer": format!("{:?}", info.timer),
        "peak_gbps": peak,
        "rounds": options.rounds,
        "launches": options.launches,
        "cold_bytes": options.cold_bytes,
        "rows": rows,
        "notes": notes.iter().map(|n| json_string(n)).collect::<Vec<_>>(),
    });
    serde_json::to_string_pretty(&value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
