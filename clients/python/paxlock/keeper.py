"""One thread per Client that keeps every hold: it sets a hold's `lost`
the moment its validity passes and starts its renewals, so taking a hold
starts no thread of its own (a renewal, every ttl/3, runs on a thread of
its own so that a slow one delays no other hold's expiry)."""

import heapq
import itertools
import threading
import time


class Keeper:
    """Runs each scheduled hold's _tick at its time."""

    def __init__(self):
        self._cv = threading.Condition()
        self._heap = []  # (when, seq, hold, stop): stop names the hold's term
        self._seq = itertools.count()
        self._thread = None

    def schedule(self, hold, stop, when):
        """Calls hold._tick(stop) at time.monotonic() when."""
        with self._cv:
            heapq.heappush(self._heap, (when, next(self._seq), hold, stop))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="paxlock-keeper", daemon=True)
                self._thread.start()
            if self._heap[0][2] is hold:
                self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while True:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, hold, stop = heapq.heappop(self._heap)
                        break
                    self._cv.wait(self._heap[0][0] - now if self._heap else None)
            if not stop.is_set():
                hold._tick(stop)
