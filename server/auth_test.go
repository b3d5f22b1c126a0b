package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/internal/tlsconfig"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/node"
	"github.com/tenure-io/tenure/server"
)

// Every procedure of every service has a permission rule, so a new RPC
// cannot be left open (or shut) by accident.
func TestEveryProcedureHasAnAuthRule(t *testing.T) {
	services := tenurev1.File_tenure_v1_tenure_proto.Services()
	n := 0
	for i := range services.Len() {
		svc := services.Get(i)
		for j := range svc.Methods().Len() {
			m := svc.Methods().Get(j)
			proc := fmt.Sprintf("/%s/%s", svc.FullName(), m.Name())
			n++
			if _, ok := server.AuthRules[proc]; !ok {
				t.Errorf("procedure %s has no rule in authRules", proc)
			}
		}
	}
	// BatchStream is served beside the services, outside their
	// descriptor.
	n++
	if _, ok := server.AuthRules[wire.BatchStreamProcedure]; !ok {
		t.Errorf("procedure %s has no rule in authRules", wire.BatchStreamProcedure)
	}
	if n == 0 || len(server.AuthRules) != n {
		t.Errorf("%d procedures, %d rules: a rule names a procedure that does not exist", n, len(server.AuthRules))
	}
}

func TestParseRole(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		bad  bool
	}{
		{"read:", "read:", false}, {"hold:jobs/", "hold:jobs/", false}, {"admin", "admin", false},
		{"admin:x", "", true}, {"write:x", "", true}, {"", "", true},
	} {
		r, err := server.ParseRole(tc.in)
		if (err != nil) != tc.bad || (err == nil && r.String() != tc.want) {
			t.Errorf("ParseRole(%q) = %v, %v", tc.in, r, err)
		}
	}
}

// secureCluster is three members serving TLS, with client certificates
// from a client CA, member certificates from the cluster CA, and an auth
// file.
type secureCluster struct {
	c        *testcluster.Cluster
	ca       *tlsconfig.Issued // cluster CA: member certificates
	clientCA *tlsconfig.Issued
	authFile string
	tokens   map[string]string // principal -> token
	auths    map[string]*server.Auth
}

