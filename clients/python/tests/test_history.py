"""The lease history (Client.history), against a real tenured that is
restarted in between: the terms survive it."""

import datetime
import unittest

import helpers

import tenure


class HistoryTest(helpers.NodeTest):
    def setUp(self):
        self.node = helpers.Node("n1").start()
        self.client = tenure.Client([self.node.api], timeout=10)

    def tearDown(self):
        self.client.close()
        self.node.stop()

    def check(self, terms, want, what):
        got = [(t.holder, t.token, t.ending, t.reason, t.writes_accepted, t.writes_refused) for t in terms]
        self.assertEqual(got, want, "%s (%s)" % (what, self.node.describe()))
        for t in terms:
            self.assertEqual(t.name, "py/history", what)
            self.assertIsNotNone(t.start, "%s: a wall-clock start" % what)
            self.assertEqual(t.held, t.end is None, "%s: an end unless held" % what)

    def test_history(self):
        c, n = self.client, "py/history"
        before = datetime.datetime.now(datetime.timezone.utc)
        a = c.acquire(n, "a", 30)
        c.put(n + "/k", "v1", n, a.token)
        c.release(n, a.token)
        b = c.acquire(n, "b", 2)

        def expired():
            with self.assertRaises(tenure.NotFoundError):
                c.get(n)
        helpers.eventually("b's grant to expire", 10, expired)
        with self.assertRaises(tenure.StaleTokenError):
            c.put(n + "/k", "late", n, b.token)
        d = c.acquire(n, "d", 60)
        c.revoke(n, reason="moving hosts")
        e = c.acquire(n, "e", 60)
        want = [
            ("e", e.token, "held", "", 0, 0),
            ("d", d.token, "revoked", "moving hosts", 0, 0),
            ("b", b.token, "expired", "", 0, 1),
            ("a", a.token, "released", "", 1, 0),
        ]
        terms = c.history(n)
        self.check(terms, want, "history")
        self.assertTrue(before - datetime.timedelta(seconds=5) <= terms[-1].start, "a's start is a recent wall-clock time")
        self.assertGreater(terms[1].cluster_end, terms[1].cluster_start)

        # The history is replicated state: it survives a restart.
        self.node.stop()
        self.node.start()
        self.check(c.history(n), want, "history after a restart")
        self.check(c.history(n, limit=2), want[:2], "history with limit 2")
        self.check(c.history(n, since=terms[1].end), want[:2], "history since d's end")
        self.assertEqual(c.history("py/never"), [])
        with self.assertRaises(tenure.InvalidArgumentError):
            c.history("")
        with self.assertRaises(ValueError):
            c.history(n, since=datetime.datetime.now())


if __name__ == "__main__":
    unittest.main()
