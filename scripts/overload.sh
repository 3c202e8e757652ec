#!/usr/bin/env bash
# Overload test of `shrike serve` over HTTP: wrk with CONNECTIONS connections (default 512, far
# more than the scan queue holds) posts dev-corpus messages to /checkv2 for SECONDS (default 60),
# as scripts/bench_http.sh does, and the script checks that the daemon degrades as it should:
#
#   - it does not crash, and its log has no panic;
#   - its RSS (VmRSS, sampled every second) stays under RSS_LIMIT_MB (default 1024);
#   - every reply is a 2xx or a 503 with Retry-After (wrk's Lua tallies them:
#     scripts/bench/overload.lua), with no socket error and no wrk timeout;
#   - 503s come at once: a probe posting one message every 200 ms during the load gets each 503
#     within MAX_503_MS (default 1000; scan_timeout_ms is 10,000), and /metrics counts no scan
#     timeout;
#   - right after wrk ends, a message posted every 50 ms gets a normal 200 (a JSON verdict)
#     within RECOVER_MS (default 1000);
#   - the log (RUST_LOG=info) stays short: fewer than MAX_LOG_LINES lines (default 1000), not
#     a line per refused request.
#
# It prints the figures and exits non-zero if any check fails. Client and server share the
# machine. Leaves its files in $BENCH_DIR (default /tmp/shrike-bench): overload.log (the
# daemon's log), overload-rss (one sample a second), overload-probe, overload-wrk.
# SHRIKE_BIN=PATH runs that binary instead of building the release one.
#
#   scripts/overload.sh [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
conns=${2:-512}
rss_limit_mb=${RSS_LIMIT_MB:-1024}
max_503_ms=${MAX_503_MS:-1000}
recover_ms=${RECOVER_MS:-1000}
max_log_lines=${MAX_LOG_LINES:-1000}
port=${OVERLOAD_PORT:-21334}
work=${BENCH_DIR:-/tmp/shrike-bench}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
find "$work/corpus/spamassassin-dev" -type f -path '*/*ham/*' -o -type f -path '*/spam/*' | sort \
    | awk 'NR % 6 == 1' > "$work/list"
probe_msg=$(head -1 "$work/list")
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 1; }

bin=${SHRIKE_BIN:-}
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin="${CARGO_TARGET_DIR:-target}/release/shrike"
fi
rm -rf "$work/overload-data"
RUST_LOG=info "$bin" --config scripts/bench/offline.toml serve --http "127.0.0.1:$port" --milter off --data "$work/overload-data" \
    2> "$work/overload.log" &
pid=$!
sampler=
prober=
cleanup() {
    [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
    [ -n "$prober" ] && kill "$prober" 2>/dev/null
    kill "$pid" 2>/dev/null || true
}
trap cleanup EXIT
url="http://127.0.0.1:$port"
for _ in $(seq 200); do curl -sf "$url/health" >/dev/null && break; sleep 0.1; done
curl -sf "$url/health" >/dev/null || { echo "the daemon did not start" >&2; exit 1; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }
metric() {  # metric NAME -> its value in /metrics (0 when absent)
    curl -s "$url/metrics" | awk -v n="$1" '$1 == n {print $2; f = 1} END {if (!f) print 0}'
}
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }

rss_idle=$(rss_kib)
: > "$work/overload-rss"
(while kill -0 "$pid" 2>/dev/null; do
    echo "$(rss_kib)" >> "$work/overload-rss"; sleep 1
done) &
sampler=$!

# The probe: one message every 200 ms while the load runs, from 3 s in to 2 s before the end.
# Prints "STATUS SECONDS RETRY-AFTER" per reply.
: > "$work/overload-probe"
(sleep 3
 end=$(($(now_ms) + (secs - 5) * 1000))
 while [ "$(now_ms)" -lt "$end" ]; do
     out=$(curl -s -o /dev/null -D "$work/overload-probe-head" -m 30 \
         -w '%{http_code} %{time_total}' --data-binary @"$probe_msg" "$url/checkv2" || true)
     ra=$(tr -d '\r' < "$work/overload-probe-head" | awk -F': *' 'tolower($1) == "retry-after" {print $2}' || true)
     echo "$out ${ra:--}" >> "$work/overload-probe"
     sleep 0.2
 done) &
prober=$!

echo "== wrk -t2 -c$conns -d${secs}s --timeout 5s against shrike (pid $pid), idle RSS $((rss_idle / 1024)) MiB"
BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d"${secs}s" --timeout 5s --latency \
    -s scripts/bench/overload.lua "$url" > "$work/overload-wrk" 2>&1 || true
# Recovery: from the moment wrk is gone, one message every 50 ms until a normal verdict.
t0=$(now_ms)
recovered=
tries=0
while [ $(($(now_ms) - t0)) -lt 10000 ]; do
    tries=$((tries + 1))
    if body=$(curl -sf -m 1 --data-binary @"$probe_msg" "$url/checkv2") \
        && echo "$body" | grep -q '"action"'; then
        recovered=$(($(now_ms) - t0))
        break
    fi
    sleep 0.05
done
wait "$prober" 2>/dev/null || true
prober=
sleep 1
kill "$sampler" 2>/dev/null || true
sampler=

