#!/bin/sh
# Experiment helper for a device session (not part of the build): builds mmv.cu with one textual
# change per variant into its own build dir and runs bench-ops on each. Usage: variants.sh NAME 'sed-expr' ...
set -u
cp kernels/mmv.cu /tmp/mmv.orig
while [ $# -ge 2 ]; do
    name=$1 expr=$2; shift 2
    cp /tmp/mmv.orig kernels/mmv.cu
    [ -n "$expr" ] && sed -i "$expr" kernels/mmv.cu
    rm -rf "b-$name"; [ -d build-gpu ] && cp -r build-gpu "b-$name"
    make -j16 CUDA_ARCHS=90 BUILD="b-$name" > /dev/null 2>&1 || { echo "$name: build failed"; continue; }
    echo "== $name: $(b-$name/tests/test-ops -b cuda -o quantize,mmv | tail -n 1)"
    b-$name/bench-ops > "$OUT/bench-$name.md" 2>&1
    grep -E '\| (Q4_K|Q8_0|Q6_K) .*\| 1 \|' "$OUT/bench-$name.md"
done
cp /tmp/mmv.orig kernels/mmv.cu
