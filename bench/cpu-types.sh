#!/bin/sh
# cpu-types.sh: CPU pp512 / tg128 of libinfer (llm-bench) and llama.cpp (bench-peer) on the same synthetic
# file (PRESET, default qwen3-0.6b) in each file type given, back to back.
#   [PRESET=qwen35-0.8b] [REPS=2] [ROUNDS=1] sh bench/cpu-types.sh [MODEL_DIR] [THREADS] [TYPES...]
#   (a file per type is written there first; the IQ / TQ types' tensors get random blocks, see llm-gguf synth)
# ROUNDS > 1 repeats the whole pass, ours first in odd rounds and llama.cpp first in even ones, and ends with a
# table of each side's median t/s over the rounds and their ratio. Why: on a shared machine the bandwidth moves
# by 10-20 % from one minute to the next (2-thread memcpy 31-46 GB/s within 20 minutes on 2026-11-29), so one
# pair of runs can land a memory-bound row either side of 1.0x; alternating rounds give both sides the same luck.
set -e
B=${BUILD:-build}
D=${1:-/tmp}
T=${2:-2}
R=${REPS:-2}
N=${ROUNDS:-1}
shift 2 2>/dev/null || true
P=${PRESET:-qwen3-0.6b}
types=${*:-Q4_K_M Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M}
for ty in $types; do
    f="$D/$P-$ty.gguf"
    [ -f "$f" ] || "$B/llm-gguf" synth --preset "$P" --type "$ty" --seed 1 -o "$f"
done
ours() { "$B/llm-bench" -m "$1" -p 512 -n 128 -r "$R" -t "$T"; }
peer() { INFER_PEER_DIR="$B/peer" "$B/bench-peer" -m "$1" -p 512 -n 128 -r "$R" -t "$T"; }
log=$(mktemp)
# one side's tables for type $2, printed and kept in the log with the side and type in front
side() { "$1" "$D/$P-$2.gguf" | sed "s/^/$1 $2 /" | tee -a "$log" | sed "s/^$1 $2 //"; }
round=1
while [ "$round" -le "$N" ]; do
    for ty in $types; do
        echo "### $P $ty (round $round of $N)"; date -u
        if [ $((round % 2)) -eq 1 ]; then
            side ours "$ty"
            side peer "$ty"
        else
            side peer "$ty"
            side ours "$ty"
        fi
    done
    round=$((round + 1))
done
date -u
if [ "$N" -gt 1 ]; then
    echo
    echo "### $P, $T threads: median t/s over $N rounds (each round's figure the mean of $R runs)"
    echo
    echo "| type | test | libinfer | llama.cpp | ratio |"
    echo "| --- | --- | ---: | ---: | ---: |"
    # a table row: side type | ... | test | t/s ± sd | ...; the test is the field that starts with pp or tg
    awk -F'|' '
        $1 ~ /^(ours|peer) / {
            split($1, h, " ")
            for (i = 2; i < NF; i++) {
                v = $i
                gsub(/ /, "", v)
                if (v ~ /^(pp|tg)[0-9]+$/) {
                    ts = $(i + 1)
                    sub(/±.*/, "", ts)
                    gsub(/ /, "", ts)
                    k = h[2] " " v
                    n[h[1] " " k]++
                    x[h[1] " " k, n[h[1] " " k]] = ts + 0
                    if (!(k in seen)) { seen[k] = 1; order[++m] = k }
                    break
                }
            }
        }
        function median(key,    c, i, j, t, a) {
            c = n[key]
            for (i = 1; i <= c; i++) a[i] = x[key, i]
            for (i = 2; i <= c; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
        }
        END {
            for (r = 1; r <= m; r++) {
                split(order[r], kk, " ")
                o = median("ours " order[r])
                p = median("peer " order[r])
                printf "| %s | %s | %.2f | %.2f | %.2fx |\n", kk[1], kk[2], o, p, (p > 0 ? o / p : 0)
            }
        }' "$log"
fi
rm -f "$log"
