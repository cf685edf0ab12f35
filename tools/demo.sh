#!/bin/sh
# make demo: the main job on a built-in synthetic model: write a small Qwen3-MoE-shaped Q4_K_M model
# with our quantisers, load it through the public API's checks and print its model table, generate
# 32 tokens from it (random weights: the text is noise, the point is the whole path running), and
# benchmark it llama-bench style.
set -e
B=${1:-build}
model="$B/demo-qwen3moe-Q4_K_M.gguf"
"$B/llm-gguf" synth --arch qwen3moe --type Q4_K_M --seed 42 -o "$model"
"$B/llm-gguf" info "$model"
echo
"$B/llm-run" -m "$model" -p "Once upon a time" -n 32 -s 42
echo
"$B/llm-bench" -m "$model" -p 64 -n 16 -r 2
