"""tenure: a client for the tenure lease service, standard library only.

    import tenure

    c = tenure.Client(["127.0.0.1:7400"])
    with c.session(ttl=10) as s:
        with s.acquire("jobs/nightly") as lease:
            lease.put("reports/latest", b"v1")   # fenced by lease.token

See README.md for the rules: stop acting when lease.done is set, and pass
lease.token with every write.
"""

from .client import (KV, RETRY_ALWAYS, RETRY_UNSENT, Client, Grant, Member, RenewResult, Status, Term, Watch,
                     WatchEvent)
from .election import Leader, Observation, elect, observe
from .errors import (CanceledError, DeadlineExceededError, DuplicateError, IndeterminateError,
                     InvalidArgumentError, LeaseHeldError, LostError, NotAppliedError, NotFoundError,
                     HandedOffError, OtherClusterError, PermissionDeniedError, ReleasedError, RevokedError,
                     SessionClosedError, StaleTokenError, TenureError, TLSError, UnauthenticatedError,
                     UnavailableError)
from .session import AT_RISK, HELD, LOST, RELEASED, Lease, Session, default_holder

__version__ = "0.1.0"

__all__ = [
    "Client", "Grant", "KV", "Member", "RenewResult", "Status", "Term", "Watch", "WatchEvent",
    "RETRY_ALWAYS", "RETRY_UNSENT",
    "Session", "Lease", "default_holder", "HELD", "AT_RISK", "LOST", "RELEASED",
    "Leader", "Observation", "elect", "observe",
    "TenureError", "InvalidArgumentError", "LeaseHeldError", "StaleTokenError", "RevokedError", "NotFoundError",
    "PermissionDeniedError", "UnauthenticatedError", "NotAppliedError", "DeadlineExceededError",
    "CanceledError", "TLSError", "UnavailableError", "IndeterminateError", "OtherClusterError",
    "LostError", "ReleasedError", "HandedOffError", "SessionClosedError", "DuplicateError",
]
