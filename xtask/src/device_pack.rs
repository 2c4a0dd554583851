//! `cargo xtask device-pack`: everything the GPU check needs, built on a development machine so
//! that the GPU machine needs only a driver, into target/device-pack/ (at most 60 MiB): the release
//! `gemv` binary, the release CUDA conformance test binary, gemv-candle's release CUDA test
//! binary (`candle_cuda`: layers on one device load the kernels once), compute-sanitizer (pinned, from
//! PyPI: the GPU machine may have only a driver), `nan_probe.cu` (the GPU's NaN bits) and
//! `memory_probes.cu` with the headers it includes (the streaming model's microbenchmarks), both
//! built there by its nvcc, and `run.sh`, which runs them there inside one time budget (8 minutes by default)
//! and writes at most eight logs under $OUT (or target/device-check/); `profile.sh` runs Nsight
//! Compute on a few launches. compute-sanitizer travels as a tarball (40 MB unpacked, 14 MB
//! packed) that run.sh unpacks into a temporary folder; the three binaries travel as one
//! (`binaries.tar.gz`), which both scripts' prelude unpacks beside them.

use crate::util::root;
use std::process::Command;

const PACK: &str = "target/device-pack";
/// compute-sanitizer for CUDA 13.0 drivers (580 and later), from PyPI.
const SANITIZER_PACKAGE: &str = "nvidia-cuda-sanitizer-api==13.0.85";
const LIMIT_BYTES: u64 = 60 << 20;
/// The pack's executables, which travel compressed in [`BINARIES_ARCHIVE`].
const BINARIES: [&str; 3] = ["gemv", "cuda_conformance", "candle_cuda"];
const BINARIES_ARCHIVE: &str = "binaries.tar.gz";

/// The start of every script in the pack: where it lies, and where its logs go ($OUT when set,
/// else target/device-check/).
const SCRIPT_PRELUDE: &str = include_str!("../scripts/device_prelude.sh");

/// The check: conformance, bench sweep, families, NaN probe, sanitizers, in one time budget.
const RUN_SH: &str = include_str!("../scripts/device_run.sh");

/// The NaN bits a GPU produces, against what the emulator assumes (gemv-cuda-emulator's
/// src/runtime/cuda_emu.h and its PTX executor): f32 FMA, add and multiply give the one
/// NaN 0x7FFFFFFF whatever the inputs' payloads, the conversions to binary16 and bfloat16 and the
/// packed f16x2/bf16x2 operations give 0x7FFF per lane. Compiled on the GPU machine by its nvcc,
/// and here first (the pinned nvcc, for sm_90), so that a probe that does not compile fails here.
const NAN_PROBE_CU: &str = include_str!("../scripts/nan_probe.cu");

/// The streaming model's microbenchmarks (docs/kernels.md): a host program around the probe
/// kernels of kernels/cuda/probes/, which the emulator's tests prove; it writes probes.csv.
/// Compiled here first (the pinned nvcc, sm_90) and there by the machine's nvcc, with the pack's
/// copies of the headers it includes (their paths under the pack as under kernels/cuda/).
const MEMORY_PROBES: &str = "xtask/scripts/memory_probes.cu";
const MEMORY_PROBES_HEADERS: [&str; 2] = ["gemv_portable.cuh", "probes/memory_probes.cuh"];

/// Optional second script: Nsight Compute on one timed launch of a few representative kernels
/// (the exact family at M = 1 and 8, the fast family at M = 1 and 16), for the kernel work that
/// follows the first measurements: where the time goes when a kernel is not at the memory limit.
const PROFILE_SH: &str = include_str!("../scripts/device_profile.sh");

/// The newest GLIBC symbol version a binary needs (the GPU machine must have at least this).
fn glibc_needed(path: &std::path::Path) -> String {
    let Ok(output) = Command::new("objdump").arg("-T").arg(path).output() else { return "unknown (no objdump)".into() };
    let text = String::from_utf8_lossy(&output.stdout);
    let mut versions: Vec<Vec<u32>> = text
        .split("GLIBC_")
        .skip(1)
        .filter_map(|rest| {
            let version: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
            (!parts.is_empty()).then_some(parts)
        })
        .collect();
    versions.sort();
    versions.last().map_or("none".into(), |v| v.iter().map(u32::to_string).collect::<Vec<_>>().join("."))
}

