package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/tlsconfig"
	"github.com/tenure-io/tenure/server"
)

// security holds the TLS and authentication flags.
type security struct {
	tlsCert, tlsKey, clientCA    string
	peerCert, peerKey, peerCA    string
	authFile                     string
	insecurePlaintext            bool
	apiTLS                       *tls.Config     // nil: plain HTTP
	peer                         *tlsconfig.Peer // nil: plain raft
	auth                         *server.Auth
	forwardTLS                   *tls.Config // nil: cleartext HTTP/2 to the other members
	clientCACerts                []*x509.Certificate
	authEnabled, apiIsLoopback   bool
	raftIsLoopback, sameCAForAll bool
}

func (s *security) register(fs *flag.FlagSet) {
	fs.StringVar(&s.tlsCert, "tls-cert", "", "serve the client API over TLS with this certificate (PEM); with --tls-key")
	fs.StringVar(&s.tlsKey, "tls-key", "", "the key of --tls-cert (PEM)")
	fs.StringVar(&s.clientCA, "client-ca", "", "verify client certificates from this CA (PEM): their common name is the principal (mutual TLS)")
	fs.StringVar(&s.peerCert, "peer-cert", "", "this member's certificate (PEM) for raft and forwarding over mutual TLS; with --peer-key and --peer-ca")
	fs.StringVar(&s.peerKey, "peer-key", "", "the key of --peer-cert (PEM)")
	fs.StringVar(&s.peerCA, "peer-ca", "", "the cluster's CA (PEM): only members with a certificate from it speak raft or forward requests")
	fs.StringVar(&s.authFile, "auth-file", "", "principals, roles and token hashes (JSON; see docs/security.md); reloaded on SIGHUP")
	fs.BoolVar(&s.insecurePlaintext, "insecure-plaintext", false, "allow plain HTTP and plain raft on a non-loopback address (anyone on the network can read and forge requests)")
}

// isLoopback reports whether addr (host:port) listens on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(strings.TrimPrefix(addr, "http://"))
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// check validates the flags against the listen addresses. It reads no file.
func (s *security) check(listen, raftListen string) error {
	s.apiIsLoopback, s.raftIsLoopback = isLoopback(listen), isLoopback(raftListen)
	if (s.tlsCert == "") != (s.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together: give both")
	}
	if s.clientCA != "" && s.tlsCert == "" {
		return errors.New("--client-ca needs --tls-cert and --tls-key: client certificates are verified only over TLS")
	}
	if n := countSet(s.peerCert, s.peerKey, s.peerCA); n != 0 && n != 3 {
		return errors.New("--peer-cert, --peer-key and --peer-ca go together: give all three (tenure certs init makes them)")
	}
	if !s.apiIsLoopback && s.tlsCert == "" && !s.insecurePlaintext {
		return fmt.Errorf("--listen %s is not a loopback address and the API would be plain HTTP: give --tls-cert and --tls-key (tenure certs init makes a set), or --insecure-plaintext to serve plain HTTP there anyway", listen)
	}
	if !s.raftIsLoopback && s.peerCert == "" && !s.insecurePlaintext {
		return fmt.Errorf("--raft-listen %s is not a loopback address and raft would be plain TCP: give --peer-cert, --peer-key and --peer-ca (tenure certs init makes a set), or --insecure-plaintext to run raft in the clear there anyway", raftListen)
	}
	return nil
}

func countSet(v ...string) int {
	n := 0
	for _, s := range v {
		if s != "" {
			n++
		}
	}
	return n
}

// load reads the certificates and the auth file.
func (s *security) load(log *slog.Logger) error {
	var err error
	if s.peer, err = tlsconfig.LoadPeer(s.peerCert, s.peerKey, s.peerCA); err != nil {
		return err
	}
	if s.tlsCert != "" {
		cert, err := tlsconfig.LoadKeyPair("--tls-cert", s.tlsCert, "--tls-key", s.tlsKey)
		if err != nil {
			return err
		}
		s.apiTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		pool := x509.NewCertPool()
		if s.clientCA != "" {
			if s.clientCACerts, err = tlsconfig.LoadCerts(s.clientCA); err != nil {
				return fmt.Errorf("--client-ca: %w", err)
			}
			for _, c := range s.clientCACerts {
				pool.AddCert(c)
			}
		}
		if s.peer != nil {
			// Members present their certificates when they forward and
			// join.
			for _, c := range s.peer.CACerts {
				pool.AddCert(c)
			}
			for _, c := range s.clientCACerts {
				for _, p := range s.peer.CACerts {
					if c.Equal(p) {
						s.sameCAForAll = true
					}
				}
			}
		}
		if s.clientCA != "" || s.peer != nil {
			s.apiTLS.ClientCAs = pool
			s.apiTLS.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	switch {
	case s.peer != nil && s.apiTLS != nil:
		// Other members' API certificates verify with the cluster's CA,
		// and this member forwards with its own.
		s.forwardTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{s.peer.Cert}, RootCAs: s.peer.CA}
	case s.apiTLS != nil:
		// No cluster CA: other members' API certificates must verify with
		// the system's roots, and the leader cannot tell a forwarding
		// member from a client (forwarded requests carry the caller's
		// token instead).
		s.forwardTLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	s.auth, err = server.NewAuth(server.AuthConfig{File: s.authFile, ClientCA: s.clientCA != "", Peer: s.peer}, log)
	if err != nil {
		return fmt.Errorf("--auth-file: %w", err)
	}
	s.authEnabled = s.authFile != "" || s.clientCA != ""
	return nil
}

// warn logs what the settings leave open.
func (s *security) warn(log *slog.Logger, listen string) {
	if s.sameCAForAll {
		log.Warn("--client-ca and --peer-ca share a CA: every client certificate from it counts as a MEMBER (may do everything and act for any principal); use a separate client CA",
			"client_ca", s.clientCA, "peer_ca", s.peerCA)
	}
	if s.insecurePlaintext && (s.apiTLS == nil && !s.apiIsLoopback || s.peer == nil && !s.raftIsLoopback) {
		log.Warn("INSECURE: serving plain HTTP or raft on a non-loopback address (--insecure-plaintext); anyone on the network can read and forge requests")
	}
	if s.apiTLS != nil && s.peer == nil {
		log.Warn("--tls-cert without --peer-cert/--peer-key/--peer-ca: other members' API certificates must verify with the system's roots, and client certificates are not forwarded to the leader; give the --peer-* flags in a cluster")
	}
	if !s.authEnabled && !s.apiIsLoopback {
		log.Warn("NO AUTHENTICATION on a non-loopback address: anyone who reaches the API can acquire or release any lease, move leadership or remove members; give --auth-file (tenure auth token makes one) or --client-ca",
			"listen", listen)
	}
}

// reloadOnHUP reloads the auth file on every SIGHUP until stop is closed.
func reloadOnHUP(log *slog.Logger, srv *server.Server, file string, stop <-chan struct{}) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-stop:
				return
			case <-hup:
				if file == "" {
					log.Info("SIGHUP: no --auth-file to reload")
					continue
				}
				srv.ReloadAuth()
			}
		}
	}()
}

// memberClientConfig returns the TLS a member uses to call other members'
// APIs (joins, status), or nil for plain HTTP.
func (s *security) memberClientConfig(cfg *client.Config) {
	if s.apiTLS == nil {
		return
	}
	cfg.TLS = s.forwardTLS
}
