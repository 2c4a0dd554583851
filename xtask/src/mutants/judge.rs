//! How a kernel mutant is judged: the gates that run its source's kernels, stage by stage with
//! timeouts measured on the unmutated sources, and the outcome.

use super::processes::run_all_with_timeout;
use super::ptx_identity::{BuildsPtx, PtxCheck, builds_that_changed};
use crate::kernels::emulated_capability;
use crate::util::root;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Did not compile.
    Unviable,
    /// A gate failed.
    Killed,
    /// The gates ran past the timeout (an endless loop, say).
    TimedOut,
    /// The emulator's own tests caught it, after the quick gates passed: a launch bound that
    /// disagrees with the launcher, or a fast path spoiled so that every output it gives is
    /// infinite or NaN, which the exact family's plain path then recomputes with the right bits.
    KilledByEmulatorTests,
    /// Only the sanitizer build caught it.
    KilledBySanitizer,
    /// It survived the gates and the second chance ran past its timeout.
    Unjudged,
    /// It survived the quick gates and the emulator's tests, and every build of its source
    /// compiles to PTX byte-identical to the committed PTX: the GPU would run the same code, so
    /// no test can tell it apart (equivalent, proven; gate 7 and the second chance are skipped).
    IdenticalPtx,
    /// It survived the quick gates and the emulator's tests, and every build of its source
    /// compiles to PTX byte-identical to that of the earlier mutant named here, which this pass
    /// judged `Missed`: the GPU would run that mutant's code, so that judgement, and the argument
    /// that the earlier mutant is equivalent, hold for this one (gate 7 and the second chance are
    /// skipped).
    SamePtxAs(usize),
    /// Nothing caught it.
    Missed,
}

/// The gates that judge a source's mutants, in the order the judge runs them (fastest first, so
/// most mutants die in seconds): quick ones, then the large ones (gate 7's shapes).
pub(super) struct Gates {
    pub(super) quick: &'static [&'static str],
    pub(super) large: &'static [&'static str],
    /// The compute capabilities the emulator emulates in turn (`gemv --emulate`), one per build
    /// of the source, so that a mutant in either build's code is judged.
    pub(super) capabilities: Vec<String>,
}

/// The exact family's kernels run in gates 1-9; the fast family's only in 10 and 11.
/// The family comes from the source's builds in `gemv_core::MODULE_BUILDS`; a source with none is
/// judged by the exact family's gates. Each build is judged on the capability of its target
/// (`compute_89` on 8.9), but for the builds for programmatic dependent launch, which no gate
/// runs: the emulator's tests stage judges them (`emulator_dependent_launch`).
pub(super) fn gates_for(source: &Path) -> Gates {
    if source.extension().is_none_or(|ext| ext != "cu") {
        // A header reaches every source's kernels: every gate, on every build's capability.
        let mut capabilities: Vec<String> = crate::kernels::sources_affected_by(source)
            .unwrap_or_default()
            .iter()
            .flat_map(|cu| crate::kernels::builds_of(cu).unwrap_or_default())
            .filter(|build| !build.dependent_launch)
            .map(emulated_capability)
            .collect();
        capabilities.sort();
        capabilities.dedup();
        return Gates {
            quick: &["8", "5", "2", "6", "3", "4", "9", "1", "12", "10", "11"],
            large: &["7"],
            capabilities,
        };
    }
    let builds = crate::kernels::builds_of(source).unwrap_or_default();
    let mut capabilities: Vec<String> =
        builds.iter().filter(|build| !build.dependent_launch).map(|build| emulated_capability(build)).collect();
    if capabilities.is_empty() {
        capabilities.push("9.0".into());
    }
    match builds.first().and_then(|build| build.family()) {
        // Gate 12 runs the fast family's grouped kernel beside the exact one's.
        Some(gemv_core::Family::Fast) => Gates { quick: &["10", "11", "12"], large: &[], capabilities },
        _ => Gates { quick: &["8", "5", "2", "6", "3", "4", "9", "1", "12"], large: &["7"], capabilities },
    }
}

