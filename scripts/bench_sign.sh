#!/usr/bin/env bash
# Outbound /checkv2 throughput with DKIM signing on against off (issue 59's target: >= 70% with
# RSA-2048, >= 90% with Ed25519), one release build, three daemons up at once taking turns for
# ROUNDS rounds (default 3), so that a change in the machine's load hits all three; prints each
# round's ratios and the medians. Every message of the dev split's cycle (bench_http.sh's) goes
# as outbound mail of a login in its own From domain (`User: bench@<domain>`, checkv2.lua's
# BENCH_USER_FROM), so each one the outbound thresholds accept is signed: the key template
# points every domain at one RSA-2048 or one Ed25519 key. [outbound.limits] are off (one login
# per domain would be over them at once); everything else is the benchmarks' config.
#
#   [ROUNDS=3] scripts/bench_sign.sh [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
conns=${2:-16}
rounds=${ROUNDS:-3}
work=${BENCH_DIR:-/tmp/shrike-bench-sign}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$work"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
find "$work/corpus/spamassassin-dev" -type f -path '*/*ham/*' -o -type f -path '*/spam/*' | sort \
    | awk 'NR % 6 == 1' > "$work/list"
echo "messages in the cycle: $(wc -l < "$work/list")"
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 1; }
cargo build --release --quiet
bin="$target/release/shrike"

# One key of each kind; every From domain of the cycle a link to it under the template's name.
rm -rf "$work/keys"
mkdir -p "$work/keys/rsa" "$work/keys/ed"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/keys/rsa.pem" 2>/dev/null
openssl genpkey -algorithm ed25519 -out "$work/keys/ed.pem" 2>/dev/null
while read -r f; do
    awk '/^\r?$/ {exit} tolower($0) ~ /^from:/ {print; exit}' "$f" \
        | { grep -oiE '@[a-z0-9.-]+' || true; } | head -1 | tr -d '@' | tr 'A-Z' 'a-z'
done < "$work/list" | sort -u > "$work/domains"
while read -r d; do
    [ -n "$d" ] || continue
    ln -sf "$work/keys/rsa.pem" "$work/keys/rsa/$d.s.key"
    ln -sf "$work/keys/ed.pem" "$work/keys/ed/$d.s.key"
done < "$work/domains"
echo "From domains: $(wc -l < "$work/domains")"

common='[dns]
enabled = false
[outbound.limits]
messages = 0
recipients = 0
spam = 0
burst = 0
'
start() {  # start NAME PORT SIGNING-SECTION -> pid in $started
    rm -rf "$work/$1"
    mkdir -p "$work/$1"
    printf '%s%s' "$common" "$3" > "$work/$1/shrike.toml"
    "$bin" --config "$work/$1/shrike.toml" serve --http "127.0.0.1:$2" --milter off \
        --data "$work/$1/data" 2> "$work/$1/log" &
    started=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$2/health" >/dev/null && break; sleep 0.1; done
}
start off 21341 ""
pids=("$started")
start rsa 21342 "[dkim_signing]
enabled = true
selector = \"s\"
keys = \"$work/keys/rsa/\$domain.\$selector.key\"
"
pids+=("$started")
start ed 21343 "[dkim_signing]
enabled = true
selector = \"s\"
keys = \"$work/keys/ed/\$domain.\$selector.key\"
"
pids+=("$started")
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

# How many of the cycle one pass signs.
signed=0
while read -r f; do
    d=$(awk '/^\r?$/ {exit} tolower($0) ~ /^from:/ {print; exit}' "$f" \
        | { grep -oiE '@[a-z0-9.-]+' || true; } | head -1 | tr -d '@' | tr 'A-Z' 'a-z')
    if curl -s -H "User: bench@${d:-none.example}" --data-binary @"$f" http://127.0.0.1:21342/checkv2 \
        | grep -q DKIM_SIGNED; then
        signed=$((signed + 1))
    fi
done < "$work/list"
echo "signed in one pass (RSA): $signed of $(wc -l < "$work/list")"

run() {  # run NAME PORT -> the rate in $last
    BENCH_USER_FROM=1 BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d5s -s scripts/bench/checkv2.lua \
        "http://127.0.0.1:$2" >/dev/null
    out=$(BENCH_USER_FROM=1 BENCH_LIST="$work/list" wrk -t2 -c"$conns" -d"${secs}s" --latency \
        -s scripts/bench/checkv2.lua "http://127.0.0.1:$2" | grep -E '^(messages|latency ms|Non-2xx)')
    echo "== $1: $out"
    last=$(echo "$out" | awk '/^messages/ {print $7}')
}
rsa_ratios=()
ed_ratios=()
for r in $(seq "$rounds"); do
    run off 21341; off=$last
    run rsa 21342; rsa=$last
    run ed 21343; ed=$last
    rr=$(awk -v a="$rsa" -v b="$off" 'BEGIN {printf "%.3f", a / b}')
    er=$(awk -v a="$ed" -v b="$off" 'BEGIN {printf "%.3f", a / b}')
    rsa_ratios+=("$rr")
    ed_ratios+=("$er")
    echo "round $r: off $off, RSA-2048 $rsa ($rr), Ed25519 $ed ($er) msg/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median: RSA-2048 $(median "${rsa_ratios[@]}") of off, Ed25519 $(median "${ed_ratios[@]}") of off"
