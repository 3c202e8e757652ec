#!/usr/bin/env python3
"""Posts one zstd body to shrike's /checkv2 from N clients at once (`Compression: zstd`, as
`rspamc -z` sends), samples the daemon's memory meanwhile, then posts a normal message every
50 ms until one is scanned. Prints the replies by status, the peak resident memory (VmHWM) and
the budget, and exits non-zero when a check fails:

  - every request is answered, with 200, 413 or 503 (none lost, no socket error);
  - the daemon's peak RSS stays within its byte budget plus MARGIN_MIB (default 256);
  - a normal message is scanned (200) within RECOVER_MS (default 1000) of the last answer.

    bomb.py PORT PID BOMB_FILE NORMAL_MESSAGE [CLIENTS]
"""
import os
import socket
import sys
import threading
import time
from collections import Counter


def request(port, body, headers=b"", timeout=120):
    """One POST /checkv2 on a fresh connection: (status or an error's name, reply body)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            head = b"POST /checkv2 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            head += b"Content-Length: %d\r\n" % len(body) + headers + b"\r\n"
            s.sendall(head + body)
            data = bytearray()
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as e:
        return type(e).__name__, b""
    line, _, rest = bytes(data).partition(b"\r\n")
    parts = line.split(b" ")
    if len(parts) < 2 or not parts[1].isdigit():
        return "no-status", b""
    return int(parts[1]), rest.partition(b"\r\n\r\n")[2]


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def metric(port, name):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    for line in data.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[-1]))
    return 0


def main():
    port, pid, bomb_file, normal_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    clients = int(sys.argv[5]) if len(sys.argv) > 5 else 300
    margin_mib = int(os.environ.get("MARGIN_MIB", "256"))
    recover_ms = int(os.environ.get("RECOVER_MS", "1000"))
    bomb = open(bomb_file, "rb").read()
    normal = open(normal_file, "rb").read()
    budget = metric(port, "shrike_budget_bytes")
    idle = status_kib(pid, "VmRSS")

    sampled = [idle]
    done = threading.Event()

    def sample():
        while not done.is_set():
            sampled.append(status_kib(pid, "VmRSS"))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = threading.Barrier(clients)
    replies = [None] * clients

    def client(i):
        start.wait()
        replies[i] = request(port, bomb, b"Compression: zstd\r\n")

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answered = time.monotonic()
    # A normal message right after: every 50 ms until it is scanned.
    tries, recovered_ms, normal_status = 0, None, None
    while time.monotonic() - answered < 10:
        tries += 1
        normal_status, body = request(port, normal, timeout=10)
        if normal_status == 200 and b'"action"' in body:
            recovered_ms = (time.monotonic() - answered) * 1000
            break
        time.sleep(0.05)
    done.set()
    sampler.join()
    peak_kib = status_kib(pid, "VmHWM")

    by_status = Counter(r[0] for r in replies)
    budget_503 = sum(1 for r in replies if r[0] == 503 and b"memory budget" in r[1])
    print(f"clients: {clients} at once, each posting {len(bomb)} bytes of zstd "
          f"(inflating to {os.environ.get('INFLATED', '?')} bytes); all answered in "
          f"{answered - t0:.1f} s")
    print("replies: " + ", ".join(f"{k} x{v}" for k, v in sorted(by_status.items(), key=str)))
    print(f"503s: {budget_503} over the memory budget, {by_status[503] - budget_503} busy "
          f"or timed out (shrike_busy_total {metric(port, 'shrike_busy_total')}, "
          f"shrike_scan_timeouts_total {metric(port, 'shrike_scan_timeouts_total')})")
    print(f"budget: {budget / 2**20:.0f} MiB; RSS idle {idle / 1024:.0f} MiB, peak (VmHWM) "
          f"{peak_kib / 1024:.0f} MiB (sampled every 20 ms: {max(sampled) / 1024:.0f} MiB); "
          f"peak - budget = {(peak_kib * 1024 - budget) / 2**20:.0f} MiB")
    if recovered_ms is not None:
        print(f"after: a normal message scanned (200) {recovered_ms:.0f} ms after the last answer "
              f"(try {tries})")
    else:
        print(f"after: no normal message scanned within 10 s (last status {normal_status})")

    fail = []
    lost = sum(v for k, v in by_status.items() if k not in (200, 413, 503))
    if lost:
        fail.append(f"{lost} requests not answered with 200, 413 or 503")
    if peak_kib * 1024 > budget + margin_mib * 2**20:
        fail.append(f"peak RSS {peak_kib // 1024} MiB over the budget + {margin_mib} MiB")
    if recovered_ms is None or recovered_ms > recover_ms:
        fail.append(f"a normal message was not scanned within {recover_ms} ms")
    for f in fail:
        print("FAIL: " + f)
    print("PASS" if not fail else "")
    sys.exit(1 if fail else 0)


if __name__ == "__main__":
    main()
