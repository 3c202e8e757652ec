#!/usr/bin/env python3
"""POSTs every message of a corpus directory to /checkv2 PASSES times over THREADS keep-alive
connections and prints the daemon's RSS (from /proc/PID/status) after each pass, with the
pass's rate: memory must stay flat from pass to pass.

    passes.py PORT PID CORPUS_DIR [PASSES] [THREADS]
"""
import http.client
import os
import sys
import threading
import time

port, pid, root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
passes = int(sys.argv[4]) if len(sys.argv) > 4 else 10
threads = int(sys.argv[5]) if len(sys.argv) > 5 else 4

files = sorted(
    os.path.join(d, f)
    for d, _, fs in os.walk(root)
    for f in fs
    if os.path.basename(d) in ("ham", "hard_ham", "spam")
)
bodies = [open(f, "rb").read() for f in files]


def rss_kib():
    with open(f"/proc/{pid}/status") as s:
        for line in s:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def worker(part, errors):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for body in part:
        conn.request("POST", "/checkv2", body=body)
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            errors.append(r.status)


print(f"{len(bodies)} messages per pass, {threads} connections")
def metric(name):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


print("pass  msg/s   RSS MiB  store keys  store MiB")
for p in range(1, passes + 1):
    errors = []
    start = time.time()
    ts = [threading.Thread(target=worker, args=(bodies[i::threads], errors)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.time() - start
    keys, store = metric("shrike_store_keys"), metric("shrike_store_bytes")
    print(
        f"{p:4d}  {len(bodies) / took:6.0f}  {rss_kib() / 1024:7.1f}  {keys:10.0f}  {store / 2**20:9.1f}"
        + (f"  errors {len(errors)}" if errors else ""),
        flush=True,
    )
