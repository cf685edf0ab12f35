#!/bin/sh
# make demo: the main job on a built-in synthetic model. Until the forward pass lands (issue 3) that
# job is: write a small Qwen3-MoE-shaped Q4_K_M model with our quantisers, load it through the
# public API's checks, and print its model table.
set -e
B=${1:-build}
model="$B/demo-qwen3moe-Q4_K_M.gguf"
"$B/llm-gguf" synth --arch qwen3moe --type Q4_K_M --seed 42 -o "$model"
"$B/llm-gguf" info "$model"
