"""Retries against scripted fake servers: which calls are retried, that
every attempt of a call carries the same request ID, and that answers from
another cluster are refused."""

import base64
import http.server
import json
import threading
import unittest

import helpers  # noqa: F401  (puts src/ on sys.path)

import tenure


def detail(reason):
    """detail returns a tenure.v1.ErrorDetail with reason, base64."""
    b = reason.encode()
    return base64.b64encode(bytes([0x0A, len(b)]) + b).decode()


class Fake:
    """Fake is one scripted server: each request takes the next action of
    script ("drop": close without an answer; "unavailable": the server's
    not-the-leader answer; "indeterminate", "not_applied": those errors;
    a dict: a 200 answer). Requests are recorded."""

    def __init__(self, script, cluster_id="c1"):
        self.script = list(script)
        self.cluster_id = cluster_id
        self.requests = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, body, dict(self.headers)))
                action = fake.script.pop(0) if fake.script else {}
                if action == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, out = 200, action
                if action == "unavailable":
                    status, out = 503, {"code": "unavailable", "message": "node: not the leader"}
                elif action == "indeterminate":
                    status, out = 503, {"code": "unavailable", "message": "leader changed",
                                        "details": [{"type": "tenure.v1.ErrorDetail",
                                                     "value": detail("INDETERMINATE")}]}
                elif action == "not_applied":
                    status, out = 400, {"code": "failed_precondition", "message": "below the floor",
                                        "details": [{"type": "tenure.v1.ErrorDetail",
                                                     "value": detail("NOT_APPLIED")}]}
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Tenure-Cluster-Id", fake.cluster_id)
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = "127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


GRANT = {"lease": {"name": "x", "holder": "h", "token": "7", "ttl": "5s", "remaining": "5s"}}


class RetryTest(unittest.TestCase):
    def fake(self, script, cluster_id="c1"):
        f = Fake(script, cluster_id)
        self.addCleanup(f.close)
        return f

    def client(self, *fakes, **kw):
        c = tenure.Client([f.addr for f in fakes], timeout=5, retry_backoff=0.01, **kw)
        self.addCleanup(c.close)
        return c

    def test_acquire_is_retried_with_the_same_request_id(self):
        f = self.fake(["drop", GRANT])
        g = self.client(f).acquire("x", "h", 5)
        self.assertEqual(g.token, 7)
        self.assertEqual(len(f.requests), 2)
        ids = [body["request_id"] for _, body, _ in f.requests]
        self.assertEqual(ids[0], ids[1], "the retry carried another request ID")
        self.assertEqual(ids[0]["seq"], "1")

    def test_writes_possibly_delivered_are_retried_with_the_same_request_id(self):
        for name, call in [("put", lambda c: c.put("k", b"v", "x", 7)),
                           ("delete", lambda c: c.delete("k", "x", 7)),
                           ("release", lambda c: c.release("x", 7))]:
            with self.subTest(name):
                f = self.fake(["drop", {"revision": "1"}])
                call(self.client(f))
                self.assertEqual(len(f.requests), 2, "a %s that may have applied was not retried" % name)
                ids = [body["request_id"] for _, body, _ in f.requests]
                self.assertEqual(ids[0], ids[1], "the retry carried another request ID")

    def test_transfer_possibly_delivered_is_not_retried(self):
        f = self.fake(["drop", {}])
        with self.assertRaises(tenure.IndeterminateError):
            self.client(f).transfer_leadership("n2")
        self.assertEqual(len(f.requests), 1, "a transfer that may have applied was sent again")

    def test_put_refused_by_a_follower_goes_to_the_next(self):
        a, b = self.fake(["unavailable"]), self.fake([{"revision": "3"}])
        self.assertEqual(self.client(a, b).put("k", "v", "x", 7), 3)
        self.assertEqual(a.requests[0][1]["request_id"], b.requests[0][1]["request_id"])
        self.assertEqual(b.requests[0][1]["value"], base64.b64encode(b"v").decode())

    def test_indeterminate_answers(self):
        # A release answered indeterminate is retried: the cluster answers
        # the retry with the first attempt's outcome.
        f = self.fake(["indeterminate", {}])
        self.client(f).release("x", 7)
        self.assertEqual(len(f.requests), 2)
        f = self.fake(["not_applied"])
        with self.assertRaises(tenure.IndeterminateError) as cm:
            self.client(f).delete("k", "x", 7)
        self.assertIsInstance(cm.exception.__cause__, tenure.NotAppliedError)
        # Acquire retries an indeterminate answer: the cluster answers the
        # retry with the first attempt's outcome.
        f = self.fake(["indeterminate", GRANT])
        self.assertEqual(self.client(f).acquire("x", "h", 5).token, 7)

    def test_floor_follows_finished_calls(self):
        f = self.fake([GRANT, GRANT, {"revision": "1"}])
        c = self.client(f)
        c.acquire("x", "h", 5)
        c.acquire("x", "h", 5)
        c.put("k", "v", "x", 7)
        ids = [body["request_id"] for _, body, _ in f.requests]
        self.assertEqual([(i["seq"], i["floor"]) for i in ids], [("1", "1"), ("2", "2"), ("3", "3")])
        self.assertEqual(len({i["session"] for i in ids}), 1)

    def test_bearer_token_header(self):
        f = self.fake([GRANT])
        self.client(f, token="tnr_abc").get("x")
        self.assertEqual(f.requests[0][2].get("Authorization"), "Bearer tnr_abc")
        self.assertEqual(f.requests[0][0], "/tenure.v1.LeaseService/Get")

    def test_other_cluster_refused(self):
        other, mine = self.fake([GRANT], cluster_id="c2"), self.fake([GRANT], cluster_id="c1")
        c = self.client(other, mine, cluster_id="c1")
        self.assertEqual(c.get("x").token, 7)
        self.assertEqual((len(other.requests), len(mine.requests)), (1, 1))
        with self.assertRaises(tenure.OtherClusterError):
            self.client(self.fake([GRANT], cluster_id="c2"), cluster_id="c1").get("x")
        # Without a configured ID the first answer pins the cluster.
        c = self.client(self.fake([GRANT, GRANT], cluster_id="c3"))
        c.get("x")
        self.assertEqual(c.cluster_id, "c3")

    def test_unreachable_gives_up_at_the_timeout(self):
        f = self.fake([])
        addr = f.addr
        f.close()
        c = tenure.Client([addr], timeout=0.3, retry_backoff=0.01)
        with self.assertRaises(tenure.UnavailableError) as cm:
            c.get("x")
        self.assertGreater(cm.exception.attempts, 1)


if __name__ == "__main__":
    unittest.main()
