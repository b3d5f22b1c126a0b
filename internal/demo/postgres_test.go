package demo

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-io/tenure/internal/storetest"
)

// TestPostgresScenarios plays both Postgres scenarios against the real
// server, as tenure demo --scenario postgres,db-lock does, and checks
// their outcome and that the demo's schema is gone afterwards.
func TestPostgresScenarios(t *testing.T) {
	var out bytes.Buffer
	cfg := testConfig(&out)
	cfg.Format = Text
	cfg.Postgres = storetest.PostgresURL()
	cfg.Scenarios = PostgresScenarios
	results, err := Run(ctxT(t, 60*time.Second), cfg)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(results) != 2 {
		t.Fatalf("%d scenarios ran, want 2: is Postgres running at %s? (.ci/run starts it; TENURE_TEST_POSTGRES overrides)", len(results), cfg.Postgres)
	}
	for _, r := range results {
		if !r.Passed {
			t.Fatalf("%s: %s", r.Scenario, r.Summary)
		}
	}
	text := out.String()
	for _, want := range []string{
		`REJECTED: stale token, rolled back`,
		`rows committed: A-1 (token 1), B-1 (token 2)`,
		`protected while A's connection lives`,
		`LOST UPDATE: B's write was overwritten`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the timeline does not show %q", want)
		}
	}
	m := regexp.MustCompile(`schema (tenure_demo_[a-z0-9]+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("the timeline does not name the demo's schema")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cfg.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", m[1]).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s left behind (%d, %v)", m[1], n, err)
	}
}

// TestPostgresSkipped: without a Postgres server, the Postgres scenarios
// are skipped with a note, the others still run, and the demo passes.
func TestPostgresSkipped(t *testing.T) {
	var out bytes.Buffer
	cfg := testConfig(&out)
	cfg.Postgres = "postgres://postgres@127.0.0.1:1/none?connect_timeout=2"
	cfg.Scenarios = []Scenario{Fenced, Postgres}
	results, err := Run(ctxT(t, 60*time.Second), cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if len(results) != 1 || results[0].Scenario != Fenced || !results[0].Passed {
		t.Fatalf("results %+v, want fenced only, passed", results)
	}
	var note, summary map[string]any
	for _, o := range jsonLines(t, out.String()) {
		switch o["type"] {
		case "note":
			note = o
		case "summary":
			summary = o
		}
	}
	if note == nil || note["scenario"] != "postgres" || !strings.Contains(note["text"].(string), "skipped: Postgres does not answer") {
		t.Fatalf("note %v", note)
	}
	if summary["passed"] != true || len(summary["skipped"].([]any)) != 1 {
		t.Fatalf("summary %v", summary)
	}
}

func TestValidatePostgresURL(t *testing.T) {
	cfg := testConfig(&bytes.Buffer{})
	cfg.Scenarios = []Scenario{Postgres}
	cfg.Postgres = "bogus://x y"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--postgres") {
		t.Fatalf("Validate = %v, want a --postgres error", err)
	}
	cfg.Scenarios = []Scenario{DBLock}
	cfg.Real, cfg.WorkerCommand = true, []string{"tenure"}
	cfg.Postgres = DefaultPostgres
	if err := cfg.Validate(); err == nil {
		t.Fatal("Validate accepted --real with db-lock only")
	}
}