grep -E '^(messages|latency ms|status)' "$work/overload-wrk" || cat "$work/overload-wrk"
fail=()
stat() { awk -v k="$1" '$1 == "status" && $2 == k {print $3; f = 1} END {if (!f) print 0}' "$work/overload-wrk"; }
ok=$(stat 2xx); busy=$(stat 503); bare=$(stat 503-without-retry-after); other=$(stat other)
errors=$(sed -n 's/.*errors: connect \([0-9]*\) read \([0-9]*\) write \([0-9]*\) status [0-9]* timeout \([0-9]*\).*/\1 \2 \3 \4/p' "$work/overload-wrk")
read -r e_connect e_read e_write e_timeout <<< "${errors:-x x x x}"
echo "replies: 2xx $ok ($((ok / secs))/s), 503 $busy ($((busy / secs))/s), 503 without Retry-After $bare, other $other"
echo "socket errors: connect $e_connect, read $e_read, write $e_write; wrk timeouts (> 5 s): $e_timeout"
[ "$ok" -gt 0 ] || fail+=("no 2xx under load")
[ "$bare" = 0 ] || fail+=("$bare 503s without Retry-After")
[ "$other" = 0 ] || fail+=("$other replies neither 2xx nor 503")
[ "$e_connect $e_read $e_write" = "0 0 0" ] || fail+=("socket errors (connect read write): $e_connect $e_read $e_write")
[ "$e_timeout" = 0 ] || fail+=("$e_timeout requests over wrk's 5 s timeout")

# 503 latency, from the probe.
echo "probe: $(wc -l < "$work/overload-probe") requests: $(awk '{print $1}' "$work/overload-probe" | sort | uniq -c | awk '{printf " %s x%d", $2, $1}')"
awk '$1 == 503 {print $2 * 1000}' "$work/overload-probe" | sort -n > "$work/overload-probe-503"
pbusy=$(wc -l < "$work/overload-probe-503")
if [ "$pbusy" -gt 0 ]; then
    pct() { sed -n "$(( ($1 * pbusy + 99) / 100 ))p" "$work/overload-probe-503"; }
    echo "probe 503 latency ms: p50 $(pct 50)  p90 $(pct 90)  max $(tail -1 "$work/overload-probe-503")"
fi
late=$(awk -v max="$max_503_ms" '$1 > max' "$work/overload-probe-503" | wc -l)
pbare=$(awk '$1 == 503 && $3 == "-"' "$work/overload-probe" | wc -l)
pnone=$(awk '$1 != 200 && $1 != 503' "$work/overload-probe" | wc -l)
[ "$pnone" = 0 ] || fail+=("$pnone probe requests got neither 200 nor 503 (000: no reply)")
[ "$pbusy" -gt 0 ] || fail+=("the probe got no 503: the load did not overload the daemon")
[ "$late" = 0 ] || fail+=("$late probe 503s slower than $max_503_ms ms")
[ "$pbare" = 0 ] || fail+=("$pbare probe 503s without Retry-After")
timeouts=$(metric shrike_scan_timeouts_total)
echo "daemon counters: busy $(metric shrike_busy_total), scan timeouts $timeouts, scans $(curl -s "$url/metrics" | awk '/^shrike_scans_total/ {s += $NF} END {print s}')"
[ "$timeouts" = 0 ] || fail+=("$timeouts scans answered only at scan_timeout_ms")

if [ -n "$recovered" ]; then
    echo "recovery: a normal verdict $recovered ms after the load ended (try $tries)"
    [ "$recovered" -lt "$recover_ms" ] || fail+=("recovery took $recovered ms (limit $recover_ms)")
else
    fail+=("no normal verdict within 10 s of the load ending")
fi

peak=$(sort -n "$work/overload-rss" | tail -1)
half=$(($(wc -l < "$work/overload-rss") / 2))
first=$(head -n "$half" "$work/overload-rss" | sort -n | tail -1)
second=$(tail -n +"$((half + 1))" "$work/overload-rss" | sort -n | tail -1)
echo "RSS: idle $((rss_idle / 1024)) MiB, peak $((peak / 1024)) MiB (first half $((first / 1024)), second half $((second / 1024)); $(wc -l < "$work/overload-rss") samples)"
[ $((peak / 1024)) -lt "$rss_limit_mb" ] || fail+=("peak RSS $((peak / 1024)) MiB over $rss_limit_mb MiB")

if kill -0 "$pid" 2>/dev/null && curl -sf "$url/health" >/dev/null; then
    echo "daemon: alive and healthy"
else
    fail+=("the daemon is gone or unhealthy")
fi
if grep -qi 'panic' "$work/overload.log"; then
    fail+=("panic in the log: $(grep -i -m1 panic "$work/overload.log")")
fi
log_lines=$(wc -l < "$work/overload.log")
echo "log: $log_lines lines, $(wc -c < "$work/overload.log") bytes, $(grep -c 'WARN' "$work/overload.log" || true) WARN, $(grep -c 'ERROR' "$work/overload.log" || true) ERROR"
[ "$log_lines" -lt "$max_log_lines" ] || fail+=("the log has $log_lines lines (limit $max_log_lines)")

if [ ${#fail[@]} -gt 0 ]; then
    printf 'FAIL: %s\n' "${fail[@]}"
    exit 1
fi
echo "PASS"
