package httpfence_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/httpfence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
)

// TestFencedRead plays the lost update of docs/fencing.md (see
// fencetest.ReadModifyWrite) against a service behind the middleware
// that keeps one list: GET reads it, PUT replaces it. B's GET sent
// through httpfence.Transport (the headers on the read) is the fenced
// read: the middleware records token 2 at the read and A's PUT gets 409.
// The GET sent without them is the bug (the service allows unfenced
// requests).
func TestFencedRead(t *testing.T) {
	t.Parallel()
	fencetest.ReadModifyWrite(t, func(t *testing.T) fencetest.RMW {
		var mu sync.Mutex
		list := ""
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if r.Method == http.MethodPut {
				b, _ := io.ReadAll(r.Body)
				list = string(b)
			}
			io.WriteString(w, list)
		})
		srv := httptest.NewServer(httpfence.Middleware(httpfence.Config{Fence: httpfence.NewMemory(), AllowUnfenced: true}, h))
		t.Cleanup(srv.Close)
		client := func(l fence.Lease) *http.Client {
			return &http.Client{Transport: &httpfence.Transport{Lease: l}}
		}
		do := func(ctx context.Context, c *http.Client, method, body string) (string, error) {
			req, err := http.NewRequestWithContext(ctx, method, srv.URL, strings.NewReader(body))
			if err != nil {
				return "", err
			}
			resp, err := c.Do(req)
			if err != nil {
				return "", err
			}
			defer resp.Body.Close()
			if err := httpfence.CheckResponse(resp); err != nil {
				return "", err
			}
			b, err := io.ReadAll(resp.Body)
			return string(b), err
		}
		return fencetest.RMW{
			Write: func(ctx context.Context, l fence.Lease, list string) error {
				_, err := do(ctx, client(l), http.MethodPut, list)
				return err
			},
			Read: func(ctx context.Context) (string, error) {
				return do(ctx, http.DefaultClient, http.MethodGet, "")
			},
			FencedRead: func(ctx context.Context, l fence.Lease) (string, error) {
				return do(ctx, client(l), http.MethodGet, "")
			},
		}
	})
}
