"""Sessions and their leases: the rules of the Go package election.

A Session is one holder on one client. It renews all of its leases
together, in one request, every renew_interval after the SEND time of the
last successful renewal. Each lease has a local deadline on this
process's monotonic clock::

    deadline = send time of the last successful grant or renewal
               + ttl * (1 - drift) - margin

and its ``done`` event is set at that deadline at the latest, if no
renewal succeeded: margin (plus the drift allowance) before the server
could expire the lease and grant it to anyone else. Code that acts under
the lease must stop when ``done`` is set, and pass ``lease.token`` with
every write for the case where a pause outlasts even that.
"""

import os
import socket
import threading
from typing import Any, Callable, Dict, List, Optional, Union

from ._wire import Canceller, monotonic
from .client import Client, Grant, RenewResult
from .errors import (DuplicateError, HandedOffError, LeaseHeldError, LostError, NotFoundError, ReleasedError, RevokedError,
                     SessionClosedError, StaleTokenError, TenureError)

# How long one waiting acquire queues on the server before it asks again.
_ACQUIRE_WAIT = 30.0

HELD = "held"
AT_RISK = "at-risk"
LOST = "lost"
RELEASED = "released"


def default_holder() -> str:
    """default_holder returns HOST-PID-RANDOM, new for every call."""
    return "%s-%d-%s" % (socket.gethostname() or "python", os.getpid(), os.urandom(4).hex())


def _gone(err: BaseException) -> bool:
    return isinstance(err, (StaleTokenError, NotFoundError))



class _LeaseDone(threading.Event):
    """The done event of a lease: set by the session's watchdog thread at
    the local deadline, and also by any look at it once the deadline has
    passed. After a pause (SIGSTOP, a stalled VM) the process's threads
    resume in no particular order; the first ``is_set()`` or ``wait()``
    must already say the lease is over, not only once the watchdog ran."""

    def __init__(self, lease: "Lease"):
        super().__init__()
        self._lease = lease

    def is_set(self) -> bool:
        if not super().is_set():
            with self._lease._s._cond:  # re-entrant: a Condition's RLock
                self._lease._expire_if_due()
        return super().is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        if self.is_set():
            return True
        return super().wait(timeout)

class _TooLate(Exception):
    pass


