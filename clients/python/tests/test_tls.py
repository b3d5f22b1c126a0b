"""A TLS tenured with an auth file: certificates from `tenure certs init`,
bearer tokens, client certificates, and every refusal as its error."""

import os
import subprocess
import unittest

import helpers

import tenure


class TLSAuthTest(helpers.NodeTest):
    @classmethod
    def setUpClass(cls):
        d = helpers.temp_dir("tenure-py-tls-")
        cls.certs = os.path.join(d, "certs")
        subprocess.run([helpers.binary("tenure"), "certs", "init", cls.certs, "--members", "n1"], check=True,
                       stdout=subprocess.DEVNULL)
        auth = os.path.join(d, "auth.json")
        cls.tokens = helpers.write_auth_file(auth, {
            "app": ["hold:py/", "read:"],
            "other": ["hold:py/", "read:"],
            "reader": ["read:"],
            "client": ["hold:py/cert/", "read:"],  # the client certificate's principal
            "ops": ["admin"],
        })
        c = lambda f: os.path.join(cls.certs, f)  # noqa: E731
        cls.ca = c("ca.crt")
        cls.node = helpers.Node("n1", scheme="https", ca_file=cls.ca, extra=[
            "--tls-cert", c("n1.crt"), "--tls-key", c("n1.key"), "--client-ca", c("client-ca.crt"),
            "--auth-file", auth]).start()

    @classmethod
    def tearDownClass(cls):
        cls.node.stop()

    def client(self, **kw):
        c = tenure.Client([self.node.api], timeout=10, **kw)
        self.addCleanup(c.close)
        return c

    def test_token_holds_and_writes(self):
        c = self.client(ca_file=self.ca, token=self.tokens["app"])
        with c.session(ttl=3) as s:
            with s.acquire("py/tls/job") as lease:
                lease.put("py/tls/job/out", "ok")
        self.assertEqual(c.kv_get("py/tls/job/out").value, b"ok")
        # https:// endpoints work too.
        c2 = tenure.Client(["https://" + self.node.api], ca_file=self.ca, token=self.tokens["app"])
        self.addCleanup(c2.close)
        self.assertEqual(c2.status().state, "leader")

    def test_revoke_needs_admin(self):
        app = self.client(ca_file=self.ca, token=self.tokens["app"])
        g = app.acquire("py/tls/revoked", "a", 10)
        with self.assertRaises(tenure.PermissionDeniedError) as cm:
            app.revoke("py/tls/revoked", g.token, reason="mine")
        self.assertIn('principal "app" may not revoke lease "py/tls/revoked": it needs the role admin',
                      str(cm.exception))
        self.assertEqual(app.get("py/tls/revoked").token, g.token, "a refused revoke changed nothing")
        ops = self.client(ca_file=self.ca, token=self.tokens["ops"])
        self.assertEqual([x.token for x in ops.revoke("py/tls/revoked", reason="rotating keys")], [g.token])
        with self.assertRaises(tenure.RevokedError) as cm:
            app.renew_one("py/tls/revoked", g.token)
        self.assertEqual(cm.exception.reason, "rotating keys")

    def test_client_certificate(self):
        c = self.client(ca_file=self.ca, cert_file=os.path.join(self.certs, "client.crt"),
                        key_file=os.path.join(self.certs, "client.key"))
        g = c.acquire("py/cert/x", "h", 3)
        c.release("py/cert/x", g.token)
        with self.assertRaises(tenure.PermissionDeniedError):
            c.acquire("py/tls/outside-the-cert-role", "h", 3)

    def test_refusals(self):
        with self.assertRaises(tenure.UnauthenticatedError):
            self.client(ca_file=self.ca).get("py/x")
        with self.assertRaises(tenure.UnauthenticatedError):
            self.client(ca_file=self.ca, token="tnr_not-a-token").get("py/x")
        with self.assertRaises(tenure.PermissionDeniedError):
            self.client(ca_file=self.ca, token=self.tokens["reader"]).acquire("py/tls/r", "h", 3)
        with self.assertRaises(tenure.PermissionDeniedError):
            self.client(ca_file=self.ca, token=self.tokens["app"]).acquire("elsewhere/x", "h", 3)

    def test_grant_belongs_to_its_principal(self):
        app = self.client(ca_file=self.ca, token=self.tokens["app"])
        other = self.client(ca_file=self.ca, token=self.tokens["other"])
        g = app.acquire("py/tls/owned", "h", 5)
        # The right token is not enough: the grant is app's.
        with self.assertRaises(tenure.PermissionDeniedError):
            other.put("py/tls/owned/k", "x", "py/tls/owned", g.token)
        with self.assertRaises(tenure.PermissionDeniedError):
            other.release("py/tls/owned", g.token)
        app.release("py/tls/owned", g.token)

    def test_tls_failures(self):
        # The system's roots do not know the cluster's CA.
        with self.assertRaises(tenure.TLSError):
            tenure.Client(["https://" + self.node.api], token=self.tokens["app"]).get("py/x")
        # Plain HTTP to the TLS port.
        with self.assertRaises(tenure.TLSError):
            tenure.Client(["http://" + self.node.api], token=self.tokens["app"]).get("py/x")


if __name__ == "__main__":
    unittest.main()
