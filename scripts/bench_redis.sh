#!/usr/bin/env bash
# The redis store's benchmarks (BENCHMARKS.md, "Shared reputation on Redis"):
#   1. /checkv2 throughput and latency with the memory backend and the redis backend, side by
#      side: two release daemons (the same binary, rules and client; one with
#      `[store] backend = "redis"` on a 3-master Redis Cluster on loopback, no replicas) take
#      turns under wrk (scripts/bench/checkv2.lua, BENCH_ENVELOPE=1: every sixth dev-corpus
#      message with an MTA's envelope, so paired unique counts run too) for ROUNDS rounds
#      (default 3). Each round prints both rates and p99s; then, from the redis daemon's
#      /metrics, per message: round trips (batches: the read before the rules, rate-limit
#      scripts, its share of the flushes and heartbeats), node pipelines and commands.
#   2. Redis memory per shingle key (`MEMORY USAGE`): a key written in every 10-minute bucket of
#      a day and every day of two weeks, with one counter and with three, under Redis's default
#      hash-max-listpack-entries (128) and with 512; and the mean over 1,000 keys the
#      benchmark left.
#   3. 1, 2 and 3 daemons on the one cluster, wrk on each at once: the summed rate.
# Client, daemons and Redis share the machine (2 cores): the redis figures include Redis's own
# CPU, and section 3 shows the cost of more processes, not the gain of more machines.
#
#   [ROUNDS=3] [SECTIONS=123] [SHRIKE_BIN=PATH] [REDIS_WORKERS=N] [REDIS_POOL=N] scripts/bench_redis.sh [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
conns=${2:-16}
rounds=${ROUNDS:-3}
sections=${SECTIONS:-123}
work=${BENCH_DIR:-/tmp/shrike-bench-redis}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
target=${CARGO_TARGET_DIR:-target}
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "needs redis-server (apt-get install redis-server)" >&2; exit 1; }
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
find "$work/corpus/spamassassin-dev" -type f -path '*/*ham/*' -o -type f -path '*/spam/*' | sort \
    | awk 'NR % 6 == 1' > "$work/list"
if [ -n "${SHRIKE_BIN:-}" ]; then
    bin=$SHRIKE_BIN  # a build to compare (e.g. a copy of an earlier commit's)
else
    cargo build --release --quiet --bin shrike
    bin="$target/release/shrike"
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# A 3-master cluster, nothing saved to disk.
rm -rf "$work/redis"
ports=(21701 21702 21703)
for p in "${ports[@]}"; do
    mkdir -p "$work/redis/$p"
    redis-server --port "$p" --bind 127.0.0.1 --dir "$work/redis/$p" --save "" --appendonly no \
        --cluster-enabled yes --cluster-config-file nodes.conf --logfile "$work/redis/$p/log" &
    pids+=($!)
done
for p in "${ports[@]}"; do
    for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done
done
redis-cli --cluster create 127.0.0.1:21701 127.0.0.1:21702 127.0.0.1:21703 --cluster-yes >/dev/null
for _ in $(seq 100); do
    redis-cli -p 21701 cluster info | grep -q cluster_state:ok && break; sleep 0.1
done

