#!/usr/bin/env bash
# Milter throughput through a real Postfix (../shared/tools/mta): N corpus ham messages over C
# SMTP connections, with shrike as the milter and with no milter at all (the baseline).
# Needs root (Postfix). Everything runs on this machine: client, Postfix, sink and shrike.
# The two setups alternate for ROUNDS rounds (default 3), so that a change in the machine's
# load hits both; each round prints its ratio, and the last line the median per connection count.
#
# MILTER_SOCKET=unix puts the milter on a unix socket (the setup for a milter on the MTA's own
# host) instead of loopback TCP.
#
# --rspamd adds a third setup to every round: rspamd 3.4's proxy in milter mode
# (../shared/tools/rspamd/rspamd-up: proxy on 127.0.0.1:11532, two scanner processes). Each
# milter's added cost a message is 1/rate with it − 1/rate with no milter, from the same round;
# the last lines give shrike's added cost as a share of rspamd's, per round and the median.
#
#   [ROUNDS=3] [SHRIKE_CONFIG=FILE] [MILTER_SOCKET=tcp|unix] scripts/bench_milter.sh [--rspamd] [N] [CONNECTIONS...]
set -euo pipefail
cd "$(dirname "$0")/.."
with_rspamd=0
if [ "${1:-}" = "--rspamd" ]; then with_rspamd=1; shift; fi
n=${1:-1000}
shift || true
conns=("$@")
[ ${#conns[@]} -gt 0 ] || conns=(4 16)
tools=${SHRIKE_MTA_TOOLS:-../shared/tools/mta}
work=${BENCH_DIR:-/tmp/shrike-bench}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
chmod 755 "$work"
cargo build --release --quiet
case ${MILTER_SOCKET:-tcp} in
    tcp) listen=127.0.0.1:21332; postfix_milter=inet:127.0.0.1:21332 ;;
    unix) listen=unix:$work/milter.sock; postfix_milter=unix:$work/milter.sock ;;
    *) echo "MILTER_SOCKET must be tcp or unix" >&2; exit 2 ;;
esac
rm -rf "$work/data-milter"
./target/release/shrike serve --config "${SHRIKE_CONFIG:-scripts/bench/offline.toml}" \
    --http 127.0.0.1:21335 --milter "$listen" --data "$work/data-milter" 2> "$work/shrike-milter.log" &
pid=$!
cleanup() {
    kill $pid 2>/dev/null || true
    "$tools/mta-down" --dir "$work/mta" >/dev/null 2>&1 || true
    if [ "$with_rspamd" = 1 ]; then ../shared/tools/rspamd/rspamd-down "$work/rspamd" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
if [ "$with_rspamd" = 1 ]; then ../shared/tools/rspamd/rspamd-up "$work/rspamd" >/dev/null; fi
for _ in $(seq 100); do curl -sf http://127.0.0.1:21335/health >/dev/null && break; sleep 0.1; done

declare -A rate
bench() {  # bench LABEL MILTER KEY ROUND
    "$tools/mta-up" --force --no-install --dir "$work/mta" --milter "$2" >/dev/null 2>&1
    for c in "${conns[@]}"; do
        rm -f "$work/mta/sink/"* 2>/dev/null || true
        echo "== round $4: $1, $c connections"
        out=$("$tools/mta-send" --server 127.0.0.1:2525 --bench "$n" --conns "$c" \
            --wait-sink "$work/mta/sink" "$work/corpus/spamassassin-dev/ham/"* | tail -4)
        echo "$out"
        rate[$3,$c,$4]=$(echo "$out" | awk '/accepted-by-smtpd rate/ {print $3}')
    done
    "$tools/mta-down" --dir "$work/mta" >/dev/null 2>&1
}

rounds=${ROUNDS:-3}
for r in $(seq "$rounds"); do
    bench "Postfix + shrike milter (${MILTER_SOCKET:-tcp})" "$postfix_milter" milter "$r"
    bench "Postfix, no milter" none none "$r"
    if [ "$with_rspamd" = 1 ]; then
        bench "Postfix + rspamd 3.4 proxy (milter mode)" "inet:127.0.0.1:${RSPAMD_PROXY_PORT:-11532}" rspamd "$r"
    fi
    for c in "${conns[@]}"; do
        echo "round $r, $c connections: shrike ${rate[milter,$c,$r]} / none ${rate[none,$c,$r]} msg/s = $(
            awk -v a="${rate[milter,$c,$r]}" -v b="${rate[none,$c,$r]}" 'BEGIN {printf "%.0f%%", 100 * a / b}')"
    done
done
curl -s http://127.0.0.1:21335/metrics | grep -E '^shrike_(milter_messages_total|milter_fallbacks_total|scans_total)'
for c in "${conns[@]}"; do
    ratios=$(for r in $(seq "$rounds"); do
        awk -v a="${rate[milter,$c,$r]}" -v b="${rate[none,$c,$r]}" 'BEGIN {printf "%.1f\n", 100 * a / b}'
    done | sort -n | tr '\n' ' ')
    echo "median ratio, $c connections: $(echo "$ratios" | awk '{print $(int((NF + 1) / 2))}')% (rounds: $ratios)"
done
# added cost a message in ms: 1000/rate_with − 1000/rate_none
cost() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", 1000 / a - 1000 / b}'; }
if [ "$with_rspamd" = 1 ]; then
    for c in "${conns[@]}"; do
        shares=()
        for r in $(seq "$rounds"); do
            ours=$(cost "${rate[milter,$c,$r]}" "${rate[none,$c,$r]}")
            theirs=$(cost "${rate[rspamd,$c,$r]}" "${rate[none,$c,$r]}")
            share=$(awk -v a="$ours" -v b="$theirs" 'BEGIN {printf "%.3f", a / b}')
            shares+=("$share")
            echo "round $r, $c connections: added ms a message: shrike $ours, rspamd $theirs (rspamd ${rate[rspamd,$c,$r]} msg/s); shrike/rspamd = $share"
        done
        sorted=$(printf '%s\n' "${shares[@]}" | sort -n | tr '\n' ' ')
        echo "median added-cost share, $c connections: $(echo "$sorted" | awk '{print $(int((NF + 1) / 2))}') (rounds: $sorted)"
    done
fi
