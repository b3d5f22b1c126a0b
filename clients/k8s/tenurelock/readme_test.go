package tenurelock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/clients/k8s/tenurelock"
)

// runLeader is the main example of ../README.md: the lines between the
// markers are shown there verbatim (TestREADMEShowsTheExample checks it),
// and TestREADMEExample runs them against a real tenured that serves TLS
// and wants a bearer token.
func runLeader(ctx context.Context, endpoints []string, caFile, token, podName string, run func(context.Context, uint64)) error {
	// README example begin
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pem, err := os.ReadFile(caFile) // the cluster's CA certificate (ca.crt of tenure certs init)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s: no PEM certificate", caFile)
	}
	c, err := client.New(client.Config{
		Endpoints: endpoints,
		TLS:       &tls.Config{RootCAs: roots}, // Certificates: a client certificate instead of a token
		Token:     token,                       // a principal with the role hold:svc/ (say, from a Secret)
	})
	if err != nil {
		return err
	}
	defer c.Close()
	lock, err := tenurelock.New(tenurelock.Config{
		Client:    c,
		Name:      "svc/my-controller",
		Identity:  podName,
		OnRefused: cancel, // a wrong token or a missing role: stop campaigning (client-go only logs it)
	})
	if err != nil {
		return err
	}
	ctx = tenurelock.NewContext(ctx, lock) // so TokenFrom finds the token in OnStartedLeading's context
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second, // becomes the tenure lease's TTL
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				// ctx ends at tenure's local deadline at the latest; token is this term's.
				ctx, token, err := lock.Leading(ctx)
				if err != nil {
					return // the term already ended
				}
				// Pass the token with every write: tenure's fenced store
				// refuses it once another candidate has been granted the lease.
				_, err = c.Put(ctx, "svc/my-controller/leader", []byte(podName), "svc/my-controller", token)
				if err != nil {
					log.Printf("write refused: %v", err)
					return
				}
				run(ctx, token) // the leader's work, under ctx, with token on its writes
			},
			OnStoppedLeading: func() { log.Print("stopped leading") },
		},
	})
	// RunOrDie returns once ctx ends (with ReleaseOnCancel, after releasing the lease).
	if err := context.Cause(ctx); errors.Is(err, tenurelock.ErrRefused) {
		return err
	}
	return nil
	// README example end
}

// TestREADMEExample runs the README's example against a tenured with TLS
// and an auth file: with the token of a principal that may hold the lease
// it leads, writes with its token through the fenced store, and on cancel
// releases the lease; with the token of one that may only read, it returns
// the refusal instead of campaigning on.
func TestREADMEExample(t *testing.T) {
	s := startSecured(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type lead struct {
		token     uint64
		fromCtx   uint64
		ctxTokOK  bool
		ctxActive bool
	}
	leads := make(chan lead, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- runLeader(ctx, []string{s.api}, s.caFile, s.tokens["controller"], "pod-a", func(ctx context.Context, token uint64) {
			tok, ok := tenurelock.TokenFrom(ctx)
			leads <- lead{token: token, fromCtx: tok, ctxTokOK: ok, ctxActive: ctx.Err() == nil}
			cancel()
		})
	}()
	l := wait(t, leads, "the README example to lead")
	if l.token == 0 || !l.ctxTokOK || l.fromCtx != l.token || !l.ctxActive {
		t.Fatalf("in the example's run: token %d, TokenFrom %d (%v), context active %v", l.token, l.fromCtx, l.ctxTokOK, l.ctxActive)
	}
	if err := wait(t, errc, "the README example to return after cancel"); err != nil {
		t.Fatalf("the README example: %v", err)
	}
	c := s.client(t, s.tokens["controller"], false)
	kv, err := c.KVGet(t.Context(), "svc/my-controller/leader")
	if err != nil {
		t.Fatalf("the example's write: %v", err)
	}
	if string(kv.Value) != "pod-a" || kv.Token != l.token {
		t.Fatalf("the store holds %q (token %d), want \"pod-a\" (token %d)", kv.Value, kv.Token, l.token)
	}
	if _, err := c.Get(t.Context(), "svc/my-controller"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after cancel with ReleaseOnCancel the lease should be free: Get = %v", err)
	}

	// A principal that may read the lease but not hold it: RunOrDie
	// returns (OnRefused cancelled its context) and the example returns
	// the refusal.
	go func() {
		errc <- runLeader(t.Context(), []string{s.api}, s.caFile, s.tokens["reader"], "pod-r", func(context.Context, uint64) {
			t.Error("the reader leads")
		})
	}()
	err = wait(t, errc, "the README example to return the reader's refusal")
	if !errors.Is(err, tenurelock.ErrRefused) || connect.CodeOf(err) != connect.CodePermissionDenied ||
		!strings.Contains(err.Error(), "hold:svc/my-controller") {
		t.Fatalf("the README example with the reader's token: %v; want the refusal naming the role hold:svc/my-controller", err)
	}
	t.Logf("the README example with the reader's token: %v", err)
	if _, err := c.Get(t.Context(), "svc/my-controller"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after the reader's attempt: Get = %v; want not found", err)
	}
}

// snippetFromSource returns the lines of file between the README markers,
// with one level of indentation removed.
func snippetFromSource(t *testing.T, file string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), "\t// README example begin\n")
	if !ok {
		t.Fatalf("%s: no begin marker", file)
	}
	body, _, ok := strings.Cut(rest, "\t// README example end\n")
	if !ok {
		t.Fatalf("%s: no end marker", file)
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	for i, ln := range lines {
		lines[i] = strings.TrimPrefix(ln, "\t")
	}
	return strings.Join(lines, "\n")
}

// snippetFromREADME returns the body of the go code block that follows
// marker in the README.
func snippetFromREADME(t *testing.T, file, marker string) string {
	t.Helper()
	md, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(md), marker+"\n")
	if !ok {
		t.Fatalf("%s: no %q", file, marker)
	}
	rest, ok = strings.CutPrefix(rest, "```go\n")
	if !ok {
		t.Fatalf("%s: %q is not followed by a ```go block", file, marker)
	}
	body, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("%s: unterminated code block after %q", file, marker)
	}
	return strings.TrimSuffix(body, "\n")
}

// TestREADMEShowsTheExample checks that README.md shows exactly the code
// that TestREADMEExample runs.
func TestREADMEShowsTheExample(t *testing.T) {
	want := snippetFromSource(t, "readme_test.go")
	got := snippetFromREADME(t, "../README.md", "<!-- example: tenurelock/readme_test.go runLeader -->")
	if got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("README.md's example differs from runLeader in readme_test.go at line %d of the snippet:\nREADME: %q\ntest:   %q\n(copy the lines between the markers of readme_test.go, less one tab, into README.md)", i+1, g, w)
			}
		}
	}
}
