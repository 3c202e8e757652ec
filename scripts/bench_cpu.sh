#!/usr/bin/env bash
# shrike's own CPU per message under load, for comparing builds or configurations: throughput
# ratios move ±10% with this shared machine's load, CPU per message much less. Each binary (or
# config) takes its turn in every round, with a fresh data directory:
#
#   http:   wrk -t2 -c16 POST /checkv2 over every sixth dev-corpus message (as bench_http.sh),
#           3 s warm-up, then SECS seconds measured;
#   milter: N corpus ham messages through the real Postfix (../shared/tools/mta) on 16
#           connections, with shrike as its milter (needs root).
#
# Per run: messages/s, shrike's CPU per message (utime + stime of the process from /proc, all
# threads), and for http the worker's mean stage times from /metrics (wall time: it includes
# the time a worker waits for a core the client or the socket thread holds) and each thread
# kind's CPU a message (/proc/PID/task/*/schedstat, nanoseconds on a core; "scan" is the
# workers' time, the figure to hold against the bench's full scan); for milter the context
# switches per message of the socket and scan threads and, as for http, each thread kind's CPU.
#
#   [ROUNDS=3] [SECS=15] [N=1500] scripts/bench_cpu.sh http|milter SETUP [SETUP...]
#
# A SETUP is a shrike binary, optionally with a config file: BIN or BIN:CONFIG.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?http or milter}
shift
[ $# -gt 0 ] || { echo "name at least one binary (e.g. target/release/shrike)" >&2; exit 2; }
rounds=${ROUNDS:-3}
secs=${SECS:-15}
n=${N:-1500}
work=${BENCH_DIR:-/tmp/shrike-bench}
tools=${SHRIKE_MTA_TOOLS:-../shared/tools/mta}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
chmod 755 "$work"
find "$work/corpus/spamassassin-dev" -type f -path '*/*ham/*' -o -type f -path '*/spam/*' | sort \
    | awk 'NR % 6 == 1' > "$work/list"
# WRK_SCRIPT: another wrk script for http. BENCH_ENVELOPE=1 (read by scripts/bench/checkv2.lua)
# gives each message an MTA's envelope headers.
wrk_script=${WRK_SCRIPT:-scripts/bench/checkv2.lua}
http_port=21336
milter_port=21337
hz=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# voluntary+involuntary context switches of the threads whose name starts with $2
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk -v p="$2" '
    /^Name:/ {on = index($2, p) == 1} on && /ctxt_switches/ {s += $2} END {print s + 0}'; }
# nanoseconds on a core per thread kind (the name less its trailing -N)
thread_ns() { for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(sed 's/-[0-9]*$//' "$t/comm")" "$(awk '{print $1}' "$t/schedstat")"; done 2>/dev/null \
    | awk '{a[$1] += $2} END {for (k in a) print k, a[k]}' | sort; }
stage_sums() { curl -s "http://127.0.0.1:$http_port/metrics" | awk '
    /^shrike_stage_seconds_(sum|count)\{stage="(analyze|rules|total)"\}/ {print $1, $2}'; }

run() {  # run BIN CONFIG -> one result line
    local bin=$1 cfg=$2 pid s0 s1 m0 m1 io0 io1 sc0 sc1 count rate
    rm -rf "$work/data-cpu"
    local milter_arg=off
    [ "$mode" = milter ] && milter_arg="127.0.0.1:$milter_port"
    "$bin" serve --config "${cfg:-scripts/bench/offline.toml}" --http "127.0.0.1:$http_port" --milter "$milter_arg" \
        --data "$work/data-cpu" 2> "$work/shrike-cpu.log" &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http_port/health" >/dev/null && break; sleep 0.1; done
    if [ "$mode" = http ]; then
        BENCH_LIST="$work/list" wrk -t2 -c16 -d3s -s "$wrk_script" \
            "http://127.0.0.1:$http_port" >/dev/null
        m0=$(stage_sums); s0=$(cpu_ticks $pid); thread_ns $pid > "$work/threads0"
        out=$(BENCH_LIST="$work/list" wrk -t2 -c16 -d"${secs}s" -s "$wrk_script" \
            "http://127.0.0.1:$http_port" | grep '^messages')
        s1=$(cpu_ticks $pid); m1=$(stage_sums); thread_ns $pid > "$work/threads1"
        count=$(echo "$out" | awk '{print $2}')
        rate=$(echo "$out" | awk '{print $7}')
        stages=$(printf '%s\n%s\n' "$m0" "$m1" | awk '
            {k = $1; if (k in first) d[k] = $2 - first[k]; else first[k] = $2}
            END {for (k in d) if (k ~ /_sum/) {c = k; sub(/_sum/, "_count", c)
                 split(k, a, "\""); printf "%s %.0f µs  ", a[2], 1e6 * d[k] / d[c]}}')
        threads=$(join "$work/threads0" "$work/threads1" | awk -v n="$count" '
            {us = ($3 - $2) / 1000 / n; if (us >= 0.5) printf "%s %.1f  ", $1, us}')
        echo "$rate msg/s, $(( (s1 - s0) * 1000000 / hz / count )) µs CPU a message; worker: $stages; CPU µs a message by thread: $threads"
    else
        "$tools/mta-up" --force --no-install --dir "$work/mta" --milter "inet:127.0.0.1:$milter_port" >/dev/null 2>&1
        rm -f "$work/mta/sink/"* 2>/dev/null || true
        s0=$(cpu_ticks $pid); io0=$(switches $pid shrike-io); sc0=$(switches $pid shrike-scan)
        thread_ns $pid > "$work/threads0"
        out=$("$tools/mta-send" --server 127.0.0.1:2525 --bench "$n" --conns 16 \
            --wait-sink "$work/mta/sink" "$work/corpus/spamassassin-dev/ham/"* | grep 'accepted-by-smtpd rate')
        s1=$(cpu_ticks $pid); io1=$(switches $pid shrike-io); sc1=$(switches $pid shrike-scan)
        thread_ns $pid > "$work/threads1"
        "$tools/mta-down" --dir "$work/mta" >/dev/null 2>&1
        rate=$(echo "$out" | awk '{print $3}')
        echo "$rate msg/s, $(( (s1 - s0) * 1000000 / hz / n )) µs CPU a message; context switches a message: socket $(
            awk -v a=$((io1 - io0)) -v n="$n" 'BEGIN {printf "%.1f", a / n}'), scan $(
            awk -v a=$((sc1 - sc0)) -v n="$n" 'BEGIN {printf "%.1f", a / n}'); CPU µs a message by thread: $(
            join "$work/threads0" "$work/threads1" | awk -v n="$n" '
            {us = ($3 - $2) / 1000 / n; if (us >= 0.5) printf "%s %.1f  ", $1, us}')"
    fi
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

for r in $(seq "$rounds"); do
    for setup in "$@"; do
        bin=${setup%%:*}
        cfg=""
        [ "$setup" != "$bin" ] && cfg=${setup#*:}
        echo "round $r, $setup: $(run "$bin" "$cfg")"
    done
done
