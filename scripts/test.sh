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
for component in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
        rustup component add "$component"
    fi
done

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --locked
