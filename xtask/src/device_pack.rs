//! `cargo xtask device-pack`: everything the GPU check needs, built here (the GPU machine has
//! no network and no Rust toolchain) into target/device-pack/ (at most 60 MiB): the release
//! `gemv` binary, the release CUDA conformance test binary, compute-sanitizer (pinned, from
//! PyPI: the GPU machine may have only a driver), `nan_probe.cu` (the GPU's NaN bits, built there
//! by its nvcc), and `run.sh`, which runs them there inside one time budget (8 minutes by default)
//! and writes at most eight logs under $OUT (or target/device-check/); `profile.sh` runs Nsight
//! Compute on a few launches. compute-sanitizer travels as a tarball (40 MB unpacked, 14 MB
//! packed) that run.sh unpacks into a temporary folder.

use crate::util::root;
use std::process::Command;

const PACK: &str = "target/device-pack";
/// compute-sanitizer for CUDA 13.0 drivers (580 and later), from PyPI.
const SANITIZER_PACKAGE: &str = "nvidia-cuda-sanitizer-api==13.0.85";
const LIMIT_BYTES: u64 = 60 << 20;

/// The start of every script in the pack: where it lies, and where its logs go ($OUT on the device
/// tool's machine, else target/device-check/).
const SCRIPT_PRELUDE: &str = r#"#!/usr/bin/env bash
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/../device-check}
mkdir -p "$out"
"#;

const RUN_SH: &str = r#"# gemv device check. On the GPU machine: bash target/device-pack/run.sh
# Logs go to $OUT (or target/device-check/): eight files at most (what the device machine hands back),
# each written as its step runs, so a run stopped early still leaves what it did. The steps share
# one time budget (GEMV_DEVICE_BUDGET_S, default 480 s), most valuable first: a step gets the
# smaller of its own limit and what is left, and none starts with under 15 s left.
summary="$out/summary.txt"
: > "$summary"
failed=0
began=$(date +%s)
budget=${GEMV_DEVICE_BUDGET_S:-480}
say() { echo "$*" | tee -a "$summary"; }
# step NAME LOG LIMIT COMMAND...: runs COMMAND, appending to $out/LOG.
step() {
  local name=$1 log=$2 limit=$3; shift 3
  local left=$(( budget - ($(date +%s) - began) ))
  if [ $left -lt 15 ]; then say "== $name: skipped, ${left} s of the budget left"; failed=1; return; fi
  [ $limit -le $left ] || limit=$left
  say "== $name (limit $limit s): $*"
  echo "== $name: $*" >> "$out/$log"
  local lines=$(wc -l < "$out/$log")
  local started=$(date +%s)
  timeout "$limit" "$@" >> "$out/$log" 2>&1
  local rc=$?
  say "   exit $rc after $(( $(date +%s) - started )) s"
  tail -n +$((lines + 1)) "$out/$log" | tail -n 30
  [ $rc -eq 0 ] || failed=1
}

say "gemv device check, $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), budget $budget s"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee -a "$summary"
else
  say "nvidia-smi not found: no NVIDIA driver on this machine"
fi
# libcublas for the bench's peer row: the loader's path, else a CUDA toolkit's or a Python
# package's copy (the NVIDIA wheels keep theirs under site-packages/nvidia).
if ! ldconfig -p 2> /dev/null | grep -q 'libcublas\.so'; then
  cublas=$(find /usr/local/cuda*/lib64 /usr/local/lib/python3* /usr/lib/python3* /opt -name 'libcublas.so*' 2> /dev/null | head -n 1)
  if [ -n "$cublas" ]; then
    export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "libcublas from $(dirname "$cublas")"
  else
    say "libcublas not found: no cuBLAS peer row"
  fi
fi
"$here/gemv" info --backend cuda 2>&1 | head -n 12 | tee -a "$summary"

# 1. The conformance suite on the GPU; a missing GPU is a failure here. Gates 10 and 11 prove the
#    fast (tensor-core) family on real tensor cores: its bound, and batch invariance bit for bit.
GEMV_REQUIRE_CUDA=1 step conformance conformance.log 200 "$here/cuda_conformance" --test-threads 1

# 2. The benchmark sweep (the protocol of docs/benchmarks.md): the three 27B shapes, M = 1..8, plus
#    the 8-wide batch8 kernel, and cuBLAS's BF16 GEMM as the peer row where libcublas loads.
step bench bench.log 120 "$here/gemv" bench --backend cuda --shape qkv --shape ffn-up --shape ffn-down --m 1..8 \
  --tier plan --tier w4a16_gemv_batch8 --peak-gbps 4800 --plot "$out/bench.svg"
# 3. The two families side by side on the three shapes, M = 1..16 (the fast family's target:
#    t(16) / t(1) <= 1.10).
step families families.log 120 "$here/gemv" bench --backend cuda --shape qkv --shape ffn-up --shape ffn-down --m 1..16 \
  --family exact --family fast --peak-gbps 4800 --plot "$out/families.svg"
