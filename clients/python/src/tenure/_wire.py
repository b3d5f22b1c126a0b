"""The Connect protocol with JSON, over http.client.

Unary calls are POST /tenure.v1.Service/Method with a JSON body; an error
is a non-200 answer whose JSON body has code, message and details (each a
protobuf message in base64). Server streams (Watch) send one enveloped
request and read enveloped messages: a flag byte, a 4-byte big-endian
length, the JSON; the last envelope (flag 2) ends the stream, with an
error if it failed. Every answer carries the cluster's ID in the
Tenure-Cluster-Id header.

64-bit integers are strings in protobuf's JSON, durations are strings of
seconds ("1.5s") and bytes are base64.
"""

import base64
import http.client
import json
import select
import socket
import ssl
import struct
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .errors import TenureError, TLSError, from_wire

CLUSTER_ID_HEADER = "Tenure-Cluster-Id"

_END_STREAM = 0x02


def duration_str(seconds: float) -> str:
    """duration_str formats seconds as a protobuf JSON duration."""
    if seconds < 0:
        raise ValueError("negative duration: %r" % seconds)
    nanos = int(round(seconds * 1e9))
    s, n = divmod(nanos, 10 ** 9)
    if n == 0:
        return "%ds" % s
    return ("%d.%09d" % (s, n)).rstrip("0") + "s"


def parse_duration(v: Any) -> float:
    """parse_duration reads a protobuf JSON duration ("1.5s") as seconds;
    a missing one is 0."""
    if not v:
        return 0.0
    if isinstance(v, str) and v.endswith("s"):
        return float(v[:-1])
    raise TenureError("wire: bad duration %r" % (v,))


def u64(v: Any) -> int:
    """u64 reads a protobuf JSON 64-bit integer (a string, or absent)."""
    return int(v) if v else 0


def b64decode(v: Optional[str]) -> bytes:
    if not v:
        return b""
    v = v.replace("-", "+").replace("_", "/")
    return base64.b64decode(v + "=" * (-len(v) % 4))


def _varint(b: bytes, i: int) -> Tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        x = b[i]
        i += 1
        result |= (x & 0x7F) << shift
        if not x & 0x80:
            return result, i
        shift += 7


