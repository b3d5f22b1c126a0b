package tenuredproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Package is the import path of the tenured command.
const Package = "github.com/tenure-io/tenure/cmd/tenured"

// ErrNotFound is returned by Find when no tenured binary was found and
// building one was not asked for.
var ErrNotFound = errors.New("tenuredproc: no tenured binary found")

// Lookup says where Find looks for tenured, in this order.
type Lookup struct {
	// Path, when set, is the binary to use; it must exist.
	Path string
	// Dirs are looked in after the directory of the running executable.
	Dirs []string
	// UsePATH looks the binary up on PATH after Dirs.
	UsePATH bool
	// BuildDir, when set, is where tenured is built with `go build` if it
	// was found nowhere else.
	BuildDir string
}

// Name is the file name of the tenured binary on this system.
func Name() string {
	if runtime.GOOS == "windows" {
		return "tenured.exe"
	}
	return "tenured"
}

// Find returns the path of a tenured binary according to l.
func (l Lookup) Find() (string, error) {
	if l.Path != "" {
		if st, err := os.Stat(l.Path); err != nil || st.IsDir() {
			return "", fmt.Errorf("tenuredproc: tenured %s: not a file", l.Path)
		}
		return l.Path, nil
	}
	dirs := l.Dirs
	if exe, err := os.Executable(); err == nil {
		dirs = append([]string{filepath.Dir(exe)}, dirs...)
	}
	for _, d := range dirs {
		p := filepath.Join(d, Name())
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if l.UsePATH {
		if p, err := exec.LookPath(Name()); err == nil {
			return p, nil
		}
	}
	if l.BuildDir != "" {
		out := filepath.Join(l.BuildDir, Name())
		if err := Build(out, Package); err != nil {
			return "", err
		}
		return out, nil
	}
	return "", fmt.Errorf("%w (looked in %v%s)", ErrNotFound, dirs, map[bool]string{true: " and on PATH"}[l.UsePATH])
}

// Build runs `go build -o out pkg`, with the build's output in the error.
func Build(out, pkg string) error {
	b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tenuredproc: go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}
