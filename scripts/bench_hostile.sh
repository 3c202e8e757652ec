#!/usr/bin/env bash
# Scan CPU of every message of the adversarial corpus (tests/data/hostile/, issue 55's "every
# message ≤ 50 ms of scan CPU"), in a release build with the default rules: each message
# scanned ROUNDS times on one thread pinned to one core, its median thread CPU time printed with
# its analysis and rules wall time and any RULE_TIMEOUT / RULE_ERROR; then the worst, the median
# and worst / median. Exits non-zero when a message is over LIMIT_MS (50) or a rule failed, was
# stopped or skipped.
#
#   [ROUNDS=5] [LIMIT_MS=50] [CORE=0] scripts/bench_hostile.sh [NAME_FILTER [RULES_DIR]]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
limit=${LIMIT_MS:-50}
cargo build --release --quiet --example hostile_times
target=${CARGO_TARGET_DIR:-target}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
taskset -c "${CORE:-0}" "$target/release/examples/hostile_times" "$rounds" "$@" | tee "$out"
awk -v limit="$limit" '
    $1 == "message" || $1 == "messages" { next }
    $3 + 0 > limit { over = over " " $1 "(" $3 " ms)" }
    NF > 5 { failed = failed " " $1 }
    END {
        if (over != "") print "over " limit " ms:" over
        if (failed != "") print "rules failed, stopped or skipped:" failed
        if (over != "" || failed != "") exit 1
        print "every message within " limit " ms, every rule run"
    }' "$out"
