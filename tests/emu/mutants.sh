#!/bin/sh
# tests/emu/mutants.sh: proof that `make check-emu` bites. Applies, one at a time, a deliberate single-line
# bug to a kernel or to the CUDA backend (a removed barrier, an off-by-one tail, a wrong shuffle offset, a
# wrong stride, a missing synchronisation, a graph argument that goes stale, a wrong mma fragment index...),
# runs `make check-emu` stopping at the first failing test program, restores the file, and prints one line
# per mutant: CAUGHT with the test and its first complaint, or MISSED. Exit status 1 if any was missed.
#   sh tests/emu/mutants.sh            all mutants (about a minute or two each on 2 cores)
#   sh tests/emu/mutants.sh 3 7        only mutants 3 and 7
# Needs a clean working tree for the files it touches (it restores them from copies, not from git).
cd "$(dirname "$0")/../.." || exit 1
B=build-emu
LOG=$B/mutants
mkdir -p "$LOG"

# id | file | exact text (must occur once) | replacement | what the bug is   (\| is a |, \n a newline)
MUTANTS=$(cat <<'EOF'
1|kernels/act.cu|    if (threadIdx.x % WARP_SIZE == 0) part[threadIdx.x / WARP_SIZE] = v;\n    __syncthreads();\n|    if (threadIdx.x % WARP_SIZE == 0) part[threadIdx.x / WARP_SIZE] = v;\n|removed barrier: softmax's block reduction reads the warps' partials before they are written
2|kernels/gdn.cu|        __syncthreads(); /* qn, kn, red and gate are rewritten by the next token */\n|\n|removed barrier: the next token of Gated DeltaNet overwrites q, k and the gates while slow warps read them
3|kernels/common.cuh|    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);|    for (int o = WARP_SIZE / 4; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);|wrong shuffle offset: warp_sum starts at 8 and sums only half the warp
4|kernels/norm.cu|    for (int64_t i = tid; i < a.n; i += ROW_THREADS) ss = fmaf(x[i], x[i], ss);|    for (int64_t i = tid; i < a.n - 1; i += ROW_THREADS) ss = fmaf(x[i], x[i], ss);|off-by-one tail: RMSNorm's sum of squares misses the last value
5|kernels/rope.cu|    float *x = a.x + t * a.token_stride + (int64_t)h * a.head_stride;|    float *x = a.x + t * a.token_stride + (int64_t)h * a.head_dim;|wrong stride: RoPE steps heads by head_dim instead of head_stride
6|kernels/mm.cu|    bf[0] = x32[n * LW + kw], bf[1] = x32[n * LW + kw + 4];|    bf[0] = x32[n * LW + kw], bf[1] = x32[n * LW + kw + 2];|wrong fragment index: the mma B fragment's second register reads k + 4 instead of k + 8
7|kernels/attn.cu|    for (int s = 0; s < n_split; s++) M = fmaxf(M, part[s * split_stride]);|    for (int s = 1; s < n_split; s++) M = fmaxf(M, part[s * split_stride]);|off-by-one: the split-K merge takes its running max from all splits but the first
8|kernels/quantize.cu|    const float d = amax / 127.0f;|    const float d = amax / 128.0f;|wrong scale: 8-bit activations quantised with amax / 128
9|kernels/moe.cu|            const size_t off = ((size_t)e * a.n_ff + f) * rb.gu;|            const size_t off = ((size_t)e * a.n_embd + f) * rb.gu;|wrong stride: expert e's gate / up rows found n_embd rows apart instead of n_ff
10|kernels/ssm_conv.cu|            if (i < nw) win[i] = i + 1 < nw ? win[i + 1] : x;|            if (i < nw) win[i] = i + 2 < nw ? win[i + 1] : x;|off-by-one: the conv window shifts in the new input one slot early
11|kernels/embed.cu|    if (!rb \|\| !a->table \|\| !a->ids \|\| !a->y \|\| a->n_tokens < 0 \|\| a->n_tokens > 65535) return cudaErrorInvalidValue;|    if (!rb \|\| !a->table \|\| !a->ids \|\| !a->y \|\| a->n_tokens < 0 \|\| a->n_tokens > 65535 \|\| a->n_tokens == 3) return cudaErrorInvalidValue;|a launcher refuses a valid shape (3 tokens: the verification batch)
12|lib/backend_cuda.c|    if (!c->exec \|\| c->exec_key != key) {|    if (!c->exec) {|stale graph arguments: a decode graph is replayed after its key (the batch shape) changed
13|lib/device.c|        CU_TRY(cudaEventSynchronize(e1));\n|\n|missing synchronisation: the bandwidth probe reads the elapsed time before its event completed
14|kernels/sample.cu|            if ((key & mask) == prefix) atomicAdd(&s.hist[(key >> shift) & 255u], 1u);|            if ((key & mask) == prefix) atomicAdd(&s.hist[(key >> shift) & 127u], 1u);|wrong bucket: the sampler's radix histogram folds the upper half of each digit onto the lower
15|kernels/mmv.cu|    s0 = __dp4a(wu.q[0], xv[0].x, s0), s0 = __dp4a(wu.q[1], xv[0].y, s0);|    s0 = __dp4a(wu.q[0], xv[0].x, s0), s0 = __dp4a(wu.q[1], xv[0].x, s0);|wrong operand: a quantised dot product pairs the second weight word with the first activation word
EOF
)

apply() { # file old new -> 0 when old occurred exactly once and was replaced
    python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2].replace('\\n', '\n').replace('\\|', '|'), sys.argv[3].replace('\\n', '\n').replace('\\|', '|')
s = open(path).read()
if s.count(old) != 1:
    sys.exit("%s: the mutant's text occurs %d times" % (path, s.count(old)))
open(path, 'w').write(s.replace(old, new))
PY
}

