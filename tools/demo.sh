#!/bin/sh
# make demo: the main job on a built-in synthetic model: write a small Qwen3.5-MoE-shaped Q4_K_M model
# (Gated DeltaNet + gated attention layers, routed and shared experts, an MTP head whose drafts agree
# with the model about 85% of the time) with our quantisers, load it through the public API's checks
# and print its model table, generate 32 tokens from it (random weights: the text is noise, the point
# is the whole path running), the same greedily with and without MTP speculative decoding (identical
# tokens, fewer forward passes), and benchmark it llama-bench style.
set -e
B=${1:-build}
model="$B/demo-qwen35moe-Q4_K_M.gguf"
"$B/llm-gguf" synth --arch qwen35moe --type Q4_K_M --mtp-noise 0.2 --seed 42 -o "$model"
"$B/llm-gguf" info "$model"
echo
"$B/llm-run" -m "$model" -p "Once upon a time" -n 32 -s 42
echo
"$B/llm-run" -m "$model" -p "Once upon a time" -n 64 --temp 0 --print-ids
"$B/llm-run" -m "$model" -p "Once upon a time" -n 64 --temp 0 --print-ids --mtp 3
echo
"$B/llm-bench" -m "$model" -p 64 -n 32 -r 2 --mtp 3
