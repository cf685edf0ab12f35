#!/bin/sh
# Runs every test binary, then the checks that are not C programs (exported symbols, install, fuzz
# smoke), and prints one summary line: "N passed, N failed, N skipped" counting whole test programs.
B=${INFER_BUILD_DIR:-build}
# Under the sanitizers the heaviest tests run the subset of their matrix that reaches every code path once
# (t_quick in tests/t.h): ASan finds a bad access on the path, not on the tenth model through it, and the
# plain run has checked every value. This keeps CI (both halves) well inside its time.
if [ "$SAN" = 1 ] && [ -z "$INFER_TEST_QUICK" ]; then export INFER_TEST_QUICK=1; fi
pass=0 fail=0 skip=0 failed=""
mkdir -p "$B/test-logs"

record() { # name status
    case $2 in
    0) pass=$((pass + 1)); echo "PASS $1" ;;
    77) skip=$((skip + 1)); echo "SKIP $1" ;;
    *) fail=$((fail + 1)); failed="$failed $1"; echo "FAIL $1 (exit $2, log: $B/test-logs/$1.log)"
       if [ "$INFER_TEST_FAILFAST" = 1 ]; then echo "failed:$failed (stopping at the first failure)"; exit 1; fi ;;
    esac
}

run() { # name command...: runs it, logs to $B/test-logs/name.log, prints its failures, summary and seconds
    name=$1
    shift
    t0=$(date +%s)
    "$@" > "$B/test-logs/$name.log" 2>&1
    st=$?
    grep -E '^(FAIL|SKIP)' "$B/test-logs/$name.log" | head -20
    echo "$(tail -n 1 "$B/test-logs/$name.log") ($(($(date +%s) - t0)) s)"
    record "$name" $st
}

# The CUDA emulator's build (make check-emu): the GPU tests only, every one of them run, none skipped.
if [ "$INFER_EMU_RUN" = 1 ]; then
    # the kernel-level tests first: with INFER_TEST_FAILFAST (tests/emu/mutants.sh) they fail soonest
    run test-emu "$B/tests/emu/test-emu"
    run test-ops-cuda "$B/tests/test-ops" -b cuda
    for t in $(find "$B/tests" -type f \( -name 'test-cuda-*' -o -name 'test-device' -o -name 'test-gpu-tools' -o -name 'test-plan' \) \
               ! -name '*.[od]' | sort); do
        run "$(basename "$t")" "$t"
    done
    [ "$skip" -eq 0 ] || { echo "a GPU test was skipped (none may: the emulator or a device runs them all)"; fail=$((fail + 1)); }
    [ -n "$failed" ] && echo "failed:$failed"
    echo "GPU tests: $pass passed, $fail failed, $skip skipped"
    [ "$fail" -eq 0 ]
    exit
fi

for t in $(find "$B/tests" -type f -name 'test-*' ! -name '*.o' ! -name '*.d' | sort); do
    run "$(basename "$t")" "$t"
done

# The logits, greedy, MTP and Q8_0-cache conformance once more against a fixed llama.cpp CPU backend
# (INFER_PEER_CPU), so that their bounds hold on two: haswell (AVX2), or x64 where haswell is what llama.cpp
# picked above or the CPU lacks AVX2. Each log names the backend it ran on. Not under SAN=1: the second
# backend changes llama.cpp's numbers, not ours, and the plain run has checked them (this saves ~7 minutes
# of ASan).
if [ "$SAN" != 1 ]; then
picked=$(sed -n 's/^llama.cpp CPU backend: //p' "$B/test-logs/test-llama-logits.log" 2>/dev/null)
fixed=haswell
if [ "$picked" = libggml-cpu-haswell.so ] || ! grep -qw avx2 /proc/cpuinfo; then fixed=x64; fi
for t in test-llama-logits test-llama-greedy test-llama-mtp test-llama-kvq8; do
    run "$t@$fixed" env INFER_PEER_CPU=$fixed "$B/tests/conformance/$t"
done
fi

# Only infer_* may leave the shared library.
bad=$(nm -D --defined-only "$B/libinfer.so" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^infer_' | grep -v '^_' )
if [ -z "$bad" ]; then record exports 0; else echo "exported non-infer symbols: $bad"; record exports 1; fi

# A user's program built against an installed copy through pkg-config.
if [ "$SAN" != 1 ]; then
    sh tests/install/check.sh "$B" > "$B/test-logs/install.log" 2>&1
    st=$?; tail -n 1 "$B/test-logs/install.log"; record install $st
fi

# The GGUF parser under libFuzzer for a short smoke period.
if command -v clang >/dev/null 2>&1; then
    $MAKE -s fuzz BUILD="$B" FUZZ_TIME="${FUZZ_TIME:-20}" > "$B/test-logs/fuzz.log" 2>&1
    st=$?; grep -E '^(Done|==|SUMMARY)' "$B/test-logs/fuzz.log" | tail -n 3; record fuzz-gguf $st
else
    echo "SKIP (clang not found: no libFuzzer smoke run)"; skip=$((skip + 1))
fi

[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
