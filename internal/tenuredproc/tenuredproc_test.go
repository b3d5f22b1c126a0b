package tenuredproc

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestReservePortsAreExclusive(t *testing.T) {
	a, err := ReservePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := ReservePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	lo, hi := portRange()
	for _, addr := range append(a.Addrs(), b.Addrs()...) {
		if slices.Contains(a.Addrs(), addr) && slices.Contains(b.Addrs(), addr) {
			t.Fatalf("%s reserved twice", addr)
		}
		_, port, _ := net.SplitHostPort(addr)
		var p int
		for _, c := range port {
			p = p*10 + int(c-'0')
		}
		if p < lo || p >= hi {
			t.Errorf("%s is outside [%d, %d)", addr, lo, hi)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("reserved %s cannot be bound: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	if _, err := (Lookup{Dirs: []string{dir}}).Find(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty directory: got %v, want ErrNotFound", err)
	}
	p := filepath.Join(dir, Name())
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Lookup{Dirs: []string{dir}}.Find()
	if err != nil || got != p {
		t.Fatalf("Find = %q, %v; want %q", got, err, p)
	}
	if _, err := (Lookup{Path: filepath.Join(dir, "missing")}).Find(); err == nil {
		t.Fatal("a missing explicit path was accepted")
	}
}

func TestWaitReadyReportsExit(t *testing.T) {
	p, err := Start("/bin/sh", []string{"-c", "echo listen tcp: address already in use; exit 1"}, nil)
	if err != nil {
		t.Skip(err)
	}
	err = p.WaitReady(context.Background(), "127.0.0.1:1", 10*time.Second)
	if !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("got %v, want ErrAddrInUse", err)
	}
	if p.ExitCode() != 1 {
		t.Fatalf("exit code %d, want 1", p.ExitCode())
	}
}
