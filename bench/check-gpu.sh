#!/bin/sh
# make check-gpu: on a machine with a CUDA device, build for that device and run every GPU test on it
# (the list `make check-emu` runs on the emulator: test-emu built by nvcc, test-ops' CUDA column,
# test-cuda-e2e, test-cuda-split, test-device, test-gpu-tools; none may skip), then test-ops' CUDA column and test-emu
# under compute-sanitizer (memcheck, racecheck), test-cuda-e2e under memcheck, bench-ops (Q4_K mmv, the fused GDN
# decode against its state's read + write, mmv_multi against its products one by one) and
# `llm-bench -ngl 99` on a synthetic qwen3-0.6b Q4_K_M. One log: bench/results/YYYY-MM-DD-<gpu>-check-gpu.md.
# Exit status is non-zero if anything failed. Sized for one device command (10 minutes): every step has
# a timeout (STEP_TIMEOUT, default 240 s; SAN_TIMEOUT for each sanitizer run, RACE_TIMEOUT for racecheck); CHECK_GPU_FULL=1 adds the whole CPU suite (make test), which
# CI runs anyway. On a device machine the tree has no .git: COMMIT=<hash> names the commit; the log and
# the GPU tests' own logs (gpu-test-logs.tar.gz) are copied to $OUT when that is set.
set -u
B=${INFER_BUILD_DIR:-build-gpu}
T=${STEP_TIMEOUT:-240}
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '.')
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$arch" ]; then echo "SKIP (no CUDA device: nvidia-smi found none)"; exit 77; fi
slug=$(echo "$gpu" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
log=bench/results/$(date +%Y-%m-%d)-$slug-check-gpu.md
mkdir -p bench/results
status=0
{
    echo "# check-gpu on $gpu"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
    echo "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1), nvcc: $(nvcc --version | tail -n 1)"
    echo "- CPU: $(nproc) cores, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
    echo "- command: make check-gpu (CUDA_ARCHS=$arch, build dir $B, step timeout $T s)"
    echo
    echo '```'
} > "$log"
run() { # title, command...: the command's output into the log, its status and seconds on the terminal too
    title=$1; shift
    echo "== $title" | tee -a "$log"
    t0=$(date +%s)
    timeout "${step_t:-$T}" "$@" >> "$log" 2>&1
    st=$?
    echo "-- $title: exit $st, $(($(date +%s) - t0)) s" | tee -a "$log"
    [ $st = 0 ] || { echo "FAILED: $title" | tee -a "$log"; status=1; }
    [ -n "${OUT:-}" ] && cp "$log" "$OUT/" # a command cut off at the device's limit still brings it back
    step_t=
}
run "build" make -j"$(nproc)" BUILD="$B" CUDA_ARCHS="$arch" all
# the emulator's list, on the device: tests/run.sh prints each program's FAIL/SKIP lines and summary; the
# whole logs come back in gpu-test-logs.tar.gz. One program at a time: they share the one GPU, and test-plan
# reads its free memory
run "GPU tests (tests/run.sh's check-emu list)" env INFER_BUILD_DIR="$B" INFER_EMU_RUN=1 INFER_TEST_JOBS=1 sh tests/run.sh
[ -n "${OUT:-}" ] && tar -czf "$OUT/gpu-test-logs.tar.gz" -C "$B" test-logs 2>/dev/null
run "bench-ops (mmv Q4_K, gdn_conv, mmv_multi)" "$B/bench-ops" -o mmv,gdn,multi -t q4_K -r 20
small=${TMPDIR:-/tmp}/check-gpu-qwen3-0.6b-q4km.gguf
run "synth qwen3-0.6b Q4_K_M" "$B/llm-gguf" synth --preset qwen3-0.6b --type Q4_K_M --random-blocks -o "$small"
run "llm-bench -ngl 99 (qwen3-0.6b Q4_K_M)" "$B/llm-bench" -m "$small" -ngl 99 -p 512 -n 128 -r 3
rm -f "$small"
# the sanitizers last: slow, each under its own timeout (SAN_TIMEOUT, default the step timeout; racecheck of
# test-ops RACE_TIMEOUT, default 300 s). API errors are not reported: test-ops and test-emu provoke some on
# purpose (an allocation past the device's memory, launches past its limits) and check the codes themselves.
# racecheck reports hazards inside cuBLAS's own kernels (nvjet_*), not ours to fix: it runs over everything
# (excluding those kernels with --kernel-name-exclude made the sanitizer fail on an H100, 2026-11-26) and the
# step fails on a hazard in any other kernel or a failed test.
cs="compute-sanitizer --error-exitcode 1 --print-limit 20 --report-api-errors no"
for tool in memcheck synccheck; do
    step_t=${SAN_TIMEOUT:-$T}
    run "$tool test-ops -b cuda" $cs --tool $tool "$B/tests/test-ops" -b cuda
done
race=${TMPDIR:-/tmp}/check-gpu-racecheck.log
step_t=${RACE_TIMEOUT:-300}
run "racecheck test-ops -b cuda (hazards outside cuBLAS's nvjet kernels fail)" sh -c \
    'compute-sanitizer --tool racecheck --print-limit 100 --report-api-errors no "$1" -b cuda > "$2" 2>&1; st=$?
     cat "$2"; ours=$(grep "Race reported" "$2" | grep -vc nvjet)
     echo "hazards outside nvjet: $ours"; [ $st = 0 ] && [ "$ours" = 0 ]' sh "$B/tests/test-ops" "$race"
rm -f "$race"
for tool in memcheck racecheck; do
    step_t=${SAN_TIMEOUT:-$T}
    run "$tool test-emu" $cs --tool $tool "$B/tests/emu/test-emu"
done
step_t=${SAN_TIMEOUT:-$T}
run "memcheck test-cuda-e2e" $cs --tool memcheck "$B/tests/test-cuda-e2e"
[ "${CHECK_GPU_FULL:-0}" = 1 ] && run "make test" make test BUILD="$B" CUDA_ARCHS="$arch" FUZZ_TIME=5
echo '```' >> "$log"
[ -n "${OUT:-}" ] && cp "$log" "$OUT/"
echo "check-gpu: $( [ $status = 0 ] && echo PASS || echo FAIL ), log in $log"
exit $status