/// How long each stage may run on a mutant: the quick gates (all but 7), the emulator's own tests
/// and gate 7's large shapes, each timed on the unmutated kernels, so an endless loop costs about
/// a minute, not ten.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    pub(super) quick: Duration,
    pub(super) emulator_tests: Duration,
    pub(super) large: Duration,
}

impl Timeouts {
    /// The limits for the unmutated kernels themselves.
    pub(super) const BASELINE: Timeouts = Timeouts {
        quick: Duration::from_secs(1800),
        emulator_tests: Duration::from_secs(1800),
        large: Duration::from_secs(1800),
    };

    /// Generous multiples of the baseline's own times (`[quick, emulator tests, large]`).
    pub(super) fn from_baseline([quick, emulator_tests, large]: [Duration; 3]) -> Timeouts {
        Timeouts {
            quick: (quick * 10).max(Duration::from_secs(60)),
            emulator_tests: (emulator_tests * 10).max(Duration::from_secs(300)),
            large: (large * 3).max(Duration::from_secs(120)),
        }
    }
}

/// The emulator's own tests that judge a mutant once the quick gates pass: launch bounds against
/// the launcher; no block of ordinary data on the exact family's plain path (a fast path that
/// gives only infinite or NaN outputs passes every gate that compares bits, since the plain path
/// then recomputes them: #44, which gave every odd element garbage exponent bits, passed the
/// quick gates and died only in gate 7 after 984 s, where this stage takes 15-45 s); the fast
/// family's own checks; the load widths (an alignment test that wrongly answers "unaligned" gives
/// the right bits with narrower loads); the grouped kernel's loads (a block of an expert's later
/// pair that computes its pairs again writes the same bits); the builds for programmatic
/// dependent launch, which no gate runs (their waits before X, the routing and Y).
pub(super) const EMULATOR_TESTS: [&str; 6] = [
    "emulator_faults",
    "emulator_fallback",
    "emulator_fast_family",
    "emulator_load_widths",
    "emulator_grouped",
    "emulator_dependent_launch",
];

/// Builds gemv against the kernels in `dir` and judges them in three stages, each stopping at the
/// first failure: `gates`' quick gates with `--fail-fast`, the emulator's own tests
/// ([`EMULATOR_TESTS`]), then the large gates. Before the large gates, a mutant whose source
/// `ptx` finds compiling to the committed PTX is [`Outcome::IdenticalPtx`], and one compiling to
/// the PTX of a mutant this pass missed already is [`Outcome::SamePtxAs`] that mutant. Also returns
/// how long each stage ran and, for a mutant that met gate 7, its builds' PTX.
pub(super) fn judge(
    tree: &Path,
    dir: &Path,
    timeouts: Timeouts,
    gates: &Gates,
    ptx: Option<PtxCheck>,
) -> Result<Judgement, String> {
    let target = root().join("target/kernel-mutants/target");
    let built = kernel_cargo()
        .args(["build", "-q", "-p", "gemv-cli", "--features", "emulator", "--bin", "gemv", "--target-dir"])
        .arg(&target)
        .env("GEMV_KERNELS_DIR", dir)
        .current_dir(tree)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !built.success() {
        return Ok(Judgement::new(Outcome::Unviable, [Duration::ZERO; 3]));
    }
    // Each build's capability at once.
    let checks = |numbers: &[&str], capabilities: &[String]| -> Vec<Command> {
        if numbers.is_empty() {
            return Vec::new();
        }
        capabilities
            .iter()
            .map(|capability| {
                let mut check = Command::new(target.join("debug/gemv"));
                check.args(["check", "--backend", "cuda-emu", "--fail-fast", "--emulate", capability]);
                for gate in numbers {
                    check.args(["--gate", gate]);
                }
                check
            })
            .collect()
    };
    // Runs one stage and records its time: `Some(outcome)` ends the judgement there.
    let mut times = [Duration::ZERO; 3];
    let mut stage = |index: usize, commands: Vec<Command>, timeout: Duration, killed: Outcome| {
        if commands.is_empty() {
            return Ok(None);
        }
        let started = Instant::now();
        let result = run_all_with_timeout(commands, timeout)?;
        times[index] = started.elapsed();
        Ok::<_, String>(match result {
            Some(true) => None,
            Some(false) => Some(killed),
            None => Some(Outcome::TimedOut),
        })
    };
    if let Some(outcome) = stage(0, checks(gates.quick, &gates.capabilities), timeouts.quick, Outcome::Killed)? {
        return Ok(Judgement::new(outcome, times));
    }
    // The GPU's side before the slower stages: a mutant whose source no longer compiles to PTX
    // (code only the GPU build reads, which the emulator's build never sees) cannot ship, and one
    // whose PTX is unchanged is proven equivalent, both in a few seconds.
    let mut large_capabilities = gates.capabilities.clone();
    let mut compiled = None;
    if let Some(check) = ptx {
        let (same, builds) = check.identity.compile_builds(check.source)?;
        if builds.iter().any(Option::is_none) {
            return Ok(Judgement::new(Outcome::Unviable, times));
        }
        if same.iter().all(|&(_, same)| same) {
            return Ok(Judgement::new(Outcome::IdenticalPtx, times));
        }
        if let Some(earlier) = check.missed.same_ptx(&builds) {
            return Ok(Judgement::new(Outcome::SamePtxAs(earlier), times));
        }
        compiled = Some(builds);
        large_capabilities = builds_that_changed(&same);
    }
    let tests = vec![emulator_tests(tree, dir, "target/kernel-mutants/target", &EMULATOR_TESTS)];
    if let Some(outcome) = stage(1, tests, timeouts.emulator_tests, Outcome::KilledByEmulatorTests)? {
        return Ok(Judgement::new(outcome, times));
    }
    let outcome = stage(2, checks(gates.large, &large_capabilities), timeouts.large, Outcome::Killed)?;
    Ok(Judgement { outcome: outcome.unwrap_or(Outcome::Missed), times, ptx: compiled })
}

