"""The client: endpoints, failover, retries, request IDs, typed errors.

It follows the rules of the Go package client: every call starts at the
endpoint that last served a request and fails over to the next while the
cluster is unavailable. Reads, acquires and renewals are retried after
any failure: every attempt of an acquire or renewal carries the call's
request ID (session, seq, floor), so the cluster applies it at most once
and answers a retry with the first attempt's outcome. Releases, puts and
deletes are retried only when they certainly were not delivered (the
connection could not be opened, or the server answered unavailable);
otherwise they raise IndeterminateError.
"""

import base64
import datetime
import http.client
import os
import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _wire
from ._wire import Canceller, Cancelled, Endpoint, NotSent, monotonic, parse_duration, u64
from .errors import (CanceledError, IndeterminateError, LeaseHeldError, NotAppliedError, OtherClusterError,
                     TenureError, TLSError, UnavailableError, from_reason)

_LEASE = "/tenure.v1.LeaseService/"
_KV = "/tenure.v1.KVService/"
_CLUSTER = "/tenure.v1.ClusterService/"

# Retry policies.
RETRY_ALWAYS = "always"  # repeating is harmless: reads, acquire, renew
RETRY_UNSENT = "unsent"  # retried only when certainly not applied


@dataclass(frozen=True)
class Grant:
    """Grant is one grant of a named lease, as the server reported it.
    Durations are in seconds."""
    name: str
    holder: str
    #: The fencing token: larger than every token granted before it, the
    #: same across renewals. Pass it with every write the lease protects.
    token: int
    ttl: float
    #: Time the lease had left when the server applied the request.
    remaining: float
    #: For a semaphore slot, its limit; 0 for a plain lease.
    limit: int = 0
    #: When the request that returned the grant was sent
    #: (time.monotonic(); 0 for grants reported by watch). The lease
    #: expires no earlier than sent_at + remaining at the cluster's rate.
    sent_at: float = 0.0
    #: The grant's lock-delay in seconds (acquire's lock_delay), 0 for
    #: none.
    lock_delay: float = 0.0
    #: True for a shared (read) grant (acquire's shared).
    shared: bool = False
    #: The grant's priority (acquire's priority), 0 for none.
    priority: int = 0


@dataclass(frozen=True)
class Term:
    """Term is one grant of a name in its history (Client.history): who
    held it, with which token, from when to when, and how it ended.
    start and end are the leader's wall clock (timezone-aware datetimes,
    UTC; None when unknown, and end while held), for display; the cluster
    decides by cluster_start and cluster_end (seconds of cluster time)."""
    name: str
    holder: str
    token: int
    #: "held" while the term lasts, else "released", "expired", "revoked"
    #: or "handed_off".
    ending: str
    start: Optional[datetime.datetime] = None
    end: Optional[datetime.datetime] = None
    #: A revocation's reason.
    reason: str = ""
    #: The authenticated principal that acquired the grant ("" without
    #: auth).
    principal: str = ""
    #: For a semaphore slot, its limit; 0 for a plain lease.
    limit: int = 0
    #: Fenced writes of the built-in store under the term's token.
    writes_accepted: int = 0
    writes_refused: int = 0
    cluster_start: float = 0.0
    cluster_end: float = 0.0
    #: True for the term of a shared (read) grant.
    shared: bool = False

    @property
    def held(self) -> bool:
        return self.ending == "held"


@dataclass(frozen=True)
class RenewResult:
    """RenewResult is the outcome of renewing one lease: grant when it
    succeeded, error (a StaleTokenError, ...) when not; a RevokedError,
    with the operator's reason, when an operator revoked the grant."""
    name: str
    token: int
    grant: Optional[Grant] = None
    error: Optional[TenureError] = None
    #: The waiter that asks the holder to hand over (its priority is
    #: higher than the grant's), or "" when none asks.
    handoff_requested: str = ""


@dataclass(frozen=True)
class KV:
    """KV is one value of the fenced key-value store."""
    key: str
    value: bytes
    #: The lease and token of the grant that wrote the value.
    lease: str
    token: int
    #: The store revision at which the value was written.
    revision: int


@dataclass(frozen=True)
class WatchEvent:
    """WatchEvent is one event of a watch. type is "current" (a lease live
    when the watch (re)started), "synced" (the current leases have been
    sent; events follow in commit order), "granted", "released",
    "expired", "revoked" (by an operator; reason says why), or "reset"
    (the stream broke and the client watched again, maybe on another
    member: events may have been missed, and the current state follows
    again)."""
    type: str
    grant: Optional[Grant] = None
    #: The raft index of the entry that produced the event (0 for
    #: current, synced and reset).
    index: int = 0
    #: For "revoked": the operator's reason.
    reason: str = ""


