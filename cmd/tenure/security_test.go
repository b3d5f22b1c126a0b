package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestCertsInitAndAuthToken(t *testing.T) {
	dir := t.TempDir()
	res := runCLI(t.Context(), nil, "certs", "init", filepath.Join(dir, "c"), "--members", "n1,n2", "--hosts", "db.example,10.0.0.5")
	if res.code != exitOK {
		t.Fatalf("certs init: %+v", res)
	}
	for _, f := range []string{"ca.crt", "ca.key", "client-ca.crt", "client-ca.key", "n1.crt", "n1.key", "n2.crt", "n2.key", "client.crt", "client.key"} {
		fi, err := os.Stat(filepath.Join(dir, "c", f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".key") && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "c", "ca.key"))
	res = runCLI(t.Context(), nil, "certs", "init", filepath.Join(dir, "c"), "--members", "n3")
	if res.code != exitFailure || !strings.Contains(res.stderr, "never overwrites") {
		t.Fatalf("certs init over a CA: %+v", res)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "c", "ca.key")); string(after) != string(before) {
		t.Fatal("ca.key changed")
	}
	if _, err := os.Stat(filepath.Join(dir, "c", "n3.crt")); err == nil {
		t.Fatal("n3.crt was written though the run was refused")
	}
	for _, args := range [][]string{
		{"certs", "init", filepath.Join(dir, "d")},
		{"certs", "init", filepath.Join(dir, "d"), "--members", "n1,n1"},
		{"auth", "token", "app", "--file", filepath.Join(dir, "a.json"), "--role", "write:x"},
		{"auth", "token", "app", "--role", "read:"},
	} {
		res := runCLI(t.Context(), nil, args...)
		if res.code == exitOK {
			t.Errorf("%q succeeded", args)
		}
	}
	auth := filepath.Join(dir, "auth.json")
	res = runCLI(t.Context(), nil, "auth", "token", "app", "--file", auth, "--role", "hold:jobs/", "--role", "read:")
	tok := strings.TrimSpace(res.stdout)
	if res.code != exitOK || !strings.HasPrefix(tok, "tnr_") {
		t.Fatalf("auth token: %+v", res)
	}
	data, _ := os.ReadFile(auth)
	if strings.Contains(string(data), tok) || !strings.Contains(string(data), "sha256:") || !strings.Contains(string(data), "hold:jobs/") {
		t.Fatalf("auth file %s", data)
	}
	if fi, _ := os.Stat(auth); fi.Mode().Perm() != 0o600 {
		t.Errorf("auth file mode %v", fi.Mode().Perm())
	}
	// A second token for the same principal keeps its roles.
	if res := runCLI(t.Context(), nil, "auth", "token", "app", "--file", auth); res.code != exitOK {
		t.Fatalf("second token: %+v", res)
	}
	data, _ = os.ReadFile(auth)
	if strings.Count(string(data), "sha256:") != 2 || !strings.Contains(string(data), "hold:jobs/") {
		t.Fatalf("auth file after a second token: %s", data)
	}
}

// auth list shows each principal's roles and token IDs, never a token or
// a whole hash; auth revoke removes one token by its ID and nothing else;
// bad IDs change nothing.
func TestAuthListAndRevoke(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "auth.json")
	newToken := func(name string, roles ...string) (tok, id string) {
		args := []string{"auth", "token", name, "--file", auth}
		for _, r := range roles {
			args = append(args, "--role", r)
		}
		res := runCLI(t.Context(), nil, args...)
		tok = strings.TrimSpace(res.stdout)
		m := regexp.MustCompile(`added token ([0-9a-f]{12}) of`).FindStringSubmatch(res.stderr)
		if res.code != exitOK || m == nil {
			t.Fatalf("auth token %s: %+v", name, res)
		}
		return tok, m[1]
	}
	appTok1, app1 := newToken("app", "hold:jobs/", "read:")
	_, app2 := newToken("app")
	_, ops := newToken("ops", "admin")

	res := runCLI(t.Context(), nil, "auth", "list", "--file", auth)
	if res.code != exitOK || strings.Contains(res.stdout, appTok1) || strings.Contains(res.stdout, "sha256:") {
		t.Fatalf("auth list: %+v", res)
	}
	for _, want := range []string{"PRINCIPAL  ROLES", "app        hold:jobs/ read:  " + app1 + " " + app2, "ops        admin", ops} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("auth list lacks %q:\n%s", want, res.stdout)
		}
	}

	before, _ := os.ReadFile(auth)
	for _, bad := range []struct{ id, msg string }{
		{"abc", "too short"},
		{"000000000000", "no token has ID"},
	} {
		res := runCLI(t.Context(), nil, "auth", "revoke", bad.id, "--file", auth)
		if res.code == exitOK || !strings.Contains(res.stderr, bad.msg) {
			t.Errorf("revoke %q: %+v, want a refusal saying %q", bad.id, res, bad.msg)
		}
	}
	if after, _ := os.ReadFile(auth); string(after) != string(before) {
		t.Fatal("a refused revoke changed the file")
	}

	res = runCLI(t.Context(), nil, "auth", "revoke", app1, "--file", auth)
	if res.code != exitOK || !strings.Contains(res.stdout, `revoked token `+app1+` of "app"`) || !strings.Contains(res.stdout, "SIGHUP") {
		t.Fatalf("auth revoke: %+v", res)
	}
	res = runCLI(t.Context(), nil, "auth", "list", "-o", "json", "--file", auth)
	want := `{"principal":"app","roles":["hold:jobs/","read:"],"token_ids":["` + app2 + `"]}` + "\n" +
		`{"principal":"ops","roles":["admin"],"token_ids":["` + ops + `"]}` + "\n"
	if res.code != exitOK || res.stdout != want {
		t.Fatalf("auth list -o json after the revoke:\n%s\nwant:\n%s", res.stdout, want)
	}
}
