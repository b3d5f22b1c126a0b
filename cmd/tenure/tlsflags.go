package main

import (
	"flag"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/tlsconfig"
)

// tlsFlags are the global TLS and token settings.
type tlsFlags struct {
	cacert, cert, key string
	token             string // env TENURE_TOKEN only: a flag would show in ps
}

func (t *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.cacert, "cacert", t.cacert, "CA `file` that verifies the servers; makes the endpoints https (env TENURE_CACERT)")
	fs.StringVar(&t.cert, "cert", t.cert, "client certificate `file` (env TENURE_CERT)")
	fs.StringVar(&t.key, "key", t.key, "client key `file` (env TENURE_KEY)")
}

func (t *tlsFlags) fromEnv(env func(string) string) {
	t.cacert, t.cert, t.key = env("TENURE_CACERT"), env("TENURE_CERT"), env("TENURE_KEY")
	t.token = env("TENURE_TOKEN")
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
