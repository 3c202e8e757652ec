#!/usr/bin/env bash
# Scan CPU of every message of the adversarial corpus (tests/data/hostile/, issue 55's "every
# message ≤ 50 ms of scan CPU"), in a release build with the default rules: each message
# scanned ROUNDS times on one thread pinned to one core, its median thread CPU time printed with
# its analysis and rules wall time and any RULE_TIMEOUT / RULE_ERROR; then the worst, the median
# and worst / median. Exits non-zero when a message is over LIMIT_MS (50) or a rule failed, was
# stopped or skipped.
#
# GROWTH=1 also writes the corpus at twice its sizes and counts (scripts/hostile_corpus.py
# --scale 2) and prints each message's CPU at both sizes and their ratio: about 2 is linear, 4
# quadratic.
#
#   [ROUNDS=5] [LIMIT_MS=50] [CORE=0] [GROWTH=1] scripts/bench_hostile.sh [NAME_FILTER [RULES_DIR]]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
limit=${LIMIT_MS:-50}
cargo build --release --quiet --example hostile_times
bin=${CARGO_TARGET_DIR:-target}/release/examples/hostile_times
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
taskset -c "${CORE:-0}" "$bin" "$rounds" "$@" | tee "$tmp/1x"
status=0
awk -v limit="$limit" '
    $1 == "message" || $1 == "messages" { next }
    $3 + 0 > limit { over = over " " $1 "(" $3 " ms)" }
    /RULE_TIMEOUT|RULE_ERROR|no rule set/ { failed = failed " " $1 }
    END {
        if (over != "") print "over " limit " ms:" over
        if (failed != "") print "rules failed, stopped or skipped:" failed
        if (over != "" || failed != "") exit 1
        print "every message within " limit " ms, every rule run"
    }' "$tmp/1x" || status=1
if [ -n "${GROWTH:-}" ]; then
    python3 scripts/hostile_corpus.py --scale 2 --out "$tmp/corpus2" >/dev/null
    SHRIKE_HOSTILE_DIR="$tmp/corpus2" taskset -c "${CORE:-0}" "$bin" "$rounds" "$@" >"$tmp/2x"
    echo
    printf '%-28s %9s %9s %7s\n' message "1x ms" "2x ms" ratio
    awk 'NR == FNR { if ($1 != "message" && $1 != "messages") one[$1] = $3; next }
        $1 in one && one[$1] > 0 {
            printf "%-28s %9.2f %9.2f %7.2f\n", $1, one[$1], $3, $3 / one[$1] }' \
        "$tmp/1x" "$tmp/2x"
fi
exit $status
