// Package tlsconfig makes and loads the certificates of a tenure cluster:
// the TLS settings of the client API, of raft between members, and of
// clients, and `tenure certs init`'s quick-start certificates.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// LoadPool reads the PEM certificates in file into a new pool.
func LoadPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// LoadCerts reads the PEM certificates in file.
func LoadCerts(file string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for _, der := range pemBlocks(data, "CERTIFICATE") {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return out, nil
}

// LoadKeyPair reads a certificate and its key, naming the flags in errors.
func LoadKeyPair(certFlag, certFile, keyFlag, keyFile string) (tls.Certificate, error) {
	switch {
	case certFile == "" && keyFile != "":
		return tls.Certificate{}, fmt.Errorf("%s is set but %s is not: give both", keyFlag, certFlag)
	case certFile != "" && keyFile == "":
		return tls.Certificate{}, fmt.Errorf("%s is set but %s is not: give both", certFlag, keyFlag)
	}
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s %s / %s %s: %w", certFlag, certFile, keyFlag, keyFile, err)
	}
	return c, nil
}

// Client returns the TLS settings of a client: caFile verifies the
// servers (empty: the system's roots), certFile and keyFile are an
// optional client certificate.
func Client(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := LoadPool(caFile)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		c, err := LoadKeyPair("--cert", certFile, "--key", keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// Peer is the mutual TLS of members: each presents its certificate and
// accepts only certificates from the cluster's CA.
type Peer struct {
	Cert tls.Certificate
	CA   *x509.CertPool
	// CACerts are the certificates in CA, to tell a member's
	// certificate from a client's.
	CACerts []*x509.Certificate
}

// LoadPeer reads the member certificate, its key and the cluster's CA.
func LoadPeer(certFile, keyFile, caFile string) (*Peer, error) {
	if certFile == "" && keyFile == "" && caFile == "" {
		return nil, nil
	}
	if caFile == "" {
		return nil, errors.New("--peer-cert and --peer-key need --peer-ca (the CA that signed every member's certificate)")
	}
	c, err := LoadKeyPair("--peer-cert", certFile, "--peer-key", keyFile)
	if err != nil {
		return nil, err
	}
	certs, err := LoadCerts(caFile)
	if err != nil {
		return nil, fmt.Errorf("--peer-ca: %w", err)
	}
	pool := x509.NewCertPool()
	for _, ca := range certs {
		pool.AddCert(ca)
	}
	return &Peer{Cert: c, CA: pool, CACerts: certs}, nil
}

// Server returns the TLS settings of the raft listener: a member must
// present a certificate from the cluster's CA.
func (p *Peer) Server() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{p.Cert},
		ClientCAs:    p.CA,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
}

// Client returns the TLS settings for dialing another member at addr
// (host:port): it must present a certificate from the cluster's CA for
// its host, and this member presents its own.
func (p *Peer) Client(addr string) *tls.Config {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{p.Cert},
		RootCAs:      p.CA,
		ServerName:   host,
	}
}

// IsMember reports whether chains (a connection's verified chains) end
// at one of the cluster's CA certificates: the peer is a member.
func (p *Peer) IsMember(chains [][]*x509.Certificate) bool {
	if p == nil {
		return false
	}
	for _, chain := range chains {
		if len(chain) == 0 {
			continue
		}
		root := chain[len(chain)-1]
		for _, ca := range p.CACerts {
			if root.Equal(ca) {
				return true
			}
		}
	}
	return false
}

// NewPeer returns the peer settings of a member with certificate cert in
// a cluster whose CA certificates are cas.
func NewPeer(cert tls.Certificate, cas ...*x509.Certificate) *Peer {
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca)
	}
	return &Peer{Cert: cert, CA: pool, CACerts: cas}
}
