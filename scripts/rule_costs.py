#!/usr/bin/env python3
"""Instructions each default rule costs (callgrind, `rules_profile 1 STRIDE`, STRIDE 5 by default).

Alone (the default): for every rule of rules/, a copy of the directory in which every other
rule's `check` is an empty function; the copy with every check empty is the baseline,
subtracted. A rule alone also pays for the msg fields only it reads in that copy (the text,
record tables), which the full set shares, so the column adds up to more than the whole set.

--marginal: what the full set saves without each rule (its check emptied): the rule's own work
plus whatever only it reads.

--exact: the instructions inside each rule's calls as the full set runs (`SHRIKE_PROFILE_RULE`,
callgrind `--toggle-collect=*profiled_call`): a shared field is charged to the first rule that
reads it, and a collection to the rule whose allocation set it off. The column adds up to the
set's total less the engine's own work around the calls.

    cargo build --release --examples && scripts/rule_costs.py [STRIDE] [--marginal|--exact]   # ~10 min
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = os.path.join(ROOT, "rules")
PROFILE = os.path.join(ROOT, "target/release/examples/rules_profile")


def blocks(texts):
    """(file, rule name, start of its check, end of its check) of every top-level rule."""
    out = []
    for f, t in texts.items():
        for m in re.finditer(r"^rule \{", t, re.M):
            start, end = m.start(), t.index("\n}\n", m.start()) + 3
            name = re.search(r'name = "([A-Z0-9_]+)"', t[start:end]).group(1)
            check = t.index("check = function(msg)", start)
            check_end = t.rindex("  end,\n}", start, end)
            out.append((f, name, check, check_end))
    return out


def write_copy(texts, found, empty, out):
    """rules/ copied to `out` with the checks of the rules for which `empty(name)` emptied."""
    shutil.copytree(RULES, out)
    for f, t in texts.items():
        for (_, name, c, ce) in sorted((b for b in found if b[0] == f), key=lambda b: -b[2]):
            if empty(name):
                t = t[:c] + "check = function(msg)\n" + t[ce:]
        with open(os.path.join(out, f), "w") as w:
            w.write(t)


def instructions(rules_dir, stride, messages, rule=None):
    cg = os.path.join(rules_dir, "callgrind.out")
    toggle = "*profiled_call" if rule else "rules_profile::measured"
    env = dict(os.environ, SHRIKE_PROFILE_RULE=rule) if rule else None
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}",
         f"--toggle-collect={toggle}", PROFILE, "1", str(stride), rules_dir],
        capture_output=True, text=True, check=True, env=env)
    collected = re.search(r"Collected : ([\d,]+)", run.stderr).group(1)
    hits = re.search(r"(\d+) messages x 1: (\d+) hits", run.stdout)
    messages[0] = int(hits.group(1))
    return int(collected.replace(",", "")), int(hits.group(2))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    marginal = "--marginal" in sys.argv[1:]
    exact = "--exact" in sys.argv[1:]
    stride = int(args[0]) if args else 5
    texts = {f: open(os.path.join(RULES, f)).read() for f in sorted(os.listdir(RULES))
             if f.endswith(".lua")}
    found = blocks(texts)
    messages = [1]
    if exact:
        with tempfile.TemporaryDirectory() as tmp:
            rules = os.path.join(tmp, "rules")
            shutil.copytree(RULES, rules)
            total, _ = instructions(rules, stride, messages)
            print(f"all rules: {total / messages[0] / 1000:.1f} k instructions a message")
            rows = []
            for (_, rule, _, _) in found:
                n, _ = instructions(rules, stride, messages, rule)
                rows.append((n / messages[0] / 1000, rule))
        for k, rule in sorted(rows, reverse=True):
            print(f"{rule:28} {k:7.1f} k")
        print(f"{'(sum)':28} {sum(k for k, _ in rows):7.1f} k")
        return
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = os.path.join(tmp, "base")
        write_copy(texts, found, lambda name: not marginal, base_dir)
        base, _ = instructions(base_dir, stride, messages)
        what = "all rules" if marginal else "all checks empty"
        print(f"{what}: {base / messages[0] / 1000:.1f} k instructions a message")
        rows = []
        for (_, rule, _, _) in found:
            d = os.path.join(tmp, rule)
            if marginal:
                write_copy(texts, found, lambda name, r=rule: name == r, d)
            else:
                write_copy(texts, found, lambda name, r=rule: name != r, d)
            n, hits = instructions(d, stride, messages)
            rows.append(((base - n if marginal else n - base) / messages[0] / 1000, rule, hits))
        for k, rule, hits in sorted(rows, reverse=True):
            print(f"{rule:28} {k:7.1f} k  ({hits} hits)")


if __name__ == "__main__":
    main()
