#!/usr/bin/env bash
# Runs the vendored mail-parser's own unit tests for the code shrike patched (vendor/README.md):
# each patch's test checks the faster loop against the original one on random inputs. The
# crate is tested in a copy with the dev-dependencies its tests need (the copy in vendor/ keeps
# mail-parser's manifest as published). Tests that read the crates.io package's `resources/`
# (not vendored) are left out by the filters below. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
work="${CARGO_TARGET_DIR:-$PWD/target}/vendor-test"
rm -rf "$work/mail-parser"
mkdir -p "$work"
cp -r vendor/mail-parser "$work/mail-parser"
cat >> "$work/mail-parser/Cargo.toml" <<'TOML'

[dev-dependencies]
serde_json = "1"
serde = { version = "1", features = ["derive"] }
chrono = "0.4"
TOML
# The versions these tests were last run with (a lock file in vendor/mail-parser itself would be
# ignored by shrike's build, but is clearer kept apart).
cp vendor/mail-parser-tests.lock "$work/mail-parser/Cargo.lock"
cd "$work/mail-parser"
CARGO_TARGET_DIR="$work/target" cargo test --locked --lib --features serde,full_encoding -- \
    decoders:: parsers::fields::raw core::header::patch6_tests
