"""The client against a real tenured: leases, the fenced store, watch,
sessions, elections, cluster identity."""

import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import helpers

import tenure


class ServerTest(helpers.OneNodeTest):
    def name(self, suffix=""):
        return "py/%s%s" % (self.id().rsplit(".", 1)[-1], suffix)

    def test_acquire_renew_release(self):
        c, n = self.client, self.name()
        g = c.acquire(n, "a", 5)
        self.assertEqual((g.name, g.holder, g.ttl), (n, "a", 5.0))
        self.assertGreater(g.token, 0)
        again = c.acquire(n, "a", 5)
        self.assertEqual(again.token, g.token, "an acquire by the holder is a renewal")
        with self.assertRaises(tenure.LeaseHeldError) as cm:
            c.acquire(n, "b", 5)
        self.assertEqual((cm.exception.lease, cm.exception.holder, cm.exception.token), (n, "a", g.token))
        self.assertGreater(cm.exception.remaining, 0)
        self.assertEqual(c.renew_one(n, g.token).token, g.token)
        longer = c.renew([(n, g.token, 8)])[0].grant
        self.assertEqual((longer.token, longer.ttl), (g.token, 8.0), "renew with a TTL did not set it")
        self.assertEqual([x.token for x in c.slots(n)], [g.token])
        res = c.renew([(n, g.token), (n, g.token + 1000)])
        self.assertIsNone(res[0].error)
        self.assertIsInstance(res[1].error, tenure.StaleTokenError)
        self.assertEqual(c.get(n).holder, "a")
        self.assertIn(n, [x.name for x in c.list("py/")])
        with self.assertRaises(tenure.StaleTokenError):
            c.release(n, g.token + 1000)
        c.release(n, g.token)
        with self.assertRaises(tenure.NotFoundError):
            c.get(n)
        g2 = c.acquire(n, "b", 5)
        self.assertGreater(g2.token, g.token, "a new grant has a larger token")
        c.release(n, g2.token)

    def test_bad_input(self):
        with self.assertRaises(tenure.InvalidArgumentError):
            self.client.acquire("", "a", 5)
        with self.assertRaises(tenure.InvalidArgumentError):
            self.client.acquire(self.name(), "a", 0.001)  # below the minimum TTL
        with self.assertRaises(tenure.NotFoundError):
            self.client.kv_get(self.name("/none"))

    def test_waiting_acquire_is_granted_on_release(self):
        c, n = self.client, self.name()
        g = c.acquire(n, "a", 10)
        got = []
        t = threading.Thread(target=lambda: got.append(c.acquire(n, "b", 10, wait=True, wait_timeout=20)))
        t.start()
        # Release only once b had time to be queued; if it was not yet,
        # it is granted at once, which the timing below tells apart.
        t.join(0.5)
        self.assertTrue(t.is_alive(), "the waiting acquire returned while the lease was held: %r" % got)
        c.release(n, g.token)
        t.join(15)
        self.assertFalse(t.is_alive(), "the waiting acquire did not return after the release")
        self.assertEqual(got[0].holder, "b")
        self.assertGreater(got[0].token, g.token)
        c.release(n, got[0].token)

    def test_waiting_acquire_times_out(self):
        c, n = self.client, self.name()
        g = c.acquire(n, "a", 10)
        start = time.monotonic()
        with self.assertRaises(tenure.LeaseHeldError):
            c.acquire(n, "b", 10, wait=True, wait_timeout=0.5)
        waited = time.monotonic() - start
        self.assertGreaterEqual(waited, 0.45, "the acquire did not wait on the server")
        self.assertLess(waited, 5)
        c.release(n, g.token)

    def test_fenced_store(self):
        c, n, k = self.client, self.name(), self.name("/key")
        a = c.acquire(n, "a", 5)
        r1 = c.put(k, b"one", n, a.token)
        kv = c.kv_get(k)
        self.assertEqual((kv.value, kv.lease, kv.token, kv.revision), (b"one", n, a.token, r1))
        c.release(n, a.token)
        with self.assertRaises(tenure.StaleTokenError):
            c.put(k, b"late", n, a.token)
        b = c.acquire(n, "b", 5)
        c.put(k, "two", n, b.token)
        with self.assertRaises(tenure.StaleTokenError):
            c.put(k, b"late", n, a.token)
        self.assertEqual(c.kv_get(k).value, b"two")
        self.assertEqual([e.key for e in c.kv_list(self.name("/"))], [k])
        self.assertEqual(c.kv_list(self.name("/"), keys_only=True)[0].value, b"")
        c.delete(k, n, b.token)
        with self.assertRaises(tenure.NotFoundError):
            c.kv_get(k)
        c.release(n, b.token)

    def test_watch(self):
        c, n = self.client, self.name()
        pre = c.acquire(n + "/pre", "a", 5)
        events = []
        with c.watch(n + "/") as w:
            it = iter(w)
            first = next(it)
            self.assertEqual((first.type, first.grant.name, first.grant.token), ("current", n + "/pre", pre.token))
            self.assertEqual(next(it).type, "synced")
            g = c.acquire(n + "/x", "b", 5)
            c.release(n + "/x", g.token)
            for _ in range(2):
                events.append(next(it))
            # close from another thread ends a blocked iteration.
            done = threading.Event()

            def drain():
                for _ in it:
                    pass
                done.set()
            threading.Thread(target=drain, daemon=True).start()
            w.close()
            self.assertTrue(done.wait(5), "closing the watch did not end the iteration")
        self.assertEqual([(e.type, e.grant.token) for e in events], [("granted", g.token), ("released", g.token)])
        self.assertGreater(events[0].index, 0)
        c.release(n + "/pre", pre.token)

    def test_session_keeps_and_releases(self):
        c, n = self.client, self.name()
        with c.session(ttl=2) as s:
            lease = s.acquire(n)
            # Renewals keep it well past its TTL.
            self.assertFalse(lease.done.wait(4.5), "the lease ended: %s" % lease.error)
            self.assertEqual(c.get(n).token, lease.token)
            self.assertEqual(lease.state, tenure.HELD)
        self.assertTrue(lease.done.is_set())
        self.assertIsInstance(lease.error, tenure.ReleasedError)
        with self.assertRaises(tenure.NotFoundError):
            c.get(n)

    def test_with_lease_and_update(self):
        c, n, k = self.client, self.name(), self.name("/counter")
        with c.session(ttl=5) as s:
            with s.acquire(n) as lease:
                for _ in range(3):
                    lease.update(k, lambda v: str(int(v or b"0") + 1))
                self.assertEqual(c.kv_get(k).value, b"3")
            self.assertTrue(lease.done.is_set())
            with self.assertRaises(tenure.ReleasedError):
                lease.update(k, lambda v: b"x")
            # A newer holder wrote the key: the old grant's read is refused.
            newer = c.acquire(n, "other", 5)
            c.put(k, b"10", n, newer.token)
            with s.acquire(n, timeout=10) as l2:
                self.assertGreater(l2.token, newer.token)
                self.assertEqual(l2.get(k), b"10")

    def test_second_session_waits_for_the_first(self):
        c, n = self.client, self.name()
        s1, s2 = c.session(ttl=3), c.session(ttl=3)
        try:
            l1 = s1.acquire(n)
            got = []
            t = threading.Thread(target=lambda: got.append(s2.acquire(n, timeout=20)))
            t.start()
            helpers.eventually("s2 queued behind s1", 5, lambda: self.assertTrue(t.is_alive()))
            l1.release()
            t.join(15)
            self.assertTrue(got, "s2 did not get the lease after s1 released it")
            self.assertGreater(got[0].token, l1.token)
        finally:
            s1.close()
            s2.close()

    def acquire_requests(self):
        """acquire_requests returns how many Acquire requests the node has
        served (its /metrics)."""
        with urllib.request.urlopen("http://%s/metrics" % self.node.api, timeout=5) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("tenure_requests_total{") and 'method="LeaseService/Acquire"' in line)

    def test_session_waits_on_the_server_without_polling(self):
        c, n = self.client, self.name()
        g = c.acquire(n, "other", 2)  # never released: it expires
        before = self.acquire_requests()
        start = time.monotonic()
        with c.session(ttl=3) as s:
            lease = s.acquire(n, timeout=20)
            waited = time.monotonic() - start
            self.assertGreater(lease.token, g.token)
        self.assertGreaterEqual(waited, 1.5, "granted before the other holder's lease expired")
        sent = self.acquire_requests() - before
        self.assertLessEqual(sent, 2, "the session sent %d acquires while it waited: it polled" % sent)

    def test_closing_the_session_ends_a_waiting_acquire(self):
        c, n = self.client, self.name()
        g = c.acquire(n, "other", 10)
        s = c.session(ttl=3)
        errs = []

        def campaign():
            try:
                s.acquire(n)
            except tenure.TenureError as e:
                errs.append(e)
        t = threading.Thread(target=campaign)
        t.start()
        helpers.eventually("the campaign to be waiting", 5, lambda: self.assertTrue(t.is_alive()))
        s.close()
        t.join(5)
        self.assertFalse(t.is_alive(), "close did not end the waiting acquire")
        self.assertIsInstance(errs[0], tenure.SessionClosedError)
        c.release(n, g.token)

    def test_under_tenure_run(self):
        # tenure run holds the lease and gives its command the lease, the
        # token and the endpoints; the client writes with them.
        code = ("import os, tenure\n"
                "c = tenure.Client.from_env()\n"
                "c.put('py/run/k', 'from-run', os.environ['TENURE_LEASE'], int(os.environ['TENURE_TOKEN']))\n")
        env = dict(os.environ, TENURE_ENDPOINTS=self.node.api,
                   PYTHONPATH=helpers.SRC_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        p = subprocess.run([helpers.binary("tenure"), "run", "py/run", "--ttl", "5s", "--", sys.executable, "-c", code],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, "tenure run failed: %s" % p.stderr)
        kv = self.client.kv_get("py/run/k")
        self.assertEqual((kv.value, kv.lease), (b"from-run", "py/run"))

    def test_elect_and_observe(self):
        c, n = self.client, self.name()
        seen = []
        obs = tenure.observe(c, n)
        got_two = threading.Event()

        def follow():
            for ld in obs:
                seen.append(ld)
                if len(seen) == 2:
                    got_two.set()
        threading.Thread(target=follow, daemon=True).start()

        def job(lease):
            lease.put(n + "/out", "led by %s" % lease.holder)
            return lease.token
        t1 = tenure.elect(c, n, job, holder="first", ttl=3)
        t2 = tenure.elect(c, n, job, holder="second", ttl=3)
        self.assertGreater(t2, t1)
        self.assertEqual(c.kv_get(n + "/out").value, b"led by second")
        self.assertTrue(got_two.wait(10), "observe reported %r" % seen)
        obs.close()
        self.assertEqual([(x.holder, x.token) for x in seen], [("first", t1), ("second", t2)])

    def test_elect_stops_on_stop(self):
        c, n = self.client, self.name()
        stop = threading.Event()
        started = threading.Event()
        out = []

        def lead(lease):
            started.set()
            lease.done.wait()
            out.append(lease.error)
            return "unused"
        t = threading.Thread(target=lambda: out.append(tenure.elect(c, n, lead, stop=stop, ttl=3)))
        t.start()
        self.assertTrue(started.wait(10), "elect did not lead")
        stop.set()
        t.join(10)
        self.assertFalse(t.is_alive(), "elect did not return after stop")
        self.assertIsInstance(out[0], tenure.ReleasedError)
        self.assertIsNone(out[1])
        with self.assertRaises(tenure.NotFoundError):
            c.get(n)


class ClusterIdTest(unittest.TestCase):
    """Two single-node clusters: a client pinned to one refuses the other."""

    @classmethod
    def setUpClass(cls):
        cls.a = helpers.Node("a").start()
        cls.b = helpers.Node("b").start()

    @classmethod
    def tearDownClass(cls):
        cls.a.stop()
        cls.b.stop()

    def test_pins_and_refuses(self):
        ca = tenure.Client([self.a.api])
        cid = ca.status().cluster_id
        self.assertTrue(cid)
        self.assertEqual(ca.cluster_id, cid, "the client did not pin the first cluster that answered")
        # b first: its answers are refused and a serves the call.
        c = tenure.Client([self.b.api, self.a.api], cluster_id=cid)
        g = c.acquire("py/pinned", "h", 5)
        self.assertEqual(ca.get("py/pinned").token, g.token)
        only_b = tenure.Client([self.b.api], cluster_id=cid)
        with self.assertRaises(tenure.OtherClusterError) as cm:
            only_b.get("py/pinned")
        self.assertEqual((cm.exception.expected, cm.exception.endpoint), (cid, self.b.api))
        # A client that pinned a by talking to it refuses b too.
        pinned = tenure.Client([self.b.api], cluster_id=ca.cluster_id)
        with self.assertRaises(tenure.OtherClusterError):
            pinned.status()
        for x in (ca, c, only_b, pinned):
            x.close()


if __name__ == "__main__":
    unittest.main()
