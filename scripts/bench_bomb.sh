#!/usr/bin/env bash
# Decompression bombs against the byte budget (`[server] inflight_bytes`): CLIENTS (default
# 300) clients post at once to /checkv2 a zstd body of a few kilobytes that inflates to
# INFLATED bytes (default 50,000,000: just within http.max_body_bytes, so each one admitted is
# scanned). Prints the replies by status, the daemon's idle and peak RSS (VmHWM) and its
# budget, and how soon after the last answer a normal message is scanned; fails unless every
# request is answered 200, 413 or 503, the peak RSS stays within the budget + MARGIN_MIB
# (default 256), and a normal message is scanned within RECOVER_MS (default 1000)
# (scripts/bench/bomb.py).
#
# The budget is the default one, sized for the machine, unless INFLIGHT_BYTES sets it; the
# daemon runs the release build (SHRIKE_BIN=PATH runs another), without network checks, with
# the default workers and queue. Needs python3 and the zstd command.
#
#   [INFLIGHT_BYTES=N] [INFLATED=BYTES] scripts/bench_bomb.sh [CLIENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-300}
inflated=${INFLATED:-50000000}
port=${BOMB_PORT:-21335}
work=${BENCH_DIR:-/tmp/shrike-bench}
mkdir -p "$work"
command -v zstd >/dev/null || { echo "needs zstd (apt-get install zstd)" >&2; exit 1; }

bin=${SHRIKE_BIN:-}
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin="${CARGO_TARGET_DIR:-target}/release/shrike"
fi
config="$work/bomb.toml"
cp scripts/bench/offline.toml "$config"
if [ -n "${INFLIGHT_BYTES:-}" ]; then
    printf '\n[server]\ninflight_bytes = %s\n' "$INFLIGHT_BYTES" >> "$config"
fi
# The bomb: a header and one letter repeated, through a pipe so that the frame does not declare
# its size (the daemon learns it only by inflating), at rspamc's default level.
python3 -c "
import sys
head = b'From: bomb@example.net\r\nSubject: bomb\r\n\r\n'
sys.stdout.buffer.write(head + b'a' * ($inflated - len(head)))" \
    | zstd -q -3 --no-content-size -c > "$work/bomb.zst"

rm -rf "$work/bomb-data"
RUST_LOG=info "$bin" --config "$config" serve --http "127.0.0.1:$port" --milter off \
    --data "$work/bomb-data" 2> "$work/bomb.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "the daemon did not start" >&2; exit 1; }

status=0
INFLATED=$inflated python3 scripts/bench/bomb.py "$port" "$pid" "$work/bomb.zst" \
    tests/data/daemon/ham.eml "$clients" || status=$?
kill -0 "$pid" 2>/dev/null || { echo "FAIL: the daemon is gone" >&2; exit 1; }
if grep -qi panic "$work/bomb.log"; then echo "FAIL: panic in $work/bomb.log" >&2; exit 1; fi
echo "log: $(wc -l < "$work/bomb.log") lines, $(grep -c 'memory budget' "$work/bomb.log" || true) budget warnings"
exit "$status"
