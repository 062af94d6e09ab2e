"""The Connect protocol over HTTP/1.1 with JSON bodies (standard library).

Unary calls are a POST of the request as JSON to
/paxlock.v1.LockService/<Method>; a server stream (Watch) is a POST of one
enveloped message (application/connect+json: a flags byte, a 4-byte big
endian length, the JSON), answered by enveloped messages and a final
end-of-stream envelope (flags 0x02) that carries the error, if any.
"""

import base64
import http.client
import json
import ssl
import struct
import threading
import urllib.parse

from .errors import PaxlockError, error_for

SERVICE = "/paxlock.v1.LockService/"
STATUS_HEADER = "Paxlock-Status"
_END_STREAM = 0x02
_HTTP_CODES = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied",
               404: "not_found", 408: "deadline_exceeded", 409: "aborted", 412: "failed_precondition",
               429: "resource_exhausted", 503: "unavailable", 504: "deadline_exceeded"}


class Transport:
    """Calls one node's API (it forwards each call to its key's master).

    url is http://host:port or https://host:port; ca_file the CA that
    signs the node's certificate (the system's CAs when None). One HTTP
    connection per thread is kept open between calls.
    """

    def __init__(self, url, namespace, secret, ca_file=None, timeout=30.0):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"paxlock: url {url!r}: want http://host:port or https://host:port")
        self.scheme, self.host, self.port = u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80)
        self.timeout = timeout
        cred = f"{namespace}:{secret}".encode()
        self._auth = "Basic " + base64.b64encode(cred).decode()
        self._ctx = None
        if self.scheme == "https":
            self._ctx = ssl.create_default_context(cafile=ca_file)
        self._local = threading.local()
        self._mu = threading.Lock()
        self._conns = []

    def _conn(self, timeout):
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def call(self, method, request, timeout=None):
        """A unary call: the answer's JSON object, or the error raised."""
        body = json.dumps(request).encode()
        headers = {"Content-Type": "application/json", "Authorization": self._auth,
                   "Connect-Protocol-Version": "1"}
        t = self.timeout if timeout is None else timeout
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            fresh = conn is None
            if fresh:
                conn = self._local.conn = self._conn(t)
                with self._mu:
                    self._conns.append(conn)
            conn.timeout = t
            if conn.sock is not None:
                conn.sock.settimeout(t)
            try:
                conn.request("POST", SERVICE + method, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A kept connection the node closed while idle: once more
                # on a new one (the request never reached the node).
                conn.close()
                self._local.conn = None
                if fresh or attempt:
                    raise
                continue
            except Exception:
                conn.close()
                self._local.conn = None
                raise
            if resp.status == 200:
                return json.loads(data or b"{}")
            raise _error(resp.status, resp.getheader(STATUS_HEADER, ""), data)
        raise AssertionError("unreachable")

    def close(self):
        """Closes every kept connection (a later call opens new ones)."""
        with self._mu:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()

    def stream(self, method, request, timeout=None, on_conn=None):
        """A server-streaming call: yields each message's JSON object and
        raises the stream's error at its end. Closing the generator closes
        the stream's connection; on_conn, if given, is handed the
        connection first, for another thread to close it (close_stream)."""
        env = json.dumps(request).encode()
        body = struct.pack(">BI", 0, len(env)) + env
        headers = {"Content-Type": "application/connect+json", "Authorization": self._auth,
                   "Connect-Protocol-Version": "1"}
        conn = self._conn(timeout)
        if on_conn is not None:
            on_conn(conn)
        try:
            conn.request("POST", SERVICE + method, body=body, headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise _error(resp.status, resp.getheader(STATUS_HEADER, ""), resp.read())
            while True:
                head = _read_exactly(resp, 5)
                if head is None:
                    return
                flags, n = struct.unpack(">BI", head)
                msg = _read_exactly(resp, n) if n else b""
                if msg is None:
                    raise PaxlockError("unavailable", "", "stream ended inside a message")
                obj = json.loads(msg or b"{}")
                if flags & _END_STREAM:
                    err = obj.get("error")
                    if err:
                        status = ""
                        meta = obj.get("metadata") or {}
                        for k, v in meta.items():
                            if k.lower() == STATUS_HEADER.lower() and v:
                                status = v[0]
                        raise error_for(err.get("code", "unknown"), status, err.get("message", ""))
                    return
                yield obj
        finally:
            conn.close()


def close_stream(conn):
    """Ends a stream from another thread: its blocked read returns."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(2)
        except OSError:
            pass


def _read_exactly(resp, n):
    buf = b""
    while len(buf) < n:
        chunk = resp.read(n - len(buf))
        if not chunk:
            return None if not buf else buf
        buf += chunk
    return buf


def _error(http_status, status, data):
    try:
        obj = json.loads(data or b"{}")
    except ValueError:
        obj = {}
    code = obj.get("code") or _HTTP_CODES.get(http_status, "unknown")
    return error_for(code, status, obj.get("message", f"HTTP {http_status}"))
