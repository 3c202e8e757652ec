#!/usr/bin/env bash
# What the antivirus ([antivirus], clamd over INSTREAM) costs a scan: `shrike scan` (one thread,
# release build, [dns] off) over two sets, with clamd on (a unix socket) against off,
# alternated for ROUNDS rounds (default 3):
#   - the dev corpus (3,125 messages, a few with attachments);
#   - 300 generated messages, each with a 100 kB random attachment (base64, ~137 kB a message).
# clamd is Debian's clamav-daemon started here on a one-signature database (EICAR's MD5 in a
# .hdb, no download): the cost measured is the exchange and clamd's parsing of the message, not
# a full signature set's matching (with the official databases clamd loads ~8 M signatures and
# scans slower). Prints msg/s per set, on and off, and on/off per round.
#
#   [ROUNDS=3] [SHRIKE_BIN=target/release/shrike] scripts/bench_antivirus.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
work=${BENCH_DIR:-/tmp/shrike-bench-av}
corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
bin=${SHRIKE_BIN:-${CARGO_TARGET_DIR:-target}/release/shrike}
[ -x "$bin" ] || cargo build --release --bin shrike
mkdir -p "$work/db"
[ -d "$work/corpus/spamassassin-dev" ] || { mkdir -p "$work/corpus"; tar xzf "$corpus" -C "$work/corpus"; }
if [ ! -d "$work/attach" ]; then
    python3 - "$work/attach" <<'EOF'
import base64, os, random, sys
d = sys.argv[1]
os.makedirs(d)
random.seed(60)
for i in range(300):
    data = bytes(random.getrandbits(8) for _ in range(100_000))
    b = base64.encodebytes(data).decode().replace("\n", "\r\n")
    open(f"{d}/m{i:03}.eml", "w").write(
        f"From: a{i}@sender.example\r\nTo: bob@example.com\r\nSubject: report {i}\r\n"
        f"Message-ID: <att{i}@bench>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n--b1\r\n"
        "Content-Type: text/plain\r\n\r\nSee attached.\r\n--b1\r\n"
        f"Content-Type: application/pdf; name=\"r{i}.pdf\"\r\n"
        f"Content-Disposition: attachment; filename=\"r{i}.pdf\"\r\n"
        f"Content-Transfer-Encoding: base64\r\n\r\n{b}--b1--\r\n")
EOF
fi
printf '%s' 'X5O!P%@AP[4\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*' > "$work/eicar"
echo "$(md5sum < "$work/eicar" | cut -d' ' -f1):68:Eicar-Test-Signature" > "$work/db/test.hdb"
cat > "$work/clamd.conf" <<EOF
Foreground yes
DatabaseDirectory $work/db
LocalSocket $work/clamd.sock
LogFile $work/clamd.log
PidFile $work/clamd.pid
EOF
clamd -c "$work/clamd.conf" >/dev/null 2>&1 &
clamd_pid=$!
trap 'kill $clamd_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do [ -S "$work/clamd.sock" ] && break; sleep 0.1; done
printf '[dns]\nenabled = false\n' > "$work/off.toml"
printf '[dns]\nenabled = false\n[antivirus]\nservers = ["unix:%s"]\n' "$work/clamd.sock" > "$work/on.toml"

# msg/s of one `shrike scan` run over a set (its output discarded; every result checked for a
# CLAM_VIRUS_FAIL, which would mean clamd was not reached).
rate() {
    local config=$1 set=$2 n start end out
    n=$(find "$set" -type f ! -name '*.md' | wc -l)
    out="$work/out.json"
    start=$(date +%s.%N)
    find "$set" -type f ! -name '*.md' -print0 | sort -z | xargs -0 "$bin" --config "$config" scan > "$out"
    end=$(date +%s.%N)
    if grep -q CLAM_VIRUS_FAIL "$out"; then echo "clamd failed during the run" >&2; exit 1; fi
    echo "$n / ($end - $start)" | bc -l | xargs printf '%.0f'
}

for set in "$work/corpus/spamassassin-dev" "$work/attach"; do
    echo "== $(basename "$set")"
    for r in $(seq 1 "$rounds"); do
        off=$(rate "$work/off.toml" "$set")
        on=$(rate "$work/on.toml" "$set")
        echo "round $r: off $off msg/s, clamd on $on msg/s, on/off $(echo "$on / $off" | bc -l | xargs printf '%.3f')"
    done
done
