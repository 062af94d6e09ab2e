"""Lock+unlock pairs per second from one Python process.

Each of --threads threads takes and frees a lock of its own key in a
loop for --seconds, through one paxlock.Client (its kept-alive HTTP
connections); the figure is the pairs completed divided by the time.
Against `make run`, from the repository root:

    python3 clients/python/bench/pairs.py --threads 1,4,16 \\
        --url https://127.0.0.1:7121,https://127.0.0.1:7122,https://127.0.0.1:7123 \\
        --ca .run/certs/ca.crt

--watch-loss and --auto-renew turn on the handle's loss watch and renewal
thread (both on by default in Mutex; a short hold needs neither);
--profile writes a cProfile of the single-thread run.
"""

import argparse
import cProfile
import os
import pstats
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import paxlock  # noqa: E402


def run(client, threads, seconds, opts):
    """Pairs per second with threads threads for seconds seconds, and
    this process's CPU time per pair in microseconds."""
    counts = [0] * threads
    stop = threading.Event()
    errors = []

    def worker(i):
        key = f"pybench-{uuid.uuid4().hex[:8]}-{i}"
        n = 0
        try:
            while not stop.is_set():
                m = client.mutex(key, ttl=10, **opts)
                m.acquire()
                m.release()
                n += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        counts[i] = n

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    cpu = time.process_time()
    start = time.monotonic()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - start
    cpu = time.process_time() - cpu
    if errors:
        raise errors[0]
    return sum(counts) / elapsed, cpu / max(1, sum(counts)) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="https://127.0.0.1:7121,https://127.0.0.1:7122,https://127.0.0.1:7123")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--secret", default="paxlock")
    ap.add_argument("--ca", default=".run/certs/ca.crt")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--watch-loss", action="store_true")
    ap.add_argument("--auto-renew", action="store_true")
    ap.add_argument("--no-route", action="store_true", help="call the first URL only (no routing hints)")
    ap.add_argument("--profile", default="", help="write a cProfile of a one-thread run here")
    a = ap.parse_args()
    urls = [u for u in a.url.split(",") if u]
    if a.no_route:
        urls = urls[:1]
    opts = {"watch_loss": a.watch_loss, "auto_renew": a.auto_renew}
    with paxlock.Client(urls, a.namespace, a.secret, ca_file=a.ca or None) as c:
        run(c, 1, 0.5, opts)  # connections and routing hints
        if a.profile:
            prof = cProfile.Profile()
            prof.enable()
            rate, _ = run(c, 1, a.seconds, opts)
            prof.disable()
            prof.dump_stats(a.profile)
            print(f"profiled 1 thread: {rate:,.0f} pairs/s")
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        for n in [int(x) for x in a.threads.split(",")]:
            rate, cpu = run(c, n, a.seconds, opts)
            print(f"threads {n}: {rate:,.0f} lock+unlock pairs/s, {cpu:,.0f} µs CPU/pair "
                  f"(watch_loss={a.watch_loss}, auto_renew={a.auto_renew}, urls={len(urls)})")


if __name__ == "__main__":
    main()
