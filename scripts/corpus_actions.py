#!/usr/bin/env python3
"""Per-folder action table and per-symbol hits of `shrike scan` over the development corpus.

    cargo build --release
    scripts/corpus_actions.py [--rules DIR] [--corpus TAR.GZ]

Extracts the corpus (SpamAssassin public corpus, dev split) to a temporary directory and scans
all folders in one `shrike scan` process, ham first then spam then hard ham, each folder in
file-name order, so reputation builds up over the stream as it would in production.
"""
import argparse, collections, json, os, subprocess, tarfile, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACTIONS = ["no action", "greylist", "add header", "reject"]

ap = argparse.ArgumentParser()
ap.add_argument("--rules", default=None)
ap.add_argument("--corpus", default=os.environ.get(
    "SHRIKE_CORPUS", os.path.join(ROOT, "..", "shared", "corpus", "spamassassin-dev.tar.gz")))
ap.add_argument("--symbols", type=int, default=25, help="symbol rows to print")
args = ap.parse_args()

with tempfile.TemporaryDirectory() as tmp:
    with tarfile.open(args.corpus) as t:
        t.extractall(tmp, filter="data")
    base = next(os.path.join(r, d) for r, ds, _ in os.walk(tmp) for d in ds if d == "spam")
    base = os.path.dirname(base)
    folders = ["ham", "spam", "hard_ham"]
    files = []
    for f in folders:
        d = os.path.join(base, f)
        files += [os.path.join(d, n) for n in sorted(os.listdir(d))]
    cmd = [os.path.join(ROOT, "target", "release", "shrike"), "scan"]
    if args.rules:
        cmd += ["--rules", args.rules]
    out = subprocess.run(cmd + files, capture_output=True, text=True, check=True).stdout
    rows = [json.loads(l) for l in out.splitlines()]

by = collections.defaultdict(list)
for r in rows:
    by[os.path.basename(os.path.dirname(r["file"]))].append(r)
print("| folder | messages | " + " | ".join(ACTIONS) + " | ≥ add header |")
print("|---" * (len(ACTIONS) + 3) + "|")
for f in folders:
    rs = by[f]
    c = collections.Counter(r["action"] for r in rs)
    caught = c["add header"] + c["reject"]
    print(f"| {f} | {len(rs)} | " + " | ".join(str(c[a]) for a in ACTIONS)
          + f" | {caught} ({100 * caught / len(rs):.1f}%) |")
sym = collections.defaultdict(collections.Counter)
for f in folders:
    for r in by[f]:
        for s in r["symbols"]:
            sym[s][f] += 1
print()
print("| symbol | spam | ham | hard_ham |")
print("|---|---|---|---|")
for s in sorted(sym, key=lambda s: -sym[s]["spam"])[: args.symbols]:
    print(f"| {s} | {sym[s]['spam']} | {sym[s]['ham']} | {sym[s]['hard_ham']} |")
