"""Lock handles: Mutex, RWMutex, Semaphore and Election.

A handle's hold is valid, on this process's monotonic clock, until the
send time of the Acquire or Renew that last succeeded plus the validity
the node answered (the TTL less its clock-drift margin): never counted
from the answer's arrival (docs/api.md, "Validity"). `lost` is set the
moment the hold is lost: its validity passed without a renewal, the
master ended it (a watch of the hold's own token reports it at once), or
a renewal was refused. A hold with max_hold is valid no later than its
Acquire's send time plus max(max_hold, the TTL applied) less the same
margin, renewals or not: the master ends it then (docs/api.md, "Maximum
hold time").
"""

import base64
import http.client
import threading
import time
import uuid

from .errors import (LockNotFound, LockOccupied, LockTimeout, NotOwner,
                     Overloaded, PaxlockError, Revoked, Unavailable)
from .transport import close_stream

KIND_EXCLUSIVE = "LOCK_KIND_EXCLUSIVE"
KIND_READ = "LOCK_KIND_READ"
KIND_WRITE = "LOCK_KIND_WRITE"
KIND_SEMAPHORE = "LOCK_KIND_SEMAPHORE"

_ENDED = ("WATCH_EVENT_KIND_RELEASED", "WATCH_EVENT_KIND_EXPIRED", "WATCH_EVENT_KIND_REVOKED")

MAX_HOLD_LIMIT = 24 * 3600.0
"""The longest max_hold a hold may ask for, in seconds (24 hours)."""


def _ms(seconds):
    return max(0, int(round(seconds * 1000)))


def encode_value(v):
    """A holder value for JSON: bytes or str (UTF-8), base64."""
    if v is None:
        return None
    if isinstance(v, str):
        v = v.encode()
    return base64.b64encode(bytes(v)).decode()