class Lease:
    """Lease is one lease held by a Session: its grant, an event set as
    soon as it may no longer be acted on, and its renewal state.

    Use it as a context manager to release it at the end of a block::

        with session.acquire("jobs/nightly") as lease:
            ...  # stop when lease.done is set; pass lease.token
    """

    def __init__(self, session: "Session", g: Grant, deadline: float):
        self._s = session
        self.name = g.name
        self.holder = session.holder
        #: The fencing token of the grant. Pass it with every write.
        self.token = g.token
        self.ttl = g.ttl or session.ttl
        #: Set when the lease ends: at the local deadline at the latest if
        #: renewals fail, at once if the server reports the grant gone,
        #: or on release. ``error`` then says why.
        self.done: threading.Event = _LeaseDone(self)
        self._state = HELD
        self._sent_at = g.sent_at
        self._deadline = deadline
        self._err: Optional[TenureError] = None
        self.orphaned = False

    @property
    def state(self) -> str:
        """held, at-risk (the last renewal failed; still live), lost or
        released."""
        with self._s._cond:
            self._expire_if_due()
            return self._state

    @property
    def deadline(self) -> float:
        """The local deadline (time.monotonic())."""
        return self._deadline

    @property
    def last_renewal(self) -> float:
        """The send time of the last successful grant or renewal."""
        return self._sent_at

    @property
    def error(self) -> Optional[TenureError]:
        """None while held; the last renewal error while at risk; a
        LostError or ReleasedError once ended."""
        return self._err

    def remaining(self) -> float:
        """Seconds left before the local deadline (0 once ended)."""
        if self.done.is_set():
            return 0.0
        return max(0.0, self._deadline - monotonic())

    def wait(self, timeout: Optional[float] = None) -> bool:
        """wait blocks until the lease ends or timeout passes; it returns
        whether the lease ended."""
        return self.done.wait(timeout)

    # -- state changes, under the session's lock ---------------------------

    def _end(self, state: str, err: TenureError) -> None:
        self._state = state
        self._err = err
        self.done.set()
        self._s._cond.notify_all()

    def _expire_if_due(self) -> None:
        if self._state in (LOST, RELEASED) or monotonic() < self._deadline:
            return
        reason = "no renewal confirmed within %.3fs of the last successful one being sent" % (
            self._deadline - self._sent_at)
        if self.orphaned:
            reason += " (the session stopped renewing)"
        elif self._err is not None:
            reason += " (last error: %s)" % self._err
        self._end(LOST, LostError(self.name, self.token, reason))
        self._s._forget(self)

    def _renewed(self, g: Grant) -> None:
        if self._state in (LOST, RELEASED):
            return
        if monotonic() >= self._deadline:
            # The deadline passed while the renewal was under way: the
            # holder must already have stopped.
            self._expire_if_due()
            return
        d = self._s._deadline_of(g)
        if d > self._deadline:
            self._sent_at = g.sent_at
            self._deadline = d
        self._state = HELD
        self._err = None
        self._s._cond.notify_all()

    def _at_risk(self, err: TenureError) -> None:
        if self._state in (LOST, RELEASED):
            return
        self._err = err
        self._state = AT_RISK

    def _lose(self, err: TenureError) -> None:
        if self._state in (LOST, RELEASED):
            return
        if isinstance(err, RevokedError):
            why = "revoked by an operator (%s)" % err.reason
        else:
            why = "the server no longer has this grant: %s" % err
        lost = LostError(self.name, self.token, why)
        lost.__cause__ = err
        self._end(LOST, lost)
        self._s._forget(self)

    # -- the holder's calls ------------------------------------------------

    def check(self) -> None:
        """check raises why the lease ended (LostError, ReleasedError), or
        returns while it is live. A lease whose deadline has passed ends
        here and now, even if the session's timer has not run yet."""
        with self._s._cond:
            self._expire_if_due()
            if self._state in (LOST, RELEASED):
                assert self._err is not None
                raise self._err

    def release(self, timeout: Optional[float] = None) -> None:
        """release ends the lease: done is set (error a ReleasedError),
        renewals stop, and the server frees the lease so the next holder
        gets it at once. done is set before the request is sent. Releasing
        a lease the server no longer has returns quietly; an
        IndeterminateError means the release may have applied."""
        with self._s._cond:
            if self._state == RELEASED:
                return
            if self._state != LOST:
                self._end(RELEASED, ReleasedError(self.name))
            self._s._forget(self)
        try:
            self._s.client.release(self.name, self.token, timeout=timeout)
        except (StaleTokenError, NotFoundError):
            pass

    resign = release

    def handoff(self, to: str = "", timeout: Optional[float] = None) -> Grant:
        """handoff ends this term and hands the lease to the waiting
        candidate ``to``, or to the first in line: done is set first
        (error a HandedOffError, which is a ReleasedError) and renewals
        stop, then the handoff is sent; the server ends the grant and
        grants the candidate, with a larger token, at the same cluster time
        (no gap, no overlap), and only then does the candidate's campaign
        return. Returns the new grant. If the server refuses (no such
        candidate: NotFoundError) the term has ended all the same: the
        grant is released and the error raised. A lease that already
        ended raises why it ended."""
        with self._s._cond:
            if self._state in (LOST, RELEASED):
                assert self._err is not None
                raise self._err
            self._end(RELEASED, HandedOffError(self.name))
            self._s._forget(self)
        try:
            return self._s.client.handoff(self.name, self.token, to, timeout=timeout)
        except StaleTokenError:
            raise
        except TenureError:
            try:
                self._s.client.release(self.name, self.token, timeout=timeout)
            except TenureError:
                pass
            raise

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.release(timeout=self._s.renew_timeout)
        except TenureError:
            if exc[0] is None:
                raise

    def put(self, key: str, value: Union[bytes, str]) -> int:
        """put writes value under key in the fenced store with this lease's
        token and returns the store revision. Once the lease ended locally
        it raises why, without a request. The server refuses the write
        (StaleTokenError) unless the token is the current, unexpired grant
        and no newer token wrote key."""
        self.check()
        return self._s.client.put(key, value, self.name, self.token)

    def delete(self, key: str) -> int:
        """delete removes key, under the rules of put."""
        self.check()
        return self._s.client.delete(key, self.name, self.token)

    def get(self, key: str) -> Optional[bytes]:
        """get reads key for a read-modify-write under this lease: it
        raises if the lease ended, or StaleTokenError if a newer grant
        than this one wrote the key (this holder's term is over); None if
        the key holds no value."""
        self.check()
        try:
            kv = self._s.client.kv_get(key)
        except NotFoundError:
            return None
        if kv.token > self.token:
            # The store would refuse this grant's write to key anyway.
            raise StaleTokenError('lease: %s was written by token %d (lease "%s"), newer than this grant\'s %d'
                                  % (key, kv.token, kv.lease, self.token), "failed_precondition")
        self.check()
        return kv.value

    def update(self, key: str, fn: Callable[[Optional[bytes]], Union[bytes, str, None]]) -> Optional[int]:
        """update is a fenced read-modify-write of key: it reads the value
        (None if none) under this lease as get does, calls fn with it, and
        writes fn's result fenced by this lease's token (fn returning None
        deletes the key). It returns the store revision of the write (None
        when fn returned None and there was nothing to delete).

        It is safe where a read outside the fence is not: the read happens
        while this grant is live and is checked against its token, and the
        write is refused unless the grant is still the current one, so no
        late write of an earlier holder can land between them unseen, and
        no value written after a newer holder took over is overwritten. Do
        not use it on a semaphore (limit > 1): its slots are live at once."""
        old = self.get(key)
        new = fn(old)
        if new is None:
            if old is None:
                return None
            return self.delete(key)
        return self.put(key, new)


