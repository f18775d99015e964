#!/usr/bin/env bash
# Instructions per success-path call for each stack of benches/overhead.rs,
# counted by callgrind inside `measured_region` only, at two call counts:
#   per call = (total(N2) - total(N1)) / (N2 - N1)
# so warm-up, runtime setup and the fixed cost of the region cancel out.
#
# Usage: crates/llm-retry/benches/overhead_callgrind.sh [N1] [N2]
# Env:   OUT_DIR (default target/callgrind-overhead) keeps the out files;
#        STACKS overrides the list of stacks.
set -euo pipefail
cd "$(dirname "$0")/../../.."

n1=${1:-1000}
n2=${2:-3000}
stacks=${STACKS:-"bare tower_retry retry retry_guard client_layer"}
out=${OUT_DIR:-target/callgrind-overhead}
mkdir -p "$out"

command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }

bin=$(cargo bench -p llm-retry --bench overhead --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "overhead" \
            and "bench" in m["target"]["kind"] and m.get("executable"):
        print(m["executable"])
')
[ -x "$bin" ] || { echo "bench binary not found" >&2; exit 1; }
echo "binary: $bin"

# The `totals:` (or `summary:`) line of a callgrind out file: Ir first.
total() { awk '/^(totals|summary):/ { print $2; exit }' "$1"; }

declare -A per
for stack in $stacks; do
    for n in "$n1" "$n2"; do
        OVERHEAD_STACK=$stack OVERHEAD_CALLS=$n valgrind --tool=callgrind \
            --toggle-collect='*measured_region*' \
            --callgrind-out-file="$out/$stack.$n.out" "$bin" --bench \
            >/dev/null 2>"$out/$stack.$n.log"
    done
    t1=$(total "$out/$stack.$n1.out")
    t2=$(total "$out/$stack.$n2.out")
    per[$stack]=$(( (t2 - t1) / (n2 - n1) ))
done

base=${per[tower_retry]:-}
printf '%-14s %12s %14s\n' stack instr/call "vs tower_retry"
for stack in $stacks; do
    if [ -n "$base" ]; then
        ratio=$(awk -v a="${per[$stack]}" -v b="$base" 'BEGIN { printf "%.3fx", a / b }')
    else
        ratio=-
    fi
    printf '%-14s %12s %14s\n' "$stack" "${per[$stack]}" "$ratio"
done
echo "out files: $out/<stack>.<calls>.out (callgrind_annotate --inclusive=yes FILE)"