class Hold:
    """One owner's hold of one key (the base of every handle).

    acquire takes it (blocking, optionally within timeout seconds, or a
    try-lock), release frees it, renew extends it; with auto_renew (the
    default) the client's keeper renews it every ttl/3 until release. Use it
    as a context manager to hold it for a block.

    max_hold (seconds, 0: none) bounds how long each grant may be held,
    renewals or not: the master ends the hold that long after its grant
    and `lost` is set, with lost_reason naming the maximum hold time. It
    must be at most MAX_HOLD_LIMIT and, when set, at least ttl
    (ValueError).
    """

    def __init__(self, client, key, *, owner=None, kind=KIND_EXCLUSIVE, ttl=30.0,
                 auto_renew=True, value=None, weight=0, lock_delay=0.0,
                 permits=0, limit=0, watch_loss=True, max_hold=0.0):
        if not key:
            raise ValueError("paxlock: empty key")
        if ttl <= 0:
            raise ValueError("paxlock: ttl must be positive")
        if max_hold < 0 or max_hold > MAX_HOLD_LIMIT:
            raise ValueError(f"paxlock: max_hold must be in [0, {MAX_HOLD_LIMIT:.0f}] seconds")
        if max_hold and max_hold < ttl:
            raise ValueError("paxlock: max_hold below the ttl")
        self._c = client
        self.key = key
        self.owner = owner or uuid.uuid4().hex
        self.kind = kind
        self.ttl = float(ttl)
        self.auto_renew = auto_renew
        self.value = value
        self.weight = weight
        self.lock_delay = lock_delay
        self.permits, self.limit = permits, limit
        self.watch_loss = watch_loss
        self.max_hold = float(max_hold)
        self.lost_reason = ""
        self._mu = threading.Lock()
        self._token = 0
        self._valid_until = 0.0
        self._hold_limit = 0.0  # time.monotonic() past which max_hold ended the grant (0.0: none)
        self._stop = threading.Event()
        self._stop.set()
        self.lost = threading.Event()
        self._watch_conn = None
        self._threads = []
        self._next_renew = 0.0
        self._renewer = None  # the renewal thread under way

    # -- state ------------------------------------------------------------

    @property
    def token(self):
        """The hold's fencing token (0 when not held)."""
        with self._mu:
            return self._token if not self._stop.is_set() else 0

    @property
    def valid_until(self):
        """time.monotonic() until which the hold is valid (0.0 when not held)."""
        with self._mu:
            return self._valid_until if not self._stop.is_set() else 0.0

    @property
    def held(self):
        """Whether the hold is held and still valid now."""
        return not self.lost.is_set() and time.monotonic() < self.valid_until

    # -- acquire, renew, release -----------------------------------------

    def _acquire_request(self, wait_ms):
        req = {"key": self.key, "owner": self.owner, "ttlMs": _ms(self.ttl), "waitMs": wait_ms, "kind": self.kind}
        if self.value is not None:
            req["value"] = encode_value(self.value)
        if self.weight:
            req["weight"] = self.weight
        if self.lock_delay:
            req["lockDelayMs"] = _ms(self.lock_delay)
        if self.permits:
            req["permits"] = self.permits
        if self.limit:
            req["limit"] = self.limit
        if self.max_hold:
            req["maxHoldMs"] = _ms(self.max_hold)
        return req

    def acquire(self, blocking=True, timeout=None):
        """Takes the hold. blocking=False is a try-lock; with timeout the
        wait in the master's queue ends after that many seconds. Returns
        True when held, False when the key stayed taken (the try-lock or
        the wait ran out); raises PaxlockError for anything else."""
        if not self._stop.is_set():
            raise RuntimeError(f"paxlock: {self.key!r} is already held by this handle")
        if not blocking:
            wait_ms = 0
        elif timeout is None:
            wait_ms = -1
        else:
            wait_ms = max(1, _ms(timeout))
        http_timeout = None if wait_ms < 0 else self._c.timeout + wait_ms / 1000
        sent = time.monotonic()
        try:
            r = self._c._call("Acquire", self._acquire_request(wait_ms), timeout=http_timeout)
        except (LockOccupied, LockTimeout):
            return False
        validity_ms, ttl_ms = int(r.get("validityMs", 0)), int(r.get("ttlMs", 0))
        limit = 0.0
        if self.max_hold:
            # The master counts the bound (raised to the TTL it applied)
            # from its grant, after the send; the drift margin is the
            # validity's share of the TTL.
            bound = max(self.max_hold, ttl_ms / 1000)
            limit = sent + bound * (validity_ms / ttl_ms if ttl_ms else 1.0)
        self._start(int(r.get("token", 0)), sent + validity_ms / 1000, limit)
        return True

    def _start(self, token, valid_until, hold_limit=0.0):
        with self._mu:
            self._token, self._hold_limit = token, hold_limit
            self._valid_until = min(valid_until, hold_limit) if hold_limit else valid_until
            self.lost_reason = ""
            self.lost = threading.Event()
            self._stop = threading.Event()
            self._next_renew = time.monotonic() + self.ttl / 3
            self._renewer = None
        self._threads = []
        self._schedule(self._stop)
        if self.watch_loss:
            w = threading.Thread(target=self._watch, args=(token,), name=f"paxlock-watch-{self.key}", daemon=True)
            self._threads.append(w)
            w.start()

    def renew(self, ttl=None):
        """Extends the hold by ttl seconds (the handle's TTL by default),
        counted from this call's send time. Raises LockLost's causes
        (NotOwner, LockNotFound, Revoked) when the hold is gone."""
        if ttl is not None:
            self.ttl = float(ttl)
        return self._renew(set_value=False)

    def set_value(self, value):
        """Replaces the hold's value (and renews it)."""
        self.value = value
        return self._renew(set_value=True)

    def _renew(self, set_value):
        with self._mu:
            token, until = self._token, self._valid_until
        if self._stop.is_set() or self.lost.is_set():
            raise LockNotFound("not_found", "LOCK_DELETED", f"{self.key!r} is not held")
        req = {"key": self.key, "owner": self.owner, "token": str(token), "ttlMs": _ms(self.ttl)}
        if set_value:
            req["setValue"] = True
            if self.value is not None:
                req["value"] = encode_value(self.value)
        sent = time.monotonic()
        left = max(0.05, until - sent)
        try:
            r = self._c._call("Renew", req, timeout=min(self._c.timeout, left))
        except (NotOwner, LockNotFound, Revoked) as e:
            self._lose(str(e))
            raise
        with self._mu:
            if self._token == token and not self._stop.is_set():
                self._valid_until = sent + int(r.get("validityMs", 0)) / 1000
                if self._hold_limit:
                    self._valid_until = min(self._valid_until, self._hold_limit)
        return r

    def release(self):
        """Frees the hold (the next waiter is granted at once). A hold
        already lost is not an error: Release acknowledges a revocation."""
        self._release()

    def _release(self):
        with self._mu:
            if self._stop.is_set():
                return
            self._stop.set()
            token, conn, renewer = self._token, self._watch_conn, self._renewer
        if conn is not None:
            close_stream(conn)
        try:
            self._c._call("Release", {"key": self.key, "owner": self.owner, "token": str(token)})
        except (NotOwner, LockNotFound):
            pass
        finally:
            for t in self._threads + ([renewer] if renewer is not None else []):
                if t is not threading.current_thread() and t.ident is not None:
                    t.join(timeout=5)

    def __enter__(self):
        if not self.acquire():
            raise LockTimeout("deadline_exceeded", "TIMEOUT", f"{self.key!r} not acquired")
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    # -- keeping it ---------------------------------------------------------

    def _lose(self, why):
        with self._mu:
            self.lost.set()
            self.lost_reason = why

    def _schedule(self, stop):
        """Has the client's keeper tick this term of the hold at its next
        renewal or the end of its validity, whichever comes first."""
        with self._mu:
            until = self._valid_until
            when = min(until, self._next_renew) if self.auto_renew and self._renewer is None else until
        self._c._keeper.schedule(self, stop, when)

    def _tick(self, stop):
        """On the keeper's thread: sets lost when the validity passed
        without a renewal, starts a renewal when one is due."""
        if stop is not self._stop or stop.is_set() or self.lost.is_set():
            return
        now = time.monotonic()
        with self._mu:
            until, renewing = self._valid_until, self._renewer is not None
            due = self.auto_renew and not renewing and now >= self._next_renew
            if due:
                self._renewer = threading.Thread(target=self._renew_bg, args=(stop,),
                                                 name=f"paxlock-renew-{self.key}", daemon=True)
        if until == 0.0 or now >= until:
            with self._mu:
                limited = self._hold_limit and until >= self._hold_limit
            self._lose("the maximum hold time passed" if limited else "validity passed without a renewal")
            return
        if due:
            self._renewer.start()
        elif not renewing:
            self._schedule(stop)
        else:
            # the renewal under way reschedules when it ends; the expiry
            # is watched meanwhile
            self._c._keeper.schedule(self, stop, until)

    def _renew_bg(self, stop):
        """A renewal of the keeper's; the next one is due ttl/3 after a
        success, sooner after a failure that may pass."""
        nxt = None
        try:
            self._renew(set_value=False)
            nxt = time.monotonic() + self.ttl / 3
        except (NotOwner, LockNotFound, Revoked):
            pass
        except (Unavailable, Overloaded, PaxlockError, OSError, TimeoutError):
            nxt = time.monotonic() + min(1.0, self.ttl / 10)
        with self._mu:
            self._renewer = None
            if nxt is not None:
                self._next_renew = nxt
        if nxt is not None and not stop.is_set():
            self._schedule(stop)

    def _watch(self, token):
        """Watches the hold's own token: the master's end of the hold
        (expiry, revocation, release by anyone) sets lost at once."""
        stop = self._stop

        def keep_conn(conn):
            with self._mu:
                self._watch_conn = conn
            if stop.is_set():
                close_stream(conn)

        while not stop.is_set() and not self.lost.is_set():
            try:
                for ev in self._c._stream("Watch", {"key": self.key, "token": str(token)}, on_conn=keep_conn):
                    kind, t = ev.get("kind"), int(ev.get("token", 0))
                    if stop.is_set():
                        return
                    if (kind in _ENDED and t == token) or (kind == "WATCH_EVENT_KIND_ACQUIRED" and t > token):
                        why = " (its maximum hold time)" if ev.get("maxHold") else ""
                        self._lose(f"the master reports {kind} of token {t}{why}")
                        return
            except (PaxlockError, OSError, ValueError, http.client.HTTPException):
                # The stream broke (or release closed it): watch again
                # while the hold lasts.
                if stop.wait(1.0):
                    return


