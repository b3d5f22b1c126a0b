// Package version is the version every tenure binary prints with
// --version: the same string for tenure, tenured and tenure-verify.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set at build time with
// -ldflags "-X github.com/tenure-io/tenure/internal/version.Version=v1.2.3";
// otherwise the module version of the build is used ("(devel)" for a
// build from a work tree).
var Version = ""

// String returns the version, the VCS revision when the build recorded
// one, and the Go version and platform, e.g.
// "v1.2.3 (commit 0123456789ab) go1.26.8 linux/amd64".
func String() string {
	v := Version
	var rev, modified string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = ", modified"
				}
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	out := v
	if rev != "" {
		out += fmt.Sprintf(" (commit %.12s%s)", rev, modified)
	}
	return out + fmt.Sprintf(" %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Line is what a program prints for --version: its name and String().
func Line(program string) string { return program + " " + String() }
