#!/usr/bin/env bash
# The daemon's worker time a message against the bench's full scan (issue 45's "≤ 1.3×"), in
# alternated pairs so that the machine's speed, which moves ±15% between hours, hits both:
#
#   1. `scripts/bench_cpu.sh http` (wrk -t2 -c16 on `/checkv2` over every sixth dev message, the
#      release daemon on its defaults): the scan threads' CPU a message, from schedstat;
#   2. criterion's `rules/full_scan` (one thread, the whole dev split, each message scanned and
#      its updates applied once a pass), pinned to one core: µs a message.
#
# Each pair prints both and their ratio; the last line the median ratio.
#
#   [ROUNDS=3] [SECS=12] scripts/bench_worker.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
export SECS=${SECS:-12}
export SHRIKE_CORPUS=${SHRIKE_CORPUS:-$PWD/../shared/corpus/spamassassin-dev.tar.gz}
cargo build --release --quiet --bin shrike
bench=$(cargo bench --bench rules --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "rules":
        print(m["executable"])' | tail -1)
[ -x "$bench" ] || { echo "rules bench did not build" >&2; exit 1; }
target=${CARGO_TARGET_DIR:-target}
ratios=()
for r in $(seq "$rounds"); do
    line=$(ROUNDS=1 scripts/bench_cpu.sh http "$target/release/shrike" | tail -1)
    scan=$(echo "$line" | grep -o 'shrike-scan [0-9.]*' | awk '{print $2}')
    # criterion's middle throughput estimate, in thousands of messages a second
    bench_us=$(taskset -c 0 "$bench" --bench rules/full_scan 2>&1 | awk '/thrpt:/ {
        gsub(/\[|\]/, ""); per = ($5 == "Kelem/s") ? 1e3 : ($5 == "Melem/s") ? 1 : 1e6
        printf "%.1f", per / $4; exit}')
    ratio=$(awk -v a="$scan" -v b="$bench_us" 'BEGIN {printf "%.2f", a / b}')
    ratios+=("$ratio")
    echo "pair $r: scan threads $scan µs a message ($(echo "$line" | grep -o '[0-9.]* msg/s')), rules/full_scan $bench_us µs a message: ${ratio}×"
done
sorted=$(printf '%s\n' "${ratios[@]}" | sort -n | tr '\n' ' ')
echo "median: $(echo "$sorted" | awk '{print $(int((NF + 1) / 2))}')× (pairs: $sorted)"
