//! `cargo xtask mutants [--kernels [--source STEM] [--list]] [--limit N] [--from I]`: mutation
//! testing (slow: not in CI).
//!
//! - Without `--kernels`: cargo-mutants (installed on first use) over gemv-core and gemv-backend:
//!   the selector, the dispatch plan, the codecs and argument validation by default, every file
//!   with `--all`; each mutant judged by the tests that cover it (gemv-core's own; gemv-backend's
//!   and gemv-mock's, where the conformance suite and its planted faults run). Output in
//!   `target/mutants-<crate>/`.
//! - With `--kernels`: operator and constant mutants of the CUDA kernel sources
//!   (crates/gemv-cuda/kernels/*.cu), one at a time, each compiled into the emulator (`GEMV_KERNELS_DIR`)
//!   and judged by `gemv check --backend cuda-emu --fail-fast`, fastest gates first, with a
//!   timeout, once per build of its source, the builds side by side (`--emulate` at each build's
//!   target: the exact family's sm_75 and sm_89 builds); after the quick gates, the emulator's
//!   own tests (launch bounds; no ordinary data on the plain path); a mutant still standing whose
//!   every build compiles (pinned NVRTC) to PTX byte-identical to the committed PTX is equivalent,
//!   proven (`IdenticalPtx`: the GPU runs the same code), and one whose every build compiles to
//!   the PTX of a mutant the pass missed earlier shares that verdict (`SamePtxAs`: the GPU runs
//!   that mutant's code; within one pass); the others meet gate 7's large shapes
//!   on the builds whose PTX changed, and survivors get a second chance: the gates with the
//!   emulator under ASan and UBSan. Report in target/kernel-mutants/report.txt:
//!   every mutant with its line, change and outcome. `--only 6,41` re-judges chosen mutants, in
//!   the order given. `--source w4a16_fast` takes one source's mutants (numbered within it);
//!   `--list` prints the mutants and judges none. The exact family's source is judged by gates
//!   1-9, the fast family's by gates 10 and 11 (the gates that run its kernels).
//!   Everything is built from a checkout of HEAD (target/kernel-mutants/tree), so the working
//!   tree may change while the pass runs.

use crate::util::{has, root, run};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CARGO_MUTANTS: &str = "cargo-mutants@27.1.0";

/// Entry point.
pub fn run_command(args: &[String]) -> Result<(), String> {
    let value = |flag: &str| -> Result<Option<usize>, String> {
        match args.iter().position(|a| a == flag) {
            None => Ok(None),
            Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).map(Some).ok_or(format!("{flag} needs a number")),
        }
    };
    if args.iter().any(|a| a == "--kernels") {
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
        };
        kernels(selection)
    } else {
        crates(args.iter().any(|a| a == "--all"))
    }
}

/// The areas whose missed mutants must each be killed or justified: the selector, the dispatch
/// plan, the codecs and argument validation (with the test packages that judge them).
const SCOPES: [(&str, &[&str], &[&str]); 2] = [
    (
        "gemv-core",
        &[
            "crates/gemv-core/src/tiers.rs",
            "crates/gemv-core/src/plan.rs",
            "crates/gemv-core/src/kill_switch.rs",
            "crates/gemv-core/src/codec/*.rs",
            "crates/gemv-core/src/shape.rs",
            "crates/gemv-core/src/matrix.rs",
        ],
        &["gemv-core"],
    ),
    (
        "gemv-backend",
        &[
            "crates/gemv-backend/src/args.rs",
            "crates/gemv-backend/src/handle.rs",
            "crates/gemv-backend/src/tiers.rs",
            "crates/gemv-backend/src/buffer.rs",
            "crates/gemv-backend/src/buffer_table.rs",
        ],
        &["gemv-backend", "gemv-mock"],
    ),
];

