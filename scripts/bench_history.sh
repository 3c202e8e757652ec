#!/usr/bin/env bash
# The decision history's benchmarks (BENCHMARKS.md, "Decision history"):
#   1. /checkv2 throughput with the history on and off: two release daemons, one with
#      `[history] enabled = false`, take turns under wrk (scripts/bench/checkv2.lua with
#      BENCH_ENVELOPE=1: every sixth dev-corpus message with an MTA's envelope headers) for ROUNDS rounds (default
#      3), so a change in the machine's load hits both; each round prints both rates and the
#      cost, the end the median cost. Then the on daemon's history bytes per record; then
#      shrike's CPU a message with the history on and off (scripts/bench_cpu.sh, which counts
#      the writer thread too): throughput moves with the shared machine's load, CPU much less.
#   2. bytes per record on the dev corpus, batches of 100, 1000 and 4096 records
#      (examples/history_bench.rs corpus).
#   3. a query over RECORDS (default 1 000 000) synthetic records (examples/history_bench.rs
#      generate) with `shrike history --data`: the first page, and full scans with filters that
#      match little (so every record is looked at). Best of 3 runs each, warm page cache.
# Client and servers share the machine.
#
#   [ROUNDS=3] [RECORDS=1000000] scripts/bench_history.sh [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
conns=${2:-16}
rounds=${ROUNDS:-3}
records=${RECORDS:-1000000}
work=${BENCH_DIR:-/tmp/shrike-bench-history}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
export SHRIKE_CORPUS="$corpus"
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
find "$work/corpus/spamassassin-dev" -type f -path '*/*ham/*' -o -type f -path '*/spam/*' | sort \
    | awk 'NR % 6 == 1' > "$work/list"
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 1; }
cargo build --release --quiet --bin shrike --example history_bench
bin="$target/release/shrike"
bench="$target/release/examples/history_bench"

echo "## 1. /checkv2 with the history on and off ($(wc -l < "$work/list") messages in the cycle)"
rm -rf "$work/on" "$work/off"
mkdir -p "$work/on" "$work/off"
printf '[history]\nenabled = false\n' | cat - scripts/bench/offline.toml > "$work/off/shrike.toml"
"$bin" --config scripts/bench/offline.toml serve --http 127.0.0.1:21341 --milter off --data "$work/on/data" 2> "$work/on/log" &
on_pid=$!
"$bin" --config "$work/off/shrike.toml" serve --http 127.0.0.1:21342 --milter off \
    --data "$work/off/data" 2> "$work/off/log" &
off_pid=$!
trap 'kill $on_pid $off_pid 2>/dev/null || true' EXIT
for port in 21341 21342; do
    for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
done
rate() {  # rate PORT SECONDS -> msg/s
    BENCH_ENVELOPE=1 BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d"$2s" -s scripts/bench/checkv2.lua \
        "http://127.0.0.1:$1" | awk '/^messages/ {print $7}'
}
rate 21341 5 >/dev/null
rate 21342 5 >/dev/null
costs=()
for r in $(seq "$rounds"); do
    # Alternate which goes first, so neither always runs on the warmer machine.
    if [ $((r % 2)) = 1 ]; then on=$(rate 21341 "$secs"); off=$(rate 21342 "$secs");
    else off=$(rate 21342 "$secs"); on=$(rate 21341 "$secs"); fi
    cost=$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.2f", (1 - a / b) * 100}')
    costs+=("$cost")
    echo "round $r: history on $on msg/s, off $off msg/s: cost $cost%"
done
sorted=$(printf '%s\n' "${costs[@]}" | sort -n | tr '\n' ' ')
echo "median cost: $(echo "$sorted" | awk '{print $(int((NF + 1) / 2))}')% (rounds: $sorted)"
curl -s http://127.0.0.1:21341/health | python3 -c '
import json, sys
h = json.load(sys.stdin)["history"]
print("history on: %d records, %d dropped, %d bytes, %.1f bytes/record"
      % (h["written"], h["dropped"], h["bytes"], h["bytes"] / max(h["written"], 1)))'
kill $on_pid $off_pid
wait $on_pid $off_pid 2>/dev/null || true
trap - EXIT

echo "## 1b. shrike's CPU a message, history on and off (scripts/bench_cpu.sh, alternated)"
BENCH_ENVELOPE=1 ROUNDS=${CPU_ROUNDS:-4} SECS=${CPU_SECS:-15} \
    scripts/bench_cpu.sh http "$bin" "$bin:$work/off/shrike.toml"

echo "## 2. bytes per record on the dev corpus"
"$bench" corpus 100 1000 4096

echo "## 3. queries over $records synthetic records"
rm -rf "$work/query"
"$bench" generate "$work/query" "$records" 1000
best() {  # best LABEL ARGS... -> best wall time of 3 runs, and the records printed
    local best_ms=999999 lines=0
    for _ in 1 2 3; do
        local t0 t1
        t0=$(date +%s%N)
        lines=$("$bin" history --data "$work/query" --json "$@" 2>/dev/null | wc -l)
        t1=$(date +%s%N)
        local ms=$(( (t1 - t0) / 1000000 ))
        [ "$ms" -lt "$best_ms" ] && best_ms=$ms
    done
    printf '%-60s %6d ms  %7d records\n' "$*" "$best_ms" "$lines"
}
best --limit 50
best --limit 50 --action reject
best --limit 50 --symbol SYMBOL_NUMBER_7
best --limit 1000000 --sender nobody@nowhere.example
best --limit 1000000 --symbol NO_SUCH_SYMBOL
best --limit 1000000 --ip 203.0.113.0/24
best --limit 1000000 --min-score 24.99 --action reject
best --limit 1000000 --queue-id 0123456789
