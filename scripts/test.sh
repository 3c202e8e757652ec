#!/usr/bin/env bash
# Installs what the tests need, then runs every check and test of the project.
# Used as is by CI (.ci/run). Needs: the Rust toolchain, and ../shared/corpus beside the repo
# (or SHRIKE_CORPUS pointing at spamassassin-dev.tar.gz).
set -euo pipefail
cd "$(dirname "$0")/.."

corpus="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
if [ ! -r "$corpus" ]; then
    echo "test.sh: corpus not found at $corpus (set SHRIKE_CORPUS)" >&2
    exit 1
fi
# Debian packages of the daemon tests: a real Postfix and miltertest for the milter, the real
# rspamc for the HTTP protocol, spamc for the spamd protocol, ss and python3 for the MTA harness
# (../shared/tools/mta), the libraries Exim and Sendmail link and m4 for Sendmail's config (both
# are unpacked below: installing exim4-daemon-heavy or sendmail-bin would remove Postfix),
# Node.js for Haraka, chromium with chromedriver for the web UI's browser test (tests/ui.rs), and
# lua-check (luacheck) for the rules' lint (here, in `shrike rules check` and tests/lint.rs),
# nginx-light, curl and openssl for the access model's proxy and client tests (tests/access.rs,
# with docs/deploy.md's TLS proxy), systemd for systemd-analyze's check of the unit file
# (tests/notify.rs, scripts/test_package.sh), adduser for the package's maintainer scripts,
# python3-dkim and python3-nacl (dkimpy, Ed25519) as the independent DKIM verifier of
# tests/signing.rs, clamav-daemon for the antivirus tests' own clamd (tests/antivirus.rs; its
# services are not started, and the tests write their own signature database: freshclam
# never runs), wrk for the MX farm's load (tests/farm.rs, scripts/mx_farm.sh).
mta_libs="libdb5.3 libgnutls-dane0 libgnutls30 libidn12 libidn2-0 libldap-2.5-0 libmariadb3 \
    libnsl2 libpam0g libpcre2-8-0 libperl5.36 libpq5 libsasl2-2 libspf2-2 libsqlite3-0 libcrypt1 \
    libssl3 libwrap0 liblockfile1 m4 util-linux"
missing=""
command -v npm >/dev/null || missing="nodejs npm"
for pkg in postfix miltertest rspamd spamc iproute2 python3 chromium chromium-driver lua-check \
    nginx-light curl openssl adduser python3-dkim python3-nacl systemd redis-server redis-tools clamav-daemon wrk $mta_libs; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
        || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    echo "test.sh: installing$missing" >&2
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    # "No configuration": the package must not set up or start a system Postfix.
    echo "postfix postfix/main_mailer_type select No configuration" | $sudo debconf-set-selections
    # No package may start a system service (nginx would take port 80): the tests start their own.
    policy_rc=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
        $sudo chmod 755 /usr/sbin/policy-rc.d
        policy_rc=1
    fi
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
    # shellcheck disable=SC2086
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends $missing >/dev/null
    [ -z "$policy_rc" ] || $sudo rm -f /usr/sbin/policy-rc.d
fi

sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
# Exim 4.96 for tests/integrations.rs: Debian's exim4-daemon-heavy unpacked under target/exim4,
# run with its own config; it needs its system user to exist.
if [ ! -x target/exim4/usr/sbin/exim4 ]; then
    echo "test.sh: unpacking exim4-daemon-heavy into target/exim4" >&2
    rm -rf target/exim4.deb && mkdir -p target/exim4.deb target/exim4
    (cd target/exim4.deb && apt-get download exim4-daemon-heavy 2>/dev/null)
    dpkg-deb -x target/exim4.deb/exim4-daemon-heavy_*.deb target/exim4
fi
# Sendmail 8.17 likewise, under target/sendmail (sendmail-bin and its m4 files, sendmail-cf).
if [ ! -x target/sendmail/usr/libexec/sendmail/sendmail ]; then
    echo "test.sh: unpacking sendmail-bin and sendmail-cf into target/sendmail" >&2
    rm -rf target/sendmail.deb && mkdir -p target/sendmail.deb target/sendmail
    (cd target/sendmail.deb && apt-get download sendmail-bin sendmail-cf 2>/dev/null)
    for deb in target/sendmail.deb/*.deb; do dpkg-deb -x "$deb" target/sendmail; done
fi
getent passwd Debian-exim >/dev/null \
    || $sudo useradd --system --no-create-home --shell /usr/sbin/nologin Debian-exim
# Haraka and its rspamd plugin, from npm, under target/haraka.
if [ ! -x target/haraka/node_modules/.bin/haraka ]; then
    echo "test.sh: installing Haraka into target/haraka" >&2
    mkdir -p target/haraka
    npm install --prefix target/haraka --no-audit --no-fund --silent \
        Haraka@3.3.4 haraka-plugin-rspamd@1 >/dev/null
fi

for component in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
        rustup component add "$component"
    fi
done

luacheck --no-color rules lua
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --locked
./scripts/test_vendor.sh
# The Debian package: built (release), installed, run as its unit would, upgraded and purged.
./scripts/test_package.sh
