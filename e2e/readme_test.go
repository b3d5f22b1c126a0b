package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's console blocks, run. A block of commands (lines that
// start with "$ ") and what they print is run in order against one new
// tenured, as a user on a fresh machine would run them, and what each
// command prints must be what the README shows, but for durations
// (4.974s) and times. A block that cannot run here says so on the line
// before it, with the reason:
//
//	<!-- console: not run: REASON -->
//
// The README's default address 127.0.0.1:7400 is the test's tenured, and
// ./SCRIPT.sh a script that exits 0. Between blocks, the test waits for
// the leases of the blocks before to expire, as they would have by the
// time a reader gets to the next one.

const notRunMark = "<!-- console: not run: "

// consoleBlock is one console block of a doc.
type consoleBlock struct {
	line   int    // of its opening fence
	notRun string // the reason it is not run, "" if it runs
	steps  []consoleStep
}

// consoleStep is one command of a block and what the doc says it prints.
type consoleStep struct {
	command string
	output  []string
}

// consoleBlocks returns the console blocks of the doc text.
func consoleBlocks(t *testing.T, doc string) []consoleBlock {
	t.Helper()
	var (
		blocks []consoleBlock
		cur    *consoleBlock
		prev   string
	)
	for i, l := range strings.Split(doc, "\n") {
		switch {
		case cur == nil && l == "```console":
			b := consoleBlock{line: i + 1}
			if strings.HasPrefix(prev, notRunMark) {
				b.notRun = strings.TrimSuffix(strings.TrimPrefix(prev, notRunMark), " -->")
				if b.notRun == "" {
					t.Errorf("README.md:%d: a console block marked not run says not why", i)
				}
			}
			blocks = append(blocks, b)
			cur = &blocks[len(blocks)-1]
		case cur == nil:
			if strings.HasPrefix(l, notRunMark) && !strings.HasSuffix(l, " -->") {
				t.Errorf("README.md:%d: a mark %q that does not end with -->", i+1, l)
			}
		case l == "```":
			cur = nil
		case strings.HasPrefix(l, "$ "):
			cur.steps = append(cur.steps, consoleStep{command: strings.TrimPrefix(l, "$ ")})
		case len(cur.steps) == 0:
			t.Errorf("README.md:%d: a console block whose first line is not a command: %q", i+1, l)
		default:
			s := &cur.steps[len(cur.steps)-1]
			if len(s.output) == 0 && strings.HasSuffix(s.command, "\\") {
				s.command = strings.TrimSuffix(s.command, "\\") + strings.TrimSpace(l)
				continue
			}
			s.output = append(s.output, l)
		}
		prev = l
	}
	return blocks
}

// normalize replaces what changes from run to run: durations and times.
var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)\b`), "<duration>"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "<time>"},
}

func normalize(lines []string) string {
	var out []string
	for _, l := range lines {
		l = strings.TrimRight(l, " ")
		for _, n := range normalizers {
			l = n.re.ReplaceAllString(l, n.with)
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// TestReadmeConsoleBlocks runs every console block of the README that can
// run, in order, against a new single-node tenured.
func TestReadmeConsoleBlocks(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := consoleBlocks(t, string(data))
	s := startSingle(t)
	dir := t.TempDir()
	for _, script := range []string{"nightly.sh", "report.sh"} {
		if err := os.WriteFile(filepath.Join(dir, script), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(),
		"PATH="+filepath.Dir(bin.tenure)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"TENURE_ENDPOINTS="+s.api)
	ran, notRun := 0, 0
	for _, b := range blocks {
		if b.notRun != "" {
			notRun++
			continue
		}
		if ran > 0 {
			// A reader gets to the next block later: the short leases
			// of the last one have expired.
			eventually(t, "the leases of README.md's blocks before line "+fmt.Sprint(b.line)+" to expire", 30*time.Second, func() error {
				if r := cli(t, s.api, "list"); r.code != 0 || r.stdout != "" {
					return fmt.Errorf("tenure list: %v", r)
				}
				return nil
			})
		}
		ran++
		last := 0 // the exit code of the last command, for echo $?
		for _, step := range b.steps {
			command := strings.ReplaceAll(step.command, "127.0.0.1:7400", s.api)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-c", fmt.Sprintf("(exit %d); %s", last, command))
			cmd.Dir, cmd.Env = dir, env
			out, err := cmd.CombinedOutput()
			cancel()
			var ee *exec.ExitError
			switch {
			case err == nil:
				last = 0
			case errors.As(err, &ee):
				last = ee.ExitCode()
			default:
				t.Fatalf("README.md:%d: $ %s: %v", b.line, step.command, err)
			}
			got := normalize(strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"))
			if len(out) == 0 {
				got = ""
			}
			if want := normalize(step.output); got != want {
				t.Errorf("README.md:%d: $ %s\nprinted (normalized):\n%s\nthe README shows (normalized):\n%s", b.line, step.command, got, want)
			}
		}
	}
	if ran == 0 || notRun > 3 {
		t.Errorf("ran %d console blocks of the README and left %d out: keep the blocks that cannot run few", ran, notRun)
	}
	t.Logf("ran %d console blocks of the README, %d marked not run", ran, notRun)
}