left=$(( budget - ($(date +%s) - began) ))
if [ $left -ge 15 ]; then
  timeout 30 "$here/gemv" bench --backend cuda --shape qkv --m 1..8 --json --peak-gbps 4800 > "$out/bench.json" 2>/dev/null || failed=1
fi

# 4. The GPU's NaN bits against the emulator's assumptions (nan_probe.cu, built here by the
#    machine's nvcc where it has one; its output goes to the summary).
nvcc=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -n 1)
if [ -n "$nvcc" ] && [ -f "$here/nan_probe.cu" ]; then
  probe_dir=$(mktemp -d "${TMPDIR:-/tmp}/gemv-nan.XXXXXX")
  if timeout 60 "$nvcc" -arch=native -o "$probe_dir/nan_probe" "$here/nan_probe.cu" >> "$summary" 2>&1; then
    say "== nan-probe"
    timeout 20 "$probe_dir/nan_probe" 2>&1 | tee -a "$summary"
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
  else
    say "nan-probe: nvcc failed"; failed=1
  fi
  rm -rf "$probe_dir"
else
  say "nan-probe: no nvcc on this machine, skipped"
fi

# 5. compute-sanitizer's four tools on small cases, into one log: memcheck (guards, bad input,
#    special values, the fast family's invariance cases), racecheck and synccheck (shared memory
#    and barriers: tier agreement, register-tiled), initcheck (reads of uninitialised device
#    memory: guards). The pack's copy travels compressed (the carry limit).
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
if [ -z "$sanitizer" ] && [ -f "$here/sanitizer.tar.gz" ]; then
  unpacked=$(mktemp -d "${TMPDIR:-/tmp}/gemv-sanitizer.XXXXXX")
  trap 'rm -rf "$unpacked"' EXIT
  if tar -xzf "$here/sanitizer.tar.gz" -C "$unpacked"; then
    sanitizer="$unpacked/sanitizer/bin/compute-sanitizer"
  else
    say "cannot unpack $here/sanitizer.tar.gz"
  fi
fi
if [ -n "$sanitizer" ]; then
  say "compute-sanitizer: $sanitizer"
  step memcheck sanitizer.log 100 "$sanitizer" --tool memcheck --error-exitcode 99 "$here/gemv" check --backend cuda --gate 5 --gate 8 --gate 9 --gate 11
  step racecheck sanitizer.log 60 "$sanitizer" --tool racecheck --error-exitcode 99 "$here/gemv" check --backend cuda --gate 2
  step synccheck sanitizer.log 60 "$sanitizer" --tool synccheck --error-exitcode 99 "$here/gemv" check --backend cuda --gate 2
  step initcheck sanitizer.log 60 "$sanitizer" --tool initcheck --error-exitcode 99 "$here/gemv" check --backend cuda --gate 5
else
  say "compute-sanitizer not found: memcheck, racecheck, synccheck and initcheck skipped"
  failed=1
fi

say "total $(( $(date +%s) - began )) s"
if [ $failed -eq 0 ]; then say "device check: all steps passed"; else say "device check: FAILED (see the logs above)"; fi
exit $failed
"#;

/// The NaN bits a GPU produces, against what the emulator assumes (gemv-cuda's src/emulator/runtime/cuda_emu.h): f32
/// FMA, add and multiply give the one NaN 0x7FFFFFFF whatever the inputs' payloads, and the
/// conversions to binary16 and bfloat16 give 0x7FFF. Compiled on the GPU machine by its nvcc.
const NAN_PROBE_CU: &str = r#"// gemv device pack: the GPU's NaN bits. nvcc -arch=native nan_probe.cu && ./a.out
#include <cstdio>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__global__ void probe(const float* in, unsigned* out) {
  const float inf = in[0], one = in[1], zero = in[2], payload = in[3];
  out[0] = __float_as_uint(__fmaf_rn(inf, one, -inf));
  out[1] = __float_as_uint(__fmaf_rn(payload, one, zero));
  out[2] = __float_as_uint(__fadd_rn(inf, -inf));
  out[3] = __float_as_uint(__fadd_rn(payload, one));
  out[4] = __float_as_uint(__fmul_rn(inf, zero));
  out[5] = __float_as_uint(__fmul_rn(payload, one));
  out[6] = __half_as_ushort(__float2half_rn(payload));
  out[7] = __bfloat16_as_ushort(__float2bfloat16_rn(payload));
}

