package httpfence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/tenure-io/tenure/fence"
)

// The request headers that carry a write's lease and token.
const (
	// HeaderLease is the name of the lease: the fenced resource.
	HeaderLease = "Tenure-Lease"
	// HeaderToken is the fencing token, in decimal.
	HeaderToken = "Tenure-Token"
)

// Config configures the middleware and the Connect interceptor. Start
// from DefaultConfig.
type Config struct {
	// Fence keeps the fences. Default (also when nil): a new Memory.
	Fence Fence
	// AllowUnfenced lets requests without the headers through, unchecked
	// (reads, health checks). Default false: they are refused with 428
	// Precondition Required (Connect: failed_precondition).
	AllowUnfenced bool
}

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config { return Config{Fence: NewMemory()} }

func (c *Config) fence() Fence {
	if c.Fence == nil {
		c.Fence = NewMemory()
	}
	return c.Fence
}

// ErrMissing is returned by Parse when a request carries neither header.
var ErrMissing = errors.New("httpfence: no " + HeaderLease + " and " + HeaderToken + " headers")

// Parse reads the lease and token from h. It returns ErrMissing when
// both headers are absent, and an error matching fence.ErrInvalid when
// one is missing or malformed.
func Parse(h http.Header) (fence.Lease, error) {
	name, tok := h.Get(HeaderLease), h.Get(HeaderToken)
	if name == "" && tok == "" {
		return nil, ErrMissing
	}
	if tok == "" {
		return nil, fence.Invalid("header %s is missing", HeaderToken)
	}
	n, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return nil, fence.Invalid("header %s: %q is not a token", HeaderToken, tok)
	}
	if err := fence.Check(name, n); err != nil {
		return nil, err
	}
	return fence.Grant(name, n), nil
}

type ctxKey struct{}

// FromContext returns the lease of the request being handled, as the
// middleware or the interceptor admitted it.
func FromContext(ctx context.Context) (fence.Lease, bool) {
	l, ok := ctx.Value(ctxKey{}).(fence.Lease)
	return l, ok
}

// StaleBody is the JSON body of a 409 answer.
type StaleBody struct {
	Error    string `json:"error"` // "stale_token"
	Message  string `json:"message"`
	Resource string `json:"resource"`
	Token    uint64 `json:"token"`
	Highest  uint64 `json:"highest"`
}

// Middleware returns next behind the fence: a request must carry
// HeaderLease and HeaderToken, and is handled only if its token passes
// cfg.Fence. A stale token is answered 409 Conflict with a JSON StaleBody
// naming both tokens; missing headers 428 (unless cfg.AllowUnfenced),
// malformed ones 400. The handler finds the lease with FromContext.
func Middleware(cfg Config, next http.Handler) http.Handler {
	f := cfg.fence()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, err := Parse(r.Header)
		switch {
		case errors.Is(err, ErrMissing) && cfg.AllowUnfenced:
			next.ServeHTTP(w, r)
			return
		case errors.Is(err, ErrMissing):
			http.Error(w, err.Error(), http.StatusPreconditionRequired)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		exit, err := f.Enter(r.Context(), l.Name(), l.Token())
		if se, ok := errors.AsType[*fence.StaleError](err); ok {
			writeStale(w, se)
			return
		}
		if errors.Is(err, fence.ErrInvalid) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, "httpfence: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer exit()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, l)))
	})
}

func writeStale(w http.ResponseWriter, se *fence.StaleError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusConflict)
	json.NewEncoder(w).Encode(StaleBody{Error: "stale_token", Message: se.Error(), Resource: se.Resource, Token: se.Token, Highest: se.Highest})
}

// Transport is an http.RoundTripper that adds HeaderLease and HeaderToken
// from Lease to every request. Use it in the http.Client of a service
// behind the middleware, or of a Connect client.
type Transport struct {
	// Lease gives the headers: an *election.Lease, or fence.Grant.
	// Required.
	Lease fence.Lease
	// Base sends the requests. Default (when nil) http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper. It refuses to send a request
// for a lease without a name or with token 0.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Lease == nil {
		return nil, fence.Invalid("httpfence.Transport has no Lease")
	}
	name, tok := t.Lease.Name(), t.Lease.Token()
	if err := fence.Check(name, tok); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set(HeaderLease, name)
	r.Header.Set(HeaderToken, strconv.FormatUint(tok, 10))
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// CheckResponse returns a *fence.StaleError for a 409 answer with a
// StaleBody, and nil for any other answer. It reads the body of a 409
// and leaves other bodies alone.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusConflict {
		return nil
	}
	var b StaleBody
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return fmt.Errorf("httpfence: read a 409 answer: %w", err)
	}
	if err := json.Unmarshal(data, &b); err != nil || b.Error != "stale_token" {
		return nil
	}
	return &fence.StaleError{Resource: b.Resource, Token: b.Token, Highest: b.Highest}
}
