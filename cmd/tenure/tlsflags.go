package main

import (
	"flag"
	"path/filepath"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/tlsconfig"
)

// tlsFlags are the global TLS and token settings.
type tlsFlags struct {
	cacert, cert, key string
	token             string // env TENURE_AUTH_TOKEN only: a flag would show in ps
}

func (t *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.cacert, "cacert", t.cacert, "CA `file` that verifies the servers; makes the endpoints https (env TENURE_CACERT)")
	fs.StringVar(&t.cert, "cert", t.cert, "client certificate `file` (env TENURE_CERT)")
	fs.StringVar(&t.key, "key", t.key, "client key `file` (env TENURE_KEY)")
}

func (t *tlsFlags) fromEnv(env func(string) string) {
	t.cacert, t.cert, t.key = env("TENURE_CACERT"), env("TENURE_CERT"), env("TENURE_KEY")
	t.token = env("TENURE_AUTH_TOKEN")
}

// apply sets the TLS and token of cfg.
func (t *tlsFlags) apply(cfg *client.Config) error {
	cfg.Token = t.token
	if t.cacert == "" && t.cert == "" && t.key == "" {
		return nil
	}
	tc, err := tlsconfig.Client(t.cacert, t.cert, t.key)
	if err != nil {
		return err
	}
	cfg.TLS = tc
	return nil
}

// childEnv returns the TLS settings as environment variables for a
// command tenure run starts (absolute paths: it may change directory).
func (t *tlsFlags) childEnv() []string {
	var out []string
	for _, v := range []struct{ name, file string }{
		{"TENURE_CACERT", t.cacert}, {"TENURE_CERT", t.cert}, {"TENURE_KEY", t.key},
	} {
		if v.file == "" {
			continue
		}
		if abs, err := filepath.Abs(v.file); err == nil {
			v.file = abs
		}
		out = append(out, v.name+"="+v.file)
	}
	return out
}
