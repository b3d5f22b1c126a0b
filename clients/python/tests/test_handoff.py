"""Handoff of a grant to a waiting candidate, and priorities, against a
real tenured."""

import threading
import unittest

import helpers

import tenure


class HandoffTest(helpers.OneNodeTest):
    def name(self, suffix=""):
        return "py/%s%s" % (self.id().rsplit(".", 1)[-1], suffix)

    def test_handoff(self):
        c, n = self.client, self.name()
        a = c.acquire(n, "a", 30)
        tb, outb = self.wait_in_thread(n, "b")
        tc, outc = self.wait_in_thread(n, "c")

        # Refusals change nothing.
        with self.assertRaises(tenure.NotFoundError):
            c.handoff(n, a.token, "nobody")
        with self.assertRaises(tenure.StaleTokenError):
            c.handoff(n, a.token + 100, "c")
        self.assertEqual(c.get(n).token, a.token)

        to_c = c.handoff(n, a.token, "c")
        self.assertEqual(to_c.holder, "c")
        self.assertGreater(to_c.token, a.token)
        tc.join(10)
        self.assertEqual(outc["grant"].token, to_c.token)
        h = self.history(n)
        self.assertEqual([(t["holder"], t.get("ended", "")) for t in h["terms"]], [("a", "handed_off"), ("c", "")])
        self.assertEqual(h["terms"][0]["end"], h["terms"][1]["start"])

        to_b = c.handoff(n, to_c.token)  # the first in line
        self.assertEqual(to_b.holder, "b")
        tb.join(10)
        self.assertEqual(outb["grant"].token, to_b.token)
        with self.assertRaises(tenure.NotFoundError):
            c.handoff(n, to_b.token)

    def test_priority(self):
        c, n = self.client, self.name()
        low = c.acquire(n, "low", 30, priority=1)
        self.assertEqual(low.priority, 1)
        self.assertEqual(c.renew([(n, low.token)])[0].handoff_requested, "")
        t, out = self.wait_in_thread(n, "high", priority=7)
        r = c.renew([(n, low.token)])[0]
        self.assertEqual(r.handoff_requested, "high")
        c.handoff(n, low.token, r.handoff_requested)
        t.join(10)
        self.assertEqual((out["grant"].holder, out["grant"].priority), ("high", 7))
        with self.assertRaises(tenure.InvalidArgumentError):
            c.acquire(self.name("/q"), "h", 30, priority=2000000)

    def test_session_handoff(self):
        c, n = self.client, self.name()
        a = c.session(holder="a", ttl=3)
        b = c.session(holder="b", ttl=3)
        h = c.session(holder="h", ttl=3, priority=9)
        try:
            la = a.acquire(n)
            out = {}
            t = threading.Thread(target=lambda: out.update(lease=b.acquire(n)), daemon=True)
            t.start()
            self.queued(n, "b")
            nxt = la.handoff()
            self.assertTrue(la.done.is_set())
            self.assertIsInstance(la.error, tenure.HandedOffError)
            self.assertIsInstance(la.error, tenure.ReleasedError)
            t.join(10)
            lb = out["lease"]
            self.assertEqual((nxt.holder, nxt.token), ("b", lb.token))
            self.assertGreater(lb.token, la.token)
            with self.assertRaises(tenure.HandedOffError):
                la.handoff()
            # A session of a higher priority asks b to hand over; b's
            # session does at its next renewal.
            lh = h.acquire(n)
            self.assertTrue(lb.done.is_set())
            self.assertIsInstance(lb.error, tenure.HandedOffError)
            self.assertGreater(lh.token, lb.token)
        finally:
            for s in (a, b, h):
                s.close()


if __name__ == "__main__":
    unittest.main()
