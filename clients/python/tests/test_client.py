"""Tests of the Python client against a running cluster's API.

They need the API's addresses in PAXLOCK_API_URLS (comma-separated,
http:// or https://), the namespace and secret in PAXLOCK_NAMESPACE and
PAXLOCK_SECRET, and the CA in PAXLOCK_CA for https. `go test ./apiserver
-run TestPythonClient` starts a cluster and runs them; against `make run`:

    PAXLOCK_API_URLS=https://127.0.0.1:7121,https://127.0.0.1:7122 \\
    PAXLOCK_NAMESPACE=default PAXLOCK_SECRET=paxlock PAXLOCK_CA=.run/certs/ca.crt \\
    python3 -m unittest discover -s clients/python/tests -t clients/python
"""

import os
import threading
import time
import unittest
import uuid

import paxlock

URLS = [u for u in os.environ.get("PAXLOCK_API_URLS", "").split(",") if u]
NS = os.environ.get("PAXLOCK_NAMESPACE", "default")
SECRET = os.environ.get("PAXLOCK_SECRET", "")
CA = os.environ.get("PAXLOCK_CA") or None


def key(name):
    return f"py-{name}-{uuid.uuid4().hex[:8]}"


@unittest.skipUnless(URLS, "PAXLOCK_API_URLS not set")
class ClientTest(unittest.TestCase):
    def client(self, i=0, secret=None):
        c = paxlock.Client(URLS[i % len(URLS)], NS, SECRET if secret is None else secret, ca_file=CA, timeout=15)
        self.addCleanup(c.close)
        return c

    def test_mutual_exclusion_and_tokens(self):
        k = key("mutex")
        a, b = self.client(0).mutex(k, ttl=10), self.client(1).mutex(k, ttl=10)
        self.assertTrue(a.acquire(blocking=False))
        self.assertFalse(b.acquire(blocking=False), "a second owner took a held key")
        first = a.token
        a.release()
        self.assertTrue(b.acquire(blocking=False))
        self.assertGreater(b.token, first, "fencing tokens must increase")
        b.release()

    def test_blocking_acquire_woken_by_release(self):
        k = key("wake")
        a, b = self.client(0).mutex(k, ttl=10), self.client(1).mutex(k, ttl=10)
        self.assertTrue(a.acquire())
        released = []

        def release_later():
            time.sleep(0.3)
            released.append(time.monotonic())
            a.release()

        threading.Thread(target=release_later).start()
        self.assertTrue(b.acquire(timeout=20))
        woke = time.monotonic() - released[0]
        print(f"\nwake-up after the release: {woke * 1000:.1f} ms")
        self.assertLess(woke, 5.0)
        b.release()

    def test_expiry_seen_by_holder_before_next_grant(self):
        k = key("expiry")
        a = self.client(0).mutex(k, ttl=1.5, auto_renew=False)
        b = self.client(1).mutex(k, ttl=10)
        self.assertTrue(a.acquire())
        sent = time.monotonic()
        self.assertTrue(b.acquire(timeout=20))
        granted = time.monotonic()
        self.assertTrue(a.lost.is_set(), "the next owner was granted before the holder knew it lost the lock")
        self.assertLessEqual(a.valid_until or sent, granted)
        self.assertFalse(self.client(0).check_token(k, a._token), "an expired hold's token passes the check")
        self.assertTrue(self.client(0).check_token(k, b.token))
        b.release()
        self.assertFalse(self.client(0).check_token(k, b._token), "a released hold's token passes the check")

    def test_auto_renew_keeps_the_hold(self):
        k = key("renew")
        with self.client(0).mutex(k, ttl=1.5) as m:
            time.sleep(3)
            self.assertTrue(m.held and not m.lost.is_set())
            self.assertTrue(self.client(1).check_token(k, m.token))

    def test_rw_and_semaphore(self):
        k = key("rw")
        r1, r2 = self.client(0).rwmutex(k, ttl=10), self.client(1).rwmutex(k, ttl=10)
        w = self.client(0).rwmutex(k, ttl=10)
        with r1.read(), r2.read():
            self.assertEqual(self.client(0).state(k).readers, 2)
            self.assertFalse(w.write().acquire(blocking=False), "a writer got in beside readers")
        self.assertTrue(w.write().acquire(blocking=False))
        w.write().release()

        s = key("sem")
        holds = [self.client(i).semaphore(s, limit=2) for i in range(3)]
        self.assertTrue(holds[0].acquire(blocking=False))
        self.assertTrue(holds[1].acquire(blocking=False))
        self.assertFalse(holds[2].acquire(blocking=False), "a third permit out of two")
        holds[0].release()
        self.assertTrue(holds[2].acquire(blocking=False))
        holds[1].release()
        holds[2].release()

    def test_election_hand_over(self):
        k = key("election")
        a, b = self.client(0).election(k, ttl=10), self.client(1).election(k, ttl=10)
        self.assertTrue(a.campaign("host-a"))
        self.assertEqual(a.leader().value, b"host-a")
        won = []
        t = threading.Thread(target=lambda: won.append(b.campaign("host-b", timeout=20)))
        t.start()
        time.sleep(0.3)
        term = a.token
        a.resign()
        t.join()
        self.assertEqual(won, [True])
        self.assertGreater(b.token, term, "a new leader's term must be higher")
        self.assertEqual(b.leader().value, b"host-b")
        b.resign()

    def test_refusals(self):
        with self.assertRaises(paxlock.AuthError):
            self.client(0, secret="wrong").state(key("auth"))
        k = key("owner")
        c = self.client(0)
        m = c.mutex(k, ttl=10)
        self.assertTrue(m.acquire())
        with self.assertRaises(paxlock.NotOwner):
            c._call("Release", {"key": k, "owner": "someone-else", "token": str(m.token)})
        self.assertTrue(c.check_token(k, m.token), "a refused release freed the key")
        m.release()


