package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/fakeserver"
)

// TestClusterIDMismatch runs commands pinned (by --cluster-id or
// TENURE_CLUSTER_ID) to cluster A against a member of cluster B: each
// exits 1 naming the endpoint and both IDs, and prints no result.
func TestClusterIDMismatch(t *testing.T) {
	c := startCluster(t, func(s *fakeserver.Server) { s.ClusterID = "cluster-b" })
	runs := []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"status --cluster-id", nil, []string{"status", "--cluster-id", "cluster-a"}},
		{"flag before the command", nil, []string{"--cluster-id", "cluster-a", "get", "jobs/x"}},
		{"acquire with env", map[string]string{"TENURE_CLUSTER_ID": "cluster-a"}, []string{"acquire", "jobs/x", "--holder", "a"}},
		{"kv get with env", map[string]string{"TENURE_CLUSTER_ID": "cluster-a"}, []string{"kv", "get", "k"}},
		{"flag overrides env", map[string]string{"TENURE_CLUSTER_ID": "cluster-b"}, []string{"release", "jobs/x", "--token", "3", "--cluster-id", "cluster-a"}},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			res := runCLI(t.Context(), r.env, append(r.args, "--endpoints", c.addr)...)
			if res.code != exitFailure {
				t.Errorf("exit code %d, want %d (stderr %q)", res.code, exitFailure, res.stderr)
			}
			if res.stdout != "" {
				t.Errorf("printed a result from the other cluster: %q", res.stdout)
			}
			for _, want := range []string{c.addr, "cluster cluster-b", "not for cluster cluster-a"} {
				if !strings.Contains(res.stderr, want) {
					t.Errorf("stderr %q does not say %q", res.stderr, want)
				}
			}
		})
	}

	res := runCLI(t.Context(), map[string]string{"TENURE_CLUSTER_ID": "cluster-a"}, "get", "jobs/x", "-o", "json", "--endpoints", c.addr)
	var j errorJSON
	if err := json.Unmarshal([]byte(res.stderr), &j); err != nil {
		t.Fatalf("get -o json: stderr %q: %v", res.stderr, err)
	}
	if res.code != exitFailure || j.Reason != "OTHER_CLUSTER" || j.Endpoint != c.addr || j.ClusterID != "cluster-a" ||
		j.OtherClusterID != "cluster-b" || j.ExitCode != exitFailure || j.Code != "unavailable" {
		t.Errorf("get -o json: code %d, error %+v", res.code, j)
	}

	// The right cluster is served as usual.
	res = runCLI(t.Context(), map[string]string{"TENURE_CLUSTER_ID": "cluster-b"}, "get", "jobs/x", "--endpoints", c.addr)
	if res.code != exitOK || !strings.Contains(res.stdout, "jobs/x") {
		t.Errorf("get pinned to the endpoint's own cluster: code %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

func TestClusterIDFlagIsChecked(t *testing.T) {
	res := runCLI(t.Context(), nil, "status", "--cluster-id", " a", "--endpoints", "127.0.0.1:7400")
	if res.code != exitUsage || !strings.Contains(res.stderr, "--cluster-id") {
		t.Errorf("a cluster ID with a space: code %d, stderr %q; want %d naming --cluster-id", res.code, res.stderr, exitUsage)
	}
}

// tenure run passes the cluster ID it pinned on to its command, so that
// tenure commands the command runs talk to the same cluster.
func TestRunPassesTheClusterID(t *testing.T) {
	c := startCluster(t, func(s *fakeserver.Server) { s.ClusterID = "cluster-r" })
	res := runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": c.addr}, "run", "jobs/x", "--holder", "h1", "--ttl", "3s", "--",
		"sh", "-c", `echo "$TENURE_CLUSTER_ID"`)
	if res.code != 0 || res.stdout != "cluster-r\n" {
		t.Errorf("got code %d, stdout %q, stderr %q; want 0 and the cluster ID cluster-r", res.code, res.stdout, res.stderr)
	}
}
