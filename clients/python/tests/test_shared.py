"""Shared (read) and exclusive (write) grants, against a real tenured."""

import unittest

import helpers

import tenure


class SharedTest(helpers.OneNodeTest):
    def test_readers_and_a_writer(self):
        c, n = self.client, "py/shared"
        r1 = c.acquire(n, "r1", 30, shared=True)
        r2 = c.acquire(n, "r2", 30, shared=True)
        self.assertTrue(r1.shared and r2.shared)
        self.assertGreater(r2.token, r1.token, "each grant has its own, larger token")
        with self.assertRaises(tenure.InvalidArgumentError):
            c.put(n + "/k", "v", n, r1.token)  # readers do not write
        with self.assertRaises(tenure.InvalidArgumentError):
            c.acquire(n, "x", 30, shared=True, limit=3)

        # The writer waits for both readers; a reader after it waits too.
        with self.assertRaises(tenure.LeaseHeldError):
            c.acquire(n, "w0", 30)
        tw, w = self.wait_in_thread(n, "w", shared=False)
        with self.assertRaises(tenure.LeaseHeldError):
            c.acquire(n, "r3try", 30, shared=True)
        tr, r3 = self.wait_in_thread(n, "r3", shared=True)
        self.assertEqual(self.waiters(n), ["w", "r3"])

        c.release(n, r1.token)
        c.release(n, r2.token)
        tw.join(20)
        self.assertIn("grant", w, w)
        self.assertFalse(w["grant"].shared)
        self.assertGreater(w["grant"].token, r2.token)
        self.assertEqual(self.waiters(n), ["r3"], "the reader waits while the writer holds")
        c.put(n + "/k", "v", n, w["grant"].token)
        c.release(n, w["grant"].token)
        tr.join(20)
        self.assertIn("grant", r3, r3)
        self.assertTrue(r3["grant"].shared)
        self.assertGreater(r3["grant"].token, w["grant"].token)

        terms = c.history(n)
        self.assertEqual([(t.holder, t.shared) for t in terms], [("r3", True), ("w", False), ("r2", True), ("r1", True)])


if __name__ == "__main__":
    unittest.main()