/// What [`judge`] found: the outcome, each stage's time, and the PTX of a mutant that met gate 7.
pub(super) struct Judgement {
    pub(super) outcome: Outcome,
    pub(super) times: [Duration; 3],
    pub(super) ptx: Option<BuildsPtx>,
}

impl Judgement {
    pub(super) fn new(outcome: Outcome, times: [Duration; 3]) -> Self {
        Self { outcome, times, ptx: None }
    }
}

/// A survivor's second chance: gates 1-6, 8 and 9 with kernels and emulator under ASan and UBSan
/// (gate 7's large shapes are left out, as in CI). Whether they caught it.
pub(super) fn second_chance(tree: &Path, dir: &Path, timeout: Duration) -> Result<Outcome, String> {
    let mut sanitized = emulator_tests(tree, dir, "target/kernel-mutants/target-sanitize", &["emulator_conformance"]);
    sanitized.args(["--", "--skip", "gate7"]).env("GEMV_EMU_SANITIZE", "address,undefined");
    Ok(match run_all_with_timeout(vec![sanitized], timeout)? {
        Some(false) => Outcome::KilledBySanitizer,
        Some(true) => Outcome::Missed,
        None => Outcome::Unjudged,
    })
}

/// cargo for the kernel pass's builds: without Rust debug info, which about halves the CPU time of
/// a mutant's rebuild (kernels recompiled, gemv relinked), most of the time a killed mutant costs,
/// and with the emulator's C++ through ccache where the pass found it (`KERNEL_CCACHE`), so only
/// the units a mutant changed are compiled. Its target directories are the pass's own, so nothing
/// else is rebuilt.
pub(super) fn kernel_cargo() -> Command {
    let mut cargo = Command::new("cargo");
    cargo.env("CARGO_PROFILE_DEV_DEBUG", "0");
    if KERNEL_CCACHE.get().copied().unwrap_or(false) {
        cargo.env("CXX", "ccache g++").env("CCACHE_DIR", root().join("target/kernel-mutants/ccache"));
    }
    cargo
}

