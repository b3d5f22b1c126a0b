package main

import (
	"io"
	"slices"
	"testing"

	"github.com/tenure-io/tenure/internal/verify"
)

// --faults all asks for every fault kind, power-loss included, each once.
func TestFaultsAll(t *testing.T) {
	for _, tc := range []struct {
		faults string
		want   []string
	}{
		{"all", verify.KnownFaults},
		{"power-loss,all", append([]string{verify.FaultPowerLoss}, verify.AllFaults...)},
		{"kill, member", []string{verify.FaultKill, verify.FaultMember}},
		{"", []string{}},
	} {
		cfg, _, err := parseFlags([]string{"--faults", tc.faults}, io.Discard)
		if err != nil {
			t.Fatalf("--faults %q: %v", tc.faults, err)
		}
		if !slices.Equal(cfg.Faults, tc.want) {
			t.Errorf("--faults %q gives %v, want %v", tc.faults, cfg.Faults, tc.want)
		}
	}
	if !slices.Contains(verify.KnownFaults, verify.FaultPowerLoss) || !slices.Contains(verify.KnownFaults, verify.FaultMember) || !slices.Contains(verify.KnownFaults, verify.FaultDamaged) {
		t.Fatalf("KnownFaults lacks power-loss, member or damaged-dir: %v", verify.KnownFaults)
	}
	if _, _, err := parseFlags([]string{"--faults", "al"}, io.Discard); err == nil {
		t.Error("--faults al was accepted")
	}
}
