"""Errors of the tenure client.

The server's Connect errors are mapped to the classes below with the same
table the Go client uses (internal/wire), so ``except StaleTokenError``
works across the wire and the server's message is kept::

    invalid_argument                          InvalidArgumentError
    failed_precondition, reason LEASE_HELD    LeaseHeldError (holder, token, remaining)
    failed_precondition, reason STALE_TOKEN   StaleTokenError, or RevokedError (a StaleTokenError)
                                              when the detail has a revoke_reason
    failed_precondition, reason NOT_APPLIED   NotAppliedError (cause of an IndeterminateError)
    not_found                                 NotFoundError
    permission_denied                         PermissionDeniedError
    unauthenticated                           UnauthenticatedError
    deadline_exceeded                         DeadlineExceededError
    canceled                                  CanceledError
    anything else                             TenureError with its code

Every class derives from TenureError, whose ``code`` is the Connect code
of the server's answer (None when the server did not answer).
"""

from typing import Optional


class TenureError(Exception):
    """Base class of every error this package raises."""

    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        self.message = message
        #: The Connect code of the server's answer ("failed_precondition",
        #: ...), or None when the server did not answer.
        self.code = code


class InvalidArgumentError(TenureError):
    """The server rejected the request as malformed: an empty or oversized
    name, a TTL out of bounds, a value over the limit."""


class LeaseHeldError(TenureError):
    """Another holder has a live grant of the lease (also when a waiting
    acquire timed out). ``holder``, ``token`` and ``remaining`` (seconds)
    describe that grant. With lock_delay set the name is in a lock-delay:
    holder and token are the grant that expired or was revoked, remaining
    the seconds until the delay ends, and ended how long ago the grant
    ended (ended + remaining is its lock-delay)."""

    def __init__(self, message: str, code: Optional[str] = None, lease: str = "",
                 holder: str = "", token: int = 0, remaining: float = 0.0, limit: int = 0,
                 lock_delay: bool = False, ended: float = 0.0):
        super().__init__(message, code)
        self.lease = lease
        self.holder = holder
        self.token = token
        self.remaining = remaining
        self.limit = limit
        self.lock_delay = lock_delay
        self.ended = ended


class StaleTokenError(TenureError):
    """The token is not the current, unexpired grant of the lease
    (released, expired, or granted again since), or a newer token already
    wrote the key."""


class RevokedError(StaleTokenError):
    """An operator revoked the grant (Client.revoke), for ``reason``. A
    StaleTokenError too: the token fences nothing. A session's lease ends
    with a LostError whose __cause__ is this error."""

    def __init__(self, message: str, code: Optional[str] = None, lease: str = "", token: int = 0,
                 reason: str = ""):
        super().__init__(message, code)
        self.lease = lease
        self.token = token
        self.reason = reason


class NotFoundError(TenureError):
    """The name has no live lease, or the key holds no value."""


class PermissionDeniedError(TenureError):
    """The caller's principal may not do this: a name outside its roles, or
    a grant that belongs to another principal (only the principal that
    acquired a grant renews, releases or writes with it)."""


class UnauthenticatedError(TenureError):
    """The server did not accept the caller's credentials: no token or
    certificate, or an unknown or revoked token."""


class NotAppliedError(TenureError):
    """The cluster refused a retry of a call whose outcome it no longer
    remembers. The retry had no effect; an earlier attempt may have. Raised
    as the cause of an IndeterminateError."""


class DeadlineExceededError(TenureError):
    """The server reported that the request's deadline passed."""


class CanceledError(TenureError):
    """The server reported that the request was cancelled, or the call was
    cancelled locally (its session closed)."""


class TLSError(TenureError):
    """The TLS handshake failed: a server certificate that does not verify,
    a client certificate the server refused, or TLS spoken to a plain-text
    port. Not retried: another endpoint of the cluster would refuse the
    same certificate."""


class UnavailableError(TenureError):
    """No endpoint could serve the request before the call's timeout
    (unreachable, no leader, no quorum). ``last`` is the last endpoint's
    error; ``other_cluster`` the last answer refused as another
    cluster's, if any."""

    def __init__(self, attempts: int, last: Optional[BaseException],
                 other_cluster: "Optional[OtherClusterError]" = None):
        msg = "client: no endpoint could serve the request (%d attempts, last: %s)" % (attempts, last)
        if other_cluster is not None and not isinstance(last, OtherClusterError):
            msg += "; refused: %s" % other_cluster
        super().__init__(msg, "unavailable")
        self.attempts = attempts
        self.last = last
        self.other_cluster = other_cluster


class IndeterminateError(TenureError):
    """A release, put or delete was possibly delivered but its outcome is
    unknown (the connection broke or the attempt timed out after the
    request was sent), or the cluster refused a retry of a call whose
    outcome it no longer remembers (``__cause__`` is then a
    NotAppliedError). Such requests are not retried: read the state
    (get, kv_get) to find out."""

    def __init__(self, message: str):
        super().__init__("client: the request may or may not have been applied: " + message, "unavailable")


