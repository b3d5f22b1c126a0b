package main

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every flag that tenured -h shows is in the README's flag table, so the
// docs cannot drift from the binary.
func TestEveryFlagIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "| `--") {
			table = append(table, l)
		}
	}
	rows := strings.Join(table, "\n")
	var help strings.Builder
	fs := newFlagSet(&options{}, &help)
	fs.Usage()
	// And the table names no flag that tenured does not have.
	for _, row := range table {
		first, _, _ := strings.Cut(strings.TrimPrefix(row, "| "), " |")
		for _, m := range regexp.MustCompile("`--([a-z][a-z-]*)").FindAllStringSubmatch(first, -1) {
			if fs.Lookup(m[1]) == nil {
				t.Errorf("the README's flag table has --%s, which tenured does not have", m[1])
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !regexp.MustCompile(`(?m)^\s*--?` + regexp.QuoteMeta(f.Name) + `\b`).MatchString(help.String()) {
			return // hidden: fault injection
		}
		if !regexp.MustCompile("`--" + regexp.QuoteMeta(f.Name) + "[` ]").MatchString(rows) {
			t.Errorf("tenured --%s is in -h but not in the README's flag table", f.Name)
		}
	})
}