func mustCA(t testing.TB, cn string) *tlsconfig.Issued {
	t.Helper()
	ca, err := tlsconfig.NewCA(cn)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustIssue(t testing.TB, ca *tlsconfig.Issued, tmpl tlsconfig.Template) *tlsconfig.Issued {
	t.Helper()
	c, err := ca.Issuer().Issue(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startSecure(t *testing.T) *secureCluster {
	t.Helper()
	s := &secureCluster{
		ca: mustCA(t, "cluster"), clientCA: mustCA(t, "clients"),
		authFile: filepath.Join(t.TempDir(), "auth.json"),
		tokens:   map[string]string{}, auths: map[string]*server.Auth{},
	}
	for _, p := range []struct {
		name  string
		roles []string
	}{
		{"alice", []string{"hold:jobs/", "read:"}},
		{"bob", []string{"hold:jobs/", "read:"}},
		{"reader", []string{"read:"}},
		{"jobsonly", []string{"hold:jobs/"}},
		{"ops", []string{"admin"}},
	} {
		s.tokens[p.name] = server.NewToken()
		if err := server.AddToken(s.authFile, p.name, s.tokens[p.name], p.roles); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Cert)
	pool.AddCert(s.clientCA.Cert)
	members := map[string]*tlsconfig.Issued{}
	s.c = testcluster.Start(t, testcluster.Config{
		// Calm raft timing: these tests are about who may do what, and
		// an election under load (TLS on every hop) would answer some
		// of their calls "unavailable" instead.
		Size: 3, ElectionTimeout: testcluster.CalmElectionTimeout, MinTTL: testcluster.CalmMinTTL,
		APITLS: func(id string) *tls.Config {
			if members[id] == nil {
				members[id] = mustIssue(t, s.ca, tlsconfig.Template{CommonName: id, Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
			}
			return &tls.Config{Certificates: []tls.Certificate{members[id].TLSCert()}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
		},
		Server: func(id string, cfg *server.Config) {
			if members[id] == nil {
				members[id] = mustIssue(t, s.ca, tlsconfig.Template{CommonName: id, Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
			}
			peer := tlsconfig.NewPeer(members[id].TLSCert(), s.ca.Cert)
			a, err := server.NewAuth(server.AuthConfig{File: s.authFile, ClientCA: true, Peer: peer}, cfg.Logger)
			if err != nil {
				t.Fatal(err)
			}
			s.auths[id] = a
			cfg.Auth = a
			cfg.ForwardTLS = &tls.Config{Certificates: []tls.Certificate{peer.Cert}, RootCAs: peer.CA}
		},
	})
	return s
}

// client returns a client of member m over TLS (verifying with the
// cluster CA), with token (if not "") and cert (if not nil).
func (s *secureCluster) client(t *testing.T, m *testcluster.Member, token string, cert *tlsconfig.Issued) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{m.Addr}
	cfg.RequestTimeout = 2 * time.Second
	tc := &tls.Config{RootCAs: x509.NewCertPool()}
	tc.RootCAs.AddCert(s.ca.Cert)
	if cert != nil {
		// Sent even when the server does not list its CA.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c := cert.TLSCert()
			return &c, nil
		}
	}
	cfg.TLS = tc
	cfg.Token = token
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (s *secureCluster) follower() *testcluster.Member {
	l := s.c.Leader()
	for _, m := range s.c.Members() {
		if m != l {
			return m
		}
	}
	return nil
}

// state is what a refused request must not change: every lease with its
// holder and token, and the last token, as the admin sees them.
func (s *secureCluster) state(t *testing.T, ctx context.Context) string {
	t.Helper()
	admin := s.client(t, s.c.Leader(), s.tokens["ops"], nil)
	ls, err := admin.List(ctx, "")
	if err != nil {
		t.Fatalf("admin list: %v", err)
	}
	st, err := admin.Status(ctx)
	if err != nil {
		t.Fatalf("admin status: %v", err)
	}
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "%s=%s/%d ", l.Name, l.Holder, l.Token)
	}
	kv, err := admin.KVList(ctx, "", client.KVListOptions{})
	if err != nil {
		t.Fatalf("admin kv list: %v", err)
	}
	for _, e := range kv {
		fmt.Fprintf(&b, "%s:%s@%d ", e.Key, e.Value, e.Token)
	}
	fmt.Fprintf(&b, "last_token=%d members=%d leader=%s", st.LastToken, len(st.Members), st.LeaderID)
	return b.String()
}

func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: err = %v (code %s), want %s", what, err, connect.CodeOf(err), code)
	}
}

// Each attack on the API is refused with unauthenticated or
// permission_denied, is logged, changes nothing, and the cluster keeps
// serving.
func TestAuthAttacksRefused(t *testing.T) {
	s := startSecure(t)
	ctx := ctxT(t)
	leader, follower := s.c.Leader(), s.follower()
	alice := s.client(t, leader, s.tokens["alice"], nil)
	g, err := alice.Acquire(ctx, "jobs/x", "a", 30*time.Second)
	if err != nil {
		t.Fatalf("alice acquire: %v", err)
	}
	if _, err := alice.Put(ctx, "jobs/x/data", []byte("v1"), "jobs/x", g.Token); err != nil {
		t.Fatalf("alice put: %v", err)
	}
	// Through a follower: the grant is alice's, not the follower's.
	aliceF := s.client(t, follower, s.tokens["alice"], nil)
	gy, err := aliceF.Acquire(ctx, "jobs/y", "a", 30*time.Second)
	if err != nil {
		t.Fatalf("alice acquire via a follower: %v", err)
	}
	before := s.state(t, ctx)

	otherCA := mustCA(t, "other")
	expired := mustIssue(t, s.clientCA, tlsconfig.Template{CommonName: "alice", Client: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	foreign := mustIssue(t, otherCA, tlsconfig.Template{CommonName: "ops", Client: true})
	memberLike := mustIssue(t, s.clientCA, tlsconfig.Template{CommonName: "member:n1", Client: true})

	bob := s.client(t, leader, s.tokens["bob"], nil)
	bobF := s.client(t, follower, s.tokens["bob"], nil)
	reader := s.client(t, leader, s.tokens["reader"], nil)
	for _, tc := range []struct {
		name string
		do   func() error
		code connect.Code // 0: a TLS handshake failure
	}{
		{"no credentials", func() error {
			_, err := s.client(t, leader, "", nil).Acquire(ctx, "jobs/z", "x", 5*time.Second)
			return err
		}, connect.CodeUnauthenticated},
		{"a wrong token", func() error {
			return s.client(t, leader, "tnr_wrong", nil).Release(ctx, "jobs/x", g.Token)
		}, connect.CodeUnauthenticated},
		{"a token of a principal without the prefix", func() error {
			_, err := alice.Acquire(ctx, "other/z", "a", 5*time.Second)
			return err
		}, connect.CodePermissionDenied},
		{"a watch outside the principal's prefix", func() error {
			_, err := s.client(t, leader, s.tokens["jobsonly"], nil).Watch(ctx, "")
			return err
		}, connect.CodePermissionDenied},
		{"a list outside the principal's prefix", func() error {
			_, err := s.client(t, follower, s.tokens["jobsonly"], nil).List(ctx, "job")
			return err
		}, connect.CodePermissionDenied},
		{"a read-only principal acquires", func() error {
			_, err := reader.Acquire(ctx, "jobs/z", "r", 5*time.Second)
			return err
		}, connect.CodePermissionDenied},
		{"release with the right token from the wrong principal", func() error {
			return bob.Release(ctx, "jobs/x", g.Token)
		}, connect.CodePermissionDenied},
		{"the same through a follower", func() error {
			return bobF.Release(ctx, "jobs/y", gy.Token)
		}, connect.CodePermissionDenied},
		{"renew with the right token from the wrong principal", func() error {
			_, err := bob.RenewOne(ctx, "jobs/x", g.Token)
			return err
		}, connect.Code(0xff)},
		{"a fenced write with the right token from the wrong principal", func() error {
			_, err := bob.Put(ctx, "jobs/x/data", []byte("evil"), "jobs/x", g.Token)
			return err
		}, connect.CodePermissionDenied},
		{"re-acquire as the holder from the wrong principal", func() error {
			_, err := bob.Acquire(ctx, "jobs/x", "a", 60*time.Second)
			return err
		}, connect.CodePermissionDenied},
		{"a non-admin moves leadership", func() error {
			_, err := alice.TransferLeadership(ctx, follower.ID)
			return err
		}, connect.CodePermissionDenied},
		{"a non-admin removes a voter", func() error {
			return alice.Leave(ctx, follower.ID)
		}, connect.CodePermissionDenied},
		{"a non-admin takes a backup", func() error {
			_, err := alice.Snapshot(ctx, io.Discard)
			return err
		}, connect.CodePermissionDenied},
		{"a read-only principal takes a backup through a follower", func() error {
			_, err := s.client(t, follower, s.tokens["reader"], nil).Snapshot(ctx, io.Discard)
			return err
		}, connect.CodePermissionDenied},
		{"a client certificate named as a member", func() error {
			return s.client(t, leader, "", memberLike).Leave(ctx, follower.ID)
		}, connect.CodePermissionDenied},
		{"a plain client asserts another principal", func() error {
			return assertPrincipal(ctx, s, leader, s.tokens["bob"], "alice", "jobs/x", g.Token)
		}, connect.CodePermissionDenied},
		{"a certificate from another CA", func() error {
			_, err := s.client(t, leader, "", foreign).Status(ctx)
			return err
		}, 0},
		{"an expired certificate", func() error {
			_, err := s.client(t, leader, "", expired).Status(ctx)
			return err
		}, 0},
		{"plain HTTP to the TLS port", func() error {
			cfg := client.DefaultConfig()
			cfg.Endpoints = []string{leader.Addr}
			cfg.Token = s.tokens["ops"]
			cfg.RequestTimeout = time.Second
			c, err := client.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return c.Release(sctx, "jobs/x", g.Token)
		}, connect.Code(0xfe)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			switch tc.code {
			case 0:
				if err == nil || !client.IsTLSError(err) {
					t.Errorf("err = %v, want a TLS handshake failure", err)
				}
			case 0xfe:
				if err == nil {
					t.Error("plain HTTP to a TLS port was answered")
				}
			case 0xff:
				if !errors.Is(err, client.ErrForbidden) {
					t.Errorf("err = %v, want ErrForbidden", err)
				}
			default:
				wantCode(t, tc.name, err, tc.code)
			}
			if after := s.state(t, ctx); after != before {
				t.Fatalf("state changed:\n%s\nwant\n%s", after, before)
			}
		})
	}
	// Health and metrics stay open.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		tc := &tls.Config{RootCAs: x509.NewCertPool()}
		tc.RootCAs.AddCert(s.ca.Cert)
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		res, err := hc.Get("https://" + leader.Addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		res.Body.Close()
		hc.CloseIdleConnections()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s without credentials: %s, want 200", path, res.Status)
		}
	}
	if _, err := s.client(t, leader, s.tokens["jobsonly"], nil).Watch(ctx, "jobs/"); err != nil {
		t.Errorf("a watch inside the principal's prefix: %v", err)
	}

	if !s.c.Logged(leader, "refused a request") {
		t.Error("the leader logged no refusal")
	}
	if !s.c.Logged(leader, "TLS handshake error") {
		t.Error("the leader logged no TLS handshake failure")
	}

	// A client certificate from the client CA names its principal: the
	// owner's own certificate may release, and so may its token, through
	// a follower (the forwarded principal is the caller's).
	aliceCert := mustIssue(t, s.clientCA, tlsconfig.Template{CommonName: "alice", Client: true})
	if _, err := s.client(t, leader, "", aliceCert).RenewOne(ctx, "jobs/x", g.Token); err != nil {
		t.Fatalf("alice's certificate renews alice's grant: %v", err)
	}
	if _, err := s.client(t, follower, "", aliceCert).RenewOne(ctx, "jobs/x", g.Token); err != nil {
		t.Fatalf("alice's certificate renews alice's grant through a follower: %v", err)
	}
	if err := aliceF.Release(ctx, "jobs/y", gy.Token); err != nil {
		t.Fatalf("alice releases through a follower: %v", err)
	}

	// A revoked token: removed from the file, reloaded.
	if err := os.WriteFile(s.authFile, []byte(strings.Replace(readFile(t, s.authFile), server.HashToken(s.tokens["bob"]), server.HashToken("tnr_other"), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Get(ctx, "jobs/x"); err != nil {
		t.Fatalf("bob reads before the reload: %v", err)
	}
	for _, a := range s.auths {
		if err := a.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	before = s.state(t, ctx)
	_, err = bob.Get(ctx, "jobs/x")
	wantCode(t, "a revoked token", err, connect.CodeUnauthenticated)
	// A bad file on reload keeps the old one.
	if err := os.WriteFile(s.authFile, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.auths[leader.ID].Reload(); err == nil {
		t.Fatal("a bad auth file was reloaded")
	}
	if !s.c.Logged(leader, "auth file not reloaded") {
		t.Error("no log of the failed reload")
	}
	if _, err := alice.Get(ctx, "jobs/x"); err != nil {
		t.Fatalf("alice after a failed reload: %v", err)
	}
	if after := s.state(t, ctx); after != before {
		t.Fatalf("state changed:\n%s\nwant\n%s", after, before)
	}
	// And the owner still may.
	if err := alice.Release(ctx, "jobs/x", g.Token); err != nil {
		t.Fatalf("alice releases her own grant: %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// assertPrincipal sends a release as a forwarded request that names
// principal, with token, over TLS but with no member certificate.
func assertPrincipal(ctx context.Context, s *secureCluster, m *testcluster.Member, token, principal, name string, tok uint64) error {
	tc := &tls.Config{RootCAs: x509.NewCertPool()}
	tc.RootCAs.AddCert(s.ca.Cert)
	var p http.Protocols
	p.SetHTTP2(true)
	tr := &http.Transport{Protocols: &p, TLSClientConfig: tc}
	defer tr.CloseIdleConnections()
	lc := tenurev1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, "https://"+m.Addr, connect.WithGRPC())
	req := connect.NewRequest(&tenurev1.ReleaseRequest{Name: name, Token: tok})
	req.Header().Set("Tenure-Forwarded", "n9")
	req.Header().Set("Tenure-Principal", principal)
	req.Header().Set("Authorization", "Bearer "+token)
	_, err := lc.Release(ctx, req)
	return err
}

// TLS spoken to a plain-text API fails the handshake at once (it is not
// retried as if the node were down), and the server keeps serving plain
// clients.
func TestTLSToAPlainPortFails(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{Size: 1, ElectionTimeout: 300 * time.Millisecond})
	ctx := ctxT(t)
	addr := c.Leader().Addr
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{"https://" + addr}
	cfg.RequestTimeout = 5 * time.Second
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	start := time.Now()
	_, err = cl.Acquire(ctx, "jobs/x", "h", 5*time.Second)
	if !client.IsTLSError(err) {
		t.Fatalf("err = %v, want a TLS error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the TLS failure took %s: it was retried", d)
	}
	plainCfg := client.DefaultConfig()
	plainCfg.Endpoints = []string{addr}
	plain, err := client.New(plainCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Get(ctx, "jobs/x"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("plain get after the TLS attempt: %v, want not found (nothing was acquired)", err)
	}
}

// An admin takes a backup through a follower on a TLS cluster with
// authentication: the follower relays the leader's stream for the
// admin's principal, and the file verifies.
func TestAdminBackupThroughFollower(t *testing.T) {
	s := startSecure(t)
	ctx := ctxT(t)
	alice := s.client(t, s.c.Leader(), s.tokens["alice"], nil)
	g, err := alice.Acquire(ctx, "jobs/x", "a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "backup")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.client(t, s.follower(), s.tokens["ops"], nil).Snapshot(ctx, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("admin backup through a follower: %v", err)
	}
	b, err := node.ReadBackup(path)
	if err != nil {
		t.Fatalf("the relayed backup does not verify: %v", err)
	}
	if b.Size != n || b.Info.LastToken != g.Token || b.Info.ClusterID == "" {
		t.Fatalf("backup %+v (%d bytes received); want last token %d and a cluster ID", b.Info, n, g.Token)
	}
}

// A refusal names the operation and the lease or prefix, and the role
// that would allow it; any authenticated principal, even one with no
// roles, may read the cluster's status.
func TestRefusalsNameTheOperation(t *testing.T) {
	s := startSecure(t)
	ctx := ctxT(t)
	leader := s.c.Leader()
	// A client certificate the auth file does not list: a principal
	// with no roles.
	noroles := s.client(t, leader, "", mustIssue(t, s.clientCA, tlsconfig.Template{CommonName: "noroles", Client: true}))
	if _, err := noroles.Status(ctx); err != nil {
		t.Errorf("status as a principal with no roles: %v, want allowed", err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
		want string
	}{
		{"a reader acquires (a batched call)", func() error {
			_, err := s.client(t, leader, s.tokens["reader"], nil).Acquire(ctx, "jobs/z", "r", 5*time.Second)
			return err
		}, `principal "reader" may not acquire lease "jobs/z": it needs the role hold:jobs/z, or hold on a shorter prefix (its roles: read:)`},
		{"a watch of everything without read on everything", func() error {
			_, err := s.client(t, leader, s.tokens["jobsonly"], nil).Watch(ctx, "")
			return err
		}, `principal "jobsonly" may not watch leases under "": it needs the role read: (on every name) (its roles: hold:jobs/)`},
		{"a non-admin moves the leadership", func() error {
			_, err := s.client(t, leader, s.tokens["alice"], nil).TransferLeadership(ctx, "")
			return err
		}, `principal "alice" may not move the leadership: it needs the role admin (its roles: hold:jobs/, read:)`},
		{"a principal with no roles writes", func() error {
			_, err := noroles.Put(ctx, "k", []byte("v"), "jobs/x", 1)
			return err
		}, `principal "noroles" may not write under lease "jobs/x": it needs the role hold:jobs/x, or hold on a shorter prefix (its roles: none)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant permission denied: %s", err, tc.want)
			}
		})
	}
}

// Revoke needs the admin role: a holder may not revoke even its own
// grant (refused, naming the operation and the lease, nothing changed);
// an admin's revoke through a follower ends it, and the holder's next
// renewal fails with the reason.
func TestRevokeNeedsAdmin(t *testing.T) {
	s := startSecure(t)
	ctx := ctxT(t)
	alice := s.client(t, s.follower(), s.tokens["alice"], nil)
	g, err := alice.Acquire(ctx, "jobs/x", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.Revoke(ctx, "jobs/x", g.Token, "mine")
	want := `principal "alice" may not revoke lease "jobs/x": it needs the role admin (its roles: hold:jobs/, read:)`
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), want) {
		t.Fatalf("a holder's revoke: %v\nwant permission denied: %s", err, want)
	}
	if l, err := alice.Get(ctx, "jobs/x"); err != nil || l.Token != g.Token {
		t.Fatalf("after the refused revoke: %+v, %v", l, err)
	}
	revoked, err := s.client(t, s.follower(), s.tokens["ops"], nil).Revoke(ctx, "jobs/x", 0, "rotating credentials")
	if err != nil || len(revoked) != 1 || revoked[0].Token != g.Token || revoked[0].Holder != "a" {
		t.Fatalf("an admin's revoke through a follower: %+v, %v", revoked, err)
	}
	_, err = alice.RenewOne(ctx, "jobs/x", g.Token)
	if re, ok := errors.AsType[*client.RevokedError](err); !ok || re.Reason != "rotating credentials" || !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("renewal of the revoked grant: %v", err)
	}
}

// A TLS client whose first call is not batched (Status, on the HTTP/2
// transport) still makes batched calls (Acquire, on the HTTP/1.1 one):
// the transports once shared one TLS config, the first set it to offer
// only h2, and every batched call after it failed with a malformed
// HTTP response.
func TestTLSClientBatchesAfterAnUnbatchedCall(t *testing.T) {
	s := startSecure(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name  string
		token string
		cert  *tlsconfig.Issued
	}{
		{"bearer token", s.tokens["alice"], nil},
		{"client certificate", "", mustIssue(t, s.clientCA, tlsconfig.Template{CommonName: "alice", Client: true})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := s.client(t, s.c.Leader(), tc.token, tc.cert)
			if _, err := c.Status(ctx); err != nil {
				t.Fatalf("status: %v", err)
			}
			l, err := c.Acquire(ctx, "jobs/tls-"+strings.ReplaceAll(tc.name, " ", "-"), "a", 5*time.Second)
			if err != nil {
				t.Fatalf("acquire after status: %v", err)
			}
			if err := c.Release(ctx, l.Name, l.Token); err != nil {
				t.Fatalf("release: %v", err)
			}
		})
	}
}

// History needs the read role for the name, and a term records the
// principal that acquired it.
func TestHistoryNeedsReadAndRecordsThePrincipal(t *testing.T) {
	s := startSecure(t)
	ctx := ctxT(t)
	alice := s.client(t, s.follower(), s.tokens["alice"], nil)
	g, err := alice.Acquire(ctx, "jobs/h", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	terms, err := s.client(t, s.follower(), s.tokens["reader"], nil).History(ctx, "jobs/h", client.HistoryOptions{})
	if err != nil || len(terms) != 1 || terms[0].Token != g.Token || terms[0].Principal != "alice" || !terms[0].Held() {
		t.Fatalf("a reader's history through a follower: %+v, %v", terms, err)
	}
	_, err = s.client(t, s.follower(), s.tokens["jobsonly"], nil).History(ctx, "other/h", client.HistoryOptions{})
	want := `principal "jobsonly" may not read the history of lease "other/h"`
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), want) {
		t.Fatalf("history without the read role: %v\nwant permission denied: %s", err, want)
	}
}
