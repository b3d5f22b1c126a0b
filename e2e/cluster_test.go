package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

type jsonStatus struct {
	NodeID  string `json:"node_id"`
	State   string `json:"state"`
	Leader  string `json:"leader_id"`
	Applied uint64 `json:"applied_index"`
	Members []struct {
		ID       string `json:"id"`
		Suffrage string `json:"suffrage"`
	} `json:"members"`
}

func status(t *testing.T, endpoint string) (jsonStatus, error) {
	t.Helper()
	r := cli(t, endpoint, "status", "-o", "json", "--request-timeout", "2s")
	if r.code != 0 {
		return jsonStatus{}, fmt.Errorf("status: %v", r)
	}
	var st jsonStatus
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &st); err != nil {
		return st, fmt.Errorf("status output %q: %v", r.stdout, err)
	}
	return st, nil
}

// waitVoters waits until the node at endpoint sees n voters and a leader.
func waitVoters(t *testing.T, endpoint string, n int) jsonStatus {
	t.Helper()
	var st jsonStatus
	eventually(t, fmt.Sprintf("%d voters seen from %s", n, endpoint), 30*time.Second, func() error {
		var err error
		if st, err = status(t, endpoint); err != nil {
			return err
		}
		voters := 0
		for _, m := range st.Members {
			if m.Suffrage == "voter" {
				voters++
			}
		}
		if voters != n || st.Leader == "" {
			return fmt.Errorf("%d voters, leader %q in %+v", voters, st.Leader, st)
		}
		return nil
	})
	return st
}

func TestThreeNodeFailover(t *testing.T) {
	three := startThree(t)
	n1, n2, n3 := three[0], three[1], three[2]
	servers := map[string]*server{"n1": n1, "n2": n2, "n3": n3}
	all := n1.api + "," + n2.api + "," + n3.api
	st := waitVoters(t, n1.api, 3)

	// Acknowledged grants and writes, made through a follower to exercise
	// forwarding.
	var follower *server
	for id, s := range servers {
		if id != st.Leader {
			follower = s
		}
	}
	type write struct {
		lease jsonLease
		value string
	}
	acked := map[string]write{}
	var max uint64
	for i := range 5 {
		name := fmt.Sprintf("shard/%d", i)
		l := acquireJSON(t, follower.api, name, "--holder", "w", "--ttl", "1h")
		value := fmt.Sprintf("v%d", i)
		mustCode(t, 0, cli(t, follower.api, "kv", "put", name+"/data", value, "--lease", name, "--token", fmt.Sprint(l.Token)), "put")
		acked[name] = write{l, value}
		max = max0(max, l.Token)
	}

	leader := servers[st.Leader]
	leader.kill()
	start := time.Now()
	// The CLI fails over between endpoints; the cluster serves again once
	// the survivors elect a leader.
	var l jsonLease
	eventually(t, "a grant after the leader was killed", 20*time.Second, func() error {
		r := cli(t, all, "acquire", "after-failover", "--holder", "x", "--ttl", "5s", "-o", "json", "--request-timeout", "2s")
		if r.code != 0 {
			return fmt.Errorf("%v", r)
		}
		return json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &l)
	})
	t.Logf("serving again %s after the leader was killed", time.Since(start).Round(time.Millisecond))
	if l.Token <= max {
		t.Fatalf("token after failover %d is not larger than %d", l.Token, max)
	}
	for name, w := range acked {
		r := cli(t, all, "get", name, "-o", "json")
		mustCode(t, 0, r, "get "+name)
		if !strings.Contains(r.stdout, fmt.Sprintf(`"token":%d`, w.lease.Token)) {
			t.Fatalf("lease %s after failover: %s, want token %d", name, r.stdout, w.lease.Token)
		}
		wantValue(t, all, name+"/data", w.value, w.lease.Token)
	}

	// The killed node restarts from its data directory and rejoins.
	leader.start()
	eventually(t, "the restarted node to catch up", 30*time.Second, func() error {
		s, err := status(t, leader.api)
		if err != nil {
			return err
		}
		if s.Leader == "" || s.State != "follower" && s.State != "leader" {
			return fmt.Errorf("state %q, leader %q", s.State, s.Leader)
		}
		ref, err := status(t, servers[s.Leader].api)
		if err != nil {
			return err
		}
		if s.Applied < ref.Applied {
			return fmt.Errorf("applied %d < leader's %d", s.Applied, ref.Applied)
		}
		return nil
	})
	waitVoters(t, leader.api, 3)
	l2 := acquireJSON(t, leader.api, "after-rejoin", "--holder", "y", "--ttl", "5s")
	if l2.Token <= l.Token {
		t.Fatalf("token after rejoin %d is not larger than %d", l2.Token, l.Token)
	}
}

func max0(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
