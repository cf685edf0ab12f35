#!/bin/sh
# cpu-peer.sh: the CPU benchmarks of bench/results/*-devbox-cpu-*.md — libinfer (llm-bench) and llama.cpp
# (bench-peer, the npm build installed by `make peer`) on the same synthetic files, back to back.
#   sh bench/cpu-peer.sh [MODEL_DIR] [THREADS]      (models are written there on the first run, ~3 min)
set -e
B=${BUILD:-build}
D=${1:-/tmp}
T=${2:-2}
q3="$D/qwen3-0.6b-q4km.gguf"; noise="$D/q35moe-1b-noise.gguf"; agree="$D/q35moe-1b-agree.gguf"
dagree="$D/q35-0.8b-agree.gguf"; dnoise="$D/q35-0.8b-noise.gguf"
[ -f "$q3" ] || "$B/llm-gguf" synth --preset qwen3-0.6b --type Q4_K_M --seed 1 -o "$q3"
[ -f "$noise" ] || "$B/llm-gguf" synth --preset qwen35moe-1b --type Q4_K_M --mtp-noise 0.19 --seed 1 -o "$noise"
[ -f "$dagree" ] || "$B/llm-gguf" synth --preset qwen35-0.8b --n-vocab 32000 --type Q4_K_M --mtp-agree --seed 1 -o "$dagree"
[ -f "$dnoise" ] || "$B/llm-gguf" synth --preset qwen35-0.8b --n-vocab 32000 --type Q4_K_M --mtp-noise 0.19 --seed 1 -o "$dnoise"
[ -f "$agree" ] || "$B/llm-gguf" synth --preset qwen35moe-1b --type Q4_K_M --mtp-agree --seed 1 -o "$agree"
peer() { INFER_PEER_DIR="$B/peer" "$B/bench-peer" "$@"; }
echo "### qwen3-0.6b"; date -u
"$B/llm-bench" -m "$q3" -p 512 -n 128 -r 3 -t "$T"
peer -m "$q3" -p 512 -n 128 -r 3 -t "$T"
echo "### qwen35moe-1b noise 0.19"; date -u
"$B/llm-bench" -m "$noise" -p 512 -n 128 -r 3 -t "$T" --mtp 3
peer -m "$noise" -p 512 -n 128 -r 3 -t "$T"
echo "### qwen35moe-1b agree"; date -u
"$B/llm-bench" -m "$agree" -p 0 -n 128 -r 3 -t "$T" --mtp 1
"$B/llm-bench" -m "$agree" -p 0 -n 128 -r 3 -t "$T" --mtp 3
echo "### qwen35-0.8b (dense) agree / noise 0.19"; date -u
"$B/llm-bench" -m "$dagree" -p 0 -n 128 -r 3 -t "$T" --mtp 3
"$B/llm-bench" -m "$dagree" -p 0 -n 128 -r 3 -t "$T" --mtp 1
"$B/llm-bench" -m "$dnoise" -p 0 -n 128 -r 3 -t "$T" --mtp 3
date -u