@dataclass(frozen=True)
class Member:
    id: str
    raft_address: str
    api_address: str
    suffrage: str
    leader: bool


@dataclass(frozen=True)
class Status:
    """Status is one member's view of the cluster."""
    endpoint: str
    node_id: str
    state: str
    leader_id: str
    leader_address: str
    term: int
    applied_index: int
    cluster_id: str
    last_token: int
    leases: int
    min_ttl: float
    members: List[Member] = field(default_factory=list)


_EVENT_TYPES = {"TYPE_CURRENT": "current", "TYPE_SYNCED": "synced", "TYPE_GRANTED": "granted",
                "TYPE_RELEASED": "released", "TYPE_EXPIRED": "expired", "TYPE_REVOKED": "revoked",
                1: "current", 2: "synced", 3: "granted", 4: "released", 5: "expired", 6: "revoked"}


_ENDINGS = {"ENDING_RELEASED": "released", "ENDING_EXPIRED": "expired", "ENDING_REVOKED": "revoked",
            "ENDING_HANDED_OFF": "handed_off"}


def _timestamp(v: Optional[str]) -> Optional[datetime.datetime]:
    """_timestamp reads a protobuf JSON timestamp (RFC 3339, UTC, up to
    nanoseconds) as an aware datetime (microseconds); None if absent."""
    if not v:
        return None
    base, _, frac = v.rstrip("Z").partition(".")
    t = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    if frac:
        t += datetime.timedelta(microseconds=int((frac + "000000")[:6]))
    return t


def _rfc3339(t: datetime.datetime) -> str:
    if t.tzinfo is None:
        raise ValueError("since must be timezone-aware (datetime.now(timezone.utc), not datetime.now())")
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _term(p: Dict[str, Any]) -> Term:
    return Term(name=p.get("name", ""), holder=p.get("holder", ""), token=u64(p.get("token")),
                ending=_ENDINGS.get(p.get("ending", ""), "held"), start=_timestamp(_field(p, "start_time")),
                end=_timestamp(_field(p, "end_time")), reason=p.get("reason", ""), principal=p.get("principal", ""),
                limit=int(p.get("limit", 0)), writes_accepted=u64(_field(p, "writes_accepted")),
                writes_refused=u64(_field(p, "writes_refused")), cluster_start=parse_duration(_field(p, "cluster_start")),
                cluster_end=parse_duration(_field(p, "cluster_end")), shared=bool(p.get("shared", False)))


def _grant(p: Optional[Dict[str, Any]], sent_at: float) -> Grant:
    p = p or {}
    return Grant(name=p.get("name", ""), holder=p.get("holder", ""), token=u64(p.get("token")),
                 ttl=parse_duration(p.get("ttl")), remaining=parse_duration(p.get("remaining")),
                 limit=int(p.get("limit") or 0), sent_at=sent_at,
                 lock_delay=parse_duration(_field(p, "lock_delay")), shared=bool(p.get("shared", False)),
                 priority=int(p.get("priority") or 0))


def _b64(v: Union[bytes, str]) -> str:
    if isinstance(v, str):
        v = v.encode()
    return base64.b64encode(bytes(v)).decode()


class RequestIds:
    """RequestIds numbers the calls of one client that change state: every
    attempt of a call carries the same (session, seq), and each request
    carries the floor, the lowest seq still in flight. The Go client does
    the same (client/session.go)."""

    def __init__(self) -> None:
        self.session = os.urandom(16).hex()
        self._lock = threading.Lock()
        self._next = 1
        self._floor = 1
        self._ended: Dict[int, bool] = {}

    def begin(self) -> Dict[str, str]:
        with self._lock:
            seq = self._next
            self._next += 1
            self._ended[seq] = False
            return {"session": self.session, "seq": str(seq), "floor": str(self._floor)}

    def end(self, rid: Dict[str, str]) -> None:
        with self._lock:
            self._ended[int(rid["seq"])] = True
            while self._ended.get(self._floor):
                del self._ended[self._floor]
                self._floor += 1


def normalize_endpoint(e: str, tls: bool) -> Tuple[str, bool]:
    """normalize_endpoint returns (host:port, use TLS) for an endpoint
    written host:port, http://host:port or https://host:port. A bare
    host:port uses TLS when the client has TLS settings."""
    addr = e.strip()
    use_tls = tls
    if addr.startswith("https://"):
        addr, use_tls = addr[len("https://"):], True
    elif addr.startswith("http://"):
        if tls:
            raise TenureError('client: endpoint "%s" is plain http, but TLS settings were given' % e)
        addr = addr[len("http://"):]
    addr = addr.rstrip("/")
    host, sep, port = addr.rpartition(":")
    if not addr or not sep or not host or not port.isdigit() or "/" in addr:
        raise TenureError('client: endpoint "%s" is not host:port' % e)
    return addr, use_tls


