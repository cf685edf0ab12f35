#!/bin/sh
# gpu-peer-fetch.sh: carries llama.cpp's CUDA build (npm @node-llama-cpp/linux-x64-cuda@3.22.1, the
# same llama.cpp release as the CPU peer of `make peer`) to a device machine, which cannot reach npm.
# One device call carries at most 64 MiB (working tree included) and libggml-cuda.so alone is 152 MiB,
# so the package is stripped (no node addon, no libllama-common, seven of the fourteen CPU variants),
# packed as one tar.xz, split into parts of PART_MIB MiB (default 56) with a sha256 MANIFEST, carried a
# part per call (ignored paths stay on a warm device between back-to-back calls), and joined there.
#
#   sh bench/gpu-peer-fetch.sh              here: npm pack, strip, pack, split into build/peer-cuda/parts/
#   CUDA_SO=F sh bench/gpu-peer-fetch.sh    the same with F as libggml-cuda.so: built for sm_90 alone from the
#                                           release's source, the package is one part (see the pack step)
#   sh bench/gpu-peer-fetch.sh --check      here: the round trip (join into a scratch folder, compare sha256)
#   sh bench/gpu-peer-fetch.sh --receive    device: keep the part(s) this call carried in build/peer-cuda/got/
#   sh bench/gpu-peer-fetch.sh --join       device: verify, reassemble, unpack; then INFER_PEER_DIR=build/peer-cuda
#
# The unpacked layout is the CPU peer's (node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/, which
# tests/peer.c looks for), with links libggml.v0.5.0.so -> libggml.cuda.v0.5.0.so and libllama.v0.5.0.so
# -> libllama.cuda.v0.5.0.so, the names tests/conformance/llama_peer.c opens. libggml-cuda.so needs
# libcudart.so.13 and libcublas.so.13 (CUDA 13, as the device's toolkit) and the driver's libcuda.so.1;
# llama.cpp loads it at run time from the same folder (ggml_backend_load_all_from_path).
#
# The device sequence (each a `run` call from the lead's checkout, back to back so the machine stays
# warm; N parts as printed by the first step, three at PART_MIB=56; COMMIT is this checkout's HEAD):
#   1. carry [build/peer-cuda/parts/MANIFEST, build/peer-cuda/parts/part00]:
#        sh bench/gpu-peer-fetch.sh --receive && make -j16 CUDA_ARCHS=90 BUILD=build-gpu >/dev/null
#   2. carry [build/peer-cuda/parts/part01]: sh bench/gpu-peer-fetch.sh --receive
#   3. carry [build/peer-cuda/parts/part02]: sh bench/gpu-peer-fetch.sh --receive && sh bench/gpu-peer-fetch.sh --join
#        && COMMIT=<hash> BUILD=build-gpu sh bench/gpu-peer.sh qwen3-0.6b:Q4_K_M llama3-8b:Q4_K_M qwen3-8b:Q4_K_M
#   4. (no carry) COMMIT=<hash> BUILD=build-gpu sh bench/gpu-peer.sh llama3-8b:Q8_0 qwen3-8b:Q8_0
#   5. (no carry) COMMIT=<hash> BUILD=build-gpu sh bench/gpu-peer.sh qwen3-30b-a3b:Q4_K_M qwen3-30b-a3b:Q8_0
# gpu-peer.sh appends to one log per day and device and copies it to $OUT, so every call brings it back.
# If the machine went cold between calls (a fresh one has neither the parts nor the build), start again
# at step 1. Alternative to the parts, if the device's toolkit can do it: cut libggml-cuda.so down to
# sm_90 there (cuobjdump --list-elf shows its cubins; nvprune works on object files and static
# libraries, not on a linked .so, so this likely needs a rebuild) — not tried.
set -eu
PKG=@node-llama-cpp/linux-x64-cuda@3.22.1
R=build/peer-cuda
PART_MIB=${PART_MIB:-56}
KEEP_CPU="x64 sse42 haswell skylakex icelake sapphirerapids zen4"
DEST=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64

