"""paxlock: a client of the paxlock lock service over its HTTP/JSON API.

Standard library only. Connect to any node's API address (`api_addr`;
`make run` serves https://127.0.0.1:7121-7123) with the namespace and its
secret:

    import paxlock

    c = paxlock.Client("https://127.0.0.1:7121", "default", "paxlock",
                       ca_file=".run/certs/ca.crt")
    with c.mutex("order:42", ttl=30) as m:      # blocks in the master's queue
        store.write(data, fence=m.token)       # the storage checks the token
        if m.lost.is_set():                    # expired, revoked, renewals failed
            ...

See README.md for read-write locks, semaphores, elections and the
storage-side token check.
"""

import base64
import dataclasses

from .errors import (AuthError, InvalidArgument, LockLost, LockNotFound,
                     LockOccupied, LockTimeout, NotOwner, Overloaded,
                     PaxlockError, Revoked, Unavailable)
from .locks import (KIND_EXCLUSIVE, KIND_READ, KIND_SEMAPHORE, KIND_WRITE, MAX_HOLD_LIMIT,
                    Election, Hold, Mutex, RWMutex, Semaphore)
from .keeper import Keeper
from .routing import Router as _Router, key_hash
from .transport import ConnectFailed, Transport

__all__ = [
    "Client", "Mutex", "RWMutex", "Semaphore", "Election", "Hold", "LockState", "WatchEvent",
    "PaxlockError", "AuthError", "LockOccupied", "LockTimeout", "NotOwner", "LockNotFound",
    "Revoked", "InvalidArgument", "Overloaded", "Unavailable", "LockLost",
    "KIND_EXCLUSIVE", "KIND_READ", "KIND_WRITE", "KIND_SEMAPHORE", "MAX_HOLD_LIMIT", "key_hash",
]


@dataclasses.dataclass
class LockState:
    """A key's state as its master sees it."""
    held: bool = False
    kind: str = ""
    token: int = 0
    holder: str = ""
    value: bytes = b""
    ttl_left_ms: int = 0
    queue_len: int = 0
    readers: int = 0
    permits: int = 0
    in_use: int = 0
    lock_delay_left_ms: int = 0
    is_owner: bool = False

    @classmethod
    def from_json(cls, o):
        o = o or {}
        return cls(held=o.get("held", False), kind=o.get("kind", ""), token=int(o.get("token", 0)),
                   holder=o.get("holder", ""), value=base64.b64decode(o.get("value", "")),
                   ttl_left_ms=o.get("ttlLeftMs", 0), queue_len=o.get("queueLen", 0),
                   readers=o.get("readers", 0), permits=o.get("permits", 0), in_use=o.get("inUse", 0),
                   lock_delay_left_ms=o.get("lockDelayLeftMs", 0), is_owner=o.get("isOwner", False))


@dataclasses.dataclass
class WatchEvent:
    """A change of a watched key. max_hold is set on a REVOKED hold that
    reached its maximum hold time."""
    key: str
    kind: str
    token: int
    holder: str
    value: bytes
    max_hold: bool = False

    @classmethod
    def from_json(cls, ev, key=""):
        return cls(key=ev.get("key", key), kind=ev.get("kind", ""), token=int(ev.get("token", 0)),
                   holder=ev.get("holder", ""), value=base64.b64decode(ev.get("value", "")),
                   max_hold=bool(ev.get("maxHold", False)))


class Client:
    """A client of one namespace through the nodes' API. url is one node's
    API address, or several (a list, or comma-separated): every call is
    served by whichever node it reaches, which forwards it to the key's
    master, and with several the client sends a key's calls straight to
    the node the answers' routing hints name as the master of the key's
    group (docs/api.md, "Routing"), saving that hop; a stale hint costs
    one forward, never a wrong answer. Safe for use from many threads;
    timeout (seconds) bounds a call that does not wait in a queue."""

    def __init__(self, url, namespace, secret, *, ca_file=None, timeout=30.0):
        urls = [u.strip() for u in url.split(",")] if isinstance(url, str) else list(url)
        urls = [u for u in urls if u]
        if not urls:
            raise ValueError("paxlock: no url")
        self.timeout = timeout
        self._ts = [Transport(u, namespace, secret, ca_file=ca_file, timeout=timeout) for u in urls]
        self._t = self._ts[0]
        self._route = _Router(namespace, self._ts) if len(self._ts) > 1 else None
        self._keeper = Keeper()

    def close(self):
        """Closes the client's connections; held handles keep renewing
        through new ones until released."""
        for t in self._ts:
            t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _transport(self, key):
        return self._route.pick(key) if self._route is not None and key else self._t

    def _call(self, method, req, timeout=None):
        key = req.get("key") or (req.get("keys") or [""])[0]
        timeout = self.timeout if timeout is None else timeout
        t = self._transport(key)
        try:
            return t.call(method, req, timeout=timeout)
        except ConnectFailed:
            # The node is unreachable and the call was never sent: the
            # hints naming it are dropped and another node forwards it.
            if self._route is None:
                raise
            self._route.down(t)
            other = self._route.pick(key)
            if other is t:
                raise
            return other.call(method, req, timeout=timeout)

    def _stream(self, method, req, timeout=None, on_conn=None):
        return self._transport(req.get("key")).stream(method, req, timeout=timeout, on_conn=on_conn)

    def mutex(self, key, **opts):
        """An exclusive lock handle (options: owner, ttl, auto_renew, value,
        weight, lock_delay, watch_loss, max_hold)."""
        return Mutex(self, key, **opts)

    def rwmutex(self, key, **opts):
        """A read-write lock handle: .read() and .write() holds."""
        return RWMutex(self, key, **opts)

    def semaphore(self, key, limit, permits=1, **opts):
        """A handle on permits of a semaphore of limit permits."""
        return Semaphore(self, key, limit, permits, **opts)

    def election(self, key, **opts):
        """A candidate in the election on key."""
        return Election(self, key, **opts)

    def state(self, key, owner=None):
        """The key's LockState, read from its master."""
        req = {"key": key}
        if owner:
            req["owner"] = owner
        return LockState.from_json(self._call("State", req).get("state"))

    def check_token(self, key, token):
        """Whether token is a current hold's on key: the storage-side check
        of a write fenced with it."""
        return bool(self._call("CheckToken", {"key": key, "token": str(token)}).get("current", False))

    def watch(self, key, token=0, continuous=False, max_wait=None):
        """Yields the key's WatchEvents after token: one (continuous=False)
        or every one until max_wait seconds pass."""
        req = {"key": key, "token": str(token), "continuous": continuous}
        if max_wait is not None:
            req["maxWaitMs"] = max(1, int(max_wait * 1000))
        for ev in self._stream("Watch", req):
            yield WatchEvent.from_json(ev, key)

    def watch_prefix(self, prefix="", max_wait=None):
        """Yields a WatchEvent for every change of every key that starts
        with prefix ("": the whole namespace) from the moment the stream
        is open, with key naming the key: ACQUIRED (holder, token, value),
        RELEASED, EXPIRED, REVOKED. It is not the present state. A RESYNC
        event (key: the prefix) says changes of some keys were missed (a
        lock group's master changed). With max_wait (seconds) the stream
        ends after a TIMEOUT event. A prefix over 1024 bytes raises
        InvalidArgument; the node's bound on prefix watches, Overloaded."""
        req = {"prefix": prefix}
        if max_wait is not None:
            req["maxWaitMs"] = max(1, int(max_wait * 1000))
        for ev in self._transport("").stream("WatchPrefix", req):
            yield WatchEvent.from_json(ev)
