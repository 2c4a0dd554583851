//! `gemv check`: runs the conformance gates on one backend and prints gate, case, result.

use crate::backends::{BackendChoice, open};
use gemv_backend::DeviceKind;
use gemv_backend::conformance::{Gate, plumbing_note, run_gate};
use std::io::Write;

/// Runs the chosen gates (all when `gates` is empty). Returns whether every case passed.
pub fn run(choice: BackendChoice, gates: &[usize], verbose: bool, out: &mut dyn Write) -> Result<bool, String> {
    let backend = open(choice)?;
    let selected: Vec<Gate> = if gates.is_empty() {
        Gate::ALL.to_vec()
    } else {
        gates
            .iter()
            .map(|&n| {
                Gate::ALL
                    .get(n.wrapping_sub(1))
                    .copied()
                    .ok_or(format!("there is no gate {n} (gates are 1..={})", Gate::ALL.len()))
            })
            .collect::<Result<_, _>>()?
    };
    let info = backend.device_info();
    let _ = writeln!(out, "conformance on {} ({}, {})", backend.name(), info.name, info.architecture);
    if info.kind == DeviceKind::Reference {
        let independent: Vec<String> =
            Gate::ALL.iter().filter(|g| g.has_independent_oracle()).map(|g| g.number().to_string()).collect();
        let _ = writeln!(
            out,
            "note: {} is the reference implementation of the contract: only gates {} (independent oracles) and \
             the ml_dtypes codec fixtures (cargo test -p gemv-core) check its arithmetic; the other gates compare \
             it with itself and check plumbing only",
            backend.name(),
            independent.join(" and ")
        );
    }
    let _ = writeln!(out, "{:<4} {:<24} {:<44} result", "gate", "title", "case");
    let (mut passed, mut failed) = (0usize, 0usize);
    for gate in selected {
        eprint!("gate {} ({})... ", gate.number(), gate.title());
        let started = std::time::Instant::now();
        let results = run_gate(backend.as_ref(), gate);
        let gate_failed = results.iter().filter(|r| !r.passed()).count();
        eprintln!("{} cases, {} failed, {:.1} s", results.len(), gate_failed, started.elapsed().as_secs_f64());
        for result in &results {
            if result.passed() && !verbose {
                continue;
            }
            let verdict = result.failure.as_deref().map_or("pass".to_string(), |f| format!("FAIL: {f}"));
            let _ = writeln!(out, "{:<4} {:<24} {:<44} {verdict}", gate.number(), gate.title(), result.case);
        }
        if gate_failed == 0 && !verbose {
            let plumbing = plumbing_note(backend.as_ref(), gate).map_or(String::new(), |note| format!(" ({note})"));
            let _ = writeln!(
                out,
                "{:<4} {:<24} {:<44} pass{plumbing}",
                gate.number(),
                gate.title(),
                format!("all {} cases", results.len())
            );
        }
        failed += gate_failed;
        passed += results.len() - gate_failed;
    }
    let _ = writeln!(out, "{passed} passed, {failed} failed");
    Ok(failed == 0)
}
