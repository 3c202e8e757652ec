#!/usr/bin/env bash
# `shrike learn` of the whole dev split (spam as spam; ham and hard ham as ham) offline into a
# fresh data directory: messages a second, from its own summary line (from the data
# directory's opening to the final snapshot, rules loading included). Each round also learns
# the same mail again into that directory (every message a duplicate) and, as the baseline
# that shows how busy the shared machine was, times `shrike scan` of the same files on one
# thread. ROUNDS rounds (default 3); the end prints the medians.
#
#   [ROUNDS=3] scripts/bench_learn.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=${BENCH_DIR:-/tmp/shrike-bench}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
dev="$work/corpus/spamassassin-dev"
cargo build --release --quiet --bin shrike
bin="${CARGO_TARGET_DIR:-target}/release/shrike"

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
rate_of() { awk '/messages\/s$/ {print $(NF-1)}'; }
rounds=${ROUNDS:-3}
fresh=() again=() scan=()
for r in $(seq "$rounds"); do
    rm -rf "$work/data-learn"
    f=$("$bin" learn --spam "$dev/spam" --ham "$dev/ham" "$dev/hard_ham" --data "$work/data-learn" \
        | tee "$work/learn-summary.txt" | rate_of)
    a=$("$bin" learn --spam "$dev/spam" --ham "$dev/ham" "$dev/hard_ham" --data "$work/data-learn" \
        | rate_of)
    n=$(find "$dev/spam" "$dev/ham" "$dev/hard_ham" -type f | wc -l)
    start=$(date +%s.%N)
    find "$dev/spam" "$dev/ham" "$dev/hard_ham" -type f -print0 | xargs -0 "$bin" scan > /dev/null
    s=$(echo "$n $start $(date +%s.%N)" | awk '{printf "%.0f", $1 / ($3 - $2)}')
    echo "round $r: learn $f msg/s, learn again (duplicates) $a msg/s, scan baseline $s msg/s (one thread)"
    fresh+=("$f") again+=("$a") scan+=("$s")
done
cat "$work/learn-summary.txt"
echo "median: learn $(median "${fresh[@]}") msg/s, again $(median "${again[@]}") msg/s, scan baseline $(median "${scan[@]}") msg/s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
