#!/bin/sh
# gpu-peer.sh: on a device machine, libinfer (llm-bench -ngl 99) against llama.cpp's CUDA build of the
# same release (bench-peer -ngl 99 with the package that bench/gpu-peer-fetch.sh carried and joined)
# on synthetic files of real shapes, back to back, the same tests: -p 512 -n 128 -r 3.
#   COMMIT=<hash> BUILD=build-gpu sh bench/gpu-peer.sh [PRESET:TYPE[:cpu-moe] ...]
# An item ending in :cpu-moe runs both with --cpu-moe (every routed expert in host memory, the rest on the
# GPU: libinfer's expert offload against llama.cpp's own --cpu-moe), e.g. qwen35-35b-a3b:Q4_K_M:cpu-moe.
# Default list: qwen3-0.6b:Q4_K_M llama3-8b:Q4_K_M llama3-8b:Q8_0 qwen3-8b:Q4_K_M qwen3-8b:Q8_0
# qwen3-30b-a3b:Q4_K_M qwen3-30b-a3b:Q8_0 (about 10 minutes on one H100: split it over calls, see
# gpu-peer-fetch.sh). Each file is written by `llm-gguf synth` (--random-blocks except qwen3-0.6b,
# which is quantised from random floats with seed 1 like the CPU results), benchmarked, and deleted
# (the Q8_0 30B file alone is 32 GB). Appends to bench/results/<date>-<gpu>-gpu-peer.md (one log per
# day and device; the tree on the device has no .git, so COMMIT names the commit) and copies the log to
# $OUT after every model, so a call that runs out of time still brings back what it measured.
set -u
B=${BUILD:-build-gpu}
PEER=${INFER_PEER_DIR:-build/peer-cuda}
D=${MODEL_DIR:-/tmp/gpu-peer-models}
T=${STEP_TIMEOUT:-300}
ARGS="-p 512 -n 128 -r 3"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$gpu" ]; then echo "SKIP (no CUDA device: nvidia-smi found none)"; exit 77; fi
[ $# -gt 0 ] || set -- qwen3-0.6b:Q4_K_M llama3-8b:Q4_K_M llama3-8b:Q8_0 qwen3-8b:Q4_K_M qwen3-8b:Q8_0 \
    qwen3-30b-a3b:Q4_K_M qwen3-30b-a3b:Q8_0
for x in "$B/llm-gguf" "$B/llm-bench" "$B/bench-peer"; do
    [ -x "$x" ] || { echo "gpu-peer: $x not built (make -j16 CUDA_ARCHS=90 BUILD=$B)"; exit 1; }
done
slug=$(echo "$gpu" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
log=bench/results/$(date -u +%Y-%m-%d)-$slug-gpu-peer.md
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
mkdir -p bench/results "$D"
# llama.cpp's libggml-cuda.so finds libcudart/libcublas .so.13 through this (its RUNPATH is only $ORIGIN)
# (and a libggml-cuda.so rebuilt from source, gpu-peer-fetch.sh CUDA_SO, finds libggml-base.so.0 in the peer's folder)
export LD_LIBRARY_PATH=$PEER/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ ! -f "$log" ]; then
    {
        echo "# libinfer vs llama.cpp CUDA on $gpu"
        echo
        echo "- machine: $gpu, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)," \
            "$(nproc) CPU cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)), nvcc" \
            "$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
        echo "- peer: llama.cpp v0.5.0 from npm @node-llama-cpp/linux-x64-cuda@3.22.1 (bench/gpu-peer-fetch.sh)${PEER_NOTE:+; $PEER_NOTE}"
        echo "- models: \`llm-gguf synth --preset P --type T --random-blocks\` (qwen3-0.6b: --seed 1, quantised)"
        echo "- command: \`COMMIT=$commit BUILD=$B sh bench/gpu-peer.sh PRESET:TYPE ...\`, each model:" \
            "\`llm-bench -m F -ngl 99 $ARGS\` then \`bench-peer -m F -ngl 99 $ARGS\`"
        echo "- % of roofline: weight bytes per token x tg t/s over infer_device_bandwidth (copy kernel, read + write)"
    } > "$log"
fi
echo >> "$log"
echo "## $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit: $*${PEER_NOTE:+ (peer: $PEER_NOTE)}" >> "$log"
step() { # title, command...: the command line and its output (stdout and stderr) into the log
    title=$1; shift
    echo "== $title"
    { echo; echo "\`$*\`"; echo; echo '```'; } >> "$log"
    timeout "$T" "$@" >> "$log" 2>&1 || { echo "FAILED (exit $?)" >> "$log"; status=1; }
    echo '```' >> "$log"
}
status=0
for item in "$@"; do
    preset=${item%%:*} type=${item#*:} moe=""
    case $type in *:cpu-moe) type=${type%:cpu-moe} moe="--cpu-moe" ;; esac
    f=$D/$preset-$type.gguf
    case $preset in qwen3-0.6b) how="--seed 1" ;; *) how="--random-blocks" ;; esac
    echo >> "$log"
    echo "### $preset $type" >> "$log"
    if ! timeout "$T" "$B/llm-gguf" synth --preset "$preset" --type "$type" $how -o "$f" >> "$log" 2>&1; then
        echo "synth failed: $item" | tee -a "$log"
        status=1
        continue
    fi
    step "$item libinfer" "$B/llm-bench" -m "$f" -ngl 99 $moe $ARGS
    step "$item llama.cpp" env INFER_PEER_DIR="$PEER" "$B/bench-peer" -m "$f" -ngl 99 $moe $ARGS
    rm -f "$f"
    [ -n "${OUT:-}" ] && cp "$log" "$OUT/"
done
echo "gpu-peer: log in $log"
exit $status