class Client:
    """Client talks to a tenure cluster.

    endpoints: API addresses of members, "host:port" (or http:// or
    https://). Any member serves any request: followers forward to the
    leader. Required.

    ca_file: verify the servers with this CA (the cluster's ca.crt); makes
    every host:port endpoint https. cert_file, key_file: a client
    certificate to present. token: a bearer token (sent as
    "Authorization: Bearer TOKEN"). An https:// endpoint without ca_file
    verifies with the system's roots.

    cluster_id: the ID of the cluster (tenure status shows it). Every
    answer carries its cluster's ID; the client refuses answers from
    another cluster. Default: pin the first ID that answers.

    request_timeout: bounds one attempt at one endpoint, in seconds
    (default 5; a waiting acquire gets its wait on top). timeout: bounds a
    whole call with its retries (default 30; each call takes its own).
    retry_backoff, max_retry_backoff: the pause after every endpoint failed
    once, doubling up to the maximum (default 0.05 and 1 s).
    """

    def __init__(self, endpoints: Sequence[str], *, ca_file: Optional[str] = None,
                 cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 token: Optional[str] = None, cluster_id: Optional[str] = None,
                 request_timeout: float = 5.0, timeout: float = 30.0,
                 retry_backoff: float = 0.05, max_retry_backoff: float = 1.0,
                 ssl_context: Optional[ssl.SSLContext] = None):
        if isinstance(endpoints, str):
            endpoints = [x for x in endpoints.split(",") if x.strip()]
        if not endpoints:
            raise TenureError("client: no endpoints")
        for k, v in (("request_timeout", request_timeout), ("timeout", timeout),
                     ("retry_backoff", retry_backoff), ("max_retry_backoff", max_retry_backoff)):
            if not v > 0:
                raise TenureError("client: %s must be positive, got %r" % (k, v))
        if (cert_file is None) != (key_file is None):
            raise TenureError("client: cert_file and key_file go together")
        if token is not None and (not token.strip() or any(c in token for c in "\r\n")):
            raise TenureError("client: the token is empty or has a line break")
        if cluster_id is not None and cluster_id != cluster_id.strip():
            raise TenureError('client: cluster_id "%s" has leading or trailing space' % cluster_id)
        want_tls = ssl_context is not None or ca_file is not None or cert_file is not None
        ctx = ssl_context
        parsed = [normalize_endpoint(e, want_tls) for e in endpoints]
        if ctx is None and any(t for _, t in parsed):
            ctx = ssl.create_default_context(cafile=ca_file)
            if cert_file is not None:
                ctx.load_cert_chain(cert_file, key_file)
        self._eps = [Endpoint(a, ctx if t else None) for a, t in parsed]
        self._headers: Dict[str, str] = {}
        if token:
            self._headers["Authorization"] = "Bearer " + token.strip()
        self.request_timeout = request_timeout
        self.timeout = timeout
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self._pinned = cluster_id or None
        self._cur = 0
        self._lock = threading.Lock()
        self._ids = RequestIds()

    @classmethod
    def from_env(cls, environ: Optional[Dict[str, str]] = None, **kwargs: Any) -> "Client":
        """from_env makes a client from the variables the CLI reads and
        `tenure run` passes to its command: TENURE_ENDPOINTS (comma list,
        default 127.0.0.1:7400), TENURE_CACERT, TENURE_CERT, TENURE_KEY,
        TENURE_AUTH_TOKEN and TENURE_CLUSTER_ID. kwargs override them."""
        env = os.environ if environ is None else environ
        cfg: Dict[str, Any] = {}
        for var, key in (("TENURE_CACERT", "ca_file"), ("TENURE_CERT", "cert_file"), ("TENURE_KEY", "key_file"),
                         ("TENURE_AUTH_TOKEN", "token"), ("TENURE_CLUSTER_ID", "cluster_id")):
            if env.get(var):
                cfg[key] = env[var]
        cfg.update(kwargs)
        endpoints = [e for e in env.get("TENURE_ENDPOINTS", "127.0.0.1:7400").split(",") if e.strip()]
        return cls(endpoints, **cfg)

    @property
    def cluster_id(self) -> Optional[str]:
        """The cluster the client is pinned to, None until known."""
        return self._pinned

    @property
    def endpoints(self) -> List[str]:
        return [e.addr for e in self._eps]

    def close(self) -> None:
        """close closes idle connections. Watches and sessions are closed
        by their own close."""
        for e in self._eps:
            e.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the call loop ---------------------------------------------------

    def _check_cluster(self, ep: Endpoint, cid: Optional[str]) -> None:
        if not cid:
            return
        with self._lock:
            if self._pinned is None:
                self._pinned = cid
                return
            pinned = self._pinned
        if cid != pinned:
            raise OtherClusterError(ep.addr, pinned, cid)

    def _call(self, policy: str, timeout: Optional[float], attempt: Callable[[Endpoint, float], Any],
              attempt_timeout: Optional[Callable[[], float]] = None,
              canceller: Optional[Canceller] = None) -> Any:
        """_call runs attempt at one endpoint after another until one
        answers, the error is final, or the call's timeout passes."""
        deadline = monotonic() + (self.timeout if timeout is None else timeout)
        n = len(self._eps)
        i = self._cur
        failures = 0
        backoff = self.retry_backoff
        last: Optional[BaseException] = None
        other: Optional[OtherClusterError] = None
        refused = set()
        while True:
            if canceller is not None and canceller.cancelled():
                raise CanceledError("client: call cancelled")
            left = deadline - monotonic()
            if left <= 0:
                if failures == 0:
                    raise UnavailableError(0, TimeoutError("the call's timeout passed"))
                raise UnavailableError(failures, last, other)
            ep = self._eps[i]
            at = attempt_timeout() if attempt_timeout is not None else self.request_timeout
            try:
                res = attempt(ep, min(at, left) if policy == RETRY_ALWAYS else at)
                self._cur = i
                return res
            except OtherClusterError as e:
                other = e
                refused.add(i)
                if len(refused) == n:
                    raise
                last = e
            except ssl.SSLError as e:
                raise TLSError("client: %s: TLS: %s" % (ep.addr, e)) from e
            except NotSent as e:
                last = TenureError("%s: %s" % (ep.addr, e.__cause__ or e))
            except Cancelled:
                raise CanceledError("client: call cancelled") from None
            except TenureError as e:
                if not getattr(e, "from_server", False):
                    raise
                # Check the answer's cluster before believing it.
                try:
                    self._check_cluster(ep, getattr(e, "cluster_id", None))
                except OtherClusterError as oe:
                    other = oe
                    refused.add(i)
                    if len(refused) == n:
                        raise oe from None
                    last = oe
                else:
                    if e.code == "unavailable" and not _wire.is_indeterminate_wire(e):
                        # The server refused: not the leader, no leader.
                        last = e
                    elif e.code in ("unavailable", "deadline_exceeded", "canceled"):
                        if policy != RETRY_ALWAYS:
                            raise IndeterminateError("%s: %s" % (ep.addr, e)) from e
                        last = e
                    else:
                        self._cur = i
                        raise
            except (OSError, http.client.HTTPException) as e:
                if canceller is not None and canceller.cancelled():
                    raise CanceledError("client: call cancelled") from None
                # The connection broke or the attempt timed out after the
                # request may have been sent.
                if policy != RETRY_ALWAYS:
                    raise IndeterminateError("%s: %s" % (ep.addr, _describe(e))) from e
                last = TenureError("%s: %s" % (ep.addr, _describe(e)))
            failures += 1
            i = (i + 1) % n
            if failures % n == 0:
                pause = min(backoff, deadline - monotonic())
                if pause > 0:
                    if canceller is not None:
                        canceller.event.wait(pause)
                    else:
                        threading.Event().wait(pause)
                backoff = min(2 * backoff, self.max_retry_backoff)

    def _unary(self, policy: str, path: str, msg: Dict[str, Any], timeout: Optional[float],
               attempt_timeout: Optional[Callable[[], float]] = None,
               canceller: Optional[Canceller] = None) -> Tuple[Dict[str, Any], float]:
        sent: List[float] = []

        def attempt(ep: Endpoint, t: float) -> Dict[str, Any]:
            if not sent:
                sent.append(monotonic())
            res, cid = _wire.unary(ep, path, msg, self._headers, t, canceller)
            self._check_cluster(ep, cid)
            return res

        res = self._call(policy, timeout, attempt, attempt_timeout, canceller)
        return res, sent[0]

    def _mutating(self, policy: str, path: str, msg: Dict[str, Any], timeout: Optional[float],
                  attempt_timeout: Optional[Callable[[], float]] = None,
                  canceller: Optional[Canceller] = None) -> Tuple[Dict[str, Any], float]:
        """_mutating runs a call that changes state as one call of the
        client's session: every attempt carries the same request ID;
        the send time is the first attempt's."""
        rid = self._ids.begin()
        # In place: attempt_timeout may change msg (an acquire's wait) for
        # each attempt, and every attempt sends msg as it is then.
        msg["request_id"] = rid
        try:
            return self._unary(policy, path, msg, timeout, attempt_timeout, canceller)
        except NotAppliedError as e:
            raise IndeterminateError(str(e)) from e
        finally:
            self._ids.end(rid)

    # -- leases ----------------------------------------------------------

    def acquire(self, name: str, holder: str, ttl: float, *, wait: bool = False,
                wait_timeout: Optional[float] = None, limit: int = 0, lock_delay: float = 0.0,
                priority: int = 0, timeout: Optional[float] = None,
                canceller: Optional[Canceller] = None, shared: bool = False) -> Grant:
        """acquire grants the lease name to holder for ttl seconds, or
        renews it if holder already holds it (same token). If another
        holder has it, it raises LeaseHeldError naming that holder; with
        wait=True it queues on the server (first come, first served) until
        granted or wait_timeout passes (None: as long as the server allows,
        5 minutes by default). limit > 1 asks for one slot of a semaphore.
        lock_delay (seconds, at most 60 by default) gives the grant a
        lock-delay: if it expires or is revoked (not released), the server
        grants the name to nobody until that much cluster time has passed
        since the expiry (or the revocation); waiters stay queued. An
        acquire during the delay raises a LeaseHeldError with lock_delay
        set. A mitigation for storage that cannot check tokens: the token
        is the guarantee. shared=True asks for a shared (read) grant:
        shared grants of a name are held at once, each with its own token,
        and exclude an exclusive grant (shared=False); waiters are served
        in order, so a shared acquire queued behind a waiting exclusive one
        waits for it (readers never starve a writer). A shared token may
        not write the fenced store (InvalidArgumentError), and a holder
        cannot switch modes (release first). priority (0 to 1000000) is
        kept in the caller's place in the queue and in its grant: the
        queue stays first come, first served, but a waiter with a higher
        priority than the holder's asks the holder to hand over (the
        holder's renewals report it in RenewResult.handoff_requested).
        Retried on other endpoints; a retry gets the first attempt's
        outcome, never a second grant. The grant's sent_at is when the
        first attempt was sent."""
        msg: Dict[str, Any] = {"name": name, "holder": holder, "ttl": _wire.duration_str(ttl)}
        if limit:
            msg["limit"] = limit
        if lock_delay:
            msg["lock_delay"] = _wire.duration_str(lock_delay)
        if shared:
            msg["shared"] = True
        if priority:
            msg["priority"] = priority
        wait_until = monotonic() + wait_timeout if wait and wait_timeout else 0.0

        def attempt_timeout() -> float:
            msg.pop("wait", None)
            msg.pop("wait_timeout", None)
            if not wait:
                return self.request_timeout
            msg["wait"] = True
            if not wait_until:
                return self.request_timeout + 300.0
            left = wait_until - monotonic()
            if left <= 0:
                del msg["wait"]  # no time left: one plain try
                return self.request_timeout
            msg["wait_timeout"] = _wire.duration_str(left)
            return self.request_timeout + left

        if timeout is None and wait:
            # A waiting acquire is bounded by its wait, not the call timeout.
            timeout = (wait_timeout if wait_timeout else 300.0) + self.timeout
        try:
            res, sent = self._mutating(RETRY_ALWAYS, _LEASE + "Acquire", msg, timeout, attempt_timeout, canceller)
        except LeaseHeldError as e:
            if not e.lease:
                e.lease = name
            raise
        return _grant(res.get("lease"), sent)

    def renew(self, leases: Sequence[Tuple[Any, ...]], *, timeout: Optional[float] = None,
              canceller: Optional[Canceller] = None) -> List[RenewResult]:
        """renew extends the leases (name, token) by their TTLs in one
        request and returns one result per lease, in order; a lease given
        as (name, token, ttl) gets that TTL (seconds) first, within the
        server's bounds, for this and later renewals. A lease that could
        not be renewed has its error in its result; the call raises only
        for the request as a whole."""
        refs = []
        for ref in leases:
            r: Dict[str, Any] = {"name": ref[0], "token": str(ref[1])}
            if len(ref) > 2 and ref[2]:
                r["ttl"] = _wire.duration_str(ref[2])  # type: ignore[misc]
            refs.append(r)
        res, sent = self._mutating(RETRY_ALWAYS, _LEASE + "Renew", {"leases": refs}, timeout, None, canceller)
        results = res.get("results") or []
        if len(results) != len(refs):
            raise TenureError("client: renew of %d leases returned %d results" % (len(refs), len(results)))
        out = []
        for r in results:
            err = from_reason(r.get("reason", ""), r.get("message", ""),
                              {"name": r.get("name", ""), "token": u64(r.get("token")),
                               "revoke_reason": _field(r, "revoke_reason", "")})
            out.append(RenewResult(name=r.get("name", ""), token=u64(r.get("token")),
                                   grant=None if err else _grant(r.get("lease"), sent), error=err,
                                   handoff_requested="" if err else _field(r, "handoff_requested", "")))
        return out

    def renew_one(self, name: str, token: int, *, timeout: Optional[float] = None) -> Grant:
        """renew_one renews one lease and raises its error."""
        r = self.renew([(name, token)], timeout=timeout)[0]
        if r.error is not None:
            raise r.error
        assert r.grant is not None
        return r.grant

    def release(self, name: str, token: int, *, timeout: Optional[float] = None,
                canceller: Optional[Canceller] = None) -> None:
        """release ends the grant of name with token, so the lease is free
        (or goes to the first waiter) at once. A token that is not the
        current grant raises StaleTokenError. Retried like acquire: every
        attempt carries the call's request ID, and a retry of a release
        that took effect gets that release's outcome."""
        self._mutating(RETRY_ALWAYS, _LEASE + "Release", {"name": name, "token": str(token)}, timeout,
                       None, canceller)

    def handoff(self, name: str, token: int, to: str = "", *, timeout: Optional[float] = None,
                canceller: Optional[Canceller] = None) -> Grant:
        """handoff ends the grant of name with token and, at the same
        cluster time, grants name to the waiter ``to``, or to the first
        waiter still waiting if ``to`` is "": the new grant has a new,
        larger token and starts the moment the old one ends (no gap, no
        overlap, no lock-delay). Returns the new grant; the waiter's own
        acquire returns it too. Stop acting under the old token first. No
        such waiter raises NotFoundError and changes nothing; a stale
        token StaleTokenError; a semaphore slot InvalidArgumentError.
        Retried like release."""
        msg: Dict[str, Any] = {"name": name, "token": str(token), "handoff": True}
        if to:
            msg["handoff_to"] = to
        res, sent = self._mutating(RETRY_ALWAYS, _LEASE + "Release", msg, timeout, None, canceller)
        return _grant(_field(res, "handed_to"), sent)

    def revoke(self, name: str, token: int = 0, *, reason: str, timeout: Optional[float] = None) -> List[Grant]:
        """revoke ends the live grant of name with token now, or every live
        grant of name (every slot of a semaphore) if token is 0, as an
        operator: the caller needs the admin role. reason (1-256 bytes of
        printable text) is kept with the revoked grant until its old
        expiry: the holder's next renewal, release or write raises a
        RevokedError that carries it, and a session's lease is lost. The
        grant's lock-delay, if any, starts now; otherwise the first waiter
        is granted at once, with a larger token. Returns the grants it
        ended; a name with no such live grant raises NotFoundError and
        changes nothing. Retried like acquire: a retry gets the first
        attempt's outcome."""
        msg: Dict[str, Any] = {"name": name, "token": str(token), "reason": reason}
        res, sent = self._mutating(RETRY_ALWAYS, _LEASE + "Revoke", msg, timeout)
        return [_grant(g, sent) for g in res.get("revoked") or []]

    def history(self, name: str, *, since: Optional[datetime.datetime] = None, limit: int = 0,
                timeout: Optional[float] = None) -> List[Term]:
        """history returns the kept terms of name, newest first: every term
        still held and, of the ended ones, as many and as recent as the
        cluster keeps (tenured --history-terms, --history-age). since (an
        aware datetime) leaves out the terms that ended before it; limit,
        if positive, keeps the newest limit terms. The history is
        replicated: it survives restarts and failovers. A name with no
        kept term gives []."""
        msg: Dict[str, Any] = {"name": name}
        if since is not None:
            msg["since"] = _rfc3339(since)
        if limit > 0:
            msg["limit"] = limit
        res, _ = self._unary(RETRY_ALWAYS, _LEASE + "History", msg, timeout)
        return [_term(p) for p in res.get("terms") or []]

    def get(self, name: str, *, timeout: Optional[float] = None) -> Grant:
        """get returns the live grant of name, or raises NotFoundError."""
        res, sent = self._unary(RETRY_ALWAYS, _LEASE + "Get", {"name": name}, timeout)
        return _grant(res.get("lease"), sent)

    def slots(self, name: str, *, timeout: Optional[float] = None) -> List[Grant]:
        """slots returns every live grant of name in the order granted: one
        for a plain lease, one per held slot of a semaphore. NotFoundError
        when there is none."""
        res, sent = self._unary(RETRY_ALWAYS, _LEASE + "Get", {"name": name}, timeout)
        return [_grant(p, sent) for p in res.get("slots") or [res.get("lease")]]

    def list(self, prefix: str = "", *, timeout: Optional[float] = None) -> List[Grant]:
        """list returns the live leases whose names start with prefix,
        sorted by name."""
        res, sent = self._unary(RETRY_ALWAYS, _LEASE + "List", {"prefix": prefix}, timeout)
        return [_grant(p, sent) for p in res.get("leases") or []]

    # -- the fenced key-value store --------------------------------------

    def put(self, key: str, value: Union[bytes, str], lease: str, token: int, *,
            timeout: Optional[float] = None) -> int:
        """put writes value under key, fenced by the grant (lease, token):
        the server accepts it only while token is the current, unexpired
        grant of lease and no higher token wrote key; otherwise
        StaleTokenError. It returns the store revision. A put whose answer
        was lost is retried with the call's request ID: a retry of a write
        that took effect gets its revision, never a second write and never
        "stale" because a newer grant wrote the key since. A retry the
        cluster no longer remembers raises IndeterminateError (read the key
        to find out)."""
        res, _ = self._mutating(RETRY_ALWAYS, _KV + "Put", {"key": key, "value": _b64(value), "lease": lease,
                                                          "token": str(token)}, timeout)
        return u64(res.get("revision"))

    def kv_get(self, key: str, *, timeout: Optional[float] = None) -> KV:
        """kv_get returns the value of key, or raises NotFoundError."""
        res, _ = self._unary(RETRY_ALWAYS, _KV + "Get", {"key": key}, timeout)
        return _kv(res)

    def kv_list(self, prefix: str = "", *, keys_only: bool = False, timeout: Optional[float] = None) -> List[KV]:
        """kv_list returns the values of the keys that start with prefix,
        sorted by key (values empty with keys_only)."""
        msg: Dict[str, Any] = {"prefix": prefix}
        if keys_only:
            msg["keys_only"] = True
        res, _ = self._unary(RETRY_ALWAYS, _KV + "List", msg, timeout)
        return [_kv(e) for e in res.get("entries") or []]

    def delete(self, key: str, lease: str, token: int, *, timeout: Optional[float] = None) -> int:
        """delete removes key, fenced like put, and returns the store
        revision of the deletion. Retried like put, at most once in
        effect."""
        res, _ = self._mutating(RETRY_ALWAYS, _KV + "Delete", {"key": key, "lease": lease, "token": str(token)},
                                timeout)
        return u64(res.get("revision"))

    # -- cluster ---------------------------------------------------------

    def status(self, *, timeout: Optional[float] = None) -> Status:
        """status returns the view of the first endpoint that answers."""
        answered: List[str] = []

        def attempt(ep: Endpoint, t: float) -> Dict[str, Any]:
            res, cid = _wire.unary(ep, _CLUSTER + "Status", {}, self._headers, t, None)
            self._check_cluster(ep, cid)
            answered.append(ep.addr)
            return res

        r = self._call(RETRY_ALWAYS, timeout, attempt)
        f = _field
        return Status(endpoint=answered[-1], node_id=f(r, "node_id", ""), state=f(r, "state", ""),
                      leader_id=f(r, "leader_id", ""), leader_address=f(r, "leader_address", ""),
                      term=u64(f(r, "term")), applied_index=u64(f(r, "applied_index")),
                      cluster_id=f(r, "cluster_id", ""), last_token=u64(f(r, "last_token")),
                      leases=u64(f(r, "leases")), min_ttl=parse_duration(f(r, "min_ttl")),
                      members=[Member(f(m, "id", ""), f(m, "raft_address", ""), f(m, "api_address", ""),
                                      f(m, "suffrage", ""), bool(f(m, "leader"))) for m in f(r, "members") or []])

    def transfer_leadership(self, node_id: str = "", *, timeout: Optional[float] = None) -> str:
        """transfer_leadership asks the leader to hand over to node_id ("":
        raft picks the most up-to-date follower) and returns the new
        leader's ID. Needs the admin role. Not retried once possibly
        delivered."""
        res, _ = self._unary(RETRY_UNSENT, _CLUSTER + "TransferLeadership", {"node_id": node_id}, timeout)
        return _field(res, "leader_id", "")

    # -- watch -----------------------------------------------------------

    def _open_watch(self, prefix: str, timeout: Optional[float],
                    canceller: Optional[Canceller]) -> Tuple[_wire.Stream, Optional[Dict[str, Any]]]:
        def attempt(ep: Endpoint, t: float) -> Tuple[_wire.Stream, Optional[Dict[str, Any]]]:
            s = _wire.open_stream(ep, _LEASE + "Watch", {"prefix": prefix}, self._headers, t)
            try:
                if canceller is not None:
                    canceller.add(s.conn)
                self._check_cluster(ep, s.cluster_id)
                first = s.next_msg()
                if first is None:
                    raise http.client.HTTPException("client: watch ended before its first event")
                if s.conn.sock is not None:
                    s.conn.sock.settimeout(None)
                return s, first
            except BaseException as e:
                if canceller is not None:
                    canceller.remove(s.conn)
                s.close()
                if isinstance(e, TenureError) and getattr(e, "from_server", False) and s.cluster_id:
                    e.cluster_id = s.cluster_id  # type: ignore[attr-defined]
                raise
        return self._call(RETRY_ALWAYS, timeout, attempt, canceller=canceller)

    def watch(self, prefix: str = "", *, timeout: Optional[float] = None) -> "Watch":
        """watch streams the leases whose names start with prefix: first
        the live ones ("current"), then "synced", then every grant,
        release and expiry in commit order. It returns once the first
        event arrived from some endpoint, retrying like the other calls; a
        bad prefix raises here. If the stream breaks, the watch opens
        again on the next endpoint that answers, announced by a "reset"
        event followed by the current state again. Iterate it; close()
        (from any thread) ends the iteration."""
        canceller = Canceller()
        stream, first = self._open_watch(prefix, timeout, canceller)
        return Watch(self, prefix, stream, first, canceller)

    def session(self, **kwargs: Any) -> "Any":
        """session starts a Session on this client (see tenure.Session)."""
        from .session import Session
        return Session(self, **kwargs)