/// Builds the pack.
pub fn run() -> Result<(), String> {
    compile_probes()?;
    eprintln!("xtask: building release binaries for the device pack");
    let gemv = crate::util::cargo_json_executable(
        &["build", "--release", "-p", "gemv-cli", "--bin", "gemv", "--message-format=json"],
        &[],
        "gemv",
    )?;
    let conformance = crate::util::cargo_json_executable(
        &[
            "test",
            "--release",
            "-p",
            "gemv-cuda",
            "--features",
            "cublas-peer",
            "--test",
            "cuda_conformance",
            "--no-run",
            "--message-format=json",
        ],
        &[],
        "cuda_conformance",
    )?;
    // gemv-candle's CUDA test: 64 layers share one load of the kernels, each gives the CPU's bits.
    let candle = crate::candle_gpu_test::build_binary()?;
    let pack = root().join(PACK);
    let _ = std::fs::remove_dir_all(&pack);
    std::fs::create_dir_all(&pack).map_err(|e| format!("cannot create {}: {e}", pack.display()))?;
    for (from, name) in [(gemv, "gemv"), (conformance, "cuda_conformance"), (candle, "candle_cuda")] {
        std::fs::copy(&from, pack.join(name)).map_err(|e| format!("cannot copy {from}: {e}"))?;
        let _ = Command::new("strip").arg(pack.join(name)).status();
    }
    let texts = [
        ("run.sh", script()),
        ("profile.sh", format!("{SCRIPT_PRELUDE}{PROFILE_SH}")),
        ("nan_probe.cu", NAN_PROBE_CU.to_string()),
        ("memory_probes.cu", read(&root().join(MEMORY_PROBES))?),
    ];
    for (name, text) in &texts {
        std::fs::write(pack.join(name), text).map_err(|e| format!("cannot write {name}: {e}"))?;
    }
    std::fs::create_dir_all(pack.join("probes")).map_err(|e| format!("cannot create the pack's probes/: {e}"))?;
    for header in MEMORY_PROBES_HEADERS {
        let from = root().join(crate::kernels::KERNEL_DIR).join(header);
        std::fs::copy(&from, pack.join(header)).map_err(|e| format!("cannot copy {}: {e}", from.display()))?;
    }
    let sanitizer_files = copy_sanitizer(&pack.join("sanitizer"))?;
    // Compressed, it takes a third of the room (40 MB to 14 MB); run.sh unpacks it.
    crate::util::run(
        "tar",
        &["-czf", &pack.join("sanitizer.tar.gz").to_string_lossy(), "-C", &pack.to_string_lossy(), "sanitizer"],
    )?;
    std::fs::remove_dir_all(pack.join("sanitizer"))
        .map_err(|e| format!("cannot remove the unpacked sanitizer: {e}"))?;
    let sanitizer_archive = std::fs::metadata(pack.join("sanitizer.tar.gz")).map(|m| m.len()).unwrap_or(0);
    let mut total = 0;
    let mut manifest = String::from("gemv device pack: bash run.sh on the GPU machine\n");
    let mut unpacked = 0;
    for name in BINARIES {
        let path = pack.join(name);
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        unpacked += size;
        manifest.push_str(&format!("{name}: {size} bytes, needs glibc >= {}\n", glibc_needed(&path)));
    }
    // The binaries embed every kernel's PTX (text, 13 MB a binary): compressed, they take about a
    // third of the room; the prelude of run.sh and profile.sh unpacks them.
    let mut archive = vec!["-czf".to_string(), pack.join(BINARIES_ARCHIVE).to_string_lossy().into_owned()];
    archive.extend(["-C".to_string(), pack.to_string_lossy().into_owned()]);
    archive.extend(BINARIES.map(String::from));
    crate::util::run("tar", &archive.iter().map(String::as_str).collect::<Vec<_>>())?;
    for name in BINARIES {
        std::fs::remove_file(pack.join(name)).map_err(|e| format!("cannot remove the unpacked {name}: {e}"))?;
    }
    let binaries_archive = std::fs::metadata(pack.join(BINARIES_ARCHIVE)).map(|m| m.len()).unwrap_or(0);
    manifest.push_str(&format!("{BINARIES_ARCHIVE} (the three above, {unpacked} bytes): {binaries_archive} bytes\n"));
    total += binaries_archive;
    for name in texts.iter().map(|(name, _)| *name).chain(MEMORY_PROBES_HEADERS) {
        let size = std::fs::metadata(pack.join(name)).map(|m| m.len()).unwrap_or(0);
        total += size;
        manifest.push_str(&format!("{name}: {size} bytes\n"));
    }
    manifest.push_str(&format!(
        "sanitizer.tar.gz ({SANITIZER_PACKAGE}, {sanitizer_files} bytes unpacked): {sanitizer_archive} bytes\n"
    ));
    total += sanitizer_archive;
    std::fs::write(pack.join("MANIFEST.txt"), &manifest).map_err(|e| format!("cannot write MANIFEST.txt: {e}"))?;
    eprint!("{manifest}");
    if total > LIMIT_BYTES {
        return Err(format!("the pack is {total} bytes, over the {LIMIT_BYTES}-byte limit"));
    }
    eprintln!(
        "xtask: {PACK} ready ({:.1} MiB); on the GPU machine: bash {PACK}/run.sh",
        total as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// run.sh whole: the prelude, then the steps (for the pack and its rehearsal).
pub fn script() -> String {
    format!("{SCRIPT_PRELUDE}{}", run_script())
}

/// run.sh with the pipeline variants' bench step filled in from the registry.
fn run_script() -> String {
    let tiers: Vec<String> =
        crate::sass::pipeline_comparison().iter().map(|spec| format!("--tier {}", spec.name)).collect();
    let grouped: Vec<String> =
        gemv_core::GROUPED_KERNELS.iter().map(|spec| format!("--grouped-kernel {}", spec.name)).collect();
    RUN_SH.replace("@PIPELINE_VARIANTS@", &tiers.join(" ")).replace("@GROUPED_KERNELS@", &grouped.join(" "))
}

fn read(path: &std::path::Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Compiles `nan_probe.cu` and `memory_probes.cu` for sm_90 with the pinned nvcc (objects only: no
/// GPU and no CUDA runtime library here), so that a probe that does not compile fails here.
fn compile_probes() -> Result<(), String> {
    let toolchain = crate::cuda_toolchain::Toolchain::find_or_install()?;
    let kernels = format!("-I{}", root().join(crate::kernels::KERNEL_DIR).display());
    for (source, object) in [("xtask/scripts/nan_probe.cu", "nan_probe.o"), (MEMORY_PROBES, "memory_probes.o")] {
        eprintln!("xtask: compiling {source} for sm_90");
        let source = root().join(source).to_string_lossy().into_owned();
        let object = root().join("target").join(object).to_string_lossy().into_owned();
        toolchain.output("nvcc", &["-arch=sm_90", "-O3", "-std=c++17", &kernels, "-c", &source, "-o", &object])?;
    }
    Ok(())
}

/// Installs the pinned compute-sanitizer in a venv under target/ (once) and copies its binary and
/// libraries into `to/bin` and `to/lib`; returns the bytes copied.
fn copy_sanitizer(to: &std::path::Path) -> Result<u64, String> {
    let venv = crate::util::pinned_venv("target/sanitizer-venv", &[SANITIZER_PACKAGE])?;
    let cu13 = crate::util::site_package(&venv, "nvidia/cu13", "bin/compute-sanitizer")?;
    let mut bytes = 0;
    for dir in ["bin", "lib"] {
        let (from, into) = (cu13.join(dir), to.join(dir));
        std::fs::create_dir_all(&into).map_err(|e| format!("cannot create {}: {e}", into.display()))?;
        for entry in std::fs::read_dir(&from).map_err(|e| format!("cannot read {}: {e}", from.display()))?.flatten() {
            let path = entry.path();
            if path.is_file() {
                bytes += std::fs::copy(&path, into.join(entry.file_name()))
                    .map_err(|e| format!("cannot copy {}: {e}", path.display()))?;
            }
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command of the step whose line starts with `start`, its continued lines joined.
    fn step_text(script: &str, start: &str) -> String {
        let mut step = String::new();
        for line in script.lines().skip_while(|line| !line.starts_with(start)) {
            step.push_str(line.trim_end_matches('\\'));
            step.push(' ');
            if !line.ends_with('\\') {
                break;
            }
        }
        step
    }

    #[test]
    fn the_moe_step_forces_every_grouped_kernel_in_both_families() {
        let script = run_script();
        assert!(!script.contains("@GROUPED_KERNELS@"), "an unfilled placeholder in run.sh");
        let step = step_text(&script, "step moe");
        assert!(step.contains("--family exact --family fast"), "{step}");
        for spec in gemv_core::GROUPED_KERNELS {
            assert!(step.contains(&format!("--grouped-kernel {}", spec.name)), "{} missing from: {step}", spec.name);
        }
    }

    /// The chain step's arguments parse as `gemv bench`'s (square shapes, a valid step count):
    /// a step the GPU machine would refuse costs a lending.
    #[test]
    fn the_chain_step_times_square_chains_in_both_families() {
        let script = run_script();
        let step = step_text(&script, "step chain");
        assert!(step.contains("bench --backend \"$backend\" --chain 8 $chain_shapes "), "{step}");
        assert!(step.contains("--family exact --family fast"), "{step}");
        let shapes = |line: &str| -> Vec<String> {
            let line = script.lines().find(|l| l.trim_start().starts_with(line)).unwrap_or_default();
            line.split("--shape ").skip(1).filter_map(|rest| rest.split([' ', '"']).next()).map(String::from).collect()
        };
        // On the GPU, then in a rehearsal: square shapes both times.
        assert_eq!(shapes("chain_shapes=\"--shape qkv"), ["qkv", "2048x2048"]);
        assert_eq!(shapes("chain_shapes=\"--shape 256"), ["256x256", "128x128"]);
    }

    /// The rule's rows (what the model and the tuned table are fitted to) and the table's own
    /// come from separate steps: a run that timed only the table's plans could not refit it.
    #[test]
    fn the_rule_and_the_tuned_table_are_timed_by_separate_steps() {
        let script = run_script();
        for rule in ["step bench ", "step families "] {
            let line = script.lines().find(|l| l.contains(rule)).unwrap_or_default();
            assert!(line.starts_with("GEMV_NO_TUNED_TABLE=1 step "), "{line}");
        }
        let tuned = step_text(&script, "step tuned");
        assert!(tuned.contains("--family exact --family fast") && tuned.contains("--m 1..20"), "{tuned}");
    }

    #[test]
    fn the_variants_step_names_every_ring_kernel_and_its_classic_baseline() {
        let script = run_script();
        assert!(!script.contains("@PIPELINE_VARIANTS@"), "an unfilled placeholder in run.sh");
        let step = step_text(&script, "step variants");
        for spec in gemv_core::KERNELS.iter().filter(|spec| spec.ring_depth > 0) {
            assert!(step.contains(&format!("--tier {} ", spec.name)), "{} missing from: {step}", spec.name);
            let classic = gemv_core::TIERS.iter().find(|tier| tier.width == spec.max_m).map(|tier| tier.kernel);
            let classic = classic.unwrap_or_else(|| panic!("no classic tier of width {}", spec.max_m));
            assert!(step.contains(&format!("--tier {classic} ")), "{classic} missing from: {step}");
        }
    }
}
