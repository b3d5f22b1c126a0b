"""A holder pauses past its TTL; the next holder takes over with a larger
token, and the paused holder's late write is refused by the fenced store.
Once in this process (the session stops renewing), once with a real
process frozen by SIGSTOP (examples/paused_writer.py)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import helpers

import tenure

TTL = 2.0


class PausedHolderTest(helpers.OneNodeTest):
    def test_session_that_stops_renewing(self):
        c, n, key = self.client, "py/paused/session", "py/paused/session/report"
        sa = c.session(holder="A", ttl=TTL)
        sb = c.session(holder="B", ttl=TTL)
        try:
            a = sa.acquire(n)
            a.put(key, "A-1")
            # B queues behind A before A stalls.
            got = []
            tb = threading.Thread(target=lambda: got.append((sb.acquire(n, timeout=30), time.monotonic())))
            tb.start()
            sa.orphan()  # A's renewals stop: a stalled process, as far as the server can tell
            self.assertTrue(a.done.wait(TTL * 2), "A's done was not set after its renewals stopped")
            a_done_at = time.monotonic()
            self.assertIsInstance(a.error, tenure.LostError)
            tb.join(TTL * 5)
            self.assertTrue(got, "B was not granted the lease after A's expired (%s)" % self.node.describe())
            b, b_at = got[0]
            self.assertLess(a_done_at, b_at, "A stepped down only after B held the lease")
            self.assertGreater(b.token, a.token)
            b.put(key, "B-1")
            # A wakes up and writes with its old token, as if it still held the lease.
            with self.assertRaises(tenure.LostError):
                a.put(key, "A-2")  # the session refuses locally...
            with self.assertRaises(tenure.StaleTokenError):
                c.put(key, "A-2", n, a.token)  # ...and so does the store
            kv = c.kv_get(key)
            self.assertEqual((kv.value, kv.token), (b"B-1", b.token))
        finally:
            sa.close()
            sb.close()

    def test_sigstopped_process(self):
        c, n, key = self.client, "py/paused/process", "py/paused/process/report"
        env = dict(os.environ, TENURE_ENDPOINTS=self.node.api,
                   PYTHONPATH=helpers.SRC_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        script = os.path.join(helpers.PKG_DIR, "examples", "paused_writer.py")
        p = subprocess.Popen([sys.executable, script, n, key, str(TTL)], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = json.loads(self.readline(p, "A's first write"))
            self.assertEqual(first["event"], "wrote")
            a_token = first["token"]
            os.kill(p.pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            try:
                with c.session(holder="B", ttl=TTL) as sb:
                    b = sb.acquire(n, timeout=30)  # granted once A's lease expired on the server
                    self.assertGreaterEqual(time.monotonic() - stopped_at, TTL * 0.9,
                                            "B got the lease before A's TTL could have run out")
                    self.assertGreater(b.token, a_token)
                    b.put(key, "B-1")
                    os.kill(p.pid, signal.SIGCONT)
                    p.stdin.write("go\n")
                    p.stdin.flush()
                    woke = json.loads(self.readline(p, "A waking up"))
                    self.assertEqual((woke["event"], woke["done"], woke["state"]), ("woke", True, "lost"))
                    late = json.loads(self.readline(p, "A's late write"))
                    self.assertEqual(late["event"], "refused", late)
                    self.assertEqual(p.wait(10), 0)
                    kv = c.kv_get(key)
                    self.assertEqual((kv.value, kv.token), (b"B-1", b.token))
            finally:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
        finally:
            if p.poll() is None:
                p.kill()
            p.wait(10)
            for f in (p.stdin, p.stdout, p.stderr):
                f.close()

    def test_frozen_server(self):
        # The server stops answering (SIGSTOP): renewals hang, and the
        # session steps down at its deadline, before the TTL measured from
        # the last successful renewal's send time could run out.
        node = helpers.Node("frozen").start()
        self.addCleanup(node.stop)
        c = tenure.Client([node.api], timeout=10)
        self.addCleanup(c.close)
        s = c.session(ttl=TTL)
        lease = s.acquire("py/frozen")
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGSTOP)
        try:
            self.assertTrue(lease.done.wait(TTL * 2), "done was not set while the server was frozen")
            at = time.monotonic()
            self.assertIsInstance(lease.error, tenure.LostError)
            self.assertGreaterEqual(at, lease.deadline)
            self.assertLess(at, lease.last_renewal + TTL, "done was set after the server could re-grant")
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
            s.orphan()

    def test_semaphore_slots(self):
        c, n = self.client, "py/paused/sem"
        with c.session(ttl=TTL) as s1, c.session(ttl=TTL) as s2, c.session(ttl=TTL) as s3:
            a = s1.acquire(n, limit=2)
            b = s2.acquire(n, limit=2)
            self.assertNotEqual(a.token, b.token, "two slots share a token")
            with self.assertRaises(tenure.LeaseHeldError) as cm:
                s3.try_acquire(n, limit=2)
            self.assertEqual(cm.exception.limit, 2)
            self.assertEqual(sorted(x.token for x in c.slots(n)), sorted([a.token, b.token]))

    def readline(self, p, what):
        """readline reads one line of p's stdout within 20 s."""
        out = []
        t = threading.Thread(target=lambda: out.append(p.stdout.readline()), daemon=True)
        t.start()
        t.join(20)
        if not out or not out[0]:
            p.kill()
            self.fail("no line from the writer for %s; its stderr: %s" % (what, p.stderr.read()[-2000:]))
        return out[0]


if __name__ == "__main__":
    unittest.main()
