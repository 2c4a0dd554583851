# gemv kernel profile (profile.sh of `cargo xtask device-pack`, after device_prelude.sh). On the GPU machine: bash target/device-pack/profile.sh
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
