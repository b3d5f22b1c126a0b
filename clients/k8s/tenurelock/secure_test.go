package tenurelock_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/clients/k8s/tenurelock"
	"github.com/tenure-io/tenure/internal/tlsconfig"
)

// secured is a single-node tenured that serves its API over TLS only and
// authenticates every request with a bearer token from its auth file
// (docs/security.md).
type secured struct {
	api    string
	caFile string            // the cluster CA: verifies the member's certificate
	tokens map[string]string // principal -> its bearer token
}

// securedRoles are the principals of startSecured and their roles:
// controller may hold every svc/ lease, reader may only read them, and
// stranger may hold only other/ leases.
var securedRoles = map[string][]string{
	"controller": {"hold:svc/"},
	"reader":     {"read:svc/"},
	"stranger":   {"hold:other/"},
}

// startSecured starts a tenured with TLS (certificates from tenure certs
// init's code) and an auth file holding a token for each principal of
// securedRoles.
func startSecured(t *testing.T) *secured {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if _, err := tlsconfig.Init(certs, tlsconfig.InitOptions{Members: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	s := &secured{caFile: filepath.Join(certs, "ca.crt"), tokens: map[string]string{}}
	type principal struct {
		Roles  []string `json:"roles"`
		Tokens []string `json:"tokens"`
	}
	file := struct {
		Principals map[string]principal `json:"principals"`
	}{map[string]principal{}}
	for name, roles := range securedRoles {
		b := make([]byte, 32)
		rand.Read(b)
		tok := "tnr_" + base64.RawURLEncoding.EncodeToString(b)
		sum := sha256.Sum256([]byte(tok))
		file.Principals[name] = principal{Roles: roles, Tokens: []string{"sha256:" + hex.EncodeToString(sum[:])}}
		s.tokens[name] = tok
	}
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	auth := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(auth, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s.api = startNode(t, "--tls-cert", filepath.Join(certs, "n1.crt"), "--tls-key", filepath.Join(certs, "n1.key"),
		"--auth-file", auth)
	return s
}

// client returns a client of s with the given bearer token ("" for none)
// that verifies the server with s's CA (or, with systemRoots, with the
// system's roots, which do not know it).
func (s *secured) client(t *testing.T, token string, systemRoots bool) *client.Client {
	t.Helper()
	cfg := &tls.Config{}
	if !systemRoots {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			t.Fatalf("%s: no certificate", s.caFile)
		}
	}
	c, err := client.New(client.Config{Endpoints: []string{s.api}, TLS: cfg, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSecuredElection drives client-go's LeaderElector with two candidates
// through a tenured that serves TLS and wants a bearer token: A leads
// with a token and writes; B does not lead while A renews; A steps down
// (releasing the lease over TLS with its token) and B takes over with a
// larger token; A's late write is refused.
func TestSecuredElection(t *testing.T) {
	s := startSecured(t)
	const lease, key = "svc/secured", "svc/secured/report"
	// One principal for both replicas, as a Deployment's pods share a
	// Secret; each has its own client, as each pod would.
	cA := s.client(t, s.tokens["controller"], false)
	cB := s.client(t, s.tokens["controller"], false)
	a := newCandidate(t, cA, "pod-a", lease)
	b := newCandidate(t, cB, "pod-b", lease)

	a.run(t, true)
	tokA := wait(t, a.started, "A to lead over TLS with a token")
	if _, err := cA.Put(t.Context(), key, []byte("A-1"), lease, tokA); err != nil {
		t.Fatalf("A's write with token %d: %v", tokA, err)
	}

	b.run(t, true)
	leadsWhileOtherWaits(t, a, b, 3)

	// A steps down: with ReleaseOnCancel, client-go's release (an Update
	// without a holder) releases the grant, and B takes over.
	a.cancel()
	wait(t, a.done, "A's elector to return")
	tokB := wait(t, b.started, "B to take over")
	if tokB <= tokA {
		t.Fatalf("B's token %d is not larger than A's %d", tokB, tokA)
	}
	if _, err := cB.Put(t.Context(), key, []byte("B-1"), lease, tokB); err != nil {
		t.Fatalf("B's write with token %d: %v", tokB, err)
	}
	if _, err := cA.Put(t.Context(), key, []byte("A-2"), lease, tokA); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("A's late write with token %d: got %v, want a stale-token refusal", tokA, err)
	}
	kv, err := cB.KVGet(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "B-1" || kv.Token != tokB {
		t.Fatalf("the store holds %q (token %d), want B's \"B-1\" (token %d)", kv.Value, kv.Token, tokB)
	}
}

// TestRefusedCandidate runs client-go's LeaderElector with locks whose
// credentials the secured tenured refuses. client-go itself would only log
// the errors and try again every RetryPeriod; the lock surfaces them:
// WaitLeading returns the refusal (ErrRefused, with the cluster's code and
// message), OnRefused hears of it, and the candidate never leads.
func TestRefusedCandidate(t *testing.T) {
	s := startSecured(t)
	for _, tc := range []struct {
		name        string
		token       string
		systemRoots bool
		code        connect.Code // 0: a TLS error
		want        []string     // in the error's message
	}{
		// May read the lease, not acquire it: client-go's Get finds no
		// grant and its Create is refused.
		{"reader", s.tokens["reader"], false, connect.CodePermissionDenied,
			[]string{`principal "reader"`, "hold:svc/refused-reader", "its roles: read:svc/"}},
		// May not even read it: client-go's Get is refused.
		{"stranger", s.tokens["stranger"], false, connect.CodePermissionDenied,
			[]string{`principal "stranger"`, "read:svc/refused-stranger", "its roles: hold:other/"}},
		{"unknown-token", "tnr_not-a-token-of-this-cluster", false, connect.CodeUnauthenticated, nil},
		{"no-token", "", false, connect.CodeUnauthenticated, nil},
		// A client that does not trust the cluster's CA.
		{"system-roots", s.tokens["controller"], true, 0, []string{"certificate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease := "svc/refused-" + tc.name
			c := s.client(t, tc.token, tc.systemRoots)
			heard := make(chan error, 1)
			lock, err := tenurelock.New(tenurelock.Config{Client: c, Name: lease, Identity: "pod-" + tc.name,
				OnRefused: func(err error) {
					select {
					case heard <- err:
					default:
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			led := make(chan struct{}, 1)
			le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: lock, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
				Name: tc.name,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) { led <- struct{}{} },
					OnStoppedLeading: func() {},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				le.Run(ctx)
			}()
			t.Cleanup(func() {
				cancel()
				<-done
			})

			wctx, wcancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer wcancel()
			_, tok, err := lock.WaitLeading(wctx)
			if err == nil {
				t.Fatalf("WaitLeading: leads with token %d; want a refusal", tok)
			}
			if wctx.Err() != nil {
				t.Fatalf("WaitLeading waited 20s and returned %v; want the refusal at once", err)
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, tenurelock.ErrRefused) {
					t.Fatalf("%s: %v; want an error matching ErrRefused", what, err)
				}
				if tc.code != 0 && connect.CodeOf(err) != tc.code {
					t.Fatalf("%s: code %v (%v); want %v", what, connect.CodeOf(err), err, tc.code)
				}
				if tc.code == 0 && !client.IsTLSError(err) {
					t.Fatalf("%s: %v; want a TLS error", what, err)
				}
				for _, w := range append([]string{lease, "pod-" + tc.name}, tc.want...) {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("%s: %q does not say %q", what, err, w)
					}
				}
			}
			check("WaitLeading", err)
			t.Logf("WaitLeading: %v", err)
			check("OnRefused", wait(t, heard, "OnRefused"))
			// A later WaitLeading returns the refusal at once too.
			if _, _, err := lock.WaitLeading(wctx); !errors.Is(err, tenurelock.ErrRefused) {
				t.Fatalf("the second WaitLeading: %v", err)
			}
			select {
			case <-led:
				t.Fatal("the refused candidate leads")
			default:
			}
			if tok, ok := lock.Token(); ok {
				t.Fatalf("the refused lock reports token %d", tok)
			}
			// Nothing was granted: a candidate the cluster accepts finds
			// the lease free.
			if _, err := s.client(t, s.tokens["controller"], false).Get(t.Context(), lease); !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("Get %s after the refusals: %v; want not found", lease, err)
			}
		})
	}
}
