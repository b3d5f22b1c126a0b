package election_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// endpoints are the API addresses of the cluster the examples use, started
// by TestMain.
var endpoints []string

func TestMain(m *testing.M) { goleak.VerifyTestMain(withExampleCluster{m}) }

// withExampleCluster runs the tests and examples with a one-node cluster
// for the examples, stopped before goleak looks for leaks.
type withExampleCluster struct{ m *testing.M }

func (w withExampleCluster) Run() int { return testcluster.RunWithCluster(w.m, &endpoints) }

// cutTransport carries a client's requests until it is cut; then new
// requests hang until their context ends, and so do the bodies of
// requests and responses still open (a stream carrying batches), as if
// the network dropped every packet.
type cutTransport struct {
	base *http.Transport

	mu  sync.Mutex
	cut chan struct{} // closed when healed; nil while healthy
}

func newCutTransport() *cutTransport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &cutTransport{base: &http.Transport{Protocols: &p}}
}

func (c *cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := c.wait(req.Context(), nil); err != nil {
		return nil, err
	}
	if req.Body != nil {
		req = req.Clone(req.Context())
		req.Body = &cutBody{ReadCloser: req.Body, t: c, ctx: req.Context(), closed: make(chan struct{})}
	}
	res, err := c.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	res.Body = &cutBody{ReadCloser: res.Body, t: c, ctx: req.Context(), closed: make(chan struct{})}
	return res, nil
}

// wait returns once the network is not cut, or with an error when ctx
// ends or closed is closed first.
func (c *cutTransport) wait(ctx context.Context, closed chan struct{}) error {
	c.mu.Lock()
	cut := c.cut
	c.mu.Unlock()
	if cut == nil {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return io.ErrClosedPipe
	case <-cut:
		return nil
	}
}

// cutBody is a request or response body that stalls while its transport
// is cut.
type cutBody struct {
	io.ReadCloser
	t      *cutTransport
	ctx    context.Context
	once   sync.Once
	closed chan struct{}
}

func (b *cutBody) Read(p []byte) (int, error) {
	if err := b.t.wait(b.ctx, b.closed); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

func (b *cutBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.ReadCloser.Close()
}

// setCut cuts the network (true) or heals it (false).
func (c *cutTransport) setCut(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case cut && c.cut == nil:
		c.cut = make(chan struct{})
	case !cut && c.cut != nil:
		close(c.cut)
		c.cut = nil
	}
}

// mustClient returns a client of eps with short backoffs, and its
// transport, which the test can cut.
func mustClient(t *testing.T, eps []string) (*client.Client, *cutTransport) {
	t.Helper()
	tr := newCutTransport()
	cfg := client.DefaultConfig()
	cfg.Endpoints = eps
	cfg.RetryBackoff = 5 * time.Millisecond
	cfg.MaxRetryBackoff = 50 * time.Millisecond
	cfg.RequestTimeout = time.Second
	cfg.HTTPClient = &http.Client{Transport: tr}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() {
		tr.setCut(false)
		c.Close()
		tr.base.CloseIdleConnections()
	})
	return c, tr
}

// within returns a context that ends after d or with the test.
func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// sessionsOf returns a maker of sessions on cl, each with TTL 1s and
// closed when the test ends.
func sessionsOf(t *testing.T, cl *client.Client) func(holder string) *election.Session {
	return func(holder string) *election.Session {
		t.Helper()
		s, err := election.New(cl, election.Config{Holder: holder, TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(t.Context()) })
		return s
	}
}
