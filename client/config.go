package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Config configures a Client.
type Config struct {
	// Endpoints are the API addresses of cluster members, as host:port
	// (an http:// prefix is accepted; https:// means TLS). Any member serves any request:
	// followers forward to the leader. Required.
	Endpoints []string
	// DialTimeout bounds opening a connection to one endpoint. Ignored when
	// HTTPClient is set. Default 2s.
	DialTimeout time.Duration
	// RequestTimeout bounds one attempt of a request at one endpoint; the
	// caller's context bounds the whole call with its retries. An Acquire
	// that waits gets its wait timeout on top. Default 5s.
	RequestTimeout time.Duration
	// RetryBackoff is the pause after every endpoint failed once; it doubles
	// after each round up to MaxRetryBackoff. Default 50ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the pause between rounds of retries. Default 1s.
	MaxRetryBackoff time.Duration
	// TLS, if set, makes every endpoint https: it verifies the servers
	// (RootCAs; nil means the system's roots) and may carry a client
	// certificate. Endpoints written https://host:port use TLS even
	// without it (with the system's roots). Ignored when HTTPClient is
	// set.
	TLS *tls.Config
	// Token, if set, is sent as a bearer token with every request
	// (Authorization: Bearer TOKEN); the server names the principal.
	Token string
	// HTTPClient carries the requests. It must speak HTTP/2 to plain-text
	// endpoints (the gRPC protocol needs HTTP/2). Nil means transports of
	// the Client's own, closed by Close: HTTP/2 (cleartext h2c to http
	// endpoints) for most calls, and HTTP/1.1 keep-alive connections for
	// the Batch calls that carry batched calls.
	HTTPClient *http.Client
	// ClusterID, if set, is the ID of the cluster the client talks to
	// (tenure status shows it). Every member sends its cluster's ID with
	// each answer; the client refuses answers that carry another ID: the
	// endpoint counts as failed for that call and the call goes on to the
	// other endpoints, and fails with ErrOtherCluster if none of the
	// right cluster answers. A refused request may have taken effect on
	// the other cluster; its answer is discarded. Default "": the client
	// pins the ID of the first answer that carries one (Client.ClusterID
	// returns it), so it never mixes answers of two clusters; setting it
	// also refuses a wrong cluster on first contact.
	ClusterID string
	// NoBatching sends every call in a request of its own. By default,
	// calls that change state without waiting (Acquire without Wait,
	// Renew, Release, Put, Delete) made concurrently to the same endpoint
	// share one Batch request and one raft entry; each still gets its own
	// result. A lone call goes out at once either way.
	NoBatching bool
}

// DefaultConfig returns a Config with the defaults and the local endpoint
// 127.0.0.1:7400 that tenured listens on by default.
func DefaultConfig() Config {
	return Config{
		Endpoints:       []string{"127.0.0.1:7400"},
		DialTimeout:     2 * time.Second,
		RequestTimeout:  5 * time.Second,
		RetryBackoff:    50 * time.Millisecond,
		MaxRetryBackoff: time.Second,
	}
}

// withDefaults returns c with zero durations replaced by the defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = d.RetryBackoff
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = d.MaxRetryBackoff
	}
	return c
}

// Validate reports whether c is usable. Zero durations are fine (they
// mean the defaults); negative ones are not.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("client: no endpoints")
	}
	for _, e := range c.Endpoints {
		if _, err := normalizeEndpoint(e); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DialTimeout", c.DialTimeout},
		{"RequestTimeout", c.RequestTimeout},
		{"RetryBackoff", c.RetryBackoff},
		{"MaxRetryBackoff", c.MaxRetryBackoff},
	} {
		if d.v < 0 {
			return fmt.Errorf("client: %s is negative (%s)", d.name, d.v)
		}
	}
	if c.ClusterID != strings.TrimSpace(c.ClusterID) {
		return fmt.Errorf("client: ClusterID %q has leading or trailing space", c.ClusterID)
	}
	return nil
}

// normalizeEndpoint returns e as host:port.
func normalizeEndpoint(e string) (string, error) {
	addr, _ := splitScheme(e)
	return checkHostPort(e, addr)
}

// splitScheme returns e without its http:// or https:// prefix, and
// whether it was https.
func splitScheme(e string) (string, bool) {
	addr := strings.TrimSpace(e)
	if rest, ok := strings.CutPrefix(addr, "https://"); ok {
		return strings.TrimSuffix(rest, "/"), true
	}
	return strings.TrimSuffix(strings.TrimPrefix(addr, "http://"), "/"), false
}

func checkHostPort(e, addr string) (string, error) {
	if addr == "" {
		return "", fmt.Errorf("client: empty endpoint")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("client: endpoint %q is not host:port", e)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", fmt.Errorf("client: endpoint %q: port %q is not a number from 1 to 65535", e, port)
	}
	return addr, nil
}
