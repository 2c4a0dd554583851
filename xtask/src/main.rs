//! `cargo xtask <command>`: the project's automation, one binary, no dependencies.
//!
//! - `test`: provision what is missing, then `cargo fmt --check`, clippy with `-D warnings`, the
//!   freshness checks of committed artifacts (fixture, PTX, SASS report), `cargo test --workspace`,
//!   the emulator suites under ASan/UBSan, `cargo doc` with `-D warnings`, the release-only
//!   real-shape tests, and `cargo package` of every library crate; it ends with a line counting
//!   the tests skipped for want of hardware, and fails on a skip `GEMV_EXPECTED_SKIPS` does not
//!   declare. The README's test command; `.ci/run` calls it.
//! - `fixtures [--check] [--modelopt]`: regenerate the ml_dtypes codec fixture (or the ModelOpt
//!   export fixture of `gemv quantize`) in a venv under target/.
//! - `kernels [--check]`: every build in `gemv_core::MODULE_BUILDS` to committed PTX with the
//!   pinned NVRTC.
//! - `sass [--check]`: the static SASS report docs/sass.md.
//! - `model [--check]`: the exact family's time model fitted to the H200 measurements, docs/model.md.
//! - `tune [--check]`: the tuned table the dispatch reads (gemv-core's `tuned_table.rs`) and its
//!   evidence, docs/tuning.md, from the measured run and the model.
//! - `package`: `cargo package` of the library crates, verified (the last step of `test`).
//! - `candle [--full]`: fmt, clippy (with and without `cuda`), the CPU tests and the package of
//!   `crates/gemv-candle`; for `cuda`, candle's own CUDA kernels built by a stand-in nvcc (or,
//!   with `--full`, the real one: 20 min).
//! - `device-pack [--rehearse]`: release binaries and run.sh for a GPU machine without Rust; with
//!   `--rehearse`, run.sh run here on the CUDA emulator at small sizes (every bench step).
//! - `aarch64`: gemv-cpu's clippy and tests for aarch64 Linux, the tests under qemu-user (part
//!   of `test`).
//! - `ggml-bench [OPTIONS]`: the CPU bench with llama.cpp's kernels as peer rows.
//! - `mutants [--kernels]`: mutation testing of gemv-core and gemv-backend (cargo-mutants), or of
//!   the CUDA kernels under the emulator. Slow; not part of `test`. `mutants --summary [--check]`:
//!   docs/testing.md's table from the recorded verdicts (docs/mutants/; the check is in `test`).

