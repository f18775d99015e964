#!/usr/bin/env bash
# What one proxied request costs through the gateway (benches/hop.rs), in
# three measurements:
#   1. added latency, one request at a time, interleaved with direct calls,
#      and the gateway threads' CPU per request;
#   2. throughput under `wrk` (1 thread, 32 connections), direct and
#      through the gateway alternately, and the gateway threads' CPU per
#      request under that load;
#   3. instructions per proxied request under callgrind, on the gateway's
#      thread alone (the client's and the mock's work is what a direct
#      call costs too):
#        per call = (total(N2) - total(N1)) / (N2 - N1)
#      so start-up cancels out; user space only (the kernel's share of
#      the sockets is not counted).
#
# Usage: crates/llm-retry-gateway/benches/hop.sh
# Env:   HOP_REQUESTS (serial pairs, default 5000), WRK_SECS (default 10),
#        WRK_ROUNDS (default 3), N1/N2 (callgrind counts, default 300/900),
#        SKIP (any of: serial wrk callgrind), HOP_GATEWAY_WORKERS (the
#        gateway runtime's workers, default 1).
set -euo pipefail
cd "$(dirname "$0")/../../.."

skip=${SKIP:-}
bin=$(cargo bench -p llm-retry-gateway --bench hop --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "hop" \
            and "bench" in m["target"]["kind"] and m.get("executable"):
        print(m["executable"])
')
[ -x "$bin" ] || { echo "bench binary not found" >&2; exit 1; }
echo "binary: $bin"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ $skip != *serial* ]]; then
    HOP_MODE=serial "$bin" --bench
fi

# CPU seconds of the threads named hop-gateway in process $1.
gateway_cpu() {
    local total=0
    for task in /proc/"$1"/task/*; do
        [ "$(cat "$task/comm" 2>/dev/null)" = hop-gateway ] || continue
        # utime and stime: fields 14 and 15, counted after the `(comm)` field.
        total=$((total + $(sed 's/.*) //' "$task/stat" | awk '{ print $12 + $13 }')))
    done
    echo "$total"
}

if [[ $skip != *wrk* ]]; then
    command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
    lua=$(mktemp --suffix=.lua)
    cat >"$lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}'
wrk.headers["Content-Type"] = "application/json"
EOF
    urls=$(mktemp)
    HOP_MODE=serve "$bin" --bench >"$urls" &
    server=$!
    trap 'kill $server 2>/dev/null; rm -f "$lua" "$urls"' EXIT
    for _ in $(seq 50); do [ "$(wc -l <"$urls")" -ge 2 ] && break; sleep 0.1; done
    direct=$(awk '$1 == "direct" { print $2 }' "$urls")
    gateway=$(awk '$1 == "gateway" { print $2 }' "$urls")
    secs=${WRK_SECS:-10}
    wrk -t1 -c32 -d2s -s "$lua" "$direct" >/dev/null
    wrk -t1 -c32 -d2s -s "$lua" "$gateway" >/dev/null
    echo
    echo "wrk -t1 -c32 -d${secs}s, POST of the JSON prompt, alternating"
    echo "| round | direct req/s | gateway req/s | gateway / direct | gateway CPU per request |"
    echo "|---|---:|---:|---:|---:|"
    for round in $(seq "${WRK_ROUNDS:-3}"); do
        d=$(wrk -t1 -c32 -d"${secs}s" -s "$lua" "$direct" | awk '/Requests\/sec/ { print $2 }')
        before=$(gateway_cpu "$server")
        out=$(wrk -t1 -c32 -d"${secs}s" -s "$lua" "$gateway")
        after=$(gateway_cpu "$server")
        g=$(echo "$out" | awk '/Requests\/sec/ { print $2 }')
        n=$(echo "$out" | awk '/requests in/ { print $1 }')
        awk -v r="$round" -v d="$d" -v g="$g" -v n="$n" -v t=$((after - before)) 'BEGIN {
            printf "| %d | %.0f | %.0f | %.1f %% | %.1f µs |\n", r, d, g, 100 * g / d, t * 10000 / n }'
    done
    kill $server
    wait $server 2>/dev/null || true
fi

if [[ $skip != *callgrind* ]]; then
    command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
    out=${OUT_DIR:-target/callgrind-hop}
    mkdir -p "$out"
    n1=${N1:-300}
    n2=${N2:-900}
    total() { awk '/^(totals|summary):/ { print $2; exit }' "$1"; }
    # The gateway's thread: the one whose profile holds its handler.
    gateway_total() {
        for f in "$1"-*; do
            grep -q 'llm_retry_gateway::proxy::forward' "$f" && total "$f"
        done | awk '{ s += $1 } END { print s }'
    }
    for n in "$n1" "$n2"; do
        HOP_MODE=calls HOP_PATH=gateway HOP_CALLS=$n valgrind --tool=callgrind \
            --separate-threads=yes --callgrind-out-file="$out/gateway.$n.out" "$bin" --bench \
            >/dev/null 2>"$out/gateway.$n.log"
    done
    per=$((($(gateway_total "$out/gateway.$n2.out") - $(gateway_total "$out/gateway.$n1.out")) / (n2 - n1)))
    echo
    echo "callgrind: $per instructions per proxied request on the gateway's thread (user space)"
    echo "out files: $out/gateway.<calls>.out-<thread> (callgrind_annotate --inclusive=yes FILE)"
fi
