#!/bin/sh
# Runs every test binary, then the checks that are not C programs (exported symbols, install, fuzz
# smoke), and prints one summary line: "N passed, N failed, N skipped" counting whole test programs.
B=${INFER_BUILD_DIR:-build}
# Under the sanitizers the heaviest tests run the subset of their matrix that reaches every code path once
# (t_quick in tests/t.h): ASan finds a bad access on the path, not on the tenth model through it, and the
# plain run has checked every value. This keeps CI (both halves) well inside its time.
if [ "$SAN" = 1 ] && [ -z "$INFER_TEST_QUICK" ]; then export INFER_TEST_QUICK=1; fi
pass=0 fail=0 skip=0 failed="" names=""
mkdir -p "$B/test-logs"
# Test programs run INFER_TEST_JOBS at a time (default: one per core). The emulator runs a kernel on one host
# thread and most tests are single-threaded, so on CI's 2 cores this nearly halves the suite's time. The
# slowest programs start first (slow_first). INFER_TEST_FAILFAST=1 runs them one at a time, in order.
jobs=${INFER_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$INFER_TEST_FAILFAST" = 1 ] && jobs=1
# Side by side, each program's contexts (and llama.cpp's) run one CPU thread: two spinning thread pools on two
# cores wait out each other's time slices at every op (test-spec took 9x its time so). test-ops still drives its
# kernels with several threads (its own backends, not contexts).
if [ "$jobs" -gt 1 ] && [ -z "$INFER_MAX_THREADS" ]; then export INFER_MAX_THREADS=1; fi
slots=$(mktemp -u)
mkfifo "$slots" || exit 1
exec 3<>"$slots"
rm -f "$slots"
i=0
while [ "$i" -lt "$jobs" ]; do echo >&3; i=$((i + 1)); done

record() { # name status
    case $2 in
    0) pass=$((pass + 1)) ;;
    77) skip=$((skip + 1)) ;;
    *) fail=$((fail + 1)); failed="$failed $1" ;;
    esac
}

verdict() { # name status: the line record's count stands for
    case $2 in
    0) echo "PASS $1" ;;
    77) echo "SKIP $1" ;;
    *) echo "FAIL $1 (exit $2, log: $B/test-logs/$1.log)" ;;
    esac
}

# No program may run longer than INFER_TEST_TIMEOUT seconds (default 40 minutes, several times the slowest under
# ASan): one that hangs fails with the end of its log printed, and the suite still ends.
limit=${INFER_TEST_TIMEOUT:-2400}

run_one() { # name command...: logs to $B/test-logs/name.log, leaves the status in name.rc, prints one block
    name=$1
    shift
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" > "$B/test-logs/$name.log" 2>&1 3>&-
    st=$?
    case $st in 124|137) echo "timed out after $limit s (INFER_TEST_TIMEOUT)" >> "$B/test-logs/$name.log" ;; esac
    echo "$st" > "$B/test-logs/$name.rc"
    # one printf, so that two programs ending together do not interleave their lines
    printf '%s' "$(grep -E '^(FAIL|SKIP)' "$B/test-logs/$name.log" | head -20
                   case $st in 124|137) tail -n 40 "$B/test-logs/$name.log" ;; esac
                   echo "$(tail -n 1 "$B/test-logs/$name.log") ($(($(date +%s) - t0)) s)"
                   verdict "$name" $st)
"
}

run() { # name command...: starts it when a slot is free; its result is counted by finish
    read -r _ <&3
    rm -f "$B/test-logs/$1.rc"
    names="$names $1"
    (run_one "$@"; echo >&3) &
    if [ "$INFER_TEST_FAILFAST" = 1 ]; then
        wait
        st=$(cat "$B/test-logs/$1.rc")
        case $st in 0|77) ;; *) echo "failed: $1 (stopping at the first failure)"; exit 1 ;; esac
    fi
}

finish() { # waits for every program started, then counts their results
    wait
    for n in $names; do record "$n" "$(cat "$B/test-logs/$n.rc" 2>/dev/null || echo 1)"; done
    names=""
}

# the slowest programs, measured, in the order they start: while they run, the short ones fill the other slots
SLOW="test-cuda-tp test-cuda-mtp test-gpu-tools test-cuda-e2e test-cuda-multi test-cuda-split test-cuda-offload test-llama-files
      test-spec test-llama-logits test-tokenizer test-tools test-synth test-gpu-like test-llama-greedy"
