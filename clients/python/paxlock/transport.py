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
import socket
import ssl
import struct
import threading
import urllib.parse

from .errors import PaxlockError, Unavailable, error_for

SERVICE = "/paxlock.v1.LockService/"
SERVICE_B = SERVICE.encode()
STATUS_HEADER = "Paxlock-Status"
STATUS_HEADER_L = STATUS_HEADER.lower()
_END_STREAM = 0x02
_HTTP_CODES = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied",
               404: "not_found", 408: "deadline_exceeded", 409: "aborted", 412: "failed_precondition",
               429: "resource_exhausted", 503: "unavailable", 504: "deadline_exceeded"}


class Transport:
    """Calls one node's API (it forwards each call to its key's master).

    url is http://host:port or https://host:port; ca_file the CA that
    signs the node's certificate (the system's CAs when None). One HTTP
    connection per thread is kept open between unary calls, and a call
    is one write of the whole request (headers and body) and a read of
    the answer (_Conn), so a call costs no handshake and no header
    parsing beyond what it needs. on_hint, when set, is handed every
    answer's headers (lower-case names): the routing hints (Client).
    """

    def __init__(self, url, namespace, secret, ca_file=None, timeout=30.0):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"paxlock: url {url!r}: want http://host:port or https://host:port")
        self.url = url
        self.scheme, self.host, self.port = u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80)
        self.timeout = timeout
        cred = f"{namespace}:{secret}".encode()
        self._auth = "Basic " + base64.b64encode(cred).decode()
        self._ctx = None
        if self.scheme == "https":
            self._ctx = ssl.create_default_context(cafile=ca_file)
            self._ctx.set_alpn_protocols(["http/1.1"])
        self._local = threading.local()
        self._mu = threading.Lock()
        self._conns = []
        self.on_hint = None
        self.node_id = None  # the node's id, once an answer named it (Paxlock-Node)
        netloc = self.host if self.port in (80, 443) else f"{self.host}:{self.port}"
        self._head = (f"Host: {netloc}\r\nContent-Type: application/json\r\nAuthorization: {self._auth}\r\n"
                      "Connect-Protocol-Version: 1\r\n").encode("latin-1")

    def _conn(self, timeout):
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def call(self, method, request, timeout=None):
        """A unary call: the answer's JSON object, or the error raised."""
        body = json.dumps(request, separators=(",", ":")).encode()
        msg = b"".join((b"POST ", SERVICE_B, method.encode(), b" HTTP/1.1\r\n", self._head,
                        b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n", body))
        t = self.timeout if timeout is None else timeout
        for attempt in (0, 1):
            conn = getattr(self._local, "uconn", None)
            fresh = conn is None
            try:
                if fresh:
                    try:
                        conn = _Conn(self, t)
                    except OSError as e:
                        raise ConnectFailed("unavailable", "", f"{self.url}: {e}") from e
                    self._local.uconn = conn
                    with self._mu:
                        self._conns.append(conn)
                status, headers, data = conn.roundtrip(msg, t)
            except _Unanswered:
                # A kept connection the node closed while idle: once more
                # on a new one (the node answered none of this request).
                conn.close()
                self._local.uconn = None
                if fresh or attempt:
                    raise Unavailable("unavailable", "", f"{self.url}: connection closed before an answer") from None
                continue
            except Exception:
                if conn is not None:
                    conn.close()
                self._local.uconn = None
                raise
            if conn.closed:
                self._local.uconn = None
            if self.on_hint is not None:
                self.on_hint(self, headers)
            if status == 200:
                return json.loads(data or b"{}")
            raise _error(status, headers.get(STATUS_HEADER_L, ""), data)
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


class ConnectFailed(Unavailable):
    """No connection to the node could be opened: the call was not sent,
    so another node may be asked instead."""


class _Unanswered(Exception):
    """The connection ended before any byte of the answer came."""


class _Conn:
    """One kept-alive HTTP/1.1 connection for unary calls: a request is
    one write, the answer is read into a buffer and parsed for its
    status, headers and Content-Length (or chunked) body."""

    def __init__(self, t, timeout):
        sock = socket.create_connection((t.host, t.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if t._ctx is not None:
                sock = t._ctx.wrap_socket(sock, server_hostname=t.host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.buf = bytearray()
        self.closed = False  # the node said Connection: close

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _fill(self, got_any):
        chunk = self.sock.recv(65536)
        if not chunk:
            if not got_any:
                raise _Unanswered()
            raise Unavailable("unavailable", "", "connection closed inside an answer")
        self.buf += chunk

    def roundtrip(self, msg, timeout):
        """Sends msg and returns the answer's (status, headers, body)."""
        self.sock.settimeout(timeout)
        try:
            self.sock.sendall(msg)
        except (BrokenPipeError, ConnectionResetError):
            raise _Unanswered() from None
        buf = self.buf
        try:
            while True:
                i = buf.find(b"\r\n\r\n")
                if i >= 0:
                    break
                self._fill(bool(buf))
        except (ConnectionResetError, BrokenPipeError):
            if buf:
                raise
            raise _Unanswered() from None
        lines = bytes(buf[:i]).decode("latin-1").split("\r\n")
        del buf[:i + 4]
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise Unavailable("unavailable", "", f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
        status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            data = self._chunked()
        else:
            n = int(headers.get("content-length", "0"))
            while len(buf) < n:
                self._fill(True)
            data = bytes(buf[:n])
            del buf[:n]
        if headers.get("connection", "").lower() == "close":
            self.close()
            self.closed = True
        return status, headers, data

    def _chunked(self):
        buf, out = self.buf, bytearray()
        while True:
            while (i := buf.find(b"\r\n")) < 0:
                self._fill(True)
            n = int(bytes(buf[:i]).split(b";", 1)[0], 16)
            del buf[:i + 2]
            while len(buf) < n + 2:
                self._fill(True)
            out += buf[:n]
            del buf[:n + 2]
            if n == 0:
                # trailers, if any, end with an empty line
                while not buf.startswith(b"\r\n") and buf.find(b"\r\n\r\n") < 0:
                    self._fill(True)
                j = 0 if buf.startswith(b"\r\n") else buf.find(b"\r\n\r\n") + 2
                del buf[:j + 2]
                return bytes(out)