def _field(d: Dict[str, Any], name: str, default: Any = None) -> Any:
    """_field reads a field of a JSON message by its .proto name (the
    server's spelling) or its lowerCamelCase JSON name."""
    if name in d:
        return d[name]
    head, *rest = name.split("_")
    return d.get(head + "".join(w.title() for w in rest), default)


def _kv(r: Dict[str, Any]) -> KV:
    return KV(key=r.get("key", ""), value=_wire.b64decode(r.get("value")), lease=r.get("lease", ""),
              token=u64(r.get("token")), revision=u64(r.get("revision")))


def _describe(e: BaseException) -> str:
    if isinstance(e, socket.timeout):
        return "attempt timed out"
    return "%s: %s" % (type(e).__name__, e) if str(e) else type(e).__name__


def _event(msg: Optional[Dict[str, Any]]) -> WatchEvent:
    ev = (msg or {}).get("event") or {}
    t = _EVENT_TYPES.get(ev.get("type"), "synced")
    g = _grant(ev["lease"], 0.0) if ev.get("lease") else None
    return WatchEvent(type=t, grant=g, index=u64(ev.get("index")), reason=ev.get("reason", ""))


class Watch:
    """Watch is a running watch: iterate it for WatchEvents. close() ends
    it from any thread; so does leaving a with block."""

    def __init__(self, client: Client, prefix: str, stream: _wire.Stream, first: Optional[Dict[str, Any]],
                 canceller: Canceller):
        self._c = client
        self._prefix = prefix
        self._stream = stream
        self._first = first
        self._canceller = canceller

    def close(self) -> None:
        # Shuts the stream's socket down; the iterating thread, if any,
        # sees the end and closes the connection itself.
        self._canceller.cancel()

    @property
    def closed(self) -> bool:
        return self._canceller.cancelled()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            yield from self._events()
        finally:
            self._canceller.remove(self._stream.conn)
            self._stream.close()

    def __del__(self) -> None:
        try:
            self._stream.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _events(self) -> Iterator[WatchEvent]:
        backoff = self._c.retry_backoff
        while True:
            if self._first is not None:
                first, self._first = self._first, None
                yield _event(first)
            events = 0
            err: Optional[BaseException] = None
            try:
                while True:
                    m = self._stream.next_msg()
                    if m is None:
                        break
                    events += 1
                    yield _event(m)
            except (OSError, http.client.HTTPException, ValueError, AttributeError) as e:
                # AttributeError: http.client reading a connection that
                # close() shut down from another thread.
                err = e
            except TenureError as e:
                if e.code != "unavailable" and e.code not in ("deadline_exceeded", "canceled", "internal"):
                    self._canceller.remove(self._stream.conn)
                    self._stream.close()
                    raise
                err = e
            self._canceller.remove(self._stream.conn)
            self._stream.close()
            if self._canceller.cancelled():
                return
            if events == 0:
                # A stream that broke at once is not reopened in a tight loop.
                if self._canceller.event.wait(backoff):
                    return
                backoff = min(2 * backoff, self._c.max_retry_backoff)
            else:
                backoff = self._c.retry_backoff
            try:
                self._stream, self._first = self._c._open_watch(self._prefix, None, self._canceller)
            except CanceledError:
                return
            if self._canceller.cancelled():
                self._stream.close()
                return
            yield WatchEvent(type="reset")
