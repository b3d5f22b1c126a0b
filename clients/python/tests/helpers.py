"""Real tenured processes for the tests: built once with go build from the
repository into a temporary directory (or taken from TENURED_BIN and
TENURE_BIN), started on free loopback ports, killed when the tests end.

A node's log is kept in its data directory's parent; a test that fails
says where (see Node.describe)."""

import atexit
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, List, Optional, TypeVar

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_DIR = os.path.dirname(HERE)
REPO_DIR = os.path.dirname(os.path.dirname(PKG_DIR))
SRC_DIR = os.path.join(PKG_DIR, "src")

if SRC_DIR not in sys.path:
    sys.path.insert(0, SRC_DIR)

T = TypeVar("T")

_live: List[subprocess.Popen] = []
_tmp: List[str] = []
# Kept when a test failed (KEEP_TEST_DIRS=1 keeps every one).
_keep = [os.environ.get("KEEP_TEST_DIRS") == "1"]


def keep_dirs() -> None:
    """keep_dirs keeps the temporary directories (node logs) after the run."""
    _keep[0] = True


def _cleanup() -> None:
    for p in _live:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait(5)
            except OSError:
                pass
    if _keep[0]:
        if _tmp:
            sys.stderr.write("test directories (node logs) kept in: %s\n" % ", ".join(_tmp))
        return
    for d in _tmp:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)


def temp_dir(prefix: str = "tenure-py-") -> str:
    d = tempfile.mkdtemp(prefix=prefix)
    _tmp.append(d)
    return d


_bins = {}


def binary(name: str) -> str:
    """binary returns the path of tenured or tenure, built once per run."""
    if name in _bins:
        return _bins[name]
    env = os.environ.get(name.upper() + "_BIN")
    if env and os.path.exists(env):
        _bins[name] = env
        return env
    # Both binaries in one go build: they share most packages.
    out = temp_dir("tenure-py-bin-")
    want = [n for n in ("tenured", "tenure") if n not in _bins]
    subprocess.run(["go", "build", "-o", out + os.sep] + ["./cmd/" + n for n in want], cwd=REPO_DIR, check=True)
    for n in want:
        _bins[n] = os.path.join(out, n)
    return _bins[name]


def _port_range():
    lo, hi = 20000, 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph = int(f.read().split()[0])
        if eph > 12000:
            hi, lo = eph, max(10000, eph - 12768)
    except (OSError, ValueError):
        pass
    return lo, hi


_handed_out = set()


def free_port() -> int:
    """free_port returns a loopback port below the ephemeral range that was
    free a moment ago and not handed out before in this process."""
    lo, hi = _port_range()
    for _ in range(200):
        port = random.randrange(lo, hi)
        if port in _handed_out:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port in [%d, %d) after 200 tries" % (lo, hi))


def eventually(what: str, timeout: float, fn: Callable[[], T], every: float = 0.05) -> T:
    """eventually calls fn until it returns without raising or timeout
    passes; the failure says what was awaited and the last error."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            last = e
        if time.monotonic() > deadline:
            raise AssertionError("waited %.1fs for %s; last error: %r" % (timeout, what, last))
        time.sleep(every)


class Node:
    """Node is one tenured process."""

    def __init__(self, node_id: str = "n1", extra: Optional[List[str]] = None, scheme: str = "http",
                 ca_file: Optional[str] = None):
        self.id = node_id
        self.dir = temp_dir("tenure-py-%s-" % node_id)
        self.data_dir = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "tenured.log")
        self.extra = extra or []
        self.scheme = scheme
        self.ca_file = ca_file
        self.api = "127.0.0.1:%d" % free_port()
        self.raft = "127.0.0.1:%d" % free_port()
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "Node":
        args = [binary("tenured"), "--node-id", self.id, "--data-dir", self.data_dir, "--listen", self.api,
                "--raft-listen", self.raft, "--election-timeout", "300ms", "--log-level", "warn"] + self.extra
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        _live.append(self.proc)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        import ssl
        ctx = ssl.create_default_context(cafile=self.ca_file) if self.scheme == "https" else None

        def ready() -> None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError("tenured exited with %s; log: %s" % (self.proc.returncode, self.log()))
            try:
                with urllib.request.urlopen("%s://%s/readyz" % (self.scheme, self.api), timeout=1,
                                            context=ctx) as r:
                    if r.status != 200:
                        raise AssertionError("status %d" % r.status)
            except urllib.error.HTTPError as e:
                e.close()
                raise AssertionError("status %d" % e.code) from None
        eventually("%s (%s) to answer /readyz with 200" % (self.id, self.api), timeout, ready, 0.1)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def describe(self) -> str:
        return "tenured %s at %s, log in %s" % (self.id, self.api, self.log_path)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def write_auth_file(path: str, principals: dict) -> dict:
    """write_auth_file writes an auth file for principals
    {name: roles} and returns {name: token}, each token new."""
    tokens = {}
    doc = {"principals": {}}
    for name, roles in principals.items():
        tok = "tnr_" + os.urandom(24).hex()
        tokens[name] = tok
        doc["principals"][name] = {"roles": roles,
                                   "tokens": ["sha256:" + hashlib.sha256(tok.encode()).hexdigest()]}
    with open(path, "w") as f:
        json.dump(doc, f)
    os.chmod(path, 0o600)
    return tokens


class NodeTest(unittest.TestCase):
    """NodeTest is a test case on real nodes: when one of its tests fails,
    the temporary directories (node logs) are kept after the run."""

    def run(self, result=None):
        result = super().run(result)
        if result is not None and not result.wasSuccessful():
            keep_dirs()
        return result


class OneNodeTest(NodeTest):
    """OneNodeTest has one node, n1, started once for the class, and a
    client on it (10s timeout): cls.node and cls.client."""

    node: Node

    @classmethod
    def setUpClass(cls):
        import tenure  # found through SRC_DIR, set above
        cls.node = Node("n1").start()
        cls.client = tenure.Client([cls.node.api], timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.node.stop()

    def history(self, name: str) -> dict:
        """history is the dashboard's history of name on the node: its
        terms and its waiters."""
        url = "http://%s/ui/api/history?name=%s" % (self.node.api, urllib.parse.quote(name, safe=""))
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)

    def waiters(self, name: str) -> list:
        return self.history(name).get("waiters") or []

    def queued(self, name: str, holder: str) -> None:
        """queued waits until holder waits for name on the node."""
        def check():
            if holder not in self.waiters(name):
                raise AssertionError("waiters %s" % self.waiters(name))
        eventually("%s to wait for %s" % (holder, name), 10, check)

    def wait_in_thread(self, name: str, holder: str, ttl: float = 30, timeout: float = 30, **opts):
        """wait_in_thread acquires name for holder with a wait, in a
        thread, and returns once the holder is queued: the thread, and a
        dict that gets the "grant" or the "error"."""
        out: dict = {}

        def run():
            try:
                out["grant"] = self.client.acquire(name, holder, ttl, wait=True, wait_timeout=timeout, **opts)
            except Exception as e:  # noqa: BLE001
                out["error"] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.queued(name, holder)
        return t, out
