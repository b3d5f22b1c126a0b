package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testcluster"
)

// postJSON posts body to the API's JSON endpoint for method and returns
// the status and the decoded answer.
func postJSON(t *testing.T, addr, method, body string) (int, map[string]any) {
	t.Helper()
	res, err := http.Post("http://"+addr+"/tenure.v1."+method, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s answered %s %q: %v", method, res.Status, data, err)
	}
	return res.StatusCode, m
}

// TestJSONFieldNames: the API's JSON names fields as the .proto file and
// the CLI do, through a follower too, and reads either spelling.
func TestJSONFieldNames(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{MinTTL: time.Second})
	addr := c.Leader().Addr

	code, st := postJSON(t, addr, "ClusterService/Status", `{}`)
	if code != http.StatusOK || st["node_id"] == nil || st["leader_id"] == nil || st["nodeId"] != nil {
		t.Fatalf("status: %d %v; want node_id and leader_id", code, st)
	}
	code, acq := postJSON(t, addr, "LeaseService/Acquire", `{"name":"j","holder":"h","ttl":"5s","wait_timeout":"0s"}`)
	l, _ := acq["lease"].(map[string]any)
	if code != http.StatusOK || l["token"] == nil {
		t.Fatalf("acquire: %d %v", code, acq)
	}
	// 64-bit numbers are strings in protobuf's JSON; the CLI prints them as
	// numbers (docs/cli.md).
	if _, ok := l["token"].(string); !ok {
		t.Fatalf("token is %T, want protobuf JSON's string", l["token"])
	}
	code, ren := postJSON(t, addr, "LeaseService/Renew", `{"leases":[{"name":"j","token":`+l["token"].(string)+`,"ttl":"30s"}]}`)
	if code != http.StatusOK || !bytes.Contains(mustJSON(t, ren), []byte(`"ttl":"30s"`)) {
		t.Fatalf("renew with ttl: %d %v", code, ren)
	}
	code, _ = postJSON(t, addr, "KVService/Put", `{"key":"k","value":"djE=","lease":"j","token":`+l["token"].(string)+`}`)
	if code != http.StatusOK {
		t.Fatalf("put: %d", code)
	}
	code, list := postJSON(t, addr, "KVService/List", `{"prefix":"k","keys_only":true}`)
	if code != http.StatusOK || !bytes.Contains(mustJSON(t, list), []byte(`"entries":[{"key":"k"`)) {
		t.Fatalf("kv list: %d %v", code, list)
	}
	// Requests in lowerCamelCase still work.
	code, _ = postJSON(t, addr, "LeaseService/Acquire", `{"name":"j2","holder":"h","ttl":"5s","waitTimeout":"0s"}`)
	if code != http.StatusOK {
		t.Fatalf("acquire with waitTimeout: %d", code)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestJSONIsCompact: the API's JSON has no spaces between its tokens, as
// the docs show it, whatever the build (protobuf's JSON adds some at
// random, differently in each binary); spaces inside strings stay.
func TestJSONIsCompact(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{MinTTL: time.Second})
	res, err := http.Post("http://"+c.Leader().Addr+"/tenure.v1.LeaseService/Acquire", "application/json",
		strings.NewReader(`{"name":"a, b: c","holder":"h","ttl":"5s"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	want := `{"lease":{"name":"a, b: c","holder":"h","token":"1","ttl":"5s","remaining":"5s"}}`
	if res.StatusCode != http.StatusOK || string(body) != want {
		t.Fatalf("acquire answered %s %s, want %s", res.Status, body, want)
	}
}
