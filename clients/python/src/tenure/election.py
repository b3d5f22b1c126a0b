"""Leader election on sessions, in the shape of the Go election.Run, and
observe."""

import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, TypeVar

from .client import Client
from .errors import LostError, SessionClosedError, TenureError
from .session import Lease, Session

T = TypeVar("T")


@dataclass(frozen=True)
class Leader:
    """Leader is a holder of a lease, as observe reports it."""
    name: str
    holder: str
    #: The fencing token of the leader's grant.
    token: int


class Observation:
    """Observation iterates the leaders of one name; close() ends it from
    any thread (so does a with block)."""

    def __init__(self, client: Client, name: str, timeout: Optional[float] = None):
        self.name = name
        # Opened here, so a bad name or an unreachable cluster raises at once.
        self._watch = client.watch(name, timeout=timeout)

    def close(self) -> None:
        self._watch.close()

    def __enter__(self) -> "Observation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Leader]:
        last = 0
        try:
            for ev in self._watch:
                if ev.type not in ("current", "granted") or ev.grant is None:
                    continue
                # The watch is by prefix: skip longer names.
                if ev.grant.name != self.name or ev.grant.token <= last:
                    continue
                last = ev.grant.token
                yield Leader(self.name, ev.grant.holder, ev.grant.token)
        finally:
            self._watch.close()


def observe(client: Client, name: str, timeout: Optional[float] = None) -> Observation:
    """observe reports the leaders of name: first the current one, if any,
    then every new grant of name in commit order, each with its holder and
    token. Renewals and re-acquires by the same holder are not new
    leaders. The watch behind it fails over and reconnects by itself;
    leaders that came and went while it was disconnected are skipped."""
    return Observation(client, name, timeout)


def elect(client: Client, name: str, fn: Callable[[Lease], T], *, stop: Optional[threading.Event] = None,
          on_started: Optional[Callable[[Lease], None]] = None,
          on_stopped: Optional[Callable[[Lease], None]] = None, **session: Any) -> Optional[T]:
    """elect campaigns for name and, whenever it leads, calls fn(lease).
    lease.done is set when the leadership is lost or stop is set: at the
    lease's local deadline at the latest, before the server could grant
    the lease to anyone else, so fn must stop acting on the leadership
    then (lease.wait() or lease.done.wait(t) in its loop); lease.token
    fences its writes in case it does not stop in time.

    When the leadership is lost, elect campaigns again and calls fn again
    once it leads (with a larger token); fn's result of a lost term is
    dropped. If fn returns while this holder still leads, elect releases
    the lease and returns fn's result (or raises its exception): a job run
    under a lock. When stop is set, elect releases the lease (after fn
    returned) and returns None. session holds Session's settings (holder,
    ttl, ...)."""
    if not name:
        raise TenureError("election: elect needs a name")
    s = Session(client, **session)
    finished = threading.Event()
    watcher: Optional[threading.Thread] = None
    if stop is not None:
        # Setting stop ends a campaign under way and the current term.
        def watch_stop() -> None:
            while not finished.is_set():
                if stop.wait(0.05):
                    s._stop_all()
                    return
        watcher = threading.Thread(target=watch_stop, name="tenure-elect-stop", daemon=True)
        watcher.start()
    try:
        while True:
            try:
                lease = s.campaign(name)
            except SessionClosedError:
                if stop is not None and stop.is_set():
                    return None
                raise
            if on_started is not None:
                on_started(lease)
            try:
                result = fn(lease)
                exc: Optional[BaseException] = None
            except Exception as e:  # noqa: BLE001 - handed back to the caller below
                result, exc = None, e
            if not isinstance(lease.error, LostError):
                try:
                    lease.release(timeout=s.renew_timeout)
                except TenureError:
                    pass
            if on_stopped is not None:
                on_stopped(lease)
            if stop is not None and stop.is_set():
                return None
            if isinstance(lease.error, LostError):
                continue
            if exc is not None:
                raise exc
            return result
    finally:
        finished.set()
        if watcher is not None:
            watcher.join()  # it may be releasing the lease after stop
        try:
            s.close()
        except TenureError:
            pass
