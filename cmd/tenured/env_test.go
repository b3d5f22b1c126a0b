package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/version"
)

// envOf returns a lookup over m.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// sample returns a valid value, other than the default, for flag f.
func sample(t *testing.T, f *flag.Flag) string {
	t.Helper()
	g, ok := f.Value.(flag.Getter)
	if !ok {
		t.Fatalf("--%s: its value is not a flag.Getter; add a sample for %T", f.Name, f.Value)
	}
	switch g.Get().(type) {
	case bool:
		return "true"
	case string:
		return "127.0.0.1:9"
	case time.Duration:
		return "1234ms"
	case float64:
		return "2.5"
	case uint64, int, int64, uint:
		return "77"
	}
	t.Fatalf("--%s: no sample value for %T; add one", f.Name, g.Get())
	return ""
}

// Every flag, including one added later, is settable from its TENURE_
// variable.
func TestEveryFlagFromTheEnvironment(t *testing.T) {
	fs := newFlagSet(&options{}, io.Discard)
	// A flag added after this test was written is covered the same way.
	fs.String("future-flag", "", "a flag added later")
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		if isNotFromEnv(f.Name) {
			return
		}
		n++
		v := sample(t, f)
		env := envName(f.Name)
		got := newFlagSet(&options{}, io.Discard)
		got.String("future-flag", "", "")
		if _, err := setFromEnv(got, envOf(map[string]string{env: v})); err != nil {
			t.Errorf("%s=%s: %v", env, v, err)
			return
		}
		want := newFlagSet(&options{}, io.Discard)
		want.String("future-flag", "", "")
		if err := want.Set(f.Name, v); err != nil {
			t.Fatal(err)
		}
		if g, w := got.Lookup(f.Name).Value.String(), want.Lookup(f.Name).Value.String(); g != w || g == f.DefValue {
			t.Errorf("%s=%s set --%s to %q, want %q", env, v, f.Name, g, w)
		}
	})
	if n < 20 {
		t.Errorf("only %d flags checked", n)
	}
	if envName("data-dir") != "TENURE_DATA_DIR" || envName("future-flag") != "TENURE_FUTURE_FLAG" {
		t.Errorf("envName: %s, %s", envName("data-dir"), envName("future-flag"))
	}
}

// The variables of the CLI and of tenure run's command must never
// configure a server: no flag of tenured may take one of their names.
func TestNoFlagTakesAClientVariable(t *testing.T) {
	clientVars := []string{"TENURE_ENDPOINTS", "TENURE_CLUSTER_ID", "TENURE_CACERT", "TENURE_CERT", "TENURE_KEY", "TENURE_AUTH_TOKEN",
		"TENURE_LEASE", "TENURE_TOKEN", "TENURE_HOLDER", "TENURE_VERIFY_WORKER"}
	newFlagSet(&options{}, io.Discard).VisitAll(func(f *flag.Flag) {
		if !isNotFromEnv(f.Name) && slices.Contains(clientVars, envName(f.Name)) {
			t.Errorf("--%s would be set by %s, a variable of the CLI or of tenure run", f.Name, envName(f.Name))
		}
	})
}

func TestCommandLineWinsOverEnvironment(t *testing.T) {
	env := envOf(map[string]string{"TENURE_DATA_DIR": "/from/env", "TENURE_LOG_LEVEL": "debug", "TENURE_DEV": "true"})
	o, err := parseFlags([]string{"--data-dir", "/from/flag"}, io.Discard, env)
	if err != nil {
		t.Fatal(err)
	}
	if o.dataDir != "/from/flag" {
		t.Errorf("--data-dir %q, want the command line's /from/flag", o.dataDir)
	}
	if o.logLevel != "debug" || !o.dev {
		t.Errorf("log level %q, dev %v: want the environment's debug and true", o.logLevel, o.dev)
	}
	// An empty variable counts as unset.
	o, err = parseFlags(nil, io.Discard, envOf(map[string]string{"TENURE_LISTEN": ""}))
	if err != nil || o.listen != "127.0.0.1:7400" {
		t.Errorf("empty TENURE_LISTEN: listen %q, %v", o.listen, err)
	}
}

func TestInvalidEnvironmentNamesTheVariable(t *testing.T) {
	for _, tc := range []struct{ env, value string }{
		{"TENURE_ELECTION_TIMEOUT", "soon"},
		{"TENURE_DEV", "yes please"},
		{"TENURE_SNAPSHOT_THRESHOLD", "-1"},
		{"TENURE_LISTEN", "no-port"},
		{"TENURE_CORS_ORIGINS", "a.example"},
	} {
		var out syncBuffer
		code := run(t.Context(), nil, io.Discard, &out, envOf(map[string]string{tc.env: tc.value}))
		if code != 2 {
			t.Errorf("%s=%q: exit %d, want 2; output %s", tc.env, tc.value, code, out.String())
		}
		if msg := out.String(); !strings.Contains(msg, tc.env) {
			t.Errorf("%s=%q: the error does not name the variable: %s", tc.env, tc.value, msg)
		}
	}
	// On the command line, the same value is blamed on the flag alone.
	var out syncBuffer
	if code := run(t.Context(), []string{"--listen", "no-port"}, io.Discard, &out, noEnv); code != 2 || strings.Contains(out.String(), "TENURE_") {
		t.Errorf("--listen no-port: exit %d, %s", code, out.String())
	}
}

func TestHelpMentionsEnvironment(t *testing.T) {
	var help syncBuffer
	if code := run(t.Context(), []string{"-h"}, io.Discard, &help, noEnv); code != 0 {
		t.Fatalf("-h exited %d", code)
	}
	if !strings.Contains(help.String(), "TENURE_DATA_DIR") {
		t.Errorf("-h does not explain the environment variables:\n%s", help.String())
	}
}

// A node configured only through the environment starts and leads.
func TestStartFromEnvironment(t *testing.T) {
	var out syncBuffer
	env := envOf(map[string]string{"TENURE_DEV": "true", "TENURE_ELECTION_TIMEOUT": "100ms",
		"TENURE_LISTEN": "127.0.0.1:0", "TENURE_RAFT_LISTEN": "127.0.0.1:0", "TENURE_NODE_ID": "from-env"})
	done := make(chan int, 1)
	c, stop := context.WithCancel(t.Context())
	go func() { done <- run(c, nil, io.Discard, &out, env) }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "msg=leading") {
		if time.Now().After(deadline) {
			stop()
			<-done
			t.Fatalf("no leader within 20s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "node_id=from-env") || !strings.Contains(out.String(), `data_dir="(in memory)"`) {
		t.Errorf("the environment's node ID and --dev were not used:\n%s", out.String())
	}
}

func TestVersionFlag(t *testing.T) {
	var stdout, stderr syncBuffer
	if code := run(t.Context(), []string{"--version"}, &stdout, &stderr, noEnv); code != 0 {
		t.Fatalf("--version exited %d: %s", code, stderr.String())
	}
	if want := fmt.Sprintf("tenured %s\n", version.String()); stdout.String() != want {
		t.Errorf("--version printed %q, want %q", stdout.String(), want)
	}
}