/// cargo-mutants over the named areas (`--all`: every file of both crates, about 1,100 mutants
/// and many hours), each judged by the tests that cover it. Results in `target/mutants-<crate>/`.
fn crates(all: bool) -> Result<(), String> {
    if !has("cargo", &["mutants", "--version"]) {
        run("cargo", &["install", "--locked", CARGO_MUTANTS])?;
    }
    for (package, files, test_packages) in SCOPES {
        let output = format!("target/mutants-{package}");
        let mut args = vec!["mutants", "--package", package, "--output", &output, "--timeout", "300"];
        if !all {
            for file in files {
                args.extend(["--file", file]);
            }
        }
        let all_tests = ["gemv-core", "gemv-backend", "gemv-mock"];
        for test_package in if all { &all_tests[..] } else { test_packages } {
            args.extend(["--test-package", test_package]);
        }
        // cargo-mutants exits non-zero when mutants are missed; the report is the result.
        if let Err(error) = run("cargo", &args) {
            eprintln!("xtask: {package}: {error}; see {output}/mutants.out/missed.txt");
        }
    }
    Ok(())
}

/// One source change.
#[derive(Debug, Clone)]
struct Mutant {
    file: PathBuf,
    line: usize,
    start: usize,
    end: usize,
    original: String,
    replacement: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
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

/// The token-level mutations: operators swapped for a neighbour, integer literals moved by one,
/// `continue` turned into `break`, `0.0f` into `1.0f`.
fn replacements(token: &str) -> Vec<String> {
    let swap: &[(&str, &[&str])] = &[
        ("+", &["-"]),
        ("-", &["+"]),
        ("*", &["/"]),
        ("/", &["*"]),
        ("%", &["/"]),
        ("<", &["<="]),
        ("<=", &["<"]),
        (">", &[">="]),
        (">=", &[">"]),
        ("==", &["!="]),
        ("!=", &["=="]),
        ("&&", &["||"]),
        ("||", &["&&"]),
        ("&", &["|"]),
        ("|", &["&"]),
        ("^", &["|"]),
        ("<<", &[">>"]),
        (">>", &["<<"]),
        ("+=", &["-="]),
        ("-=", &["+="]),
        ("++", &["--"]),
        ("continue", &["break"]),
        ("0.0f", &["1.0f"]),
    ];
    if let Some((_, to)) = swap.iter().find(|(from, _)| *from == token) {
        return to.iter().map(|s| s.to_string()).collect();
    }
    integer_neighbours(token)
}

fn integer_neighbours(token: &str) -> Vec<String> {
    let digits = token.trim_end_matches(['u', 'U', 'l', 'L']);
    let suffix = &token[digits.len()..];
    let (value, hex) = if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        match u64::from_str_radix(hex, 16) {
            Ok(v) => (v, true),
            Err(_) => return Vec::new(),
        }
    } else {
        match digits.parse::<u64>() {
            Ok(v) => (v, false),
            Err(_) => return Vec::new(),
        }
    };
    let render = |v: u64| if hex { format!("0x{v:X}{suffix}") } else { format!("{v}{suffix}") };
    let mut out = vec![render(value + 1)];
    if value > 0 {
        out.push(render(value - 1));
    }
    out
}

/// The tokens of C++ source outside comments, literals and preprocessor lines, as
/// (byte start, byte end, line).
fn tokens(source: &str) -> Vec<(usize, usize, usize)> {
    let bytes = source.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line, mut line_start) = (0, 1, true);
    const OPERATORS: [&str; 24] = [
        "<<=", ">>=", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "++", "--", "+=", "-=", "*=", "/=", "&=", "|=",
        "^=", "->", "::", "+", "-", "*",
    ];
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line += 1;
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if line_start && c == b'#' {
            // A preprocessor line and its continuations.
            while i < bytes.len() && !(bytes[i] == b'\n' && bytes[i - 1] != b'\\') {
                if bytes[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            continue;
        }
        line_start = false;
        if source[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if source[i..].starts_with("/*") {
            let end = source[i + 2..].find("*/").map_or(bytes.len(), |e| i + 2 + e + 2);
            line += source[i..end].matches('\n').count();
            i = end;
            continue;
        }
        if c == b'"' || c == b'\'' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != c {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            i = j + 1;
            continue;
        }
        let start = i;
        if c.is_ascii_alphanumeric() || c == b'_' || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            // Identifiers and numbers (hex floats with p exponents and suffixes included).
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric()
                    || bytes[i] == b'_'
                    || bytes[i] == b'.'
                    || ((bytes[i] == b'+' || bytes[i] == b'-')
                        && matches!(bytes[i - 1], b'p' | b'P' | b'e' | b'E')
                        && bytes[start].is_ascii_digit()))
            {
                i += 1;
            }
        } else if let Some(op) = OPERATORS.iter().find(|op| source[i..].starts_with(*op)) {
            i += op.len();
        } else {
            i += 1;
        }
        out.push((start, i, line));
    }
    out
}

