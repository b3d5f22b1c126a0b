"""Revocation by an operator and lock-delays, against a real tenured."""

import unittest

import helpers

import tenure


class RevokeTest(helpers.OneNodeTest):
    def name(self, suffix=""):
        return "py/%s%s" % (self.id().rsplit(".", 1)[-1], suffix)

    def test_revoke(self):
        c, n = self.client, self.name()
        a = c.acquire(n, "a", 30)
        c.put(n + "/k", "v1", n, a.token)
        t, out = self.wait_in_thread(n, "w", ttl=3)
        with c.watch(n) as w:
            events = iter(w)
            self.assertEqual(next(events).type, "current")
            self.assertEqual(next(events).type, "synced")

            # Bad requests change nothing.
            with self.assertRaises(tenure.InvalidArgumentError):
                c.revoke(n, reason="")
            with self.assertRaises(tenure.InvalidArgumentError):
                c.revoke(n, reason="x" * 300)
            with self.assertRaises(tenure.NotFoundError):
                c.revoke(self.name("/none"), reason="r")
            with self.assertRaises(tenure.NotFoundError):
                c.revoke(n, a.token + 100, reason="r")
            self.assertEqual(c.get(n).token, a.token)

            revoked = c.revoke(n, reason="disk failing on a")
            self.assertEqual([(g.name, g.holder, g.token) for g in revoked], [(n, "a", a.token)])
            t.join(10)
            g = out.get("grant")
            self.assertIsNotNone(g, out)
            self.assertEqual(g.holder, "w")
            self.assertGreater(g.token, a.token, "the next grant's token is larger")

            ev = next(events)
            self.assertEqual((ev.type, ev.grant.token, ev.reason), ("revoked", a.token, "disk failing on a"))
            ev = next(events)
            self.assertEqual((ev.type, ev.grant.holder), ("granted", "w"))

        r = c.renew([(n, a.token)])[0]
        self.assertIsInstance(r.error, tenure.RevokedError)
        self.assertIsInstance(r.error, tenure.StaleTokenError)
        self.assertEqual((r.error.lease, r.error.token, r.error.reason), (n, a.token, "disk failing on a"))
        self.assertIn("revoked by an operator: disk failing on a", str(r.error))
        with self.assertRaises(tenure.RevokedError) as cm:
            c.put(n + "/k", "late", n, a.token)
        self.assertEqual(cm.exception.reason, "disk failing on a")
        self.assertEqual(c.kv_get(n + "/k").value, b"v1")

    def test_session_steps_down_when_revoked(self):
        c, n = self.client, self.name()
        with c.session(ttl=3, holder="leader", lock_delay=3) as s:
            lease = s.acquire(n)
            self.assertEqual(c.get(n).lock_delay, 3.0)
            c.revoke(n, lease.token, reason="moving to a new host")
            self.assertTrue(lease.wait(10), "the lease did not end")
            self.assertEqual(lease.state, tenure.LOST)
            err = lease.error
            self.assertIsInstance(err, tenure.LostError)
            self.assertEqual(err.reason, "revoked by an operator (moving to a new host)")
            self.assertIsInstance(err.__cause__, tenure.RevokedError)
            self.assertEqual(err.__cause__.token, lease.token)

    def test_lock_delay(self):
        c, n = self.client, self.name()
        # a never renews: its grant expires after the TTL.
        a = c.acquire(n, "a", 2, lock_delay=3)
        self.assertEqual(a.lock_delay, 3.0)
        t, out = self.wait_in_thread(n, "w", ttl=3)

        def delayed():
            try:
                c.acquire(n, "b", 2)
            except tenure.LeaseHeldError as e:
                if not e.lock_delay:
                    raise AssertionError("held by a, not expired yet") from None
                return e
            raise AssertionError("granted during the delay")
        e = helpers.eventually("the lock-delay", 20, delayed, every=0.02)
        self.assertEqual((e.holder, e.token), ("a", a.token))
        self.assertAlmostEqual(e.ended + e.remaining, 3.0, places=6,
                               msg="ended %.3fs ago + %.3fs left: the delay counts from the expiry" % (e.ended, e.remaining))
        t.join(20)
        g = out.get("grant")
        self.assertIsNotNone(g, out)
        self.assertEqual(g.holder, "w")
        self.assertGreater(g.token, a.token)

        # A release skips it.
        m = self.name("/released")
        b = c.acquire(m, "b", 30, lock_delay=60)
        t, out = self.wait_in_thread(m, "w2", ttl=3)
        c.release(m, b.token)
        t.join(10)
        self.assertEqual(out.get("grant").holder, "w2", out)

        with self.assertRaises(tenure.InvalidArgumentError):
            c.acquire(self.name("/bad"), "a", 2, lock_delay=61)
        with self.assertRaises(tenure.NotFoundError):
            c.get(self.name("/bad"))


if __name__ == "__main__":
    unittest.main()
