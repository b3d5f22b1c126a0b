package verify

import (
	"slices"
	"testing"
)

// TestPowerLoss runs the harness with the power-loss fault: a short run
// must pass and cut one node, a minority and every node; the same run
// with tenured skipping fsync (the negative control) must fail with a
// named violation. Evidence of a failure stays where evidenceDir says.
func TestPowerLoss(t *testing.T) {
	bin := buildHarness(t)

	t.Run("OK", func(t *testing.T) {
		code, rep, out := runHarness(t, bin, "--faults", FaultPowerLoss, "--duration", "20s", "--seed", "3")
		if code != 0 || !rep.OK {
			t.Fatalf("exit %d, violations %v; evidence in %s", code, rep.Violations, out)
		}
		for _, v := range PowerLossVariants {
			if rep.Injected[FaultPowerLoss+"/"+v] == 0 {
				t.Errorf("no power loss of %s: %v", v, rep.Injected)
			}
		}
		if rep.Ops[OpPut][Ok] == 0 {
			t.Errorf("no acknowledged write to lose: %v", rep.Ops)
		}
	})

	t.Run("SkipFsyncFails", func(t *testing.T) {
		code, rep, out := runHarness(t, bin, "--faults", FaultPowerLoss, "--unsafe-skip-fsync", "--duration", "20s", "--seed", "3")
		if code != 1 || rep.OK {
			t.Fatalf("the run with fsync skipped passed (exit %d); power loss goes unnoticed. Evidence in %s", code, out)
		}
		var named []string
		for _, v := range rep.Violations {
			if slices.Contains([]string{InvDurable, InvTokensGrow, InvPowerLossRestart, InvPowerLossRecover}, v.Invariant) {
				named = append(named, v.Invariant)
			}
		}
		if len(named) == 0 {
			t.Errorf("none of %s, %s, %s, %s among %v", InvDurable, InvTokensGrow, InvPowerLossRestart, InvPowerLossRecover, rep.Violations)
		}
		t.Logf("named violations: %v", named)
	})
}