fn mutants_of(file: &Path) -> Result<Vec<Mutant>, String> {
    let source = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mut mutants = Vec::new();
    for (start, end, line) in tokens(&source) {
        let original = &source[start..end];
        for replacement in replacements(original) {
            mutants.push(Mutant {
                file: file.to_path_buf(),
                line,
                start,
                end,
                original: original.to_string(),
                replacement,
            });
        }
    }
    Ok(mutants)
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| e.to_string())?.flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The gates that judge a source's mutants, in the order the judge runs them (fastest first, so
/// most mutants die in seconds): quick ones, then the large ones (gate 7's shapes).
struct Gates {
    quick: &'static [&'static str],
    large: &'static [&'static str],
    /// The compute capabilities the emulator emulates in turn (`gemv --emulate`), one per build
    /// of the source, so that a mutant in either build's code is judged.
    capabilities: Vec<String>,
}

/// The exact family's kernels run in gates 1-9; the fast family's only in 10 and 11.
/// The family comes from the source's builds in `gemv_core::MODULE_BUILDS`; a source with none is
/// judged by the exact family's gates. Each build is judged on the capability of its target
/// (`compute_89` on 8.9).
fn gates_for(source: &Path) -> Gates {
    let builds = crate::kernels::builds_of(source).unwrap_or_default();
    let mut capabilities: Vec<String> = builds.iter().map(|build| capability(build)).collect();
    if capabilities.is_empty() {
        capabilities.push("9.0".into());
    }
    match builds.first().and_then(|build| build.family()) {
        Some(gemv_core::Family::Fast) => Gates { quick: &["10", "11"], large: &[], capabilities },
        _ => Gates { quick: &["8", "5", "2", "6", "3", "4", "9", "1"], large: &["7"], capabilities },
    }
}

/// The capability the emulator emulates to run `build` (`--emulate`): its target's minimum.
fn capability(build: &gemv_core::ModuleBuild) -> String {
    format!("{}.{}", build.minimum.0, build.minimum.1)
}

/// Which kernel mutants to judge.
struct Selection {
    from: usize,
    limit: usize,
    only: Option<Vec<usize>>,
    /// One source's mutants (its file stem), numbered within it.
    source: Option<String>,
    /// Print the mutants, judge none.
    list: bool,
}

impl Selection {
    /// The mutants to judge, of `count`: `--only`'s in the order given (so a pass can judge the
    /// lines that matter most first; each once), else from `--from` on; at most `--limit`.
    fn indices(&self, count: usize) -> Vec<usize> {
        match &self.only {
            Some(only) => {
                let mut seen = std::collections::BTreeSet::new();
                let wanted = only.iter().copied().filter(|&i| i >= self.from && i < count && seen.insert(i));
                wanted.take(self.limit).collect()
            }
            None => (self.from..count).take(self.limit).collect(),
        }
    }
}

