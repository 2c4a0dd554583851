//! `cargo xtask device-pack --rehearse`: the device pack's run.sh run end to end here, on the CUDA
//! emulator at small sizes (`GEMV_DEVICE_BACKEND=cuda-emu`), so that a script error (an option
//! `gemv` refuses, a step that never ends, a log it never writes) shows before a GPU lending
//! rather than during one. Every bench step runs (variants, moe, bench, families, tuned, chain,
//! the JSON); the steps that need a GPU say they were skipped. Fails unless run.sh exits 0 and every
//! bench step's line in the summary says `exit 0`.

use crate::util::root;
use std::process::Command;

const REHEARSAL: &str = "target/device-rehearsal";
/// The bench steps of run.sh, which a rehearsal must run.
pub const BENCH_STEPS: [&str; 6] = ["variants", "moe", "bench", "families", "tuned", "chain"];

/// Builds `gemv` with the emulator, writes run.sh beside it and runs it.
pub fn run() -> Result<(), String> {
    eprintln!("xtask: building gemv with the CUDA emulator for the rehearsal");
    // The features `cargo xtask test` builds the workspace with, so that its build is reused.
    let gemv = crate::util::cargo_json_executable(
        &["build", "--workspace", "--features", "gemv-cli/emulator", "--bin", "gemv", "--message-format=json"],
        &[],
        "gemv",
    )?;
    let dir = root().join(REHEARSAL);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    std::fs::copy(&gemv, dir.join("gemv")).map_err(|e| format!("cannot copy {gemv}: {e}"))?;
    std::fs::write(dir.join("run.sh"), crate::device_pack::script())
        .map_err(|e| format!("cannot write the rehearsal's run.sh: {e}"))?;
    let out = dir.join("out");
    eprintln!("xtask: rehearsing run.sh on the CUDA emulator (logs in {REHEARSAL}/out)");
    let status = Command::new("bash")
        .arg(dir.join("run.sh"))
        .env("OUT", &out)
        .env("GEMV_DEVICE_BACKEND", "cuda-emu")
        .env("GEMV_DEVICE_BUDGET_S", "1200")
        .status()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    let summary = std::fs::read_to_string(out.join("summary.txt"))
        .map_err(|e| format!("the rehearsal wrote no summary.txt: {e}"))?;
    let problems = problems(&summary, status.success());
    if !problems.is_empty() {
        return Err(format!("the device pack's rehearsal failed: {}", problems.join("; ")));
    }
    eprintln!("xtask: run.sh rehearsed on the emulator: every bench step passed");
    Ok(())
}

/// What a rehearsal's summary says went wrong: a bench step that did not run or did not exit 0,
/// or the script's own failure.
fn problems(summary: &str, succeeded: bool) -> Vec<String> {
    let mut problems = Vec::new();
    for step in BENCH_STEPS {
        let mut lines = summary.lines().skip_while(|line| !line.starts_with(&format!("== {step} (")));
        match (lines.next(), lines.next()) {
            (Some(_), Some(result)) if result.trim_start().starts_with("exit 0 ") => {}
            (Some(_), Some(result)) => problems.push(format!("step {step}: {}", result.trim())),
            _ => problems.push(format!("step {step} did not run")),
        }
    }
    if !succeeded || !summary.contains("device check: all steps passed") {
        problems.push("run.sh did not pass (see its summary.txt)".into());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_passes_only_with_every_bench_step_at_exit_0() {
        let mut summary = String::new();
        for step in BENCH_STEPS {
            summary.push_str(&format!("== {step} (limit 60 s): gemv bench\n   exit 0 after 3 s\n"));
        }
        summary.push_str("== probes: skipped in a rehearsal (needs a GPU)\ndevice check: all steps passed\n");
        assert!(problems(&summary, true).is_empty(), "{:?}", problems(&summary, true));
        let failed = summary.replacen(
            "== chain (limit 60 s): gemv bench\n   exit 0",
            "== chain (limit 60 s): gemv bench\n   exit 2",
            1,
        );
        assert_eq!(problems(&failed, true), ["step chain: exit 2 after 3 s"]);
        let missing = summary.replacen("== moe (", "== other (", 1);
        assert_eq!(problems(&missing, true), ["step moe did not run"]);
        assert_eq!(problems(&summary, false), ["run.sh did not pass (see its summary.txt)"]);
    }

    /// Every step run.sh names with `step` is either one of the bench steps a rehearsal checks or
    /// one that needs a GPU (`gpu_step`, or skipped in the rehearsal's branches).
    #[test]
    fn the_rehearsal_checks_every_bench_step_of_run_sh() {
        let script = crate::device_pack::script();
        let steps: Vec<&str> = script
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix("step "))
            .filter_map(|rest| rest.split_whitespace().next())
            // gpu_step's own `step "$@"`.
            .filter(|name| !name.starts_with('"'))
            .collect();
        let gpu_only = ["probes", "memcheck", "racecheck", "synccheck", "initcheck"];
        for step in steps {
            assert!(BENCH_STEPS.contains(&step) || gpu_only.contains(&step), "run.sh step {step}: rehearsed or not?");
        }
    }
}
