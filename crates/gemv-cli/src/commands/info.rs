//! `gemv info`: backends found, kernels resolved, kill-switch state, the tier each M gets, and the
//! family policy with the fast plan where the backend has the fast family.

use crate::backends::{BackendChoice, open};
use gemv_backend::{GpuBackend, ResolvedTiers};
use gemv_core::{
    EXACT_ONLY, Evidence, Family, FamilyChoice, KERNELS, KillSwitches, NO_BATCH8_RT, NO_EXACT_M_TIERS, NO_TUNED_TABLE,
    TierMask, WIDEST_TIER,
};
use std::fmt::Write;

/// Renders the report for every backend (or the one chosen).
pub fn report(choice: Option<BackendChoice>) -> String {
    let mut out = String::new();
    let switches = KillSwitches::process();
    let _ = writeln!(out, "kill switches (presence-checked):");
    let _ = writeln!(
        out,
        "  {NO_EXACT_M_TIERS:<24} {}",
        if switches.exact_m_tiers { "unset: exact-M tiers 5, 6, 7 on" } else { "set: widths 5, 6, 7 hidden" }
    );
    let _ = writeln!(
        out,
        "  {NO_BATCH8_RT:<24} {}",
        if switches.batch8_register_tiled { "unset: width 8 -> batch8_rt2" } else { "set: width 8 -> batch8" }
    );
    let _ = writeln!(
        out,
        "  {EXACT_ONLY:<24} {}",
        if switches.fast_family { "unset: the fast family may be dispatched" } else { "set: exact family only" }
    );
    let _ = writeln!(
        out,
        "  {NO_TUNED_TABLE:<24} {}",
        if switches.tuned_table {
            "unset: the tuned table may choose plans, kernels and auto's family"
        } else {
            "set: the rule everywhere, auto = exact"
        }
    );
    let _ = writeln!(
        out,
        "family policy: auto = the family the device's tuned table names (one for every M), exact where the table \
         knows no such device"
    );
    let choices: Vec<BackendChoice> = match choice {
        Some(BackendChoice::Auto) | None => BackendChoice::CONCRETE.to_vec(),
        Some(one) => vec![one],
    };
    let _ = writeln!(out, "\nbackends:");
    let mut opened = Vec::new();
    for choice in choices {
        match open(choice) {
            Ok(backend) => {
                let info = backend.device_info();
                let peak = info.peak_bandwidth_gbps.map_or("peak unknown".to_string(), |p| format!("{p:.0} GB/s peak"));
                let _ = writeln!(
                    out,
                    "  {:<9} available: {} [{}; {:?}; {peak}]",
                    choice.name(),
                    info.name,
                    info.architecture,
                    info.kind
                );
                opened.push(backend);
            }
            Err(reason) => {
                let _ = writeln!(out, "  {:<9} {reason}", choice.name());
            }
        }
    }
    // Backends whose kernels and plans agree share one report, headed by all their names.
    let mut groups: Vec<(Vec<&str>, String)> = Vec::new();
    for backend in &opened {
        let body = backend_report(backend.as_ref(), switches);
        match groups.iter_mut().find(|(_, existing)| *existing == body) {
            Some((names, _)) => names.push(backend.name()),
            None => groups.push((vec![backend.name()], body)),
        }
    }
    for (names, body) in &groups {
        let _ = write!(out, "\n{}:\n{body}", names.join(", "));
    }
    if opened.iter().any(|backend| backend.name() == "cpu") {
        cpu_paths(&mut out);
    }
    out
}

/// The CPU backend's SIMD path per M: forced, or calibrated now on its sample matrix (as the
/// first launch of each M in a process calibrates on that launch's weights).
fn cpu_paths(out: &mut String) {
    let Ok(cpu) = gemv_cpu::CpuBackend::new() else { return };
    let selection = cpu.selection();
    if let gemv_cpu::PathSelection::Forced { .. } = selection {
        let _ = writeln!(out, "\ncpu: SIMD path {selection} for every M");
        return;
    }
    let _ = writeln!(
        out,
        "\ncpu: SIMD path per M, calibrated (each path timed on a slice of a sample matrix, one thread; the \
         others' time over the chosen one's; a process calibrates on its first launch of each M)"
    );
    for m in 1..=gemv_cpu::CALIBRATED_TOKENS {
        if let Some(calibration) = cpu.calibrate(m) {
            let _ = writeln!(out, "  {}", calibration.summary());
        }
    }
}