class Mutex(Hold):
    """An exclusive lock: one owner at a time."""


class RWMutex:
    """A read-write lock: many readers or one writer. read() and write()
    are the two holds, sharing this handle's owner."""

    def __init__(self, client, key, **opts):
        opts.setdefault("owner", uuid.uuid4().hex)
        self._reader = Hold(client, key, kind=KIND_READ, **opts)
        self._writer = Hold(client, key, kind=KIND_WRITE, **opts)

    def read(self):
        """The read hold (a context manager)."""
        return self._reader

    def write(self):
        """The write hold (a context manager)."""
        return self._writer


class Semaphore(Hold):
    """permits out of a semaphore of limit permits. held_permits is how
    many the handle holds now (0 when not held); release(permits=n) gives
    back n of them and keeps the grant, its token and its renewals."""

    def __init__(self, client, key, limit, permits=1, **opts):
        if limit < 1 or permits < 1 or permits > limit:
            raise ValueError("paxlock: want 1 <= permits <= limit")
        super().__init__(client, key, kind=KIND_SEMAPHORE, permits=permits, limit=limit, **opts)
        self._want = permits
        self._held_permits = 0

    @property
    def held_permits(self):
        """The permits the handle holds (0 when not held)."""
        with self._mu:
            return self._held_permits if not self._stop.is_set() else 0

    def acquire(self, blocking=True, timeout=None):
        """Takes the handle's permits (see Hold.acquire)."""
        self.permits = self._want
        ok = super().acquire(blocking=blocking, timeout=timeout)
        if ok:
            with self._mu:
                self._held_permits = self._want
        return ok

    def release(self, permits=None):
        """Gives back permits of the grant (all of them by default, as
        Hold.release). Fewer than held is a partial release: the grant
        keeps the rest, its token, TTL and renewals, and waiters the freed
        permits let in are granted at once; held_permits drops. permits
        below 1 or above held_permits raises ValueError and sends nothing;
        the node refusing it raises InvalidArgument and changes nothing. A
        grant the master no longer has raises LockNotFound (or NotOwner,
        Revoked) and sets lost."""
        with self._mu:
            held, token, stopped = self._held_permits, self._token, self._stop.is_set()
        if permits is None or (not stopped and permits == held):
            return self._release()
        if stopped:
            raise LockNotFound("not_found", "LOCK_DELETED", f"{self.key!r} is not held")
        if permits < 1 or permits > held:
            raise ValueError(f"paxlock: release of {permits} permits of the {held} held")
        req = {"key": self.key, "owner": self.owner, "token": str(token), "keepPermits": held - permits}
        try:
            r = self._c._call("Release", req)
        except (NotOwner, LockNotFound, Revoked) as e:
            self._lose(str(e))
            raise
        with self._mu:
            if self._token == token and not self._stop.is_set():
                self._held_permits = int(r.get("permits", 0))
                # A re-sent acquire asks for what the grant has now.
                self.permits = self._held_permits