class OtherClusterError(TenureError):
    """An endpoint answered for another cluster than the one the client is
    pinned to (``cluster_id``, or the first cluster that answered). Every
    member sends its cluster's ID with each answer (the Tenure-Cluster-Id
    header); the answer was discarded. Raised when every endpoint answered
    for another cluster."""

    def __init__(self, endpoint: str, expected: str, seen: str):
        super().__init__("client: endpoint %s answered for cluster %s, but this client talks to cluster %s "
                         "(answer discarded)" % (endpoint, seen, expected))
        self.endpoint = endpoint
        self.expected = expected
        self.seen = seen


class LostError(TenureError):
    """A session's lease ended without release: no renewal was confirmed
    before the local deadline, or the server reported the grant gone
    (``__cause__`` is then its StaleTokenError or NotFoundError)."""

    def __init__(self, lease: str, token: int, reason: str):
        super().__init__('election: lease "%s" (token %d) lost: %s' % (lease, token, reason))
        self.lease = lease
        self.token = token
        self.reason = reason


class ReleasedError(TenureError):
    """Why a session's lease ended after release, resign or Session.close."""

    def __init__(self, lease: str):
        super().__init__('election: lease "%s" released' % lease)
        self.lease = lease


class HandedOffError(ReleasedError):
    """Why a session's lease ended after Lease.handoff: a clean end, so a
    ReleasedError too."""

    def __init__(self, lease: str):
        super().__init__(lease)
        self.args = ('election: lease "%s" handed off' % lease,)
        self.message = self.args[0]

    def __str__(self) -> str:
        return self.args[0]


class SessionClosedError(TenureError):
    """acquire or campaign on a session that was closed or orphaned, also
    when that happens while they wait."""

    def __init__(self) -> None:
        super().__init__("election: session closed")


class DuplicateError(TenureError):
    """The session already holds (or is acquiring) the name."""

    def __init__(self, name: str):
        super().__init__('election: the session already holds or is acquiring this lease: "%s"' % name)


# Reasons of the server's ErrorDetail.
REASON_LEASE_HELD = "LEASE_HELD"
REASON_STALE_TOKEN = "STALE_TOKEN"
REASON_NOT_FOUND = "NOT_FOUND"
REASON_FORBIDDEN = "FORBIDDEN"
REASON_NOT_APPLIED = "NOT_APPLIED"
REASON_INDETERMINATE = "INDETERMINATE"

# (code, reason, class): a code shared by several rows needs its reason.
_TABLE = [
    ("invalid_argument", "", InvalidArgumentError),
    ("failed_precondition", REASON_LEASE_HELD, LeaseHeldError),
    ("failed_precondition", REASON_STALE_TOKEN, StaleTokenError),
    ("not_found", REASON_NOT_FOUND, NotFoundError),
    ("permission_denied", REASON_FORBIDDEN, PermissionDeniedError),
    ("failed_precondition", REASON_NOT_APPLIED, NotAppliedError),
    ("unauthenticated", "", UnauthenticatedError),
    ("deadline_exceeded", "", DeadlineExceededError),
    ("canceled", "", CanceledError),
]


def _class_for(code: str, reason: str):
    rows = [r for r in _TABLE if r[0] == code]
    for r in rows:
        if r[1] == reason:
            return r[2]
    if len(rows) == 1:
        return rows[0][2]
    return None


def from_wire(code: str, message: str, detail: Optional[dict] = None) -> TenureError:
    """from_wire returns the error for a Connect error with code, message
    and the decoded ErrorDetail (a dict, see _wire.decode_error_detail)."""
    detail = detail or {}
    cls = _class_for(code, detail.get("reason", ""))
    if cls is None:
        return TenureError(message or code, code)
    if cls is LeaseHeldError:
        return LeaseHeldError(message or "lease: held by another holder", code, lease=detail.get("name", ""),
                              holder=detail.get("holder", ""), token=detail.get("token", 0),
                              remaining=detail.get("remaining", 0.0), limit=detail.get("limit", 0),
                              lock_delay=detail.get("lock_delay", False), ended=detail.get("ended", 0.0))
    if cls is StaleTokenError and detail.get("revoke_reason"):
        return RevokedError(message or "lease: revoked by an operator", code, lease=detail.get("name", ""),
                            token=detail.get("token", 0), reason=detail["revoke_reason"])
    return cls(message or code, code)


def from_reason(reason: str, message: str, revoked: Optional[dict] = None) -> Optional[TenureError]:
    """from_reason returns the error of a per-item failure reported in a
    message (RenewResult.reason and .message), None for success. revoked,
    if given, is {"name", "token", "revoke_reason"} of the result
    (RenewResult.revoke_reason): a STALE_TOKEN is then a RevokedError."""
    if not reason:
        return None
    for code, r, cls in _TABLE:
        if r == reason:
            return from_wire(code, message or reason, dict(revoked or {}, reason=reason))
    return TenureError(message or "wire: unknown failure reason " + reason)