int main() {
  const unsigned payload_bits = 0xFFC00001u;  // negative, quiet, payload bit 0 set
  float in[4] = {__builtin_huge_valf(), 1.0f, 0.0f, 0.0f};
  std::memcpy(&in[3], &payload_bits, 4);
  float* din;
  unsigned* dout;
  unsigned out[8] = {0};
  if (cudaMalloc(&din, sizeof in) || cudaMalloc(&dout, sizeof out)) { std::puts("cudaMalloc failed"); return 2; }
  cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice);
  probe<<<1, 1>>>(din, dout);
  if (cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost)) { std::puts("kernel failed"); return 2; }
  const char* what[8] = {"fma(inf, 1, -inf)", "fma(NaN 0xFFC00001, 1, 0)", "add(inf, -inf)", "add(NaN 0xFFC00001, 1)",
                         "mul(inf, 0)", "mul(NaN 0xFFC00001, 1)", "f32 NaN 0xFFC00001 to f16", "f32 NaN 0xFFC00001 to bf16"};
  const unsigned expected[8] = {0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFu, 0x7FFFu};
  int differ = 0;
  for (int i = 0; i < 8; ++i) {
    std::printf("%-28s 0x%08X (expected 0x%08X)%s\n", what[i], out[i], expected[i], out[i] == expected[i] ? "" : "  DIFFERS");
    differ += out[i] != expected[i];
  }
  return differ ? 1 : 0;
}
"#;

/// Optional second script: Nsight Compute on one timed launch of a few representative kernels
/// (the exact family at M = 1 and 8, the fast family at M = 1 and 16), for the kernel work that
/// follows the first measurements: where the time goes when a kernel is not at the memory limit.
const PROFILE_SH: &str = r#"# gemv kernel profile. On the GPU machine: bash target/device-pack/profile.sh
# One file, $OUT/profile.txt (or target/device-check/profile.txt): ncu's speed-of-light, memory,
# occupancy, launch and warp-state sections for one cold-weight launch of each kernel below.
log="$out/profile.txt"
: > "$log"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2> /dev/null | head -n 1)
if [ -z "$ncu" ]; then echo "ncu not found: no profile" | tee -a "$log"; exit 1; fi
failed=0
# shape, M, family, tier
for case in "ffn-up 1 exact w4a16_gemv" "ffn-up 8 exact w4a16_gemv_batch8_rt2" "ffn-up 1 fast plan" \
  "ffn-up 16 fast plan" "qkv 1 exact w4a16_gemv"; do
  set -- $case
  echo "=== $1, M = $2, family $3, tier $4" | tee -a "$log"
  # The bench's proving launches come first (a small shape); skip past them into the timed ones.
  timeout 120 "$ncu" --clock-control none -k regex:w4a16 --launch-skip 12 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    "$here/gemv" bench --backend cuda --shape "$1" --m "$2" --family "$3" --tier "$4" --rounds 1 \
    --launches 20 --no-peer >> "$log" 2>&1 || { echo "exit $? for $case" | tee -a "$log"; failed=1; }
done
exit $failed
"#;

fn cargo_json_executable(args: &[&str], target_name: &str) -> Result<String, String> {
    let output =
        Command::new("cargo").args(args).current_dir(root()).output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo {} failed:\n{}", args.join(" "), String::from_utf8_lossy(&output.stderr)));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .rev()
        .filter(|line| line.contains(&format!("\"name\":\"{target_name}\"")) && line.contains("\"executable\":\""))
        .find_map(|line| line.split("\"executable\":\"").nth(1)?.split('"').next().map(str::to_string))
        .ok_or(format!("cargo did not report an executable for {target_name}"))
}

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
    eprintln!("xtask: building release binaries for the device pack");
    let gemv = cargo_json_executable(
        &["build", "--release", "-p", "gemv-cli", "--bin", "gemv", "--message-format=json"],
        "gemv",
    )?;
    let conformance = cargo_json_executable(
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
        "cuda_conformance",
    )?;
    let pack = root().join(PACK);
    let _ = std::fs::remove_dir_all(&pack);
    std::fs::create_dir_all(&pack).map_err(|e| format!("cannot create {}: {e}", pack.display()))?;
    for (from, name) in [(gemv, "gemv"), (conformance, "cuda_conformance")] {
        std::fs::copy(&from, pack.join(name)).map_err(|e| format!("cannot copy {from}: {e}"))?;
        let _ = Command::new("strip").arg(pack.join(name)).status();
    }
    let texts = [
        ("run.sh", format!("{SCRIPT_PRELUDE}{RUN_SH}")),
        ("profile.sh", format!("{SCRIPT_PRELUDE}{PROFILE_SH}")),
        ("nan_probe.cu", NAN_PROBE_CU.to_string()),
    ];
    for (name, text) in &texts {
        std::fs::write(pack.join(name), text).map_err(|e| format!("cannot write {name}: {e}"))?;
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
    for name in ["gemv", "cuda_conformance"].into_iter().chain(texts.iter().map(|(name, _)| *name)) {
        let path = pack.join(name);
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        total += size;
        let is_binary = ["gemv", "cuda_conformance"].contains(&name);
        let glibc = if is_binary { format!(", needs glibc >= {}", glibc_needed(&path)) } else { String::new() };
        manifest.push_str(&format!("{name}: {size} bytes{glibc}\n"));
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
