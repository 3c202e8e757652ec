#!/usr/bin/env python3
"""Proposes rule score changes from a cross-validation CSV (`shrike replay --cross-validate K
--csv FILE`), the way SpamAssassin fits its scores to mass-check results: a regularized
logistic fit over rule hits, judged on folds it was not fitted on. It writes a proposal for a
person to review; it changes no rule.

The model: a message's new score is its replayed score plus, for each symbol it hit, that
symbol's change (one number a symbol, the same whatever weight the hit had); the chance that a
message is spam is sigmoid(slope * (new score - threshold)). The changes minimise the
label-weighted log loss plus lambda times the sum of their squares (so a symbol moves only as
far as the evidence pushes it, and rare symbols hardly move). Ham costs --ham-cost times a spam,
hard ham --hard-ham-cost times.

Fold structure: each fold's changes are fitted on the other folds' rows and measured on its
own. Hard ham is scored in every fold, so its messages are dealt into K groups by a hash of the
name and group k is used only in fold k: no message is fitted on and measured. Messages with a
forced action (GTUBE) and unreadable ones are left out.

    scripts/fit_scores.py CV.csv [--lambda 2] [--ham-cost 30] [--hard-ham-cost 5] [--out FILE]

Prints, per fold, the held-out figures at --threshold before and after its own fit, then the
proposal fitted on every fold (symbol, hits by label, mean score now, change, proposed, and the
change fitted without each fold).
"""
import argparse
import collections
import csv
import hashlib
import math
import re
import sys

SYMBOL = re.compile(r"(\S+)\((-?[0-9.eE+-]+)\)")
FORCED = {"GTUBE"}


def group(name, k):
    """The fold a hard ham message is used in: a stable hash of its file name."""
    base = name.rsplit("/", 1)[-1]
    return int(hashlib.sha256(base.encode()).hexdigest(), 16) % k


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if "fold" not in r:
                sys.exit(f"{path}: no fold column (write it with shrike replay --cross-validate K --csv)")
            if r["action"] == "error":
                continue
            hits = {m.group(1): float(m.group(2)) for m in SYMBOL.finditer(r["symbols"])}
            if FORCED & hits.keys():
                continue
            rows.append({"file": r["file"], "label": r["label"], "fold": int(r["fold"]),
                         "score": float(r["score"]), "hits": hits})
    return rows


def fit(rows, symbols, a):
    """Full-batch AdaGrad on the weighted log loss + L2; returns {symbol: change}."""
    w = {s: 0.0 for s in symbols}
    g2 = {s: 1e-9 for s in symbols}
    for _ in range(a.iterations):
        grad = {s: 2 * a.lam * w[s] for s in symbols}
        for r in rows:
            s = r["score"] + sum(w[x] for x in r["hits"] if x in w)
            z = max(-35.0, min(35.0, a.slope * (s - a.threshold)))
            p = 1 / (1 + math.exp(-z))
            y = 1.0 if r["label"] == "spam" else 0.0
            c = r["cost"] * a.slope * (p - y)
            for x in r["hits"]:
                if x in grad:
                    grad[x] += c
        for s in symbols:
            g2[s] += grad[s] ** 2
            w[s] -= a.rate * grad[s] / math.sqrt(g2[s])
    return w


def figures(rows, w, threshold):
    """Per label: (caught, messages) at the threshold with the changes `w`."""
    out = collections.defaultdict(lambda: [0, 0])
    for r in rows:
        s = r["score"] + sum(w.get(x, 0.0) for x in r["hits"])
        out[r["label"]][0] += s >= threshold
        out[r["label"]][1] += 1
    return out


def show(f):
    return "  ".join(f"{l} {f[l][0]}/{f[l][1]} ({100 * f[l][0] / max(1, f[l][1]):.1f}%)"
                     for l in ("spam", "ham", "hard_ham") if l in f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--lambda", dest="lam", type=float, default=2.0)
    ap.add_argument("--ham-cost", type=float, default=30.0)
    ap.add_argument("--hard-ham-cost", type=float, default=5.0)
    ap.add_argument("--threshold", type=float, default=6.0, help="add header (default 6)")
    ap.add_argument("--slope", type=float, default=1.0, help="log-odds a point")
    ap.add_argument("--min-hits", type=int, default=5, help="symbols hitting fewer messages keep their score")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--rate", type=float, default=0.3)
    ap.add_argument("--out", help="also write the proposal as TSV")
    a = ap.parse_args()
    rows = load(a.csv)
    k = max(r["fold"] for r in rows) + 1
    if k < 2:
        sys.exit("one fold: nothing to hold out")
    rows = [r for r in rows if r["label"] != "hard_ham" or group(r["file"], k) == r["fold"]]
    cost = {"spam": 1.0, "ham": a.ham_cost, "hard_ham": a.hard_ham_cost}
    rows = [r for r in rows if r["label"] in cost]
    for r in rows:
        r["cost"] = cost[r["label"]]

    def usable(of):
        n = collections.Counter(x for r in of for x in r["hits"])
        return sorted(s for s, c in n.items() if c >= a.min_hits)

    print(f"{len(rows)} messages in {k} folds (hard ham dealt into the folds by name); "
          f"lambda {a.lam}, ham cost {a.ham_cost}, hard ham cost {a.hard_ham_cost}, "
          f"threshold {a.threshold}")
    before_all, after_all = collections.defaultdict(lambda: [0, 0]), collections.defaultdict(lambda: [0, 0])
    per_fold = []
    for fold in range(k):
        train = [r for r in rows if r["fold"] != fold]
        held = [r for r in rows if r["fold"] == fold]
        w = fit(train, usable(train), a)
        per_fold.append(w)
        b, f = figures(held, {}, a.threshold), figures(held, w, a.threshold)
        for d, src in ((before_all, b), (after_all, f)):
            for l, (c, n) in src.items():
                d[l][0] += c
                d[l][1] += n
        print(f"fold {fold} held out: now {show(b)}")
        print(f"       fitted on the others: {show(f)}")
    print(f"all held out: now {show(before_all)}")
    print(f"       fitted: {show(after_all)}")

    symbols = usable(rows)
    w = fit(rows, symbols, a)
    hits = collections.defaultdict(collections.Counter)
    total = collections.defaultdict(float)
    for r in rows:
        for x, s in r["hits"].items():
            hits[x][r["label"]] += 1
            total[x] += s
    # The change fitted without each fold beside the overall one: a change that holds across
    # them is the data's, one that swings is noise.
    lines = [("symbol", "spam", "ham", "hard_ham", "mean_now", "change", "proposed")
             + tuple(f"without_{i}" for i in range(k))]
    for s in sorted(symbols, key=lambda s: -abs(w[s])):
        n = sum(hits[s].values())
        mean = total[s] / n
        lines.append((s, str(hits[s]["spam"]), str(hits[s]["ham"]), str(hits[s]["hard_ham"]),
                      f"{mean:.2f}", f"{w[s]:+.2f}", f"{mean + w[s]:.2f}")
                     + tuple(f"{pf.get(s, 0.0):+.2f}" for pf in per_fold))
    print("\nproposal (fitted on every fold; without_k: fitted on all but fold k; review before use):")
    widths = [max(len(l[i]) for l in lines) for i in range(len(lines[0]))]
    for l in lines:
        print("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(l)))
    if a.out:
        with open(a.out, "w") as f:
            for l in lines:
                f.write("\t".join(l) + "\n")


if __name__ == "__main__":
    main()
