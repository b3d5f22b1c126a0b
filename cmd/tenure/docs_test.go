package main

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The help of every command, as `tenure -h` and `tenure COMMAND -h`
// print it, against itself and against the docs (README.md and
// docs/cli.md): they cannot drift apart unseen.

var flagRE = regexp.MustCompile(`--[a-z][a-z-]*`)

// helpText runs `tenure ARGS -h` and returns what it printed.
func helpText(t *testing.T, args ...string) string {
	t.Helper()
	r := runCLI(context.Background(), map[string]string{}, append(args, "-h")...)
	if r.code != 0 || r.stdout == "" {
		t.Fatalf("tenure %s -h: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// section returns the lines of help after the line header, up to the
// next line that does not start with a space.
func section(help, header string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(help, "\n") {
		switch {
		case strings.TrimSpace(l) == header:
			in = true
		case in && !strings.HasPrefix(l, " "):
			return out
		case in:
			out = append(out, l)
		}
	}
	return out
}

// commandLines returns the command paths ("acquire", "member list") of
// the lines of a Commands section, each with the synopsis lines that
// name it (a command with two forms has two).
func commandLines(lines []string) map[string][]string {
	out := map[string][]string{}
	for _, l := range lines {
		if !strings.HasPrefix(l, "  ") || strings.HasPrefix(l, "   ") {
			continue // a description carried over
		}
		// The synopsis ends where two spaces separate it from what the
		// command does.
		syn := strings.TrimSpace(l)
		if i := strings.Index(syn, "   "); i > 0 {
			syn = syn[:i]
		}
		out[commandPath(syn)] = append(out[commandPath(syn)], syn)
	}
	return out
}

// commandPath is the leading words of a synopsis before its first
// argument: "member list", "kv put", "completion".
func commandPath(syn string) string {
	var words []string
	for _, w := range strings.Fields(syn) {
		if strings.ContainsAny(w, "[-|") || strings.ToLower(w) != w {
			break
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

// flagsIn returns the flags a text names, sorted, without repeats.
func flagsIn(texts ...string) []string {
	var out []string
	for _, s := range texts {
		out = append(out, flagRE.FindAllString(s, -1)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

var flagDefRE = regexp.MustCompile(`^  (?:-[a-z], )?(--[a-z][a-z-]*)`)

// flagDefs returns the flags a Flags section defines (not those its
// descriptions mention).
func flagDefs(lines []string) []string {
	var out []string
	for _, l := range lines {
		if m := flagDefRE.FindStringSubmatch(l); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// usageLine returns the synopsis of a command's own help: its Usage line
// without "Usage: tenure ".
func usageLine(help string) string {
	first, _, _ := strings.Cut(help, "\n")
	return strings.TrimPrefix(first, "Usage: tenure ")
}

// commands returns every command path of `tenure -h` and of the help of
// the command groups, with the lines of tenure -h that name it.
func commands(t *testing.T) (map[string][]string, string) {
	top := helpText(t)
	cmds := commandLines(section(top, "Commands:"))
	// The groups list their commands in their own help too.
	groups := map[string]bool{}
	for p := range cmds {
		if g, _, ok := strings.Cut(p, " "); ok {
			groups[g] = true
		}
	}
	for g := range groups {
		var lines []string
		for _, l := range strings.Split(helpText(t, g), "\n") {
			if strings.HasPrefix(l, "  "+g+" ") {
				lines = append(lines, l)
			}
		}
		for p := range commandLines(lines) {
			if _, ok := cmds[p]; !ok {
				cmds[p] = nil // in the group's help only
			}
		}
	}
	return cmds, top
}

// TestTopHelpMatchesCommands: `tenure -h` names every command of every
// group, and its synopsis of a command names the flags that the
// command's own usage line does.
func TestTopHelpMatchesCommands(t *testing.T) {
	cmds, _ := commands(t)
	for p, lines := range cmds {
		if lines == nil {
			t.Errorf("tenure -h lacks the command %q, which tenure %s -h lists", p, strings.Fields(p)[0])
			continue
		}
		own := helpText(t, strings.Fields(p)...)
		want, got := flagsIn(usageLine(own)), flagsIn(lines...)
		if !slices.Equal(want, got) {
			t.Errorf("tenure -h names the flags %v for %q; tenure %s -h has %v in its usage line %q", got, p, p, want, usageLine(own))
		}
	}
}

// TestCommandUsageNamesItsFlags: each command's usage line names every
// flag of its own (the global ones aside) that its help lists.
func TestCommandUsageNamesItsFlags(t *testing.T) {
	cmds, top := commands(t)
	global := flagsIn(section(top, "Global flags (before or after the command):")...)
	global = append(global, "--version")
	for p := range cmds {
		help := helpText(t, strings.Fields(p)...)
		usage := flagsIn(usageLine(help))
		for _, f := range flagDefs(section(help, "Flags:")) {
			if !slices.Contains(global, f) && !slices.Contains(usage, f) {
				t.Errorf("tenure %s -h lists the flag %s but its usage line %q does not name it", p, f, usageLine(help))
			}
		}
	}
}

// docSynopsis returns the synopsis of the CLI in a doc: its first code
// block that starts with "tenure ", split into one piece per command.
func docSynopsis(t *testing.T, doc string) []string {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(data), "```")[1:] {
		block = strings.TrimPrefix(block, "\n")
		if !strings.HasPrefix(block, "tenure ") {
			continue
		}
		var pieces []string
		for _, l := range strings.Split(block, "\n") {
			// Two columns: a second "tenure " after two spaces.
			for _, p := range regexp.MustCompile(`(^|\s{2,})tenure `).Split(l, -1) {
				if p = strings.TrimSpace(p); p != "" {
					pieces = append(pieces, p)
				}
			}
		}
		return pieces
	}
	t.Fatalf("%s has no code block of tenure commands", doc)
	return nil
}

// TestDocsNameEveryCommandAndFlag: the synopsis of the CLI in README.md
// and in docs/cli.md has every command, each with the flags of its usage
// line, and the docs name every flag of every command somewhere.
func TestDocsNameEveryCommandAndFlag(t *testing.T) {
	cmds, top := commands(t)
	var all strings.Builder
	for _, doc := range []string{"../../README.md", "../../docs/cli.md"} {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(data)
		syn := docSynopsis(t, doc)
		for p := range cmds {
			var pieces []string
			for _, s := range syn {
				if s == p || strings.HasPrefix(s, p+" ") {
					pieces = append(pieces, s)
				}
			}
			if len(pieces) == 0 {
				t.Errorf("%s: its synopsis of the CLI lacks tenure %s", doc, p)
				continue
			}
			have := flagsIn(pieces...)
			for _, f := range flagsIn(usageLine(helpText(t, strings.Fields(p)...))) {
				if !slices.Contains(have, f) {
					t.Errorf("%s: its synopsis of tenure %s (%q) lacks %s", doc, p, pieces, f)
				}
			}
		}
	}
	docs := all.String()
	var flags []string
	flags = append(flags, flagsIn(top)...)
	for p := range cmds {
		flags = append(flags, flagDefs(section(helpText(t, strings.Fields(p)...), "Flags:"))...)
	}
	slices.Sort(flags)
	for _, f := range slices.Compact(flags) {
		if !regexp.MustCompile(regexp.QuoteMeta(f) + `\b`).MatchString(docs) {
			t.Errorf("no doc names %s (README.md, docs/cli.md)", f)
		}
	}
}