class Session:
    """Session is one holder on one client: it acquires leases for that
    holder and renews them all together, one request for all.

    holder: the holder name on the server; two sessions must not share
    one. Default HOST-PID-RANDOM. ttl: how long a grant or renewal keeps a
    lease, in seconds (default 10; the server rejects TTLs below its
    minimum, 2x its election timeout). renew_interval: how long after the
    send time of the last successful renewal the next is sent (default
    ttl/3). renew_timeout: a renewal not confirmed within it has failed
    (default renew_interval/2). drift: how much faster the server's clock
    may run than this machine's (default 0.01). margin: kept between the
    local deadline and the earliest expiry on the server (default
    max(ttl/10, 0.1)). lock_delay: a lock-delay for every grant of the
    session, in seconds (default 0: none; see Client.acquire); a
    lock_delay of ttl or more also keeps a revoked term from overlapping
    the next holder's. priority (0 to 1000000) goes with every acquire:
    the queue stays first come, first served, but a waiting session of a
    higher priority than the holder's asks the holder to hand over, and a
    holder's session does so (Lease.handoff) at the renewal that reports
    it, unless keep_on_handoff_request is set.

    close() releases every lease (their done events are set first) and
    stops renewing; orphan() only stops renewing, so the leases run out
    at their deadlines. A with block closes the session.
    """

    def __init__(self, client: Client, *, holder: Optional[str] = None, ttl: float = 10.0,
                 renew_interval: Optional[float] = None, renew_timeout: Optional[float] = None,
                 drift: float = 0.01, margin: Optional[float] = None, lock_delay: float = 0.0,
                 priority: int = 0, keep_on_handoff_request: bool = False):
        if client is None:
            raise TenureError("election: a client is required")
        if not ttl > 0:
            raise TenureError("election: ttl must be positive, got %r" % ttl)
        self.client = client
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.renew_interval = renew_interval if renew_interval is not None else self.ttl / 3
        self.renew_timeout = renew_timeout if renew_timeout is not None else self.renew_interval / 2
        self.drift = drift
        self.margin = margin if margin is not None else max(self.ttl / 10, 0.1)
        if self.renew_interval <= 0 or self.renew_timeout <= 0 or self.margin < 0:
            raise TenureError("election: renew_interval and renew_timeout must be positive, margin not negative")
        if not 0 <= drift < 0.5:
            raise TenureError("election: drift must be in [0, 0.5), got %r" % drift)
        if not lock_delay >= 0:
            raise TenureError("election: lock_delay must not be negative, got %r" % lock_delay)
        self.lock_delay = float(lock_delay)
        if not 0 <= priority <= 1000000:
            raise TenureError("election: priority must be in [0, 1000000], got %r" % priority)
        self.priority = int(priority)
        self.keep_on_handoff_request = keep_on_handoff_request
        safe = self._safe(self.ttl)
        if self.renew_interval >= safe:
            raise TenureError("election: renew_interval %.3fs is not shorter than the %.3fs a lease stays safe "
                              "without renewal (ttl*(1-drift)-margin)" % (self.renew_interval, safe))
        self._cond = threading.Condition()
        self._leases: Dict[str, Lease] = {}
        self._pending: set = set()
        self._used: Dict[str, int] = {}
        self._lost_tokens: Dict[str, int] = {}
        self._cancellers: set = set()
        self._closed = False
        self._retry_at = 0.0
        self._threads: List[threading.Thread] = []

    def _safe(self, d: float) -> float:
        return d * (1 - self.drift) - self.margin

    def lifetime(self) -> float:
        """How long a lease stays safe to act on after the send time of its
        last successful grant or renewal: ttl*(1-drift) - margin."""
        return self._safe(self.ttl)

    def _deadline_of(self, g: Grant) -> float:
        d = g.ttl
        if g.remaining > 0 and (d <= 0 or g.remaining < d):
            d = g.remaining
        if d <= 0:
            d = self.ttl
        return g.sent_at + self._safe(d)

    @property
    def closed(self) -> bool:
        return self._closed

    def leases(self) -> List[Lease]:
        """The live leases of the session, by name."""
        with self._cond:
            return [self._leases[n] for n in sorted(self._leases)]

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- acquiring -----------------------------------------------------------

    def acquire(self, name: str, *, wait: bool = True, timeout: Optional[float] = None,
                limit: int = 0) -> Lease:
        """acquire returns once the lease name is granted to the session's
        holder. With wait (the default) it queues on the server (first
        come, first served), so the grant follows the previous holder's
        release or expiry without polling, until timeout (None: no limit)
        passes (LeaseHeldError); without wait it asks once and raises
        LeaseHeldError if another holder has the lease. After a wait it
        confirms the grant with a renewal and bases the local deadline on
        that renewal's send time. Every term has its own token: a grant
        not larger than one this session held before is released and asked
        for again."""
        with self._cond:
            if self._closed:
                raise SessionClosedError()
            if name in self._pending or name in self._leases:
                raise DuplicateError(name)
            self._pending.add(name)
            canceller = Canceller()
            self._cancellers.add(canceller)
        try:
            return self._acquire(name, wait, timeout, limit, canceller)
        finally:
            with self._cond:
                self._pending.discard(name)
                self._cancellers.discard(canceller)

    campaign = acquire

    def try_acquire(self, name: str, *, limit: int = 0) -> Lease:
        """try_acquire asks for the lease once; if another holder has it,
        it raises LeaseHeldError naming the holder."""
        return self.acquire(name, wait=False, limit=limit)

    def _acquire(self, name: str, wait: bool, timeout: Optional[float], limit: int,
                 canceller: Canceller) -> Lease:
        until = monotonic() + timeout if timeout is not None else None
        old = self._lost_tokens.get(name)
        if old is not None:
            # The last term was lost here, before the server's expiry: free
            # it, so the new term gets a new token at once.
            self._release_quietly(name, old)
        while True:
            if canceller.cancelled() or self._closed:
                raise SessionClosedError()
            wt = _ACQUIRE_WAIT
            if until is not None:
                wt = min(wt, until - monotonic())
                if wait and wt <= 0:
                    wait = False  # no time left: one plain try
            try:
                g = self.client.acquire(name, self.holder, self.ttl, wait=wait, wait_timeout=wt if wait else None,
                                        limit=limit, lock_delay=self.lock_delay, priority=self.priority,
                                        canceller=canceller)
            except LeaseHeldError:
                if self._closed:
                    raise SessionClosedError() from None
                if wait and (until is None or monotonic() < until):
                    continue  # the server's wait ran out: queue again
                raise
            except TenureError:
                if self._closed or canceller.cancelled():
                    raise SessionClosedError() from None
                raise
            if g.token <= self._used.get(name, 0):
                # A renewal of an earlier term's grant: release, ask again.
                self._release_quietly(name, g.token)
                if canceller.event.wait(self._retry_pause()):
                    raise SessionClosedError()
                continue
            try:
                return self._establish(g, wait, canceller)
            except SessionClosedError:
                raise
            except TenureError as e:
                if self._closed:
                    raise SessionClosedError() from None
                if _gone(e) and wait and (until is None or monotonic() < until):
                    continue  # lost again before it was confirmed
                raise

    def _establish(self, g: Grant, confirm: bool, canceller: Canceller) -> Lease:
        while True:
            if confirm:
                try:
                    r = self.client.renew([(g.name, g.token)], timeout=self.renew_timeout * 4,
                                          canceller=canceller)[0]
                    if r.error is not None:
                        raise r.error
                    assert r.grant is not None
                    g = r.grant
                except TenureError as e:
                    if not _gone(e):
                        self._release_quietly(g.name, g.token)
                    raise
            try:
                return self._register(g)
            except _TooLate:
                confirm = True

    def _register(self, g: Grant) -> Lease:
        deadline = self._deadline_of(g)
        if monotonic() >= deadline:
            raise _TooLate()
        with self._cond:
            l = Lease(self, g, deadline)
            if self._closed:
                l._end(RELEASED, ReleasedError(l.name))
                closed = True
            else:
                closed = False
                self._leases[l.name] = l
                self._used[l.name] = max(self._used.get(l.name, 0), l.token)
                self._lost_tokens.pop(l.name, None)
                self._start_threads()
                self._cond.notify_all()
        if closed:
            self._release_quietly(g.name, g.token)
            raise SessionClosedError()
        return l

    def _release_quietly(self, name: str, token: int) -> None:
        try:
            self.client.release(name, token, timeout=self.renew_timeout)
        except TenureError:
            pass  # the grant runs out on the server

    def _forget(self, l: Lease) -> None:
        # Under self._cond.
        if self._leases.get(l.name) is l:
            del self._leases[l.name]
        if l._state == LOST:
            self._lost_tokens[l.name] = l.token
        elif self._lost_tokens.get(l.name) == l.token:
            del self._lost_tokens[l.name]
        self._cond.notify_all()

    def _retry_pause(self) -> float:
        return min(max(self.renew_interval / 10, 0.01), 0.25)

    # -- closing -----------------------------------------------------------

    def close(self, timeout: Optional[float] = None) -> None:
        """close stops renewing and releases every lease of the session
        (their done events are set first). Acquires under way raise
        SessionClosedError. A closed session cannot be reused."""
        errs = []
        for l in self._shutdown():
            try:
                l.release(timeout=timeout if timeout is not None else self.renew_timeout)
            except TenureError as e:
                errs.append('release "%s": %s' % (l.name, e))
        self._join()
        if errs:
            raise TenureError("; ".join(errs))

    def orphan(self) -> None:
        """orphan stops renewing without releasing: each lease stays live
        until its local deadline (then it is lost, done set), and on the
        server until its TTL runs out."""
        for l in self._shutdown():
            l.orphaned = True
        # The deadline thread goes on until the orphaned leases are lost.

    def _shutdown(self) -> List[Lease]:
        with self._cond:
            self._closed = True
            ls = [self._leases[n] for n in sorted(self._leases)]
            cancellers = list(self._cancellers)
            self._orphans = list(ls)
            self._leases.clear()
            self._cond.notify_all()
        for c in cancellers:
            c.cancel()
        return ls

    def _stop_all(self) -> None:
        """_stop_all ends the session for elect's stop: acquires under way
        raise SessionClosedError, and each lease's done is set (released)."""
        for l in self._shutdown():
            with self._cond:
                if l._state not in (LOST, RELEASED):
                    l._end(RELEASED, ReleasedError(l.name))
            self._release_quietly(l.name, l.token)

    def _join(self) -> None:
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(self.renew_timeout * 4 + 1)

    # -- background threads ------------------------------------------------

    def _start_threads(self) -> None:
        # Under self._cond.
        if self._threads:
            return
        for target, what in ((self._renew_loop, "renew"), (self._deadline_loop, "deadlines")):
            t = threading.Thread(target=target, name="tenure-session-%s-%s" % (what, self.holder), daemon=True)
            self._threads.append(t)
            t.start()

    def _deadline_loop(self) -> None:
        """Sets each lease's done event at its deadline, however long a
        renewal call blocks."""
        with self._cond:
            while True:
                live = list(self._leases.values())
                if self._closed:
                    live = [l for l in getattr(self, "_orphans", []) if l.orphaned and not l.done.is_set()]
                    if not live:
                        return
                for l in live:
                    l._expire_if_due()
                live = [l for l in live if not l.done.is_set()]
                if live:
                    self._cond.wait(max(0.0, min(l._deadline for l in live) - monotonic()))
                elif self._closed:
                    return
                else:
                    self._cond.wait()

    def _renew_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    if self._leases:
                        nxt = min(l._sent_at for l in self._leases.values()) + self.renew_interval
                        nxt = max(nxt, self._retry_at)
                        wait = nxt - monotonic()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                ls = [self._leases[n] for n in sorted(self._leases)]
                canceller = Canceller()
                self._cancellers.add(canceller)
            self._renew_all(ls, canceller)
            with self._cond:
                self._cancellers.discard(canceller)

    def _renew_all(self, ls: List[Lease], canceller: Canceller) -> None:
        res: Optional[List[RenewResult]] = None
        err: Optional[TenureError] = None
        try:
            res = self.client.renew([(l.name, l.token) for l in ls], timeout=self.renew_timeout,
                                    canceller=canceller)
        except Exception as e:  # noqa: BLE001 - any failure leaves the leases at risk, never the thread dead
            err = TenureError("renewal not confirmed within %.3fs: %s" % (self.renew_timeout, e))
            err.__cause__ = e
        asked = []
        with self._cond:
            if self._closed:
                return
            failed = err is not None
            for i, l in enumerate(ls):
                if err is not None:
                    l._at_risk(err)
                    continue
                assert res is not None
                r = res[i]
                if r.error is None and r.grant is not None:
                    l._renewed(r.grant)
                    if r.handoff_requested and not self.keep_on_handoff_request and r.grant.limit <= 1:
                        asked.append((l, r.handoff_requested))
                elif r.error is not None and _gone(r.error):
                    l._lose(r.error)
                else:
                    l._at_risk(r.error or TenureError("election: empty renewal result"))
                    failed = True
            self._retry_at = monotonic() + self._retry_pause() if failed else 0.0
            self._cond.notify_all()
        for l, to in asked:
            # A waiter of a higher priority asks for the lease: hand over,
            # off the renewing thread.
            threading.Thread(target=_handoff_quietly, args=(l, to, self.renew_timeout), daemon=True).start()


def _handoff_quietly(lease: Lease, to: str, timeout: float) -> None:
    try:
        lease.handoff(to, timeout=timeout)
    except TenureError:
        pass  # the term has ended all the same
