#!/usr/bin/env bash
# Builds the Debian package to target/debian/shrike_VERSION_ARCH.deb with cargo-deb (installed
# under target/tools at a pinned version when missing). DEB_VERSION overrides the package's
# version (tests build an older one to upgrade from); NO_BUILD=1 packages the release binary
# already built; DEB_OUT writes the package there instead (cargo-deb keeps one package a
# directory).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo_deb_version=3.8.0
tools="${CARGO_TARGET_DIR:-target}/tools"
if ! "$tools/bin/cargo-deb" --version 2>/dev/null | grep -q "$cargo_deb_version"; then
    echo "package-deb.sh: installing cargo-deb $cargo_deb_version into $tools" >&2
    cargo install --quiet --locked --root "$tools" cargo-deb --version "$cargo_deb_version"
fi

# /etc/shrike/shrike.toml: the documented defaults with the installed daemon's paths. Each
# substitution must apply exactly once, so that a reworded reference fails here, not at install.
mkdir -p target/package
python3 - docs/shrike.toml target/package/shrike.toml <<'PY'
import re, sys
src, dst = sys.argv[1], sys.argv[2]
text = open(src).read()
header = """# shrike's configuration as the Debian package installs it: the documented defaults
# (/usr/share/doc/shrike/shrike.toml.reference, or `shrike config defaults`) with the state in
# /var/lib/shrike and the milter on a Unix socket in /run/shrike (group _shrike, which the
# package adds Postfix to). `shrike config check` (the unit's ExecStartPre) checks a change;
# `systemctl reload shrike` applies [scores] and [rules], a restart the rest.
#
"""
subs = [
    (r'^data_dir = "shrike-data"( *)', 'data_dir = "/var/lib/shrike"'),
    (r'^(\[milter\]\n)listen = "127\.0\.0\.1:11332"( *)', r'\1listen = "unix:/run/shrike/milter.sock"'),
]
for pattern, repl in subs:
    text, n = re.subn(pattern, lambda m: m.expand(repl) + " " * max(1, len(m.group(0)) - len(m.expand(repl))), text, flags=re.M)
    if n != 1:
        sys.exit(f"package-deb.sh: {pattern!r} matched {n} times in {src}")
open(dst, "w").write(header + text)
PY

# Stripped: the debug info of the release profile (for profiling) is 80 MB of a 93 MB binary.
args=(--locked --strip)
[ -z "${DEB_VERSION:-}" ] || args+=(--deb-version "$DEB_VERSION")
[ -z "${NO_BUILD:-}" ] || args+=(--no-build)
[ -z "${DEB_OUT:-}" ] || args+=(--output "$DEB_OUT")
"$tools/bin/cargo-deb" "${args[@]}"