mod candle;
mod candle_gpu_test;
mod cross;
mod cuda_toolchain;
mod device_pack;
mod device_rehearsal;
mod fixtures;
mod ggml_bench;
mod kernel_table;
mod kernels;
mod model;
mod mutants;
mod provision;
mod sass;
mod skips;
mod tune;
mod util;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test              provision tools, then fmt --check, clippy -D warnings, artifact freshness
                    (fixtures, kernels, sass, model, tune, mutants --summary --check), cargo test --workspace, the emulator
                    suites under ASan+UBSan, cargo doc, the release real-shape tests and
                    cargo package of the library crates;
                    ends with the count of skipped tests (GEMV_EXPECTED_SKIPS=cuda,wgpu lists
                    the skips allowed; any other skip then fails the run)
  fixtures [--check] regenerate crates/gemv-core/tests/fixtures/codecs.tsv with ml_dtypes
                    (--check: fail if the committed fixture differs)
  fixtures --modelopt [--check]
                    regenerate crates/gemv-cli/tests/fixtures/modelopt/ with NVIDIA ModelOpt's
                    own export (pinned torch + nvidia-modelopt, several GB; not part of test)
  kernels [--check] compile every build in gemv_core::MODULE_BUILDS (kernels/cuda/*.cu)
                    to PTX in kernels/ptx/ with the pinned NVRTC 12.2 (a venv under target/)
  sass [--check]    assemble the PTX for sm_80..sm_121 with the pinned ptxas and write docs/sass.md
                    (registers, spills, SASS counts, pass loop per weight, per-token slope, issue
                    and bytes-in-flight models; all modelled); fails on spills
  model [--check]   fit the exact family's time model to the committed H200 measurements and
                    write docs/model.md (held-out errors, predictions for the ring kernels and
                    the grouped launches)
  tune [--check]    the tuned table the dispatch reads (crates/gemv-core/src/tuned_table.rs:
                    per device, auto's family, the kernel per exact width, the plan per M) from
                    the committed measured run and the model's predictions where no run has
                    measured; its evidence in docs/tuning.md
  package           cargo package of the library crates, each tarball built against the
                    others' tarballs (the last step of `test`)
  candle [--full]   crates/gemv-candle (Nvfp4Linear for candle): fmt, clippy, the CPU tests and
                    `cargo package` (verified), then clippy with its cuda feature (candle-core's
                    cuda); candle's CUDA kernels built by a stand-in nvcc (part of `test`), or
                    with --full by the pinned one (20 min)
  aarch64           clippy and the tests of gemv-cpu for aarch64 Linux, run under qemu-user
                    (rustup target, cross gcc and qemu installed when missing; part of test)
  ggml-bench [OPTIONS]
                    gemv bench --backend cpu with llama.cpp's CPU kernels as peer rows (q4_0 and
                    q4_K in ggml's repacked layouts, q4_0 in its AMX buffer type at M = 1 where
                    the CPU has AMX, nvfp4; with --moe, ggml_mul_mat_id over repacked q4_0 and
                    q4_K experts), built for this CPU (cmake and libclang installed when
                    missing; first build a few minutes; OPTIONS are gemv bench's, e.g.
                    --shape ffn-up --m 1,2,4,8 or --moe qwen3-moe-up)
  device-pack       build target/device-pack/ (release gemv, CUDA conformance tests, run.sh)
                    for a GPU machine without Rust: there, `bash target/device-pack/run.sh`
  device-pack --rehearse
                    run run.sh here on the CUDA emulator at small sizes (every bench step;
                    the GPU-only steps skipped): proves the script before a GPU run
  mutants [--all]   cargo-mutants (installed on first use) over the selector, dispatch plan,
                    codecs and validation of gemv-core and gemv-backend (--all: every file),
                    judged by their tests and gemv-mock's; results in target/mutants-<crate>/
  mutants --kernels [--source STEM] [--list] [--unjudged] [--from I] [--limit N] [--only I,J]
                    operator, constant and inline-PTX mutants of kernels/cuda/ (--source: one
                    file's, numbered within it; --list: print them, judge none; --unjudged: only
                    those with no verdict in docs/mutants/ as the sources stand), each judged by the
                    emulator gates once per build of its source and the emulator's tests; one
                    whose PTX is byte-identical to the committed PTX is equivalent (IdenticalPtx),
                    one whose PTX equals a mutant's the pass missed shares its verdict
                    (SamePtxAs), the rest meet gate 7, then ASan+UBSan if they survive; report in
                    target/kernel-mutants/report.txt, each verdict recorded in docs/mutants/STEM.tsv.
                    Slow: hours, not part of `test`
  mutants --summary [--check]
                    the mutation summary table of docs/testing.md from docs/mutants/*.tsv (--check:
                    fail if it is stale or a missed mutant has no argument; part of `test`)

`--help` anywhere prints this and runs nothing.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Help never runs a command (some install tools or run for hours).
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("fixtures") if args.iter().any(|a| a == "--modelopt") => {
            fixtures::regenerate_modelopt(args.iter().any(|a| a == "--check"))
        }
        Some("fixtures") => fixtures::regenerate(args.iter().any(|a| a == "--check")),
        Some("kernels") => kernels::run(args.iter().any(|a| a == "--check")),
        Some("sass") => sass::run(args.iter().any(|a| a == "--check")),
        Some("model") => model::run(args.iter().any(|a| a == "--check")),
        Some("tune") => tune::run(args.iter().any(|a| a == "--check")),
        Some("package") => package_library_crates(),
        Some("candle") => candle::run_check(args.iter().any(|a| a == "--full")),
        Some("device-pack") if args.iter().any(|a| a == "--rehearse") => device_rehearsal::run(),
        Some("device-pack") => device_pack::run(),
        Some("aarch64") => cross::run_tests(),
        Some("ggml-bench") => ggml_bench::run(&args[1..]),
        Some("mutants") => mutants::run_command(&args[1..]),
        Some("help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other:?}\n\n{USAGE}")),
        None => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The CLI feature that builds the SIMT emulator in (`--backend cuda-emu`); it needs g++.
const CLI_EMULATOR: &str = "gemv-cli/emulator";

/// `cargo install --path crates/gemv-cli` with every C and C++ compiler replaced by `false`: a
/// default build compiles no C++, and the installed `gemv` refuses `--backend cuda-emu` in one
/// line (exit 2) while the host backend works.
fn install_without_cxx() -> Result<(), String> {
    let root = util::root().join("target").join("install-check");
    let root_text = root.to_string_lossy().into_owned();
    let no_compiler = [("CXX", "false"), ("CC", "false"), ("HOST_CXX", "false"), ("HOST_CC", "false")];
    util::run_with_env(
        "cargo",
        &[
            "install",
            "--path",
            "crates/gemv-cli",
            "--debug",
            "--locked",
            "--force",
            "--quiet",
            "--root",
            &root_text,
            "--target-dir",
            "target",
        ],
        &no_compiler,
    )?;
    let gemv = root.join("bin").join("gemv");
    let output = std::process::Command::new(&gemv)
        .args(["check", "--backend", "cuda-emu"])
        .output()
        .map_err(|e| format!("running {}: {e}", gemv.display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() != Some(2) || !stderr.contains("built without the CUDA emulator") {
        return Err(format!("the default gemv on --backend cuda-emu: {:?}, {stderr}", output.status.code()));
    }
    let host = std::process::Command::new(&gemv)
        .args(["check", "--backend", "host", "--gate", "1"])
        .output()
        .map_err(|e| format!("running {}: {e}", gemv.display()))?;
    if !host.status.success() {
        return Err(format!("the default gemv fails gate 1 on the host: {}", String::from_utf8_lossy(&host.stdout)));
    }
    eprintln!("xtask: cargo install of the CLI without a C++ compiler: ok (cuda-emu refused in one line)");
    Ok(())
}

fn test() -> Result<(), String> {
    // Mesa's software drivers complain on stderr without it.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // SAFETY: xtask is single-threaded here; no other thread reads the environment.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir()) };
    }
    provision::rust_components()?;
    provision::host_compiler()?;
    provision::vulkan_software_driver()?;
    util::run("cargo", &["fmt", "--all", "--", "--check"])?;
    // The CLI's optional emulator on, so everything that uses it is linted and tested.
    util::run(
        "cargo",
        &["clippy", "--workspace", "--all-targets", "--features", CLI_EMULATOR, "--", "-D", "warnings"],
    )?;
    // Committed artifacts must be fresh: the codec fixture, the PTX, the SASS report.
    fixtures::regenerate(true)?;
    kernels::run(true)?;
    sass::run(true)?;
    model::run(true)?;
    tune::run(true)?;
    mutants::check_summary()?;
    skips::start()?;
    util::run("cargo", &["test", "--workspace", "--features", CLI_EMULATOR])?;
    // The emulator suites again, kernels and emulator built under AddressSanitizer and
    // UndefinedBehaviorSanitizer (own target directory), both builds of the exact family (the
    // conformance suite's emulated sm_90 and sm_80). Gate 7's large shapes are left out for time:
    // gates 1-6 and 8 already run every kernel on aligned, unaligned and tail paths.
    util::run_with_env(
        "cargo",
        &[
            "test",
            "-p",
            "gemv-cuda-emulator",
            "--target-dir",
            "target/sanitize",
            "--test",
            "emulator_conformance",
            "--test",
            "emulator_faults",
            "--test",
            "emulator_fallback",
            "--test",
            "emulator_fast_family",
            "--test",
            "emulator_load_widths",
            "--test",
            "emulator_dependent_launch",
            "--",
            "--skip",
            "gate7",
        ],
        &[("GEMV_EMU_SANITIZE", "address,undefined")],
    )?;
    // Documentation builds without broken links or missing docs.
    // SAFETY: xtask is single-threaded here; no other thread reads the environment.
    unsafe { std::env::set_var("RUSTDOCFLAGS", "-D warnings") };
    util::run("cargo", &["doc", "--no-deps", "--workspace", "--features", CLI_EMULATOR, "--quiet"])?;
    // Release-only tests: the real qkv/o shape under the emulator and on the wgpu adapter, and
    // weights past 2^31 bytes under the emulator.
    let release = [
        &["-p", "gemv-cuda-emulator", "--test", "emulator_real_shape"][..],
        &["-p", "gemv-cuda-emulator", "--test", "emulator_large_weights"][..],
        &["-p", "gemv-wgpu", "--test", "limits_and_shapes", "qkv_shape"][..],
    ];
    for selection in release {
        let mut args = vec!["test", "--release"];
        args.extend(selection);
        args.extend(["--", "--nocapture"]);
        util::run("cargo", &args)?;
    }
    // The device pack's run.sh end to end on the emulator at small sizes (half a minute): a
    // script that would fail on the GPU machine fails here first.
    device_rehearsal::run()?;
    // An engine whose cudarc links libcuda (candle's way) can depend on gemv-cuda: the library
    // forces neither cudarc's linking mode nor its CUDA version.
    util::run(
        "cargo",
        &[
            "check",
            "--quiet",
            "--manifest-path",
            "examples/cudarc-linked/Cargo.toml",
            "--target-dir",
            "target/cudarc-linked",
        ],
    )?;
    // gemv-candle: its CPU tests, and gemv-cuda in one graph with candle-core's `cuda` feature,
    // the custom op checked against candle's real API (candle's kernels built by a stand-in nvcc).
    candle::run_check(false)?;
    // The NEON kernel and the portable path on an Arm target, under qemu.
    cross::run_tests()?;
    // A default build of the CLI needs no C++ compiler, and says so where the emulator is asked
    // for.
    install_without_cxx()?;
    // Every library crate packages on its own (nothing it builds from lies outside it) and
    // builds from its package, as a registry would.
    package_library_crates()?;
    skips::finish()
}

/// `cargo package` of the library crates (every workspace crate but the CLI and xtask), each
/// tarball verified by building it against the others' tarballs. Cargo serves those through a
/// local registry overlay under the workspace's version, and treats a registry crate of a known
/// version as immutable: a source it extracted into `$CARGO_HOME/registry/src` or built into the
/// target directory on an earlier run would be reused although the workspace has changed since.
/// So both start from nothing: old extractions of `gemv-*` at this version (ours come only from
/// this overlay: the crates are not published; anything else is extracted again on demand) and a
/// target directory of its own.
fn package_library_crates() -> Result<(), String> {
    let version = env!("CARGO_PKG_VERSION");
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".cargo")));
    if let Some(Ok(registries)) = cargo_home.map(|home| std::fs::read_dir(home.join("registry").join("src"))) {
        for source in
            registries.flatten().filter_map(|registry| std::fs::read_dir(registry.path()).ok()).flatten().flatten()
        {
            let name = source.file_name().to_string_lossy().into_owned();
            if name.starts_with("gemv-") && name.ends_with(&format!("-{version}")) {
                std::fs::remove_dir_all(source.path())
                    .map_err(|e| format!("removing the stale package source {}: {e}", source.path().display()))?;
            }
        }
    }
    let target = util::root().join("target").join("package-verify");
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(|e| format!("removing {}: {e}", target.display()))?;
    }
    let target = target.to_string_lossy().into_owned();
    util::run(
        "cargo",
        &[
            "package",
            "--workspace",
            "--exclude",
            "gemv-cli",
            "--exclude",
            "xtask",
            "--allow-dirty",
            "--quiet",
            "--target-dir",
            &target,
        ],
    )
}
