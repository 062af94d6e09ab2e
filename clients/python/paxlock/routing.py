"""Routing hints: which node masters a key's group.

Every answer about a key carries Paxlock-Node (the node that answered),
Paxlock-Master (the master of the key's group in that node's view) and
Paxlock-Group ("group/groups"). A key's group is key_hash(namespace, key)
modulo the group count, so a client that knows the group count and each
group's master can send even a key it never called to its master. The
hints are advice: a call that reaches another node is forwarded there.
"""

import threading
import time

# how long a node whose connection failed is not picked
DOWN_FOR = 1.0

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = 0xFFFFFFFFFFFFFFFF


def key_hash(namespace, key):
    """FNV-1a 64 of the namespace's UTF-8 bytes, a zero byte and the
    key's UTF-8 bytes: the hash a node places keys in groups by."""
    h = _FNV_OFFSET
    for b in namespace.encode() + b"\x00" + key.encode():
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    return h


class Router:
    """Picks the transport to call for a key from the hints seen so far."""

    def __init__(self, namespace, transports):
        self.ns = namespace
        self.ts = list(transports)
        self._mu = threading.Lock()
        self._by_id = {}       # node id (str) -> transport
        self._masters = None   # group -> master node id (str), once a hint gave the group count
        self._down = {}        # transport -> time.monotonic() until which it is not picked
        for t in self.ts:
            t.on_hint = self.learn

    def learn(self, t, headers):
        """Takes an answer's hints (t: the transport that got it)."""
        node = headers.get("paxlock-node")
        master = headers.get("paxlock-master")
        group = headers.get("paxlock-group")
        if node and t.node_id != node:
            with self._mu:
                t.node_id = node
                self._by_id[node] = t
        if not master or not group:
            return
        g, _, n = group.partition("/")
        try:
            g, n = int(g), int(n)
        except ValueError:
            return
        if n <= 0 or not 0 <= g < n:
            return
        m = self._masters
        if m is None or len(m) != n:
            with self._mu:
                if self._masters is None or len(self._masters) != n:
                    self._masters = [None] * n
                m = self._masters
        m[g] = master

    def down(self, t):
        """Records that t's node could not be reached: it is not picked
        for DOWN_FOR seconds, and the hints naming it are dropped."""
        with self._mu:
            self._down[t] = time.monotonic() + DOWN_FOR
            m = self._masters
            if m is not None and t.node_id is not None:
                for g, master in enumerate(m):
                    if master == t.node_id:
                        m[g] = None

    def _up(self, t):
        until = self._down.get(t)
        if until is None:
            return True
        if time.monotonic() >= until:
            with self._mu:
                self._down.pop(t, None)
            return True
        return False

    def pick(self, key):
        """The transport of the hinted master of key's group; while that
        master's transport is unknown, one not yet identified (its answer
        names it), else the first; a transport recently found down only
        when every one is."""
        m = self._masters
        if m is not None:
            t = self._by_id.get(m[key_hash(self.ns, key) % len(m)])
            if t is not None and (not self._down or self._up(t)):
                return t
        for t in self.ts:
            if t.node_id is None and (not self._down or self._up(t)):
                return t
        for t in self.ts:
            if not self._down or self._up(t):
                return t
        return self.ts[0]
