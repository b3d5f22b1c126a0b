package verify

import (
	"fmt"
	"path/filepath"
	"sync/atomic"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/tlsconfig"
	"github.com/tenure-io/tenure/server"
)

// Security is a run with TLS and authentication on (--tls): certificates
// from tlsconfig.Init, an auth file with an admin token for the harness
// (status, watches, faults, the final read) and a token per worker, each
// its own principal with hold on the run's names.
type Security struct {
	Dir        string
	CACert     string
	AuthFile   string
	AdminToken string
	workers    map[int]string
}

// security is the Security of the running harness, if any; the
// harness's own clients use it.
var security atomic.Pointer[Security]

// NewSecurity makes the certificates of nodes members and the auth file
// in dir.
func NewSecurity(dir string, nodes, workers int) (*Security, error) {
	var members []string
	for i := range nodes {
		members = append(members, fmt.Sprintf("n%d", i+1))
	}
	if _, err := tlsconfig.Init(filepath.Join(dir, "certs"), tlsconfig.InitOptions{Members: members}); err != nil {
		return nil, err
	}
	s := &Security{Dir: filepath.Join(dir, "certs"), AuthFile: filepath.Join(dir, "auth.json"), workers: map[int]string{}}
	s.CACert = filepath.Join(s.Dir, "ca.crt")
	s.AdminToken = server.NewToken()
	if err := server.AddToken(s.AuthFile, "harness", s.AdminToken, []string{"admin"}); err != nil {
		return nil, err
	}
	for i := range workers {
		tok := server.NewToken()
		if err := server.AddToken(s.AuthFile, fmt.Sprintf("worker-%d", i), tok, []string{"hold:lock-", "hold:elect-", "read:"}); err != nil {
			return nil, err
		}
		s.workers[i] = tok
	}
	return s, nil
}

// NodeFlags are node id's TLS and auth flags.
func (s *Security) NodeFlags(id string) []string {
	c := func(f string) string { return filepath.Join(s.Dir, f) }
	return []string{
		"--tls-cert", c(id + ".crt"), "--tls-key", c(id + ".key"), "--client-ca", c("client-ca.crt"),
		"--peer-cert", c(id + ".crt"), "--peer-key", c(id + ".key"), "--peer-ca", c("ca.crt"),
		"--auth-file", s.AuthFile,
	}
}

// newClient is client.New with the harness's TLS and admin token when
// the run has them.
func newClient(cfg client.Config) (*client.Client, error) {
	if s := security.Load(); s != nil {
		tc, err := tlsconfig.Client(s.CACert, "", "")
		if err != nil {
			return nil, err
		}
		cfg.TLS, cfg.Token = tc, s.AdminToken
	}
	return client.New(cfg)
}
