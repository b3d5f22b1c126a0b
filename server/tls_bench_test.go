package server_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/internal/tlsconfig"
	"github.com/tenure-io/tenure/server"
)

// benchSetups are the servers the TLS benchmarks compare, each a
// single-node cluster on disk (fsync on) served on loopback: plain
// HTTP/2, TLS, and TLS with an auth file and a bearer token.
var benchSetups = []string{"plain", "tls", "tls+auth"}

func benchClient(b *testing.B, setup string, inMemory bool) *client.Client {
	b.Helper()
	cfg := testcluster.Config{Size: 1, ElectionTimeout: 300 * time.Millisecond, Log: slog.DiscardHandler}
	if !inMemory {
		cfg.DataDir = b.TempDir()
	}
	ccfg := client.DefaultConfig()
	if setup != "plain" {
		ca := mustCA(b, "cluster")
		cert := mustIssue(b, ca, tlsconfig.Template{CommonName: "n1", Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
		cfg.APITLS = func(string) *tls.Config {
			return &tls.Config{Certificates: []tls.Certificate{cert.TLSCert()}}
		}
		pool := x509.NewCertPool()
		pool.AddCert(ca.Cert)
		ccfg.TLS = &tls.Config{RootCAs: pool}
	}
	if setup == "tls+auth" {
		file := filepath.Join(b.TempDir(), "auth.json")
		ccfg.Token = server.NewToken()
		if err := server.AddToken(file, "bench", ccfg.Token, []string{"hold:"}); err != nil {
			b.Fatal(err)
		}
		cfg.Server = func(id string, sc *server.Config) {
			a, err := server.NewAuth(server.AuthConfig{File: file}, nil)
			if err != nil {
				b.Fatal(err)
			}
			sc.Auth = a
		}
	}
	c := testcluster.Start(b, cfg)
	ccfg.Endpoints = []string{c.Leader().Addr}
	cl, err := client.New(ccfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	return cl
}

// BenchmarkLockCycle is one acquire and one release of a free lease, on
// one connection (TLS's handshake is paid once, as by any client).
func BenchmarkLockCycle(b *testing.B) { lockCycle(b, false) }

// BenchmarkLockCycleInMemory is BenchmarkLockCycle with the raft state in
// memory: without fsync, what TLS costs stands out.
func BenchmarkLockCycleInMemory(b *testing.B) { lockCycle(b, true) }

func lockCycle(b *testing.B, inMemory bool) {
	for _, setup := range benchSetups {
		b.Run(setup, func(b *testing.B) {
			cl := benchClient(b, setup, inMemory)
			ctx := b.Context()
			i := 0
			for b.Loop() {
				name := fmt.Sprintf("jobs/%d", i%64)
				i++
				l, err := cl.Acquire(ctx, name, "h", 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := cl.Release(ctx, name, l.Token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenew is one renewal of a held lease.
func BenchmarkRenew(b *testing.B) { renew(b, false) }

// BenchmarkRenewInMemory is BenchmarkRenew with the raft state in memory.
func BenchmarkRenewInMemory(b *testing.B) { renew(b, true) }

func renew(b *testing.B, inMemory bool) {
	for _, setup := range benchSetups {
		b.Run(setup, func(b *testing.B) {
			cl := benchClient(b, setup, inMemory)
			ctx := b.Context()
			l, err := cl.Acquire(ctx, "jobs/renew", "h", 30*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := cl.RenewOne(ctx, "jobs/renew", l.Token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
