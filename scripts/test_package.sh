#!/usr/bin/env bash
# The Debian package on this machine, as an operator meets it: builds an older and the current
# version (scripts/package-deb.sh), installs the older with dpkg, checks the user, the files'
# modes, the conffile and the unit (systemd-analyze verify and security), runs the daemon as the
# unit's ExecStartPre and ExecStart would under _shrike (CI has no running systemd), with
# [access] unix_socket_group = "postfix" as docs/deploy.md says, scans through the milter socket
# with a real Postfix (the harness in ../shared/tools/mta) and miltertest as the postfix user
# (and is refused as a user outside the group), learns a message, stops on SIGTERM; upgrades
# to the current version (the operator's config and the learned count kept); removes it (data
# and config kept) and purges it (all gone, the machine as before). Needs root or sudo.
# Prints the package's size and the time from `dpkg -i` to the first verdict.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
tools="${SHRIKE_MTA_TOOLS:-$root/../shared/tools/mta}"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"

say() { echo "test_package.sh: $*"; }
fail() {
    echo "test_package.sh: FAIL: $*" >&2
    [ ! -s "${tmp:-/nonexistent}/daemon.log" ] || tail -20 "$tmp/daemon.log" >&2
    exit 1
}
check() { # check DESCRIPTION COMMAND...
    local what="$1"
    shift
    "$@" || fail "$what"
    say "ok - $what"
}

if dpkg-query -W -f='${Status}' shrike 2>/dev/null | grep -q installed || getent passwd _shrike >/dev/null; then
    fail "shrike is already installed here (or its user exists): refusing to touch it"
fi