redis_toml() {  # redis_toml DIR
    mkdir -p "$1"
    cat scripts/bench/offline.toml - > "$1/shrike.toml" <<TOML
[store]
backend = "redis"
[store.redis]
urls = ["redis://127.0.0.1:21701", "redis://127.0.0.1:21702", "redis://127.0.0.1:21703"]
cluster = true
prefix = "in"
timeout_ms = 50
TOML
    # REDIS_WORKERS=N: the redis daemons' scan threads (default: eight per core)
    [ -n "${REDIS_WORKERS:-}" ] && printf '[server]\nworkers = %s\n' "$REDIS_WORKERS" >> "$1/shrike.toml"
    # REDIS_POOL=N: connections per node (store.redis.pool_size)
    [ -n "${REDIS_POOL:-}" ] && sed -i "s/^timeout_ms = 50$/timeout_ms = 50\npool_size = $REDIS_POOL/" "$1/shrike.toml"
    return 0
}
start() {  # start CONFIG PORT DATA; its pid in $last_pid
    "$bin" --config "$1" serve --http "127.0.0.1:$2" --milter off --data "$3" 2> "$3.log" &
    last_pid=$!
    pids+=($!)
    for _ in $(seq 300); do curl -sf "http://127.0.0.1:$2/health" >/dev/null && break; sleep 0.1; done
}
run_wrk() {  # run_wrk PORT SECONDS CONNECTIONS -> "rate p99"
    BENCH_ENVELOPE=1 BENCH_LIST="$work/list" wrk -t2 -c"$3" -d"$2s" -s scripts/bench/checkv2.lua \
        "http://127.0.0.1:$1" | awk '/^messages/ {r=$7} /^latency/ {p=$8} END {print r, p}'
}
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
checks() { curl -s "http://127.0.0.1:$1/stat" | python3 -c 'import json,sys; print(json.load(sys.stdin)["scanned"])'; }