class Election:
    """Leader election on one key: campaign blocks until elected, the
    leader's value is its hold's value, proclaim changes it (the term, its
    token, stays), resign steps down; leader() and observe() follow it."""

    def __init__(self, client, key, **opts):
        self._c = client
        self.key = key
        self._opts = opts
        self._hold = None

    def campaign(self, value, timeout=None):
        """Blocks until this candidate leads (True), or timeout runs out
        (False). The returned leadership is lost when `lost` is set."""
        h = Hold(self._c, self.key, value=value, **self._opts)
        if not h.acquire(timeout=timeout):
            return False
        self._hold = h
        return True

    @property
    def lost(self):
        """Set when leadership is lost (None before a campaign won)."""
        return self._hold.lost if self._hold else None

    @property
    def token(self):
        """The leader's term (its fencing token), 0 when not leading."""
        return self._hold.token if self._hold else 0

    def proclaim(self, value):
        """Publishes a new value, same term."""
        if self._hold is None:
            raise RuntimeError("paxlock: proclaim without leading")
        self._hold.set_value(value)

    def resign(self):
        """Steps down: the next candidate is elected at once."""
        if self._hold is not None:
            self._hold.release()
            self._hold = None

    def leader(self):
        """The current leader's LockState (held False when none)."""
        return self._c.state(self.key)

    def observe(self, max_wait=None):
        """Yields the leader's value (bytes) at every change."""
        for ev in self._c.watch(self.key, 0, continuous=True, max_wait=max_wait):
            if ev.kind == "WATCH_EVENT_KIND_ACQUIRED":
                yield ev.value