/// Runs `commands` side by side until one fails (the others are then stopped), all succeed, or
/// `timeout` passes: `Some(all succeeded)`, or None when it timed out. The judge runs a stage's
/// builds this way (each `gemv check` keeps about one core busy, and the machines this pass runs
/// on have two); the emulator's tests and the second chance run one command through it.
fn run_all_with_timeout(commands: Vec<Command>, timeout: Duration) -> Result<Option<bool>, String> {
    let mut children = Vec::with_capacity(commands.len());
    for mut command in commands {
        match command.stdout(Stdio::null()).stderr(Stdio::null()).spawn() {
            Ok(child) => children.push(Some(child)),
            Err(error) => {
                stop_all(&mut children);
                return Err(error.to_string());
            }
        }
    }
    let started = Instant::now();
    loop {
        let mut running = false;
        for slot in &mut children {
            let Some(child) = slot else { continue };
            match child.try_wait().map_err(|e| e.to_string())? {
                Some(status) if !status.success() => {
                    *slot = None;
                    stop_all(&mut children);
                    return Ok(Some(false));
                }
                Some(_) => *slot = None,
                None => running = true,
            }
        }
        if !running {
            return Ok(Some(true));
        }
        if started.elapsed() > timeout {
            stop_all(&mut children);
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills and reaps every child still running.
fn stop_all(children: &mut [Option<std::process::Child>]) {
    for mut child in children.iter_mut().filter_map(Option::take) {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// How long each stage may run on a mutant: the quick gates (all but 7), the emulator's own tests
/// and gate 7's large shapes, each timed on the unmutated kernels, so an endless loop costs about
/// a minute, not ten.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    quick: Duration,
    emulator_tests: Duration,
    large: Duration,
}

impl Timeouts {
    /// The limits for the unmutated kernels themselves.
    const BASELINE: Timeouts = Timeouts {
        quick: Duration::from_secs(1800),
        emulator_tests: Duration::from_secs(1800),
        large: Duration::from_secs(1800),
    };

    /// Generous multiples of the baseline's own times (`[quick, emulator tests, large]`).
    fn from_baseline([quick, emulator_tests, large]: [Duration; 3]) -> Timeouts {
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
/// the right bits with narrower loads).
const EMULATOR_TESTS: [&str; 4] =
    ["emulator_faults", "emulator_fallback", "emulator_fast_family", "emulator_load_widths"];

/// Builds gemv against the kernels in `dir` and judges them in three stages, each stopping at the
/// first failure: `gates`' quick gates with `--fail-fast`, the emulator's own tests
/// ([`EMULATOR_TESTS`]), then the large gates. Before the large gates, a mutant whose source
/// `ptx` finds compiling to the committed PTX is [`Outcome::IdenticalPtx`], and one compiling to
/// the PTX of a mutant this pass missed already is [`Outcome::SamePtxAs`] that mutant. Also returns
/// how long each stage ran and, for a mutant that met gate 7, its builds' PTX.
fn judge(
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
    let tests = vec![emulator_tests(tree, dir, "target/kernel-mutants/target", &EMULATOR_TESTS)];
    if let Some(outcome) = stage(1, tests, timeouts.emulator_tests, Outcome::KilledByEmulatorTests)? {
        return Ok(Judgement::new(outcome, times));
    }
    let mut large_capabilities = gates.capabilities.clone();
    let mut compiled = None;
    if let Some(check) = ptx {
        let (same, builds) = check.identity.compile_builds(check.source)?;
        if same.iter().all(|&(_, same)| same) {
            return Ok(Judgement::new(Outcome::IdenticalPtx, times));
        }
        if let Some(earlier) = check.missed.same_ptx(&builds) {
            return Ok(Judgement::new(Outcome::SamePtxAs(earlier), times));
        }
        compiled = Some(builds);
        large_capabilities = builds_that_changed(&same);
    }
    let outcome = stage(2, checks(gates.large, &large_capabilities), timeouts.large, Outcome::Killed)?;
    Ok(Judgement { outcome: outcome.unwrap_or(Outcome::Missed), times, ptx: compiled })
}

/// What [`judge`] found: the outcome, each stage's time, and the PTX of a mutant that met gate 7.
struct Judgement {
    outcome: Outcome,
    times: [Duration; 3],
    ptx: Option<BuildsPtx>,
}

impl Judgement {
    fn new(outcome: Outcome, times: [Duration; 3]) -> Self {
        Self { outcome, times, ptx: None }
    }
}

/// The PTX of each build of a source, in `kernels::builds_of` order (None: NVRTC rejected it).
type BuildsPtx = Vec<Option<Vec<u8>>>;

/// Each build of a source with whether it compiles to its committed PTX.
type BuildsIdentical = Vec<(&'static gemv_core::ModuleBuild, bool)>;

/// What [`judge`] needs to compare a mutant's PTX: with the committed PTX, and with the mutants
/// this pass missed.
struct PtxCheck<'a> {
    identity: &'a PtxIdentity,
    source: &'a Path,
    missed: &'a MissedPtx,
}

/// The PTX of the mutants this pass judged `Missed`, kept in memory (about 9 MB a mutant of the
/// exact family): a later mutant compiling to the same PTX is the same program on a GPU. Only
/// within one pass: the snapshot, its tests and its committed PTX are fixed for the pass's length,
/// so an earlier verdict was reached by the same judges.
#[derive(Default)]
struct MissedPtx(Vec<(usize, BuildsPtx)>);

impl MissedPtx {
    /// The first missed mutant whose every build's PTX equals `builds`.
    fn same_ptx(&self, builds: &BuildsPtx) -> Option<usize> {
        self.0.iter().find(|(_, ptx)| ptx == builds).map(|&(index, _)| index)
    }

    fn record(&mut self, index: usize, builds: BuildsPtx) {
        self.0.push((index, builds));
    }
}

/// Whether a source's every build compiles to the PTX committed in the snapshot: what the GPU runs.
/// The committed PTX is the unmutated sources' (CI's `cargo xtask kernels --check`; the pass
/// checks it again before judging).
struct PtxIdentity {
    nvrtc: crate::kernels::Nvrtc,
    committed: PathBuf,
    out: PathBuf,
}

impl PtxIdentity {
    fn new(tree: &Path, work: &Path) -> Result<Self, String> {
        let out = work.join("ptx");
        std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
        Ok(Self {
            nvrtc: crate::kernels::Nvrtc::find_or_install()?,
            committed: tree.join(crate::kernels::PTX_DIR),
            out,
        })
    }

    /// Whether every build of `source` compiles to its committed PTX.
    fn identical(&self, source: &Path) -> Result<bool, String> {
        Ok(self.compile_builds(source)?.0.iter().all(|&(_, same)| same))
    }

    /// Each build of `source` with whether it compiles to its committed PTX (a build NVRTC
    /// rejects does not), and the PTX each build compiled to.
    fn compile_builds(&self, source: &Path) -> Result<(BuildsIdentical, BuildsPtx), String> {
        let mut identical = Vec::new();
        let mut compiled = Vec::new();
        for build in crate::kernels::builds_of(source)? {
            let out = self.out.join(format!("{}.ptx", build.ptx));
            let _ = std::fs::remove_file(&out);
            let ptx = crate::kernels::compile(&self.nvrtc, source, build, &out, &[])
                .ok()
                .and_then(|()| std::fs::read(&out).ok());
            let committed = self.committed.join(format!("{}.ptx", build.ptx));
            let committed =
                std::fs::read(&committed).map_err(|e| format!("cannot read {}: {e}", committed.display()))?;
            identical.push((build, ptx.as_ref() == Some(&committed)));
            compiled.push(ptx);
        }
        Ok((identical, compiled))
    }
}

/// The capabilities gate 7 must judge a mutant on: those of the builds whose PTX changed. A build
/// that compiles to its committed PTX runs the code the unmutated kernels ran through gate 7
/// already (the argument of [`Outcome::IdenticalPtx`], build by build), so a mutant in code only
/// one build compiles (the sm_75 build's scale table, the sm_89 build's conversions) meets gate 7
/// on that build alone, with both cores.
fn builds_that_changed(builds: &[(&gemv_core::ModuleBuild, bool)]) -> Vec<String> {
    builds.iter().filter(|&&(_, same)| !same).map(|&(build, _)| capability(build)).collect()
}

/// A survivor's second chance: gates 1-6, 8 and 9 with kernels and emulator under ASan and UBSan
/// (gate 7's large shapes are left out, as in CI). Whether they caught it.
fn second_chance(tree: &Path, dir: &Path, timeout: Duration) -> Result<Outcome, String> {
    let mut sanitized = emulator_tests(tree, dir, "target/kernel-mutants/target-sanitize", &["emulator_conformance"]);
    sanitized.args(["--", "--skip", "gate7"]).env("GEMV_EMU_SANITIZE", "address,undefined");
    Ok(match run_all_with_timeout(vec![sanitized], timeout)? {
        Some(false) => Outcome::KilledBySanitizer,
        Some(true) => Outcome::Missed,
        None => Outcome::Unjudged,
    })
}

/// cargo for the kernel pass's builds: without Rust debug info, which halves the CPU time of a
/// mutant's rebuild (kernels recompiled, gemv relinked: 8.9 s of CPU against 18.3 s, measured on
/// the 2-core machine), most of the time a killed mutant costs. Its target directories are the
/// pass's own, so nothing else is rebuilt.
fn kernel_cargo() -> Command {
    let mut cargo = Command::new("cargo");
    cargo.env("CARGO_PROFILE_DEV_DEBUG", "0");
    cargo
}

/// `cargo test` of gemv-cuda's emulator `tests` in `tree`, kernels from `dir`, into `target`.
fn emulator_tests(tree: &Path, dir: &Path, target: &str, tests: &[&str]) -> Command {
    let mut command = kernel_cargo();
    command.args(["test", "-q", "-p", "gemv-cuda", "--features", "emulator"]);
    for test in tests {
        command.args(["--test", test]);
    }
    command.arg("--target-dir").arg(root().join(target)).env("GEMV_KERNELS_DIR", dir).current_dir(tree);
    command
}

/// Builds the emulator's test binaries once (unmutated, plain and sanitized), so a mutant's
/// judgement only recompiles the kernels.
fn warm_test_builds(tree: &Path, dir: &Path) -> Result<(), String> {
    for (target, sanitize) in [("target/kernel-mutants/target", false), ("target/kernel-mutants/target-sanitize", true)]
    {
        let mut build = kernel_cargo();
        build
            .args(["test", "--no-run", "-q", "-p", "gemv-cuda", "--features", "emulator", "--tests", "--target-dir"])
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

/// A checkout of HEAD under `work`, so the mutants are built from a fixed tree however the
/// working tree changes meanwhile (the pass takes an hour or more).
fn snapshot(work: &Path) -> Result<PathBuf, String> {
    let tree = work.join("tree");
    let tree_arg = tree.to_string_lossy().into_owned();
    let _ = Command::new("git").args(["worktree", "remove", "--force", &tree_arg]).current_dir(root()).status();
    let _ = std::fs::remove_dir_all(&tree);
    run("git", &["worktree", "prune"])?;
    run("git", &["worktree", "add", "--detach", &tree_arg, "HEAD"])?;
    Ok(tree)
}

fn kernels(selection: Selection) -> Result<(), String> {
    let work = root().join("target/kernel-mutants");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    // `--list` reads the working tree's sources and leaves the snapshot alone, so it can run while
    // a pass judges (recreating the snapshot would pull the tree from under it); the numbers are the
    // same as a pass's from HEAD as long as the kernel sources have no uncommitted change.
    let tree = if selection.list { root() } else { snapshot(&work)? };
    let source_dir = tree.join(crate::kernels::KERNEL_DIR);
    let scratch = work.join("src");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&source_dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .filter(|p| selection.source.as_ref().is_none_or(|stem| p.file_stem().is_some_and(|s| s == stem.as_str())))
        .collect();
    sources.sort();
    if sources.is_empty() {
        return Err(format!("no kernel source {:?} in {}", selection.source, source_dir.display()));
    }
    let mut mutants = Vec::new();
    for file in &sources {
        mutants.extend(mutants_of(file)?);
    }
    eprintln!("xtask: {} kernel mutants in {} source(s)", mutants.len(), sources.len());
    if selection.list {
        for (index, mutant) in mutants.iter().enumerate() {
            let relative = mutant.file.strip_prefix(&source_dir).map_err(|e| e.to_string())?;
            println!(
                "#{index} {}:{} `{}` -> `{}`",
                relative.display(),
                mutant.line,
                mutant.original,
                mutant.replacement
            );
        }
        return Ok(());
    }
    // The unmutated sources must pass, or every mutant would look killed.
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(&source_dir, &scratch)?;
    let exact_gates = gates_for(Path::new("w4a16_gemv.cu"));
    warm_test_builds(&tree, &scratch)?;
    let identity = PtxIdentity::new(&tree, &work)?;
    for source in &sources {
        let copy = scratch.join(source.file_name().unwrap_or_default());
        if !identity.identical(&copy)? {
            return Err(format!(
                "{} does not compile to its committed PTX: run `cargo xtask kernels`",
                source.display()
            ));
        }
    }
    let baseline = judge(&tree, &scratch, Timeouts::BASELINE, &exact_gates, None)?;
    let timeouts = match baseline.outcome {
        Outcome::Missed => Timeouts::from_baseline(baseline.times),
        other => return Err(format!("the unmutated kernels do not pass the gates ({other:?})")),
    };
    eprintln!(
        "xtask: timeouts per mutant: {:.0} s for the quick gates, {:.0} s for the emulator's tests, {:.0} s for gate 7",
        timeouts.quick.as_secs_f64(),
        timeouts.emulator_tests.as_secs_f64(),
        timeouts.large.as_secs_f64()
    );
    let second_chance_timeout = Duration::from_secs(600);
    let mut report = String::new();
    let mut missed = MissedPtx::default();
    let mut counts = std::collections::BTreeMap::new();
    let report_name = if selection.only.is_some() { "report-rejudged.txt" } else { "report.txt" };
    for index in selection.indices(mutants.len()) {
        let mutant = &mutants[index];
        let relative = mutant.file.strip_prefix(&source_dir).map_err(|e| e.to_string())?;
        let original = std::fs::read_to_string(&mutant.file).map_err(|e| e.to_string())?;
        let mutated = format!("{}{}{}", &original[..mutant.start], mutant.replacement, &original[mutant.end..]);
        let _ = std::fs::remove_dir_all(&scratch);
        copy_dir(&source_dir, &scratch)?;
        std::fs::write(scratch.join(relative), mutated).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let source = scratch.join(relative);
        let check = PtxCheck { identity: &identity, source: &source, missed: &missed };
        let judgement = judge(&tree, &scratch, timeouts, &gates_for(&mutant.file), Some(check))?;
        let mut outcome = judgement.outcome;
        if outcome == Outcome::Missed {
            outcome = second_chance(&tree, &scratch, second_chance_timeout)?;
            if let (Outcome::Missed, Some(ptx)) = (outcome, judgement.ptx) {
                missed.record(index, ptx);
            }
        }
        let line = format!(
            "#{index} {}:{} `{}` -> `{}`: {outcome:?} ({:.0} s)",
            relative.display(),
            mutant.line,
            mutant.original,
            mutant.replacement,
            started.elapsed().as_secs_f64()
        );
        eprintln!("xtask: {line}");
        report.push_str(&line);
        report.push('\n');
        let kind = match outcome {
            Outcome::SamePtxAs(_) => "SamePtxAs".to_string(),
            other => format!("{other:?}"),
        };
        *counts.entry(kind).or_insert(0usize) += 1;
        std::fs::write(work.join(report_name), &report).map_err(|e| e.to_string())?;
    }
    let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    report.push_str(&format!("summary: {}\n", summary.join(", ")));
    std::fs::write(work.join(report_name), &report).map_err(|e| e.to_string())?;
    eprintln!("xtask: {}; report in target/kernel-mutants/{report_name}", summary.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_by_side_commands_stop_at_the_first_failure_or_the_timeout() {
        let shell = |script: &str| {
            let mut command = Command::new("sh");
            command.args(["-c", script]);
            command
        };
        let long = Duration::from_secs(60);
        assert_eq!(run_all_with_timeout(vec![shell("true"), shell("sleep 0.2")], long), Ok(Some(true)));
        let started = Instant::now();
        assert_eq!(run_all_with_timeout(vec![shell("sleep 30"), shell("false")], long), Ok(Some(false)));
        assert!(started.elapsed() < Duration::from_secs(20), "a failure stops the others");
        let started = Instant::now();
        assert_eq!(run_all_with_timeout(vec![shell("true"), shell("sleep 30")], Duration::from_millis(300)), Ok(None));
        assert!(started.elapsed() < Duration::from_secs(20), "the timeout stops the rest");
    }

    #[test]
    fn only_keeps_its_order_and_every_selection_stays_in_range() {
        let selection =
            |from, limit, only: Option<Vec<usize>>| Selection { from, limit, only, source: None, list: false };
        assert_eq!(selection(0, usize::MAX, Some(vec![7, 2, 99, 5, 7])).indices(10), [7, 2, 5]);
        assert_eq!(selection(3, 1, Some(vec![2, 7, 5])).indices(10), [7]);
        assert_eq!(selection(8, usize::MAX, None).indices(10), [8, 9]);
        assert_eq!(selection(2, 3, None).indices(10), [2, 3, 4]);
    }

    #[test]
    fn tokens_skip_comments_literals_and_preprocessor_lines() {
        let source = "#define A(x) \\\n  x + 1\n// a + b\nint f() { return a+b /* c - d */ + 0x1p126f; } \"x+y\"\n";
        let found: Vec<&str> = tokens(source).iter().map(|&(s, e, _)| &source[s..e]).collect();
        assert_eq!(found, ["int", "f", "(", ")", "{", "return", "a", "+", "b", "+", "0x1p126f", ";", "}"]);
        assert_eq!(tokens(source)[7].2, 4, "line numbers count the skipped lines");
    }

    #[test]
    fn gate7_judges_only_the_builds_whose_ptx_changed() {
        let builds = crate::kernels::builds_of(Path::new("w4a16_gemv.cu")).expect("builds");
        let [old, new] = builds[..] else { panic!("the exact family has two builds: {}", builds.len()) };
        assert_eq!(builds_that_changed(&[(old, true), (new, false)]), ["8.9"]);
        assert_eq!(builds_that_changed(&[(old, false), (new, true)]), ["7.5"]);
        assert_eq!(builds_that_changed(&[(old, false), (new, false)]), ["7.5", "8.9"]);
        // Gate 7 and the quick gates name a build by the same capability.
        assert_eq!(gates_for(Path::new("kernels/w4a16_gemv.cu")).capabilities, ["7.5", "8.9"]);
    }

    #[test]
    fn each_family_is_judged_by_the_gates_that_run_its_kernels() {
        let exact = gates_for(Path::new("kernels/w4a16_gemv.cu"));
        assert_eq!(exact.large, ["7"], "gate 7's large shapes run last, in their own stage");
        let mut all: Vec<&str> = exact.quick.iter().chain(exact.large).copied().collect();
        all.sort();
        assert_eq!(all, ["1", "2", "3", "4", "5", "6", "7", "8", "9"], "every exact gate judges");
        assert_eq!(exact.capabilities, ["7.5", "8.9"], "both builds of the exact family, each on its own target");
        let fast = gates_for(Path::new("kernels/w4a16_fast.cu"));
        assert_eq!((fast.quick, fast.large), (&["10", "11"][..], &[][..]), "the fast family's gates");
        assert_eq!(fast.capabilities, ["8.0"]);
    }

    #[test]
    fn a_mutant_shares_a_verdict_only_with_ptx_equal_in_every_build() {
        let mut missed = MissedPtx::default();
        let ptx = |text: &str| Some(text.as_bytes().to_vec());
        missed.record(7, vec![ptx("a"), ptx("b")]);
        missed.record(9, vec![ptx("a"), None]);
        assert_eq!(missed.same_ptx(&vec![ptx("a"), ptx("b")]), Some(7));
        assert_eq!(missed.same_ptx(&vec![ptx("a"), None]), Some(9), "a build NVRTC rejects must be rejected alike");
        assert_eq!(missed.same_ptx(&vec![ptx("a"), ptx("c")]), None, "one build differing is another program");
        assert_eq!(missed.same_ptx(&vec![ptx("a")]), None);
    }

    #[test]
    fn integers_move_by_one_and_operators_swap() {
        assert_eq!(replacements("64"), ["65", "63"]);
        assert_eq!(replacements("0"), ["1"]);
        assert_eq!(replacements("0x7Fu"), ["0x80u", "0x7Eu"]);
        assert_eq!(replacements("0x7F"), ["0x80", "0x7E"]);
        assert_eq!(replacements("<"), ["<="]);
        assert_eq!(replacements("0x1p126f"), Vec::<String>::new());
        assert_eq!(replacements("continue"), ["break"]);
    }
}
