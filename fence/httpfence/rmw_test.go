package httpfence_test

import (
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

// TestFencedRead plays the lost update of docs/fencing.md against a
// service behind the middleware that keeps one list: GET reads it, PUT
// replaces it. A (token 1) has written; B (token 2) reads, appends
// itself and writes back; between B's read and B's write, A wakes up and
// writes its own list.
//
// With B's GET sent through httpfence.Transport (the headers on the
// read), the middleware records token 2 at the read and A's PUT gets
// 409. With the GET sent without them (the bug, run here to show that
// the test catches it; the service allows unfenced requests), A's PUT
// passes and B's write then replaces it.
func TestFencedRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fenced   bool
		wantLost bool
	}{
		{"GET with the headers", true, false},
		{"GET without them (the bug)", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
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
			defer srv.Close()
			client := func(l fence.Lease) *http.Client {
				return &http.Client{Transport: &httpfence.Transport{Lease: l}}
			}
			do := func(c *http.Client, method, body string) (string, error) {
				req, err := http.NewRequest(method, srv.URL, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if err := httpfence.CheckResponse(resp); err != nil {
					return "", err
				}
				b, _ := io.ReadAll(resp.Body)
				return string(b), nil
			}
			a, b := client(fence.Grant("reports", 1)), client(fence.Grant("reports", 2))
			if _, err := do(a, http.MethodPut, "A1;"); err != nil {
				t.Fatal(err)
			}
			reader := http.DefaultClient
			if tc.fenced {
				reader = b
			}
			old, err := do(reader, http.MethodGet, "")
			if err != nil {
				t.Fatal(err)
			}
			_, aErr := do(a, http.MethodPut, "A1;A2;") // A wakes up
			if _, err := do(b, http.MethodPut, old+"B;"); err != nil {
				t.Fatalf("B: %v", err)
			}
			mu.Lock()
			final := list
			mu.Unlock()
			t.Logf("A's late write: %v; list %q", aErr, final)
			lost := aErr == nil && !strings.Contains(final, "A2;")
			if lost != tc.wantLost {
				t.Fatalf("A's late write: %v; list %q; lost update %t, want %t", aErr, final, lost, tc.wantLost)
			}
			if tc.fenced {
				fencetest.WantStale(t, aErr, 1, 2)
				if final != "A1;B;" {
					t.Fatalf("list = %q, want A's first write and B's", final)
				}
			}
		})
	}
}
