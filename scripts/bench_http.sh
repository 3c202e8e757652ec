#!/usr/bin/env bash
# HTTP throughput and latency of `shrike serve` over the dev corpus with wrk (POST /checkv2,
# cycling through every sixth corpus message (521 of the dev split)), and the same client against rspamd 3.4 from Debian
# (../shared/tools/rspamd/rspamd-up) when --rspamd is given. Client and server share the machine.
# With --rspamd both servers stay up and take turns for ROUNDS rounds (default 1), so that a
# change in the machine's load hits both; each round prints the ratio, the end the median.
# --noop adds a third server to every round: nginx answering every POST with a constant JSON
# reply (the HTTP ceiling of this client on this machine; installed with apt-get if missing),
# and shrike's share of its rate. TRAINED=1 starts shrike on a data directory that learned the
# whole dev split first (`shrike learn`), so the classifier and naive Bayes give an opinion on
# every message, as on a deployment that has been taught: its features are extracted and both
# models asked, which an untrained daemon skips (rspamd stays as it is, without Bayes).
# BASELINE=BINARY adds another shrike (e.g. a release build of an earlier commit) to every
# round, on its own port and data directory, and prints this build's rate over the baseline's.
#
#   [ROUNDS=1] [TRAINED=1] [BASELINE=BIN] scripts/bench_http.sh [--rspamd] [--noop] [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
with_rspamd=0
with_noop=0
while [ "${1:-}" = "--rspamd" ] || [ "${1:-}" = "--noop" ]; do
    [ "$1" = "--rspamd" ] && with_rspamd=1
    [ "$1" = "--noop" ] && with_noop=1
    shift
done
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
if [ "${TRAINED:-0}" = 1 ]; then
    dev="$work/corpus/spamassassin-dev"
    ./target/release/shrike --config scripts/bench/offline.toml learn --spam "$dev/spam" \
        --ham "$dev/ham" "$dev/hard_ham" --data "$work/data" | tail -1
fi
./target/release/shrike --config scripts/bench/offline.toml serve --http "127.0.0.1:$port" --milter off --data "$work/data" \
    2> "$work/shrike.log" &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
base_port=21334
base_pid=""
if [ -n "${BASELINE:-}" ]; then
    rm -rf "$work/base-data"
    # The baseline learns with its own code: a snapshot of another format or feature version
    # is refused, and its model should be what that build would have learned anyway.
    if [ "${TRAINED:-0}" = 1 ]; then
        "$BASELINE" --config scripts/bench/offline.toml learn --spam "$dev/spam" \
            --ham "$dev/ham" "$dev/hard_ham" --data "$work/base-data" | tail -1
    fi
    "$BASELINE" --config scripts/bench/offline.toml serve --http "127.0.0.1:$base_port" --milter off \
        --data "$work/base-data" 2> "$work/baseline.log" &
    base_pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$base_port/health" >/dev/null && break; sleep 0.1; done
fi

run() {  # run NAME URL -> the result lines; the rate in $last
    echo "== $1: warm-up 5 s"
    BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d5s -s scripts/bench/checkv2.lua "$2" >/dev/null
    echo "== $1: wrk -t2 -c$conns -d${secs}s"
    out=$(BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d"${secs}s" --latency -s scripts/bench/checkv2.lua "$2" \
        | grep -E '^(messages|latency ms|Non-2xx)')
    echo "$out"
    last=$(echo "$out" | awk '/^messages/ {print $7}')
}