tmp=$(mktemp -d)
chmod 755 "$tmp"
pid=""
harness=""
cleanup() {
    [ -z "$pid" ] || $sudo kill -9 "$pid" 2>/dev/null || true
    [ -z "$harness" ] || "$tools/mta-down" --dir "$harness" >/dev/null 2>&1 || true
    $sudo env DEBIAN_FRONTEND=noninteractive dpkg --purge shrike >/dev/null 2>&1 || true
    $sudo rm -rf /run/shrike
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---- build: the "previous" version to upgrade from, then the current one -----------------------
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
# (cargo-deb empties target/debian of other packages: the older one is written elsewhere first)
prev="$tmp/shrike_${version}~prev_${arch}.deb"
DEB_VERSION="$version~prev" DEB_OUT="$prev" ./scripts/package-deb.sh >/dev/null
NO_BUILD=1 ./scripts/package-deb.sh >/dev/null
cur=$(ls -t "${CARGO_TARGET_DIR:-target}"/debian/shrike_"${version}"-*_"${arch}".deb | head -1)
[ -r "$prev" ] && [ -r "$cur" ] || fail "packages not built"
say "package $(basename "$cur"): $(stat -c %s "$cur") bytes"

# ---- install ----------------------------------------------------------------------------------
started=$(date +%s.%N)
$sudo env DEBIAN_FRONTEND=noninteractive dpkg -i "$prev" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i $prev"; }
mode() { stat -c '%a %U:%G' "$1"; }
check "the _shrike system user, no login" \
    test "$(getent passwd _shrike | cut -d: -f7)" = /usr/sbin/nologin
check "_shrike is a system uid" test "$(id -u _shrike)" -lt 1000
check "/usr/bin/shrike 755 root" test "$(mode /usr/bin/shrike)" = "755 root:root"
check "/etc/shrike/shrike.toml 640 root:_shrike" test "$(mode /etc/shrike/shrike.toml)" = "640 root:_shrike"
check "/etc/shrike/rules.d 755 root" test "$(mode /etc/shrike/rules.d)" = "755 root:root"
check "/var/lib/shrike 700 _shrike" test "$(mode /var/lib/shrike)" = "700 _shrike:_shrike"
check "shrike.toml is a conffile" \
    grep -q '/etc/shrike/shrike.toml' <(dpkg-query -W -f='${Conffiles}' shrike)
unit=$(dpkg -L shrike | grep '/systemd/system/shrike.service$')
check "the unit is installed ($unit)" test -r "$unit"
check "the unit is enabled" test -L /etc/systemd/system/multi-user.target.wants/shrike.service
check "systemd-analyze verify $unit" systemd-analyze verify "$unit"
exposure=$(systemd-analyze security --offline=yes "$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for shrike.service: \([0-9.]*\).*/\1/p')
say "systemd-analyze security: exposure $exposure"
check "exposure $exposure <= 2.0" python3 -c "import sys; sys.exit(not float('$exposure') <= 2.0)"
if getent group postfix >/dev/null; then
    check "_shrike may give the socket to postfix" grep -qw postfix <(id -nG _shrike)
fi

# The operator's one edit for Postfix, exactly as docs/deploy.md gives it.
line='unix_socket_group = "postfix"'
check "docs/deploy.md gives the socket group line" grep -qx "$line" docs/deploy.md
$sudo sed -i "s/^unix_socket_group = \"\" /$line/" /etc/shrike/shrike.toml
check "the socket group is set" grep -q "^$line" /etc/shrike/shrike.toml

# ---- run it as the unit would -----------------------------------------------------------------
unit_cmd() { sed -n "s/^$1=//p" "$unit"; }
as_shrike=(setpriv --reuid=_shrike --regid=_shrike --init-groups --inh-caps=-all)
start_daemon() {
    # RuntimeDirectory=shrike, RuntimeDirectoryMode=0755
    $sudo install -d -o _shrike -g _shrike -m 0755 /run/shrike
    # shellcheck disable=SC2046
    $sudo "${as_shrike[@]}" $(unit_cmd ExecStartPre) >/dev/null 2>"$tmp/pre.log" \
        || { cat "$tmp/pre.log"; fail "ExecStartPre"; }
    # shellcheck disable=SC2046
    $sudo "${as_shrike[@]}" $(unit_cmd ExecStart) 2>"$tmp/daemon.log" &
    pid=$!
    for _ in $(seq 600); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:11333/health)" = 200 ] && return 0
        kill -0 "$pid" 2>/dev/null || fail "the daemon exited at start"
        sleep 0.1
    done
    fail "no /health after 60 s"
}
stop_daemon() {
    $sudo kill -TERM "$pid"
    local status=0
    wait "$pid" || status=$?
    pid=""
    check "SIGTERM: a clean exit" test "$status" = 0
    $sudo rm -rf /run/shrike
}
start_daemon
first=$(curl -s --data-binary @tests/data/gtube.eml http://127.0.0.1:11333/checkv2)
done_at=$(date +%s.%N)
check "first verdict: GTUBE rejected" grep -q '"action":"reject"' <<<"$first"
say "install to first verdict: $(python3 -c "print(f'{$done_at - $started:.2f}')") s"
daemon_pid=$pid
[ -z "$sudo" ] || daemon_pid=$(pgrep -P "$pid" | head -1)
check "the daemon runs as _shrike" test "$(ps -o user= -p "$daemon_pid" | tr -d ' ')" = _shrike
sock=/run/shrike/milter.sock
expect_group=_shrike
getent group postfix >/dev/null && expect_group=postfix
check "milter socket 660 _shrike:$expect_group" test "$(mode $sock)" = "660 _shrike:$expect_group"

# miltertest as Postfix's processes run: the postfix user with its primary group only.
cp tests/milter/shrike-basic.lua "$tmp/basic.lua"
chmod 644 "$tmp/basic.lua"
if getent passwd postfix >/dev/null; then
    check "miltertest as postfix over $sock" \
        $sudo setpriv --reuid=postfix --regid=postfix --clear-groups \
        miltertest -D "MILTER=unix:$sock" -s "$tmp/basic.lua" >"$tmp/mt.log" 2>&1
    check "miltertest's checks passed" grep -q "ALL SHRIKE MILTERTEST CHECKS PASSED" "$tmp/mt.log"
fi
if $sudo setpriv --reuid=nobody --regid=nogroup --clear-groups \
    miltertest -D "MILTER=unix:$sock" -s "$tmp/basic.lua" >"$tmp/mt-nobody.log" 2>&1; then
    fail "a user outside the socket's group scanned"
fi
say "ok - a user outside the socket's group is refused"

# A real Postfix in front of the socket (no chroot: see docs/deploy.md).
harness="$tmp/mta"
smtp=$(free_port)
"$tools/mta-up" --force --no-install --dir "$harness" --smtp-port "$smtp" \
    --sink-port "$(free_port)" --milter "unix:$sock" --default-action tempfail >"$tmp/mta-up.log" 2>&1 \
    || { cat "$tmp/mta-up.log"; fail "mta-up"; }
# main.cf then gets the guide's lines (docs/deploy.md's postfix block), each replacing the
# harness's own (postconf -e: a second entry of a name would make every Postfix program warn,
# postlogd included, whose warnings about itself jam the log), and Postfix reloads them.
guide_lines=$(awk '/^```postfix$/{on=1; next} /^```$/{on=0} on' docs/deploy.md)
check "docs/deploy.md has the main.cf lines" grep -q "^smtpd_milters = unix:$sock$" <<<"$guide_lines"
while IFS= read -r entry; do
    postconf -c "$harness/postfix/etc" -e "$entry"
done <<<"$guide_lines"
check "main.cf has the guide's milter macros" grep -q "^milter_mail_macros = i {auth_type} {auth_authen} {mail_addr}$" "$harness/postfix/etc/main.cf"
postfix -c "$harness/postfix/etc" reload >/dev/null 2>&1 || fail "postfix reload"
sleep 1
reply=$("$tools/mta-send" --server "127.0.0.1:$smtp" -t bob@example.com tests/data/gtube.eml)
check "Postfix: GTUBE refused by the milter (550)" grep -q 'EOD=550' <<<"$reply"
reply=$("$tools/mta-send" --server "127.0.0.1:$smtp" -t bob@example.com tests/data/qp_body.eml)
check "Postfix: an ordinary message accepted (250)" grep -q 'EOD=250' <<<"$reply"
delivered=""
for _ in $(seq 150); do
    delivered=$(grep -l '^X-Spam-Status:' "$harness"/sink/* 2>/dev/null | head -1) && [ -n "$delivered" ] && break
    sleep 0.1
done
check "Postfix delivered it with shrike's headers" test -n "$delivered"
"$tools/mta-down" --dir "$harness" >/dev/null 2>&1 || true
harness=""

learned() { curl -s http://127.0.0.1:11333/stat | python3 -c 'import json,sys; print(json.load(sys.stdin)["classifier"]["learned_spam"])'; }
curl -s -H "Content-Type: message/rfc822" --data-binary @tests/data/phishing_anchor.eml http://127.0.0.1:11333/learnspam >"$tmp/learn.json"
check "learned one spam" test "$(learned)" = 1
stop_daemon

# ---- upgrade: the operator's config and the learned count stay ---------------------------------
echo "# kept across upgrades" | $sudo tee -a /etc/shrike/shrike.toml >/dev/null
$sudo env DEBIAN_FRONTEND=noninteractive dpkg -i "$cur" </dev/null >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i $cur (upgrade)"; }
check "upgraded to $(dpkg-query -W -f='${Version}' shrike)" \
    test "$(dpkg-query -W -f='${Version}' shrike)" != "$version~prev"
check "the operator's config kept" grep -q "^# kept across upgrades" /etc/shrike/shrike.toml
check "the operator's socket group kept" grep -q "^$line" /etc/shrike/shrike.toml
start_daemon
check "the learned count kept" test "$(learned)" = 1
stop_daemon

# ---- remove keeps data and config; purge removes everything ------------------------------------
$sudo env DEBIAN_FRONTEND=noninteractive dpkg -r shrike >/dev/null 2>&1 || fail "dpkg -r"
check "removed: the binary is gone" test ! -e /usr/bin/shrike
check "removed: the data stays" test -d /var/lib/shrike
check "removed: the config stays" test -f /etc/shrike/shrike.toml
$sudo env DEBIAN_FRONTEND=noninteractive dpkg --purge shrike >/dev/null 2>&1 || fail "dpkg --purge"
check "purged: the data is gone" test ! -e /var/lib/shrike
check "purged: /etc/shrike is gone" test ! -e /etc/shrike
check "purged: the user is gone" bash -c '! getent passwd _shrike >/dev/null'
check "purged: the group is gone" bash -c '! getent group _shrike >/dev/null'
check "purged: the unit's enablement is gone" test ! -e /etc/systemd/system/multi-user.target.wants/shrike.service
if getent group postfix >/dev/null; then
    check "purged: postfix's group as before" bash -c '! getent group postfix | grep -qw _shrike'
fi
say "all package checks passed"
