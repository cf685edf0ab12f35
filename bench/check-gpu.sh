#!/bin/sh
# make check-gpu: on a machine with a CUDA device, build for that device, run every test (the GPU
# cases included), run the GPU tests under compute-sanitizer (memcheck, racecheck), and write one log
# to bench/results/YYYY-MM-DD-<gpu>-check-gpu.md. Exit status is non-zero if anything failed.
# Then the end-to-end checks: test-cuda-e2e on its own (its output in the log) and under
# compute-sanitizer with test-ops' CUDA column, and `llm-bench -ngl 99` on a synthetic qwen3-0.6b Q4_K_M.
# On a device machine the tree has no .git: COMMIT=<hash> names the commit; the log is also copied to
# $OUT when that is set (the device tool's return folder).
set -u
B=${INFER_BUILD_DIR:-build-gpu}
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
    echo "- command: make check-gpu (CUDA_ARCHS=$arch, build dir $B)"
    echo
    echo '```'
} > "$log"
run() { # title, command...
    title=$1; shift
    echo "== $title" | tee -a "$log"
    "$@" >> "$log" 2>&1 || { echo "FAILED: $title" | tee -a "$log"; status=1; }
}
run "build" make -j"$(nproc)" BUILD="$B" CUDA_ARCHS="$arch"
run "tests" make test BUILD="$B" CUDA_ARCHS="$arch" FUZZ_TIME=5
run "test-cuda-e2e" "$B/tests/test-cuda-e2e"
for gpu_test in "$B"/tests/test-cuda-* "$B/tests/test-ops"; do
    case "$gpu_test" in *.o|*.d) continue ;; esac
    [ -x "$gpu_test" ] || continue
    name=$(basename "$gpu_test")
    args=
    [ "$name" = test-ops ] && args="-b cuda" # its CUDA column; the CPU columns ran in make test
    run "compute-sanitizer memcheck $name" compute-sanitizer --tool memcheck --error-exitcode 1 "$gpu_test" $args
    run "compute-sanitizer racecheck $name" compute-sanitizer --tool racecheck --error-exitcode 1 "$gpu_test" $args
done
run "bench-ops smoke (Q4_K)" "$B/bench-ops" -t q4_K -r 20
small=${TMPDIR:-/tmp}/check-gpu-qwen3-0.6b-q4km.gguf
run "synth qwen3-0.6b Q4_K_M" "$B/llm-gguf" synth --preset qwen3-0.6b --type Q4_K_M --seed 1 -o "$small"
run "llm-bench -ngl 99 (qwen3-0.6b Q4_K_M)" "$B/llm-bench" -m "$small" -ngl 99 -p 512 -n 128 -r 3
rm -f "$small"
echo '```' >> "$log"
[ -n "${OUT:-}" ] && cp "$log" "$OUT/"
echo "check-gpu: $( [ $status = 0 ] && echo PASS || echo FAIL ), log in $log"
exit $status