def _fields(b: bytes) -> Iterator[Tuple[int, Any]]:
    """_fields yields (field number, value) of a protobuf message:
    varints as int, length-delimited as bytes."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        yield num, v


def decode_error_detail(b: bytes) -> Dict[str, Any]:
    """decode_error_detail decodes a tenure.v1.ErrorDetail (binary)."""
    d: Dict[str, Any] = {}
    for num, v in _fields(b):
        if num == 1:
            d["reason"] = v.decode()
        elif num == 2:
            d["holder"] = v.decode()
        elif num == 3:
            d["token"] = v
        elif num == 4:
            d["remaining"] = _duration(v)
        elif num == 5:
            d["name"] = v.decode()
        elif num == 6:
            d["limit"] = v
        elif num == 7:
            d["lock_delay"] = bool(v)
        elif num == 8:
            d["revoke_reason"] = v.decode()
        elif num == 9:
            d["ended"] = _duration(v)
    return d


def _duration(b: bytes) -> float:
    """_duration decodes a google.protobuf.Duration (binary) in seconds."""
    secs = nanos = 0
    for n, v in _fields(b):
        if n == 1:
            secs = v
        elif n == 2:
            nanos = v
    return secs + nanos / 1e9


def error_from_json(body: Dict[str, Any], http_status: int = 0) -> TenureError:
    """error_from_json maps a Connect error body to a TenureError."""
    code = body.get("code") or _code_of_status(http_status)
    detail = None
    for det in body.get("details") or []:
        if det.get("type") == "tenure.v1.ErrorDetail":
            try:
                detail = decode_error_detail(b64decode(det.get("value")))
            except (ValueError, UnicodeDecodeError):
                detail = None
            break
    err = from_wire(code, body.get("message", ""), detail)
    err.detail = detail  # type: ignore[attr-defined]
    return err


def _code_of_status(status: int) -> str:
    # Connect's mapping of HTTP statuses, for answers without a code.
    return {400: "internal", 401: "unauthenticated", 403: "permission_denied", 404: "unimplemented",
            429: "unavailable", 502: "unavailable", 503: "unavailable", 504: "unavailable"}.get(status, "unknown")


class WireError(TenureError):
    """An error the server sent (as opposed to a network failure)."""


def is_indeterminate_wire(err: TenureError) -> bool:
    d = getattr(err, "detail", None) or {}
    return err.code == "unavailable" and d.get("reason") == "INDETERMINATE"


class NotSent(Exception):
    """The request certainly did not reach the server: the connection
    could not be opened."""


class Cancelled(Exception):
    """The call was cancelled locally (Canceller.cancel)."""


class Canceller:
    """Canceller ends blocking requests from another thread: cancel()
    shuts down the sockets of the requests registered with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conns: set = set()
        self.event = threading.Event()

    def cancelled(self) -> bool:
        return self.event.is_set()

    def cancel(self) -> None:
        with self._lock:
            self.event.set()
            conns = list(self._conns)
        for c in conns:
            _shutdown(c)

    def add(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if self.event.is_set():
                raise Cancelled()
            self._conns.add(conn)

    def remove(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._conns.discard(conn)


def _shutdown(conn: http.client.HTTPConnection) -> None:
    s = conn.sock
    if s is not None:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Endpoint:
    """Endpoint is one member's API address with a pool of idle
    keep-alive connections."""

    def __init__(self, addr: str, tls: Optional[ssl.SSLContext], server_hostname: Optional[str] = None):
        self.addr = addr
        host, _, port = addr.rpartition(":")
        self.host = host.strip("[]")
        self.port = int(port)
        self.tls = tls
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _new_conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.tls)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def get_conn(self, timeout: Optional[float], fresh: bool = False) -> http.client.HTTPConnection:
        """get_conn returns an idle connection that the server has not
        closed, or a new (unconnected) one."""
        if not fresh:
            with self._lock:
                while self._idle:
                    c = self._idle.pop()
                    if c.sock is not None and not _readable(c.sock):
                        c.sock.settimeout(timeout)
                        c.timeout = timeout
                        return c
                    c.close()
        return self._new_conn(timeout)

    def put_conn(self, c: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < 4:
                self._idle.append(c)
                return
        c.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()


def _readable(sock: socket.socket) -> bool:
    """_readable reports whether an idle connection has something to read:
    the server closed it (EOF) or sent something unasked. Either way it
    must not carry a request."""
    try:
        r, _, _ = select.select([sock], [], [], 0)
        return bool(r)
    except (OSError, ValueError):
        return True


def _connect(conn: http.client.HTTPConnection) -> None:
    """_connect opens conn if it is not open; failures raise NotSent, TLS
    failures TLSError (from the caller's mapping)."""
    if conn.sock is not None:
        return
    try:
        conn.connect()
    except ssl.SSLError:
        conn.close()
        raise
    except OSError as e:
        conn.close()
        raise NotSent(e) from e


def _headers(base: Dict[str, str], stream: bool) -> Dict[str, str]:
    h = dict(base)
    h["Content-Type"] = "application/connect+json" if stream else "application/json"
    h["Connect-Protocol-Version"] = "1"
    return h


def unary(ep: Endpoint, path: str, msg: Dict[str, Any], headers: Dict[str, str], timeout: Optional[float],
          canceller: Optional[Canceller]) -> Tuple[Dict[str, Any], Optional[str]]:
    """unary sends one request and returns (answer, cluster ID header).
    A Connect error raises its TenureError with .cluster_id set; failures
    to connect raise NotSent; other network failures raise OSError or
    http.client exceptions."""
    body = json.dumps(msg).encode()
    conn = ep.get_conn(timeout)
    if canceller is not None:
        canceller.add(conn)
    ok = False
    resp = None
    try:
        _connect(conn)
        if canceller is not None and canceller.cancelled():
            raise Cancelled()
        conn.request("POST", path, body=body, headers=_headers(headers, False))
        resp = conn.getresponse()
        data = resp.read()
        cid = resp.getheader(CLUSTER_ID_HEADER)
        ok = not resp.will_close
        if resp.status == 200:
            try:
                return json.loads(data or b"{}"), cid
            except ValueError as e:
                raise TenureError("wire: bad JSON answer from %s: %s" % (ep.addr, e), "internal")
        if resp.status == 400 and b"HTTP request to an HTTPS server" in data:
            raise TLSError("client: %s serves TLS: give the client ca_file (or an https:// endpoint)" % ep.addr)
        try:
            eb = json.loads(data) if data else {}
            if not isinstance(eb, dict):
                eb = {}
        except ValueError:
            eb = {"message": data[:200].decode("utf-8", "replace")}
        err = error_from_json(eb, resp.status)
        err.cluster_id = cid  # type: ignore[attr-defined]
        err.from_server = True  # type: ignore[attr-defined]
        raise err
    finally:
        if canceller is not None:
            canceller.remove(conn)
        if ok:
            ep.put_conn(conn)
        else:
            if resp is not None:
                resp.close()
            conn.close()


class Stream:
    """Stream is an open server stream: iterate messages with next_msg."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, cluster_id: Optional[str]):
        self.conn = conn
        self.resp = resp
        self.cluster_id = cluster_id
        self._closed = False

    def next_msg(self) -> Optional[Dict[str, Any]]:
        """next_msg returns the next message, None at a clean end of the
        stream, and raises the stream's error."""
        head = self._read(5)
        if head is None:
            raise http.client.IncompleteRead(b"", 5)
        flags, n = struct.unpack(">BI", head)
        data = self._read(n) if n else b""
        if data is None:
            raise http.client.IncompleteRead(b"", n)
        body = json.loads(data or b"{}")
        if flags & _END_STREAM:
            e = body.get("error")
            if e:
                err = error_from_json(e)
                err.from_server = True  # type: ignore[attr-defined]
                raise err
            return None
        return body

    def _read(self, n: int) -> Optional[bytes]:
        buf = b""
        while len(buf) < n:
            chunk = self.resp.read(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _shutdown(self.conn)
            self.resp.close()
            self.conn.close()


def open_stream(ep: Endpoint, path: str, msg: Dict[str, Any], headers: Dict[str, str],
                timeout: Optional[float]) -> Stream:
    """open_stream sends a server-stream request and returns the stream
    once the answer's header arrived. timeout bounds the opening; the
    stream itself blocks without limit."""
    payload = json.dumps(msg).encode()
    conn = ep.get_conn(timeout, fresh=True)
    resp = None
    try:
        _connect(conn)
        conn.request("POST", path, body=struct.pack(">BI", 0, len(payload)) + payload,
                     headers=_headers(headers, True))
        resp = conn.getresponse()
        cid = resp.getheader(CLUSTER_ID_HEADER)
        if resp.status != 200:
            data = resp.read()
            try:
                eb = json.loads(data) if data else {}
            except ValueError:
                eb = {"message": data[:200].decode("utf-8", "replace")}
            err = error_from_json(eb if isinstance(eb, dict) else {}, resp.status)
            err.cluster_id = cid  # type: ignore[attr-defined]
            err.from_server = True  # type: ignore[attr-defined]
            raise err
        return Stream(conn, resp, cid)
    except BaseException:
        if resp is not None:
            resp.close()
        conn.close()
        raise


def monotonic() -> float:
    return time.monotonic()
