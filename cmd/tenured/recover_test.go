package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Recovery flags that do not go together are bad usage: exit 2, a
// message naming the flags, and no data directory made.
func TestRecoveryFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--restore", "b", "--force-new-cluster"}, "--restore and --force-new-cluster"},
		{[]string{"--token-floor", "5"}, "--token-floor goes only with"},
		{[]string{"--restore", "b", "--token-floor", "9007199254740993"}, "above the maximum"},
		{[]string{"--restore", "b", "--dev"}, "--dev"},
		{[]string{"--force-new-cluster", "--join", "127.0.0.1:9"}, "--join"},
		{[]string{"--restore", "b", "--reset-data-dir"}, "--reset-data-dir"},
		{[]string{"--restore", "b", "--raft-listen", "127.0.0.1:0"}, "fixed raft port"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			var out syncBuffer
			code := run(context.Background(), append([]string{"--data-dir", dir}, tc.args...), io.Discard, &out, noEnv)
			if code != 2 || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, out.String(), tc.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused start made %s", dir)
			}
		})
	}
}

// The recovery flags act once: none is read from the environment.
func TestRecoveryFlagsNotFromEnvironment(t *testing.T) {
	for _, f := range []string{"restore", "force-new-cluster", "token-floor"} {
		if !isNotFromEnv(f) {
			t.Errorf("--%s would be taken from %s", f, envName(f))
		}
	}
}
