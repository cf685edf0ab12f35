#!/bin/sh
# cpu-types.sh: CPU pp512 / tg128 of libinfer (llm-bench) and llama.cpp (bench-peer) on the same synthetic
# file (PRESET, default qwen3-0.6b) in each file type given, back to back.
#   [PRESET=qwen35-0.8b] [REPS=2] sh bench/cpu-types.sh [MODEL_DIR] [THREADS] [TYPES...]   (a file per type is written
#   there first; the IQ / TQ types' tensors get random blocks, see llm-gguf synth)
set -e
B=${BUILD:-build}
D=${1:-/tmp}
T=${2:-2}
R=${REPS:-2}
shift 2 2>/dev/null || true
P=${PRESET:-qwen3-0.6b}
types=${*:-Q4_K_M Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M}
for ty in $types; do
    f="$D/$P-$ty.gguf"
    [ -f "$f" ] || "$B/llm-gguf" synth --preset "$P" --type "$ty" --seed 1 -o "$f"
done
for ty in $types; do
    f="$D/$P-$ty.gguf"
    echo "### $P $ty"; date -u
    "$B/llm-bench" -m "$f" -p 512 -n 128 -r "$R" -t "$T"
    INFER_PEER_DIR="$B/peer" "$B/bench-peer" -m "$f" -p 512 -n 128 -r "$R" -t "$T"
done
date -u
