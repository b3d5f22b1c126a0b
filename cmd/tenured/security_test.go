package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tenured refuses settings that would leave the API or raft open on the
// network, and a bad auth file, with a message that says what to do, and
// starts nothing (no data directory is made).
func TestRefusesInsecureOrBadSecuritySettings(t *testing.T) {
	dir := t.TempDir()
	badAuth := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(badAuth, []byte(`{"principals":{"a":{"roles":["write:x"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	plainToken := filepath.Join(dir, "plain.json")
	if err := os.WriteFile(plainToken, []byte(`{"principals":{"a":{"roles":["read:"],"tokens":["tnr_secret"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"plain HTTP on a non-loopback address", []string{"--listen", "0.0.0.0:0", "--raft-listen", "127.0.0.1:0"}, 2, "give --tls-cert and --tls-key"},
		{"plain raft on a non-loopback address", []string{"--listen", "127.0.0.1:0", "--raft-listen", "0.0.0.0:0"}, 2, "give --peer-cert, --peer-key and --peer-ca"},
		{"half a key pair", []string{"--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--tls-cert", "x.crt"}, 2, "give both"},
		{"a client CA without TLS", []string{"--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--client-ca", "ca.crt"}, 2, "--client-ca needs --tls-cert"},
		{"part of the peer TLS", []string{"--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--peer-ca", "ca.crt"}, 2, "give all three"},
		{"a bad role in the auth file", []string{"--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--auth-file", badAuth}, 1, `role "write:x"`},
		{"a token instead of its hash", []string{"--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--auth-file", plainToken}, 1, "hashes of tokens, never tokens"},
		{"a missing auth file", []string{"--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--auth-file", filepath.Join(dir, "none.json")}, 1, "--auth-file"},
		{"a missing certificate", []string{"--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--tls-cert", filepath.Join(dir, "n.crt"), "--tls-key", filepath.Join(dir, "n.key")}, 1, "--tls-cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			var out syncBuffer
			code := run(t.Context(), append(tc.args, "--data-dir", data), io.Discard, &out, noEnv)
			if code != tc.code || !strings.Contains(out.String(), tc.msg) {
				t.Fatalf("exit %d, output %q; want exit %d and %q", code, out.String(), tc.code, tc.msg)
			}
			if strings.Contains(tc.msg, "tnr_secret") || strings.Contains(out.String(), "tnr_secret") {
				t.Fatalf("the error shows the token: %q", out.String())
			}
			if _, err := os.Stat(data); err == nil {
				t.Fatalf("the data directory was made")
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7400": true, "localhost:7400": true, "[::1]:7400": true, "127.0.0.2:1": true,
		"0.0.0.0:7400": false, ":7400": false, "10.0.0.1:7400": false, "example.com:7400": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// With no auth file on a non-loopback address, tenured says loudly that
// anyone may do anything; on loopback it says nothing.
func TestWarnsWithoutAuthOffLoopback(t *testing.T) {
	for _, tc := range []struct {
		listen string
		want   bool
	}{{"10.0.0.1:7400", true}, {"127.0.0.1:7400", false}} {
		var s security
		s.insecurePlaintext = true
		if err := s.check(tc.listen, "127.0.0.1:7401"); err != nil {
			t.Fatal(err)
		}
		var out syncBuffer
		s.warn(slog.New(slog.NewTextHandler(&out, nil)), tc.listen)
		if got := strings.Contains(out.String(), "NO AUTHENTICATION"); got != tc.want {
			t.Errorf("--listen %s: warned %v, want %v: %q", tc.listen, got, tc.want, out.String())
		}
	}
}