/// One backend's kernels, tier per M and fast plan, without its name (backends that agree share it).
fn backend_report(backend: &dyn GpuBackend, switches: KillSwitches) -> String {
    let mut text = String::new();
    let out = &mut text;
    let _ = writeln!(out, "  kernels (module, family)");
    let width = KERNELS.iter().map(|spec| spec.name.len()).max().unwrap_or(0);
    for spec in KERNELS {
        let handle = backend.lookup_kernel(spec.module, spec.name);
        let state = match (handle.is_resolved(), spec.family) {
            (true, _) => "resolved",
            (false, Family::Exact) => "MISSING",
            (false, Family::Fast) => "absent (CUDA sm_80+ only)",
        };
        let _ = writeln!(
            out,
            "    {:<width$} {:<10} {:<5} max M {:>2}  {state}",
            spec.name,
            spec.module,
            spec.family.name(),
            spec.max_m
        );
    }
    let tiers = ResolvedTiers::resolve(backend, switches);
    let _ = writeln!(out, "    batch4 resolved: {}", tiers.has_batch4());
    match tiers.tuning() {
        Some(tuning) => {
            let evidence = |e: Evidence| if e == Evidence::Measured { "measured" } else { "modelled" };
            let _ = writeln!(
                out,
                "  tuned table: {} (sm_{}{}, {}): auto = {} ({})",
                tuning.device,
                tuning.capability.0,
                tuning.capability.1,
                tuning.run,
                tuning.auto_family.name(),
                evidence(tuning.family_evidence)
            );
            for kernel in tuning.kernels {
                let _ =
                    writeln!(out, "    width {} -> {} ({})", kernel.width, kernel.kernel, evidence(kernel.evidence));
            }
        }
        None => {
            let _ = writeln!(out, "  tuned table: nothing for this device (the rule's plans, auto = exact)");
        }
    }
    let name = |family: Family, tier: usize| tiers.kernel_name(family, tier).unwrap_or("?");
    let _ = writeln!(out, "  tier per M (batch = the batch tiers of widths 4 to 8; plan = any M, cap {WIDEST_TIER})");
    let _ = writeln!(out, "    {:>2}  {:<8} plan", "M", "batch");
    for m in 1..=32 {
        let batch = tiers.width(m).map_or("-".to_string(), |w| format!("batch{w}"));
        let plan = match tiers.plan(m, WIDEST_TIER) {
            Ok(plan) => plan
                .iter()
                .map(|l| format!("{}[{} rows]", name(Family::Exact, l.tier), l.rows))
                .collect::<Vec<_>>()
                .join(" + "),
            Err(error) => format!("none ({error})"),
        };
        let _ = writeln!(out, "    {m:>2}  {batch:<8} {plan}");
    }
    if tiers.fast_present() == TierMask::NONE {
        let _ = writeln!(out, "  no fast (tensor-core) family here");
        return text;
    }
    let family = match tiers.family(FamilyChoice::Auto) {
        Ok(family) => family.name().to_string(),
        Err(error) => format!("none ({error})"),
    };
    let _ = writeln!(out, "  auto: {family} for every M; the fast plan per M (--family fast forces it)");
    for m in [1, 2, 4, 8, 9, 16, 17, 32] {
        let fast = match tiers.fast_plan(m) {
            Ok(plan) => plan
                .iter()
                .map(|l| format!("{}[{} rows]", name(Family::Fast, l.tier), l.rows))
                .collect::<Vec<_>>()
                .join(" + "),
            Err(error) => format!("none ({error})"),
        };
        let _ = writeln!(out, "    {m:>2}  fast plan: {fast}");
    }
    text
}
