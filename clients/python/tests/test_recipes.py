"""Tests of the recipes' forms in the Python client (docs/api.md): the
maximum hold time, the prefix watch and a semaphore's partial release,
against a running cluster's API (see test_client.py for the
environment)."""

import threading
import time
import unittest

import paxlock

from .test_client import CA, NS, SECRET, URLS, key


def wait_for(cond, timeout, what):
    """Polls cond until it is true; fails the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.05)


@unittest.skipUnless(URLS, "PAXLOCK_API_URLS not set")
class RecipesTest(unittest.TestCase):
    def client(self, i=0):
        c = paxlock.Client(URLS[i % len(URLS)], NS, SECRET, ca_file=CA, timeout=15)
        self.addCleanup(c.close)
        return c

    def test_max_hold_ends_a_renewed_hold(self):
        # A 3 s TTL renewed every second outlives a loaded machine's
        # pauses; the 4 s bound ends it anyway.
        k = key("maxhold")
        m = self.client(0).mutex(k, ttl=3, max_hold=4)
        self.assertTrue(m.acquire())
        token = m.token
        events = list(self.client(1).watch(k, token=token, max_wait=30))
        self.assertTrue(events, "no event of the hold's end within 30 s")
        ev = events[0]
        self.assertEqual((ev.kind, ev.token, ev.max_hold), ("WATCH_EVENT_KIND_REVOKED", token, True), ev)
        self.assertTrue(m.lost.wait(10), "lost not set after the master ended the hold")
        self.assertIn("maximum hold time", m.lost_reason)
        self.assertFalse(self.client(1).check_token(k, token), "the ended hold's token passes the check")
        m.release()

    def test_max_hold_bounds(self):
        c = self.client(0)
        with self.assertRaises(ValueError):
            c.mutex(key("mh"), ttl=10, max_hold=5)
        with self.assertRaises(ValueError):
            c.mutex(key("mh"), ttl=10, max_hold=paxlock.MAX_HOLD_LIMIT + 1)
        k = key("mh")
        with self.assertRaises(paxlock.InvalidArgument):
            c._call("Acquire", {"key": k, "owner": "o", "ttlMs": 10000, "maxHoldMs": 9999})
        with self.assertRaises(paxlock.InvalidArgument):
            c._call("Acquire", {"key": k, "owner": "o", "ttlMs": 10000, "maxHoldMs": 86400001})
        self.assertFalse(c.state(k).held, "a refused acquire took the key")
        with c.semaphore(key("mh-sem"), limit=2, ttl=10, max_hold=paxlock.MAX_HOLD_LIMIT) as s:
            self.assertEqual(s.held_permits, 1)

    def test_semaphore_partial_release(self):
        k = key("partial")
        a = self.client(0).semaphore(k, limit=3, permits=3, ttl=20)
        self.assertTrue(a.acquire(blocking=False))
        token = a.token
        b = self.client(1).semaphore(k, limit=3, permits=2, ttl=20)
        got = []
        t = threading.Thread(target=lambda: got.append(b.acquire(timeout=20)))
        t.start()
        wait_for(lambda: self.client(0).state(k).queue_len == 1, 20, "the waiter for 2 permits queued")
        a.release(permits=2)
        t.join(30)
        self.assertEqual(got, [True], "the waiter for the 2 permits given back")
        self.assertEqual((a.held_permits, a.token), (1, token), "the grant keeps 1 permit and its token")
        self.assertTrue(self.client(1).check_token(k, token))
        for n in (0, 2):
            with self.assertRaises(ValueError):
                a.release(permits=n)
        with self.assertRaises(paxlock.InvalidArgument):
            self.client(0)._call("Release", {"key": k, "owner": a.owner, "token": str(token), "keepPermits": 2})
        st = self.client(0).state(k)
        self.assertEqual(st.in_use, 3, "a refused partial release changed the permits")
        a.release()
        self.assertEqual(self.client(0).state(k).in_use, 2)
        b.release()

    def test_watch_prefix(self):
        prefix = key("wp") + "/"
        c = self.client(0)
        events, done = [], threading.Event()

        def follow():
            try:
                for ev in self.client(2).watch_prefix(prefix, max_wait=60):
                    events.append(ev)
                    if done.is_set():
                        return
            finally:
                done.set()

        threading.Thread(target=follow, daemon=True).start()
        # The stream reports changes from its registration on: a probe
        # key is taken until the stream shows it.
        probe = c.mutex(prefix + "probe", ttl=10, watch_loss=False)

        def probed():
            if probe.acquire(blocking=False):
                probe.release()
            return any(ev.key == probe.key for ev in list(events))
        wait_for(probed, 30, "the prefix watch reporting its probe")
        outside = c.mutex("x" + prefix + "out", ttl=10, watch_loss=False)
        self.assertTrue(outside.acquire(blocking=False))
        # A RESYNC (a master change on a loaded machine) may have dropped
        # an event: the changes are made again on fresh keys, up to three
        # times.
        for attempt in range(3):
            resyncs = sum(ev.kind == "WATCH_EVENT_KIND_RESYNC" for ev in list(events))
            keys = [f"{prefix}k{attempt}-{i}" for i in range(6)]
            for k in keys:
                with c.mutex(k, ttl=10, value="v", watch_loss=False):
                    pass
            want = {(k, kind) for k in keys for kind in ("WATCH_EVENT_KIND_ACQUIRED", "WATCH_EVENT_KIND_RELEASED")}
            resynced = []

            def seen():
                evs = list(events)
                if sum(ev.kind == "WATCH_EVENT_KIND_RESYNC" for ev in evs) > resyncs:
                    resynced.append(True)
                    return True
                return want <= {(ev.key, ev.kind) for ev in evs}
            wait_for(seen, 30, "every change under the prefix reported")
            if not resynced:
                break
        else:
            self.fail("three attempts resynced")
        done.set()
        outside.release()
        self.assertFalse([ev for ev in events if not ev.key.startswith(prefix)], "an event of a key outside the prefix")
        acquired = [ev for ev in events if ev.key in keys and ev.kind == "WATCH_EVENT_KIND_ACQUIRED"]
        self.assertEqual(len(acquired), len(keys), acquired)
        self.assertTrue(all(ev.value == b"v" and ev.holder for ev in acquired), acquired)
        with self.assertRaises(paxlock.InvalidArgument):
            next(c.watch_prefix("p" * 1025))


if __name__ == "__main__":
    unittest.main()