noop_port=21390
start_noop() {
    if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null 2>&1 \
            || DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >/dev/null
    fi
    mkdir -p "$work/nginx"
    # One worker process per core, as rspamd and shrike get; no logging, the body discarded.
    cat > "$work/nginx/nginx.conf" <<EOC
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/nginx;
    server {
        listen 127.0.0.1:$noop_port;
        location / {
            default_type application/json;
            return 200 '{"is_skipped":false,"score":0.0,"required_score":15.0,"action":"no action","symbols":{}}';
        }
    }
}
EOC
    PATH=$PATH:/usr/sbin nginx -c "$work/nginx/nginx.conf"
    for _ in $(seq 50); do curl -sf -d x "http://127.0.0.1:$noop_port/checkv2" >/dev/null && return; sleep 0.1; done
    echo "nginx did not start (see $work/nginx/error.log)" >&2; exit 1
}

stop_all() {
    kill $pid $base_pid 2>/dev/null || true
    if [ "$with_noop" = 1 ] && [ -s "$work/nginx/nginx.pid" ]; then
        kill "$(cat "$work/nginx/nginx.pid")" 2>/dev/null || true
    fi
    if [ "$with_rspamd" = 1 ]; then
        ../shared/tools/rspamd/rspamd-down "$work/rspamd" >/dev/null 2>&1 || true
    fi
}
trap stop_all EXIT
if [ "$with_rspamd" = 1 ]; then
    ../shared/tools/rspamd/rspamd-up "$work/rspamd" >/dev/null
fi
if [ "$with_noop" = 1 ]; then start_noop; fi
rounds=${ROUNDS:-1}
ratios=()
shares=()
base_ratios=()
for r in $(seq "$rounds"); do
    run shrike "http://127.0.0.1:$port"
    ours=$last
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    echo "shrike RSS: $((rss / 1024)) MiB"
    if [ "$r" = 1 ]; then
        curl -s "http://127.0.0.1:$port/metrics" \
            | grep -E '^shrike_(scans_total|busy_total|stage_seconds_(sum|count))' || true
    fi
    if [ -n "$base_pid" ]; then
        run "baseline shrike" "http://127.0.0.1:$base_port"
        ratio=$(awk -v a="$ours" -v b="$last" 'BEGIN {printf "%.3f", a / b}')
        base_ratios+=("$ratio")
        echo "round $r: shrike $ours / baseline $last msg/s = $ratio"
    fi
    if [ "$with_rspamd" = 1 ]; then
        run "rspamd 3.4" "http://127.0.0.1:${RSPAMD_PORT:-11533}"
        rss=$(ps -o rss= -C rspamd | awk '{s += $1} END {print s}')
        echo "rspamd RSS (all processes): $((rss / 1024)) MiB"
        ratio=$(awk -v a="$ours" -v b="$last" 'BEGIN {printf "%.2f", a / b}')
        ratios+=("$ratio")
        echo "round $r: shrike $ours / rspamd $last msg/s = ${ratio}x"
    fi
    if [ "$with_noop" = 1 ]; then
        run "no-op nginx" "http://127.0.0.1:$noop_port"
        share=$(awk -v a="$ours" -v b="$last" 'BEGIN {printf "%.3f", a / b}')
        shares+=("$share")
        echo "round $r: shrike $ours / no-op $last msg/s = $share"
    fi
done
if [ ${#ratios[@]} -gt 0 ]; then
    sorted=$(printf '%s\n' "${ratios[@]}" | sort -n | tr '\n' ' ')
    echo "median ratio: $(echo "$sorted" | awk '{print $(int((NF + 1) / 2))}')x (rounds: $sorted)"
fi
if [ ${#base_ratios[@]} -gt 0 ]; then
    sorted=$(printf '%s\n' "${base_ratios[@]}" | sort -n | tr '\n' ' ')
    echo "median over the baseline: $(echo "$sorted" | awk '{print $(int((NF + 1) / 2))}') (rounds: $sorted)"
fi
if [ ${#shares[@]} -gt 0 ]; then
    sorted=$(printf '%s\n' "${shares[@]}" | sort -n | tr '\n' ' ')
    echo "median share of the no-op server: $(echo "$sorted" | awk '{print $(int((NF + 1) / 2))}') (rounds: $sorted)"
fi
