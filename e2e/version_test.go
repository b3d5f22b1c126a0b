package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/tenuredproc"
)

// Every binary prints the same version with --version, after its name.
func TestSameVersionEverywhere(t *testing.T) {
	verifyBin := filepath.Join(t.TempDir(), "tenure-verify")
	if err := tenuredproc.Build(verifyBin, "github.com/tenure-io/tenure/cmd/tenure-verify"); err != nil {
		t.Fatal(err)
	}
	var first string
	for _, b := range []struct{ name, path string }{
		{"tenure", bin.tenure}, {"tenured", bin.tenured}, {"tenure-verify", verifyBin},
	} {
		out, err := exec.Command(b.path, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", b.name, err)
		}
		line := strings.TrimSpace(string(out))
		v, ok := strings.CutPrefix(line, b.name+" ")
		if !ok || !strings.Contains(v, "go1.") {
			t.Fatalf("%s --version printed %q", b.name, line)
		}
		if first == "" {
			first = v
		} else if v != first {
			t.Errorf("%s --version says %q, tenure says %q", b.name, v, first)
		}
	}
}
