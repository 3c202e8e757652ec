#!/usr/bin/env bash
# HTTP throughput and latency of `shrike serve` over the dev corpus with wrk (POST /checkv2,
# cycling through every sixth corpus message (521 of the dev split)), and the same client against rspamd 3.4 from Debian
# (../shared/tools/rspamd/rspamd-up) when --rspamd is given. Client and server share the machine.
# With --rspamd both servers stay up and take turns for ROUNDS rounds (default 1), so that a
# change in the machine's load hits both; each round prints the ratio, the end the median.
#
#   [ROUNDS=1] scripts/bench_http.sh [--rspamd] [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
with_rspamd=0
if [ "${1:-}" = "--rspamd" ]; then with_rspamd=1; shift; fi
secs=${1:-30}
conns=${2:-16}
work=${BENCH_DIR:-/tmp/shrike-bench}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
# Every sixth message of the sorted corpus, from all three folders.
find "$work/corpus/spamassassin-dev" -type f -path '*/*ham/*' -o -type f -path '*/spam/*' | sort \
    | awk 'NR % 6 == 1' > "$work/list"
echo "messages in the cycle: $(wc -l < "$work/list")"
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 1; }

cargo build --release --quiet
port=21333
rm -rf "$work/data"
./target/release/shrike --config scripts/bench/offline.toml serve --http "127.0.0.1:$port" --milter off --data "$work/data" \
    2> "$work/shrike.log" &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done

run() {  # run NAME URL -> the result lines; the rate in $last
    echo "== $1: warm-up 5 s"
    BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d5s -s scripts/bench/checkv2.lua "$2" >/dev/null
    echo "== $1: wrk -t2 -c$conns -d${secs}s"
    out=$(BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d"${secs}s" --latency -s scripts/bench/checkv2.lua "$2" \
        | grep -E '^(messages|latency ms|Non-2xx)')
    echo "$out"
    last=$(echo "$out" | awk '/^messages/ {print $7}')
}

stop_all() {
    kill $pid 2>/dev/null || true
    if [ "$with_rspamd" = 1 ]; then
        ../shared/tools/rspamd/rspamd-down "$work/rspamd" >/dev/null 2>&1 || true
    fi
}
trap stop_all EXIT
if [ "$with_rspamd" = 1 ]; then
    ../shared/tools/rspamd/rspamd-up "$work/rspamd" >/dev/null
fi
rounds=${ROUNDS:-1}
ratios=()
for r in $(seq "$rounds"); do
    run shrike "http://127.0.0.1:$port"
    ours=$last
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    echo "shrike RSS: $((rss / 1024)) MiB"
    if [ "$r" = 1 ]; then
        curl -s "http://127.0.0.1:$port/metrics" \
            | grep -E '^shrike_(scans_total|busy_total|stage_seconds_(sum|count))' || true
    fi
    if [ "$with_rspamd" = 1 ]; then
        run "rspamd 3.4" "http://127.0.0.1:${RSPAMD_PORT:-11533}"
        rss=$(ps -o rss= -C rspamd | awk '{s += $1} END {print s}')
        echo "rspamd RSS (all processes): $((rss / 1024)) MiB"
        ratio=$(awk -v a="$ours" -v b="$last" 'BEGIN {printf "%.2f", a / b}')
        ratios+=("$ratio")
        echo "round $r: shrike $ours / rspamd $last msg/s = ${ratio}x"
    fi
done
if [ ${#ratios[@]} -gt 0 ]; then
    sorted=$(printf '%s\n' "${ratios[@]}" | sort -n | tr '\n' ' ')
    echo "median ratio: $(echo "$sorted" | awk '{print $(int((NF + 1) / 2))}')x (rounds: $sorted)"
fi
