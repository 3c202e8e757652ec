#!/usr/bin/env bash
# Memory under load: scans the whole dev corpus ten times through `shrike serve` (HTTP) and
# prints the daemon's RSS after each pass; it must stay flat (no growth per message).
#
#   [SHRIKE_BIN=BIN] scripts/bench_rss.sh [PASSES] [CONNECTIONS]
#
# SHRIKE_BIN runs another build (an older one, for a baseline in the same session).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${BENCH_DIR:-/tmp/shrike-bench}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
bin=${SHRIKE_BIN:-./target/release/shrike}
[ -n "${SHRIKE_BIN:-}" ] || cargo build --release --quiet
port=21334
rm -rf "$work/data-rss"
"$bin" --config scripts/bench/offline.toml serve --http "127.0.0.1:$port" --milter off --data "$work/data-rss" \
    2> "$work/shrike-rss.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
python3 scripts/bench/passes.py "$port" "$pid" "$work/corpus/spamassassin-dev" "${1:-10}" "${2:-4}"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^shrike_store_(keys|bytes) '
