#!/usr/bin/env bash
# Remakes vendor/lua-pgo: the profile GCC uses to optimize Lua (vendor/onelua.c) in release
# builds. An instrumented build of `stage_times` runs the whole scan pipeline with the default
# rule set once over the dev corpus (the training run: the daemon's workload; a profile of the
# rules alone, `rules_profile`, gained less in the pipeline). Its counts and the build's key
# (Lua sources, compiler version and arguments; build.rs checks it) are copied to
# vendor/lua-pgo. Run it after changing Lua, its flags or the compiler (build.rs then warns that
# the profile does not match and builds without it), or when the rules' workload has changed
# much. Needs the corpus (SHRIKE_CORPUS, as the tests).
#
#   scripts/lua_pgo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export SHRIKE_CORPUS="${SHRIKE_CORPUS:-../shared/corpus/spamassassin-dev.tar.gz}"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
SHRIKE_LUA_PGO_GEN="$gen" cargo build --release --locked --example stage_times
target/release/examples/stage_times 1 >/dev/null
mkdir -p vendor/lua-pgo
cp "$gen/onelua.gcda" "$gen/key" vendor/lua-pgo/
echo "vendor/lua-pgo: key $(cat vendor/lua-pgo/key), $(stat -c %s vendor/lua-pgo/onelua.gcda) bytes"
# the optimized build, with the new profile
cargo build --release --locked --examples --bins
