"""A three-node cluster loses its leader: a session keeps its lease (same
token), calls fail over to the other members, and a watch on the killed
node reopens elsewhere with a reset."""

import threading
import unittest

import helpers

import tenure


class FailoverTest(helpers.NodeTest):
    @classmethod
    def setUpClass(cls):
        first = helpers.Node("n1").start()
        cls.nodes = [first]
        for i in (2, 3):
            cls.nodes.append(helpers.Node("n%d" % i, extra=["--join", first.api]).start())
        c = tenure.Client([first.api])

        def three_voters():
            st = c.status()
            voters = [m for m in st.members if m.suffrage == "voter"]
            assert len(voters) == 3 and st.leader_id, "%d voters, leader %r" % (len(voters), st.leader_id)
        helpers.eventually("3 voters and a leader", 30, three_voters, 0.1)
        c.close()

    @classmethod
    def tearDownClass(cls):
        for n in cls.nodes:
            n.stop()

    def test_leader_killed(self):
        c = tenure.Client([n.api for n in self.nodes], timeout=15)
        self.addCleanup(c.close)
        st = c.status()
        leader = next(n for n in self.nodes if n.api == st.leader_address)
        # A watch served by the leader, which is about to die.
        wc = tenure.Client([leader.api] + [n.api for n in self.nodes if n is not leader], timeout=15)
        self.addCleanup(wc.close)
        w = wc.watch("py/fo")
        events = []
        reset = threading.Event()

        def follow():
            for ev in w:
                events.append(ev)
                if ev.type == "reset":
                    reset.set()
        threading.Thread(target=follow, daemon=True).start()
        with c.session(ttl=3) as s:
            lease = s.acquire("py/fo")
            lease.put("py/fo/k", "before")
            leader.stop()  # SIGKILL
            # The session renews through the other members, same token.
            self.assertFalse(lease.done.wait(6), "the lease ended after the leader died: %s" % lease.error)
            self.assertEqual(c.get("py/fo").token, lease.token)
            lease.put("py/fo/k", "after")
            self.assertEqual(c.kv_get("py/fo/k").value, b"after")
            self.assertTrue(reset.wait(15), "the watch did not reopen after its node died: %r" % events)
            # Leadership moves on request; the lease stays.
            new = c.transfer_leadership()
            self.assertTrue(new)
            helpers.eventually("the new leader %s to lead" % new, 10,
                               lambda: self.assertEqual(c.status().leader_id, new))
            self.assertFalse(lease.done.wait(0.1))
            lease.put("py/fo/k", "after transfer")
        w.close()


if __name__ == "__main__":
    unittest.main()
