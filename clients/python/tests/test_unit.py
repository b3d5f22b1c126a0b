"""Unit tests: the wire format, the error table, request IDs and the
session's deadline rules against a fake client (no server)."""

import threading
import time
import unittest

import helpers  # noqa: F401  (puts src/ on sys.path)

import tenure
from tenure import _wire
from tenure.client import Grant, RenewResult, RequestIds, normalize_endpoint


class WireTest(unittest.TestCase):
    def test_durations(self):
        for secs, text in [(0, "0s"), (2, "2s"), (1.5, "1.5s"), (0.001, "0.001s"), (30.25, "30.25s")]:
            self.assertEqual(_wire.duration_str(secs), text)
            self.assertAlmostEqual(_wire.parse_duration(text), secs)
        self.assertEqual(_wire.parse_duration(None), 0.0)
        with self.assertRaises(tenure.TenureError):
            _wire.parse_duration("5m")

    def test_error_detail_from_the_server(self):
        # A LEASE_HELD detail as tenured sent it (binary protobuf, base64
        # without padding): holder h, token 1, 4.922136776s left, name x.
        d = _wire.decode_error_detail(_wire.b64decode("CgpMRUFTRV9IRUxEEgFoGAEiCAgEEMjh2rcDKgF4"))
        self.assertEqual(d["reason"], "LEASE_HELD")
        self.assertEqual(d["holder"], "h")
        self.assertEqual(d["token"], 1)
        self.assertEqual(d["name"], "x")
        self.assertAlmostEqual(d["remaining"], 4.922136776)

    def test_error_table(self):
        held = {"code": "failed_precondition", "message": "held by h",
                "details": [{"type": "tenure.v1.ErrorDetail", "value": "CgpMRUFTRV9IRUxEEgFoGAEiCAgEEMjh2rcDKgF4"}]}
        stale = {"code": "failed_precondition", "message": "stale",
                 "details": [{"type": "tenure.v1.ErrorDetail", "value": "CgtTVEFMRV9UT0tFTg"}]}
        cases = [
            (held, tenure.LeaseHeldError),
            (stale, tenure.StaleTokenError),
            ({"code": "invalid_argument", "message": "bad"}, tenure.InvalidArgumentError),
            ({"code": "not_found", "message": "nf"}, tenure.NotFoundError),
            ({"code": "permission_denied", "message": "no"}, tenure.PermissionDeniedError),
            ({"code": "unauthenticated", "message": "who"}, tenure.UnauthenticatedError),
            ({"code": "deadline_exceeded", "message": "late"}, tenure.DeadlineExceededError),
            ({"code": "canceled", "message": "c"}, tenure.CanceledError),
        ]
        for body, cls in cases:
            with self.subTest(code=body["code"], cls=cls.__name__):
                err = _wire.error_from_json(body)
                self.assertIs(type(err), cls)
                self.assertEqual(err.message, body["message"])
                self.assertEqual(err.code, body["code"])
        err = _wire.error_from_json(held)
        self.assertEqual((err.holder, err.token, err.lease), ("h", 1, "x"))
        # failed_precondition without a known reason stays a plain error.
        plain = _wire.error_from_json({"code": "failed_precondition", "message": "m"})
        self.assertIs(type(plain), tenure.TenureError)
        self.assertIs(type(tenure.errors.from_reason("STALE_TOKEN", "s")), tenure.StaleTokenError)
        self.assertIsNone(tenure.errors.from_reason("", ""))

    def test_request_ids_floor(self):
        ids = RequestIds()
        a, b, c = ids.begin(), ids.begin(), ids.begin()
        self.assertEqual([x["seq"] for x in (a, b, c)], ["1", "2", "3"])
        self.assertEqual({x["session"] for x in (a, b, c)}, {ids.session})
        ids.end(b)
        self.assertEqual(ids.begin()["floor"], "1", "the floor passed seq 1, which is in flight")
        ids.end(a)
        self.assertEqual(ids.begin()["floor"], "3", "the floor did not move past the ended seqs 1 and 2")

    def test_endpoints(self):
        self.assertEqual(normalize_endpoint("127.0.0.1:7400", False), ("127.0.0.1:7400", False))
        self.assertEqual(normalize_endpoint("http://h:1/", False), ("h:1", False))
        self.assertEqual(normalize_endpoint("https://h:1", False), ("h:1", True))
        self.assertEqual(normalize_endpoint("h:1", True), ("h:1", True))
        self.assertEqual(normalize_endpoint("[::1]:7400", False), ("[::1]:7400", False))
        for bad in ["", "h", "h:x", "http://h:1/path"]:
            with self.subTest(bad=bad), self.assertRaises(tenure.TenureError):
                normalize_endpoint(bad, False)
        with self.assertRaises(tenure.TenureError):
            tenure.Client([])
        with self.assertRaises(tenure.TenureError):
            tenure.Client(["h:1"], cert_file="c.crt")

    def test_client_from_env(self):
        c = tenure.Client.from_env({"TENURE_ENDPOINTS": "a:1,b:2", "TENURE_CLUSTER_ID": "c9",
                                    "TENURE_AUTH_TOKEN": "tnr_x"})
        self.assertEqual(c.endpoints, ["a:1", "b:2"])
        self.assertEqual(c.cluster_id, "c9")
        self.assertEqual(c._headers["Authorization"], "Bearer tnr_x")
        self.assertEqual(tenure.Client.from_env({}).endpoints, ["127.0.0.1:7400"])


