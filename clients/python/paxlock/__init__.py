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
from .locks import (KIND_EXCLUSIVE, KIND_READ, KIND_SEMAPHORE, KIND_WRITE,
                    Election, Hold, Mutex, RWMutex, Semaphore)
from .transport import Transport

__all__ = [
    "Client", "Mutex", "RWMutex", "Semaphore", "Election", "Hold", "LockState", "WatchEvent",
    "PaxlockError", "AuthError", "LockOccupied", "LockTimeout", "NotOwner", "LockNotFound",
    "Revoked", "InvalidArgument", "Overloaded", "Unavailable", "LockLost",
    "KIND_EXCLUSIVE", "KIND_READ", "KIND_WRITE", "KIND_SEMAPHORE",
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
    """A change of a watched key."""
    key: str
    kind: str
    token: int
    holder: str
    value: bytes


class Client:
    """A client of one namespace through one node's API; every call is
    forwarded by that node to the key's master. Safe for use from many
    threads; timeout (seconds) bounds a call that does not wait in a
    queue."""

    def __init__(self, url, namespace, secret, *, ca_file=None, timeout=30.0):
        self.timeout = timeout
        self._t = Transport(url, namespace, secret, ca_file=ca_file, timeout=timeout)

    def close(self):
        """Closes the client's connections; held handles keep renewing
        through new ones until released."""
        self._t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _call(self, method, req, timeout=None):
        return self._t.call(method, req, timeout=self.timeout if timeout is None else timeout)

    def mutex(self, key, **opts):
        """An exclusive lock handle (options: owner, ttl, auto_renew, value,
        weight, lock_delay, watch_loss)."""
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
        for ev in self._t.stream("Watch", req):
            yield WatchEvent(key=ev.get("key", key), kind=ev.get("kind", ""), token=int(ev.get("token", 0)),
                             holder=ev.get("holder", ""), value=base64.b64decode(ev.get("value", "")))
