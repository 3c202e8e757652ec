#!/usr/bin/env python3
"""The dev-corpus replay (`shrike replay --train all`) in the four arrival orders BENCHMARKS.md
quotes: the messages' own times, and `--period 30d` with seeds 1, 2 and 3. Two replays run at a
time. Prints, per order, spam / ham / hard ham at add header or above, then over the four:

  1-AUC      the share of (spam, ham or hard ham) pairs the classifier's probability orders
             wrongly, over the messages it scored (ties count half), averaged;
  best thr   per order, the most spam any one score threshold puts above it with at most 2 ham
             and 2 hard ham above it too (what re-grading alone could reach).

Extra arguments go to every replay (e.g. `--config FILE`, `--rules DIR`). The CSVs stay in
--out (default a temporary directory) for closer looks.

    cargo build --release && scripts/replay_orders.py [--bin B] [--corpus DIR] [--out DIR] [-- ARGS...]

The seeds order messages by a hash of their names relative to the corpus path given, so the
same seeds over another path to the same files (the parent directory, say) are four other
orders.
"""
import argparse
import bisect
import csv
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDERS = [("times", []), ("seed1", ["--period", "30d", "--seed", "1"]),
          ("seed2", ["--period", "30d", "--seed", "2"]), ("seed3", ["--period", "30d", "--seed", "3"])]
FLAGGED = {"add header", "rewrite subject", "soft reject", "reject", "discard"}


def summarize(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    counts = {"spam": 0, "ham": 0, "hard_ham": 0}
    for r in rows:
        if r["action"] in FLAGGED and r["label"] in counts:
            counts[r["label"]] += 1
    spam_p = [float(r["probability"]) for r in rows if r["probability"] and r["label"] == "spam"]
    other_p = sorted(float(r["probability"]) for r in rows
                     if r["probability"] and r["label"] in ("ham", "hard_ham"))
    wrong = 0.0
    for p in spam_p:
        lo, hi = bisect.bisect_left(other_p, p), bisect.bisect_right(other_p, p)
        wrong += (len(other_p) - hi) + 0.5 * (hi - lo)
    auc = wrong / (len(spam_p) * len(other_p)) if spam_p and other_p else float("nan")
    scores = [(float(r["score"]), r["label"]) for r in rows]
    ham = sorted((s for s, l in scores if l == "ham"), reverse=True)
    hard = sorted((s for s, l in scores if l == "hard_ham"), reverse=True)
    # A threshold above the third-highest ham and hard ham leaves at most two of each above it.
    bar = max(ham[2] if len(ham) > 2 else float("-inf"), hard[2] if len(hard) > 2 else float("-inf"))
    best = sum(1 for s, l in scores if l == "spam" and s > bar)
    return counts, auc, best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/shrike"))
    ap.add_argument("--corpus", default="/tmp/shrike-bench/corpus/spamassassin-dev")
    ap.add_argument("--out", default=None, help="directory for the CSVs (default: temporary)")
    ap.add_argument("extra", nargs="*", help="arguments for every replay (after --)")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="shrike-orders-")
    os.makedirs(out, exist_ok=True)
    jobs = []
    for name, args in ORDERS:
        path = os.path.join(out, name + ".csv")
        cmd = [a.bin, "replay", "--train", "all", "--csv", path, *args, *a.extra, a.corpus]
        jobs.append((name, path, cmd))
    for i in range(0, len(jobs), 2):
        running = [(n, p, subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                   for n, p, c in jobs[i:i + 2]]
        for name, _, proc in running:
            _, err = proc.communicate()
            if proc.returncode != 0:
                sys.exit(f"replay ({name}) failed: {err.decode(errors='replace').strip()}")
    aucs, bests = [], []
    for name, path, _ in jobs:
        c, auc, best = summarize(path)
        aucs.append(auc)
        bests.append(best)
        print(f"{name:6}  spam {c['spam']:3}  ham {c['ham']:2}  hard ham {c['hard_ham']:2}"
              f"  1-AUC {auc * 100:.3f}%  best thr {best}")
    print(f"four orders: 1-AUC {sum(aucs) / len(aucs) * 100:.3f}% (mean), "
          f"best thr {min(bests)}-{max(bests)}; CSVs in {out}")


if __name__ == "__main__":
    main()