/// Whether the kernel pass compiles the emulator through ccache (set once, before its first build).
pub(super) static KERNEL_CCACHE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// `cargo test` of gemv-cuda-emulator's `tests` in `tree`, kernels from `dir`, into `target`.
pub(super) fn emulator_tests(tree: &Path, dir: &Path, target: &str, tests: &[&str]) -> Command {
    let mut command = kernel_cargo();
    command.args(["test", "-q", "-p", "gemv-cuda-emulator"]);
    for test in tests {
        command.args(["--test", test]);
    }
    command.arg("--target-dir").arg(root().join(target)).env("GEMV_KERNELS_DIR", dir).current_dir(tree);
    command
}

/// Builds the emulator's test binaries once (unmutated, plain and sanitized), so a mutant's
/// judgement only recompiles the kernels.
pub(super) fn warm_test_builds(tree: &Path, dir: &Path) -> Result<(), String> {
    for (target, sanitize) in [("target/kernel-mutants/target", false), ("target/kernel-mutants/target-sanitize", true)]
    {
        let mut build = kernel_cargo();
        build
            .args(["test", "--no-run", "-q", "-p", "gemv-cuda-emulator", "--tests", "--target-dir"])
            .arg(root().join(target))
            .env("GEMV_KERNELS_DIR", dir)
            .current_dir(tree);
        if sanitize {
            build.env("GEMV_EMU_SANITIZE", "address,undefined");
        }
        if !build.status().map_err(|e| format!("cannot run cargo: {e}"))?.success() {
            return Err(format!("building the emulator's tests in {target} failed"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate7_judges_only_the_builds_whose_ptx_changed() {
        let builds = crate::kernels::builds_of(Path::new("w4a16_gemv.cu")).expect("builds");
        let [old, new, dependent] = builds[..] else { panic!("the exact family has three builds: {}", builds.len()) };
        assert!(dependent.dependent_launch);
        assert_eq!(builds_that_changed(&[(old, true), (new, false), (dependent, false)]), ["8.9"]);
        assert_eq!(builds_that_changed(&[(old, false), (new, true), (dependent, true)]), ["7.5"]);
        assert_eq!(builds_that_changed(&[(old, false), (new, false), (dependent, false)]), ["7.5", "8.9"]);
        // A change to the dependent build alone meets no gate: the emulator's tests judge it.
        assert!(builds_that_changed(&[(old, true), (new, true), (dependent, false)]).is_empty());
        // Gate 7 and the quick gates name a build by the same capability.
        assert_eq!(gates_for(Path::new("kernels/w4a16_gemv.cu")).capabilities, ["7.5", "8.9"]);
    }

    #[test]
    fn each_family_is_judged_by_the_gates_that_run_its_kernels() {
        let exact = gates_for(Path::new("kernels/w4a16_gemv.cu"));
        assert_eq!(exact.large, ["7"], "gate 7's large shapes run last, in their own stage");
        let mut all: Vec<&str> = exact.quick.iter().chain(exact.large).copied().collect();
        all.sort_by_key(|gate| gate.parse::<u32>().unwrap_or(0));
        assert_eq!(
            all,
            ["1", "2", "3", "4", "5", "6", "7", "8", "9", "12"],
            "every exact gate judges, the grouped one too"
        );
        assert_eq!(exact.capabilities, ["7.5", "8.9"], "both builds of the exact family, each on its own target");
        let fast = gates_for(Path::new("kernels/w4a16_fast.cu"));
        assert_eq!(
            (fast.quick, fast.large),
            (&["10", "11", "12"][..], &[][..]),
            "the fast family's gates, grouped too"
        );
        assert_eq!(fast.capabilities, ["8.0"]);
        // A header reaches both families: every gate, on every build (the real kernel folder).
        let header = gates_for(&crate::util::root().join(crate::kernels::KERNEL_DIR).join("gemv_portable.cuh"));
        let mut all: Vec<&str> = header.quick.iter().chain(header.large).copied().collect();
        all.sort_by_key(|gate| gate.parse::<u32>().unwrap_or(0));
        assert_eq!(all, ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"]);
        assert_eq!(header.capabilities, ["7.5", "8.0", "8.9"]);
    }
}
