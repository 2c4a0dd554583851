# gemv device check (run.sh of `cargo xtask device-pack`, after device_prelude.sh). On the GPU
# machine: bash target/device-pack/run.sh
# Logs go to $OUT (or target/device-check/): eight files at most (a small set to carry back),
# each written as its step runs, so a run stopped early still leaves what it did. The steps share
# one time budget (GEMV_DEVICE_BUDGET_S, default 480 s), most valuable first: a step gets the
# smaller of its own limit and what is left, and none starts with under 15 s left.
summary="$out/summary.txt"
: > "$summary"
# GEMV_DEVICE_BACKEND=cuda-emu (`cargo xtask device-pack --rehearse`) runs every bench step on
# the CUDA emulator at small sizes, one round, so that the script itself is proven before a GPU
# run; the steps that need a GPU (the GPU test binaries, the probes, the sanitizers) are skipped.
backend=${GEMV_DEVICE_BACKEND:-cuda}
if [ "$backend" = cuda-emu ]; then
  rehearsal=1
  three_shapes="--shape 40x1040 --shape 72x2064 --shape 24x4112"
  moe_layers="--moe 8,2,40,1040 --moe 4,2,24,2064"
  chain_shapes="--shape 256x256 --shape 128x128"
  quick="--rounds 1 --launches 2 --cold-mb 1"
else
  rehearsal=0
  three_shapes="--shape qkv --shape ffn-up --shape ffn-down"
  moe_layers="--moe qwen3-moe-up --moe qwen3-moe-down --moe deepseek-v3-up --moe mixtral-8x7b-down"
  chain_shapes="--shape qkv --shape 2048x2048"
  quick=""
fi
failed=0
began=$(date +%s)
budget=${GEMV_DEVICE_BUDGET_S:-480}
say() { echo "$*" | tee -a "$summary"; }
# gpu_step ...: `step ...` on a GPU; in a rehearsal, a line saying it was skipped.
gpu_step() {
  if [ "$rehearsal" = 1 ]; then say "== $1: skipped in a rehearsal (needs a GPU)"; return; fi
  step "$@"
}
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

say "gemv device check, $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), budget $budget s, backend $backend"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee -a "$summary"
else
  say "nvidia-smi not found: no NVIDIA driver on this machine"
fi
# The CUDA libraries the binaries open or link by name: libcublas for the bench's peer row, and
# libcublas and libcurand for candle's cudarc (candle_cuda). Each from the loader's path, else a
# CUDA toolkit's or a Python package's copy (the NVIDIA wheels keep theirs under
# site-packages/nvidia).
for library in libcublas libcurand; do
  ldconfig -p 2> /dev/null | grep -q "$library\.so" && continue
  found=$(find /usr/local/cuda*/lib64 /usr/local/lib/python3* /usr/lib/python3* /opt -name "$library.so*" 2> /dev/null | head -n 1)
  if [ -n "$found" ]; then
    export LD_LIBRARY_PATH="$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "$library from $(dirname "$found")"
  else
    say "$library not found (the cuBLAS peer row needs libcublas, candle_cuda both)"
  fi
done
"$here/gemv" info --backend "$backend" 2>&1 | head -n 12 | tee -a "$summary"

# 1. The conformance suite on the GPU; a missing GPU is a failure here. Gates 10 and 11 prove the
#    fast (tensor-core) family on real tensor cores: its bound, and batch invariance bit for bit.
GEMV_REQUIRE_CUDA=1 gpu_step conformance conformance.log 200 "$here/cuda_conformance" --test-threads 1
# gemv-candle on the GPU: 64 Nvfp4Linear layers on one device load gemv's kernels once, and give
# the CPU path's bits (its CUDA libraries found above).
GEMV_REQUIRE_CUDA=1 gpu_step candle conformance.log 60 "$here/candle_cuda" --test-threads 1

# 2. The exact family's pipeline variants (docs/kernels.md, docs/sass.md's static check): every
#    ring-pipeline kernel and the classic kernel of its width on the three shapes, at the widths
#    they serve (a kernel is skipped at an M above its width). The list is the registry's, filled
#    in by `cargo xtask device-pack`.
step variants bench.log 100 "$here/gemv" bench --backend "$backend" $three_shapes --m 1,2,4 \
  @PIPELINE_VARIANTS@ --peak-gbps 4800 $quick

# 2b. Routed mixture-of-experts layers (docs/kernels.md's grouped launches): the grouped launch
#     against one launch per (token, slot) pair, a fresh random routing per launch, at M = 1..16
#     on the Qwen3-30B-A3B layers, DeepSeek-V3's fused gate/up (4.2 GB of experts) and
#     Mixtral-8x7B's down layer (8 experts, top 2: four pairs an expert at M = 16), in both
#     families (the fast family's grouped kernel against its own pair-by-pair launches), and every
#     grouped kernel forced (the sweep that tests gemv_core::grouped_kernel's choice and
#     docs/model.md's grouped predictions).
step moe moe.log 180 "$here/gemv" bench --backend "$backend" $moe_layers \
  --m 1,2,4,8,16 ${quick:---rounds 3 --launches 10} --family exact --family fast @GROUPED_KERNELS@

# The machine's nvcc builds the two probe programs (nan_probe.cu, memory_probes.cu) for its GPU.
nvcc=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -n 1)
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
arch=${arch:+sm_$arch}
arch=${arch:-native}
probe_dir=$(mktemp -d "${TMPDIR:-/tmp}/gemv-probes.XXXXXX")

