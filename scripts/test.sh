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
# rspamc for the HTTP protocol, spamc for the spamd protocol, ss and python3 for the MTA harness (../shared/tools/mta).
missing=""
for pkg in postfix miltertest rspamd spamc iproute2 python3; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
        || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    echo "test.sh: installing$missing" >&2
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    # "No configuration": the package must not set up or start a system Postfix.
    echo "postfix postfix/main_mailer_type select No configuration" | $sudo debconf-set-selections
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
    # shellcheck disable=SC2086
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends $missing >/dev/null
fi

for component in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
        rustup component add "$component"
    fi
done

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --locked
./scripts/test_vendor.sh
