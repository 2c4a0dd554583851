//! `gemv check`: runs the conformance gates on one backend and prints gate, case, result.

use crate::backends::{BackendChoice, open};
use crate::error::CliError;
use gemv_backend::DeviceKind;
use gemv_conformance::{Gate, plumbing_note, run_gate};
use std::io::{IsTerminal, Write};

/// What `gemv check` runs and prints, as clap parses it.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckOptions {
    /// Backend to prove (default: auto, the one `run` and `bench` pick: a GPU if there is one,
    /// else the CPU backend).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Only these gates (1..=12; repeatable), in the order given. Default: all, in order. Gates
    /// 10 and 11 check the fast (tensor-core) family and say n/a where the backend lacks it;
    /// gate 12 checks a routed mixture-of-experts layer (its grouped launch where the backend has
    /// one).
    #[arg(long = "gate")]
    pub gates: Vec<usize>,
    /// List every case, not only failures.
    #[arg(long)]
    pub all_cases: bool,
    /// Stop after the first gate with a failed case.
    #[arg(long)]
    pub fail_fast: bool,
}

fn stdout_error(error: std::io::Error) -> CliError {
    CliError::Stdout(error.to_string())
}

/// Runs the chosen gates. Returns whether every case passed.
pub fn run(options: &CheckOptions, out: &mut dyn Write) -> Result<bool, CliError> {
    let choice = options.backend;
    let (gates, verbose) = (&options.gates, options.all_cases);
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
            .collect::<Result<_, _>>()
            .map_err(|reason| CliError::BadArgument { argument: "--gate", reason })?
    };
    let backend = open(choice).map_err(CliError::BackendUnavailable)?;
    let info = backend.device_info();
    writeln!(out, "conformance on {} ({}, {})", backend.name(), info.name, info.architecture).map_err(stdout_error)?;
    if info.kind == DeviceKind::Reference {
        let independent: Vec<String> = Gate::ALL
            .iter()
            .filter(|g| g.has_independent_oracle() && !g.is_fast_family())
            .map(|g| g.number().to_string())
            .collect();
        writeln!(
            out,
            "note: {} is the reference implementation of the contract: only gates {} (independent oracles) and \
             the ml_dtypes codec fixtures (cargo test -p gemv-core) check its arithmetic; the other gates compare \
             it with itself and check plumbing only",
            backend.name(),
            independent.join(" and ")
        )
        .map_err(stdout_error)?;
    }
    writeln!(out, "{:<4} {:<24} {:<44} result", "gate", "title", "case").map_err(stdout_error)?;
    let (mut passed, mut failed) = (0usize, 0usize);
    // On a terminal the gate's progress line is erased once its row is due (the row says the
    // same); in a log it stays, with the gate's time.
    let terminal = std::io::stderr().is_terminal();
    for gate in selected {
        eprint!("gate {} ({})... ", gate.number(), gate.title());
        let started = std::time::Instant::now();
        let results = run_gate(backend.as_ref(), gate);
        let gate_failed = results.iter().filter(|r| !r.passed()).count();
        if terminal {
            eprint!("\r\x1b[2K");
        } else {
            eprintln!("{} cases, {} failed, {:.1} s", results.len(), gate_failed, started.elapsed().as_secs_f64());
        }
        if results.is_empty() && gate.is_fast_family() {
            writeln!(
                out,
                "{:<4} {:<24} {:<44} n/a",
                gate.number(),
                gate.title(),
                "no fast-family kernel on this backend"
            )
            .map_err(stdout_error)?;
            continue;
        }
        for result in &results {
            if result.passed() && !verbose {
                continue;
            }
            let verdict = result.failure.as_deref().map_or("pass".to_string(), |f| format!("FAIL: {f}"));
            writeln!(out, "{:<4} {:<24} {:<44} {verdict}", gate.number(), gate.title(), result.case)
                .map_err(stdout_error)?;
        }
        if gate_failed == 0 && !verbose {
            let plumbing = plumbing_note(backend.as_ref(), gate).map_or(String::new(), |note| format!(" ({note})"));
            writeln!(
                out,
                "{:<4} {:<24} {:<44} pass{plumbing}",
                gate.number(),
                gate.title(),
                format!("all {} cases", results.len())
            )
            .map_err(stdout_error)?;
        }
        failed += gate_failed;
        passed += results.len() - gate_failed;
        if options.fail_fast && gate_failed > 0 {
            writeln!(out, "stopped after gate {} (--fail-fast)", gate.number()).map_err(stdout_error)?;
            break;
        }
    }
    writeln!(out, "{passed} passed, {failed} failed").map_err(stdout_error)?;
    Ok(failed == 0)
}
