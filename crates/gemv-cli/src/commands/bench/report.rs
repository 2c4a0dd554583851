//! `gemv bench`'s output: the table people read and the JSON tools read, from the same
//! measurements and notes.

use super::{BenchOptions, Measurement};
use gemv_backend::{DeviceInfo, TimerKind};
use std::io::Write;

/// A percentage as the table prints it, `-` where unknown.
pub(super) fn percent(value: Option<f64>) -> String {
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
) -> std::io::Result<()> {
    let timer = match info.timer {
        TimerKind::DeviceEvents => "device events",
        TimerKind::HostClock => "host clock",
    };
    writeln!(
        out,
        "gemv bench on {} ({}, {}): {} rounds x {} launches, cold weights >= {} MB, timed by {timer}; peak {}; \
         % copy = effective bandwidth over a copy timed in the same run",
        info.backend,
        info.name,
        info.architecture,
        options.rounds,
        options.launches,
        options.cold_mb,
        peak.map_or("unknown (--peak-gbps)".into(), |p| format!("{p:.0} GB/s"))
    )?;
    // A column no row fills (% peak where the peak is unknown) is left out.
    let with_peak = rows.iter().any(|r| r.percent_peak.is_some());
    let peak_column = |value: String| if with_peak { format!(" {value:>7}") } else { String::new() };
    writeln!(
        out,
        "{:<9} {:<44} {:>3} {:>11} {:>11}{} {:>7}",
        "shape",
        "tier",
        "M",
        "time",
        "eff BW",
        peak_column("% peak".into()),
        "% copy"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<9} {:<44} {:>3} {:>8.1} us {:>6.1} GB/s{} {:>7}",
            r.shape,
            r.kernels,
            r.m,
            r.micros,
            r.gbps,
            peak_column(percent(r.percent_peak)),
            percent(r.percent_copy)
        )?;
    }
    for note in notes {
        writeln!(out, "note: {note}")?;
    }
    if matches!(
        info.kind,
        gemv_backend::DeviceKind::Reference
            | gemv_backend::DeviceKind::Cpu
            | gemv_backend::DeviceKind::Emulator
            | gemv_backend::DeviceKind::SoftwareGpu
    ) {
        writeln!(
            out,
            "note: {} ({}) is not a GPU: these times measure the CPU, not a kernel's weight streaming",
            info.backend, info.name
        )?;
    }
    Ok(())
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
    readme_comparison: Option<&str>,
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
        "cold_bytes": options.cold_bytes(),
        "rows": rows,
        "notes": notes.iter().map(|n| json_string(n)).collect::<Vec<_>>(),
        "readme_comparison": readme_comparison,
    });
    serde_json::to_string_pretty(&value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
