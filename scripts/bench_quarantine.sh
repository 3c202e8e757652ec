#!/usr/bin/env bash
# The quarantine's costs (BENCHMARKS.md, "Quarantine").
#
# 1. Throughput: two `shrike serve` of this build on the same corpus cycle as
#    scripts/bench_http.sh (POST /checkv2, wrk), one with [quarantine] on, one with it off,
#    taking turns for ROUNDS rounds (default 3); prints each round's rate ratio (on / off),
#    their median, and the share of scanned messages the quarantine kept. ACTIONS sets
#    [quarantine] actions (default: every action but "no action" and "greylist", which keeps
#    about a third of the dev corpus).
# 2. Listing: quarantine_fill writes N (default 100000) entries into a data directory; a daemon
#    serves it and GET /quarantine (first page, 50 entries) and a filtered first page (one
#    recipient: every segment read) are timed with curl, 11 times each, the median printed.
#
# PARTS="throughput listing" (the default) chooses the parts to run.
#
#   [ROUNDS=3] [N=100000] [ACTIONS='"reject", ...'] [PARTS=listing] scripts/bench_quarantine.sh [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
conns=${2:-16}
rounds=${ROUNDS:-3}
n=${N:-100000}
actions=${ACTIONS:-'"add header", "rewrite subject", "soft reject", "reject", "quarantine", "discard"'}
work=${BENCH_DIR:-/tmp/shrike-bench-quarantine}
target=${CARGO_TARGET_DIR:-target}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
find "$work/corpus/spamassassin-dev" -type f -path '*/*ham/*' -o -type f -path '*/spam/*' | sort \
    | awk 'NR % 6 == 1' > "$work/list"
echo "messages in the cycle: $(wc -l < "$work/list")"
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 1; }
cargo build --release --quiet --bin shrike --example quarantine_fill
bin="$target/release/shrike"

cat scripts/bench/offline.toml > "$work/off.toml"
{ cat scripts/bench/offline.toml; printf '\n[quarantine]\nenabled = true\nactions = [%s]\n' "$actions"; } > "$work/on.toml"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
serve() {  # serve NAME CONFIG PORT
    rm -rf "$work/$1-data"
    "$bin" --config "$2" serve --http "127.0.0.1:$3" --milter off --data "$work/$1-data" 2> "$work/$1.log" &
    pids+=($!)
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$3/health" >/dev/null && break; sleep 0.1; done
}
parts=${PARTS:-throughput listing}
if [[ " $parts " == *" throughput "* ]]; then
serve on "$work/on.toml" 21433
serve off "$work/off.toml" 21434
run() {  # run URL -> rate
    BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d5s -s scripts/bench/checkv2.lua "$1" >/dev/null
    BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d"${secs}s" -s scripts/bench/checkv2.lua "$1" \
        | awk '/^messages/ {print $7}'
}
ratios=()
for r in $(seq "$rounds"); do
    on=$(run http://127.0.0.1:21433)
    off=$(run http://127.0.0.1:21434)
    ratio=$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.3f", a / b }')
    ratios+=("$ratio")
    echo "round $r: quarantine on $on msg/s, off $off msg/s, on/off $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print "median on/off: " a[int((NR+1)/2)]}'
curl -s http://127.0.0.1:21433/stat > "$work/stat.json"
curl -s http://127.0.0.1:21433/health > "$work/health.json"
python3 - "$work/stat.json" "$work/health.json" <<'PY'
import json, sys
stat = json.load(open(sys.argv[1])); health = json.load(open(sys.argv[2]))
scanned = stat.get("scanned", 0)
q = health["quarantine"]
print(f"kept {q['stored']} of {scanned} scanned ({100 * q['stored'] / max(1, scanned):.1f}%), "
      f"dropped {q['dropped']}, {q['bytes'] / 1e6:.1f} MB on disk")
PY
cleanup
pids=()
fi

[[ " $parts " == *" listing "* ]] || exit 0
echo "== listing $n entries"
rm -rf "$work/list-data"
mkdir -p "$work/list-data"
"$target/release/examples/quarantine_fill" "$work/list-data" "$n"
printf '[dns]\nenabled = false\n[quarantine]\nenabled = true\nmax_bytes = 68719476736\n' > "$work/list.toml"
"$bin" --config "$work/list.toml" serve --http 127.0.0.1:21435 --milter off --data "$work/list-data" 2> "$work/list.log" &
pids+=($!)
for _ in $(seq 100); do curl -sf http://127.0.0.1:21435/health >/dev/null && break; sleep 0.1; done
time_it() {  # time_it LABEL QUERY
    for _ in $(seq 11); do
        curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:21435/quarantine?$2"
    done | sort -n | awk -v l="$1" '{a[NR]=$1} END {printf "%s: median %.1f ms (min %.1f, max %.1f)\n", l, 1000*a[6], 1000*a[1], 1000*a[NR]}'
}
time_it "first page (50)" "limit=50"
time_it "first page, one recipient" "limit=50&rcpt=user7@example0.org"
curl -s "http://127.0.0.1:21435/quarantine?limit=1" | head -c 300; echo
