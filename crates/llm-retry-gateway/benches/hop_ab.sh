#!/usr/bin/env bash
# Two builds of the hop bench (benches/hop.rs) measured alternately, so
# that both see the same load on a shared machine: the one-at-a-time
# latency and CPU (HOP_MODE=serial) in ROUNDS rounds, then throughput
# under `wrk` (-t1 -c32 -d10s, a POST of the JSON prompt) in WRK_ROUNDS
# rounds, each build serving in turn, with the gateway threads' CPU per
# request and the load average at the end of each round.
#
# Keep a build's binary before changing the code, e.g.
#   cp "$(ls -t target/release/deps/hop-* | grep -v '\.d$' | head -1)" target/hop-before
# Usage: crates/llm-retry-gateway/benches/hop_ab.sh BEFORE_BINARY AFTER_BINARY
# Env:   ROUNDS (default 2), WRK_ROUNDS (default 3).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BEFORE_BINARY AFTER_BINARY" >&2; exit 1; }
before=$1
after=$2
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }

# CPU seconds (in clock ticks) of the threads named hop-gateway in process $1.
gateway_cpu() {
    local total=0
    for task in /proc/"$1"/task/*; do
        [ "$(cat "$task/comm" 2>/dev/null)" = hop-gateway ] || continue
        total=$((total + $(sed 's/.*) //' "$task/stat" | awk '{ print $12 + $13 }')))
    done
    echo "$total"
}

lua=$(mktemp --suffix=.lua)
trap 'rm -f "$lua"' EXIT
cat >"$lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}'
wrk.headers["Content-Type"] = "application/json"
LUA

for round in $(seq "${ROUNDS:-2}"); do
    for build in before after; do
        echo "== one at a time: $build, round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
        HOP_MODE=serial "${!build}" --bench | grep -E '^\| (direct|through|added)|CPU'
    done
done

echo
echo "| build | round | direct req/s | gateway req/s | gateway / direct | gateway CPU per request | load |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for round in $(seq "${WRK_ROUNDS:-3}"); do
    for build in before after; do
        urls=$(mktemp)
        HOP_MODE=serve "${!build}" --bench >"$urls" &
        server=$!
        for _ in $(seq 50); do [ "$(wc -l <"$urls")" -ge 2 ] && break; sleep 0.1; done
        direct=$(awk '$1 == "direct" { print $2 }' "$urls")
        gateway=$(awk '$1 == "gateway" { print $2 }' "$urls")
        wrk -t1 -c32 -d2s -s "$lua" "$gateway" >/dev/null
        d=$(wrk -t1 -c32 -d10s -s "$lua" "$direct" | awk '/Requests\/sec/ { print $2 }')
        cpu_before=$(gateway_cpu "$server")
        out=$(wrk -t1 -c32 -d10s -s "$lua" "$gateway")
        cpu_after=$(gateway_cpu "$server")
        g=$(echo "$out" | awk '/Requests\/sec/ { print $2 }')
        n=$(echo "$out" | awk '/requests in/ { print $1 }')
        awk -v b="$build" -v r="$round" -v d="$d" -v g="$g" -v n="$n" \
            -v t=$((cpu_after - cpu_before)) -v l="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
            printf "| %s | %d | %.0f | %.0f | %.1f %% | %.1f µs | %s |\n", b, r, d, g, 100 * g / d, t * 10000 / n, l }'
        kill "$server"
        wait "$server" 2>/dev/null || true
        rm -f "$urls"
    done
done