class FakeClient:
    """FakeClient grants every lease; renewals answer at once, or block
    while `hang` is set (a server that stopped answering)."""

    def __init__(self):
        self.renew_sent = []
        self.hang = threading.Event()
        self.unblock = threading.Event()
        self.released = []
        self.token = 0

    def acquire(self, name, holder, ttl, **kw):
        self.token += 1
        return Grant(name, holder, self.token, ttl, ttl, 0, time.monotonic())

    def renew(self, leases, timeout=None, canceller=None):
        sent = time.monotonic()
        self.renew_sent.append(sent)
        if self.hang.is_set():
            self.unblock.wait(timeout)
            raise tenure.UnavailableError(1, OSError("fake: no answer"))
        return [RenewResult(n, t, Grant(n, "h", t, 1.0, 1.0, 0, sent)) for n, t in leases]

    def release(self, name, token, timeout=None, canceller=None):
        self.released.append((name, token))


class SessionRulesTest(unittest.TestCase):
    def test_config_is_checked(self):
        c = FakeClient()
        with self.assertRaises(tenure.TenureError):
            tenure.Session(c, ttl=0)
        with self.assertRaises(tenure.TenureError):
            tenure.Session(c, ttl=1, renew_interval=0.95)  # not shorter than 1*0.99-0.1
        with self.assertRaises(tenure.TenureError):
            tenure.Session(c, ttl=1, drift=0.6)

    def test_deadline_from_send_time(self):
        c = FakeClient()
        with tenure.Session(c, ttl=1.0, drift=0.01, margin=0.1) as s:
            l = s.try_acquire("a")
            self.assertAlmostEqual(l.deadline, l.last_renewal + 1.0 * 0.99 - 0.1, places=6)
            # Renewals move the deadline: wait for two of them.
            helpers.eventually("two renewals", 5, lambda: self.assertGreaterEqual(len(c.renew_sent), 2))
            helpers.eventually("a deadline from a renewal's send time", 5,
                               lambda: self.assertIn(l.last_renewal, c.renew_sent))
            self.assertAlmostEqual(l.deadline, l.last_renewal + 0.89, places=6)
            self.assertFalse(l.done.is_set())
            self.assertEqual(l.state, tenure.HELD)
        self.assertTrue(l.done.is_set())
        self.assertIsInstance(l.error, tenure.ReleasedError)
        self.assertEqual(c.released, [("a", 1)])

    def test_done_at_the_deadline_while_renewals_hang(self):
        c = FakeClient()
        s = tenure.Session(c, ttl=1.0, drift=0.01, margin=0.1, renew_timeout=5)
        try:
            l = s.try_acquire("a")
            c.hang.set()  # the next renewal blocks for longer than the lease lives
            self.assertTrue(l.done.wait(3), "done was not set by the deadline while the renewal hung")
            ended = time.monotonic()
            self.assertGreaterEqual(ended, l.deadline)
            # Set before the server could expire the lease: its last
            # successful renewal was sent at last_renewal, TTL 1s.
            self.assertLess(ended, l.last_renewal + 1.0, "done was set after the server could re-grant")
            self.assertEqual(l.state, tenure.LOST)
            self.assertIsInstance(l.error, tenure.LostError)
            with self.assertRaises(tenure.LostError):
                l.put("k", b"v")  # refused locally, no request
        finally:
            c.unblock.set()
            s.close()

    def test_done_on_the_first_look_after_a_pause(self):
        # After SIGCONT the threads run in no particular order: the first
        # look at done must say the lease is over, before the watchdog
        # thread ran. Holding the session's lock keeps the watchdog and
        # the renewer out, as if they had not been scheduled yet.
        c = FakeClient()
        with tenure.Session(c, ttl=1.0, drift=0.01, margin=0.1) as s:
            l = s.try_acquire("a")
            with s._cond:
                l._deadline = time.monotonic() - 0.001  # the pause outlived the lease
                self.assertTrue(l.done.is_set(), "done was not set on the first look after the deadline")
                self.assertTrue(l.done.wait(0))
                self.assertIsInstance(l.error, tenure.LostError)

    def test_duplicate_and_closed(self):
        c = FakeClient()
        s = tenure.Session(c, ttl=1.0)
        s.try_acquire("a")
        with self.assertRaises(tenure.DuplicateError):
            s.try_acquire("a")
        s.close()
        with self.assertRaises(tenure.SessionClosedError):
            s.try_acquire("b")


if __name__ == "__main__":
    unittest.main()