if __name__ == "__main__":
    unittest.main()


class DelayProxy:
    """A TCP proxy to one API address that holds every byte the node
    sends back for `delay` seconds: answers that arrive late, as over a
    slow network. TLS passes through it untouched."""

    def __init__(self, url, delay):
        import socket
        import urllib.parse
        u = urllib.parse.urlsplit(url)
        self.target = (u.hostname, u.port)
        self.delay = delay
        self.ln = socket.create_server(("127.0.0.1", 0))
        self.url = f"{u.scheme}://127.0.0.1:{self.ln.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        while True:
            try:
                c, _ = self.ln.accept()
            except OSError:
                return
            s = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(c, s, 0), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, self.delay), daemon=True).start()

    @staticmethod
    def _pipe(src, dst, delay):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if delay:
                    time.sleep(delay)
                dst.sendall(b)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self):
        self.ln.close()


class AnswerCountingHold(paxlock.Hold):
    """A broken client: it counts a hold's validity from the answer's
    arrival instead of the request's send."""

    def acquire(self, blocking=True, timeout=None):
        r = self._c._call("Acquire", self._acquire_request(-1 if blocking else 0), timeout=None)
        self._start(int(r.get("token", 0)), time.monotonic() + int(r.get("validityMs", 0)) / 1000)
        return True


@unittest.skipUnless(URLS, "PAXLOCK_API_URLS not set")
class ValidityRuleTest(unittest.TestCase):
    """The validity rule (I9) is what keeps two holders from overlapping
    in their own beliefs: a holder whose answers arrive late must still
    end its hold before the master can grant the key again. This checker
    catches a client that counts validity from the answer's arrival."""

    def overlap(self, count_from_answer):
        """Takes a key through a proxy that delays answers by 3 s with a
        2 s TTL and no renewal (the hold has expired on the master before
        its answer arrives), has a second owner wait for it directly,
        and reports whether the first still believed it held the key when
        the second was granted it."""
        proxy = DelayProxy(URLS[0], 3.0)
        self.addCleanup(proxy.close)
        slow = paxlock.Client(proxy.url, NS, SECRET, ca_file=CA, timeout=15)
        fast = paxlock.Client(URLS[-1], NS, SECRET, ca_file=CA, timeout=15)
        self.addCleanup(slow.close)
        self.addCleanup(fast.close)
        k = key("validity")
        cls = AnswerCountingHold if count_from_answer else paxlock.Mutex
        a = cls(slow, k, ttl=2.0, auto_renew=False, watch_loss=False)
        self.assertTrue(a.acquire())
        b = fast.mutex(k, ttl=10)
        self.assertTrue(b.acquire(timeout=20))
        granted = time.monotonic()
        believed = a.valid_until > granted and not a.lost.is_set()
        b.release()
        a.release()
        return believed

    def test_validity_counted_from_the_send(self):
        self.assertFalse(self.overlap(count_from_answer=False),
                         "the holder still believed it held the key when the next owner was granted it")

    def test_checker_catches_validity_counted_from_the_answer(self):
        self.assertTrue(self.overlap(count_from_answer=True),
                        "a client counting validity from the answer's arrival went unnoticed")