echo "## 1. /checkv2, memory vs redis backend ($(wc -l < "$work/list") messages in the cycle, $conns connections)"
rm -rf "$work/mem" "$work/r1" "$work/r2" "$work/r3"
mkdir -p "$work/mem"
start scripts/bench/offline.toml 21351 "$work/mem/data"
mem_pid=$last_pid
redis_toml "$work/r1"
start "$work/r1/shrike.toml" 21352 "$work/r1/data"
r1_pid=$last_pid
redis_pids=("${pids[@]:0:3}")
cpu() {  # cpu PID... -> CPU time used so far, summed, in clock ticks
    local t=0
    for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
    echo "$t"
}
tck=$(getconf CLK_TCK)
run_wrk 21351 5 "$conns" >/dev/null
run_wrk 21352 5 "$conns" >/dev/null
for p in "${ports[@]}"; do redis-cli -p "$p" config resetstat >/dev/null; done
rt0=$(metric 21352 shrike_redis_round_trips_total); cmd0=$(metric 21352 shrike_redis_commands_total)
pl0=$(metric 21352 shrike_redis_pipelines_total)
rd0=$(metric 21352 shrike_redis_reads_total); pf0=$(metric 21352 shrike_redis_prefetches_total)
n0=$(checks 21352)
ratios=()
shrike_cpu=0; redis_cpu=0
# Per thread kind (the name less its trailing -N): nanoseconds on a core and context switches.
threads() { for t in /proc/"$1"/task/*; do
    printf '%s %s %s\n' "$(sed 's/-[0-9]*$//' "$t/comm")" "$(awk '{print $1}' "$t/schedstat")" \
        "$(awk '/ctxt_switches/ {s += $2} END {print s + 0}' "$t/status")"; done 2>/dev/null \
    | awk '{a[$1] += $2; c[$1] += $3} END {for (k in a) print k, a[k], c[k]}'; }
: > "$work/threads-redis"
redis_round() {
    local a b
    a=$(cpu "$r1_pid"); b=$(cpu "${redis_pids[@]}"); threads "$r1_pid" | sed 's/^/- /' >> "$work/threads-redis"
    d=$(run_wrk 21352 "$secs" "$conns")
    shrike_cpu=$((shrike_cpu + $(cpu "$r1_pid") - a)); redis_cpu=$((redis_cpu + $(cpu "${redis_pids[@]}") - b))
    threads "$r1_pid" | sed 's/^/+ /' >> "$work/threads-redis"
}
mem_cpu=0; mem_n=0
mem_round() {
    local a n
    a=$(cpu "$mem_pid"); n=$(checks 21351)
    m=$(run_wrk 21351 "$secs" "$conns")
    mem_cpu=$((mem_cpu + $(cpu "$mem_pid") - a)); mem_n=$((mem_n + $(checks 21351) - n))
}
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then mem_round; redis_round;
    else redis_round; mem_round; fi
    ratio=$(awk -v a="${d% *}" -v b="${m% *}" 'BEGIN {printf "%.1f", a / b * 100}')
    ratios+=("$ratio")
    echo "round $r: memory ${m% *} msg/s (p99 ${m#* } ms), redis ${d% *} msg/s (p99 ${d#* } ms): redis = $ratio% of memory"
done
sorted=$(printf '%s\n' "${ratios[@]}" | sort -n | tr '\n' ' ')
echo "median: redis = $(echo "$sorted" | awk '{print $(int((NF + 1) / 2))}')% of memory (rounds: $sorted)"
rt1=$(metric 21352 shrike_redis_round_trips_total); cmd1=$(metric 21352 shrike_redis_commands_total)
pl1=$(metric 21352 shrike_redis_pipelines_total)
rd1=$(metric 21352 shrike_redis_reads_total); pf1=$(metric 21352 shrike_redis_prefetches_total)
n1=$(checks 21352)
awk -v rt=$((rt1 - rt0)) -v pl=$((pl1 - pl0)) -v c=$((cmd1 - cmd0)) -v n=$((n1 - n0)) 'BEGIN {
    printf "redis daemon: %d messages; a message: %.3f round trips (batches), %.2f node pipelines, %.1f commands\n", n, rt / n, pl / n, c / n }'
awk -v rd=$((rd1 - rd0)) -v pf=$((pf1 - pf0)) -v n=$((n1 - n0)) 'BEGIN {
    printf "  reads a scan waited on: %.2f a message (prefetches of timelines %.2f; the rest read when a rule first asked, rate limits)\n", rd / n, pf / n }'
awk -v s="$shrike_cpu" -v r="$redis_cpu" -v t="$tck" -v n=$((n1 - n0)) -v all=$((rounds * secs * 2)) 'BEGIN {
    printf "CPU during the redis rounds: shrike %.1f s, the redis-servers %.1f s (of %d core-seconds): a message %.3f ms of shrike, %.3f ms of Redis\n",
        s / t, r / t, all, s / t / n * 1000, r / t / n * 1000 }'
awk -v n=$((n1 - n0)) '{v = ($1 == "+") ? 1 : -1; ns[$2] += v * $3; cs[$2] += v * $4}
    END {printf "the redis daemon a message by thread kind (CPU µs, context switches):";
         for (k in ns) if (ns[k] / n >= 500) printf "  %s %.0f, %.2f", k, ns[k] / n / 1000, cs[k] / n; print ""}' "$work/threads-redis"
awk -v s="$mem_cpu" -v t="$tck" -v n="$mem_n" 'BEGIN {
    printf "CPU during the memory rounds: the memory daemon %.1f s: a message %.3f ms\n", s / t, s / t / n * 1000 }'
# What the servers executed (commands inside scripts counted too), from the warm-up's end on.
for p in "${ports[@]}"; do redis-cli -p "$p" info commandstats; done | tr -d '\r' \
    | awk -F'[:,=]' -v n=$((n1 - n0)) '/^cmdstat_/ { c[$1] += $3; u[$1] += $5 }
        END { for (k in c) { t += c[k]; printf "  %s: %.2f a message, %.2f us each\n", substr(k, 9), c[k] / n, u[k] / c[k] }
              printf "Redis executed %.1f commands a message (scripts'"'"' own calls included)\n", t / n }' | sort -t: -k2 -rn
echo "unavailable scans: $(metric 21352 shrike_redis_unavailable_scans_total), timeouts: $(metric 21352 shrike_redis_timeouts_total), dropped: $(metric 21352 shrike_redis_dropped_increments_total)"
hits=$(metric 21352 shrike_redis_near_cache_hits_total); misses=$(metric 21352 shrike_redis_near_cache_misses_total)
age=$(metric 21352 shrike_redis_near_cache_served_age_ms_total)
[ -n "$hits" ] && awk -v h="$hits" -v m="$misses" -v a="$age" 'BEGIN {
    printf "near cache: %d hits, %d misses (%.1f%% of keys served from it), mean age of what it served %.0f ms\n", h, m, h + m ? 100 * h / (h + m) : 0, h ? a / h : 0 }'

[[ $sections == *2* ]] && {
echo "## 2. Redis memory per key"
keys_total=0
for p in "${ports[@]}"; do keys_total=$((keys_total + $(redis-cli -p "$p" dbsize))); done
echo "keys after section 1: $keys_total"
python3 - "$work" <<'PY'
import subprocess, sys, random
ports = [21701, 21702, 21703]
def cli(port, *args, stdin=None):
    return subprocess.run(["redis-cli", "-p", str(port), *args], input=stdin, capture_output=True, text=True).stdout.strip()
def owner(key):
    slot = int(cli(ports[0], "CLUSTER", "KEYSLOT", key))
    for line in cli(ports[0], "CLUSTER", "NODES").splitlines():
        f = line.split()
        if "master" not in f[2]: continue
        for r in f[8:]:
            a, _, b = r.partition("-")
            if int(a) <= slot <= int(b or a): return int(f[1].split(":")[1].split("@")[0])
now = 1_800_000_000
day0, min0 = now // 86400, now // 600
def build(key, counters):
    port = owner(key)
    cmds = [f"DEL {key}"]
    for c in counters:
        for b in range(144): cmds.append(f"HINCRBY {key} 0{c}{min0 - b} {random.randint(1, 5000)}")
        for d in range(14): cmds.append(f"HINCRBY {key} 1{c}{day0 - d} {random.randint(1, 500000)}")
    cli(port, stdin="\n".join(cmds) + "\n")
    return port, int(cli(port, "MEMORY", "USAGE", key, "SAMPLES", "0")), cli(port, "OBJECT", "ENCODING", key)
for entries in (128, 512):
    for p in ports: cli(p, "CONFIG", "SET", "hash-max-listpack-entries", str(entries))
    for counters in ([0], [0, 1, 2]):
        key = f"in:{{0.9.{random.getrandbits(64):016x}}}"
        port, usage, enc = build(key, counters)
        print(f"full key (144 ten-minute + 14 daily buckets, {len(counters)} counter(s), {len(counters) * 158} fields), hash-max-listpack-entries {entries}: {usage} bytes ({enc})")
        cli(port, "DEL", key)
for p in ports: cli(p, "CONFIG", "SET", "hash-max-listpack-entries", "128")
total = n = 0
for p in ports:
    for key in cli(p, "--scan", "--pattern", "in:{*").splitlines()[:334]:
        total += int(cli(p, "MEMORY", "USAGE", key, "SAMPLES", "0")); n += 1
print(f"keys left by section 1: mean {total / max(n, 1):.0f} bytes over {n} keys")
PY
}

[[ $sections == *3* ]] || exit 0
echo "## 3. 1, 2 and 3 daemons on the cluster ($conns connections in all)"
redis_toml "$work/r2"; start "$work/r2/shrike.toml" 21353 "$work/r2/data"
redis_toml "$work/r3"; start "$work/r3/shrike.toml" 21354 "$work/r3/data"
kill "$mem_pid" 2>/dev/null || true
for n in 1 2 3; do
    dports=(21352 21353 21354)
    each=$((conns / n))
    outs=()
    for i in $(seq 0 $((n - 1))); do
        run_wrk "${dports[$i]}" "$secs" "$each" > "$work/wrk.$i" &
    done
    wait $(jobs -p | tail -n "$n") 2>/dev/null || true
    sum=0; worst=0
    for i in $(seq 0 $((n - 1))); do
        read -r rate p99 < "$work/wrk.$i"
        sum=$(awk -v a="$sum" -v b="$rate" 'BEGIN {print a + b}')
        worst=$(awk -v a="$worst" -v b="$p99" 'BEGIN {print (b > a ? b : a)}')
    done
    echo "$n daemon(s): $sum msg/s in all, worst p99 $worst ms"
done
