package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pemBlocks returns the DER bytes of the PEM blocks of type typ in data.
func pemBlocks(data []byte, typ string) [][]byte {
	var out [][]byte
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if b.Type == typ {
			out = append(out, b.Bytes)
		}
	}
}

// Issuer signs certificates.
type Issuer struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Issued is a certificate with its key, PEM-encoded.
type Issued struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
	Key             *ecdsa.PrivateKey
}

// Issuer returns an Issuer that signs with i (i must be a CA).
func (i *Issued) Issuer() *Issuer { return &Issuer{Cert: i.Cert, Key: i.Key} }

// Template describes a certificate to make.
type Template struct {
	CommonName string
	// Hosts are DNS names and IP addresses for the subject alternative
	// names.
	Hosts     []string
	NotBefore time.Time // default now - 1 minute
	NotAfter  time.Time // default NotBefore + 1 year (CA: 10 years)
	CA        bool
	// Server and Client set the extended key usages.
	Server, Client bool
}

// NewCA makes a self-signed CA.
func NewCA(cn string) (*Issued, error) {
	return issue(nil, Template{CommonName: cn, CA: true})
}

// Issue makes a certificate for t signed by iss.
func (iss *Issuer) Issue(t Template) (*Issued, error) { return issue(iss, t) }

func issue(iss *Issuer, t Template) (*Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	if t.NotBefore.IsZero() {
		t.NotBefore = time.Now().Add(-time.Minute)
	}
	if t.NotAfter.IsZero() {
		life := 365 * 24 * time.Hour
		if t.CA {
			life *= 10
		}
		t.NotAfter = t.NotBefore.Add(life)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: t.CommonName, Organization: []string{"tenure"}},
		NotBefore:    t.NotBefore,
		NotAfter:     t.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if t.CA {
		tmpl.IsCA = true
		tmpl.BasicConstraintsValid = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	}
	if t.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if t.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range t.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	parent, signer := tmpl, key
	if iss != nil {
		parent, signer = iss.Cert, iss.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		Cert:    cert,
		Key:     key,
	}, nil
}

// InitOptions is what `tenure certs init` makes.
type InitOptions struct {
	// Members are the member names: one certificate each, for both the
	// API and raft, with CN the name.
	Members []string
	// Hosts are added to every member certificate besides 127.0.0.1,
	// ::1 and localhost.
	Hosts []string
	// Clients are the client certificates to make (CN the name).
	Clients []string
}

// Init writes, into dir:
//
//	ca.crt, ca.key                  the cluster CA: signs member certificates
//	                                (give ca.crt as --peer-ca to tenured and as
//	                                --cacert to clients)
//	client-ca.crt, client-ca.key    the client CA: signs client certificates
//	                                (--client-ca)
//	MEMBER.crt, MEMBER.key          per member (--tls-cert/--tls-key and
//	                                --peer-cert/--peer-key)
//	CLIENT.crt, CLIENT.key          per client (--cert/--key)
//
// Keys are written 0600. It refuses to overwrite any existing file and
// then writes nothing. It returns the files written.
func Init(dir string, o InitOptions) ([]string, error) {
	if len(o.Members) == 0 {
		return nil, errors.New("no members: name at least one (--members n1,n2,n3)")
	}
	seen := map[string]bool{"ca": true, "client-ca": true}
	var names []string
	for _, n := range append(append([]string{}, o.Members...), o.Clients...) {
		if n == "" || filepath.Base(n) != n || n == "." || n == ".." {
			return nil, fmt.Errorf("%q is not a usable name for a certificate file", n)
		}
		if seen[n] {
			return nil, fmt.Errorf("the name %q is used twice (names must differ from each other and from ca and client-ca)", n)
		}
		seen[n] = true
		names = append(names, n)
	}
	var files []string
	for _, n := range append([]string{"ca", "client-ca"}, names...) {
		files = append(files, filepath.Join(dir, n+".crt"), filepath.Join(dir, n+".key"))
	}
	for _, f := range files {
		if _, err := os.Lstat(f); err == nil {
			return nil, fmt.Errorf("%s exists: certs init never overwrites a file; remove it or choose another directory", f)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	ca, err := NewCA("tenure cluster CA")
	if err != nil {
		return nil, err
	}
	clientCA, err := NewCA("tenure client CA")
	if err != nil {
		return nil, err
	}
	out := map[string]*Issued{"ca": ca, "client-ca": clientCA}
	hosts := append([]string{"127.0.0.1", "::1", "localhost"}, o.Hosts...)
	for _, m := range o.Members {
		out[m], err = ca.Issuer().Issue(Template{CommonName: m, Hosts: hosts, Server: true, Client: true})
		if err != nil {
			return nil, err
		}
	}
	for _, c := range o.Clients {
		out[c], err = clientCA.Issuer().Issue(Template{CommonName: c, Client: true})
		if err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var written []string
	for _, n := range append([]string{"ca", "client-ca"}, names...) {
		for _, f := range []struct {
			ext  string
			data []byte
			mode os.FileMode
		}{{".crt", out[n].CertPEM, 0o644}, {".key", out[n].KeyPEM, 0o600}} {
			path := filepath.Join(dir, n+f.ext)
			if err := writeNew(path, f.data, f.mode); err != nil {
				return written, err
			}
			written = append(written, path)
		}
	}
	return written, nil
}

// writeNew creates path with data; it fails if path exists.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TLSCert returns i as a tls.Certificate.
func (i *Issued) TLSCert() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{i.Cert.Raw}, PrivateKey: i.Key, Leaf: i.Cert}
}
