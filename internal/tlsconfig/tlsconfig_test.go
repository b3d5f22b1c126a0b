package tlsconfig

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Init's member certificates verify with the cluster CA for their hosts
// and are members; its client certificates come from the other CA and
// are not.
func TestInitCertificates(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(dir, InitOptions{Members: []string{"n1"}, Hosts: []string{"db.example", "10.0.0.5"}, Clients: []string{"app"}}); err != nil {
		t.Fatal(err)
	}
	peer, err := LoadPeer(filepath.Join(dir, "n1.crt"), filepath.Join(dir, "n1.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	member := peer.Cert.Leaf
	if member == nil {
		if member, err = x509.ParseCertificate(peer.Cert.Certificate[0]); err != nil {
			t.Fatal(err)
		}
	}
	for _, host := range []string{"127.0.0.1", "localhost", "db.example", "10.0.0.5"} {
		if _, err := member.Verify(x509.VerifyOptions{DNSName: host, Roots: peer.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("member certificate for %s: %v", host, err)
		}
	}
	chains, err := member.Verify(x509.VerifyOptions{Roots: peer.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil || !peer.IsMember(chains) {
		t.Fatalf("a member certificate is not a member: %v", err)
	}
	clients, err := LoadCerts(filepath.Join(dir, "app.crt"))
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := LoadPool(filepath.Join(dir, "client-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	chains, err = clients[0].Verify(x509.VerifyOptions{Roots: clientCA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	if peer.IsMember(chains) {
		t.Fatal("a client certificate counts as a member")
	}
	if _, err := clients[0].Verify(x509.VerifyOptions{Roots: peer.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Fatal("a client certificate verifies with the cluster CA")
	}
	if clients[0].Subject.CommonName != "app" || clients[0].NotAfter.Before(time.Now().Add(300*24*time.Hour)) {
		t.Fatalf("client certificate %v until %v", clients[0].Subject, clients[0].NotAfter)
	}
	for _, f := range []string{"ca.key", "client-ca.key", "n1.key", "app.key"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, err, fi.Mode())
		}
	}
}
