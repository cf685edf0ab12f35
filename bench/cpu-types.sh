#!/bin/sh
# cpu-types.sh: CPU pp512 / tg128 of libinfer (llm-bench) and llama.cpp (bench-peer) on the same synthetic
# Qwen3-0.6B-shaped file in each weight type llama-quantize writes without an imatrix, back to back.
#   sh bench/cpu-types.sh [MODEL_DIR] [THREADS] [TYPES...]   (a file per type is written there first)
set -e
B=${BUILD:-build}
D=${1:-/tmp}
T=${2:-2}
shift 2 2>/dev/null || true
types=${*:-Q4_K_M Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M}
for ty in $types; do
    f="$D/qwen3-0.6b-$ty.gguf"
    [ -f "$f" ] || "$B/llm-gguf" synth --preset qwen3-0.6b --type "$ty" --seed 1 -o "$f"
done
for ty in $types; do
    f="$D/qwen3-0.6b-$ty.gguf"
    echo "### qwen3-0.6b $ty"; date -u
    "$B/llm-bench" -m "$f" -p 512 -n 128 -r 2 -t "$T"
    INFER_PEER_DIR="$B/peer" "$B/bench-peer" -m "$f" -p 512 -n 128 -r 2 -t "$T"
done
date -u