only=" $* "
rm -f "$LOG/missed"
printf '%s\n' "$MUTANTS" | sed 's/\\|/\x01/g' > "$LOG/list"
while IFS='|' read -r id file old new what; do
    [ -n "$id" ] || continue
    case "$only" in "  ") ;; *" $id "*) ;; *) continue ;; esac
    old=$(printf '%s' "$old" | tr '\001' '|')
    new=$(printf '%s' "$new" | tr '\001' '|')
    cp "$file" "$LOG/orig"
    if ! apply "$file" "$old" "$new"; then
        echo "mutant $id NOT APPLIED: $file: $what"
        echo "$id" >> "$LOG/missed"
        continue
    fi
    t0=$(date +%s)
    if ! make --no-print-directory EMU=1 -j"$(nproc)" all > "$LOG/$id.log" 2>&1; then
        cp "$LOG/orig" "$file"
        touch "$file"
        echo "mutant $id DOES NOT BUILD (a bad mutant, not a catch): $file: $what"
        echo "$id" >> "$LOG/missed"
        continue
    fi
    INFER_TEST_FAILFAST=1 make --no-print-directory check-emu > "$LOG/$id.log" 2>&1
    st=$?
    cp "$LOG/orig" "$file"
    touch "$file"
    t=$(($(date +%s) - t0))
    if [ $st -eq 0 ]; then
        echo "mutant $id MISSED ($t s): $file: $what"
        echo "$id" >> "$LOG/missed"
    else
        prog=$(sed -n 's/^FAIL \([^ ]*\) (exit.*/\1/p' "$LOG/$id.log" | head -n 1)
        tlog=$B/test-logs/$prog.log
        emu=$(grep -m 1 '^emu: ' "$tlog" 2>/dev/null | cut -c1-300)
        fail=$(grep -m 1 '^FAIL ' "$tlog" 2>/dev/null | cut -c1-230)
        echo "mutant $id CAUGHT by ${prog:-?} ($t s): $file: $what"
        [ -n "$emu" ] && echo "    $emu"
        echo "    ${fail:-see $LOG/$id.log}"
    fi
done < "$LOG/list"
make --no-print-directory EMU=1 -j"$(nproc)" all > /dev/null 2>&1 # the unmutated build back
if [ -f "$LOG/missed" ]; then rm -f "$LOG/missed"; exit 1; fi
exit 0