# join FROM_DIR ROOT: checks every part and the whole archive, unpacks it under ROOT/$DEST.
join() {
    from=$1 root=$2
    [ -f "$from/MANIFEST" ] || { echo "gpu-peer-fetch: no $from/MANIFEST (carried with part00)" >&2; exit 1; }
    parts=$(awk '$2 ~ /^part/ {print $2}' "$from/MANIFEST")
    for p in $parts; do [ -f "$from/$p" ] || { echo "gpu-peer-fetch: $from/$p missing" >&2; exit 1; }; done
    (cd "$from" && for p in $parts; do cat "$p"; done > peer-cuda.tar.xz && sha256sum --quiet -c MANIFEST) ||
        { echo "gpu-peer-fetch: sha256 mismatch in $from" >&2; exit 1; }
    rm -rf "${root:?}/node_modules"
    mkdir -p "$root/$DEST"
    if command -v xz >/dev/null; then unxz() { xz -dc "$1"; }
    else unxz() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; }
    fi
    unxz "$from/peer-cuda.tar.xz" | tar -xf - -C "$root/$DEST"
    rm -f "$from/peer-cuda.tar.xz"
    ln -sfn libggml.cuda.v0.5.0.so "$root/$DEST/libggml.v0.5.0.so"
    ln -sfn libllama.cuda.v0.5.0.so "$root/$DEST/libllama.v0.5.0.so"
    echo "gpu-peer-fetch: llama.cpp CUDA peer in $root ($(ls "$root/$DEST" | wc -l) files); INFER_PEER_DIR=$root"
}

case "${1:-pack}" in
pack)
    mkdir -p "$R"
    tgz=$R/node-llama-cpp-linux-x64-cuda-3.22.1.tgz
    [ -f "$tgz" ] || (cd "$R" && npm pack --silent "$PKG" >/dev/null)
    rm -rf "$R/stage" "$R/parts"
    mkdir -p "$R/stage" "$R/parts"
    tar -xzf "$tgz" -C "$R/stage"
    bins=$R/stage/package/bins/linux-x64-cuda
    rm -f "$bins/llama-addon.node" "$bins/libllama-common.so"
    for f in "$bins"/libggml-cpu-*.so; do
        v=${f##*/libggml-cpu-}; v=${v%.so}
        case " $KEEP_CPU " in *" $v "*) ;; *) rm -f "$f" ;; esac
    done
    # CUDA_SO: a libggml-cuda.so built from the same release's source (llama/gitRelease.bundle) for the
    # device's architecture. The npm build carries sm_90 only as PTX from CUDA 13.1, which a driver of CUDA
    # 13.0 cannot compile (seen on an H100 with driver 580, 2026-11-26: "CUDA error" in its first kernel).
    # A CMake build names libggml-base by its soname libggml-base.so.0; the package ships libggml-base.so.
    if [ -n "${CUDA_SO:-}" ]; then
        cp "$CUDA_SO" "$bins/libggml-cuda.so"
        ln -sfn libggml-base.so "$bins/libggml-base.so.0"
    fi
    tar -cf - -C "$bins" . | xz -T2 -6 > "$R/peer-cuda.tar.xz"
    (cd "$R/parts" && split -b "${PART_MIB}M" -d -a 2 ../peer-cuda.tar.xz part)
    (cd "$R/parts" && sha256sum part* > MANIFEST && cd .. && sha256sum peer-cuda.tar.xz >> parts/MANIFEST)
    rm -f "$R/peer-cuda.tar.xz"
    echo "gpu-peer-fetch: $(ls "$R"/parts/part* | wc -l) parts of at most $PART_MIB MiB in $R/parts:"
    ls -l "$R/parts"
    ;;
--check)
    t=$(mktemp -d)
    cp "$R"/parts/* "$t/"
    join "$t" "$t"
    (cd "$R/stage/package/bins/linux-x64-cuda" && sha256sum $(ls)) > "$t/want.sha256"
    ok=0
    (cd "$t/$DEST" && sha256sum --quiet -c "$t/want.sha256") && ok=1
    rm -rf "$t"
    [ $ok = 1 ] || { echo "gpu-peer-fetch: round trip FAILED (sha256 differ)" >&2; exit 1; }
    echo "gpu-peer-fetch: round trip OK (sha256 of every file equal)"
    ;;
--receive)
    mkdir -p "$R/got"
    cp "$R"/parts/* "$R/got/"
    echo "gpu-peer-fetch: have $(ls "$R"/got/part* | wc -l) of $(grep -c ' part' "$R/got/MANIFEST" 2>/dev/null || echo '?') parts"
    ;;
--join)
    join "$R/got" "$R"
    ;;
*)
    sed -n '2,/^set -eu/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -eu/d'
    exit 2
    ;;
esac