# 3. The streaming model's microbenchmarks (memory_probes.cu; docs/kernels.md): read bandwidth
#    against bytes in flight per SM (plain loads; a bulk-copy ring on sm_90), the ramp of one
#    launch, launch and chain costs with programmatic dependent launch and graphs, loaded
#    latency. Rows go to probes.csv as they are measured, progress to the summary.
if [ "$rehearsal" = 1 ]; then
  say "== probes: skipped in a rehearsal (needs a GPU)"
elif [ -n "$nvcc" ] && timeout 120 "$nvcc" -arch="$arch" -O3 -std=c++17 -I"$here" -o "$probe_dir/memory_probes" \
    "$here/memory_probes.cu" >> "$summary" 2>&1; then
  step probes summary.txt 150 "$probe_dir/memory_probes" "$out/probes.csv" 120
else
  say "memory-probes: ${nvcc:-no nvcc on this machine}: not built, skipped"; failed=1
fi

# 4. The benchmark sweep (the protocol of docs/benchmarks.md): the three 27B shapes, M = 1..8, plus
#    the 8-wide batch8 kernel, and cuBLAS's BF16 GEMM as the peer row where libcublas loads. Steps 4
#    and 5 run the rule's plans (GEMV_NO_TUNED_TABLE): the tier kernels' rows the time model and the
#    tuned table are fitted to; step 5c runs the tuned table's.
GEMV_NO_TUNED_TABLE=1 step bench bench.log 120 "$here/gemv" bench --backend "$backend" $three_shapes --m 1..8 \
  --tier plan --tier w4a16_gemv_batch8 --peak-gbps 4800 $quick
# 5. The two families side by side on the three shapes, M = 1..16 (the fast family's target:
#    t(16) / t(1) <= 1.10).
GEMV_NO_TUNED_TABLE=1 step families families.log 120 "$here/gemv" bench --backend "$backend" $three_shapes --m 1..16 \
  --family exact --family fast --peak-gbps 4800 --plot "$out/families.svg" $quick
# 5c. The tuned table's plans and kernels (docs/tuning.md: ring kernels at widths 1 and 2, M = 9 as
#     8 + 1, ...) for both families, M = 1..20, beside step 5's rule: what the table gains.
step tuned tuned.log 90 "$here/gemv" bench --backend "$backend" $three_shapes --m 1..20 \
  --family exact --family fast --peak-gbps 4800 $quick
# 5b. A chain of 8 dependent layers (docs/kernels.md, builds for programmatic dependent launch):
#     each family's plan launched one after the other and as programmatic dependents, whose
#     kernels stream their weights while the step before finishes, each also captured into a CUDA
#     graph and replayed (the `graph` arms; a driver that cannot capture leaves a note), on the 5120 x 5120 projection
#     and a 2048 x 2048 one (where a launch's ramp weighs most), M = 1, 4, 16.
step chain bench.log 60 "$here/gemv" bench --backend "$backend" --chain 8 $chain_shapes --m 1,4,16 \
  --family exact --family fast ${quick:---rounds 5 --launches 10}
left=$(( budget - ($(date +%s) - began) ))
if [ $left -ge 15 ]; then
  timeout 30 "$here/gemv" bench --backend "$backend" ${three_shapes%% --shape *} --m 1..8 --json --peak-gbps 4800 $quick \
    > "$out/bench.json" 2>/dev/null || failed=1
fi

# 6. The GPU's NaN bits against the emulator's assumptions (nan_probe.cu, built here by the
#    machine's nvcc where it has one; its output goes to the summary).
if [ "$rehearsal" = 1 ]; then
  say "== nan-probe: skipped in a rehearsal (needs a GPU)"
elif [ -n "$nvcc" ] && [ -f "$here/nan_probe.cu" ]; then
  if timeout 60 "$nvcc" -arch="$arch" -o "$probe_dir/nan_probe" "$here/nan_probe.cu" >> "$summary" 2>&1; then
    say "== nan-probe"
    timeout 20 "$probe_dir/nan_probe" 2>&1 | tee -a "$summary"
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
  else
    say "nan-probe: nvcc failed"; failed=1
  fi
else
  say "nan-probe: no nvcc on this machine, skipped"
fi
rm -rf "$probe_dir"

# 7. compute-sanitizer's four tools on small cases, into one log: memcheck (guards, bad input,
#    special values, the fast family's invariance cases), racecheck and synccheck (shared memory
#    and barriers: tier agreement with the ring kernels' segments and rounds, register-tiled),
#    initcheck (reads of uninitialised device memory: guards). The pack's copy travels
#    compressed (the carry limit).
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
if [ "$rehearsal" = 1 ]; then
  say "== memcheck, racecheck, synccheck, initcheck: skipped in a rehearsal (need a GPU)"
elif [ -n "$sanitizer" ]; then
  say "compute-sanitizer: $sanitizer"
  step memcheck sanitizer.log 100 "$sanitizer" --tool memcheck --error-exitcode 99 "$here/gemv" check --backend cuda --gate 5 --gate 8 --gate 9 --gate 11
  step racecheck sanitizer.log 60 "$sanitizer" --tool racecheck --error-exitcode 99 "$here/gemv" check --backend cuda --gate 1 --gate 2
  step synccheck sanitizer.log 60 "$sanitizer" --tool synccheck --error-exitcode 99 "$here/gemv" check --backend cuda --gate 1 --gate 2
  step initcheck sanitizer.log 60 "$sanitizer" --tool initcheck --error-exitcode 99 "$here/gemv" check --backend cuda --gate 5
else
  say "compute-sanitizer not found: memcheck, racecheck, synccheck and initcheck skipped"
  failed=1
fi

say "total $(( $(date +%s) - began )) s"
if [ $failed -eq 0 ]; then say "device check: all steps passed"; else say "device check: FAILED (see the logs above)"; fi
exit $failed
