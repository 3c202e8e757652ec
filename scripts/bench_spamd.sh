#!/usr/bin/env bash
# spamd-protocol throughput next to /checkv2, one client (examples/proto_load.rs) for both, on
# the dev corpus (every sixth message, as scripts/bench_http.sh): /checkv2 over HTTP keep-alive
# and with a connection a request, spamd's CHECK on the dedicated listener and on the HTTP port,
# and rspamd's legacy CHECK RSPAMC/1.3 (one connection a request, as spamc and Exim make them). The protocols take turns
# for ROUNDS rounds (default 3) against one daemon; each round prints the ratios to /checkv2,
# the end their medians. Client and server share the machine.
#
#   [ROUNDS=3] scripts/bench_spamd.sh [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
conns=${2:-16}
work=${BENCH_DIR:-/tmp/shrike-bench}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
find "$work/corpus/spamassassin-dev" -type f -path '*/*ham/*' -o -type f -path '*/spam/*' | sort \
    | awk 'NR % 6 == 1' > "$work/list"
echo "messages in the cycle: $(wc -l < "$work/list")"

cargo build --release --quiet --bin shrike --example proto_load
http=21333
spamd=21335
rm -rf "$work/data-spamd"
printf '[spamd]\nlisten = "127.0.0.1:%s"\n' "$spamd" | cat - scripts/bench/offline.toml > "$work/spamd.toml"
./target/release/shrike --config "$work/spamd.toml" serve --http "127.0.0.1:$http" --milter off \
    --data "$work/data-spamd" 2> "$work/shrike-spamd.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/health" >/dev/null && break; sleep 0.1; done

load() {  # load ADDR PROTO -> the result line; the rate in $rate
    ./target/release/examples/proto_load "$1" "$2" "$work/list" "$conns" 3 >/dev/null
    line=$(./target/release/examples/proto_load "$1" "$2" "$work/list" "$conns" "$secs")
    rate=$(echo "$line" | awk '{print $3}')
}
rounds=${ROUNDS:-3}
spamd_ratios=() onhttp_ratios=() legacy_ratios=() close_ratios=()
for r in $(seq "$rounds"); do
    load "127.0.0.1:$http" http; base=$rate; echo "round $r: checkv2  $line"
    load "127.0.0.1:$http" http-close; c=$rate; echo "round $r: checkv2, a connection a request: $line"
    load "127.0.0.1:$spamd" spamd; s=$rate; echo "round $r: spamd    $line"
    load "127.0.0.1:$http" spamd; o=$rate; echo "round $r: spamd@80 $line  (on the HTTP port)"
    load "127.0.0.1:$http" legacy; l=$rate; echo "round $r: legacy   $line"
    spamd_ratios+=("$(echo "$s / $base" | bc -l)")
    onhttp_ratios+=("$(echo "$o / $base" | bc -l)")
    legacy_ratios+=("$(echo "$l / $base" | bc -l)")
    close_ratios+=("$(echo "$s / $c" | bc -l)")
    printf 'round %s ratios to checkv2: spamd %.3f, spamd on the HTTP port %.3f, legacy %.3f; spamd to checkv2 with a connection a request %.3f\n' \
        "$r" "${spamd_ratios[-1]}" "${onhttp_ratios[-1]}" "${legacy_ratios[-1]}" "${close_ratios[-1]}"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf 'median ratios to checkv2 over %s rounds: spamd %.3f, spamd on the HTTP port %.3f, legacy %.3f; spamd to checkv2 with a connection a request %.3f\n' \
    "$rounds" "$(median "${spamd_ratios[@]}")" "$(median "${onhttp_ratios[@]}")" \
    "$(median "${legacy_ratios[@]}")" "$(median "${close_ratios[@]}")"