slow_first() { # the test programs under $B/tests that find's tests "$@" select, SLOW's first
    all=$(find "$B/tests" -type f "$@" ! -name '*.[od]' | sort)
    for s in $SLOW; do echo "$all" | grep "/$s\$"; done
    for t in $all; do
        case " $(echo $SLOW) " in
        *" $(basename "$t") "*) ;;
        *) echo "$t" ;;
        esac
    done
}

# The CUDA emulator's build (make check-emu): the GPU tests only, every one of them run, none skipped.
if [ "$INFER_EMU_RUN" = 1 ]; then
    # the kernel-level tests first: with INFER_TEST_FAILFAST (tests/emu/mutants.sh) they fail soonest
    run test-emu "$B/tests/emu/test-emu"
    run test-ops-cuda "$B/tests/test-ops" -b cuda
    for t in $(slow_first \( -name 'test-cuda-*' -o -name 'test-device' -o -name 'test-gpu-tools' -o -name 'test-plan' \
                              -o -name 'test-spec-dist' \)); do
        run "$(basename "$t")" "$t"
    done
    finish
    [ "$skip" -eq 0 ] || { echo "a GPU test was skipped (none may: the emulator or a device runs them all)"; fail=$((fail + 1)); }
    [ -n "$failed" ] && echo "failed:$failed"
    echo "GPU tests: $pass passed, $fail failed, $skip skipped"
    [ "$fail" -eq 0 ]
    exit
fi

for t in $(slow_first -name 'test-*'); do
    run "$(basename "$t")" "$t"
done

# AMX's tile kernels on every machine: test-ops' matmuls and test-repack once more with the tiles emulated in C
# (INFER_CPU_AMX=emu, lib/cpu/amx.h); on a CPU with AMX the runs above used the hardware's.
run test-ops-amx-emu env INFER_CPU_AMX=emu "$B/tests/test-ops" -b cpu -o mm,moe_ffn
run test-repack-amx-emu env INFER_CPU_AMX=emu "$B/tests/test-repack"
# The AVX2 level's strips (lib/cpu/mm_r16_avx2.c) as an AVX2-only CPU runs a model (test-ops checks their products).
run test-repack-avx2 env INFER_CPU_ISA=avx2 "$B/tests/test-repack"
# test-ops' CPU column as an AVX2-only CPU (Zen 2 / Zen 3, Intel client parts) runs it: its dots, strips and GEMMs
# (the K-quant and 32-value dots as stored, which sum in vector lanes, within the matmul's bound of the GEMMs').
run test-ops-avx2 env INFER_CPU_ISA=avx2 "$B/tests/test-ops" -b cpu

# A user's program built against an installed copy through pkg-config.
[ "$SAN" = 1 ] || run install sh tests/install/check.sh "$B"

# The GGUF parser under libFuzzer for a short smoke period.
if command -v clang >/dev/null 2>&1; then
    run fuzz-gguf $MAKE -s fuzz BUILD="$B" FUZZ_TIME="${FUZZ_TIME:-20}"
else
    echo "SKIP (clang not found: no libFuzzer smoke run)"; skip=$((skip + 1))
fi

# The logits, greedy, MTP and Q8_0-cache conformance once more against a fixed llama.cpp CPU backend
# (INFER_PEER_CPU), so that their bounds hold on two: haswell (AVX2), or x64 where haswell is what llama.cpp
# picked above or the CPU lacks AVX2. Each log names the backend it ran on. Not under SAN=1: the second
# backend changes llama.cpp's numbers, not ours, and the plain run has checked them (this saves ~7 minutes
# of ASan). The backend picked is read from test-llama-logits' log, once it has ended.
if [ "$SAN" != 1 ]; then
    case " $names " in *" test-llama-logits "*)
        while [ ! -f "$B/test-logs/test-llama-logits.rc" ]; do sleep 1; done ;;
    esac
    picked=$(sed -n 's/^llama.cpp CPU backend: //p' "$B/test-logs/test-llama-logits.log" 2>/dev/null)
    fixed=haswell
    if [ "$picked" = libggml-cpu-haswell.so ] || ! grep -qw avx2 /proc/cpuinfo; then fixed=x64; fi
    for t in test-llama-logits test-llama-greedy test-llama-mtp test-llama-kvq8; do
        run "$t@$fixed" env INFER_PEER_CPU=$fixed "$B/tests/conformance/$t"
    done
fi
finish

# Only infer_* may leave the shared library.
bad=$(nm -D --defined-only "$B/libinfer.so" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^infer_' | grep -v '^_' )
if [ -z "$bad" ]; then record exports 0; else echo "exported non-infer symbols: $bad"; record exports 1; fi

[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
