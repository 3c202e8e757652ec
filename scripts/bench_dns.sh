#!/usr/bin/env bash
# What the network checks (SPF, DKIM, DMARC, ARC, DNS lists: [dns]) cost `/checkv2`:
# throughput with them on against off, and the latency they add, cold and warm.
#
# Two daemons run side by side over the same corpus cycle as scripts/bench_http.sh (every sixth
# message of the dev split): one with [dns] enabled = false, one with DNS on against a DNS server
# on loopback (examples/dns_server.rs: sender.example's records, NXDOMAIN with an hour's
# negative TTL for every other name) and the ZEN, DBL and URIBL presets on. Every request says
# `IP: 192.0.2.10` and `Helo: mail.sender.example`, so SPF, DMARC and the lists all query.
#   1. throughput: ROUNDS rounds (default 3) of wrk on the DNS-off daemon then the DNS-on one,
#      SECONDS each (after a warm-up, so the on daemon's cache is warm); ratio on/off per round
#      and the median;
#   2. latency: one sequential pass of curl over the cycle against the off daemon, then against a
#      freshly started on daemon (cold cache), then again (warm); p50 and p99 of each and the
#      added latency (on minus off), plus the daemon's own `dns` stage histogram.
# The corpus is from 2002: no DKIM signatures, and its domains' DNS is gone (hence NXDOMAIN).
#
#   [ROUNDS=3] scripts/bench_dns.sh [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
conns=${2:-16}
rounds=${ROUNDS:-3}
work=${BENCH_DIR:-/tmp/shrike-bench-dns}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
find "$work/corpus/spamassassin-dev" -type f -path '*/*ham/*' -o -type f -path '*/spam/*' | sort \
    | awk 'NR % 6 == 1' > "$work/list"
echo "messages in the cycle: $(wc -l < "$work/list")"
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 1; }

cargo build --release --quiet
cargo build --release --quiet --example dns_server
target=${CARGO_TARGET_DIR:-target}
export BENCH_IP=192.0.2.10 BENCH_HELO=mail.sender.example

pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_all EXIT

"$target/release/examples/dns_server" > "$work/dns.addr" &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/dns.addr" ] && break; sleep 0.1; done
dns=$(cat "$work/dns.addr")
echo "DNS server on $dns"

cat > "$work/off.toml" <<TOML
[dns]
enabled = false
TOML
cat > "$work/on.toml" <<TOML
[dns]
enabled = true
servers = ["$dns"]
[[dnsbl]]
zone = "zen.spamhaus.org"
[[dnsbl]]
zone = "dbl.spamhaus.org"
[[dnsbl]]
zone = "multi.uribl.com"
TOML

start() {  # start NAME PORT -> pid in $started
    rm -rf "$work/data-$1"
    "$target/release/shrike" --config "$work/$1.toml" serve --http "127.0.0.1:$2" --milter off \
        --data "$work/data-$1" 2> "$work/shrike-$1.log" &
    started=$!
    pids+=("$started")
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$2/health" >/dev/null && return; sleep 0.1; done
    echo "shrike ($1) did not start" >&2; exit 1
}
off_port=21433
on_port=21434
start off $off_port
start on $on_port
on_pid=$started

run() {  # run NAME PORT -> the result lines; the rate in $last
    BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d5s -s scripts/bench/checkv2.lua "http://127.0.0.1:$2" >/dev/null
    out=$(BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d"${secs}s" --latency -s scripts/bench/checkv2.lua \
        "http://127.0.0.1:$2" | grep -E '^(messages|latency ms|Non-2xx)')
    echo "== $1: wrk -t2 -c$conns -d${secs}s"
    echo "$out"
    last=$(echo "$out" | awk '/^messages/ {print $7}')
}

echo "## throughput"
ratios=()
for r in $(seq "$rounds"); do
    run "DNS off" $off_port
    off=$last
    run "DNS on (warm)" $on_port
    on=$last
    ratio=$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.3f", a / b}')
    ratios+=("$ratio")
    echo "round $r: on $on / off $off msg/s = $ratio"
done
sorted=$(printf '%s\n' "${ratios[@]}" | sort -n | tr '\n' ' ')
echo "median on/off: $(echo "$sorted" | awk '{print $(int((NF + 1) / 2))}') (rounds: $sorted)"
curl -s "http://127.0.0.1:$on_port/metrics" | grep -E '^shrike_dns_(lookups_total|over_budget_total|messages_total|list_queries_total)'

pass() {  # pass NAME PORT FILE: one sequential curl pass; prints p50 and p99, writes them to FILE
    while read -r f; do
        curl -s -o /dev/null -w '%{time_total}\n' --data-binary "@$f" \
            -H "IP: $BENCH_IP" -H "Helo: $BENCH_HELO" "http://127.0.0.1:$2/checkv2"
    done < "$work/list" | sort -n | awk -v name="$1" -v file="$3" '
        { t[NR] = $1 * 1000 }
        END {
            printf "%s: n %d  p50 %.2f ms  p99 %.2f ms\n", name, NR, t[int(NR * 0.5)], t[int(NR * 0.99)]
            printf "%.3f %.3f\n", t[int(NR * 0.5)], t[int(NR * 0.99)] > file
        }'
}
dns_stage() {  # the daemon's dns stage histogram: mean
    curl -s "http://127.0.0.1:$1/metrics" | awk '
        /shrike_stage_seconds_sum\{stage="dns"\}/ {s = $2}
        /shrike_stage_seconds_count\{stage="dns"\}/ {c = $2}
        END { if (c > 0) printf "daemon dns stage: %d messages, mean %.3f ms\n", c, s / c * 1000 }'
}

echo "## latency (sequential, one message at a time)"
pass "DNS off" $off_port "$work/lat-off"
kill "$on_pid"; wait "$on_pid" 2>/dev/null || true
start on $on_port
pass "DNS on, cold cache" $on_port "$work/lat-cold"
dns_stage $on_port
pass "DNS on, warm cache" $on_port "$work/lat-warm"
dns_stage $on_port
for which in cold warm; do
    paste -d' ' "$work/lat-off" "$work/lat-$which" | awk -v w="$which" '{
        printf "added (%s): p50 %+.2f ms  p99 %+.2f ms\n", w, $3 - $1, $4 - $2 }'
done
