//! `cargo xtask mutants [--kernels [--source STEM] [--list] [--unjudged]] [--limit N] [--from I]`:
//! mutation testing (slow: not in CI); `cargo xtask mutants --summary [--check]`: its results as a
//! table.
//!
//! - Without `--kernels`: cargo-mutants (installed on first use) over gemv-core and gemv-backend:
//!   the selector, the dispatch plan, the codecs and argument validation by default, every file
//!   with `--all`; each mutant judged by the tests that cover it (gemv-core's own; gemv-backend's
//!   and gemv-mock's, where the conformance suite and its planted faults run). Output in
//!   `target/mutants-<crate>/`.
//! - With `--kernels`: operator, constant and inline-PTX (operand and modifier) mutants of the
//!   CUDA kernel sources and their headers (kernels/cuda/*.cu, *.cuh, *.h), one at a time, each compiled into the emulator (`GEMV_KERNELS_DIR`)
//!   and judged by `gemv check --backend cuda-emu --fail-fast`, fastest gates first, with a
//!   timeout, once per build of its source, the builds side by side (`--emulate` at each build's
//!   target: the exact family's sm_75 and sm_89 builds); after the quick gates, every build
//!   compiled with the pinned NVRTC: a mutant one of whose builds no longer compiles is
//!   `Unviable` (code only the GPU build reads, which the emulator never compiles), one whose
//!   every build compiles to PTX byte-identical to the committed PTX is equivalent, proven
//!   (`IdenticalPtx`: the GPU runs the same code), and one whose every build compiles to the PTX
//!   of a mutant the pass missed earlier shares that verdict (`SamePtxAs`: the GPU runs that
//!   mutant's code; within one pass); then the emulator's own tests (launch bounds; no ordinary
//!   data on the plain path); the others meet gate 7's large shapes
//!   on the builds whose PTX changed, and survivors get a second chance: the gates with the
//!   emulator under ASan and UBSan. Report in target/kernel-mutants/report.txt:
//!   every mutant with its line, change and outcome. `--only 6,41` re-judges chosen mutants, in
//!   the order given. `--source w4a16_fast` takes one source's mutants (numbered within it);
//!   `--list` prints the mutants and judges none; `--unjudged` keeps to the mutants with no
//!   verdict in docs/mutants/ as the sources stand (so a pass resumes where the last stopped).
//!   The exact family's source is judged by gates 1-9 and 12, the fast family's by gates 10, 11
//!   and 12 (the gates that run its kernels), a header by every gate.
//!   Everything is built from a checkout of HEAD (target/kernel-mutants/tree), so the working
//!   tree may change while the pass runs. Each verdict is also recorded in docs/mutants/STEM.tsv
//!   (numbered within its source), where each `Missed` one is then argued by hand.
//! - `--summary [--check]`: the summary table of docs/testing.md from docs/mutants/*.tsv (with
//!   `--check`, part of `cargo xtask test`: fails when it is stale or a missed mutant is unargued).

mod crates;
mod judge;
mod kernel_pass;
mod mutations;
mod processes;
mod ptx_identity;
mod summary;
mod verdicts;

use kernel_pass::Selection;

/// Checks that docs/testing.md's mutation summary is fresh and every missed kernel mutant argued.
pub fn check_summary() -> Result<(), String> {
    summary::summary(true)
}

/// The arguments of each mode: `--summary`'s, `--kernels`' (flags, then those with a value) and
/// the crates' pass's.
const SUMMARY_FLAGS: &[&str] = &["--summary", "--check"];
const KERNEL_FLAGS: &[&str] = &["--kernels", "--list", "--unjudged"];
const KERNEL_VALUED: &[&str] = &["--only", "--source", "--from", "--limit"];
const CRATE_FLAGS: &[&str] = &["--all"];

/// Entry point.
pub fn run_command(args: &[String]) -> Result<(), String> {
    let value = |flag: &str| -> Result<Option<usize>, String> {
        match args.iter().position(|a| a == flag) {
            None => Ok(None),
            Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).map(Some).ok_or(format!("{flag} needs a number")),
        }
    };
    if args.iter().any(|a| a == "--summary") {
        accept_only(args, "--summary", SUMMARY_FLAGS, &[])?;
        return summary::summary(args.iter().any(|a| a == "--check"));
    }
    if args.iter().any(|a| a == "--kernels") {
        accept_only(args, "--kernels", KERNEL_FLAGS, KERNEL_VALUED)?;
        let only = match args.iter().position(|a| a == "--only") {
            None => None,
            Some(i) => Some(
                args.get(i + 1)
                    .ok_or("--only needs a list of mutant numbers")?
                    .split(',')
                    .map(|n| n.trim().parse::<usize>().map_err(|_| format!("--only: {n:?} is not a number")))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let source = match args.iter().position(|a| a == "--source") {
            None => None,
            Some(i) => Some(args.get(i + 1).ok_or("--source needs a kernel source's stem, e.g. w4a16_gemv")?.clone()),
        };
        let selection = Selection {
            from: value("--from")?.unwrap_or(0),
            limit: value("--limit")?.unwrap_or(usize::MAX),
            only,
            source,
            list: args.iter().any(|a| a == "--list"),
            unjudged: args.iter().any(|a| a == "--unjudged"),
        };
        kernel_pass::run(selection)
    } else {
        accept_only(args, "(the crates' pass)", CRATE_FLAGS, &[])?;
        crates::run(args.iter().any(|a| a == "--all"))
    }
}

/// Fails on an argument `mode` does not take (`flags`, or `valued` followed by its value), so a
/// flag of another mode never starts a long pass that ignores it.
fn accept_only(args: &[String], mode: &str, flags: &[&str], valued: &[&str]) -> Result<(), String> {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if valued.contains(&arg.as_str()) {
            rest.next();
        } else if !flags.contains(&arg.as_str()) {
            let mut known: Vec<&str> = flags.to_vec();
            known.extend_from_slice(valued);
            return Err(format!(
                "cargo xtask mutants {mode}: {arg:?} is not one of its arguments ({}); see `cargo xtask --help`",
                known.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn a_flag_of_another_mode_is_refused_before_any_pass_starts() {
        // `--list` and `--unjudged` belong to `--kernels`: without it they once started the
        // crates' pass, which ignores them.
        let error = run_command(&args(&["--list", "--unjudged"])).expect_err("the crates' pass takes no --list");
        assert!(error.contains("\"--list\""), "{error}");
        let error = run_command(&args(&["--summary", "--kernels"])).expect_err("--summary takes no --kernels");
        assert!(error.contains("\"--kernels\""), "{error}");
        let error = run_command(&args(&["--kernels", "--al"])).expect_err("a misspelt flag");
        assert!(error.contains("\"--al\""), "{error}");
    }

    #[test]
    fn every_modes_own_arguments_are_accepted() {
        let kernels = ["--kernels", "--source", "w4a16_gemv", "--only", "1,2", "--from", "3", "--limit", "4", "--list"];
        assert_eq!(accept_only(&args(&kernels), "--kernels", KERNEL_FLAGS, KERNEL_VALUED), Ok(()));
        assert_eq!(accept_only(&args(&["--summary", "--check"]), "--summary", SUMMARY_FLAGS, &[]), Ok(()));
        assert_eq!(accept_only(&args(&["--all"]), "(the crates' pass)", CRATE_FLAGS, &[]), Ok(()));
    }
}
